"""A script that never imports torch: it must run exactly as without trainwatch."""

import sys

print("sum", sum(range(10)), "modules", sorted(m for m in sys.modules if m.startswith("trial_instrumentation")))
