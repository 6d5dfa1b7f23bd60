"""An unmodified Hugging Face ``Trainer`` script (a tiny BERT from a config, CPU, nothing
downloaded): nothing of trainwatch in it. Prints the optimizer steps it ran."""

from __future__ import annotations

import sys
import tempfile

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainingArguments,
    default_data_collator,
)

VOCAB, LENGTH, BATCH = 100, 16, 8


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1, VOCAB, (steps * BATCH, LENGTH), generator=generator)
    labels = torch.randint(0, 2, (steps * BATCH,), generator=generator)
    data = [{"input_ids": i, "attention_mask": torch.ones(LENGTH, dtype=torch.long),
             "labels": label} for i, label in zip(ids, labels, strict=True)]
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=LENGTH, num_labels=2))
    with tempfile.TemporaryDirectory() as output:
        trainer = Trainer(model=model, train_dataset=data, data_collator=default_data_collator,
                          args=TrainingArguments(
                              output_dir=output, use_cpu=True, report_to=[],
                              save_strategy="no", max_steps=steps,
                              per_device_train_batch_size=BATCH, disable_tqdm=True,
                              dataloader_num_workers=0))
        trainer.train()
    print(f"optimizer steps {trainer.state.global_step}", flush=True)


if __name__ == "__main__":
    main()
