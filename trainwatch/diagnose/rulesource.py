"""Where `diagnose`, `trials` and `report` take their thresholds and record names from.

A Prometheus that evaluates the trainwatch rules says both in ``/api/v1/rules``: the rate window
in the recording rules' names, the thresholds, remedies and runbooks in the alerts'
annotations (trainwatch.diagnose.deployed). The global view of a Prometheus sharded by trial
(helm/README.md, "Sharding": a central Prometheus, Thanos or Mimir receiving the shards'
``remote_write``) evaluates nothing: it holds the shards' recorded series, ALERTS and the
identity series, and loads no rules. There the window is read off the recorded series it
received, and the thresholds are the ones this trainwatch ships (prometheus/thresholds.yaml,
as rendered into prometheus/rules/), said as such in the output (:attr:`Deployment.source`).

The decision, :func:`choose`:

- the server loads trainwatch recording rules: they are the deployment (whatever it received);
- it loads none but holds recorded phase shares: the shipped rules, with the window of the
  series it holds, and no inline fallback (the raw series are on the shards);
- neither: the usual error, that the rules are not loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from trainwatch.contract.records import RecordNames
from trainwatch.diagnose.deployed import Deployment, DeploymentError
from trainwatch.promapi import PrometheusAPI

# The rules rendered from prometheus/thresholds.yaml and committed (drift-tested against it).
SHIPPED_RULES = Path(__file__).resolve().parent.parent.parent / "prometheus" / "rules"
# The recorded phase share's name without its window: every window's starts with it.
SHARE_PREFIX = RecordNames("").phase_share


def shipped_source(rules_dir: Path = SHIPPED_RULES) -> str:
    return f"{rules_dir.parent / 'thresholds.yaml'} as this trainwatch ships it"


def global_note(url: str, rules_dir: Path = SHIPPED_RULES) -> str:
    """Where the thresholds came from, as `diagnose`, `trials` and `report` say it of a global
    view (text: a line "thresholds: <this>"; JSON: ``thresholds_from``)."""
    return (f"{shipped_source(rules_dir)} (Prometheus at {url} loads no trainwatch "
            "rules: a global view, read from the recorded series it receives; figures only "
            "the raw series give are not available from it)")


def shipped_rules(rules_dir: Path = SHIPPED_RULES) -> list[dict[str, Any]]:
    """prometheus/rules/*.yml in ``/api/v1/rules``'s shape (type, name, query, labels,
    annotations); DeploymentError when this install has no such directory."""
    files = sorted(rules_dir.glob("*.yml"))
    if not files:
        raise DeploymentError(
            f"{rules_dir} not found: this install ships no trainwatch rules to judge a global "
            "view by; give the shards (--prometheus once per shard) or run from a checkout")
    rules = []
    for path in files:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
            loaded = [rule for group in doc.get("groups") or [] for rule in group["rules"]]
        except (yaml.YAMLError, OSError, KeyError, TypeError, AttributeError) as err:
            raise DeploymentError(f"{path}: cannot read its rule groups ({err})") from None
        for rule in loaded:
            alerting = "alert" in rule
            rules.append({"type": "alerting" if alerting else "recording",
                          "name": rule.get("alert") if alerting else rule.get("record"),
                          "query": rule.get("expr"), "labels": rule.get("labels") or {},
                          "annotations": rule.get("annotations") or {}})
    return rules


def choose(rules: Iterable[Mapping[str, Any]], received: Iterable[str],
           shipped: Callable[[], list[dict[str, Any]]], where: str,
           note: str = "the shipped thresholds") -> Deployment:
    """The deployment to judge by (see the module's docstring): ``rules`` as the server
    loads them, ``received`` the names of the recorded phase-share series it holds, ``shipped``
    the rules this install ships (read only when needed), ``note`` what the output says of
    them.

    >>> from trainwatch.diagnose.deployed import REQUIRED_ALERTS
    >>> share = RecordNames("3s").phase_share
    >>> ship = lambda: [{"type": "recording", "name": RecordNames("5m").phase_share}] + [
    ...     {"type": "alerting", "name": a, "annotations": {"threshold": "0.3", "remedy": "x"}}
    ...     for a in REQUIRED_ALERTS]
    >>> d = choose([], [share], ship, "P", "shipped")
    >>> d.names.window, d.source, d.queries
    ('3s', 'shipped', {})
    """
    rules = list(rules)
    if RecordNames.discover(r.get("name", "") for r in rules
                            if r.get("type") == "recording") is not None:
        return Deployment.from_rules(rules, where=where)
    names = RecordNames.discover(received)
    if names is None:
        return Deployment.from_rules(rules, where=where)  # raises: no rules, nothing recorded
    deployment = Deployment.from_rules(shipped(), where=note)
    return dataclasses.replace(deployment, names=names, queries={}, source=note)


def received_shares(api: PrometheusAPI) -> list[str]:
    """The names of the recorded phase-share series ``api``'s server holds (any window)."""
    return api.label_values("__name__", **{"match[]": f'{{__name__=~"{SHARE_PREFIX}.+"}}'})


def deployment_of(api: PrometheusAPI, rules: list[dict[str, Any]] | None = None) -> Deployment:
    """The deployment ``api``'s server was deployed with, or (a global view loading no rules)
    the shipped one; ``rules``: its loaded rules, where the caller has read them already."""
    rules = api.rules() if rules is None else rules
    loaded = RecordNames.discover(r.get("name", "") for r in rules
                                  if r.get("type") == "recording") is not None
    return choose(rules, [] if loaded else received_shares(api), shipped_rules,
                  where=f"Prometheus at {api.url}", note=global_note(api.url))


def alerts(api: PrometheusAPI, deployment: Deployment) -> list[dict[str, Any]]:
    """The pending and firing alerts in ``/api/v1/alerts``'s shape: the server's own, or (a
    global view, which evaluates none) the ALERTS series the shards wrote, as of ``api``'s
    instant."""
    if deployment.source is None:
        return api.alerts()
    found = []
    for labels, value in api.query("ALERTS"):
        rest = {k: v for k, v in labels.items() if k not in ("__name__", "alertstate")}
        found.append({"labels": rest, "state": labels.get("alertstate", "?"),
                      "value": f"{value:g}"})
    return found
