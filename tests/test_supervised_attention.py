"""Criterion ``supervised_attention_cross_entropy`` (Mi et al. 2016): the gold matrix and
the loss against hand-worked numbers, padding on either side, transformer_align, the
optimisation strategies through fairseq's own training loop, and the command lines."""
import json
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.data import Dictionary

from conftest import USER_DIR, generate_args, run_cli, train_args
from model_utils import FakeTask, build_model, random_batch
from fairseq_syntax.cli.score_alignments import main as score_main
from fairseq_syntax.criterions.attention_strategy import parameter_parts
from fairseq_syntax.criterions.gold_alignment import gold_attention, link_positions
from fairseq_syntax.criterions.supervised_attention import (
    SupervisedAttentionCrossEntropy,
    supervised_weights,
)
from fairseq_syntax.modules.phrase_folding import fold_phrase_attention

CRITERION = ["--criterion", "supervised_attention_cross_entropy"]


pytestmark = pytest.mark.usefixtures("one_thread")



class FixedAttentionModel(nn.Module):
    """Returns given attention and uniform logits (NLL = log V per token)."""

    def __init__(self, attn, vocab):
        super().__init__()
        self.attn = attn
        self.vocab = vocab

    def forward(self, src_tokens, src_lengths, prev_output_tokens, **side_inputs):
        bsz, tgt_len = prev_output_tokens.shape
        return torch.zeros(bsz, tgt_len, self.vocab), {"attn": [self.attn]}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        return F.log_softmax(net_output[0], dim=-1)

    def get_targets(self, sample, net_output):
        return sample["target"]


def make_dictionary(n=10):
    d = Dictionary()
    for i in range(n):
        d.add_symbol(f"w{i}")
    return d


def criterion(dictionary, **kwargs):
    return SupervisedAttentionCrossEntropy(FakeTask(dictionary, dictionary), sentence_avg=False,
                                           **kwargs)


def sample_of(src, tgt, links=None, flat=None, ids=None):
    pad, eos = 1, 2
    prev = torch.full_like(tgt, pad)
    for b in range(tgt.size(0)):
        row = tgt[b][tgt[b] != pad]
        prev[b, : len(row)] = torch.cat([torch.tensor([eos]), row[:-1]])
    net_input = {"src_tokens": src, "src_lengths": src.ne(pad).sum(1), "prev_output_tokens": prev}
    sample = {"net_input": net_input, "target": tgt, "ntokens": int(tgt.ne(pad).sum()),
              "id": torch.tensor(ids if ids is not None else list(range(src.size(0))))}
    if links is not None:
        sample["alignment_links"] = links
    if flat is not None:
        sample["alignments"] = flat
    return sample


# --------------------------------------------------------------------------- gold matrix


def test_paper_smoothing_example():
    # Mi et al., section 3.2: A[1,1] = 1 gives A*[1,1] += 1, A*[1,2] += 0.61, A*[1,3] += 0.14
    # for w = 2 and g(0, 1). One target word + eos, five source words + eos.
    src = torch.ones(1, 6, dtype=torch.bool)
    tgt = torch.ones(1, 2, dtype=torch.bool)
    pos = link_positions(torch.tensor([[[0, 0]]]), src, tgt)
    raw = gold_attention(*pos, src, tgt, "smoothed", window=2, sigma=1.0, normalize=False)
    assert [round(v, 2) for v in raw[0, 0].tolist()] == [1.0, 0.61, 0.14, 0.0, 0.0, 0.0]
    assert raw[0, 1].tolist() == [0, 0, 0, 0, 0, 1.0]  # target eos -> source eos
    norm = gold_attention(*pos, src, tgt, "smoothed", window=2, sigma=1.0)
    total = 1 + math.exp(-0.5) + math.exp(-2)
    assert norm[0, 0, :3].tolist() == pytest.approx([1 / total, math.exp(-0.5) / total,
                                                      math.exp(-2) / total])
    # A link in the middle spreads both ways, never onto eos.
    pos = link_positions(torch.tensor([[[4, 0]]]), src, tgt)
    raw = gold_attention(*pos, src, tgt, "smoothed", window=2, sigma=1.0, normalize=False)
    assert [round(v, 2) for v in raw[0, 0].tolist()] == [0.0, 0.0, 0.14, 0.61, 1.0, 0.0]


# Hand-worked 3 x 4 example: source x0 x1 x2 <eos>, target y0 y1 <eos>.
# Links: y0-x0 and y0-x2; y1 is unaligned (-> source eos); target eos -> source eos.
ATTN = [[0.4, 0.1, 0.3, 0.2],
        [0.1, 0.2, 0.3, 0.4],
        [0.0, 0.1, 0.1, 0.8]]
# simple:   A* = [[.5, 0, .5, 0], [0, 0, 0, 1], [0, 0, 0, 1]]
# distance: row 0: .01 + .01 + .04 + .04 = .10; row 1: .01 + .04 + .09 + .36 = .50;
#           row 2: 0 + .01 + .01 + .04 = .06; total 0.66
SIMPLE_GOLD = [[0.5, 0, 0.5, 0], [0, 0, 0, 1], [0, 0, 0, 1]]
# smoothed, w = 1, σ = 1: row 0 before normalising: x0: 1, x1: 2 exp(-1/2), x2: 1, eos: 0
G = math.exp(-0.5)
SMOOTHED_GOLD = [[1 / (2 + 2 * G), 2 * G / (2 + 2 * G), 1 / (2 + 2 * G), 0],
                 [0, 0, 0, 1], [0, 0, 0, 1]]


def squared_distance(a, b):
    return sum((x - y) ** 2 for ra, rb in zip(a, b) for x, y in zip(ra, rb))


@pytest.mark.parametrize("transform, gold, expected", [
    ("simple", SIMPLE_GOLD, 0.66),
    ("smoothed", SMOOTHED_GOLD, 0.6850),  # row 0: .00788 + .07703 + .00013 + .04 = .12504
])
def test_loss_equals_formula_on_hand_worked_example(transform, gold, expected):
    d = make_dictionary()
    src = torch.tensor([[4, 5, 6, 2]])
    tgt = torch.tensor([[7, 8, 2]])
    links = torch.tensor([[[0, 0], [2, 0]]])
    crit = criterion(d, alignment_lambda=0.5, alignment_transform=transform,
                     alignment_window=1, alignment_sigma=1.0)
    model = FixedAttentionModel(torch.tensor([ATTN]), len(d))
    loss, sample_size, log = crit(model, sample_of(src, tgt, links))
    distance = squared_distance(ATTN, gold)
    assert distance == pytest.approx(expected, abs=1e-4)
    assert float(log["alignment_loss"]) == pytest.approx(distance, rel=1e-5)
    assert log["alignment_rows"] == 3 and sample_size == 3
    nll = 3 * math.log(len(d))
    assert float(log["nll_loss"]) == pytest.approx(nll, rel=1e-5)
    assert float(loss) == pytest.approx(nll + 0.5 * distance, rel=1e-5)
    pos = link_positions(links, src.ne(1), tgt.ne(1))
    matrix = gold_attention(*pos, src.ne(1), tgt.ne(1), transform, window=1, sigma=1.0)
    assert matrix[0].tolist() == [pytest.approx(row) for row in gold]


def _two_sentences():
    # sentence A: 3 words + eos / 2 words + eos, links 0-0, 2-1
    # sentence B: 1 word + eos / 3 words + eos, link 0-2 (two unaligned target words)
    return ([4, 5, 6, 2], [7, 8, 2], [(0, 0), (2, 1)]), ([9, 2], [4, 5, 6, 2], [(0, 2)])


def _attention(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(rows, cols, generator=g), dim=-1)


def test_left_and_right_padding_give_the_same_loss_as_single_sentences():
    d = make_dictionary()
    crit = criterion(d, alignment_transform="smoothed", alignment_window=2, alignment_sigma=0.7)
    sents = _two_sentences()
    attns = [_attention(len(t), len(s), k) for k, (s, t, _) in enumerate(sents)]
    singles = []
    for (s, t, links), a in zip(sents, attns):
        sample = sample_of(torch.tensor([s]), torch.tensor([t]), torch.tensor([links]))
        log = crit(FixedAttentionModel(a[None], len(d)), sample)[2]
        singles.append(float(log["alignment_loss"]))
    S, T = 4, 4
    # Right-padded source with sentence-relative alignment_links.
    src_r = torch.tensor([s + [1] * (S - len(s)) for s, _, _ in sents])
    tgt = torch.tensor([t + [1] * (T - len(t)) for _, t, _ in sents])
    links = torch.full((2, 2, 2), -1)
    for b, (_, _, ls) in enumerate(sents):
        links[b, : len(ls)] = torch.tensor(ls)
    attn_r = torch.zeros(2, T, S)
    for b, a in enumerate(attns):
        attn_r[b, : a.size(0), : a.size(1)] = a
    right = crit(FixedAttentionModel(attn_r, len(d)), sample_of(src_r, tgt, links))[2]
    # Left-padded source with fairseq's flat sample["alignments"] (padded coordinates).
    src_l = torch.tensor([[1] * (S - len(s)) + s for s, _, _ in sents])
    attn_l = torch.zeros(2, T, S)
    flat = []
    for b, ((s, _, ls), a) in enumerate(zip(sents, attns)):
        attn_l[b, : a.size(0), S - a.size(1):] = a
        flat += [[S - len(s) + i, b * T + j] for i, j in ls]
    left_sample = sample_of(src_l, tgt, flat=torch.tensor(flat))
    left = crit(FixedAttentionModel(attn_l, len(d)), left_sample)[2]
    assert float(right["alignment_loss"]) == pytest.approx(sum(singles), rel=1e-5)
    assert float(left["alignment_loss"]) == pytest.approx(sum(singles), rel=1e-5)
    assert right["alignment_rows"] == left["alignment_rows"] == 3 + 4


def test_gold_rows_are_distributions_on_real_positions():
    sents = _two_sentences()
    src = torch.tensor([[1, 1] + sents[1][0], [4, 5, 6, 2]])  # one row left-padded
    tgt = torch.tensor([sents[1][1], sents[0][1] + [1]])
    links = torch.tensor([[[0, 2], [-1, -1]], [[0, 0], [2, 1]]])
    gold = gold_attention(*link_positions(links, src.ne(1), tgt.ne(1)), src.ne(1), tgt.ne(1))
    assert torch.allclose(gold.sum(-1), tgt.ne(1).float())
    assert (gold * src.eq(1)[:, None, :]).sum() == 0
    # sentence B: target words 0, 1 unaligned -> its source eos (position 3), word 2 -> x0
    assert gold[0, :, 3].tolist() == [1, 1, 0, 1] and gold[0, 2, 2] == 1


def test_out_of_range_link_names_the_sentence():
    d = make_dictionary()
    crit = criterion(d)
    sample = sample_of(torch.tensor([[4, 5, 2]]), torch.tensor([[7, 2]]),
                       torch.tensor([[[3, 0]]]), ids=[17])
    with pytest.raises(ValueError, match="sentence 17: alignment link 3-0 is out of range"):
        crit(FixedAttentionModel(torch.full((1, 2, 3), 1 / 3), len(d)), sample)


def test_no_alignments_in_training_is_an_error_and_skipped_in_validation():
    d = make_dictionary()
    crit = criterion(d)
    model = FixedAttentionModel(torch.full((1, 2, 3), 1 / 3), len(d))
    sample = sample_of(torch.tensor([[4, 5, 2]]), torch.tensor([[7, 2]]))
    with pytest.raises(ValueError, match="carries no alignments"):
        crit(model, sample)
    model.eval()
    loss, _, log = crit(model, sample)
    assert log["alignment_rows"] == 0 and float(loss) == pytest.approx(2 * math.log(len(d)))


# --------------------------------------------------------------------------- strategies


def tiny_backbone(**overrides):
    kwargs = dict(encoder_embed_dim=8, encoder_hidden_size=8, decoder_embed_dim=8,
                  decoder_hidden_size=16, dropout=0.0)
    kwargs.update(overrides)
    return build_model("attentional_rnn", **kwargs)


def test_parameter_parts_of_the_backbone():
    model = tiny_backbone()
    parts = parameter_parts(model, ["decoder.fc_out", "decoder.project_out"])
    output = {n for n, _ in parts["output"]}
    alignment = {n for n, _ in parts["alignment"]}
    assert output == {"decoder.fc_out.weight", "decoder.fc_out.bias",
                      "decoder.project_out.weight", "decoder.project_out.bias"}
    assert {"decoder.attention.combine.weight", "decoder.attention.score.proj.weight",
            "decoder.layers.0.weight_hh", "decoder.layers.0.weight_ih",
            "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"} <= alignment
    assert len(output) + len(alignment) == len(list(model.parameters()))
    # Tied input/output embeddings belong to both parts and are frozen under A and T.
    tied = tiny_backbone(share_decoder_input_output_embed=True)
    d = tied.decoder.dictionary
    for strategy in ("alignment", "translation"):
        frozen = criterion(d, attention_strategy=strategy).strategy.frozen_parameters(tied)
        assert any(p is tied.decoder.embed_tokens.weight for _, p in frozen)
    with pytest.raises(ValueError, match="no parameter name starts with"):
        criterion(d, attention_strategy="alignment",
                  output_layer_prefixes="decoder.nothing").strategy.frozen_parameters(model)


def _backbone_sample(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    src_dict = model.encoder.dictionary
    src = torch.randint(4, len(src_dict), (3, 6), generator=g)
    src[:, -1] = 2
    src[2, 4:] = torch.tensor([2, 1])
    tgt = torch.randint(4, len(model.decoder.dictionary), (3, 5), generator=g)
    tgt[:, -1] = 2
    links = torch.tensor([[[0, 0], [1, 1], [2, 3]]] * 3)
    return sample_of(src, tgt, links)


def test_frozen_parameters_stay_bit_identical_under_adam_with_state():
    from fairseq.optim.adam import Adam

    model = tiny_backbone().train()
    d = model.decoder.dictionary
    opt = Adam(model.parameters(), lr=0.01, weight_decay=0.1)
    joint = criterion(d)
    for step in range(2):  # joint steps: every parameter gets Adam moments
        opt.zero_grad()
        joint(model, _backbone_sample(model, step))[0].backward()
        opt.step()
    for strategy, part in (("alignment", "output"), ("translation", "alignment")):
        crit = criterion(d, attention_strategy=strategy)
        parts = parameter_parts(model, crit.output_layer_prefixes)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        for step in range(2):
            for p in model.parameters():
                p.grad = None  # fairseq's optimizer.zero_grad()
            crit(model, _backbone_sample(model, 5 + step))[0].backward()
            opt.step()
        frozen = {n for n, _ in parts[part]}
        for name, p in model.named_parameters():
            if name in frozen:
                assert torch.equal(p, before[name]), f"{strategy}: {name} changed"
        trained = [n for n, p in model.named_parameters()
                   if n not in frozen and not torch.equal(p, before[n])]
        assert trained, f"{strategy}: nothing trained"
        if strategy == "alignment":
            # The copy check catches a frozen parameter changed behind the optimizer's back.
            with torch.no_grad():
                model.decoder.fc_out.bias.add_(1.0)
            with pytest.raises(RuntimeError, match="frozen parameter decoder.fc_out.bias changed"):
                crit(model, _backbone_sample(model))
            with torch.no_grad():
                model.decoder.fc_out.bias.sub_(1.0)
        for p in model.parameters():
            p.requires_grad_(True)


@pytest.mark.parametrize("arch", ["attentional_rnn", "sa_nmt_shared", "sdatt_local_p",
                                  "sdatt_double_syntax", "tree2seq", "lookahead_concat"])
def test_w_c_is_in_the_translation_part_by_default(arch):
    """Mi et al. §3.3: T is the network g(s_t, y_{t-1}); in the Luong backbone that is
    W_c of the attentional layer (h̃_t = tanh(W_c [c_t; h_t])) and the output layer."""
    model = build_model(arch, encoder_embed_dim=8, encoder_hidden_size=8, decoder_embed_dim=8,
                        decoder_hidden_size=16)
    crit = criterion(model.decoder.dictionary)
    parts = parameter_parts(model, crit.output_layer_prefixes)
    output = {n for n, _ in parts["output"]}
    alignment = {n for n, _ in parts["alignment"]}
    assert "decoder.attention.combine.weight" in output
    assert "decoder.attention.combine.weight" not in alignment
    score = "source_score" if arch.startswith("lookahead") else "score"
    assert f"decoder.attention.{score}.proj.weight" in alignment


def test_translation_strategy_trains_w_c_and_alignment_strategy_freezes_it():
    """The loss's gradient reaches W_c under T, not under A (the reverse of the score W_a)."""
    model = tiny_backbone().train()
    d = model.decoder.dictionary
    w_c = model.decoder.attention.combine.weight
    w_a = model.decoder.attention.score.proj.weight
    crit_t = criterion(d, attention_strategy="translation")
    crit_t(model, _backbone_sample(model))[0].backward()
    assert w_c.grad is not None and w_c.grad.abs().sum() > 0
    assert w_a.grad is None and not w_a.requires_grad  # the alignment part stays fixed
    for p in model.parameters():
        p.requires_grad_(True)
        p.grad = None
    crit_a = criterion(d, attention_strategy="alignment")
    crit_a(model, _backbone_sample(model))[0].backward()
    assert w_c.grad is None and not w_c.requires_grad
    assert w_a.grad is not None and w_a.grad.abs().sum() > 0
    for p in model.parameters():
        p.requires_grad_(True)


def test_translation_strategy_loss_has_no_alignment_term():
    model = tiny_backbone().train()
    d = model.decoder.dictionary
    crit_t = criterion(d, attention_strategy="translation")
    loss_t, _, log_t = crit_t(model, _backbone_sample(model))
    assert loss_t.item() == pytest.approx(float(log_t["nll_loss"]), rel=1e-6)
    assert float(log_t["alignment_loss"]) > 0
    for p in model.parameters():
        p.requires_grad_(True)
    crit_a = criterion(d, attention_strategy="alignment", alignment_loss_only=True,
                       alignment_lambda=2.0)
    loss_a, _, log_a = crit_a(model, _backbone_sample(model))
    assert loss_a.item() == pytest.approx(2.0 * float(log_a["alignment_loss"]), rel=1e-6)


# --------------------------------------------------------------------------- supervised weights


def right_branching(n):
    """Tree rows of the right-branching binary tree over ``n`` leaves (node n + k is row k)."""
    rows, right = [], n - 1
    for i in range(n - 2, -1, -1):
        rows.append([i, right])
        right = n + len(rows) - 1
    return rows


def test_fold_phrase_attention_by_hand():
    # 3 leaves + eos; phrases: node 3 = (0, 1), node 4 = (3, 2) covers all three leaves.
    # Second sentence: 1 leaf + eos + padding, no phrase (padding rows).
    tree = torch.tensor([[[0, 1], [3, 2]], [[-1, -1], [-1, -1]]])
    src_nonpad = torch.tensor([[True] * 4, [True, True, False, False]])
    w = torch.tensor([[[0.1, 0.2, 0.05, 0.05, 0.3, 0.3]], [[0.7, 0.3, 0.0, 0.0, 0.0, 0.0]]])
    folded = fold_phrase_attention(w, tree, src_nonpad)
    expected = [[0.1 + 0.3 / 2 + 0.3 / 3, 0.2 + 0.3 / 2 + 0.3 / 3, 0.05 + 0.3 / 3, 0.05]]
    assert folded[0].tolist() == [pytest.approx(row) for row in expected]
    assert folded[1].tolist() == [pytest.approx([0.7, 0.3, 0.0, 0.0])]
    with pytest.raises(ValueError, match="expected 6"):
        fold_phrase_attention(w[:, :, :5], tree, src_nonpad)


def _model_sample(model, trees=False):
    src, lengths, prev = random_batch(model, bsz=3, src_len=7, tgt_len=5, seed=1)
    tgt = torch.cat([prev[:, 1:], torch.full((3, 1), 2)], dim=1)  # target = prev shifted
    links = torch.tensor([[[0, 0], [1, 1], [3, 2]]] * 3)
    sample = sample_of(src, tgt, links)
    if trees:
        rows = [right_branching(int(n) - 1) for n in lengths]
        width = max(len(r) for r in rows)
        sample["net_input"]["src_tree"] = torch.tensor(
            [r + [[-1, -1]] * (width - len(r)) for r in rows])
    return sample


def test_tree2seq_supervises_word_and_phrase_weights_folded_onto_the_words():
    model = build_model("tree2seq", encoder_embed_dim=8, encoder_hidden_size=8,
                        decoder_embed_dim=8, decoder_hidden_size=16, dropout=0.0).train()
    sample = _model_sample(model, trees=True)
    net_input = sample["net_input"]
    crit = criterion(model.decoder.dictionary)
    _, _, log = crit(model, sample)
    with torch.no_grad():
        _, extra = model(**net_input)
    src_nonpad = net_input["src_tokens"].ne(1)
    tgt_nonpad = sample["target"].ne(1)
    rows = tgt_nonpad[:, :, None] & src_nonpad[:, None, :]
    word_columns = extra["attn"][0]
    # the word columns alone are not a distribution: phrases take part of the weight
    assert float(word_columns.sum(-1)[tgt_nonpad].max()) < 0.99
    folded = fold_phrase_attention(extra["memory_attn"][0], net_input["src_tree"], src_nonpad)
    torch.testing.assert_close(folded.sum(-1)[tgt_nonpad], torch.ones(int(tgt_nonpad.sum())))
    pos = link_positions(sample["alignment_links"], src_nonpad, tgt_nonpad)
    gold = gold_attention(*pos, src_nonpad, tgt_nonpad)
    expected = ((folded - gold) ** 2).masked_fill(~rows, 0).sum()
    assert float(log["alignment_loss"]) == pytest.approx(float(expected), rel=1e-5)
    # without the trees the extra columns cannot be folded
    del net_input["src_tree"]
    with pytest.raises(ValueError, match="no source trees"):
        supervised_weights(extra, net_input, src_nonpad)


def test_local_p_supervises_the_window_softmax_before_the_gaussian():
    model = build_model("sdatt_local_p", encoder_embed_dim=8, encoder_hidden_size=8,
                        decoder_embed_dim=8, decoder_hidden_size=16, local_window=2.0,
                        dropout=0.0).train()
    sample = _model_sample(model)
    net_input = sample["net_input"]
    crit = criterion(model.decoder.dictionary)
    _, _, log = crit(model, sample)
    with torch.no_grad():
        _, extra = model(**net_input)
        # one step by hand: the window softmax of the Luong scores, zero outside the window
        attention = model.decoder.attention
        encoder_out = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
        state = attention.init_state(encoder_out)
        hidden = torch.randn(3, 16)
        _, weights, new_state = attention(hidden, encoder_out, state)
        before = new_state["extra.attn_before_gaussian"]
        scores = attention.score(hidden, state["keys"])
        position = attention.local_weights.predictor(hidden, state["last_position"])
    window = weights.gt(0)
    by_hand = torch.softmax(scores.masked_fill(~window, float("-inf")), dim=-1)
    torch.testing.assert_close(before, by_hand)
    # then Luong's Gaussian, σ = D / 2 = 1, multiplies it (1 only where j = p_t exactly)
    offset = torch.arange(weights.size(1)).float() - position[:, None]
    torch.testing.assert_close(weights, before * torch.exp(-offset ** 2 / 2.0))
    src_nonpad = net_input["src_tokens"].ne(1)
    tgt_nonpad = sample["target"].ne(1)
    supervised = extra["attn_before_gaussian"][0]
    torch.testing.assert_close(supervised.sum(-1)[tgt_nonpad], torch.ones(int(tgt_nonpad.sum())))
    assert float(extra["attn"][0].sum(-1)[tgt_nonpad].max()) < 0.99  # after the Gaussian
    rows = tgt_nonpad[:, :, None] & src_nonpad[:, None, :]
    pos = link_positions(sample["alignment_links"], src_nonpad, tgt_nonpad)
    gold = gold_attention(*pos, src_nonpad, tgt_nonpad)
    expected = ((supervised - gold) ** 2).masked_fill(~rows, 0).sum()
    assert float(log["alignment_loss"]) == pytest.approx(float(expected), rel=1e-5)


# --------------------------------------------------------------------------- transformer_align


def _setup(databin, argv):
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(databin), "--user-dir", USER_DIR, *argv])
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    return cfg, task


TRANSFORMER = ["--arch", "transformer_align", "--encoder-layers", "1", "--decoder-layers", "1",
               "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
               "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
               "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
               "--alignment-layer", "0", "--alignment-heads", "2", "--dropout", "0", *CRITERION]


def test_transformer_align_with_left_and_right_padded_sources(synthetic_databin):
    cfg_l, task_l = _setup(synthetic_databin, ["--task", "translation", "--load-alignments",
                                               *TRANSFORMER])
    cfg_r, task_r = _setup(synthetic_databin, ["--task", "syntax_translation", *TRANSFORMER])
    torch.manual_seed(0)
    model = task_l.build_model(cfg_l.model)
    crit_l = task_l.build_criterion(cfg_l.criterion)
    crit_r = task_r.build_criterion(cfg_r.criterion)  # asks the task for alignments
    task_l.load_dataset("valid")
    task_r.load_dataset("valid")
    ds_l, ds_r = task_l.dataset("valid"), task_r.dataset("valid")
    assert ds_l.left_pad_source and not ds_r.left_pad_source
    batch_l = ds_l.collater([ds_l[i] for i in range(8)])
    batch_r = ds_r.collater([ds_r[i] for i in range(8)])
    assert batch_l["net_input"]["src_tokens"][:, 0].eq(1).any()  # really left-padded
    assert batch_r["net_input"]["src_tokens"][:, -1].eq(1).any()
    links_r = batch_r["alignment_links"]
    assert "alignment_links" not in batch_r["net_input"]
    assert len(batch_l["alignments"]) == int(links_r[..., 0].ge(0).sum()) > 0
    model.train()
    loss_l, _, log_l = crit_l(model, batch_l)
    loss_r, _, log_r = crit_r(model, batch_r)
    assert float(log_l["alignment_loss"]) == pytest.approx(float(log_r["alignment_loss"]), rel=1e-4)
    assert float(log_l["nll_loss"]) == pytest.approx(float(log_r["nll_loss"]), rel=1e-4)
    loss_r.backward()
    grad = model.decoder.layers[0].encoder_attn.k_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0


# --------------------------------------------------------------------------- command lines


def train_in_process(argv):
    """fairseq-train's own code path (option parsing, Trainer, checkpoints) in this process."""
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq_cli import train

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, list(map(str, argv[1:])))
    distributed_utils.call_main(convert_namespace_to_omegaconf(args), train.main)


def load_state(path):
    from fairseq import checkpoint_utils

    state = checkpoint_utils.load_checkpoint_to_cpu(str(path))
    return state["model"], state["optimizer_history"][-1]["num_updates"]


@pytest.fixture(scope="module")
def joint_run(synthetic_databin, tmp_path_factory):
    """fairseq-train (the real command) with the criterion, joint strategy, 3 updates."""
    save = tmp_path_factory.mktemp("sa_joint")
    proc = run_cli(train_args(synthetic_databin, save, updates=3, extra=[
        *CRITERION, "--alignment-transform", "smoothed", "--alignment-sigma", "1.0"]))
    return save, proc.stdout + proc.stderr


def test_train_generate_and_score_alignments(synthetic_databin, synthetic_raw, joint_run, tmp_path,
                                            capsys):
    save, log = joint_run
    assert "alignment_loss" in log and "syntax inputs: ['alignments']" in log
    gen = run_cli(generate_args(synthetic_databin, save / "checkpoint_last.pt", [
        "--beam", "1", "--prefix-size", "1024", "--print-alignment", "soft"])).stdout
    gen_file = tmp_path / "gen.txt"
    gen_file.write_text(gen, encoding="utf-8")
    links = tmp_path / "links.txt"
    gold = synthetic_raw / "test.align"
    n_gold = len(gold.read_text(encoding="utf-8").splitlines())
    # The scoring command's entry point, in-process (its console script is a thin wrapper).
    assert score_main(["--generate", str(gen_file), "--gold", str(gold), "--json",
                       "--write-links", str(links)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["sentences"] == n_gold  # every test sentence, force-decoded
    assert 0.0 <= scores["aer"] <= 1.0 and scores["sure_links"] > 0
    assert len(links.read_text().splitlines()) == n_gold


def test_strategies_keep_the_frozen_part_bit_identical(synthetic_databin, joint_run, tmp_path):
    save_j, _ = joint_run
    joint, _ = load_state(save_j / "checkpoint_last.pt")
    output = {k for k in joint if k.startswith(
        ("decoder.attention.combine.", "decoder.fc_out.", "decoder.project_out."))}
    assert output and len(output) < len(joint)
    # Stage A, continuing the joint run with its Adam state (non-zero moments for every
    # parameter) and weight decay: the output layer must not move.
    save_a = tmp_path / "stage_a"
    train_in_process(train_args(synthetic_databin, save_a, updates=6, extra=[
        *CRITERION, "--attention-strategy", "alignment", "--weight-decay", "0.1",
        "--restore-file", str(save_j / "checkpoint_last.pt")]))
    stage_a, updates = load_state(save_a / "checkpoint_last.pt")
    assert updates == 6
    for key in joint:
        same = torch.equal(joint[key], stage_a[key])
        assert same == (key in output), f"stage A: {key} {'did not train' if same else 'changed'}"
    # Stage T, the documented second stage: --finetune-from-model (fresh optimizer).
    save_t = tmp_path / "stage_t"
    recipe = [*CRITERION, "--attention-strategy", "translation", "--weight-decay", "0.1"]
    train_in_process(train_args(synthetic_databin, save_t, updates=3, extra=[
        *recipe, "--finetune-from-model", str(save_a / "checkpoint_last.pt")]))
    stage_t, updates = load_state(save_t / "checkpoint_last.pt")
    assert updates == 3
    for key in joint:
        same = torch.equal(stage_a[key], stage_t[key])
        assert same == (key not in output), f"stage T: {key} {'did not train' if same else 'changed'}"
    # Resuming stage T from its own checkpoint (optimizer state restored) keeps A fixed.
    train_in_process(train_args(synthetic_databin, save_t, updates=5, extra=recipe))
    resumed, updates = load_state(save_t / "checkpoint_last.pt")
    assert updates == 5
    for key in joint:
        assert torch.equal(stage_a[key], resumed[key]) == (key not in output), key
