"""PromQL mutants of the kinds rule bugs take, one syntax node rewritten, the rest byte for byte.

The parser is Prometheus's own grammar: @prometheus-io/lezer-promql, the Lezer grammar its web
UI parses with (no PromQL parser is packaged for Python), installed by ``make rule-mutation``
into .tools/promql and run with node (mutation/promql_tree.cjs). Its nodes carry exact offsets,
so a mutant replaces one node's text and keeps every other byte of the expression.

    >>> [m.text for m in mutants('a > 0.3', rate_window="5m") if m.kind == "comparison"]
    ['a >= 0.3', 'a < 0.3']
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from trial_instrumentation.durations import parse_duration

REPO = Path(__file__).resolve().parent.parent
NODE_MODULES = REPO / ".tools" / "promql" / "node_modules"
TREE_SCRIPT = Path(__file__).with_name("promql_tree.cjs")

# Flipped or loosened, then reversed (the direction of the gate turned around).
COMPARISONS = {">": [">=", "<"], ">=": [">", "<="], "<": ["<=", ">"], "<=": ["<", ">="],
               "==": ["!="], "!=": ["=="]}
AGGREGATIONS = {"max": "min", "min": "max", "sum": "avg", "avg": "sum"}
SET_OPERATORS = ("And", "Or", "Unless")
# A label added to a grouping is taken from the rule's other groupings; these when none is left.
FALLBACK_LABELS = ("instance", "job", "rank", "uuid")


@dataclass(frozen=True)
class Node:
    name: str
    start: int
    end: int
    parent: int


@dataclass(frozen=True)
class Mutant:
    kind: str
    old: str   # the node's text
    new: str   # what replaces it
    start: int
    text: str  # the whole mutated expression

    @property
    def change(self) -> str:
        """``old`` -> ``new``, each on one line and cut in the middle past 60 characters."""
        return f"`{_short(self.old)}` -> `{_short(self.new)}`"


def _short(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 60 else f"{line[:28]} … {line[-28:]}"


class ParseError(RuntimeError):
    pass


def parse(exprs: Sequence[str]) -> list[tuple[list[Node], bool]]:
    """Each expression's syntax nodes (pre-order) and whether it parsed without error."""
    for expr in exprs:
        if not expr.isascii():  # Lezer's offsets are UTF-16 units, Python's code points
            raise ParseError(f"not ASCII: {expr!r}")
    if not (NODE_MODULES / "@prometheus-io" / "lezer-promql").is_dir():
        raise ParseError(f"{NODE_MODULES}: no @prometheus-io/lezer-promql (run make rule-mutation)")
    proc = subprocess.run(["node", str(TREE_SCRIPT)], input=json.dumps(list(exprs)),
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
    if proc.returncode:
        raise ParseError(f"node {TREE_SCRIPT.name} failed: {proc.stderr}")
    return [([Node(*n) for n in tree["nodes"]], tree["clean"]) for tree in json.loads(proc.stdout)]


def format_duration(seconds: float) -> str:
    """Prometheus's own spelling: 150 -> 2m30s, 3600 -> 1h."""
    left, out = int(seconds), ""
    if left != seconds or left <= 0:
        raise ValueError(f"{seconds} is not a whole positive number of seconds")
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if left >= size:
            out += f"{left // size}{unit}"
            left %= size
    return out


def number_steps(literal: str) -> list[str]:
    """The number one step below and above, the step being its last digit's place: 0.95 ->
    0.94, 0.96; 300 -> 200, 400; 0 -> -1, 1."""
    digits = literal.split(".")[1] if "." in literal else ""
    if digits:
        step = 10.0 ** -len(digits)
    else:
        step = 10.0 ** (len(literal) - len(literal.rstrip("0"))) if literal.strip("0") else 1.0
    value = float(literal)
    return [f"{value + d:.{len(digits)}f}" for d in (-step, step)]


def mutants(expr: str, rate_window: str, tree: list[Node] | None = None) -> list[Mutant]:
    """Every single-node mutant of ``expr`` (``tree`` from :func:`parse`, parsed when None)."""
    nodes = tree if tree is not None else parse([expr])[0][0]
    found: list[Mutant] = []
    for kind, start, end, new in _rewrites(expr, nodes, rate_window):
        text = expr[:start] + new + expr[end:]
        found.append(Mutant(kind, expr[start:end], new, start, text))
    return found


def _children(nodes: list[Node], index: int) -> list[int]:
    return [i for i, n in enumerate(nodes) if n.parent == index]


def _rewrites(expr: str, nodes: list[Node], rate_window: str
              ) -> Iterator[tuple[str, int, int, str]]:
    labels_used = [expr[n.start:n.end] for n in nodes
                   if n.name == "LabelName" and nodes[n.parent].name == "GroupingLabels"]
    window = parse_duration(rate_window)
    for index, node in enumerate(nodes):
        text = expr[node.start:node.end]
        span = (node.start, node.end)
        if text in COMPARISONS and nodes[node.parent].name == "BinaryExpr":
            for new in COMPARISONS[text]:
                yield ("comparison", *span, new)
        elif node.name == "NumberDurationLiteral" and re.fullmatch(r"\d+(\.\d+)?", text):
            for new in number_steps(text):
                yield ("number", *span, new)
        elif node.name == "NumberDurationLiteralInDurationContext":
            kind = "offset" if nodes[node.parent].name == "OffsetDurationExpr" else "range"
            seen = parse_duration(text)
            for seconds in dict.fromkeys((window, window / 2)):
                if seconds != seen:
                    yield (kind, *span, format_duration(seconds))
        elif node.name == "AggregateOp" and text in AGGREGATIONS:
            yield ("aggregation", *span, AGGREGATIONS[text])
        elif node.name == "GroupingLabels":
            yield from _grouping(expr, nodes, index, labels_used)
        elif node.name == "GroupLeft" and not _grouping_follows(nodes, index):
            taken = _clause_labels(expr, nodes, node.parent)
            yield ("label", *span, f"{text} ({_extra_label(taken, labels_used)})")
        elif node.name == "BinaryExpr":
            yield from _operands_removed(expr, nodes, index)


def _grouping_follows(nodes: list[Node], index: int) -> bool:
    siblings = _children(nodes, nodes[index].parent)
    after = siblings.index(index) + 1
    return after < len(siblings) and nodes[siblings[after]].name == "GroupingLabels"


def _clause_labels(expr: str, nodes: list[Node], clause: int) -> list[str]:
    """The labels of every grouping in one modifier clause: ``on (a) group_left (b)`` may not
    name a label twice."""
    return [expr[n.start:n.end] for n in nodes
            if n.name == "LabelName" and nodes[n.parent].parent == clause]


def _extra_label(present: list[str], used: list[str]) -> str:
    return next(label for label in [*used, *FALLBACK_LABELS] if label not in present)


def _grouping(expr: str, nodes: list[Node], index: int, used: list[str]
              ) -> Iterator[tuple[str, int, int, str]]:
    node = nodes[index]
    names = [expr[nodes[i].start:nodes[i].end] for i in _children(nodes, index)]
    for drop in range(len(names)):
        kept = names[:drop] + names[drop + 1:]
        yield ("label", node.start, node.end, f"({', '.join(kept)})")
    taken = _clause_labels(expr, nodes, node.parent) if nodes[node.parent].name == \
        "MatchingModifierClause" else names
    yield ("label", node.start, node.end, f"({', '.join([*names, _extra_label(taken, used)])})")


def _operands_removed(expr: str, nodes: list[Node], index: int
                      ) -> Iterator[tuple[str, int, int, str]]:
    parts = _children(nodes, index)
    if not any(nodes[i].name in SET_OPERATORS for i in parts):
        return
    left, right = nodes[parts[0]], nodes[parts[-1]]
    node = nodes[index]
    yield ("operand", node.start, node.end, expr[left.start:left.end])
    yield ("operand", node.start, node.end, expr[right.start:right.end])
