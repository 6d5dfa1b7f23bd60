"""trainwatch/contract/alerts.py: the alert names the rules render and everything else selects
on are the ones docs/design.md lists, each under one constant."""

from __future__ import annotations

from tests.test_design_contract import documented
from trainwatch.contract import alerts


def test_every_alert_constant_is_a_documented_alert_and_no_two_share_a_name() -> None:
    declared = {k: v for k, v in vars(alerts).items() if k.isupper() and isinstance(v, str)}
    assert len(declared) >= 20  # the module's constants, not a vacuous pass
    assert len(set(declared.values())) == len(declared), declared
    assert set(declared.values()) == set(documented("Alerts"))
