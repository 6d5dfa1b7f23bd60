"""The metric specs (exporter.metrics) and the families built from them (exporter.family): the
namespace and `_total` rules both ways, the GPU specs' labels, and what a family reads as."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from exporter import metrics
from exporter.family import ExpositionSample, Family
from exporter.metrics import ALL, GPU_LABELS, MetricSpec


def test_a_spec_outside_the_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="outside the trainwatch_ namespace"):
        MetricSpec("node_cpu_seconds", "CPU.")
    with pytest.raises(ValueError, match="outside"):
        MetricSpec("trainwatchgpu_x", "No underscore after the namespace.")
    assert MetricSpec("trainwatch_x", "Inside.").name == "trainwatch_x"


@pytest.mark.parametrize("kind", ["gauge", "untyped"])
def test_total_belongs_on_counters_only(kind: str) -> None:
    with pytest.raises(ValueError, match="`_total` belongs on counters and only there"):
        MetricSpec("trainwatch_ops_total", "Ops.", kind=kind)  # type: ignore[arg-type]
    assert MetricSpec("trainwatch_ops", "Ops.", kind=kind).kind == kind  # type: ignore[arg-type]


def test_a_counter_needs_total() -> None:
    with pytest.raises(ValueError, match="`_total` belongs on counters"):
        MetricSpec("trainwatch_ops", "Ops.", kind="counter")
    assert MetricSpec("trainwatch_ops_total", "Ops.", kind="counter").kind == "counter"


def test_a_kind_sorting_before_counter_is_not_a_counter() -> None:
    """The rule compares the kind for equality: a kind that sorts before "counter" is no
    counter (the literal allows none, but the comparison must not be an ordering)."""
    MetricSpec("trainwatch_a", "A.", kind="aaa")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        MetricSpec("trainwatch_a_total", "A.", kind="aaa")  # type: ignore[arg-type]


def test_a_spec_defaults_to_an_unlabelled_gauge() -> None:
    spec = MetricSpec("trainwatch_plain", "Plain.")
    assert (spec.labels, spec.kind, spec.help) == ((), "gauge", "Plain.")


def test_specs_are_told_apart_by_identity() -> None:
    one, two = MetricSpec("trainwatch_x", "X."), MetricSpec("trainwatch_x", "X.")
    assert one != two and len({one, two}) == 2 and {one: 1}[one] == 1


def test_gpu_specs_carry_gpu_and_uuid_then_their_own_labels() -> None:
    assert GPU_LABELS == ("gpu", "uuid")
    assert metrics.GPU_TEMPERATURE.labels == ("gpu", "uuid")
    assert metrics.GPU_TEMPERATURE.name == "trainwatch_gpu_temperature_celsius"
    assert metrics.GPU_INFO.labels == ("gpu", "uuid", "name", "pci_bus_id", "driver_version")
    assert metrics.GPU_PROCESS_INFO.labels == ("gpu", "uuid", "pid", "pod_uid", "container_id",
                                               "slurm_job_id")
    assert metrics.GPU_ENERGY.kind == "counter" and metrics.GPU_ECC_ERRORS.kind == "counter"
    assert metrics.GPU_POWER.kind == "gauge"
    assert metrics.CPU_COUNT.kind == "untyped"


def test_all_holds_every_spec_once_and_nothing_else() -> None:
    found = [v for v in vars(metrics).values() if isinstance(v, MetricSpec)]
    assert list(ALL) == found and len(ALL) == len(set(ALL)) > 40
    assert all(isinstance(spec, MetricSpec) for spec in ALL)
    assert len({spec.name for spec in ALL}) == len(ALL)
    assert metrics.GPU_INFO in ALL and metrics.BUILD_INFO in ALL


def test_each_family_is_fresh_and_empty() -> None:
    first, second = metrics.GPU_POWER.family(), metrics.GPU_POWER.family()
    assert first is not second and first.rows == [] and second.rows == []
    first.add_metric(("0", "GPU-a"), 312.5)
    assert second.rows == [] and first.spec is metrics.GPU_POWER


def test_a_counter_family_is_named_without_total_and_its_samples_with_it() -> None:
    family = Family(metrics.GPU_ECC_ERRORS)
    family.add_metric(("1", "GPU-b", "corrected"), 7.0)
    family.add_metric(("2", "GPU-c", "uncorrected"), 0.5)
    assert (family.name, family.type, family.unit) == ("trainwatch_gpu_ecc_errors", "counter", "")
    assert family.documentation == metrics.GPU_ECC_ERRORS.help
    assert family.samples == [
        ExpositionSample("trainwatch_gpu_ecc_errors_total",
                         {"gpu": "1", "uuid": "GPU-b", "error": "corrected"}, 7.0),
        ExpositionSample("trainwatch_gpu_ecc_errors_total",
                         {"gpu": "2", "uuid": "GPU-c", "error": "uncorrected"}, 0.5)]
    assert family.samples[0].timestamp is None and family.samples[0].exemplar is None
    assert family.samples[0].native_histogram is None


def test_a_gauge_whose_name_ends_in_total_like_text_keeps_its_name() -> None:
    """Only a counter's name loses ``_total``; an untyped or gauge family keeps its name."""
    spec = MetricSpec("trainwatch_things_totals", "Not a counter.")
    assert Family(spec).name == "trainwatch_things_totals"
    assert Family(metrics.CPU_COUNT).type == "unknown"
    assert Family(metrics.CPU_COUNT).name == "trainwatch_cpu_count"
    assert Family(metrics.GPU_POWER).type == "gauge"


def test_a_family_can_start_from_rows_it_then_appends_to() -> None:
    rows: list = [(("eth0",), 1.5)]
    family = Family(metrics.NETWORK_SPEED, rows)
    family.add_metric(("eth1",), 2.25)
    assert family.rows is rows and rows == [(("eth0",), 1.5), (("eth1",), 2.25)]
    assert [s.labels for s in family.samples] == [{"device": "eth0"}, {"device": "eth1"}]
    assert Family(metrics.NETWORK_SPEED).rows == []


def test_a_kind_made_at_run_time_is_compared_by_value() -> None:
    kind = "counter-".rstrip("-")  # equal to "counter", not the same object
    assert kind == "counter" and kind is not "counter"  # noqa: F632
    assert MetricSpec("trainwatch_made_total", "Made.", kind=kind).kind == "counter"  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`_total` belongs on counters"):
        MetricSpec("trainwatch_made", "Made.", kind=kind)  # type: ignore[arg-type]


def test_a_spec_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        metrics.GPU_POWER.help = "changed"  # type: ignore[misc]


def test_a_counter_family_is_told_by_the_kinds_value() -> None:
    kind = "counter-".rstrip("-")  # equal to "counter", not the same object
    family = Family(MetricSpec("trainwatch_made_total", "Made.", kind=kind))  # type: ignore[arg-type]
    assert family.name == "trainwatch_made" and family.type == "counter"


@pytest.mark.parametrize("kind", ["gauge", "untyped"])
def test_only_a_counter_family_loses_total_whatever_its_name(kind: str) -> None:
    """By the kind alone: a spec made without MetricSpec's checks (one whose name ends in
    _total while it is no counter) keeps its name."""
    spec = SimpleNamespace(name="trainwatch_odd_total", help="Odd.", labels=(), kind=kind)
    assert Family(spec).name == "trainwatch_odd_total"  # type: ignore[arg-type]
