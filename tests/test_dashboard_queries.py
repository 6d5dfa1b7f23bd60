"""Every dashboard target checked against what it must read (issue 36): for each panel and refId,
the series and recording rules its query reads, each aggregation with its `by` labels, each
label matcher, its legend, and, in a table, the column header its value is shown under and the
unit that column's override gives it. The expectations are tests/dashboard_queries.yaml, a
reviewed statement of what each panel and column means; the byte-for-byte test of
test_dashboards.py only says the JSON is what the builders write, not that they write the
right thing (a column fed by the wrong query, a `by` label lost, a matcher inverted regenerate
cleanly).

After an intended change to a dashboard's queries: `python -m tests.test_dashboard_queries`
rewrites the YAML; review its diff as the statement of what changed.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
DASHBOARDS = REPO / "grafana" / "dashboards"
EXPECTED = Path(__file__).with_name("dashboard_queries.yaml")

# A series or recording-rule name read by a query (a record name holds colons).
_READS = re.compile(r"(?<![\w:$\"{.])([a-zA-Z_][\w]*:[\w:]+|trainwatch_\w+|ALERTS\w*|up)(?=\s*[{\[)]|\s*$|\s)")
_AGGREGATION = re.compile(r"\b(sum|max|min|avg|count|topk|bottomk|quantile|stddev|count_values|"
                          r"group)\s*(?:(by|without)\s*\(([^)]*)\))?\s*\(")
_MATCHER = re.compile(r"""([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)\"""")
_JOIN = re.compile(r"\b(on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
# A comparison with a number (a threshold: `> 1.25`, `< 300`); a matcher's `=~`/`!=` compares a
# quoted string and is not one.
_COMPARISON = re.compile(r"(?<![=!<>~])(>=|<=|==|!=|>|<)\s*(bool\s+)?([-+]?\d[\w.+-]*)")
STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[([^\]\"]+)\]")
_OFFSET = re.compile(r"\boffset\s+(-?[\w$]+)")


def _labels(text: str) -> str:
    return ", ".join(sorted(x.strip() for x in text.split(",") if x.strip()))


def signature(expr: str) -> dict[str, list[str]]:
    """What a query reads and how it groups and filters, order-free."""
    return {
        "reads": sorted(set(_READS.findall(expr))),
        "aggregations": sorted(f"{op} {kind} ({_labels(labels)})" if kind else op
                               for op, kind, labels in _AGGREGATION.findall(expr)),
        "joins": sorted(f"{kind}({_labels(labels)})" for kind, labels in _JOIN.findall(expr)),
        "matchers": sorted({f"{label}{op}\"{value}\"" for label, op, value
                               in _MATCHER.findall(expr)}),
        "comparisons": sorted(f"{op} {bool_}{number}" for op, bool_, number
                              in _COMPARISON.findall(STRINGS.sub('""', expr))),
        "ranges": sorted(set(_RANGE.findall(STRINGS.sub('""', expr)))),
        "offsets": sorted(_OFFSET.findall(STRINGS.sub('""', expr))),
    }


def _panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _column(panel: dict[str, Any], ref_id: str) -> dict[str, Any]:
    """A table target's column: the header its value is renamed to and the unit its override
    sets (the override matched by that header)."""
    single = len(panel["targets"]) == 1
    organize = next(t for t in panel.get("transformations", []) if t["id"] == "organize")
    header = organize["options"]["renameByName"].get("Value" if single else f"Value #{ref_id}")
    units = [p["value"] for o in panel["fieldConfig"]["overrides"]
             if o["matcher"] == {"id": "byName", "options": header}
             for p in o["properties"] if p["id"] == "unit"]
    return {"header": header, "unit": units[0] if len(units) == 1 else units,
            "merged": any(t["id"] == "merge" for t in panel["transformations"]),
            "format": panel["targets"][0].get("format")}


def described() -> dict[str, Any]:
    """dashboard -> panel title -> refId -> what that target reads and shows."""
    out: dict[str, Any] = {}
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        titles: dict[str, Any] = {}
        for panel in _panels(board):
            if "targets" not in panel:
                continue
            targets = {}
            for target in panel["targets"]:
                entry: dict[str, Any] = {"legend": target.get("legendFormat", ""),
                                         **signature(target["expr"])}
                if panel["type"] == "table":
                    entry["column"] = _column(panel, target["refId"])
                    entry["format"] = target.get("format")
                targets[target["refId"]] = entry
            titles[panel["title"]] = targets
        variables = {v["name"]: signature(v["query"]["query"] if isinstance(v.get("query"), dict)
                                          else v.get("query", ""))
                     for v in board["templating"]["list"] if v["type"] == "query"}
        out[path.name] = {"panels": titles, "variables": variables}
    return out


def _expected() -> dict[str, Any]:
    return yaml.safe_load(EXPECTED.read_text())


@pytest.mark.parametrize("name", sorted(p.name for p in DASHBOARDS.glob("*.json")))
def test_every_target_reads_groups_and_filters_what_its_panel_says(name: str) -> None:
    expected, actual = _expected()[name], described()[name]
    assert sorted(actual["panels"]) == sorted(expected["panels"]), "panels added or lost"
    for title, targets in expected["panels"].items():
        assert sorted(actual["panels"][title]) == sorted(targets), (title, "refIds")
        for ref_id, want in targets.items():
            got = actual["panels"][title][ref_id]
            for key in want:
                assert got[key] == want[key], (title, ref_id, key)
    assert actual["variables"] == expected["variables"]


@pytest.mark.parametrize("name", sorted(p.name for p in DASHBOARDS.glob("*.json")))
def test_each_table_column_shows_its_own_querys_value_under_one_header(name: str) -> None:
    board = json.loads((DASHBOARDS / name).read_text())
    for panel in _panels(board):
        if panel.get("type") != "table":
            continue
        refs = [t["refId"] for t in panel["targets"]]
        assert refs == [chr(ord("A") + i) for i in range(len(refs))], panel["title"]
        # the columns named are the first queries' (a query after them is shown as Grafana
        # names it), each under a header of its own with exactly one unit override
        columns = [c for c in (_column(panel, r) for r in refs) if c["header"] is not None]
        headers = [c["header"] for c in columns]
        assert [_column(panel, r)["header"] for r in refs[:len(headers)]] == headers, panel["title"]
        assert len(set(headers)) == len(headers), (panel["title"], headers)
        assert all(isinstance(c["unit"], str) for c in columns), (panel["title"], columns)
        # several queries are merged into one row per label set; one is not
        assert any(t["id"] == "merge" for t in panel["transformations"]) == (len(refs) > 1), \
            panel["title"]
        assert all(t.get("format") == "table" and t.get("instant") for t in panel["targets"])
        hidden = next(t for t in panel["transformations"]
                      if t["id"] == "organize")["options"]["excludeByName"]
        assert {"Time", "__name__", "job"} <= set(hidden), panel["title"]
        assert not set(headers) & set(hidden), panel["title"]
        # each query's value is shown under its header or hidden, never both (a column with
        # its header and override and no cells) and never neither (a bare "Value #F" of 1s)
        renamed = next(t for t in panel["transformations"]
                       if t["id"] == "organize")["options"]["renameByName"]
        values = ["Value"] if len(refs) == 1 else [f"Value #{r}" for r in refs]
        assert [v for v in values if (v in renamed) == (v in hidden)] == [], panel["title"]


@pytest.mark.parametrize("name", sorted(p.name for p in DASHBOARDS.glob("*.json")))
def test_descriptions_name_only_series_of_the_contract(name: str) -> None:
    # A panel's description that names a series names one docs/design.md defines (a renamed
    # or misspelt metric in the prose sends a reader to a series that does not exist).
    design = (REPO / "docs" / "design.md").read_text()
    board = json.loads((DASHBOARDS / name).read_text())
    for panel in _panels(board):
        for series in re.findall(r"\btrainwatch_\w+", panel.get("description", "")):
            assert re.search(rf"\b{series}\b", design), (panel["title"], series)


def test_the_signature_reads_groups_and_filters() -> None:
    got = signature('topk(10, sum by (experiment, cause) (sum_over_time('
                    'trial:gpu_seconds_idle:1m{job="trainwatch_trial", experiment=~"$e"}[$__range])))'
                    ' * on(instance) group_left(name) trainwatch_gpu_info'
                    ' and avg_over_time(trainwatch_x{gpu!="1"}[5m]) < 0.37 or trainwatch_y >= bool 300'
                    ' unless trainwatch_y offset 10m')
    assert got == {"reads": ["trainwatch_gpu_info", "trainwatch_x", "trainwatch_y",
                             "trial:gpu_seconds_idle:1m"],
                   "aggregations": ["sum by (cause, experiment)", "topk"],
                   "joins": ["group_left(name)", "on(instance)"],
                   "matchers": ['experiment=~"$e"', 'gpu!="1"', 'job="trainwatch_trial"'],
                   "comparisons": ["< 0.37", ">= bool 300"],
                   "ranges": ["$__range", "5m"], "offsets": ["10m"]}


if __name__ == "__main__":
    EXPECTED.write_text(
        "# What each dashboard target reads, how it groups and filters, its legend and, in a\n"
        "# table, its column (tests/test_dashboard_queries.py). Rewritten by\n"
        "# `python -m tests.test_dashboard_queries` after an intended change: review the diff.\n"
        + yaml.safe_dump(described(), sort_keys=True, width=100, allow_unicode=True))
    sys.exit(0)
