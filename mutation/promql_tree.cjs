// Prometheus's own PromQL grammar (Lezer, the one its web UI parses with) over each expression:
// reads a JSON list of strings on stdin, writes for each the list of its syntax nodes as
// [name, from, to, parent index] (offsets in UTF-16 code units) and whether it parsed cleanly.
// Run by mutation/promql.py with NODE_PATH pointing at the npm install in .tools/promql.
const { parser } = require("@prometheus-io/lezer-promql");

let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const out = JSON.parse(input).map((expr) => {
    const nodes = [];
    const parents = [];
    let clean = true;
    parser.parse(expr).iterate({
      enter(node) {
        if (node.type.isError) clean = false;
        nodes.push([node.name, node.from, node.to, parents.length ? parents[parents.length - 1] : -1]);
        parents.push(nodes.length - 1);
      },
      leave() { parents.pop(); },
    });
    return { nodes, clean };
  });
  process.stdout.write(JSON.stringify(out));
});
