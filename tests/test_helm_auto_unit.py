"""helm.auto_instrumentation without helm: ``--check`` holds on the chart's committed copy,
which is the names written as JSON with a two-space indent and a final newline, and ``--help``
says what it writes (tests/test_helm_auto_instrumentation.py renders the chart with them)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helm import auto_instrumentation as generated


def test_check_passes_on_the_charts_copy() -> None:
    assert generated.main(["--check"]) == 0
    text = generated.FILE.read_text()
    assert text == json.dumps(json.loads(text), indent=2) + "\n"
    assert json.loads(text)["command"][-1] == generated.DEST == "/trainwatch/python"


def test_help_says_what_the_generator_writes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        generated.main(["--help"])
    assert exited.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("Write helm/trainwatch/generated/auto-instrumentation.json: the names the chart's "
            "admission policy") in help_text


def test_python_m_runs_main() -> None:
    done = subprocess.run([sys.executable, "-m", "helm.auto_instrumentation", "--help"],
                          capture_output=True, text=True, timeout=60, check=False,
                          cwd=generated.REPO)
    assert done.returncode == 0 and "--check" in done.stdout
