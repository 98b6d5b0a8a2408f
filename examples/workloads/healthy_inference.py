"""A healthy batch inference job: eval(), inference_mode, large batches, results read once per batch."""

import sys

import torch
from common import classifier, toy_data
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

model = classifier(hidden=1024).eval()
x, y = toy_data(32768)
loader = DataLoader(TensorDataset(x, y), batch_size=256)

predictions = []
with torch.inference_mode():
    for xb, _ in loader:
        predictions.append(model(xb).argmax(dim=1))
pred = torch.cat(predictions)
print(f"accuracy {(pred == y).float().mean().item():.3f}")
if "--out" in sys.argv:
    torch.save(pred, sys.argv[sys.argv.index("--out") + 1])
