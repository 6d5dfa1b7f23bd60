"""The test stack itself: real binaries start, answer and stop."""

from pathlib import Path

from tests.stack import (
    Service,
    http_get,
    scrape_config,
    start_prometheus,
)


def test_prometheus_scrapes_a_real_pushgateway(tmp_path: Path, pushgateway: Service) -> None:
    status, _ = http_get(pushgateway.url + "/metrics")
    assert status == 200
    cfg = {"global": {"scrape_interval": "1s"},
           "scrape_configs": [scrape_config("pgw", pushgateway.url, honor_labels=True)]}
    with start_prometheus(tmp_path, cfg) as prom:
        up = prom.wait_for_series('up{job="pgw"} == 1')
        assert up[0]["metric"]["job"] == "pgw"
