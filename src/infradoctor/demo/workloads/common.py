"""The small model the demo workloads share: an MLP classifier built in code (nothing is downloaded)."""

import torch
from torch import nn

IN_FEATURES = 256
CLASSES = 10


def build_model(hidden: int = 512) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(IN_FEATURES, hidden),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, CLASSES),
    )
