"""mutation/chart.py's mutators, in seconds (the run itself is `make chart-mutation`)."""

from __future__ import annotations

from mutation import chart

TEMPLATE = '''{{- if .Values.exporter.enabled }}
apiVersion: v1
kind: Service
spec:
  selector:
    matchLabels:
      app.kubernetes.io/component: exporter
  ports:
    - name: metrics
      port: {{ .Values.exporter.port }}
      targetPort: metrics
      appProtocol: "http"
{{- end }}
'''

BUILDER = """def build(q):
    return table("Top", [Query(f"sum {by('cause')} (x)"), Query("y{job=\\"a\\"}")],
                 columns=[Column("One", "s"), Column("Two", "none")])
"""

def test_chart_mutants_cover_each_kind_at_the_place_named() -> None:
    found = {(kind, change): text for kind, change, text in
             chart.chart_candidates("t/x.yaml", TEMPLATE, [9090, 10910])}
    kinds = {kind for kind, _ in found}
    assert {"if-negated", "value", "entry-removed", "selector-dropped"} <= kinds
    change = "`{{- if .Values.exporter.enabled }}` -> `{{- if not (.Values.exporter.enabled) }}`"
    negated = found[("if-negated", change)]
    assert negated.startswith("{{- if not (.Values.exporter.enabled) }}\n")
    dropped, = [t for (k, _), t in found.items() if k == "selector-dropped"]
    assert "app.kubernetes.io/component" not in dropped and "matchLabels:" in dropped
    removed, = [t for (k, _), t in found.items() if k == "entry-removed"]
    assert "- name: metrics" not in removed and "targetPort" not in removed
    assert "{{- end }}" in removed
    assert any('"http-x"' in t for (k, _), t in found.items() if k == "value")
    assert any("targetPort: metrics-x" in t for (k, _), t in found.items() if k == "value")


def test_a_port_moves_one_step_and_to_another_port_of_the_chart() -> None:
    changes = {c for _, c, _ in chart.chart_candidates("values.yaml", "  port: 9090\n",
                                                       [9090, 10910])}
    assert changes == {"`port: 9090`: 9090 -> 9091", "`port: 9090`: 9090 -> 10910"}


def test_dashboard_mutants_swap_columns_and_change_by_labels_and_matchers() -> None:
    found = list(chart.dashboard_candidates("grafana/x.py", BUILDER))
    kinds = {kind for kind, _, _ in found}
    assert {"by-clause", "matcher", "column-swap", "query-swap", "aggregation"} <= kinds
    swapped, = [t for k, _, t in found if k == "column-swap"]
    assert 'columns=[Column("Two", "none"), Column("One", "s")]' in swapped


def test_the_choice_is_the_same_every_time_and_capped_per_file() -> None:
    texts = {"helm/trainwatch/templates/x.yaml": TEMPLATE, "grafana/x.py": BUILDER}
    first = chart.build_mutants(texts, 2, 3, 5)
    again = chart.build_mutants(texts, 2, 3, 5)
    assert [(m.file, m.change) for m in first] == [(m.file, m.change) for m in again]
    assert sum(m.file.endswith(".yaml") for m in first) == 2
    assert sum(m.file.endswith(".py") for m in first) == 3
    # one of each kind before a second of any
    assert len({m.kind for m in first if m.file.endswith(".py")}) == 3
