"""A Hugging Face ``Trainer`` timed by trainwatch: one callback, the model and loop unchanged.

    .venv/bin/python examples/transformers_train.py --steps 40 --loader-delay 0.02 \\
        --pushgateway http://127.0.0.1:9091 --experiment demo --trial bert
    .venv/bin/torchrun --nproc-per-node 2 examples/transformers_train.py ...   # 2 CPU ranks (gloo)

Needs ``pip install 'trainwatch[transformers]'``. A tiny BERT built from a config (nothing is
downloaded) classifies random token sequences; ``--loader-delay`` sleeps once per batch in the
data collator. Each rank pushes its own group (rank from TrainingArguments). Trial settings
left off the command line come from TRAINWATCH_*.
"""

from __future__ import annotations

import argparse
import functools
import logging
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

from trial_instrumentation.transformers import TrainwatchCallback

log = logging.getLogger("transformers_train")
VOCAB, LENGTH = 100, 16


def slow_collate(features: list[dict[str, Any]], delay: float) -> dict[str, Any]:
    """Collates a batch after sleeping ``delay``: a loader that costs ``delay`` per batch."""
    time.sleep(delay)
    return default_data_collator(features)


def make_dataset(samples: int) -> list[dict[str, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, VOCAB, (samples, LENGTH), generator=generator)
    labels = torch.randint(0, 2, (samples,), generator=generator)
    return [{"input_ids": i, "attention_mask": torch.ones(LENGTH, dtype=torch.long),
             "labels": label} for i, label in zip(ids, labels)]


def make_model() -> BertForSequenceClassification:
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=2))


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps per rank")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--loader-delay", type=float, default=0.0,
                        help="seconds slept per batch in the collator (a slow loader)")
    parser.add_argument("--experiment", help="default: $TRAINWATCH_EXPERIMENT")
    parser.add_argument("--trial", help="default: $TRAINWATCH_TRIAL")
    parser.add_argument("--pushgateway", help="default: $TRAINWATCH_PUSHGATEWAY (unset: no-op)")
    parser.add_argument("--push-interval", type=float, help="seconds; default 10")
    parser.add_argument("--measure-limits", type=float, metavar="SECONDS",
                        help="measure the loader's and the step's limits for this long each "
                        "when training starts (default: not)")
    args = parser.parse_args(argv)
    if min(args.steps, args.batch_size) < 1 or args.loader_delay < 0:
        parser.error("--steps and --batch-size must be >= 1, --loader-delay >= 0")
    return args


def make_trainer(args: argparse.Namespace, output_dir: str, world_size: int = 1) -> Trainer:
    trainwatch = TrainwatchCallback(experiment=args.experiment, trial=args.trial,
                                    pushgateway=args.pushgateway,
                                    push_interval=args.push_interval,
                                    measure_limits=args.measure_limits)
    training = TrainingArguments(
        output_dir=output_dir, use_cpu=True, report_to=[], save_strategy="no",
        max_steps=args.steps, per_device_train_batch_size=args.batch_size, logging_steps=1,
        lr_scheduler_type="linear", disable_tqdm=True, dataloader_num_workers=0)
    samples = args.steps * args.batch_size * world_size
    return Trainer(model=make_model(), args=training, train_dataset=make_dataset(samples),
                   data_collator=functools.partial(slow_collate, delay=args.loader_delay),
                   callbacks=[trainwatch])


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parse_args(argv)
    world = int(__import__("os").environ.get("WORLD_SIZE", "1"))
    with tempfile.TemporaryDirectory() as output_dir:
        trainer = make_trainer(args, output_dir, world)
        trainer.train()
    log.info("trained %d steps", trainer.state.global_step)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
