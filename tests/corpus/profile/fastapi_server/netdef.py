# The served model for the corpus FastAPI server: the MNIST example's Net, reduced from
# pytorch/examples@77f55b912142e11fcfdf5b530231fb9c52f181e8:mnist/main.py (BSD-3-Clause). It lives in its own
# module so that torch.load of the whole pickled model can import its class.
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def ensure_model_file():
    """Corpus setup: the served repository ships a model.pt; here one is written (untrained Net) when missing."""
    path = os.environ.get("MODEL_PATH", os.path.join(tempfile.gettempdir(), "corpus-server-model.pt"))
    if not os.path.exists(path):
        torch.manual_seed(0)
        torch.save(Net(), path)
    return path
