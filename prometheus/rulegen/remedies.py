"""The remedy texts live in the installed package (trial_instrumentation/remedies.py), so the
rules, the dashboards and `trainwatch diagnose` share one text; re-exported for rulegen users."""

from trial_instrumentation.remedies import *
