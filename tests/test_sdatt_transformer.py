"""Syntax-directed cross-attention (SDAtt, Chen et al. 2017) on the Transformer backbone:
interpolated distance rows and the log-space Gaussian against hand-worked numbers and a
float64 reference from the definition, the whole cross-attention layer (single and double
context) against a numpy computation from its parameters, half precision, incremental
decoding, options, and the command lines."""
import argparse
import math
import re

import numpy as np
import pytest
import torch

from conftest import run_cli
from model_utils import build_model, incremental_log_probs
from test_transformer_backbone import generate_test_split, transformer_train_args
from fairseq_syntax.data.tree_tensors import EOS_DISTANCE, PAD_DISTANCE, word_distances
from fairseq_syntax.modules.local_attention import (
    SDATT_POSITION_LOGIT_SCALE, distance_row, position_logit_scale,
)
from fairseq_syntax.modules.syntax_distance_cross_attention import (
    distance_rows, syntax_distance_logits,
)

pytestmark = pytest.mark.usefixtures("one_thread")

E, P = EOS_DISTANCE, PAD_DISTANCE
# A: The(0) monkey(1) eats(2) a(3) ban(4) ana(5) <eos>(6); The -> monkey -> eats (root),
#    a -> banana -> eats. Word distances by hand, spread to the pieces of banana.
# B: monkey(0) ea(1) ts(2) <eos>(3), monkey -> eats, right-padded.
DISTANCES = torch.tensor([
    [[0, 1, 2, 4, 3, 3, E],
     [1, 0, 1, 3, 2, 2, E],
     [2, 1, 0, 2, 1, 1, E],
     [4, 3, 2, 0, 1, 1, E],
     [3, 2, 1, 1, 0, 0, E],
     [3, 2, 1, 1, 0, 0, E],
     [E, E, E, E, E, E, 0]],
    [[0, 1, 1, E, P, P, P],
     [1, 0, 0, E, P, P, P],
     [1, 0, 0, E, P, P, P],
     [E, E, E, 0, P, P, P],
     [P] * 7, [P] * 7, [P] * 7],
])
HEADS = torch.tensor([[1, 2, -1, 4, 2, 4, 2], [1, -1, 1, 1, -2, -2, -2]])
WORDS = torch.tensor([[0, 1, 2, 3, 4, 4, -1], [0, 1, 1, -1, -2, -2, -2]])
PADDING = DISTANCES.diagonal(dim1=1, dim2=2).eq(P)
LAST = torch.tensor([6, 3])


def test_hand_matrix_is_the_data_contract():
    assert torch.equal(word_distances(HEADS, WORDS), DISTANCES)


# ------------------------------------------------------------------ rows and the Gaussian

def test_distance_rows_interpolate_between_integer_positions():
    positions = torch.tensor([[2.5, 0.0, 6.0, 5.5], [1.25, 3.0, 2.0, 0.5]])
    rows = distance_rows(DISTANCES, positions, LAST)
    # A, p = 2.5: half of eats's row and half of a's
    assert rows[0, 0].tolist() == [3, 2, 1, 1, 1, 1, E]
    assert rows[0, 1].tolist() == DISTANCES[0, 0].tolist()
    assert rows[0, 2].tolist() == DISTANCES[0, 6].tolist()  # p = J: eos's own row
    assert rows[0, 3].tolist() == DISTANCES[0, 6].tolist()  # last word..eos: the nearest row
    # B, p = 1.25: 3/4 of ea's row and 1/4 of ts's row (the same word: the same row)
    assert rows[1, 0].tolist() == [1, 0, 0, E, P, P, P]
    assert rows[1, 1].tolist() == DISTANCES[1, 3].tolist()
    assert rows[1, 3].tolist() == [0.5, 0.5, 0.5, E, P, P, P]


def test_distance_rows_match_the_rnn_row_and_carry_the_gradient():
    g = torch.Generator().manual_seed(3)
    positions = (torch.rand(2, 5, generator=g) * LAST[:, None]).requires_grad_()
    rows = distance_rows(DISTANCES, positions, LAST)
    for k in range(5):
        torch.testing.assert_close(rows[:, k], distance_row(DISTANCES, positions[:, k], LAST))
    rows[0, :, 0].sum().backward()  # column "The" of sentence A changes with every p
    assert positions.grad[0].abs().min() > 0


def reference_weights(scores, rows, padding, n, sigma):
    """Chen et al. eqs. 10-11 with the Gaussian on the weights, one row at a time in
    float64: the neighbourhood N is the real positions within max(n, min row); the
    weights are softmax(scores) times exp(-d^2 / 2 sigma^2) on N, renormalised."""
    scores = np.asarray(scores, dtype=np.float64)
    rows = np.asarray(rows, dtype=np.float64)
    out = np.zeros(scores.shape)
    for index in np.ndindex(*scores.shape[:-1]):
        real = [j for j in range(scores.shape[-1]) if not padding[index[0], j]]
        limit = max(n, min(rows[index][j] for j in real))
        inside = [j for j in real if rows[index][j] <= limit]
        top = max(scores[index][j] for j in real)
        soft = {j: math.exp(scores[index][j] - top) for j in real}
        total = sum(soft.values())
        # the Gaussian times the constant exp(nearest² / 2σ²) (cancels in the
        # renormalisation; keeps rows ~300 from underflowing to 0 / 0)
        nearest = min(rows[index][j] for j in real)
        z = {j: soft[j] / total * math.exp(-(rows[index][j] ** 2 - nearest ** 2) / (2 * sigma ** 2))
             for j in inside}
        for j, value in z.items():
            out[index][j] = value / sum(z.values())
    return out


def weights_of(logits):
    return torch.softmax(logits.float(), dim=-1)


def test_equal_scores_by_hand():
    """A at p = 2.5, every score 0.3, n = 4, σ = 2: N = positions 0-5 (distances 3, 2, 1,
    1, 1, 1; eos at 1000 is out), weights ∝ e^(-d²/8) = 0.3247, 0.6065, 0.8825 (×4), sum
    4.4612: 0.07277, 0.13596, 0.19782 (×4), 0. At p = 5.5, between the last word and eos,
    the row is eos's own (the nearest): N is eos alone."""
    rows = distance_rows(DISTANCES, torch.tensor([[2.5, 5.5], [0.0, 0.0]]), LAST)
    scores = torch.full((2, 1, 2, 7), 0.3)
    w = weights_of(syntax_distance_logits(scores, rows[:, None], PADDING, 4.0, 2.0))
    assert w[0, 0, 0].tolist() == pytest.approx([0.07277, 0.13596] + [0.19782] * 4 + [0], abs=1e-5)
    assert w[0, 0, 1].tolist() == pytest.approx([0, 0, 0, 0, 0, 0, 1], abs=1e-6)
    # B at p = 0: monkey (0) and eats (1), both pieces of eats at distance 1; padding 0
    g = [1, math.exp(-1 / 8), math.exp(-1 / 8)]
    assert w[1, 0, 0].tolist() == pytest.approx([x / sum(g) for x in g] + [0, 0, 0, 0], abs=1e-6)


def test_negative_scores_do_not_favour_the_farther_word():
    """Scores -2, -2 at distances 0 and 4, n = 4, σ = 2: logits -2 and -2 - 16/8 = -4,
    weights 1 / (1 + e^-2) = 0.8808 and 0.1192 (eq. 10 read on the scores would give the
    farther word 0.85)."""
    scores = torch.tensor([[[[-2.0, -2.0]]]])
    rows = torch.tensor([[[[0.0, 4.0]]]])
    w = weights_of(syntax_distance_logits(scores, rows, torch.zeros(1, 2, dtype=torch.bool), 4, 2))
    assert w[0, 0, 0].tolist() == pytest.approx([0.8808, 0.1192], abs=1e-4)


def random_case(seed, bsz=4, heads=2, tgt=3, src=9):
    """Random scores and rows (integer distances 0-6 with ties, some quarter steps, some
    rows far from every word), random sentence lengths, padding at PAD_DISTANCE."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, src + 1, (bsz,), generator=g)
    lengths[0] = src
    padding = torch.arange(src)[None] >= lengths[:, None]
    rows = torch.randint(0, 7, (bsz, heads, tgt, src), generator=g).float()
    rows[:, :, 1] += torch.randint(0, 4, (bsz, heads, src), generator=g).float() / 4
    rows[:, 1, 2] += 300.0  # nearest > n: N is the nearest positions
    rows = rows.masked_fill(padding[:, None, None], float(P))
    scores = torch.randn(bsz, heads, tgt, src, generator=g) * 3
    return scores, rows, padding


@pytest.mark.parametrize("n, sigma", [(4.0, 2.0), (2.0, 0.7), (0.0, 1.5)])
def test_weights_equal_the_definition(n, sigma):
    for seed in range(3):
        scores, rows, padding = random_case(seed)
        got = weights_of(syntax_distance_logits(scores, rows, padding, n, sigma))
        want = reference_weights(scores, rows, padding, n, sigma)
        np.testing.assert_allclose(got.double().numpy(), want, atol=1e-6)


def test_equal_logits_give_the_nearer_word_at_least_as_much_weight():
    for seed in range(3):
        _, rows, padding = random_case(seed)
        for value in (-3.0, 0.0, 2.5):
            w = weights_of(syntax_distance_logits(torch.full(rows.shape, value), rows, padding, 4, 2))
            nearer = rows[..., :, None] < rows[..., None, :]  # [.., j, k]: j nearer than k
            inside = w[..., None, :] > 0  # k gets weight
            pairs = nearer & inside & ~padding[:, None, None, :, None]
            assert pairs.any()
            assert (w[..., :, None] >= w[..., None, :])[pairs].all()
            assert (w[..., :, None] > w[..., None, :])[pairs & (rows[..., :, None] <= 4)].all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_logits_are_finite_and_exact(dtype):
    """σ = 0.01 makes n²/2σ² = 80000, beyond float16's range, and rows ~300 would make
    the bias -d²/2σ² swamp the scores' precision: the logits stay finite (lowest finite
    value outside N, also where the input had -inf padding) and give the float64
    weights to the dtype's precision."""
    scores, rows, padding = random_case(1)
    half = scores.to(dtype).masked_fill(padding[:, None, None], float("-inf"))
    for sigma in (0.01, 2.0):
        logits = syntax_distance_logits(half, rows, padding, 4.0, sigma)
        assert logits.dtype == dtype and torch.isfinite(logits).all()
        assert logits.min() == torch.finfo(dtype).min
        want = reference_weights(half.float().masked_fill(padding[:, None, None], 0), rows,
                                 padding, 4.0, sigma)
        np.testing.assert_allclose(weights_of(logits).double().numpy(), want, atol=1e-2)
    # the far rows (N = the nearest positions): the plain softmax of the scores there
    scores = torch.tensor([[[[0.1, 0.7, -0.3]]]], dtype=dtype)
    rows = torch.tensor([[[[500.0, 500.0, 500.0]]]])
    w = weights_of(syntax_distance_logits(scores, rows, torch.zeros(1, 3, dtype=torch.bool), 4, 2))
    torch.testing.assert_close(w, torch.softmax(scores.float(), -1), atol=2e-3, rtol=0)


# ------------------------------------------------------------------ the cross-attention layer

def batch(model):
    d = model.encoder.dictionary
    src = torch.tensor([[4, 5, 6, 7, 8, 9, d.eos()],
                        [5, 10, 11, d.eos(), d.pad(), d.pad(), d.pad()]])
    prev = torch.tensor([[2, 5, 6, 7, 8], [2, 9, 10, 11, 12]])
    return src, torch.tensor([7, 4]), prev


def capture_cross_attention(model, layer=0):
    """Run the model on :func:`batch`; return the cross-attention's query ``[T, B, D]``,
    the encoder output ``[S, B, D]``, the probabilities before dropout and the output."""
    attn = model.decoder.layers[layer].encoder_attn
    seen = {}

    def before(module, args, kwargs):
        seen["query"], seen["key"] = kwargs["query"], kwargs["key"]

    hooks = [attn.register_forward_pre_hook(before, with_kwargs=True),
             attn.register_forward_hook(lambda m, a, out: seen.__setitem__("out", out[0])),
             attn.dropout_module.register_forward_hook(lambda m, a, out: seen.__setitem__("probs", a[0]))]
    src, lengths, prev = batch(model)
    try:
        with torch.no_grad():
            model(src, lengths, prev, src_distances=DISTANCES)
    finally:
        for h in hooks:
            h.remove()
    return seen


def numpy_cross_attention(attn, query, key, heads_k, n, sigma, double):
    """The layer from its parameters, in float64 numpy, one sentence, head and target
    position at a time: logits q·k/√d; p = (J - 1)·sigmoid(s·v_h·tanh(W_h x)) over the words
    (J: eos); the row M[p]
    interpolated between ⌊p⌋ and ⌊p⌋ + 1; syntax weights = softmax · exp(-M[p]²/2σ²) on N,
    renormalised. Returns the probabilities [B, H (+K), T, S] and the output [T, B, D]."""
    f = lambda t: t.detach().double().numpy()  # noqa: E731
    x, enc = f(query), f(key)
    T, B, D = x.shape
    S, H, hd = enc.shape[0], attn.num_heads, attn.head_dim
    q = (x @ f(attn.q_proj.weight).T + f(attn.q_proj.bias)) * hd ** -0.5
    k = enc @ f(attn.k_proj.weight).T + f(attn.k_proj.bias)
    v = enc @ f(attn.v_proj.weight).T + f(attn.v_proj.bias)
    hidden = np.tanh(x @ f(attn.predictor.proj.weight).T)  # [T, B, K * hd]
    dist = DISTANCES.double().numpy()
    glob = np.zeros((B, H, T, S))
    syn = np.zeros((B, heads_k, T, S))
    for b in range(B):
        real = [j for j in range(S) if dist[b, j, j] != P]
        J = len(real) - 1
        for h in range(H):
            for t in range(T):
                e = {j: q[t, b, h * hd:(h + 1) * hd] @ k[j, b, h * hd:(h + 1) * hd] for j in real}
                top = max(e.values())
                soft = {j: math.exp(e[j] - top) for j in real}
                for j in real:
                    glob[b, h, t, j] = soft[j] / sum(soft.values())
                if h >= heads_k:
                    continue
                logit = attn.predictor.logit_scale * (hidden[t, b, h * hd:(h + 1) * hd]
                                                      @ f(attn.predictor.v)[h])
                p = max(J - 1, 0) / (1 + math.exp(-logit))  # the last word at most
                lo = int(math.floor(p))
                hi = min(lo + 1, J)
                t_hi = p - lo if hi < J else float(p - lo >= 0.5)  # last word..eos: nearest row
                row = (1 - t_hi) * dist[b, lo] + t_hi * dist[b, hi]
                nearest = min(row[j] for j in real)
                limit = max(n, nearest)
                # times exp(nearest² / 2σ²), which cancels (see reference_weights)
                z = {j: glob[b, h, t, j] * math.exp(-(row[j] ** 2 - nearest ** 2) / (2 * sigma ** 2))
                     for j in real if row[j] <= limit}
                for j, value in z.items():
                    syn[b, h, t, j] = value / sum(z.values())
    heads_out = lambda w, count: np.einsum("bhts,sbhd->tbhd", w, v.reshape(S, B, H, hd)[:, :, :count])  # noqa: E731
    out_w, out_b = f(attn.out_proj.weight), f(attn.out_proj.bias)
    if not double:
        mixed = np.concatenate([syn, glob[:, heads_k:]], axis=1)
        return mixed, heads_out(mixed, H).reshape(T, B, D) @ out_w.T + out_b
    out = heads_out(glob, H).reshape(T, B, D) @ out_w.T + out_b
    out += heads_out(syn, heads_k).reshape(T, B, -1) @ f(attn.syntax_out_proj.weight).T
    return np.concatenate([glob, syn], axis=1), out


@pytest.mark.parametrize("arch, heads_k, n, sigma", [
    ("sdatt_transformer_tiny", 1, 4.0, 2.0),
    ("sdatt_transformer_tiny", 2, 2.0, 0.8),
    ("sdatt_double_transformer_tiny", 1, 4.0, 2.0),
    ("sdatt_double_transformer_tiny", 2, 1.0, 1.0),
])
def test_cross_attention_layer_equals_numpy_from_the_definition(arch, heads_k, n, sigma):
    torch.manual_seed(0)
    model = build_model(arch, sdatt_heads=heads_k, sdatt_distance=n, sdatt_sigma=sigma,
                        dropout=0.0, attention_dropout=0.0)
    predictor = model.decoder.layers[1].encoder_attn.predictor
    with torch.no_grad():  # spread the predicted positions over the sentence
        predictor.v.mul_(8.0 / predictor.logit_scale)
    for layer in (0, 1):
        seen = capture_cross_attention(model, layer)
        attn = model.decoder.layers[layer].encoder_attn
        probs, out = numpy_cross_attention(attn, seen["query"], seen["key"], heads_k, n, sigma,
                                           arch.startswith("sdatt_double"))
        got = seen["probs"].reshape(probs.shape).double().numpy()
        np.testing.assert_allclose(got, probs, atol=1e-6)
        np.testing.assert_allclose(seen["out"].double().numpy(), out, atol=1e-5)
        positions = attn.last_positions
        assert positions.shape == (2, heads_k, 5)
        assert (positions[0] <= 6).all() and (positions[1] <= 3).all()
    assert (model.decoder.layers[1].encoder_attn.last_positions[0] % 1 != 0).all()


def test_double_context_is_fairseqs_attention_plus_the_syntax_context():
    """With W_s = 0 the double-context model computes the backbone's function given the
    backbone's parameters (its own softmax/dropout/context path equals fairseq's)."""
    torch.manual_seed(0)
    double = build_model("sdatt_double_transformer_tiny")
    torch.manual_seed(0)
    plain = build_model("syntax_transformer_tiny")
    state = {k: v for k, v in double.state_dict().items()
             if ".predictor." not in k and "syntax_out_proj" not in k}
    plain.load_state_dict(state)
    src, lengths, prev = batch(double)
    with torch.no_grad():
        for layer in double.decoder.layers:
            layer.encoder_attn.syntax_out_proj.weight.zero_()
        got, extra = double(src, lengths, prev, src_distances=DISTANCES)
        want, want_extra = plain(src, lengths, prev)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(extra["attn"][0], want_extra["attn"][0])
    with torch.no_grad():
        # (random: a constant W_s adds the same value to every feature, which the
        # post-attention LayerNorm removes)
        double.decoder.layers[0].encoder_attn.syntax_out_proj.weight.normal_(0, 0.3)
        changed, _ = double(src, lengths, prev, src_distances=DISTANCES)
    assert (changed - want).abs().max() > 1e-3


def test_only_the_chosen_layers_and_heads_change():
    torch.manual_seed(0)
    model = build_model("sdatt_transformer_tiny", sdatt_layers="1", sdatt_heads=1)
    assert type(model.decoder.layers[0]).__name__ == "TransformerDecoderLayerBase"
    assert model.decoder.layers[1].encoder_attn.predictor.v.shape == (1, 32)
    seen = capture_cross_attention(model, 1)
    probs = seen["probs"].view(2, 2, 5, 7)
    attn = model.decoder.layers[1].encoder_attn
    q = attn.q_proj(seen["query"]) * attn.scaling
    k = attn.k_proj(seen["key"])
    plain = torch.einsum("tbhd,sbhd->bhts", q.view(5, 2, 2, 32), k.view(7, 2, 2, 32))
    plain = plain.masked_fill(PADDING[:, None, None], float("-inf")).softmax(-1)
    torch.testing.assert_close(probs[:, 1], plain[:, 1])
    assert (probs[:, 0] - plain[:, 0]).abs().max() > 1e-2


@pytest.mark.parametrize("scale", [1.0, 0.05])
def test_the_logit_scale_multiplies_each_heads_predictor_logit(scale):
    """p = L·sigmoid(s·v_hᵀ tanh(W_h x)), per head, from the predictor's own parameters;
    ``--position-logit-scale`` reaches every SDAtt layer's heads, and a checkpoint without
    the option (trained before it) keeps the paper's s = 1."""
    model = build_model("sdatt_double_transformer_tiny", position_logit_scale=scale)
    predictor = model.decoder.layers[0].encoder_attn.predictor
    assert [layer.encoder_attn.predictor.logit_scale for layer in model.decoder.layers] == [scale] * 2
    torch.manual_seed(1)
    query, last = torch.randn(5, 2, predictor.proj.in_features), torch.tensor([6, 3])
    hidden = torch.tanh(query @ predictor.proj.weight.T).view(5, 2, predictor.heads, -1)
    logit = torch.einsum("tbkd,kd->bkt", hidden, predictor.v)
    want = last[:, None, None].float() * torch.sigmoid(scale * logit)
    torch.testing.assert_close(predictor(query, last), want)
    assert position_logit_scale(argparse.Namespace(), "syntax_directed") == 1.0


def test_the_predictor_learns_through_the_interpolated_row():
    model = build_model("sdatt_transformer_tiny", dropout=0.0)
    model.train()
    src, lengths, prev = batch(model)
    out, _ = model(src, lengths, prev, src_distances=DISTANCES)
    out.log_softmax(-1)[..., 4].sum().backward()
    for layer in model.decoder.layers:
        assert layer.encoder_attn.predictor.proj.weight.grad.abs().sum() > 0
        assert layer.encoder_attn.predictor.v.grad.abs().min() > 0


@pytest.mark.parametrize("arch", ["sdatt_transformer_tiny", "sdatt_double_transformer_tiny"])
def test_incremental_decoding_equals_full_forward(arch):
    model = build_model(arch, sdatt_heads=1)
    src, lengths, prev = batch(model)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, prev, src_distances=DISTANCES)[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths, src_distances=DISTANCES), prev)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ["sdatt_transformer_tiny", "sdatt_double_transformer_tiny"])
def test_incremental_decoding_after_beam_reorder(arch):
    """Beam 2 over the two sentences; rows move within a sentence's beam (fairseq's
    cross-attention cache keeps its keys), the distances move with encoder_out."""
    model = build_model(arch)
    src, lengths, prev = batch(model)
    beam = torch.tensor([0, 0, 1, 1])
    src, lengths, distances = src[beam], lengths[beam], DISTANCES[beam]
    prev = torch.cat([prev, prev.flip(1)])[torch.tensor([0, 2, 1, 3])]
    order = torch.tensor([1, 1, 3, 2])
    with torch.no_grad():
        full = torch.log_softmax(
            model(src[order], lengths[order], prev[order], src_distances=distances[order])[0], -1)
        encoder_out = model.encoder(src, lengths, src_distances=distances)
        step = incremental_log_probs(model, encoder_out, prev, reorder=order, reorder_at=3)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype, sigma, tolerance", [(torch.float16, 0.01, 0.02),
                                                     (torch.bfloat16, 2.0, 0.1)])
@pytest.mark.parametrize("arch", ["sdatt_transformer_tiny", "sdatt_double_transformer_tiny"])
def test_half_precision_model_is_finite_and_close_to_float32(arch, dtype, sigma, tolerance):
    """float16 with σ = 0.01 (biases up to n²/2σ² = 80000, beyond its range before the
    clamp); bfloat16 at the default σ (its 8-bit query makes p, and with σ = 0.01 the
    near-hard window, differ from float32's)."""
    torch.manual_seed(0)
    model = build_model(arch, sdatt_sigma=sigma)
    src, lengths, prev = batch(model)
    with torch.no_grad():
        want = torch.log_softmax(model(src, lengths, prev, src_distances=DISTANCES)[0], -1)
        model.to(dtype)
        got = model(src, lengths, prev, src_distances=DISTANCES)[0].float().log_softmax(-1)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, want, atol=tolerance, rtol=0)


def test_option_errors_name_the_option():
    with pytest.raises(ValueError, match=r"--sdatt-heads 3: .*2 heads"):
        build_model("sdatt_transformer_tiny", sdatt_heads=3)
    with pytest.raises(ValueError, match=r"--sdatt-layers \[2\]: the decoder has 2 layers"):
        build_model("sdatt_transformer_tiny", sdatt_layers="0,2")
    with pytest.raises(ValueError, match=r"--sdatt-layers 'a': give comma-separated"):
        build_model("sdatt_transformer_tiny", sdatt_layers="a")
    with pytest.raises(ValueError, match=r"--sdatt-distance 1000.0: .* < 1000"):
        build_model("sdatt_transformer_tiny", sdatt_distance=1000.0)
    with pytest.raises(ValueError, match=r"--sdatt-sigma must be > 0"):
        build_model("sdatt_transformer_tiny", sdatt_sigma=0.0)
    model = build_model("sdatt_transformer_tiny")
    src, lengths, prev = batch(model)
    with pytest.raises(ValueError, match=r"needs src_distances in the batch"):
        model(src, lengths, prev)
    defaults = model.decoder.layers[1].encoder_attn
    assert (defaults.sdatt_heads, defaults.max_distance, defaults.sigma, defaults.double_context) == (2, 4.0, 2.0, False)
    assert defaults.predictor.logit_scale == 1.0  # no option at all: a checkpoint from before it
    parsed = build_model("sdatt_transformer_tiny", position_logit_scale=None)  # the parser's default
    assert parsed.decoder.layers[1].encoder_attn.predictor.logit_scale == SDATT_POSITION_LOGIT_SCALE
    assert build_model("sdatt_double_transformer_tiny").decoder.layers[0].encoder_attn.double_context


@pytest.mark.parametrize("arch, extra", [
    ("sdatt_transformer_tiny", ["--sdatt-sigma", "1.5", "--sdatt-heads", "1"]),
    ("sdatt_double_transformer_tiny", ["--sdatt-layers", "1"]),
])
def test_train_and_generate_through_the_command_lines(synthetic_databin, tmp_path, arch, extra):
    train = run_cli(transformer_train_args(synthetic_databin, tmp_path, updates=3,
                                           extra=["--arch", arch, *extra]))
    log = train.stdout + train.stderr
    assert re.search(r"\[train\] syntax inputs: \['distances', 'heads'\]", log), log[-2000:]
    assert re.search(r"model: SDAttTransformerModel", log), log[-2000:]
    assert re.search(r"\| train \| .*\| loss [0-9.]+ \|.*\| num_updates 3 \|", log), log[-2000:]
    # fairseq-train's own option default reaches every SDAtt layer of the saved model
    from fairseq import checkpoint_utils
    (model,), cfg, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(tmp_path / "checkpoint_last.pt")], arg_overrides={"data": str(synthetic_databin)})
    assert cfg.model.position_logit_scale is None
    scales = [m.logit_scale for m in model.modules() if type(m).__name__ == "HeadPositionPredictor"]
    assert scales == [SDATT_POSITION_LOGIT_SCALE] * (2 if arch == "sdatt_transformer_tiny" else 1)
    gen = generate_test_split(synthetic_databin, tmp_path)
    assert len(re.findall(r"^H-\d+\t-?[0-9.]+\t", gen, re.M)) == 37
    assert len(re.findall(r"^A-\d+\t", gen, re.M)) == 37
    assert re.search(r"Generate test with beam=5: BLEU4 = [0-9.]+", gen)
