"""robrank's rc2f2 backbone in PyTorch (its MetricTemplate28, embedding 512) and the unit-norm wrapper the
EST bench scripts train and score it through (robrank's metric "N")."""
import torch as th
import torch.nn.functional as F


def rc2f2():
    return th.nn.Sequential(
        th.nn.Conv2d(1, 32, 5, padding=2), th.nn.ReLU(), th.nn.MaxPool2d(2, 2),
        th.nn.Conv2d(32, 64, 5, padding=2), th.nn.ReLU(), th.nn.MaxPool2d(2, 2),
        th.nn.Flatten(), th.nn.Linear(64 * 7 * 7, 1024), th.nn.ReLU(), th.nn.Linear(1024, 512))


class L2(th.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return F.normalize(self.m(x.view(-1, 1, 28, 28)), dim=-1)
