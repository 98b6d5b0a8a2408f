"""Computes accuracy by comparing predictions element by element."""

import torch
from common import classifier, toy_data

torch.manual_seed(0)
torch.set_num_threads(1)

model = classifier().eval()
x, y = toy_data(8192)

correct = 0
with torch.inference_mode():
    for start in range(0, len(x), 256):
        xb, yb = x[start : start + 256], y[start : start + 256]
        pred = model(xb).argmax(dim=1)
        for j in range(len(yb)):
            if pred[j].item() == yb[j].item():
                correct += 1
print(f"accuracy {correct / len(x):.3f}")
