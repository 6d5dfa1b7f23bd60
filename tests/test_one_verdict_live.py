"""One verdict on every surface, mid-run: the default suite's slice of issue 35's verdict matrix
(tests/test_verdict_matrix_live.py, `make test-matrix`, asks five instants of six kinds), on the
session's shared live stack (tests/conftest.py's two_trials: a loader that sleeps 50 ms a
batch with no DataLoader workers, and a healthy twin). The slow trial's finding, data loader
of latency (the trial process waits, not for a CPU), from the alert's `cause` annotation,
`trainwatch diagnose` JSON and text, `trainwatch trials`, `trainwatch compare` against the
twin and `trainwatch report`'s headline alike; the twin has no loader alert.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.live_stack import TWO_TRIALS_EXPERIMENT, LiveStack
from tests.verdict_surfaces import (
    Ref,
    alert_findings,
    compare_finding,
    diagnose_json,
    json_finding,
    report_finding,
    run_cli,
    text_finding,
    trials_finding,
)

SLOW, TWIN = Ref(TWO_TRIALS_EXPERIMENT, "slow"), Ref(TWO_TRIALS_EXPERIMENT, "healthy")
FINDING = "dataloader:latency_bound"


def test_every_surface_gives_the_slow_trial_one_finding(two_trials: LiveStack,
                                                        tmp_path: Path) -> None:
    alerts = two_trials.prometheus.alerts()
    said = alert_findings(alerts, SLOW, {two_trials.exporter_instance})
    report = diagnose_json(two_trials, SLOW)
    surfaces = {
        "alert": said["firing"],
        "diagnose json": json_finding(report),
        "diagnose text": text_finding(two_trials, SLOW),
        "report": report_finding(two_trials, SLOW, tmp_path / "slow.html"),
    }
    assert surfaces == dict.fromkeys(surfaces, FINDING), (surfaces, report["loader_cause"])
    # The surfaces that say only the kind, or the phase that explains the slowdown.
    assert trials_finding(two_trials, SLOW)[0] == "dataloader"
    assert compare_finding(two_trials, SLOW, TWIN) == "dataloader"
    # Both ways round: the slow trial against its twin a slowdown of about the 50 ms its loader
    # sleeps a step, the twin against it a speed-up of as much.
    for a, b, sign, word in ((SLOW, TWIN, 1, "slowdown"), (TWIN, SLOW, -1, "speed-up")):
        _, out = run_cli(two_trials, "compare", a.name, b.name, "--format", "json")
        c = json.loads(out)["comparison"]
        assert 0.03 < sign * c["delta_step_seconds"] < 0.2 and f"of the {word}" in c["summary"], c
        assert sign * c["changes"][0]["delta_seconds"] > 0.03, c["changes"]
    # The twin's figures never crossed the loader's threshold: no loader alert, pending or not.
    assert alert_findings(alerts, TWIN, set())["firing"] is None
    assert alert_findings(alerts, TWIN, set())["pending"] is None
