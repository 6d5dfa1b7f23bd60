"""`trainwatch report`: one self-contained HTML file that shows a trial without Grafana.

The verdict, the evidence and the fix come from `trainwatch diagnose`'s own code
(:func:`trainwatch.diagnose.decision.gather`); the plots are Prometheus range queries drawn with
matplotlib as inline SVG whose colours follow the viewer's light or dark mode.
"""
