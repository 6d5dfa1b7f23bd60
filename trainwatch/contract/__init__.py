"""What the rules, the dashboards and `trainwatch diagnose` share, in one place (docs/design.md,
import boundaries): recording-rule names (``records``), alert names (``alerts``), the verdict's
checks and gates (``checks``), remedies (``remedies``), label sets and the PromQL selector
helpers (``promql``).

A leaf: its modules import only the standard library, each other and
``trial_instrumentation.names``, so the generators in ``prometheus/`` and ``grafana/`` read
these names without loading the operator CLI (``trainwatch.diagnose``, ``.report``, ``.stack``),
and the CLI reads the same ones.
"""
