"""A healthy training loop: in-memory data, batched, loss read once per 50 steps. `--out PATH` saves results."""

import sys

import torch
from common import classifier, toy_data
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_num_threads(1)

model = classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
x, y = toy_data(8192)
loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True)

for epoch in range(2):
    for step, (xb, yb) in enumerate(loader):
        loss = loss_fn(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0:
            print(f"epoch {epoch} step {step} loss {loss.item():.3f}")

model.eval()
with torch.inference_mode():
    logits = model(x[:512])
if "--out" in sys.argv:
    torch.save({"logits": logits, "state": model.state_dict()}, sys.argv[sys.argv.index("--out") + 1])
