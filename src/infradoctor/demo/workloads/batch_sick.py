"""Batch scoring job: scores every record of a table with the classifier (as first written)."""

import sys
import time

import torch

from common import IN_FEATURES, build_model

torch.set_num_threads(1)
records = int(sys.argv[1]) if len(sys.argv) > 1 else 3000

model = build_model()
generator = torch.Generator().manual_seed(1)
table = torch.randn(records, IN_FEATURES, generator=generator)

start = time.perf_counter()
predictions = []
for i in range(len(table)):
    row = table[i].unsqueeze(0)
    logits = model(row)
    predictions.append(int(logits.argmax(dim=1)))
elapsed = time.perf_counter() - start
print(f"scored {len(predictions)} records in {elapsed:.2f} s ({len(predictions) / elapsed:.0f} records/s)")
