"""The model's training FLOPs per sample: the numerator of model FLOPs utilization (MFU).

MFU (PaLM, appendix B) is samples/s x the model's FLOPs per sample (forward + backward, no
recomputation) over the GPUs' peak. The trial publishes its FLOPs per sample and the precision
it trains in (``trainwatch_trial_model_flops_per_sample{precision}``); the exporter publishes
the peaks (``trainwatch_gpu_peak_flops{dtype}``); a recording rule divides.

Three ways to get the figure:

- you know it: ``Trial(flops_per_sample=..., precision="bf16")``;
- count it: :func:`measure_flops_per_sample` runs one forward + backward of your model on one
  batch under ``torch.utils.flop_counter.FlopCounterMode`` (matmuls, convolutions, attention:
  the operators that dominate; elementwise ops are not counted);
- estimate it, for a decoder-only transformer: :func:`transformer_flops_per_sample`, the usual
  6 x parameters x tokens (2 forward, 4 backward per parameter and token; attention's own
  FLOPs left out, which undercounts long sequences).

>>> transformer_flops_per_sample(parameters=124_000_000, tokens_per_sample=1024)
761856000000.0
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# The precision the model's matmuls run in, as the exporter's peak table names it.
PRECISIONS = ("fp8", "bf16", "fp16", "tf32", "fp32")


# Lightning's Trainer(precision=...) as Trainer.precision says it -> the matmuls' precision.
_LIGHTNING = {"bf16-mixed": "bf16", "bf16-true": "bf16", "16-mixed": "fp16", "16-true": "fp16",
              "32-true": "fp32", "transformer-engine": "fp8",
              "transformer-engine-float16": "fp8"}


def lightning_precision(trainer_precision: object) -> str | None:
    """``Trainer.precision`` ("bf16-mixed", "16-mixed", "32-true"...) as a precision of
    :data:`PRECISIONS`; None for one without a peak (``64-true``).

    >>> lightning_precision("bf16-mixed"), lightning_precision("64-true")
    ('bf16', None)
    """
    return _LIGHTNING.get(str(trainer_precision))


def transformers_precision(args: Any) -> str:
    """The Hugging Face ``TrainingArguments``' precision: bf16, fp16, tf32 or fp32."""
    for flag in ("bf16", "fp16", "tf32"):
        if getattr(args, flag, False):
            return flag
    return "fp32"


def precision(value: str) -> str:
    """``value`` if it names a precision of :data:`PRECISIONS`, else ValueError."""
    if value not in PRECISIONS:
        raise ValueError(f"expected one of {', '.join(PRECISIONS)}")
    return value


def flops_per_sample(value: str | float) -> float:
    """A FLOPs figure: a finite number > 0 (``"6.1e9"`` from the environment is fine)."""
    number = float(value)
    if not 0 < number < float("inf"):
        raise ValueError("must be a finite number of FLOPs > 0")
    return number


def transformer_flops_per_sample(parameters: int, tokens_per_sample: int) -> float:
    """6 x ``parameters`` x ``tokens_per_sample``: training FLOPs of a dense decoder-only
    transformer (Kaplan et al. 2020; PaLM appendix B without the attention term)."""
    if parameters <= 0 or tokens_per_sample <= 0:
        raise ValueError("parameters and tokens_per_sample must be > 0")
    return 6.0 * parameters * tokens_per_sample


def model_call(model: Any, batch: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The positional and keyword arguments ``model`` is called with on a loader's ``batch``:
    a tuple or list (``(x, y)``) gives its first element, the input; a mapping (Hugging Face's
    ``input_ids``, ``attention_mask``, ``labels``) is passed as keywords, ``model(**batch)``;
    anything else is the input itself. A LightningModule given no batch (``None``) is called on
    its ``example_input_array``.

    >>> model_call(None, ("x", "y")), model_call(None, {"input_ids": 1})
    ((('x',), {}), ((), {'input_ids': 1}))
    """
    if batch is None:
        example = getattr(model, "example_input_array", None)
        if example is None:
            raise ValueError("no batch, and the model has no example_input_array")
        if isinstance(example, Mapping):
            return (), dict(example)
        return (tuple(example) if isinstance(example, tuple) else (example,)), {}
    if isinstance(batch, Mapping):
        return (), dict(batch)
    if isinstance(batch, (tuple, list)):
        return (batch[0],), {}
    return (batch,), {}


def _forward(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``model(*args, **kwargs)``; a model that takes no ``labels`` is called without them."""
    try:
        return model(*args, **kwargs)
    except TypeError as err:
        if "labels" not in kwargs or "labels" not in str(err):
            raise
        return model(*args, **{k: v for k, v in kwargs.items() if k != "labels"})


def _scalar(out: Any) -> Any:
    """What to differentiate by default: the output's ``loss`` where it has one (a Hugging
    Face output given labels), else the sum of its first tensor."""
    if isinstance(out, Mapping):
        loss = out.get("loss")
        out = loss if loss is not None else next(v for v in out.values() if v is not None)
    while isinstance(out, (tuple, list)):
        out = out[0]
    return out.sum()


def measure_flops_per_sample(model: Any, batch: Any, *, samples: int | None = None,
                             loss: Callable[[Any], Any] | None = None) -> float:
    """FLOPs of one training step per sample, counted over one forward + backward of ``model``
    on ``batch`` (already on the device you train on) with ``FlopCounterMode``.

    ``batch`` is what the training loader yields (:func:`model_call` picks the model's inputs
    from it: ``(x, y)`` -> ``model(x)``, a dict -> ``model(**batch)``). ``loss`` turns the
    output into the scalar to differentiate (default: its ``loss``, else its sum; its own FLOPs
    are not counted); ``samples`` defaults to the batch's size (as ``Trial.loader`` counts it).
    The model's ``.grad`` tensors are put back as they were: nothing of the measurement is left
    behind. No optimizer step runs (its FLOPs are not the model's).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from trial_instrumentation.loader import batch_size_of  # loader imports config, config us

    args, kwargs = model_call(model, batch)
    count = samples if samples is not None else batch_size_of(
        batch if batch is not None else (args or tuple(kwargs.values())))
    if count <= 0:
        raise ValueError("samples must be > 0")
    params = [p for p in model.parameters() if p.requires_grad]
    saved = [p.grad for p in params]
    for p in params:
        p.grad = None  # else backward adds into the user's gradient tensors in place
    try:
        with FlopCounterMode(display=False) as counter:
            out = _forward(model, args, kwargs)
            value = loss(out) if loss is not None else _scalar(out)
            if params:
                torch.autograd.backward(value, inputs=params)
        return float(counter.get_total_flops()) / count
    finally:
        for p, grad in zip(params, saved, strict=True):
            p.grad = grad
