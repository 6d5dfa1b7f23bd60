// Validate prometheus-operator custom resources against the CRD schemas that the npm package
// @kubernetes-models/prometheus-operator ships (`make crd-tools` installs it).
//   node tests/validate_crds.mjs <dir with node_modules>  < docs.json
// stdin: a JSON array of manifests; stdout: a JSON array of {kind, name, error} (error null
// when the manifest is valid). Exits 2 on a kind it has no schema for.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const root = process.argv[2];
const docs = JSON.parse(readFileSync(0, "utf8"));
const results = [];
for (const doc of docs) {
  const [group, version] = doc.apiVersion.split("/");
  const file = join(root, "node_modules", "@kubernetes-models", "prometheus-operator",
                    group, version, `${doc.kind}.js`);
  let model;
  try {
    model = (await import(pathToFileURL(file).href))[doc.kind];
  } catch (err) {
    console.error(`no schema for ${doc.apiVersion} ${doc.kind}: ${err.message}`);
    process.exit(2);
  }
  let error = null;
  try {
    new model(doc).validate();
  } catch (err) {
    error = err.message;
  }
  results.push({ kind: doc.kind, name: doc.metadata?.name ?? null, error });
}
console.log(JSON.stringify(results));
