"""Batch predictions over a dataset, forgetting torch.no_grad()."""

import torch
from common import classifier, toy_data
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

model = classifier(hidden=1024)
model.eval()
x, y = toy_data(16384)
loader = DataLoader(TensorDataset(x, y), batch_size=128)

correct = 0
for xb, yb in loader:
    pred = model(xb).argmax(dim=1)
    correct += int((pred == yb).sum())
print(f"accuracy {correct / len(x):.3f}")
