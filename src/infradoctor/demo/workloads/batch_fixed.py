"""Batch scoring job after the fix: eval mode, inference_mode, and batches of 256 records."""

import sys
import time

import torch

from common import IN_FEATURES, build_model

torch.set_num_threads(1)
records = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
BATCH = 256

model = build_model().eval()
generator = torch.Generator().manual_seed(1)
table = torch.randn(records, IN_FEATURES, generator=generator)

start = time.perf_counter()
predictions = []
with torch.inference_mode():
    for batch in table.split(BATCH):
        logits = model(batch)
        predictions.append(logits.argmax(dim=1))
labels = torch.cat(predictions).tolist()
elapsed = time.perf_counter() - start
print(f"scored {len(labels)} records in {elapsed:.2f} s ({len(labels) / elapsed:.0f} records/s)")
