"""``step_product``: gradients of a matrix read at every step, formed once, equal autograd's per step;
the decoder's LSTM step equals ``nn.LSTMCell``."""
import pytest
import torch

from fairseq_syntax.modules.rnn_decoder import lstm_cell
from fairseq_syntax.modules.step_product import read_every_step, step_product


def recurrence(matrix, shared, start, steps, deferred):
    """A decoder-like loop: each step's row depends on the previous step's product."""
    m = read_every_step(matrix) if deferred else matrix
    w = read_every_step(shared) if deferred else shared
    row, total = start, 0
    for t in range(steps):
        if deferred:
            out, hidden = step_product(torch.softmax(row, -1), m), step_product(row, w)
        else:
            out, hidden = torch.bmm(torch.softmax(row, -1).unsqueeze(1), matrix).squeeze(1), row @ shared
        total = total + (out.pow(2).sum() + hidden.tanh().sum()) * (t + 1)
        row = row + out.sum(-1, keepdim=True) * 0.3 + hidden[:, : row.size(1)].sin()
    return total


@pytest.mark.parametrize("steps", [1, 2, 7])
def test_gradients_equal_autograds_per_step_products(steps):
    torch.manual_seed(steps)
    matrix = torch.randn(3, 5, 4, dtype=torch.double, requires_grad=True)  # per sentence [B, K, N]
    shared = torch.randn(5, 6, dtype=torch.double, requires_grad=True)  # shared [K, N]
    start = torch.randn(3, 5, dtype=torch.double, requires_grad=True)
    expected = torch.autograd.grad(recurrence(matrix, shared, start, steps, False), [matrix, shared, start])
    for _ in range(2):  # the tape is emptied by each backward: a second batch is not polluted
        got = torch.autograd.grad(recurrence(matrix, shared, start, steps, True), [matrix, shared, start])
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-12)


def test_matrix_also_used_outside_the_steps_sums_both_gradients():
    torch.manual_seed(0)
    matrix = torch.randn(2, 3, 4, dtype=torch.double, requires_grad=True)
    row = torch.randn(2, 3, dtype=torch.double)
    m = read_every_step(matrix)
    loss = step_product(row, m).sum() + (m * 2).sum()
    (grad,) = torch.autograd.grad(loss, [matrix])
    torch.testing.assert_close(grad, row.unsqueeze(-1).expand(2, 3, 4) + 2)


def test_without_gradients_it_is_a_plain_product():
    matrix = torch.randn(2, 3, 4, requires_grad=True)
    with torch.no_grad():
        m = read_every_step(matrix)
        assert m is matrix
        row = torch.randn(2, 3)
        torch.testing.assert_close(step_product(row, m), torch.einsum("bk,bkn->bn", row, matrix))


def test_lstm_cell_equals_nn_lstmcell_values_and_gradients():
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(4, 3).double()
    xs = torch.randn(5, 2, 4, dtype=torch.double, requires_grad=True)
    h0, c0 = torch.randn(2, 3, dtype=torch.double), torch.randn(2, 3, dtype=torch.double)

    def run(ours):
        weight = read_every_step(torch.cat([cell.weight_ih, cell.weight_hh], 1).t().contiguous())
        h, c, loss = h0, c0, 0
        for x in xs.unbind(0):
            h, c = lstm_cell([x, h], c, weight, cell.bias_ih + cell.bias_hh) if ours else cell(x, (h, c))
            loss = loss + (h * torch.arange(1, 4)).sum() + c.pow(2).sum()
        return loss, h, c

    params = [xs, *cell.parameters()]
    expected_loss, expected_h, expected_c = run(False)
    expected = torch.autograd.grad(expected_loss, params)
    loss, h, c = run(True)
    torch.testing.assert_close(h, expected_h)
    torch.testing.assert_close(c, expected_c)
    for g, e in zip(torch.autograd.grad(loss, params), expected):
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)
