"""Small models and data shared by the example workloads (built in code: nothing is downloaded)."""

import torch
from torch import nn


def classifier(features: int = 64, hidden: int = 256, classes: int = 10, dropout: float = 0.0) -> nn.Module:
    layers = [nn.Linear(features, hidden), nn.ReLU()]
    if dropout:
        layers += [nn.BatchNorm1d(hidden), nn.Dropout(dropout)]
    layers += [nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)]
    return nn.Sequential(*layers)


def toy_data(n: int = 4096, features: int = 64, classes: int = 10, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, classes, generator=g)
    y = (x @ w).argmax(dim=1)
    return x, y
