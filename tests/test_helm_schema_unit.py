"""helm.exporter_schema without helm: ``at_most``'s pattern against integer arithmetic for
limits of every length (the chart uses one, MAX_ITERATIONS), the module's examples, and
``--check`` on the committed schema (tests/test_helm_values.py renders it whole)."""

from __future__ import annotations

import doctest
import re
import subprocess
import sys

import pytest

import helm.exporter_schema as generator
from exporter.webauth import MAX_ITERATIONS

LIMITS = [*range(1, 130), 199, 200, 201, 909, 999, 1000, 1001, 2000, 4096, 10**5, 600000,
          1234567, MAX_ITERATIONS]


@pytest.mark.parametrize("limit", LIMITS)
def test_at_most_matches_exactly_the_integers_from_one_to_the_limit(limit: int) -> None:
    pattern = re.compile(f"^(?:{generator.at_most(limit)})$")
    tried = {*range(250), *range(max(0, limit - 150), limit + 150),
             *(10**k + d for k in range(9) for d in (-1, 0, 1)),
             *(int(f"{digit}{rest}") for digit in range(1, 10) for rest in ("", "0", "99", "000"))}
    assert [n for n in sorted(tried) if pattern.match(str(n))] == \
        [n for n in sorted(tried) if 1 <= n <= limit]
    assert not pattern.match(f"0{min(limit, 7)}"), "a leading zero is not written"


def test_the_modules_examples_hold() -> None:
    result = doctest.testmod(generator)
    assert result.failed == 0 and result.attempted > 0


def test_check_passes_on_the_committed_schema() -> None:
    assert generator.main(["--check"]) == 0


def test_help_says_what_the_generator_writes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        generator.main(["--help"])
    assert exited.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert ("Write the exporter's part of the chart's values schema from the exporter's own "
            "settings.") in help_text
    assert "python -m helm.exporter_schema" not in help_text  # the docstring's first paragraph


def test_python_m_runs_main() -> None:
    done = subprocess.run([sys.executable, "-m", "helm.exporter_schema", "--help"],
                          capture_output=True, text=True, timeout=60, check=False,
                          cwd=generator.REPO)
    assert done.returncode == 0 and "--check" in done.stdout


@pytest.mark.parametrize(("kind", "good", "bad"), [
    (int, 3, [2.5, "3", True, {}]), (float, 2.5, ["2.5", True, {}]), (str, "x", [3, True, {}]),
    (bool, True, [1, "true", {}]), (dict, {"a": "b"}, [[], "x", 3])])
def test_a_settings_entry_takes_a_value_of_its_kind_and_refuses_the_others(
        monkeypatch: pytest.MonkeyPatch, kind: type, good: object, bad: list[object]) -> None:
    """The chart refuses what the exporter would: a setting of each kind the generator knows
    (an integer one too, though none is one today), checked by a JSON Schema validator."""
    from types import SimpleNamespace

    import jsonschema
    option = SimpleNamespace(metadata={"kind": kind, "help": "a setting", "choices": ()})
    monkeypatch.setitem(generator.OPTIONS, "test.setting", option)
    entry = generator._setting("test.setting")
    jsonschema.Draft7Validator.check_schema(entry)
    jsonschema.validate(good, entry)
    for value in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(value, entry)
