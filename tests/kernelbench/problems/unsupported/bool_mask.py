import torch
import torch.nn as nn


class Model(nn.Module):
    """Zeroes the elements where a boolean mask is set: the mask's dtype (bool) has no task dtype."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x, mask):
        return x.masked_fill(mask, 0.0)


n = 1024


def get_inputs():
    return [torch.randn(n), torch.rand(n) > 0.5]


def get_init_inputs():
    return []
