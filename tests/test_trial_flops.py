"""The model's FLOPs per sample: given to Trial, counted with FlopCounterMode, or estimated as
6 x parameters x tokens; published as trainwatch_trial_model_flops_per_sample{precision}."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from trial_instrumentation import Trial, names
from trial_instrumentation.flops import measure_flops_per_sample, transformer_flops_per_sample

torch = pytest.importorskip("torch")
KEY = {"experiment": "e", "trial": "t", "rank": "0"}


def published(trial: Trial, precision: str) -> float | None:
    return trial.registry.get_sample_value(names.MODEL_FLOPS, {**KEY, "precision": precision})


def mlp(widths: tuple[int, ...]) -> Any:
    layers: list[Any] = []
    for fan_in, fan_out in itertools.pairwise(widths):
        layers += [torch.nn.Linear(fan_in, fan_out), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def test_the_counter_matches_the_analytic_count_of_an_mlp_within_one_percent() -> None:
    # Forward: 2 x in x out per linear layer and sample; backward twice that (the gradients of
    # the weights and of the layer's input). The first layer's input needs no gradient, which
    # the counter rightly leaves out: a narrow first layer keeps that under 1%.
    widths = (16, 512, 512, 256, 10)
    forward = sum(2 * i * o for i, o in itertools.pairwise(widths))
    counted = measure_flops_per_sample(mlp(widths), torch.randn(32, widths[0]))
    assert counted == pytest.approx(3 * forward, rel=0.01)


def test_the_measurement_leaves_the_gradients_as_they_were() -> None:
    model = mlp((4, 8, 2))
    model(torch.randn(3, 4)).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    measure_flops_per_sample(model, torch.randn(5, 4), samples=5,
                             loss=lambda out: out.square().mean())
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before))
    fresh = mlp((4, 8, 2))
    measure_flops_per_sample(fresh, torch.randn(5, 4))
    assert all(p.grad is None for p in fresh.parameters())


def test_six_n_tokens_is_within_its_documented_tolerance_of_the_counted_figure() -> None:
    # A tiny decoder block stack whose sequence is short next to its width: attention's own
    # FLOPs (left out of 6ND) are 2 x seq / (12 x width) of the total here, under 5%.
    width, seq, layers = 256, 32, 2
    block = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
    params = sum(p.numel() for p in model.parameters() if p.dim() == 2)  # matmul weights
    counted = measure_flops_per_sample(model, torch.randn(4, seq, width))
    assert transformer_flops_per_sample(params, seq) == pytest.approx(counted, rel=0.10)


def test_a_trial_publishes_its_flops_per_sample_with_its_precision() -> None:
    trial = Trial("e", "t", pull_port=0, flops_per_sample=6.1e9, precision="bf16")
    assert published(trial, "bf16") == 6.1e9
    trial.set_flops_per_sample(7e9, "fp8")
    assert published(trial, "fp8") == 7e9 and published(trial, "bf16") is None
    counted = trial.measure_flops_per_sample(mlp((8, 16)), torch.randn(2, 8), "fp32")
    # One layer: forward 2 x 8 x 16, backward only the weights' gradient (the input needs none).
    assert published(trial, "fp32") == counted == pytest.approx(2 * 2 * 8 * 16, rel=0.01)


def test_no_figure_no_series() -> None:
    trial = Trial("e", "t", pull_port=0)
    assert [m for m in trial.registry.collect() if m.name == names.MODEL_FLOPS] == []


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"flops_per_sample": 1e9}, "precision= is required"),
    ({"flops_per_sample": 1e9, "precision": "int4"}, "argument precision="),
    ({"flops_per_sample": -1.0, "precision": "bf16"}, "argument flops_per_sample="),
    ({"flops_per_sample": float("nan"), "precision": "bf16"}, "argument flops_per_sample="),
])
def test_bad_flops_settings_fail_at_creation(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Trial("e", "t", pull_port=0, **kwargs)  # type: ignore[arg-type]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_bf16_matmul_loop_on_a_real_gpu_stays_under_its_datasheet_peak() -> None:
    """Counted FLOPs x measured samples/s over the datasheet's dense bf16 peak: a figure over
    1 means the table or the counter is wrong, one under 0.2 that a large bf16 matmul is not
    reaching the tensor cores."""
    import time

    from exporter.peak_flops import PEAK_FLOPS

    name = torch.cuda.get_device_name()
    if "bf16" not in PEAK_FLOPS.get(name, {}):
        pytest.skip(f"no bf16 peak in the table for {name!r}")
    width, batch_size, steps = 8192, 8192, 20
    model = mlp((width, width, width, width)).cuda()
    batch = torch.randn(batch_size, width, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        counted = measure_flops_per_sample(model, batch)
        assert counted == pytest.approx(3 * 3 * 2 * width * width - 2 * width * width, rel=0.01)
        for _ in range(3):  # warm-up
            model(batch).sum().backward()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            model(batch).sum().backward()
        torch.cuda.synchronize()
    samples_per_second = steps * batch_size / (time.perf_counter() - start)
    mfu = samples_per_second * counted / PEAK_FLOPS[name]["bf16"]
    from benchmarks.gpu_check import figure

    figure(f"bf16 matmul loop MFU on {name} ({PEAK_FLOPS[name]['bf16'] / 1e12:.0f} TFLOP/s "
           "peak)", mfu, "0.2 < MFU < 1", 0.2 < mfu < 1.0)
    assert 0.2 < mfu < 1.0


def test_the_frameworks_precision_settings_name_the_peak_to_compare_with() -> None:
    from types import SimpleNamespace

    from trial_instrumentation.flops import lightning_precision, transformers_precision
    from trial_instrumentation.framework import callback_settings, with_precision

    assert [lightning_precision(p) for p in ("bf16-mixed", "16-mixed", "32-true", "64-true")] \
        == ["bf16", "fp16", "fp32", None]
    assert [transformers_precision(SimpleNamespace(**{flag: True}))
            for flag in ("bf16", "fp16", "tf32", "none")] == ["bf16", "fp16", "tf32", "fp32"]
    # A callback given FLOPs and no precision waits for the framework's; a given one wins.
    settings = callback_settings("e", "t", None, {"flops_per_sample": 1e9}, "the Trainer")
    assert with_precision(settings, "bf16")["precision"] == "bf16"
    assert with_precision({**settings, "precision": "fp8"}, "bf16")["precision"] == "fp8"
    assert "precision" not in with_precision({"experiment": "e"}, "bf16")


def loader_batch(dataset: Any, batch_size: int = 4) -> Any:
    return next(iter(torch.utils.data.DataLoader(dataset, batch_size=batch_size)))


def test_a_loaders_x_y_batch_counts_the_model_on_x_alone() -> None:
    model = mlp((8, 16, 4))
    x, y = torch.randn(12, 8), torch.randint(0, 4, (12,))
    batch = loader_batch(torch.utils.data.TensorDataset(x, y))
    assert isinstance(batch, list) and len(batch) == 2  # what a DataLoader yields: [x, y]
    counted = measure_flops_per_sample(model, batch)
    # Per sample, as for x alone: the targets are neither an input nor a sample count.
    assert counted == measure_flops_per_sample(model, batch[0]) > 0
    assert counted == pytest.approx(3 * 2 * 8 * 16 + 3 * 2 * 16 * 4 - 2 * 8 * 16, rel=0.01)


def test_a_hugging_face_dict_batch_is_the_models_keywords_labels_and_all() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,
                                     n_positions=16)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 64, (6, 8))
    rows = [{"input_ids": row, "attention_mask": torch.ones(8, dtype=torch.long),
             "labels": row} for row in ids]
    batch = loader_batch(rows, batch_size=3)
    counted = measure_flops_per_sample(model, batch)
    # model(**batch) with labels gives a loss to differentiate; the matmuls are those of the
    # inputs alone, 3 samples in the batch.
    alone = measure_flops_per_sample(model, {"input_ids": batch["input_ids"]})
    assert counted == pytest.approx(alone, rel=1e-6) and counted > 0
    assert measure_flops_per_sample(model, batch, samples=1) == pytest.approx(3 * counted)


def test_a_model_without_labels_is_counted_without_them() -> None:
    class Keywords(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(8, 2)

        def forward(self, features: Any) -> Any:
            return self.linear(features)

    rows = [{"features": torch.randn(8), "labels": torch.tensor(1)} for _ in range(4)]
    assert measure_flops_per_sample(Keywords(), loader_batch(rows)) == \
        pytest.approx(2 * 2 * 8 * 2, rel=0.01)


def test_a_lightning_module_without_a_batch_is_counted_on_its_example_input_array() -> None:
    lightning = pytest.importorskip("lightning")

    class Module(lightning.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = mlp((8, 16))
            self.example_input_array = torch.randn(5, 8)

        def forward(self, x: Any) -> Any:
            return self.net(x)

    module = Module()
    assert measure_flops_per_sample(module, None) == pytest.approx(2 * 2 * 8 * 16, rel=0.01)
    with pytest.raises(ValueError, match="example_input_array"):
        measure_flops_per_sample(mlp((8, 16)), None)


def test_a_failed_measurement_is_one_warning_and_never_fails_the_trial(
        caplog: pytest.LogCaptureFixture) -> None:
    model = mlp((8, 16))
    wrong = loader_batch(torch.utils.data.TensorDataset(torch.randn(4, 3), torch.zeros(4)))
    with Trial("e", "t", pull_port=0) as trial:
        assert trial.measure_flops_per_sample(model, wrong, "fp32") is None
        for batch in trial.loader([torch.randn(2, 8)] * 3):
            model(batch)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert warnings[0].startswith("trainwatch: counting the model's FLOPs failed (RuntimeError")
    assert [m for m in trial.registry.collect() if m.name == names.MODEL_FLOPS] == []
    # A bad precision is the caller's mistake, raised at once, not swallowed.
    with pytest.raises(ValueError, match="expected one of"):
        Trial("e", "t2", pull_port=0).measure_flops_per_sample(model, torch.randn(2, 8), "fp9")
