"""exporter.peak_flops alone: every datasheet figure as the table's comments quote it, the
override parser both ways (hypothesis), and the table's once-per-product log line."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter import peak_flops
from exporter.peak_flops import DTYPES, PEAK_FLOPS, PeakTable, parse_overrides

# Dense TFLOP/s per product, as the table's comments quote the datasheets.
H100_SXM = {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}
H100_NVL = {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5, "fp8": 1670.5}
A100 = {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}
DATASHEETS = {
    "NVIDIA H100 80GB HBM3": H100_SXM,
    "NVIDIA H100 PCIe": {"fp32": 51.2, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5,
                         "fp8": 1513.0},
    "NVIDIA H100 NVL": H100_NVL,
    "NVIDIA H200": H100_SXM,
    "NVIDIA H200 NVL": H100_NVL,
    "NVIDIA GH200 480GB": H100_SXM,
    "NVIDIA A100-SXM4-40GB": A100,
    "NVIDIA A100-SXM4-80GB": A100,
    "NVIDIA A100-PCIE-40GB": A100,
    "NVIDIA A100 80GB PCIe": A100,
    "NVIDIA A10": {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
    "NVIDIA A30": {"fp32": 10.3, "tf32": 82.0, "bf16": 165.0, "fp16": 165.0},
    "NVIDIA L4": {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
    "NVIDIA L40S": {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
    "NVIDIA B200": {"fp32": 75.0, "tf32": 1125.0, "bf16": 2250.0, "fp16": 2250.0,
                    "fp8": 4500.0},
    "Tesla V100-SXM2-16GB": {"fp32": 15.7, "fp16": 125.0},
    "Tesla V100-SXM2-32GB": {"fp32": 15.7, "fp16": 125.0},
    "Tesla V100-PCIE-16GB": {"fp32": 14.0, "fp16": 112.0},
    "Tesla V100-PCIE-32GB": {"fp32": 14.0, "fp16": 112.0},
    "Tesla T4": {"fp32": 8.1, "fp16": 65.0},
}


def test_every_entry_is_its_datasheets_dense_figures_in_flops() -> None:
    assert list(PEAK_FLOPS) == list(DATASHEETS)
    for name, tflops in DATASHEETS.items():
        expected = {dtype: float(round(value * 1e12)) for dtype, value in tflops.items()}
        assert PEAK_FLOPS[name] == expected, name
        assert all(type(v) is float and v == int(v) for v in PEAK_FLOPS[name].values()), name


def test_a_figure_is_rounded_to_a_whole_flop_per_second() -> None:
    assert peak_flops._peaks(0.1234567890123456) == {"fp32": 123456789012.0}
    assert peak_flops.T == 1e12


def test_half_is_bf16_and_fp16_and_fp16_alone_is_for_boards_without_bf16() -> None:
    assert peak_flops._peaks(2.0, 3.0, 5.0, 7.0) == {"fp32": 2e12, "tf32": 3e12, "bf16": 5e12,
                                                      "fp16": 5e12, "fp8": 7e12}
    assert peak_flops._peaks(2.0, fp16=11.0) == {"fp32": 2e12, "fp16": 11e12}
    assert peak_flops._peaks(2.0, half=5.0, fp16=11.0)["fp16"] == 11e12
    assert peak_flops._peaks(2.0) == {"fp32": 2e12}


def test_dtypes() -> None:
    assert DTYPES == ("fp8", "bf16", "fp16", "tf32", "fp32")


def test_overrides_parse_with_spaces_and_empty_pieces() -> None:
    assert parse_overrides("") == {}
    assert parse_overrides(" , ,") == {}
    assert parse_overrides(" bf16 = 989.4e12 ,fp8=1979e12,") == {"bf16": 989.4e12,
                                                                 "fp8": 1979e12}
    assert parse_overrides("fp32=1,fp32=2.5") == {"fp32": 2.5}  # the last one wins


@pytest.mark.parametrize(("text", "message"), [
    ("bf16", "'bf16' is not DTYPE=FLOPS with DTYPE one of fp8, bf16, fp16, tf32, fp32"),
    ("int4=1e12", "'int4=1e12' is not DTYPE=FLOPS with DTYPE one of fp8, bf16, fp16, tf32, fp32"),
    ("bf16=fast", "'bf16=fast': 'fast' is not a number"),
    ("bf16=0", "'bf16=0': the peak must be a finite number > 0"),
    ("bf16=-5e12", "'bf16=-5e12': the peak must be a finite number > 0"),
    ("bf16=inf", "'bf16=inf': the peak must be a finite number > 0"),
    ("bf16=nan", "'bf16=nan': the peak must be a finite number > 0"),
    ("fp8=1e15,tf32", "'tf32' is not DTYPE=FLOPS with DTYPE one of fp8, bf16, fp16, tf32, fp32"),
])
def test_a_bad_override_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_overrides(text)
    assert str(caught.value) == message


@given(st.dictionaries(st.sampled_from(DTYPES),
                       st.floats(min_value=1e-300, max_value=1e300, allow_nan=False)))
def test_written_overrides_read_back(peaks: dict[str, float]) -> None:
    text = ",".join(f"{dtype}={value!r}" for dtype, value in peaks.items())
    assert parse_overrides(text) == peaks


@given(st.sampled_from(DTYPES), st.floats())
def test_only_finite_positive_peaks_are_taken(dtype: str, value: float) -> None:
    text = f"{dtype}={value!r}"
    if 0 < value < math.inf:
        assert parse_overrides(text) == {dtype: value}
    else:
        with pytest.raises(ValueError, match="finite number > 0"):
            parse_overrides(text)


def test_the_smallest_positive_peak_is_taken() -> None:
    assert parse_overrides("fp32=5e-324") == {"fp32": 5e-324}
    assert parse_overrides("fp32=1.7976931348623157e308") == {"fp32": 1.7976931348623157e308}


def test_a_table_puts_the_overrides_over_the_datasheet() -> None:
    overrides = {"bf16": 1.5e15, "fp8": 3.25e15}
    table = PeakTable(overrides)
    overrides["bf16"] = 1.0  # the table keeps its own copy
    assert table.peaks("NVIDIA A10") == {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 1.5e15,
                                         "fp16": 125e12, "fp8": 3.25e15}
    assert table.peaks("Unknown") == {"bf16": 1.5e15, "fp8": 3.25e15}
    assert PeakTable().peaks("NVIDIA A10") == PEAK_FLOPS["NVIDIA A10"]
    assert PeakTable(None).peaks("Unknown") == {}


def test_an_unknown_product_is_logged_once_per_name_and_table(
        caplog: pytest.LogCaptureFixture) -> None:
    table = PeakTable()
    with caplog.at_level(logging.INFO, logger="exporter.gpu"):
        for _ in range(3):
            assert table.peaks("GPU One") == {}
            assert table.peaks("GPU Two") == {}
        assert table.peaks("Tesla T4") == PEAK_FLOPS["Tesla T4"]
        PeakTable().peaks("GPU One")  # another table (another collector) says it again
    said = [(r.levelno, r.name, r.getMessage()) for r in caplog.records]
    line = ("no peak FLOPs known for GPU product {}: trainwatch_gpu_peak_flops (and MFU) left "
            "out; give them with --gpu.peak-flops DTYPE=FLOPS")
    assert said == [(logging.INFO, "exporter.gpu", line.format("'GPU One'")),
                    (logging.INFO, "exporter.gpu", line.format("'GPU Two'")),
                    (logging.INFO, "exporter.gpu", line.format("'GPU One'"))]


def test_an_unknown_product_with_overrides_is_not_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="exporter.gpu"):
        assert PeakTable({"fp32": 2e12}).peaks("GPU One") == {"fp32": 2e12}
    assert caplog.records == []
