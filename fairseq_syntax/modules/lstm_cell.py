"""The LSTM state update of ``nn.LSTM``/``nn.LSTMCell`` (gate order i, f, g, o), for the LSTMs that
run step by step (the decoder; the encoder when its memory cells are asked for)."""
from typing import Tuple

import torch
from torch import Tensor


def lstm_update(gates: Tensor, c: Tensor) -> Tuple[Tensor, Tensor]:
    """Pre-activations ``[B, 4H]`` and ``c_{t-1}`` -> ``(h_t, c_t)``:
    ``c_t = σ(f) ⊙ c_{t-1} + σ(i) ⊙ tanh(g)``, ``h_t = σ(o) ⊙ tanh(c_t)``."""
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.addcmul(torch.sigmoid(f) * c, torch.sigmoid(i), torch.tanh(g))
    return torch.sigmoid(o) * torch.tanh(c), c
