"""The shipped texts tell a trial's Pushgateway group life as it is (docs/design.md, "Grouping key
and the life of a group"): a trial never deletes its own group, its final push carries
`trainwatch_trial_exit` and stays until `trainwatch gc` retires it, and gc runs on the schedule
the chart's values.yaml and `trainwatch stack` actually give it."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from trainwatch.contract import remedies
from trainwatch.stack.settings import GC_EVERY
from trial_instrumentation.durations import parse_duration

REPO = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "helm/README.md", "docs/design.md", "docs/runbooks.md",
        "docs/instrumentation.md")

# Each says, or implies, that a trial deletes its own group when it exits.
SELF_DELETE = (
    # "a clean exit deletes the group", "the clean exit of one deletes the group of the other"
    re.compile(r"\bexit\w*\b[^.;:]{0,30}?\bdelet\w*\b[^.;:]{0,20}?\bgroup"),
    # "did not delete its group", "without deleting its Pushgateway group": as if it should have
    re.compile(r"\b(?:did not|didn't|without|failed to) delet\w* its (?:own )?(?:pushgateway )?"
               r"group"),
    # "a trial that finished cleanly deleted its group", "its delete did not get through"
    re.compile(r"\b(?:finish|end|exit|terminat)\w*\b[^.;:]{0,30}?\bdeleted (?:its|the) "
               r"(?:own )?(?:pushgateway )?group"),
    re.compile(r"\bits delete did not get through"),
)

_UNITS = {"s": 1, "sec": 1, "secs": 1, "second": 1, "seconds": 1, "m": 60, "min": 60,
          "mins": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600, "hours": 3600,
          "d": 86400, "day": 86400, "days": 86400}
_WORDS = {"hourly": 3600, "daily": 86400, "nightly": 86400, "weekly": 7 * 86400}
# "every 2 minutes", "every 30 s", "every 15m", "every hour", "hourly", "once a day".
SCHEDULE = re.compile(r"\bevery (\d+(?:\.\d+)?)? ?(" + "|".join(sorted(_UNITS, key=len,
                                                                         reverse=True))
                      + r")\b|\b(hourly|daily|nightly|weekly)\b|\bonce an? (minute|hour|day)\b")


def cron_period(schedule: str) -> float:
    """Seconds between runs of the cron forms a gc schedule takes."""
    macros = {"@hourly": 3600, "@daily": 86400, "@midnight": 86400, "@weekly": 7 * 86400}
    if schedule in macros:
        return macros[schedule]
    minute, hour, *rest = schedule.split()
    assert rest == ["*", "*", "*"], f"cron_period cannot read {schedule!r}: teach it"
    if hour == "*":
        if minute == "*":
            return 60
        if m := re.fullmatch(r"\*/(\d+)", minute):
            return 60 * int(m[1])
        if minute.isdigit():
            return 3600
    if minute.isdigit() and (m := re.fullmatch(r"\*/(\d+)", hour)):
        return 3600 * int(m[1])
    if minute.isdigit() and hour.isdigit():
        return 86400
    raise AssertionError(f"cron_period cannot read {schedule!r}: teach it")


@cache
def chart_period() -> float:
    values = yaml.safe_load((REPO / "helm/trainwatch/values.yaml").read_text())
    return cron_period(values["gc"]["schedule"])


def stack_period() -> float:
    return parse_duration(GC_EVERY)


def shipped_texts() -> dict[str, str]:
    """Every text an operator reads about a trial's group: the alert rules' annotations, the
    remedies, the READMEs and the docs."""
    texts = {}
    for path in sorted((REPO / "prometheus/rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                for key, value in rule.get("annotations", {}).items():
                    where = f"{path.relative_to(REPO)}: {rule.get('alert', rule.get('record'))}"
                    texts[f"{where} {key}"] = str(value)
    for name, value in vars(remedies).items():
        if name.isupper() and isinstance(value, str):
            texts[f"remedies.{name}"] = value
    for doc in DOCS:
        texts[doc] = (REPO / doc).read_text()
    return texts


def _flat(text: str) -> str:
    """Lower case, markup and line breaks gone, so a phrase split over lines still matches."""
    return re.sub(r"\s+", " ", re.sub(r"[`*_]", "", text)).lower()


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.;!?])\s+(?=[A-Z(`*-])|\n\s*\n|\n\s*[-*] ", text)


def self_delete_claims(text: str) -> list[str]:
    found = []
    flat = _flat(text)
    for pattern in SELF_DELETE:
        for m in pattern.finditer(flat):
            if "never" not in m[0]:
                found.append(flat[max(0, m.start() - 40):m.end() + 20])
    return found


def schedule_claims(text: str) -> list[tuple[str, float, set[float]]]:
    """(sentence, period it states, periods it may state) for each gc schedule a sentence
    gives: the chart's where the nearest name before it is the chart's (chart, CronJob,
    janitor), the stack's where it is the stack's, either where the sentence names neither."""
    periods = {"chart": chart_period(), "stack": stack_period()}
    found = []
    for sentence in _sentences(text):
        flat = _flat(sentence)
        if not re.search(r"\bgc\b|cronjob|janitor", flat):
            continue
        for m in SCHEDULE.finditer(flat):
            if m[2]:
                period = float(m[1] or 1) * _UNITS[m[2]]
            elif m[3]:
                period = _WORDS[m[3]]
            else:
                period = _UNITS[m[4]]
            named = [(n.end(), "stack" if n[0] == "stack" else "chart")
                     for n in re.finditer(r"stack|chart|cronjob|janitor", flat[:m.start()])]
            allowed = {periods[max(named)[1]]} if named else set(periods.values())
            found.append((flat, period, allowed))
    return found


def test_the_expected_schedules_are_read_from_the_chart_and_the_stack() -> None:
    assert chart_period() > 0 and stack_period() > 0
    assert cron_period("*/2 * * * *") == 120
    assert cron_period("@hourly") == cron_period("0 * * * *") == 3600


@pytest.mark.parametrize(("text", "claims"), [
    ("on a clean exit the trial deletes its group", True),
    ("the clean exit of one deletes the group of the other.", True),
    ("The trial stopped pushing without deleting its Pushgateway group: it crashed", True),
    ("last pushed 7m ago and did not delete its group.", True),
    ("A trial that finished cleanly deleted its group (no series)", True),
    ("A trial never deletes its own group: it pushes its final state and leaves it.", False),
    ("`trainwatch gc` deletes its group after --max-age.", False),
])
def test_self_delete_claims_are_found(text: str, claims: bool) -> None:
    assert bool(self_delete_claims(text)) is claims


def test_a_schedule_is_read_against_the_runner_it_names() -> None:
    chart, stack = chart_period(), stack_period()
    text = "the chart's `gc` CronJob runs it hourly, `trainwatch stack up` every 30 s."
    assert [(p, a) for _, p, a in schedule_claims(text)] == [(3600, {chart}), (30, {stack})]


def test_no_shipped_text_says_a_trial_deletes_its_own_group() -> None:
    problems = [f"{where}: ...{claim}..." for where, text in shipped_texts().items()
                for claim in self_delete_claims(text)]
    assert not problems, ("a trial never deletes its own group (docs/design.md):\n"
                          + "\n".join(problems))


def test_every_shipped_gc_schedule_is_the_one_the_chart_and_the_stack_use() -> None:
    problems = [f"{where}: states every {period:g}s, the schedule is "
                f"{' or '.join(f'{a:g}s' for a in sorted(allowed))}: {sentence}"
                for where, text in shipped_texts().items()
                for sentence, period, allowed in schedule_claims(text) if period not in allowed]
    assert not problems, "\n".join(problems)
