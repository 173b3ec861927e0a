"""``x_t M``: a row per decoder step times a matrix read at every step, ``∂M`` formed once per batch.

A decoder reads the same ``M`` at every step: attention keys and values (``[B, K, N]``, one per
sentence), LSTM weights (``[K, N]``, shared). Autograd forms ``∂M`` at each step (for keys, a
batched outer product ``x_tᵀ g_t`` with inner size 1) and adds it to a running sum. Here each step's
backward only records ``(x_t, g_t)``, and ``∂M = Σ_t x_tᵀ g_t`` is one product over all steps,
formed after the last step's backward: the same numbers, fewer and larger products.

Use: ``M = read_every_step(M)`` once per sentence batch, then ``step_product(x_t, M)`` per step.
"""
from typing import List, Tuple

import torch
from torch import Tensor

Tape = List[Tuple[Tensor, Tensor]]


class _SumOfSteps(torch.autograd.Function):
    """Identity on ``M``; its backward runs after every step's and adds ``Σ_t x_tᵀ g_t`` to ``∂M``."""

    @staticmethod
    def forward(ctx, matrix: Tensor, tape: Tape):
        ctx.tape = tape
        return matrix.view_as(matrix)

    @staticmethod
    def backward(ctx, grad: Tensor):
        if ctx.tape:
            rows, grads = zip(*ctx.tape)
            ctx.tape.clear()
            if grad.dim() == 3:  # per sentence: Σ_t x_tᵀ g_t for each b
                grad = torch.baddbmm(grad, torch.stack(rows, dim=2), torch.stack(grads, dim=1))
            else:  # shared: summed over steps and sentences
                grad = torch.addmm(grad, torch.cat(rows).t(), torch.cat(grads))
        return grad, None


class _StepProduct(torch.autograd.Function):
    """``[B, K] x M -> [B, N]``; backward: ``∂x_t = g_t Mᵀ``, and ``(x_t, g_t)`` to the tape."""

    @staticmethod
    def forward(ctx, row: Tensor, matrix: Tensor, tape: Tape):
        ctx.save_for_backward(row, matrix)
        ctx.tape = tape
        return _product(row, matrix)

    @staticmethod
    def backward(ctx, grad: Tensor):
        row, matrix = ctx.saved_tensors
        ctx.tape.append((row, grad))
        grad_row = _product(grad, matrix.transpose(-2, -1)) if ctx.needs_input_grad[0] else None
        return grad_row, None, None


def _product(row: Tensor, matrix: Tensor) -> Tensor:
    if matrix.dim() == 2:
        return row @ matrix
    return torch.bmm(row.unsqueeze(1), matrix).squeeze(1)


def read_every_step(matrix: Tensor) -> Tensor:
    """``M`` (``[B, K, N]`` or ``[K, N]``) as :func:`step_product` reads it, its gradient formed once."""
    if not (torch.is_grad_enabled() and matrix.requires_grad):
        return matrix
    tape: Tape = []
    out = _SumOfSteps.apply(matrix, tape)
    out.step_tape = tape
    return out


def step_product(row: Tensor, matrix: Tensor) -> Tensor:
    """``x_t M``: ``[B, K] x [B, K, N]`` or ``[B, K] x [K, N]`` -> ``[B, N]``."""
    tape = getattr(matrix, "step_tape", None)
    if tape is None or not torch.is_grad_enabled():
        return _product(row, matrix)
    return _StepProduct.apply(row, matrix, tape)
