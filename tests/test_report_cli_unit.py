"""`trainwatch report`'s run (trainwatch.report.cli) in process: which flags go together (each
refused alone and the first of several named), the window checked before anything is read,
the output written whole (through a temp file beside it, with the umask's mode, no temp file
left on any path, the old file kept on a failure) and every failure one line, exit 2.

The page builders (collect.collect, page.page, usage_page.collect and page) have their own
tests; here they are replaced by recorders that keep what the run handed them, so the wiring
(URLs, timeout, the times asked, the baseline) is checked by value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from trainwatch import cli
from trainwatch.cliutil import EXIT_OK, EXIT_USAGE
from trainwatch.promapi import PrometheusError
from trainwatch.report import cli as report_cli
from trainwatch.report import collect, page, usage_page
from trainwatch.report.window import Asked, Window

# Non-round, distinct times: 2026-11-03 05:17:39 UTC and 2 h 41 min 13 s later.
START, END = 1_793_682_659.0, 1_793_692_332.0
PAGE = "é" * 1300  # 2600 bytes in UTF-8: "3 kB" (2.54), not 1300 characters' "1 kB"


class Recorder:
    """Stands in for the page builders; keeps each call's arguments."""

    def __init__(self, tmp: Path, fail: BaseException | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail = fail
        self.tmp = tmp
        self.beside: list[str] = []  # the output's folder while the page is made

    def collect(self, *args: Any) -> Any:
        self.calls.append(("collect", args))
        self.beside = sorted(p.name for p in self.tmp.iterdir())
        if self.fail is not None:
            raise self.fail
        return collect.Document("http://p", args[1], args[2], args[3],
                                Window(START, END, 10.0, False), None,
                                [object(), object()])  # type: ignore[list-item]

    def usage(self, api: Any, by: str, since: float | None) -> Any:
        self.calls.append(("usage", (api.url, api.timeout, by, since)))
        self.beside = sorted(p.name for p in self.tmp.iterdir())
        if self.fail is not None:
            raise self.fail
        # usage.over's answer: the range asked, capped by the retention (here 72 minutes).
        return usage_page.UsageDoc(by, 4320.0, END, [object()] * 3, None,  # type: ignore[arg-type]
                                   api.url)

    def holding(self, apis: list[Any], experiment: str, trial: str | None,
                since: float | None) -> Any:
        self.calls.append(("holding", ([(a.url, a.timeout) for a in apis], experiment, trial,
                                       since)))
        return apis[-1]


@pytest.fixture
def rec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    r = Recorder(tmp_path)
    monkeypatch.setattr(collect, "collect", r.collect)
    monkeypatch.setattr(report_cli, "holding", r.holding)
    monkeypatch.setattr(page, "page", lambda doc: PAGE)
    monkeypatch.setattr(usage_page, "collect", r.usage)
    monkeypatch.setattr(usage_page, "page", lambda doc: "u" * 5200 + doc.by)
    monkeypatch.delenv("TRAINWATCH_PROMETHEUS", raising=False)
    return r


@pytest.fixture
def umask_027() -> Any:
    old = os.umask(0o027)
    yield
    os.umask(old)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o000, 0o077])
def test_the_page_has_the_mode_a_new_file_gets_under_each_umask(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str], umask: int) -> None:
    out, made = tmp_path / "r.html", tmp_path / "made"
    old = os.umask(umask)
    try:
        made.touch()  # what open() gives a new file: 0666 less the umask
        code, _, err = main(capsys, "--experiment", "e", "--prometheus", "http://a",
                            "-o", str(out))
        assert os.umask(umask) == umask  # the run left the umask as it was
    finally:
        os.umask(old)
    assert (code, err) == (EXIT_OK, "")
    assert oct(out.stat().st_mode & 0o777) == oct(made.stat().st_mode & 0o777)


@pytest.mark.parametrize(("size", "said"), [(1535, "1 kB"), (1536, "2 kB"), (0, "0 kB")])
def test_the_size_said_is_in_kibibytes(rec: Recorder, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch, size: int,
                                       said: str) -> None:
    # 1535 bytes are 1.499 KiB, 1536 are 1.5: the line rounds them apart.
    monkeypatch.setattr(page, "page", lambda doc: "a" * size)
    out = tmp_path / "r.html"
    code, told, _ = main(capsys, "--experiment", "e", "--prometheus", "http://a",
                         "-o", str(out))
    assert code == EXIT_OK and told.startswith(f"wrote {out} ({said}): ")


def test_the_output_is_required(rec: Recorder, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["report", "--experiment", "e", "--prometheus", "http://a"])
    assert exited.value.code == EXIT_USAGE
    assert "the following arguments are required: -o/--output" in capsys.readouterr()[1]
    assert rec.calls == []


def test_the_temp_file_is_closed_on_a_failure_even_as_descriptor_0(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A process started with stdin closed: the temp file gets descriptor 0.
    rec.fail = LookupError("no samples")
    saved = os.dup(0)
    try:
        os.close(0)
        code, _, _ = main(capsys, "--experiment", "e", "--prometheus", "http://a",
                          "-o", str(tmp_path / "r.html"))
        try:
            os.fstat(0)
            still = True
        except OSError:
            still = False
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert code == EXIT_USAGE and not still
    assert list(tmp_path.iterdir()) == []


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["report", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> str:
    """The one line of a refusal, nothing written."""
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = main(capsys, *argv, "-o", str(tmp_path / "r.html"))
    assert (code, out) == (EXIT_USAGE, ""), err
    assert err.startswith("trainwatch report: error: ") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return err[len("trainwatch report: error: "):].rstrip("\n")


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_trial_report_is_written_whole_with_the_umasks_mode(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        umask_027: None) -> None:
    out = tmp_path / "r.html"
    fds = open_fds()
    code, said, err = main(capsys, "--experiment", "exp-a", "--trial", "t-19", "--rank", "3",
                           "--prometheus", "http://a:9090", "--prometheus", "http://b:9091",
                           "--timeout", "7.5", "--start", str(START), "--end", str(END),
                           "--baseline", "exp-a/t-2", "-o", str(out))
    assert (code, err) == (EXIT_OK, "")
    assert out.read_bytes() == PAGE.encode()
    assert oct(out.stat().st_mode & 0o777) == oct(0o640)  # 0666 less the umask, not mkstemp's
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # the temp file renamed
    assert open_fds() == fds
    # The temp file was made beside the output before anything was read.
    [temp] = rec.beside
    assert temp.startswith(".r.html.") and temp.endswith(".tmp")
    window = Window(START, END, 10.0, False)
    assert said == f"wrote {out} (3 kB): 2 rank(s), {window.describe()}\n"
    holding, collected = rec.calls
    assert holding == ("holding", ([("http://a:9090", 7.5), ("http://b:9091", 7.5)], "exp-a",
                                   "t-19", None))
    name, (api, *rest) = collected
    assert (name, api.url) == ("collect", "http://b:9091")  # the one holding() chose
    assert rest == ["exp-a", "t-19", "3", Asked(None, START, END, None), "exp-a/t-2"]


def test_a_report_at_an_instant_reads_it_there_and_the_window_ends_at_it(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = main(capsys, "--experiment", "e", "--at", str(END), "--since", "1h",
                        "--prometheus", "http://a:9090", "-o", str(tmp_path / "r.html"))
    assert (code, err) == (EXIT_OK, "")
    [(_, (api, *rest))] = [c for c in rec.calls if c[0] == "collect"]
    assert rest == ["e", None, None, Asked(3600.0, None, None, END), None]
    assert api.url == "http://a:9090" and api.timeout == 30.0  # report's own default


def test_an_instant_alone_is_no_window_to_check(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --start after --at would be an empty window; --at alone (the trial's life up to it) is
    # not checked as one, and neither is --start alone.
    for argv in (["--at", str(START)], ["--start", str(START)],
                 ["--at", str(START), "--since", "10m"]):
        code, _, err = main(capsys, "--experiment", "e", *argv,
                            "--prometheus", "http://a:9090", "-o", str(tmp_path / "r.html"))
        assert (code, err) == (EXIT_OK, ""), argv


@pytest.mark.parametrize(("argv", "said"), [
    (["--start", str(END), "--end", str(START)], "the window is empty"),
    (["--start", str(END), "--end", str(END)], "the window is empty"),
    (["--start", str(END), "--at", str(START)], "the window is empty"),  # --at ends it
    (["--since", "1h", "--start", str(START)], "--since and --start exclude each other"),
    (["--since", "1h", "--start", str(START), "--at", str(END)],
     "--since and --start exclude each other"),
    (["--at", str(END), "--end", str(END)], "--at and --end exclude each other: give one"),
    (["--at", str(START), "--end", str(END), "--start", str(END)],
     "--at and --end exclude each other: give one"),
])
def test_a_window_that_cannot_be_is_refused_before_anything_is_read(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        said: str) -> None:
    assert said in refused(capsys, tmp_path, "--experiment", "e", "--prometheus", "http://a",
                           *argv)
    assert rec.calls == []


def test_the_window_check_uses_the_end_not_the_instant(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --start before --end is a window, whatever --at would say (they exclude each other
    # anyway; here the end alone is given).
    code, _, err = main(capsys, "--experiment", "e", "--start", str(START), "--end", str(END),
                        "--prometheus", "http://a", "-o", str(tmp_path / "r.html"))
    assert (code, err) == (EXIT_OK, "")


@pytest.mark.parametrize(("argv", "flag"), [
    (["--experiment", "e"], "--experiment"), (["--trial", "t"], "--trial"),
    (["--rank", "0"], "--rank"), (["--start", str(START)], "--start"),
    (["--end", str(END)], "--end"), (["--at", str(END)], "--at"),
    (["--baseline", "e/t"], "--baseline"),
    (["--baseline", "e/t", "--at", str(END)], "--at"),  # the first in the order above
    (["--end", str(END), "--trial", "t"], "--trial"),
])
def test_usage_takes_no_trial_and_no_window_but_since(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        flag: str) -> None:
    said = refused(capsys, tmp_path, "--usage", "--prometheus", "http://a", *argv)
    assert said == f"--usage reads every trial over --since up to now: {flag} does not go with it"
    assert rec.calls == []


def test_usage_reads_one_prometheus(rec: Recorder, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    said = refused(capsys, tmp_path, "--usage", "--prometheus", "http://a",
                   "--prometheus", "http://b")
    assert said.startswith("--usage reads one Prometheus")
    assert rec.calls == []


@pytest.mark.parametrize(("argv", "said"), [
    (["--by", "namespace", "--experiment", "e"], "--by goes with --usage: e.g. --usage --by namespace"),
    (["--by", "user"], "--by goes with --usage"),
    ([], "--experiment is required (or --usage for the fleet's GPU-hours)"),
    (["--trial", "t"], "--experiment is required"),
])
def test_a_trial_report_needs_an_experiment_and_no_by(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        said: str) -> None:
    assert said in refused(capsys, tmp_path, "--prometheus", "http://a", *argv)
    assert rec.calls == []


def test_a_usage_page_is_written_from_its_one_prometheus(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        umask_027: None) -> None:
    out = tmp_path / "u.html"
    code, said, err = main(capsys, "--usage", "--prometheus", "http://u:9093", "--by", "user",
                           "--since", "150m", "--timeout", "4.25", "-o", str(out))
    assert (code, err) == (EXIT_OK, "")
    assert out.read_text() == "u" * 5200 + "user"
    assert oct(out.stat().st_mode & 0o777) == oct(0o640)
    assert said == f"wrote {out} (5 kB): GPU-hours by user, 3 group(s), the last 72 minutes\n"
    assert rec.calls == [("usage", ("http://u:9093", 4.25, "user", 9000.0))]
    [temp] = rec.beside
    assert temp.startswith(".u.html.") and temp.endswith(".tmp")


def test_usage_groups_by_experiment_over_its_default_range_unless_told(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PROMETHEUS", "http://env:9094")
    code, _, err = main(capsys, "--usage", "-o", str(tmp_path / "u.html"))
    assert (code, err) == (EXIT_OK, "")
    assert rec.calls == [("usage", ("http://env:9094", 30.0, "experiment", None))]


def test_a_trial_report_without_prometheus_reads_the_environments(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWATCH_PROMETHEUS", "http://env:9094")
    code, _, err = main(capsys, "--experiment", "e", "-o", str(tmp_path / "r.html"))
    assert (code, err) == (EXIT_OK, "")
    assert rec.calls[0] == ("holding", ([("http://env:9094", 30.0)], "e", None, None))


@pytest.mark.parametrize("fail", [
    PrometheusError("cannot reach Prometheus at http://a: refused"),
    LookupError("no samples of trial e/t in the window"),
    ValueError("'x' is not a trial reference"),
])
@pytest.mark.parametrize("usage", [False, True])
def test_a_failure_reading_keeps_the_old_file_and_leaves_no_temp(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        fail: Exception, usage: bool) -> None:
    rec.fail = fail
    out = tmp_path / "r.html"
    out.write_text("the old report")
    fds = open_fds()
    argv = ["--usage"] if usage else ["--experiment", "e"]
    code, said, err = main(capsys, *argv, "--prometheus", "http://a", "-o", str(out))
    assert (code, said) == (EXIT_USAGE, "")
    assert err == f"trainwatch report: error: {fail}\n"
    assert out.read_text() == "the old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]
    assert len(rec.beside) == 2  # the temp file was there while it read
    assert open_fds() == fds  # the temp file's descriptor closed


def test_a_missing_extra_names_what_to_install(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec.fail = ImportError("No module named 'matplotlib'", name="matplotlib")
    said = refused(capsys, tmp_path, "--experiment", "e", "--prometheus", "http://a")
    assert said == "matplotlib is not installed: pip install 'trainwatch[report]'"


def test_a_control_character_in_a_failure_is_written_out(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec.fail = LookupError("no trial e/t\x1b[2J")
    said = refused(capsys, tmp_path, "--experiment", "e", "--prometheus", "http://a")
    assert said == "no trial e/t\\x1b[2J"
    assert refused(capsys, tmp_path, "--experiment", "e\x1b", "--by", "user",
                   "--prometheus", "http://a").startswith("--by goes with")


def test_an_output_that_is_a_folder_or_in_none_fails_before_any_query(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = main(capsys, "--experiment", "e", "--prometheus", "http://a",
                          "-o", str(tmp_path))
    assert (code, out) == (EXIT_USAGE, "")
    assert err == (f"trainwatch report: error: {tmp_path} is a directory; name a file, e.g. "
                   f"{tmp_path}/report.html\n")
    code, out, err = main(capsys, "--usage", "--prometheus", "http://a",
                          "-o", str(tmp_path / "missing" / "u.html"))
    assert (code, out) == (EXIT_USAGE, "")
    assert err == (f"trainwatch report: error: cannot write {tmp_path / 'missing' / 'u.html'}: "
                   "No such file or directory\n")
    assert rec.calls == [] and list(tmp_path.iterdir()) == []


def test_an_output_in_the_working_folder_is_written_there(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, said, err = main(capsys, "--experiment", "e", "--prometheus", "http://a",
                           "-o", "r.html")
    assert (code, err) == (EXIT_OK, "") and said.startswith("wrote r.html (3 kB)")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_a_failure_to_put_the_page_in_place_is_one_line_and_leaves_no_temp(
        rec: Recorder, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "r.html"
    out.write_text("the old report")

    def replace(source: Any, target: Any) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(report_cli.os, "replace", replace)
    fds = open_fds()
    code, said, err = main(capsys, "--experiment", "e", "--prometheus", "http://a",
                           "-o", str(out))
    assert (code, said) == (EXIT_USAGE, "")
    assert err == f"trainwatch report: error: cannot write {out}: Permission denied\n"
    assert out.read_text() == "the old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"] and open_fds() == fds
