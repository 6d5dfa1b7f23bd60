"""The exporter's image, built from the Dockerfile by the real builder (``make image``: podman)
and run the way the chart runs it: non-root, read-only root filesystem, no capabilities.

Built once per session on the Debian base ``make image-base`` makes (no registry needed), under
a test tag that is kept: removing it would remove the build cache with it, and every session would
reinstall from PyPI (25 s instead of 2 s). Skipped, saying why, only where podman is not
installed (``make test`` installs it with apt; a machine without apt cannot).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest

from benchmarks.stack import REPO, free_port, http_get, promtool, wait_until
from exporter import __version__

PODMAN = shutil.which("podman")
if PODMAN is None:
    pytest.skip("podman is not installed: `make image-tools` installs it with apt "
                "(make test tries; it could not here)", allow_module_level=True)

LOCAL_BASE_IMAGE = "localhost/trainwatch-base:bookworm"  # the Makefile's LOCAL_BASE_IMAGE
ENV = {**os.environ, "CONTAINERS_CONF": str(REPO / "container" / "containers.conf")}
# How the chart runs it (podSecurityContext and securityContext in helm/trainwatch/values.yaml).
LOCKED_DOWN = ("--read-only", "--user", "65534", "--cap-drop", "ALL",
               "--security-opt", "no-new-privileges")
# A container that serves shares the host's network, as docker-compose.yml runs it, listening
# on a free loopback port; the others get no network. Neither needs rootless podman's
# slirp4netns, which needs a /dev/net/tun some CI containers do not open to a non-root user.
OFFLINE = ("--network", "none")


def podman(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PODMAN), *args], capture_output=True, text=True, env=ENV,
                          timeout=timeout, check=False)


def must(*args: str, timeout: float = 60) -> str:
    result = podman(*args, timeout=timeout)
    assert result.returncode == 0, f"podman {' '.join(args)}:\n{result.stdout}{result.stderr}"
    return result.stdout.strip()


@pytest.fixture(scope="session")
def image() -> str:
    """The image ``make image`` builds from the Dockerfile, on the local Debian base."""
    if podman("image", "exists", LOCAL_BASE_IMAGE).returncode != 0:
        pytest.fail(f"{LOCAL_BASE_IMAGE} is missing: run `make image-base` (make test does it)")
    name = "localhost/trainwatch-exporter-test"
    build = subprocess.run(["make", "-s", "--no-print-directory", "image",
                            f"BASE_IMAGE={LOCAL_BASE_IMAGE}", f"IMAGE={name}"],
                           cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert build.returncode == 0, f"make image failed:\n{build.stdout}{build.stderr}"
    return f"{name}:{__version__}"


class Container:
    """A detached exporter container on the host's network, serving on a free 127.0.0.1 port."""

    def __init__(self, image: str) -> None:
        self.port = free_port()
        self.id = must("run", "-d", *LOCKED_DOWN, "--network", "host", image,
                       f"--web.listen-address=127.0.0.1:{self.port}")
        self.url = f"http://127.0.0.1:{self.port}"
        try:
            wait_until(lambda: http_get(self.url + "/healthz", timeout=1.0)[0] == 200,
                       timeout=30, what=f"the exporter container on {self.url}")
        except TimeoutError:
            logs = self.logs()
            self.remove()
            raise AssertionError(f"container did not become ready; logs:\n{logs}") from None

    def logs(self) -> str:
        result = podman("logs", self.id)
        return result.stdout + result.stderr

    def remove(self) -> None:
        podman("rm", "-f", "-t", "0", self.id)


@pytest.fixture(scope="module")
def running(image: str) -> Iterator[Container]:
    container = Container(image)
    yield container
    container.remove()


def test_image_runs_non_root_with_nvidia_toolkit_settings(image: str) -> None:
    fmt = "{{.Config.User}}|{{json .Config.Entrypoint}}|{{json .Config.Env}}|{{json .Config.ExposedPorts}}"
    user, entrypoint, env, ports = must("image", "inspect", "--format", fmt, image).split("|")
    assert user == "65534:65534"  # the chart's runAsUser
    assert entrypoint == '["trainwatch-exporter"]'
    assert '"NVIDIA_VISIBLE_DEVICES=all"' in env and '"NVIDIA_DRIVER_CAPABILITIES=utility"' in env
    assert "10910/tcp" in ports


def test_image_holds_the_exporter_and_nothing_of_training(image: str) -> None:
    probe = ("import importlib.util as u; "
             "print(sorted(m for m in ('exporter', 'pynvml', 'psutil', 'prometheus_client', "
             "'yaml', 'torch', 'trial_instrumentation', 'trainwatch') if u.find_spec(m)))")
    out = must("run", "--rm", *LOCKED_DOWN, *OFFLINE, "--entrypoint", "python3", image, "-c", probe)
    assert out == str(['exporter', 'prometheus_client', 'psutil', 'pynvml', 'yaml'])
    version = must("run", "--rm", *OFFLINE, image, "--version")
    assert version == f"trainwatch-exporter {__version__}"


def test_read_only_non_root_container_is_scraped_on_loopback(running: Container) -> None:
    status, body = http_get(running.url + "/metrics")
    assert status == 200
    text = body.decode()
    assert f'trainwatch_exporter_build_info{{version="{__version__}"}} 1.0' in text
    assert "\ntrainwatch_cpu_count " in text and "\ntrainwatch_memory_total_bytes " in text
    # No GPU in the container: the GPU collector reports failure and the scrape still works.
    assert 'trainwatch_scrape_collector_success{collector="gpu"} 0.0' in text
    assert 'trainwatch_scrape_collector_success{collector="host"} 1.0' in text
    promtool("check", "metrics", stdin=text)


def test_container_process_is_nobody_and_cannot_write_its_root(running: Container) -> None:
    out = must("exec", running.id, "python3", "-c",
               "import os\ntry:\n open('/opt/trainwatch/x', 'w')\nexcept OSError as e:\n"
               " print(os.getuid(), os.getgid(), e.strerror)")
    assert out == "65534 65534 Read-only file system"


def test_bad_flag_exits_2_with_one_line(image: str) -> None:
    result = podman("run", "--rm", *LOCKED_DOWN, *OFFLINE, image, "--no-collector.nope")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    line, = result.stderr.splitlines()
    assert line.startswith("trainwatch-exporter: error:") and "nope" in line


def test_sigterm_stops_it_promptly_and_cleanly(image: str) -> None:
    # The exporter is PID 1, which the kernel spares from SIGTERM unless it handles the signal;
    # not handling it would make `podman stop` wait its timeout, then SIGKILL (exit 137).
    container = Container(image)
    try:
        started = time.monotonic()
        must("stop", "-t", "10", container.id, timeout=30)
        elapsed = time.monotonic() - started
        assert must("inspect", "--format", "{{.State.ExitCode}}", container.id) == "0"
        assert elapsed < 5, f"podman stop took {elapsed:.1f}s: SIGTERM was not handled"
        assert "msg=stopping" in container.logs()
    finally:
        container.remove()
