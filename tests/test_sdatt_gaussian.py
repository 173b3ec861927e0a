"""The two readings of the Gaussian of Chen et al. (2017) eq. 10 (issue 15 items 1 and 8).

``scores``: eq. 10 as written, ``softmax_N(e · G)`` with ``G = exp(-M[p_i]² / 2σ²)``.
``weights``: the Gaussian on the normalised weights, ``softmax_N(e) · G`` renormalised over
the neighbourhood ``N``, which the paper's text ("the greater the distance ... the
smaller ... contribute") and Luong's local-p describe. References below are computed
in float64 from those definitions, one position at a time.
"""
import math

import pytest
import torch
from fairseq import options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf

import fairseq_syntax  # noqa: F401  (registers the plugin)
from fairseq_syntax.data.tree_tensors import PAD_DISTANCE
from fairseq_syntax.modules.local_attention import (
    DEFAULT_GAUSSIAN_READING, GAUSSIAN_READINGS, syntax_directed_weights,
)
from conftest import USER_DIR
from test_syntax_directed_attention import build


def random_rows(bsz, src_len, seed, fractional):
    """Rows ``M[p_i]`` of ``bsz`` sentences of random real lengths: integer tree
    distances 0-6 with many ties (or, ``fractional``, interpolated ones in steps of
    1/4), each row with at least one position at distance 0 (or 0.5), padding at
    ``PAD_DISTANCE``. Returns ``row`` ``[B, S]`` float and ``padding_mask`` ``[B, S]``."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, src_len + 1, (bsz,), generator=g)
    lengths[0] = src_len
    pad = torch.arange(src_len).unsqueeze(0) >= lengths.unsqueeze(1)
    if fractional:
        row = torch.randint(0, 25, (bsz, src_len), generator=g).float() / 4
    else:
        row = torch.randint(0, 7, (bsz, src_len), generator=g).float()
    centre = (torch.rand(bsz, generator=g) * lengths).long()
    row[torch.arange(bsz), centre] = 0.5 if fractional else 0.0
    return row.masked_fill(pad, float(PAD_DISTANCE)), pad


def reference_weights(scores, row, pad, n, sigma, reading):
    """Eqs. 10-11 one sentence at a time in float64: the neighbourhood is the real
    positions within ``max(n, min row)``; ``scores``: softmax of ``e · G`` over it;
    ``weights``: ``softmax(e) · G`` over it, renormalised."""
    out = torch.zeros(scores.shape, dtype=torch.float64)
    for b in range(scores.size(0)):
        real = [j for j in range(scores.size(1)) if not pad[b, j]]
        limit = max(n, min(float(row[b, j]) for j in real))
        inside = [j for j in real if float(row[b, j]) <= limit]
        e = [float(scores[b, j]) for j in inside]
        g = [math.exp(-float(row[b, j]) ** 2 / (2 * sigma ** 2)) for j in inside]
        if reading == "scores":
            z = [math.exp(x * y) for x, y in zip(e, g)]
        else:
            top = max(e)
            soft = [math.exp(x - top) for x in e]
            soft = [s / sum(soft) for s in soft]
            z = [s * y for s, y in zip(soft, g)]
        for j, v in zip(inside, z):
            out[b, j] = v / sum(z)
    return out


# ------------------------------------------------------------------- the hand-worked sign case

def test_sign_of_the_scores_decides_the_literal_reading_not_the_weights_reading():
    """Two words both scoring -2, at tree distances 0 and 4, n = 4, σ = n/2 = 2.

    scores (eq. 10 as written): logits -2 · e^0 = -2 and -2 · e^(-16/8) = -2e^-2 = -0.2707,
    weights 1 / (1 + e^(2 - 2e^-2)) = 0.1506 and 0.8494: the farther word gets more.
    weights: logits -2 - 0 and -2 - 16/8 = -4, weights 1 / (1 + e^-2) = 0.8808 and
    0.1192: the nearer word gets more, by the Gaussian ratio e^2 = 7.389.
    """
    scores = torch.tensor([[-2.0, -2.0]])
    row = torch.tensor([[0.0, 4.0]])
    pad = torch.zeros(1, 2, dtype=torch.bool)
    literal = syntax_directed_weights(scores, row, pad, 4, gaussian_on="scores")
    assert literal[0].tolist() == pytest.approx([0.1506, 0.8494], abs=1e-4)
    assert literal[0, 0].item() == pytest.approx(1 / (1 + math.exp(2 - 2 * math.exp(-2))), rel=1e-6)
    on_weights = syntax_directed_weights(scores, row, pad, 4, gaussian_on="weights")
    assert on_weights[0].tolist() == pytest.approx([0.8808, 0.1192], abs=1e-4)
    assert on_weights[0, 0].item() == pytest.approx(1 / (1 + math.exp(-2)), rel=1e-6)
    assert (on_weights[0, 0] / on_weights[0, 1]).item() == pytest.approx(math.exp(2), rel=1e-5)
    # positive scores: both readings favour the nearer word
    positive = torch.tensor([[2.0, 2.0]])
    for reading in GAUSSIAN_READINGS:
        w = syntax_directed_weights(positive, row, pad, 4, gaussian_on=reading)
        assert w[0, 0] > w[0, 1], reading


# ------------------------------------------------------------ properties of the weights reading

@pytest.mark.parametrize("fractional", [False, True])
@pytest.mark.parametrize("level", [-3.0, 0.0, 2.5])
def test_weights_reading_equal_scores_nearer_never_gets_less(fractional, level):
    """(a) With equal scores, a nearer word never gets less weight than a farther one
    (equal distances, equal weights), whatever the sign of the score. The literal
    reading breaks this for negative scores."""
    n = 4.0
    row, pad = random_rows(16, 11, seed=int(abs(level) * 10) + fractional, fractional=fractional)
    scores = torch.full(row.shape, level)
    weights = syntax_directed_weights(scores, row, pad, n, gaussian_on="weights")
    inside = weights.gt(0)
    assert torch.equal(inside, row.le(n) & ~pad)  # every row has a position at distance <= n
    pairs = 0
    for b in range(row.size(0)):
        for j in inside[b].nonzero().flatten().tolist():
            for k in inside[b].nonzero().flatten().tolist():
                if row[b, j] < row[b, k]:
                    assert weights[b, j] >= weights[b, k], (b, j, k)
                    pairs += 1
                elif row[b, j] == row[b, k]:
                    assert weights[b, j].item() == pytest.approx(weights[b, k].item(), rel=1e-6)
    assert pairs > 100
    literal = syntax_directed_weights(scores, row, pad, n, gaussian_on="scores")
    nearest, farthest = row.masked_fill(~inside, math.inf).argmin(1), row.masked_fill(~inside, -1).argmax(1)
    batch = torch.arange(row.size(0))
    spread = row[batch, nearest] < row[batch, farthest]
    assert spread.sum() > 10
    assert (weights[batch, nearest] > weights[batch, farthest])[spread].all()
    if level < 0:  # the literal reading: the farther word gains
        assert (literal[batch, nearest] < literal[batch, farthest])[spread].all()
    else:
        assert (literal[batch, nearest] >= literal[batch, farthest]).all()


@pytest.mark.parametrize("fractional", [False, True])
@pytest.mark.parametrize("n, sigma", [(4.0, None), (2.0, None), (3.0, 0.8)])
def test_weights_reading_ratio_is_softmax_ratio_times_gaussian_ratio(fractional, n, sigma):
    """(b) For any scores, for two words j, k of the neighbourhood,
    a_j / a_k = (softmax(e)_j / softmax(e)_k) · (G_j / G_k); zero outside, sum 1, and the
    whole vector equals the renormalised product computed in float64."""
    torch.manual_seed(7)
    row, pad = random_rows(12, 10, seed=11 + fractional, fractional=fractional)
    scores = 3 * torch.randn(row.shape)
    s = n / 2 if sigma is None else sigma
    weights = syntax_directed_weights(scores, row, pad, n, sigma, gaussian_on="weights")
    expected = reference_weights(scores, row, pad, n, s, "weights")
    assert torch.allclose(weights.double(), expected, rtol=1e-5, atol=1e-7)
    assert torch.allclose(weights.sum(-1), torch.ones(row.size(0)), atol=1e-6)
    assert weights.masked_select(pad).abs().max() == 0
    for b in range(row.size(0)):
        inside = weights[b].gt(0).nonzero().flatten().tolist()
        soft = torch.softmax(scores[b, inside].double(), -1)
        gauss = torch.exp(-row[b, inside].double() ** 2 / (2 * s * s))
        for x, j in enumerate(inside):
            for y, k in enumerate(inside):
                ratio = (weights[b, j] / weights[b, k]).item()
                assert ratio == pytest.approx((soft[x] / soft[y] * gauss[x] / gauss[y]).item(), rel=1e-4)


@pytest.mark.parametrize("reading", GAUSSIAN_READINGS)
def test_both_readings_match_their_definitions_on_the_same_neighbourhood(reading):
    row, pad = random_rows(10, 9, seed=5, fractional=True)
    scores = 2 * torch.randn(row.shape, generator=torch.Generator().manual_seed(3))
    weights = syntax_directed_weights(scores, row, pad, 2.0, gaussian_on=reading)
    assert torch.allclose(weights.double(), reference_weights(scores, row, pad, 2.0, 1.0, reading),
                          rtol=1e-5, atol=1e-7)
    other = syntax_directed_weights(scores, row, pad, 2.0,
                                    gaussian_on=[r for r in GAUSSIAN_READINGS if r != reading][0])
    assert torch.equal(weights.gt(0), other.gt(0))
    assert not torch.allclose(weights, other, atol=1e-3)


def test_weights_reading_gives_the_position_a_gradient():
    row = torch.tensor([[0.25, 1.75, 2.25, 3.0]], requires_grad=True)
    scores = torch.tensor([[0.3, -1.2, 0.8, -0.4]])
    weights = syntax_directed_weights(scores, row, torch.zeros(1, 4, dtype=torch.bool), 4.0,
                                      gaussian_on="weights")
    (weights * torch.tensor([[1.0, -2.0, 3.0, 0.5]])).sum().backward()
    assert torch.isfinite(row.grad).all() and row.grad.abs().min() > 0


def test_unknown_reading_names_the_choices():
    row, pad = random_rows(1, 4, seed=0, fractional=False)
    with pytest.raises(ValueError, match="scores.*weights"):
        syntax_directed_weights(torch.zeros(1, 4), row, pad, 4.0, gaussian_on="logits")
    with pytest.raises(ValueError, match="--syntax-gaussian"):
        build("sdatt_syntax", syntax_gaussian="logits")


# ------------------------------------------------------------------------ the model option

@pytest.mark.parametrize("arch", ["sdatt_syntax", "sdatt_double_syntax"])
def test_command_line_option_reaches_the_attention(arch):
    parser = options.get_training_parser()
    base = ["data-bin", "--user-dir", USER_DIR, "--task", "syntax_translation", "--arch", arch]
    default = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, base)).model
    assert default.syntax_gaussian == DEFAULT_GAUSSIAN_READING
    for reading in GAUSSIAN_READINGS:
        parser = options.get_training_parser()
        args = options.parse_args_and_arch(parser, base + ["--syntax-gaussian", reading])
        assert convert_namespace_to_omegaconf(args).model.syntax_gaussian == reading
        assert build(arch, syntax_gaussian=reading).decoder.attention.local_weights.gaussian_on == reading
    assert build(arch).decoder.attention.local_weights.gaussian_on == DEFAULT_GAUSSIAN_READING
    parser = options.get_training_parser()
    with pytest.raises(SystemExit):
        options.parse_args_and_arch(parser, base + ["--syntax-gaussian", "logits"])
