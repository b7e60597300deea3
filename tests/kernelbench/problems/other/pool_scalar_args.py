import torch
import torch.nn as nn


class Model(nn.Module):
    """Max pooling times a buffer and a float argument; two outputs, one cut by an int argument."""

    def __init__(self, channels):
        super().__init__()
        self.pool = nn.MaxPool2d(3, stride=2)
        self.register_buffer("scale", torch.ones(channels, 1, 1))

    def forward(self, x, alpha, n):
        y = self.pool(x) * self.scale * alpha
        return y.flatten(1)[:, :n], y.sum(dim=1)


batch = 4
channels = 8
size = 33
alpha = 0.5


def get_inputs():
    return [torch.randn(batch, channels, size, size), alpha, size]


def get_init_inputs():
    return [channels]
