"""Batch scoring that loads the checkpoint for every batch."""

import os
import tempfile

import torch
from common import classifier, toy_data
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

checkpoint = os.path.join(tempfile.mkdtemp(), "model.pt")
torch.save(classifier(hidden=1024).state_dict(), checkpoint)

x, y = toy_data(4096)
loader = DataLoader(TensorDataset(x, y), batch_size=128)


def predict(batch):
    model = classifier(hidden=1024)
    model.load_state_dict(torch.load(checkpoint, weights_only=True))
    model.eval()
    with torch.inference_mode():
        return model(batch).argmax(dim=1)


correct = 0
for xb, yb in loader:
    correct += int((predict(xb) == yb).sum())
print(f"accuracy {correct / len(x):.3f}")
