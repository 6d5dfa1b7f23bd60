"""flops' parsers and the way a model is called on a batch, without torch: the settings' bounds
both ways, the frameworks' precisions, model_call's shapes of a batch, the labels retry and the
scalar a measurement differentiates."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from trial_instrumentation import flops


def test_each_precision_with_a_peak_is_taken_and_nothing_else() -> None:
    for name in ("fp8", "bf16", "fp16", "tf32", "fp32"):
        assert flops.precision(name) == name
    for bad in ("int8", "BF16", "", "fp64"):
        with pytest.raises(ValueError, match="expected one of fp8, bf16, fp16, tf32, fp32"):
            flops.precision(bad)


def test_a_flops_figure_is_a_finite_positive_number() -> None:
    assert flops.flops_per_sample("6.1e9") == 6.1e9
    assert flops.flops_per_sample(0.25) == 0.25
    assert flops.flops_per_sample(1e308) == 1e308
    for bad in (0, "0", -3.5, float("inf"), float("-inf"), float("nan")):
        with pytest.raises(ValueError, match="finite number of FLOPs > 0"):
            flops.flops_per_sample(bad)


def test_six_parameters_tokens_and_both_sizes_must_be_positive() -> None:
    assert flops.transformer_flops_per_sample(parameters=7, tokens_per_sample=3) == 126.0
    assert flops.transformer_flops_per_sample(1, 1) == 6.0
    for parameters, tokens in ((0, 5), (5, 0), (-1, 5), (5, -1)):
        with pytest.raises(ValueError, match="must be > 0"):
            flops.transformer_flops_per_sample(parameters, tokens)


def test_the_frameworks_precision_names_map_to_the_peaks() -> None:
    assert {p: flops.lightning_precision(p) for p in (
        "bf16-mixed", "bf16-true", "16-mixed", "16-true", "32-true", "transformer-engine",
        "transformer-engine-float16", "64-true", "bf16")} == {
        "bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16", "16-true": "fp16",
        "32-true": "fp32", "transformer-engine": "fp8", "transformer-engine-float16": "fp8",
        "64-true": None, "bf16": None}
    assert flops.lightning_precision(32) is None
    # The first flag set wins, in the order bf16, fp16, tf32; none set (or absent) is fp32.
    args = SimpleNamespace
    assert flops.transformers_precision(args(bf16=True, fp16=True, tf32=True)) == "bf16"
    assert flops.transformers_precision(args(bf16=False, fp16=True, tf32=True)) == "fp16"
    assert flops.transformers_precision(args(bf16=False, fp16=False, tf32=True)) == "tf32"
    assert flops.transformers_precision(args(bf16=False, fp16=False, tf32=False)) == "fp32"
    assert flops.transformers_precision(args()) == "fp32"


class Example:
    def __init__(self, example: Any) -> None:
        self.example_input_array = example


def test_a_batch_becomes_the_models_arguments() -> None:
    assert flops.model_call(None, ("x", "y")) == (("x",), {})
    assert flops.model_call(None, ["x", "y", "z"]) == (("x",), {})
    assert flops.model_call(None, {"input_ids": 1, "labels": 2}) == ((), {"input_ids": 1,
                                                                           "labels": 2})
    assert flops.model_call(None, "x") == (("x",), {})
    assert flops.model_call(None, 0) == ((0,), {})


def test_without_a_batch_the_example_input_array_is_used() -> None:
    assert flops.model_call(Example("x"), None) == (("x",), {})
    assert flops.model_call(Example(("x", "y")), None) == (("x", "y"), {})
    assert flops.model_call(Example(["x", "y"]), None) == ((["x", "y"],), {})
    assert flops.model_call(Example({"a": 1}), None) == ((), {"a": 1})
    for model in (object(), Example(None)):
        with pytest.raises(ValueError, match="no batch, and the model has no example_input"):
            flops.model_call(model, None)


def test_a_model_that_takes_no_labels_is_called_again_without_them() -> None:
    calls: list[dict[str, Any]] = []

    def model(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        if "labels" in kwargs:
            raise TypeError("forward() got an unexpected keyword argument 'labels'")
        return "out"

    assert flops._forward(model, (), {"x": 1, "labels": 2}) == "out"
    assert calls == [{"x": 1, "labels": 2}, {"x": 1}]
    # Every other keyword is kept, whatever its place in order; a key made at run time (a
    # collated batch's, read from a file) is "labels" as much as a literal is.
    calls.clear()
    labels = "LABELS".lower()
    assert flops._forward(model, ("t",), {"attention_mask": 3, labels: 4, "zeta": 5}) == "out"
    assert calls == [{"attention_mask": 3, "labels": 4, "zeta": 5},
                     {"attention_mask": 3, "zeta": 5}]


def test_another_type_error_is_the_models_own_and_not_retried() -> None:
    calls: list[dict[str, Any]] = []

    def model(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        raise TypeError("bad shape for labels")

    with pytest.raises(TypeError, match="bad shape"):  # no labels given: nothing to retry
        flops._forward(model, ("x",), {"y": 1})
    assert calls == [{"y": 1}]

    def other(*args: Any, **kwargs: Any) -> str:
        calls.append(kwargs)
        raise TypeError("bad shape")

    calls.clear()
    with pytest.raises(TypeError, match="bad shape"):  # labels given, the error not theirs
        flops._forward(other, (), {"labels": 1})
    assert calls == [{"labels": 1}]


class Sums:
    """A stand-in tensor: its sum is itself, tagged."""

    def __init__(self, name: str) -> None:
        self.name = name

    def sum(self) -> str:
        return f"sum of {self.name}"


def test_the_scalar_is_the_loss_else_the_first_output_summed() -> None:
    assert flops._scalar({"loss": Sums("loss"), "logits": Sums("logits")}) == "sum of loss"
    assert flops._scalar({"logits": Sums("logits"), "loss": Sums("loss")}) == "sum of loss"
    assert flops._scalar({"loss": None, "logits": Sums("logits")}) == "sum of logits"
    assert flops._scalar({"past": None, "logits": Sums("logits"),
                          "hidden": Sums("hidden")}) == "sum of logits"
    assert flops._scalar((Sums("first"), Sums("second"))) == "sum of first"
    assert flops._scalar([[Sums("inner"), Sums("other")], Sums("second")]) == "sum of inner"
    assert flops._scalar(Sums("out")) == "sum of out"


def linear(frozen: bool = False) -> Any:
    """One 8 -> 16 layer without bias: 2 x 8 x 16 FLOPs forward per sample, as many backward
    (the weight's gradient; the input needs none)."""
    torch = pytest.importorskip("torch")
    layer = torch.nn.Linear(8, 16, bias=False)
    layer.requires_grad_(not frozen)
    return layer


def test_the_count_is_per_sample_as_given_or_as_the_batch_holds() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 8)
    assert flops.measure_flops_per_sample(linear(), x) == 2 * 2 * 8 * 16
    assert flops.measure_flops_per_sample(linear(), x, samples=3) == 2 * 2 * 2 * 8 * 16 / 3
    assert flops.measure_flops_per_sample(linear(), x, samples=1) == 2 * 2 * 2 * 8 * 16
    for bad in (0, -2):
        with pytest.raises(ValueError, match="samples must be > 0"):
            flops.measure_flops_per_sample(linear(), x, samples=bad)


def test_a_frozen_model_is_counted_forward_only() -> None:
    torch = pytest.importorskip("torch")
    assert flops.measure_flops_per_sample(linear(frozen=True), torch.randn(3, 8)) == 2 * 8 * 16


def test_a_given_loss_is_what_is_differentiated() -> None:
    torch = pytest.importorskip("torch")
    seen: list[Any] = []

    def loss(out: Any) -> Any:
        seen.append(out.shape)
        return out.square().sum()

    assert flops.measure_flops_per_sample(linear(), torch.randn(5, 8), loss=loss) == 2 * 2 * 8 * 16
    assert seen == [torch.Size([5, 16])]


def test_without_a_batch_the_examples_or_the_keywords_give_the_sample_count() -> None:
    torch = pytest.importorskip("torch")
    model = linear()
    model.example_input_array = torch.randn(5, 8)
    assert flops.measure_flops_per_sample(model, None) == 2 * 2 * 8 * 16

    class Keywords(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = linear()

        def forward(self, features: Any) -> Any:
            return self.layer(features)

    keywords = Keywords()
    keywords.example_input_array = {"features": torch.randn(4, 8)}
    assert flops.measure_flops_per_sample(keywords, None) == 2 * 2 * 8 * 16
    assert flops.measure_flops_per_sample(keywords, {"features": torch.randn(3, 8)}) == \
        2 * 2 * 8 * 16


def test_the_gradients_are_put_back_as_they_were() -> None:
    torch = pytest.importorskip("torch")
    fresh = linear()
    flops.measure_flops_per_sample(fresh, torch.randn(2, 8))
    assert fresh.weight.grad is None
    trained = linear()
    before = torch.full_like(trained.weight, 0.5)
    trained.weight.grad = before
    flops.measure_flops_per_sample(trained, torch.randn(2, 8))
    assert trained.weight.grad is before and bool((before == 0.5).all())


def test_the_model_and_batch_may_be_named_and_the_options_must_be() -> None:
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 8)
    assert flops.measure_flops_per_sample(model=linear(), batch=x, samples=4) == 2 * 8 * 16
    with pytest.raises(TypeError):
        flops.measure_flops_per_sample(linear(), x, 4)  # type: ignore[misc]
