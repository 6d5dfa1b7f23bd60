"""diagnose's alerts about one rank (trainwatch.diagnose.figures.AlertIndex): the alerts whose
labels name the rank, one of its GPUs, or its node (a node's own alert, not another trial's
on it), each once, firing first; found by lookups, checked here against a plain scan of
every alert over generated alert lists."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwatch.diagnose.figures import AlertIndex, alerts_about

KEY = ("e", "t", "0")
UUIDS = {"GPU-a", "GPU-b"}


def scan(alerts: list[dict[str, Any]], key: tuple[str, str, str], uuids: set[str],
         instance: str | None) -> list[tuple[str, str]]:
    mine = []
    for alert in alerts:
        labels = alert["labels"]
        if ((labels.get("experiment"), labels.get("trial"), labels.get("rank")) == key
                or labels.get("uuid") in uuids
                or (instance and labels.get("instance") == instance and "trial" not in labels
                    and "uuid" not in labels)):
            mine.append((labels["alertname"], alert["state"]))
    return sorted(mine, key=lambda a: (a[1] != "firing", a[0]))


def alert(name: str, state: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": name, **labels}, "state": state, "value": "1"}


def test_a_rank_gets_its_own_its_gpus_and_its_nodes_alerts_once_and_no_others() -> None:
    alerts = [
        alert("Stale", "pending", experiment="e", trial="t", rank="0"),
        alert("Loader", "firing", experiment="e", trial="t", rank="0", uuid="GPU-a"),  # 2 ways
        alert("Loader", "firing", experiment="e", trial="t", rank="1"),  # another rank
        alert("Loader", "firing", experiment="e", trial="u", rank="0"),  # another trial
        alert("Hot", "firing", uuid="GPU-b", instance="n1:10910"),
        alert("Hot", "firing", uuid="GPU-c", instance="n2:10910"),  # another node's GPU
        alert("Ecc", "firing", uuid="GPU-d", instance="n1:10910"),  # another trial's GPU here
        alert("CPU", "firing", instance="n1:10910"),  # the node's own
        alert("Loader", "firing", experiment="x", trial="y", rank="0", instance="n1:10910"),
    ]
    found = [(a.name, a.state) for a in AlertIndex(alerts).about(KEY, UUIDS, "n1:10910")]
    assert found == [("CPU", "firing"), ("Hot", "firing"), ("Loader", "firing"),
                     ("Stale", "pending")]
    assert [(a.name, a.state) for a in alerts_about(alerts, KEY, UUIDS, None)] == [
        ("Hot", "firing"), ("Loader", "firing"), ("Stale", "pending")]  # no node: no node's


labels = st.fixed_dictionaries({"alertname": st.sampled_from(["A", "B", "C"])}, optional={
    "experiment": st.sampled_from(["e", "x"]), "trial": st.sampled_from(["t", "u"]),
    "rank": st.sampled_from(["0", "1"]), "uuid": st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
    "instance": st.sampled_from(["n1", "n2"])})
alerts_st = st.lists(st.builds(lambda lb, s: {"labels": lb, "state": s, "value": ""}, labels,
                               st.sampled_from(["firing", "pending"])), max_size=30)


@settings(max_examples=300, deadline=None)
@given(alerts_st, st.sampled_from([None, "n1", "n2"]),
       st.sets(st.sampled_from(["GPU-a", "GPU-b", "GPU-c"])))
def test_the_index_finds_what_a_scan_finds(alerts: list[dict[str, Any]], instance: str | None,
                                           uuids: set[str]) -> None:
    index = AlertIndex(alerts)
    for key in (KEY, ("x", "u", "1"), ("e", "t", "1")):
        got = [(a.name, a.state) for a in index.about(key, uuids, instance)]
        assert got == scan(alerts, key, uuids, instance)
