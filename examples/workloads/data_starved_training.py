"""Training whose Dataset reads every sample from slow storage, with the DataLoader's default num_workers=0."""

import sys
import time

import torch
from common import classifier, toy_data
from torch import nn
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
torch.set_num_threads(1)


class RemoteSamples(Dataset):
    """Each item is fetched from (simulated) network storage: ~1 ms of latency per sample."""

    def __init__(self):
        self.x, self.y = toy_data(2048)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(0.001)  # stands in for reading and decoding one file
        return self.x[i], self.y[i]


model = classifier()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
loader = DataLoader(RemoteSamples(), batch_size=32, shuffle=True)

for step, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 20 == 0:
        print(f"step {step} loss {loss.item():.3f}")
    if step == 50:
        break
sys.exit(0)
