"""The test stack itself: real binaries start, answer and stop; one that cannot start says why."""

import sys
from pathlib import Path

import pytest

from benchmarks.stack import (
    Service,
    free_port,
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
        [up] = prom.wait_for_series('up{job="pgw"}')  # scraped once, successfully or not
        assert (up["metric"]["instance"], up["value"][1]) == (pushgateway.instance, "1")


def test_a_service_that_exits_fails_at_once_with_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-u", "-c", "import sys; print('bad flag'); sys.exit(3)"]
    # "exited", not "did not become ready": the wait stops when the process is gone.
    with pytest.raises(RuntimeError, match=r"^quitter exited with 3; log:\nbad flag\n$"):
        Service("quitter", argv, free_port(), tmp_path, timeout=10)


def test_a_service_that_never_answers_times_out_with_its_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-u", "-c", "import signal; print('listening nowhere'); signal.pause()"]
    with pytest.raises(RuntimeError, match=r"^mute did not become ready; log:\nlistening nowhere\n$"):
        Service("mute", argv, free_port(), tmp_path, timeout=0.5)
