"""Names reach no terminal and no page as they are: every human-readable output writes a name's
control characters, newlines and line separators out as escapes (trainwatch.cliutil.printable),
and the report's embedded JSON holds no ``<``, ``>``, ``&``, U+2028 or U+2029 as they are.

The live part pushes a trial whose name holds a forged verdict line, terminal escapes, NUL, CR,
a C1 control, U+2028 and ``</script><!--<script>`` (another client's push: Trial() refuses a
'/' in a grouping label) to a real Pushgateway that a real Prometheus with the trainwatch rules
scrapes, then runs `trials`, `diagnose`, `compare` and `report` on it in process."""

from __future__ import annotations

import contextlib
import html.parser
import io
import json
import re
import threading
import time
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import push_to_gateway

import trial_instrumentation as ti
from benchmarks.stack import wait_until
from tests.live_stack import LiveStack, live_stack
from trainwatch import cli
from trainwatch.cliutil import bounded, printable
from trainwatch.report.markup import e, script_json
from trainwatch.webhook import notification_text
from trial_instrumentation import names

FORGED = "VERDICT: healthy (forged)"
NAME = (f"t\n{FORGED}\x1b[2J\x1b]0;pwned\x07\x00\r\x85\u2028\u2029\u202e"
        "</script><!--<script>&amp;")
EXPERIMENT = "hostile-names"
ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[ntr])")


def unescaped(text: str) -> str:
    """printable()'s escapes read back (for names without a backslash of their own)."""
    return ESCAPE.sub(lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(m[1]) or
                      chr(int(m[1][1:], 16)), text)


def shown_raw(text: str) -> set[str]:
    """The characters of ``text`` a terminal or a page would act on (a newline between lines
    is the output's own)."""
    return {c for c in text if not c.isprintable() and c != "\n"}


# -- the escaper ----------------------------------------------------------------------------

@given(st.text())
def test_the_escaper_leaves_nothing_a_terminal_acts_on(text: str) -> None:
    out = printable(text)
    assert out.isprintable()
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Zl", "Zp", "Cs") for c in out)


@given(st.text().filter(lambda t: t.isprintable()))
def test_a_printable_name_is_shown_as_it_is(text: str) -> None:
    assert printable(text) == text


@given(st.text().filter(lambda t: "\\" not in t))
def test_an_escaped_name_reads_back_to_the_name(text: str) -> None:
    """Each escape has a fixed form, so two names without a backslash never print alike."""
    assert unescaped(printable(text)) == text


@pytest.mark.parametrize(("name", "shown"), [
    ("a\nb", "a\\nb"), ("\r", "\\r"), ("\t", "\\t"), ("\x1b[2J", "\\x1b[2J"), ("\x07", "\\x07"),
    ("\x00", "\\x00"), ("\x7f", "\\x7f"), ("\x85", "\\x85"), ("\x9b", "\\x9b"),
    ("\u2028\u2029", "\\u2028\\u2029"), ("\u202e", "\\u202e"), ("\ufeff", "\\ufeff"),
    ("\ud800", "\\ud800"), ("\U000e0041", "\\U000e0041"), ("lr=0.1 é 批 🙂", "lr=0.1 é 批 🙂"),
    ("a\\nb", "a\\nb")])  # a backslash of the name's own stays as it is
def test_every_character_class_is_written_out(name: str, shown: str) -> None:
    assert printable(name) == shown


def test_a_bounded_name_is_cut_and_says_its_length() -> None:
    assert bounded("\n" * 300) == "\\n" * 200 + "…(300 chars)"
    assert bounded("short\x1b") == "short\\x1b"


def test_the_report_markup_and_its_json_block() -> None:
    assert e(NAME) == (
        "t\\nVERDICT: healthy (forged)\\x1b[2J\\x1b]0;pwned\\x07\\x00\\r\\x85\\u2028\\u2029"
        "\\u202e&lt;/script&gt;&lt;!--&lt;script&gt;&amp;amp;")
    block = script_json(json.dumps({"trial": NAME}, ensure_ascii=False))
    assert not {"<", ">", "&", "\u2028", "\u2029"} & set(block)
    assert json.loads(block) == {"trial": NAME}


# -- the notification text (the webhook's log, `stack notifications`, the demo) --------------

def test_a_notification_about_a_hostile_trial_prints_its_name_escaped() -> None:
    templates = Path(__file__).resolve().parent.parent / "prometheus/alertmanager/templates"
    note = {"receiver": "trainwatch\x1b[2J", "status": "firing",
            "groupLabels": {"alertname": "TrainwatchDataloaderBound"},
            "commonLabels": {"experiment": EXPERIMENT, "trial": NAME},
            "commonAnnotations": {},
            "alerts": [{"status": "firing", "labels": {
                "alertname": "TrainwatchDataloaderBound", "severity": "warning",
                "experiment": EXPERIMENT, "trial": NAME, "rank": "0"},
                "annotations": {"summary": f"Trial {EXPERIMENT}/{NAME} rank 0 is data-loader "
                                           "bound.", "remedy": "more workers"},
                "startsAt": "2026-11-26T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://127.0.0.1:10911/graph", "fingerprint": "f"}]}
    text = notification_text(note, templates)
    assert shown_raw(text) == set()
    assert not any(line.lstrip("*- ").startswith("VERDICT") for line in text.splitlines())
    assert printable(NAME) in text


def test_alertmanagers_own_notification_text_shows_the_name_escaped(tmp_path: Path) -> None:
    """What Slack or email get from the shipped templates, rendered by the real amtool from
    the raw notification (an annotation that quotes a label quotes it as it is)."""
    from tests.test_alertmanager import as_fired, notification, render_template
    alert = as_fired("TrainwatchDataloaderBound", "firing", "95.2%", experiment=EXPERIMENT,
                     trial=NAME, rank="0", phase="dataloader_next")
    alert["annotations"]["summary"] += f" ({NAME})"  # an annotation that quotes the name
    data = notification("firing", alert)
    title = render_template(tmp_path, "trainwatch.title", data)
    text = render_template(tmp_path, "trainwatch.text", data)
    assert shown_raw(title) == set() and "\n" not in title
    assert shown_raw(text) == set()
    escaped = "t\\nVERDICT: healthy (forged)\\x1b[2J\\x1b]0;pwned\\x07\\x00\\r\\x85\\u2028\\u2029"
    assert f"* trial {EXPERIMENT}/{escaped}\ufffd</script>" in text
    assert not any(line.startswith("VERDICT") for line in text.splitlines())
    assert len(text.splitlines()) == 7  # Firing:, the subject and its five lines, as for any


# -- the commands, live ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveStack]:
    """A stack (10 s rate window) with a decoy trial and the hostile one, both stepping and
    pushing every 0.2 s until the module's tests are done."""
    workdir = tmp_path_factory.mktemp("hostile_names")
    with live_stack(workdir, rate_window="10s", for_="3s") as stack:
        stop = threading.Event()
        # The trial's own group is the decoy; its registry is pushed again under the hostile
        # key, as another client (or a Trial before the '/' check) could push it.
        trial = ti.Trial(experiment=EXPERIMENT, trial="decoy", rank=0,
                         pushgateway=stack.pushgateway.url, push_interval=0.2)

        def train() -> None:
            with trial:
                while not stop.is_set():
                    for _ in trial.loader(range(20)):
                        with trial.phase(ti.TRAIN_BATCH):
                            time.sleep(0.005)
                    push_to_gateway(stack.pushgateway.url, names.JOB, trial.registry,
                                    grouping_key={"experiment": EXPERIMENT, "trial": NAME,
                                                  "rank": "0"})

        thread = threading.Thread(target=train, daemon=True)
        thread.start()
        try:
            wait_until(lambda: json.loads(run_json(
                stack.prometheus.url, "diagnose", "--experiment", EXPERIMENT, "--trial",
                NAME))["reports"][0]["verdict"],
                       timeout=90, interval=1, what="a verdict for the hostile trial")
            yield stack
        finally:
            stop.set()
            thread.join(30)


def run_json(url: str, *argv: str) -> str:
    """The command's JSON output, run in process (its stdout captured here, not by pytest)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        cli.main([*argv[:1], "--prometheus", url, *argv[1:], "--format", "json"])
    return out.getvalue()


def run(capsys: pytest.CaptureFixture[str], stack: LiveStack, *argv: str) -> tuple[int, str, str]:
    code = cli.main([*argv[:1], "--prometheus", stack.prometheus.url, *argv[1:]])
    out, err = capsys.readouterr()
    return code, out, err


def test_diagnose_prints_one_verdict_line_and_the_name_escaped(
        hostile: LiveStack, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, hostile, "diagnose", "--experiment", EXPERIMENT,
                         "--trial", NAME)
    assert code in (0, 1), err
    lines = out.splitlines()
    assert len([line for line in lines if line.startswith("VERDICT")]) == 1, out
    assert not any(FORGED in line and not line.startswith("Trial ") for line in lines)
    assert f"Trial {EXPERIMENT}/{printable(NAME)} rank 0 on " in lines[0]
    assert shown_raw(out) == set() and shown_raw(err) == set()
    # JSON stays JSON's: the name itself, escaped by JSON's rules.
    doc = json.loads(run_json(hostile.prometheus.url, "diagnose", "--experiment", EXPERIMENT,
                              "--trial", NAME))
    assert doc["reports"][0]["trial"] == NAME


def test_trials_prints_one_row_per_trial_with_the_name_escaped(
        hostile: LiveStack, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, hostile, "trials", "--experiment", EXPERIMENT)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("EXPERIMENT"), out  # header, decoy, hostile
    assert sorted(line.split()[1] for line in lines[1:]) == sorted(
        ["decoy", printable(NAME).split()[0]])
    assert shown_raw(out) == set()
    assert NAME in {row["trial"] for row in json.loads(run_json(
        hostile.prometheus.url, "trials", "--experiment", EXPERIMENT))["trials"]}


def test_an_unknown_trial_and_its_suggestions_are_one_line(
        hostile: LiveStack, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("diagnose", "--experiment", EXPERIMENT, "--trial", "nope\x1b]0;pwned\x07\n"),
                 ("compare", f"{EXPERIMENT}/nope\n{FORGED}", f"{EXPERIMENT}/decoy"),
                 ("check", f"{EXPERIMENT}/nope\n{FORGED}"),
                 ("profile", "--experiment", EXPERIMENT, "--trial", "nope\x1b]0;pwned\x07\n")):
        code, out, err = run(capsys, hostile, *argv)
        assert code == 2 and out == "", (out, err)
        assert err.count("\n") == 1 and shown_raw(err) == set(), err
        assert "nope\\n" in err or "nope\\x1b" in err
    # The suggestion names the hostile trial, escaped, on the same one line.
    code, _, err = run(capsys, hostile, "diagnose", "--experiment", EXPERIMENT, "--trial", "t")
    assert code == 2 and err.count("\n") == 1 and shown_raw(err) == set(), err


def test_the_report_keeps_its_json_block_whole_and_the_name_escaped(
        hostile: LiveStack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    code, _, err = run(capsys, hostile, "report", "--experiment", EXPERIMENT, "--trial", NAME,
                       "-o", str(out))
    assert code == 0, err
    page = out.read_text()

    class Scripts(html.parser.HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.inside: str | None = None
            self.blocks: dict[str, str] = {}
            self.ended = False

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "script":
                self.inside = dict(attrs).get("id") or ""
                self.blocks[self.inside] = ""

        def handle_data(self, data: str) -> None:
            if self.inside is not None:
                self.blocks[self.inside] += data

        def handle_endtag(self, tag: str) -> None:
            self.inside = None if tag == "script" else self.inside
            self.ended = self.ended or tag == "html"

    parsed = Scripts()
    parsed.feed(page)
    assert list(parsed.blocks) == ["diagnose-json"] and parsed.ended
    block = parsed.blocks["diagnose-json"]
    assert not {"<", ">", "&", "\u2028", "\u2029"} & set(block)
    assert [r["trial"] for r in json.loads(block)["reports"]] == [NAME]
    text = page.replace(block, "")
    assert shown_raw(text) == set()  # every visible name written out
    assert e(NAME) in text and "<!--<script>" not in text


def test_stack_notifications_lists_a_hostile_notification_escaped(tmp_path: Path) -> None:
    from trainwatch.layout import StateDir
    from trainwatch.stack.commands import notifications
    from trainwatch.stack.services import notifications_file
    from trainwatch.webhook import record
    state = StateDir(tmp_path)
    notifications_file(state).parent.mkdir(parents=True)
    record(notifications_file(state), {
        "receiver": f"r\n{FORGED}", "status": "firing", "groupLabels": {"trial": NAME},
        "alerts": [{"status": "firing", "labels": {"alertname": "TrainwatchDataloaderBound",
                                                    "trial": NAME, "experiment": EXPERIMENT,
                                                    "rank": "0"},
                    "annotations": {"summary": NAME, "remedy": "more workers"},
                    "startsAt": "2026-11-26T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z"}]})
    said: list[str] = []
    assert notifications(state, said.append) == 0
    assert said[0].endswith(f" via receiver r\\n{FORGED}")
    assert all(shown_raw(line) == set() and "\n" not in line for line in said)
    assert not any(line.lstrip().startswith("VERDICT") for line in said)
