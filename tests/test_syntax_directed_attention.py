"""Syntax-directed attention (Chen et al. 2017): local-p and syntax-directed weights,
the five ``sdatt_*`` architectures, incremental decoding and the command lines."""
import argparse
import math
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

import fairseq_syntax  # noqa: F401  (registers the plugin)
from fairseq_syntax.data.tree_tensors import (
    EOS_DISTANCE, HEAD_PAD, PAD_DISTANCE, WORD_PAD, tree_distances, word_distances,
)
from fairseq_syntax.syntax.dependency import project_heads_to_subwords
from model_utils import incremental_log_probs
from fairseq_syntax.models.syntax_directed_rnn import SyntaxDirectedRNNModel, position_logit_scale
from fairseq_syntax.modules.local_attention import (
    GAUSSIAN_READINGS, SDATT_POSITION_LOGIT_SCALE, PositionPredictor, SyntaxDirectedWeights, distance_row,
    distance_rows, local_p_weights, syntax_directed_weights, word_distance_rows,
)
from conftest import generate_args, run_cli, train_args

ARCHS = ["sdatt_global", "sdatt_local_p", "sdatt_syntax", "sdatt_double_local_p", "sdatt_double_syntax"]
SYNTAX_ARCHS = {"sdatt_syntax", "sdatt_double_syntax"}
# every architecture, the syntax-directed ones under both readings of eq. 10's Gaussian
ARCH_READINGS = [(arch, None) for arch in ARCHS if arch not in SYNTAX_ARCHS] + [
    (arch, reading) for arch in ARCHS if arch in SYNTAX_ARCHS for reading in GAUSSIAN_READINGS]


# ----------------------------------------------------------------------------- helpers

def linear_distances(lengths, src_len):
    """``|j - k|`` between real positions, ``PAD_DISTANCE`` on padding rows/columns."""
    pos = torch.arange(src_len)
    dist = (pos.view(-1, 1) - pos.view(1, -1)).abs().expand(len(lengths), src_len, src_len).clone()
    real = pos.unsqueeze(0) < torch.as_tensor(lengths).unsqueeze(1)
    return dist.masked_fill(~(real.unsqueeze(2) & real.unsqueeze(1)), PAD_DISTANCE), ~real


def random_tree_distances(lengths, src_len, seed=0, max_pieces=2):
    """Distances as the collater makes them (:func:`word_distances`) for a random
    dependency tree per sentence over random words of 1 to ``max_pieces`` pieces
    (``lengths`` count the pieces and eos): word distances spread to the pieces, eos at
    ``EOS_DISTANCE``."""
    g = torch.Generator().manual_seed(seed)
    heads = torch.full((len(lengths), src_len), HEAD_PAD)
    words = torch.full((len(lengths), src_len), WORD_PAD)
    for b, n in enumerate(lengths):
        counts, left = [], n - 1
        while left:
            counts.append(min(left, int(torch.randint(1, max_pieces + 1, (1,), generator=g))))
            left -= counts[-1]
        order = torch.randperm(len(counts), generator=g).tolist()
        word_heads = [-1] * len(counts)
        for i, node in enumerate(order[1:], start=1):
            word_heads[node] = order[int(torch.randint(i, (1,), generator=g))]
        heads[b, :n] = torch.tensor(project_heads_to_subwords(word_heads, counts))
        words[b, :n] = torch.tensor([w for w, c in enumerate(counts) for _ in range(c)] + [-1])
    return word_distances(heads, words)


def tiny_dictionary(size):
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    return d


class _Task:
    def __init__(self):
        self.source_dictionary = tiny_dictionary(20)
        self.target_dictionary = tiny_dictionary(24)


def build(arch, **overrides):
    """``arch`` with its registered defaults (as fairseq-train fills them) plus ``overrides``."""
    args = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    model_cls = ARCH_MODEL_REGISTRY[arch]
    cfg = model_cls.__dataclass()
    for key, value in vars(args).items():
        setattr(cfg, key, value)
    small = dict(encoder_embed_dim=8, encoder_hidden_size=8, decoder_embed_dim=8,
                 decoder_hidden_size=16, dropout=0.0)
    for key, value in small.items():
        if key not in overrides:
            setattr(cfg, key, value)
    torch.manual_seed(0)
    return model_cls.build_model(cfg, _Task()).eval()


def batch(model, lengths=(9, 7, 5, 8), tgt_len=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    src_dict, tgt_dict = model.encoder.dictionary, model.decoder.dictionary
    src_len = max(lengths)
    src = torch.full((len(lengths), src_len), src_dict.pad())
    for i, n in enumerate(lengths):
        src[i, : n - 1] = torch.randint(src_dict.nspecial, len(src_dict), (n - 1,), generator=g)
        src[i, n - 1] = src_dict.eos()
    prev = torch.randint(tgt_dict.nspecial, len(tgt_dict), (len(lengths), tgt_len), generator=g)
    prev[:, 0] = tgt_dict.eos()
    side = {"src_distances": random_tree_distances(lengths, src_len, seed)}
    return src, torch.tensor(lengths), prev, side


# ------------------------------------------------------------------- syntax-directed weights

@pytest.mark.parametrize("n", [1, 2, 4])
def test_linear_distances_with_nearest_row_give_the_linear_window(n):
    lengths = [12, 9, 5]
    dist, pad = linear_distances(lengths, 12)
    last = torch.tensor(lengths, dtype=torch.float) - 1
    scores = torch.randn(3, 12)
    for frac in [0.0, 0.2, 0.37, 0.5, 0.51, 0.9, 1.0]:
        position = last * frac
        row = distance_row(dist, position, last, "nearest")
        weights = syntax_directed_weights(scores, row, pad, n, gaussian_on="scores")
        centre = torch.floor(position + 0.5)
        j = torch.arange(12).unsqueeze(0)
        window = (j >= centre.unsqueeze(1) - n) & (j <= centre.unsqueeze(1) + n) & ~pad
        assert torch.equal(weights.gt(0), window), (frac, weights)
        assert torch.allclose(weights.sum(-1), torch.ones(3), atol=1e-6)
        # eq. 10-11: softmax of e · exp(-d² / 2σ²) over the window, σ = n / 2
        e = scores * torch.exp(-row.clamp(max=100) ** 2 / (2 * (n / 2) ** 2))
        expected = torch.softmax(e.masked_fill(~window, -math.inf), -1)
        assert torch.allclose(weights, expected, atol=1e-6)


# A hand-built tree over 8 words and eos (position 8):
#        6 (root)
#     /  |  \   \
#    0   3   7  eos
#       / \
#      2   4
#      |   |
#      1   5
HAND_HEADS = torch.tensor([[6, 2, 3, 6, 3, 4, -1, 6, 6]])


def test_hand_built_tree_neighbourhood():
    dist = tree_distances(HAND_HEADS)
    assert dist[0, 0].tolist() == [0, 4, 3, 2, 3, 4, 1, 2, 2]
    pad = torch.zeros(1, 9, dtype=torch.bool)
    last = torch.tensor([8.0])
    scores = torch.randn(1, 9)
    position = torch.tensor([0.3])  # nearest row: word 0
    row = distance_row(dist, position, last, "nearest")
    one_arc = syntax_directed_weights(scores, row, pad, max_distance=1)
    # word 6 is six words away but one arc away; word 1 is next to word 0 but four arcs away
    assert one_arc[0].gt(0).nonzero().flatten().tolist() == [0, 6]
    two_arcs = syntax_directed_weights(scores, row, pad, max_distance=2)
    assert two_arcs[0].gt(0).nonzero().flatten().tolist() == [0, 3, 6, 7, 8]
    assert two_arcs[0, 1] == 0 and two_arcs[0, 2] == 0
    assert torch.allclose(two_arcs.sum(), torch.tensor(1.0))


def test_interpolated_row_and_its_neighbourhood():
    dist = tree_distances(HAND_HEADS)
    pad = torch.zeros(1, 9, dtype=torch.bool)
    last = torch.tensor([8.0])
    position = torch.tensor([0.25])
    row = distance_row(dist, position, last)
    expected_row = 0.75 * dist[0, 0].float() + 0.25 * dist[0, 1].float()
    assert torch.allclose(row[0], expected_row)
    weights = syntax_directed_weights(torch.randn(1, 9), row, pad, max_distance=2)
    # "within distance n" means interpolated distance <= n
    assert weights[0].gt(0).nonzero().flatten().tolist() == expected_row.le(2).nonzero().flatten().tolist()
    assert weights[0].gt(0).nonzero().flatten().tolist() == [0, 3, 6]
    # p at the last position (sigmoid saturated): no row beyond eos is read, not even a
    # padding row with weight 0 (its PAD_DISTANCE would give p a huge gradient)
    padded = torch.full((1, 12, 12), PAD_DISTANCE)
    padded[:, :9, :9] = dist
    end_position = torch.tensor([8.0], requires_grad=True)
    end = distance_row(padded, end_position, last)
    assert torch.equal(end[0, :9], dist[0, 8].float())
    end[:, :9].sum().backward()
    assert end_position.grad.abs().max() < 10


def test_between_the_last_word_and_eos_the_row_is_the_nearest_one():
    """eos is EOS_DISTANCE from every word: interpolating its row with the last word's left
    the last word alone in the neighbourhood and gave p, for t < ~0.003, gradients 100-300
    times the largest between two words. There the nearest row is taken: no gradient."""
    dist = torch.full((1, 9, 9), EOS_DISTANCE)  # the hand tree's first 8 words, then eos
    dist[:, :8, :8] = tree_distances(HAND_HEADS[:, :8])
    dist[0, 8, 8] = 0
    pad = torch.zeros(1, 9, dtype=torch.bool)
    last = torch.tensor([8.0])
    g = torch.Generator().manual_seed(0)
    scores, upstream = 5 * torch.randn(1, 9, generator=g), torch.randn(1, 9, generator=g)
    for t, nearest in [(0.0, 7), (0.0005, 7), (0.002, 7), (0.3, 7), (0.5, 8), (0.9, 8), (1.0, 8)]:
        position = torch.tensor([7.0 + t], requires_grad=True)
        row = distance_row(dist, position, last)
        assert torch.equal(row[0], dist[0, nearest].float())
        for reading in GAUSSIAN_READINGS:
            weights = syntax_directed_weights(scores, distance_row(dist, position, last), pad, 4,
                                              gaussian_on=reading)
            assert torch.equal(weights.detach(), syntax_directed_weights(
                scores, dist[:, nearest].float(), pad, 4, gaussian_on=reading))
            (weights * upstream).sum().backward()
            assert position.grad.abs().max() == 0
            position.grad = None
    # between two words the row is still interpolated and p gets its gradient
    position = torch.tensor([6.25], requires_grad=True)
    row = distance_row(dist, position, last)
    assert torch.allclose(row[0], 0.75 * dist[0, 6].float() + 0.25 * dist[0, 7].float())
    (syntax_directed_weights(scores, row, pad, 4) * upstream).sum().backward()
    assert position.grad.abs().max() > 0


def pieces_of_words(word, word_dist):
    """Piece distances (then eos at ``EOS_DISTANCE``) for pieces of the words ``word``."""
    n = len(word)
    distances = torch.full((1, n + 1, n + 1), EOS_DISTANCE, dtype=torch.int16)
    for i in range(n):
        for j in range(n):
            distances[0, i, j] = word_dist[word[i]][word[j]]
    distances[0, n, n] = 0
    return distances


def test_no_gradient_between_two_pieces_of_one_word_unless_read_between_words():
    """Words [a, bc, d] (pieces 0, 1-2, 3; a-bc 1, bc-d 1, a-d 2).  d/dp of w · M[p]:
    interpolating pieces' rows, at 0.5 w · (M[1] - M[0]) = 1 - 2 - 3 - 4 = -8; at 1.5 the
    rows of pieces 1 and 2 (word bc) are equal: 0; at 2.5 w · (M[3] - M[2]) = 1 + 2 + 3 - 4
    = 2.  Between words' rows ('words'), at 1.5 M = 0.75 M[1] + 0.25 M[3] and the derivative
    w · (M[3] - M[1]) / 2 = (1 + 2 + 3 - 4) / 2 = 1, at 2.5 M = 0.25 M[1] + 0.75 M[3]; in the
    last word (p = 3) its own row, no gradient."""
    distances = pieces_of_words([0, 1, 1, 2], [[0, 1, 2], [1, 0, 1], [2, 1, 0]])
    weights, eos = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0]), torch.tensor([4.0])
    rows = distances[0].float()
    for how, p, row, gradient in (
            ("interpolate", 0.5, 0.5 * rows[0] + 0.5 * rows[1], -8.0),
            ("interpolate", 1.5, rows[1], 0.0),
            ("interpolate", 2.5, 0.5 * rows[2] + 0.5 * rows[3], 2.0),
            ("words", 0.5, 0.5 * rows[0] + 0.5 * rows[1], -8.0),
            ("words", 1.5, 0.75 * rows[1] + 0.25 * rows[3], 1.0),
            ("words", 2.5, 0.25 * rows[1] + 0.75 * rows[3], 1.0),
            ("words", 3.0, rows[3], 0.0)):
        position = torch.tensor([p], requires_grad=True)
        got = distance_row(distances, position, eos, how)
        assert torch.equal(got[0], row), (how, p)
        (got[0] @ weights).backward()
        assert float(position.grad) == gradient, (how, p)


def test_words_rows_equal_pieces_rows_when_every_word_is_one_piece():
    lengths = [12, 9, 5, 2]
    distances = random_tree_distances(lengths, 12, seed=3, max_pieces=1)
    eos = torch.tensor(lengths, dtype=torch.float) - 1
    positions = torch.rand(4, 7, generator=torch.Generator().manual_seed(0)) * (eos - 1).clamp(
        min=0)[:, None]
    torch.testing.assert_close(word_distance_rows(distances, positions, eos),
                               distance_rows(distances, positions, eos))


def test_neighbourhood_is_never_empty():
    # words 0 and 1 are 6 arcs apart (0-2-3-4-5-6-1): at p = 0.25 every interpolated
    # distance is >= 1.5 > n = 1; the nearest word (at the row's minimum) keeps the weight
    heads = torch.tensor([[2, 6, 3, 4, 5, 6, -1, 6]])
    dist = tree_distances(heads)
    assert dist[0, 0, 1] == 6
    no_pad = torch.zeros(1, 8, dtype=torch.bool)
    for p, kept in [(0.25, [0]), (0.75, [1])]:
        row = distance_row(dist, torch.tensor([p]), torch.tensor([7.0]))
        assert row.min() == 1.5
        weights = syntax_directed_weights(torch.randn(1, 8), row, no_pad, 1)
        assert torch.isfinite(weights).all()
        assert torch.allclose(weights.sum(), torch.tensor(1.0))
        assert weights[0].gt(0).nonzero().flatten().tolist() == kept


def test_padding_gets_no_weight_and_position_gets_a_gradient():
    # one piece per word and p between two words, so that the interpolated row changes
    # with p (the rows of two pieces of one word are equal, and between the last word
    # and eos the row is the nearest one: p gets no gradient there)
    lengths = [9, 6]
    dist = random_tree_distances(lengths, 9, max_pieces=1)
    pad = torch.arange(9).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)
    last = torch.tensor(lengths, dtype=torch.float) - 1
    position = torch.tensor([3.4, 3.7], requires_grad=True)
    scores = torch.randn(2, 9)
    weights = syntax_directed_weights(scores, distance_row(dist, position, last), pad, 4)
    assert weights.masked_select(pad).abs().max() == 0
    (weights * torch.randn(2, 9)).sum().backward()
    assert position.grad is not None and position.grad.abs().min() > 0
    # the nearest row gives no gradient to p
    position.grad = None
    nearest = syntax_directed_weights(scores, distance_row(dist, position, last, "nearest"), pad, 4)
    assert not nearest.requires_grad


# ------------------------------------------------------------------------------ local-p

def test_local_p_window_and_gaussian():
    torch.manual_seed(0)
    lengths = torch.tensor([10, 6])
    pad = torch.arange(10).unsqueeze(0) >= lengths.unsqueeze(1)
    scores = torch.randn(2, 10)
    position = torch.tensor([3.3, 4.6], requires_grad=True)
    window = 2
    weights = local_p_weights(scores, position, pad, window)
    sigma = window / 2
    for b in range(2):
        p = position[b].item()
        inside = [j for j in range(int(lengths[b])) if abs(j - p) <= window]
        assert weights[b].gt(0).nonzero().flatten().tolist() == inside
        align = torch.softmax(scores[b, inside], -1)
        for k, j in enumerate(inside):
            expected = align[k].item() * math.exp(-((j - p) ** 2) / (2 * sigma ** 2))
            assert weights[b, j].item() == pytest.approx(expected, rel=1e-5)
    assert weights.masked_select(pad).abs().max() == 0
    # the window is closed: |j - p| = D is in
    closed = local_p_weights(scores, torch.tensor([3.0, 2.0]), pad, window)
    assert closed[0].gt(0).nonzero().flatten().tolist() == [1, 2, 3, 4, 5]
    assert closed[1].gt(0).nonzero().flatten().tolist() == [0, 1, 2, 3, 4]
    weights.sum().backward()
    assert position.grad.abs().min() > 0
    # a custom σ
    wide = local_p_weights(scores, position.detach(), pad, window, sigma=5.0)
    p = position[0].item()
    align = torch.softmax(scores[0, [2, 3, 4, 5]], -1)
    assert wide[0, 4].item() == pytest.approx(align[2].item() * math.exp(-((4 - p) ** 2) / 50), rel=1e-5)


def test_predicted_position_spans_exactly_the_real_positions():
    predictor = PositionPredictor(4)
    last = torch.tensor([0.0, 5.0, 8.0])
    with torch.no_grad():
        predictor.proj.weight.fill_(1.0)  # tanh(W_p h) > 0, so v's sign decides
        predictor.v.weight.fill_(1e3)
        hi = predictor(torch.ones(3, 4), last)
        predictor.v.weight.fill_(-1e3)
        lo = predictor(torch.ones(3, 4), last)
    assert torch.allclose(hi, last)
    assert torch.equal(lo, torch.zeros(3))


def test_logit_scale_multiplies_the_logit_and_so_slows_adam():
    """``p = L·sigmoid(s·vᵀtanh(W h))``; one Adam step (each parameter moves about lr) changes
    the logit about ``s`` times as much as with ``s = 1``: a learning rate ``s·lr``."""
    torch.manual_seed(0)
    hidden, last = torch.randn(6, 4), torch.full((6,), 9.0)
    plain = PositionPredictor(4)
    scaled = PositionPredictor(4, logit_scale=0.05)
    scaled.load_state_dict(plain.state_dict())
    logit = plain.v(torch.tanh(plain.proj(hidden))).squeeze(-1)
    assert torch.allclose(scaled(hidden, last), last * torch.sigmoid(0.05 * logit))

    def logit_change(predictor):
        before = predictor.v(torch.tanh(predictor.proj(hidden))).squeeze(-1) * predictor.logit_scale
        optimizer = torch.optim.Adam(predictor.parameters(), lr=1e-3)
        predictor(hidden, last).sum().backward()
        optimizer.step()
        after = predictor.v(torch.tanh(predictor.proj(hidden))).squeeze(-1) * predictor.logit_scale
        return (after - before).detach()

    plain_change, scaled_change = logit_change(plain), logit_change(scaled)
    assert torch.allclose(scaled_change, 0.05 * plain_change, rtol=0.05)


@pytest.mark.parametrize("arch,overrides,scale", [
    ("sdatt_double_syntax", {}, SDATT_POSITION_LOGIT_SCALE),
    ("sdatt_syntax", {}, SDATT_POSITION_LOGIT_SCALE),
    ("sdatt_double_local_p", {}, 1.0),
    ("sdatt_double_syntax", {"position_logit_scale": 0.3}, 0.3),
    ("sdatt_local_p", {"position_logit_scale": 0.3}, 0.3),
])
def test_position_logit_scale_defaults(arch, overrides, scale):
    predictor = next(m for m in build(arch, **overrides).modules() if isinstance(m, PositionPredictor))
    assert predictor.logit_scale == scale


def test_a_checkpoint_from_before_the_logit_scale_keeps_scale_one():
    cfg = argparse.Namespace(attention_type="global+syntax_directed")
    assert position_logit_scale(cfg, "syntax_directed") == 1.0
    cfg.position_logit_scale = None
    assert position_logit_scale(cfg, "syntax_directed") == SDATT_POSITION_LOGIT_SCALE


# ----------------------------------------------------------------------------- layers

def centred_layer(arch, **overrides):
    """The attentional layer of ``arch`` with ``W_p = 0``, so that ``p_i = J / 2`` exactly."""
    attention = build(arch, **overrides).decoder.attention
    with torch.no_grad():
        attention.local_weights.predictor.proj.weight.zero_()
    return attention


def encoder_out_for(lengths, dim=16, distances=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    src_len = max(lengths)
    dist, pad = linear_distances(lengths, src_len)
    return {"annotations": torch.randn(len(lengths), src_len, dim, generator=g), "padding_mask": pad,
            "src_distances": dist if distances is None else distances}


def test_sdatt_centres_on_words_and_local_p_counts_eos_as_the_last_position():
    # J = index of eos = length - 1. SDAtt: p = (J - 1) · sigmoid(0) with W_p = 0, a word;
    # local-p (Luong): p = J · sigmoid(0) = J / 2, eos included
    lengths = [9, 6, 2]  # J - 1 = 7, 4, 0 -> p = 3.5, 2, 0 -> nearest rows 4, 2, 0
    attention = centred_layer("sdatt_syntax", syntax_row="nearest", syntax_distance=1.0)
    enc = encoder_out_for(lengths)
    state = attention.init_state(enc)
    assert state["last_position"].tolist() == [8.0, 5.0, 1.0]
    _, weights, _ = attention(torch.randn(3, 16), enc, state)
    assert [w.gt(0).nonzero().flatten().tolist() for w in weights] == [[3, 4, 5], [1, 2, 3], [0, 1]]
    # local-p, D = 1: windows |j - p| <= 1 around p = 4, 2.5, 0.5, Gaussian with σ = 1/2
    local = centred_layer("sdatt_local_p", local_window=1.0)
    hidden = torch.randn(3, 16)
    state = local.init_state(enc)
    _, weights, _ = local(hidden, enc, state)
    assert [w.gt(0).nonzero().flatten().tolist() for w in weights] == [[3, 4, 5], [2, 3], [0, 1]]
    scores = local.score(hidden, state["keys"])
    for b, (p, window) in enumerate([(4.0, [3, 4, 5]), (2.5, [2, 3]), (0.5, [0, 1])]):
        align = torch.softmax(scores[b, window], -1)
        expected = [a * math.exp(-((j - p) ** 2) / (2 * 0.5 ** 2)) for a, j in zip(align.tolist(), window)]
        assert weights[b, window].tolist() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("arch, reading", [x for x in ARCH_READINGS if x[0] != "sdatt_global"])
def test_attentional_state_follows_the_equations(arch, reading):
    """h̃ = tanh(W_c [c; h]) (single) or tanh(W_c [c_global; c_local; h]) (eq. 14), with
    the syntax-directed weights in the reading of eq. 10 that ``--syntax-gaussian`` names."""
    overrides = {} if reading is None else {"syntax_gaussian": reading}
    attention = build(arch, local_window=2.0, syntax_distance=2.0, **overrides).decoder.attention
    lengths = [9, 6, 4]
    enc = encoder_out_for(lengths, distances=random_tree_distances(lengths, 9))
    state = attention.init_state(enc)
    hidden = torch.randn(3, 16)
    out, returned, _ = attention(hidden, enc, state)
    scores = attention.score(hidden, state["keys"])
    predictor = attention.local_weights.predictor
    last = state["last_position"]  # eos; SDAtt's p ranges over the words only
    position = predictor(hidden, last if arch.endswith("local_p") else last - 1)
    if arch.endswith("local_p"):
        local = local_p_weights(scores, position, enc["padding_mask"], 2.0)
    else:
        row = distance_row(enc["src_distances"], position, state["last_position"])
        local = syntax_directed_weights(scores, row, enc["padding_mask"], 2.0, gaussian_on=reading)
    c_local = torch.einsum("bs,bsc->bc", local, enc["annotations"])
    if "double" in arch:
        glob = torch.softmax(scores.masked_fill(enc["padding_mask"], -math.inf), -1)
        features = torch.cat([torch.einsum("bs,bsc->bc", glob, enc["annotations"]), c_local, hidden], -1)
        expected_weights = glob
    else:
        features = torch.cat([c_local, hidden], -1)
        expected_weights = local
    expected = torch.tanh(features @ attention.combine.weight.t())
    assert torch.allclose(out, expected, atol=1e-5)
    assert torch.allclose(returned, expected_weights, atol=1e-6)


# ----------------------------------------------------------------------------- models

def test_architectures_are_registered():
    for arch in ARCHS:
        assert ARCH_MODEL_REGISTRY[arch] is SyntaxDirectedRNNModel
    from fairseq.models import MODEL_REGISTRY
    assert MODEL_REGISTRY["syntax_directed_rnn"] is SyntaxDirectedRNNModel


@pytest.mark.parametrize("arch", ARCHS)
def test_side_inputs_and_attention_type(arch):
    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    assert SyntaxDirectedRNNModel.side_inputs(args) == ({"distances"} if arch in SYNTAX_ARCHS else set())
    model = build(arch)
    assert model.encoder.side_input_keys == (("src_distances",) if arch in SYNTAX_ARCHS else ())
    expected = {"sdatt_global": "GlobalAttentionLayer", "sdatt_local_p": "LocalAttentionLayer",
                "sdatt_syntax": "LocalAttentionLayer",
                "sdatt_double_local_p": "DoubleContextAttentionLayer",
                "sdatt_double_syntax": "DoubleContextAttentionLayer"}[arch]
    assert type(model.decoder.attention).__name__ == expected


def full_log_probs(model, src, lengths, prev, side):
    return torch.log_softmax(model(src, lengths, prev, **side)[0], dim=-1)


@pytest.mark.parametrize("arch, reading", ARCH_READINGS)
def test_incremental_decoding_equals_full_forward_with_beam_reorder(arch, reading):
    overrides = {} if reading is None else {"syntax_gaussian": reading}
    model = build(arch, decoder_layers=2, local_window=2.0, syntax_distance=2.0, **overrides)
    if reading is not None:
        assert model.decoder.attention.local_weights.gaussian_on == reading
    src, lengths, prev, side = batch(model)
    order = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        full = full_log_probs(model, src, lengths, prev, side)
        step = incremental_log_probs(model, model.encoder(src, lengths, **side), prev)
        assert torch.allclose(full, step, atol=1e-5)
        side_r = {k: v[order] for k, v in side.items()}
        full_r = full_log_probs(model, src[order], lengths[order], prev[order], side_r)
        step_r = incremental_log_probs(model, model.encoder(src, lengths, **side), prev,
                                       reorder=order, reorder_at=3)
        assert torch.allclose(full_r, step_r, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_padding_does_not_change_a_sentence(arch):
    model = build(arch, local_window=2.0, syntax_distance=2.0)
    src, lengths, prev, side = batch(model)
    with torch.no_grad():
        together = full_log_probs(model, src, lengths, prev, side)
        n = int(lengths[2])
        alone = full_log_probs(model, src[2:3, :n], lengths[2:3], prev[2:3],
                               {"src_distances": side["src_distances"][2:3, :n, :n]})
    assert torch.allclose(together[2:3], alone, atol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_returned_weights_are_the_context_weights(arch):
    model = build(arch, local_window=1.0, syntax_distance=1.0).train()
    src, lengths, prev, side = batch(model)
    _, extra = model(src, lengths, prev, **side)
    attn = extra["attn"][0]
    pad = src.eq(model.encoder.dictionary.pad()).unsqueeze(1).expand_as(attn)
    assert attn.requires_grad and attn.masked_select(pad).abs().max() == 0
    if arch in ("sdatt_global", "sdatt_double_local_p", "sdatt_double_syntax"):
        # global weights: every real position, summing to 1
        assert torch.allclose(attn.sum(-1), torch.ones_like(attn[..., 0]), atol=1e-5)
        assert attn.masked_select(~pad).gt(0).all()
    elif arch == "sdatt_syntax":
        assert torch.allclose(attn.sum(-1), torch.ones_like(attn[..., 0]), atol=1e-5)
        assert attn.masked_select(~pad).eq(0).any()
    else:  # local-p with D = 1: at most 3 positions, Gaussian-damped
        assert attn.gt(0).sum(-1).max() <= 3 and attn.sum(-1).max() <= 1 + 1e-6


@pytest.mark.parametrize("row, learns", [("interpolate", True), ("words", True), ("nearest", False)])
def test_position_predictor_learns_only_with_interpolation(row, learns):
    model = build("sdatt_syntax", syntax_row=row).train()
    src, lengths, prev, side = batch(model)
    logits, _ = model(src, lengths, prev, **side)
    torch.log_softmax(logits, -1).mean().backward()
    grad = model.decoder.attention.local_weights.predictor.proj.weight.grad
    assert (grad is not None and grad.abs().sum() > 0) == learns


def test_syntax_model_without_distances_names_the_fix():
    model = build("sdatt_syntax")
    src, lengths, prev, _ = batch(model)
    with pytest.raises(KeyError, match="syntax_translation"):
        model(src, lengths, prev)


@pytest.mark.parametrize("arch", ["sdatt_syntax", "sdatt_double_syntax"])
def test_eos_is_outside_the_neighbourhood_but_in_the_global_context(arch):
    """Word-level distances (docs/design.md §3.3): with n = 4 every word of "The
    un·believ·able dog barked" is in the neighbourhood of "able" (a piece of the middle
    word), eos is not; the double context's global weights still cover eos."""
    heads = torch.tensor([project_heads_to_subwords([2, 2, 3, -1], [1, 3, 1, 1])])
    words = torch.tensor([[0, 1, 1, 1, 2, 3, -1]])
    dist = word_distances(heads, words)
    assert dist[0, 3, 6] == EOS_DISTANCE
    attention = centred_layer(arch, syntax_distance=4.0, syntax_row="nearest")  # p = 6/2 = 3
    enc = encoder_out_for([7], distances=dist)
    state = attention.init_state(enc)
    hidden = torch.randn(1, 16)
    _, returned, _ = attention(hidden, enc, state)
    scores = attention.score(hidden, state["keys"])
    local = attention.local_weights(hidden, scores, enc, state)
    assert local[0, :6].gt(0).all() and local[0, 6] == 0
    assert torch.allclose(local.sum(), torch.tensor(1.0))
    if "double" in arch:
        assert returned[0, 6] > 0 and torch.allclose(returned.sum(), torch.tensor(1.0))
    else:
        assert torch.equal(returned, local)


def test_syntax_distance_must_stay_below_the_eos_distance():
    with pytest.raises(ValueError, match="--syntax-distance"):
        build("sdatt_syntax", syntax_distance=float(EOS_DISTANCE))
    build("sdatt_syntax", syntax_distance=float(EOS_DISTANCE - 1))


# --------------------------------------------------------------------- command lines

def _train_then_generate(databin, save_dir, arch):
    extra = [] if arch == "sdatt_global" else ["--local-window", "3", "--syntax-distance", "2"]
    train = run_cli(train_args(databin, save_dir, arch=arch, updates=2, extra=extra), check=False)
    if train.returncode != 0:
        return train, None
    # an untrained model would babble to the default 200 tokens: cap the length
    gen = run_cli(generate_args(databin, save_dir / "checkpoint_last.pt",
                                extra=["--print-alignment", "--max-len-a", "0", "--max-len-b", "6"]),
                  check=False)
    return train, gen


@pytest.fixture(scope="module")
def cli_runs(synthetic_databin, tmp_path_factory):
    """fairseq-train (2 updates) then fairseq-generate --print-alignment for every
    architecture, the five chains side by side (they are independent processes)."""
    with ThreadPoolExecutor(max_workers=len(ARCHS)) as pool:
        futures = {arch: pool.submit(_train_then_generate, synthetic_databin,
                                     tmp_path_factory.mktemp(arch), arch) for arch in ARCHS}
        return {arch: future.result() for arch, future in futures.items()}


def _check(proc):
    assert proc is not None and proc.returncode == 0, (
        f"command failed: {' '.join(map(str, proc.args))}\n--- stdout ---\n{proc.stdout[-3000:]}"
        f"\n--- stderr ---\n{proc.stderr[-5000:]}"
    )


@pytest.mark.parametrize("arch", ARCHS)
def test_train_and_generate_with_alignment(arch, cli_runs):
    train, gen = cli_runs[arch]
    _check(train)
    log = train.stdout + train.stderr
    inputs = re.search(r"\[train\] syntax inputs: (.*)", log).group(1)
    assert ("distances" in inputs) == (arch in SYNTAX_ARCHS), inputs
    assert "done training" in log
    _check(gen)
    lines = gen.stdout.splitlines()
    sources = [line for line in lines if line.startswith("S-")]
    hyps = [line for line in lines if line.startswith("H-")]
    aligns = [line for line in lines if line.startswith("A-")]
    assert len(sources) > 30 and len(hyps) == len(sources) and len(aligns) == len(sources)
    assert all(re.fullmatch(r"A-\d+\t\d+-\d+( \d+-\d+)*", line) for line in aligns), aligns[:3]


def test_an_unknown_syntax_row_is_refused_when_the_model_is_built():
    """--syntax-row other than SYNTAX_ROWS: the module refuses it at construction, naming the
    choices, and so does distance_row."""
    with pytest.raises(ValueError, match="--syntax-row must be one of interpolate, words, nearest"):
        SyntaxDirectedWeights(8, row="between")
    with pytest.raises(ValueError, match="got 'between'"):
        distance_row(torch.zeros(1, 3, 3, dtype=torch.long), torch.zeros(1), torch.tensor([2]),
                     "between")
