"""Scores a set of inputs one at a time."""

import torch
from common import classifier, toy_data

torch.manual_seed(0)
torch.set_num_threads(1)

model = classifier(hidden=512).eval()
inputs, _ = toy_data(3000)

scores = []
with torch.inference_mode():
    for i in range(len(inputs)):
        logits = model(inputs[i : i + 1])
        scores.append(logits.softmax(dim=1)[0, 1])
print("mean score", float(torch.stack(scores).mean()))
