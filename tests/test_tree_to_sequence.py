"""Tree-to-sequence NMT (Eriguchi et al. 2016): Tree-LSTM, phrase attention, decoder init, CLI."""
import math
import re

import pytest
import torch
import torch.nn as nn

from conftest import generate_args, run_cli, train_args
from model_utils import build_model, incremental_log_probs, random_batch, tiny_dictionary

from fairseq_syntax.modules.global_attention import GlobalAttentionLayer
from fairseq_syntax.modules.phrase_attention import PhraseAttentionLayer
from fairseq_syntax.modules.rnn_encoder import RNNEncoder, final_states, lstm_states_and_cells
from fairseq_syntax.modules.tree_lstm import BinaryTreeLSTM, TreeLSTMCell, tree_levels

SMALL = dict(encoder_embed_dim=8, encoder_hidden_size=6, decoder_embed_dim=8, decoder_hidden_size=10)


def batch_trees():
    """Trees for ``random_batch(bsz=4, src_len=7)``: 6, 5, 4 and 6 leaves (eos excluded).

    Sentence 0 is balanced-ish, 1 a left chain, 2 a right chain, 3 has no parse.
    """
    tree = torch.full((4, 5, 2), -1)
    tree[0] = torch.tensor([[0, 1], [2, 3], [6, 7], [4, 5], [8, 9]])  # internal nodes 6..10
    tree[1, :4] = torch.tensor([[0, 1], [5, 2], [6, 3], [7, 4]])  # nodes 5..8
    tree[2, :3] = torch.tensor([[2, 3], [1, 4], [0, 5]])  # nodes 4..6: (0 (1 (2 3)))
    return tree


# ----------------------------------------------------------------------------- Tree-LSTM

def eq11(cell: TreeLSTMCell, left, right):
    """Eq. 11 written out with the cell's weight blocks U_l, U_r and biases."""
    d = cell.dim
    weight, bias = cell.gates.weight, cell.gates.bias
    (h_l, c_l), (h_r, c_r) = left, right

    def pre(gate):
        rows = slice(gate * d, (gate + 1) * d)
        return weight[rows, :d] @ h_l + weight[rows, d:] @ h_r + bias[rows]

    i, f_l, f_r, o = (torch.sigmoid(pre(g)) for g in range(4))
    u = torch.tanh(pre(4))
    c = i * u + f_l * c_l + f_r * c_r
    return o * torch.tanh(c), c


def recursive_reference(cell, leaf_h, leaf_c, rows, n):
    """Node-by-node recursion from the root: {node id: (h, c)} for one sentence."""
    memo = {}

    def state(node):
        if node < n:
            return leaf_h[node], leaf_c[node]
        if node not in memo:
            left, right = rows[node - n]
            memo[node] = eq11(cell, state(left), state(right))
        return memo[node]

    if rows:
        state(n + len(rows) - 1)
    return memo


def test_level_by_level_equals_recursive_reference_with_an_empty_tree():
    torch.manual_seed(0)
    tree = batch_trees()
    num_leaves = torch.tensor([6, 5, 3 + 1, 6])
    module = BinaryTreeLSTM(4).double()
    with torch.no_grad():
        module.cell.gates.weight.normal_()
        module.cell.gates.bias.normal_()
    leaf_h, leaf_c = torch.randn(4, 7, 4).double(), torch.randn(4, 7, 4).double()
    phrase_h, phrase_c, valid = module(leaf_h, leaf_c, tree, num_leaves)
    assert phrase_h.shape == (4, 5, 4)
    for b in range(4):
        n = int(num_leaves[b])
        rows = [tuple(r) for r in tree[b].tolist() if r[0] >= 0]
        expected = recursive_reference(module.cell, leaf_h[b], leaf_c[b], rows, n)
        assert valid[b].sum() == len(rows)
        for k in range(tree.size(1)):
            if k < len(rows):
                assert torch.allclose(phrase_h[b, k], expected[n + k][0], atol=1e-12)
                assert torch.allclose(phrase_c[b, k], expected[n + k][1], atol=1e-12)
            else:
                assert phrase_h[b, k].abs().max() == 0 and phrase_c[b, k].abs().max() == 0
    assert not valid[3].any()


def test_cell_gates_follow_eq11_with_hand_set_weights():
    cell = TreeLSTMCell(1)
    with torch.no_grad():
        # rows i, f_l, f_r, o, u; columns (left, right)
        cell.gates.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))
        cell.gates.bias.copy_(torch.tensor([0.0, 2.0, -2.0, 0.0, 0.0]))
    h_l, c_l, h_r, c_r = 0.5, 2.0, -1.0, 3.0
    h, c = cell((torch.tensor([h_l]), torch.tensor([c_l])), (torch.tensor([h_r]), torch.tensor([c_r])))

    def sig(x):
        return 1 / (1 + math.exp(-x))

    c_expected = sig(0.5) * math.tanh(-0.5) + sig(2.0) * 2.0 + sig(-2.0) * 3.0
    h_expected = sig(-1.0) * math.tanh(c_expected)
    assert c.item() == pytest.approx(c_expected, abs=1e-6)
    assert h.item() == pytest.approx(h_expected, abs=1e-6)
    # the left forget gate acts on the left child's memory only
    h2, c2 = cell((torch.tensor([h_l]), torch.tensor([c_r])), (torch.tensor([h_r]), torch.tensor([c_l])))
    assert c2.item() == pytest.approx(c_expected - (sig(2.0) - sig(-2.0)) * (c_l - c_r), abs=1e-6)


def test_forget_biases_start_at_one():
    cell = TreeLSTMCell(3)
    assert torch.equal(cell.gates.bias, torch.tensor([0.0] * 3 + [1.0] * 6 + [0.0] * 6))


def test_tree_levels_and_malformed_trees():
    tree = batch_trees()
    num_leaves = torch.tensor([6, 5, 4, 6])
    heights = torch.zeros(tree.shape[:2], dtype=torch.long)  # 0 for padding rows
    for level, nodes in enumerate(tree_levels(tree, num_leaves, 6), start=1):
        heights[nodes.batch, nodes.node] = level
    assert heights.tolist() == [[1, 1, 2, 1, 3], [1, 2, 3, 4, 0], [1, 2, 3, 0, 0], [0] * 5]
    bad = tree.clone()
    bad[0, 1] = torch.tensor([2, 9])  # node 7 cannot have node 9 as a child
    with pytest.raises(ValueError, match="earlier nodes"):
        tree_levels(bad, num_leaves, 6)


def test_tree_lstm_gradients():
    torch.manual_seed(1)
    module = BinaryTreeLSTM(2).double()
    tree = batch_trees()[:3, :3]
    tree[0] = torch.tensor([[0, 1], [4, 2], [5, 3]])  # 4 leaves
    num_leaves = torch.tensor([4, 4, 4])
    tree[1] = torch.tensor([[0, 1], [2, 3], [4, 5]])
    leaf_h = torch.randn(3, 5, 2, dtype=torch.double, requires_grad=True)
    leaf_c = torch.randn(3, 5, 2, dtype=torch.double, requires_grad=True)

    def fn(h, c):
        out_h, out_c, _ = module(h, c, tree, num_leaves)
        return out_h, out_c

    assert torch.autograd.gradcheck(fn, (leaf_h, leaf_c))


def test_tree_lstm_weight_and_leaf_gradients_equal_the_recursive_reference():
    torch.manual_seed(4)
    tree, num_leaves = batch_trees(), torch.tensor([6, 5, 4, 6])
    module = BinaryTreeLSTM(3).double()
    leaf_h = torch.randn(4, 7, 3, dtype=torch.double, requires_grad=True)
    leaf_c = torch.randn(4, 7, 3, dtype=torch.double, requires_grad=True)
    phrase_h, phrase_c, valid = module(leaf_h, leaf_c, tree, num_leaves)
    weights = torch.randn(phrase_h.shape, dtype=torch.double)
    batched = torch.autograd.grad((phrase_h * weights).sum() + phrase_c.sum(),
                                  [leaf_h, leaf_c, *module.parameters()])
    total = 0
    for b in range(4):
        n = int(num_leaves[b])
        rows = [tuple(r) for r in tree[b].tolist() if r[0] >= 0]
        states = recursive_reference(module.cell, leaf_h[b], leaf_c[b], rows, n)
        for k in range(len(rows)):
            h, c = states[n + k]
            total = total + (h * weights[b, k]).sum() + c.sum()
    reference = torch.autograd.grad(total, [leaf_h, leaf_c, *module.parameters()])
    for got, expected in zip(batched, reference):
        assert torch.allclose(got, expected, atol=1e-10)


def test_lstm_states_and_cells_equal_nn_lstm_and_a_step_by_step_lstm():
    torch.manual_seed(2)
    lstm = nn.LSTM(3, 4, batch_first=True, bidirectional=True)
    x = torch.randn(3, 6, 3, requires_grad=True)
    lengths = torch.tensor([6, 4, 2])
    states, cells = lstm_states_and_cells(lstm, x, torch.arange(6) < lengths.unsqueeze(1))
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    packed_out, (h_n, c_n) = lstm(packed)
    out, _ = nn.utils.rnn.pad_packed_sequence(packed_out, batch_first=True, total_length=6)
    assert torch.allclose(states, out, atol=1e-6)  # padding rows 0 in both
    assert torch.allclose(final_states(states, lengths - 1), torch.cat([h_n[0], h_n[1]], -1), atol=1e-6)
    assert torch.allclose(final_states(cells, lengths - 1), torch.cat([c_n[0], c_n[1]], -1), atol=1e-6)
    # same gradients as nn.LSTM's, for the input and every weight
    weights = torch.randn(3, 6, 8)
    params = [x, *lstm.parameters()]
    ours = torch.autograd.grad((states * weights).sum(), params)
    reference = torch.autograd.grad((out * weights).sum(), params)
    for got, expected in zip(ours, reference):
        assert torch.allclose(got, expected, atol=1e-5)
    # the cells, against nn.LSTMCell run token by token over each sentence alone
    for direction, suffix in enumerate(["", "_reverse"]):
        step = nn.LSTMCell(3, 4)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(step, name).data.copy_(getattr(lstm, f"{name}_l0{suffix}").data)
        for b, n in enumerate(lengths.tolist()):
            h = c = torch.zeros(1, 4)
            positions = range(n - 1, -1, -1) if direction else range(n)
            for t in positions:
                h, c = step(x[b, t:t + 1], (h, c))
                assert torch.allclose(cells[b, t, direction * 4:(direction + 1) * 4], c[0], atol=1e-6)
            assert cells[b, n:].abs().sum() == 0


class InternalsProbe(nn.Module):
    """An encoder extension that asks for the LSTM's states and cells and keeps what it saw."""

    encoder_internals = ("lstm_states", "lstm_cells")

    def __init__(self):
        super().__init__()
        self.seen = {}

    def forward(self, encoder_out):
        self.seen = dict(encoder_out)
        return encoder_out


def test_encoder_gives_its_undropped_states_and_cells_to_extensions_that_ask():
    torch.manual_seed(3)
    d = tiny_dictionary()
    src = torch.tensor([[5, 6, 7, 8, d.eos()], [9, 10, d.eos(), d.pad(), d.pad()]])
    lengths = torch.tensor([5, 3])
    probe = InternalsProbe()
    encoder = RNNEncoder(d, 5, 4, 1, dropout=0.5, extensions=[probe]).train()
    out = encoder(src, lengths)
    assert "lstm_states" not in out and "lstm_cells" not in out
    states, cells = probe.seen["lstm_states"], probe.seen["lstm_cells"]
    assert states.shape == cells.shape == (2, 5, 8)
    # the annotations are the same states after dropout: 0 or scaled by 1 / (1 - p)
    kept = out["annotations"].ne(0)
    assert 0 < int(kept.sum()) < 8 * int(lengths.sum())  # some real states were dropped
    assert torch.allclose(out["annotations"][kept], 2 * states[kept])
    # the cells are the LSTM's own: its last cells, and a step-by-step LSTM in eval mode
    encoder.eval()
    with torch.no_grad():
        encoder(src, lengths)
        packed = nn.utils.rnn.pack_padded_sequence(encoder.embed_tokens(src), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, (_, c_n) = encoder.lstm(packed)
    cells = probe.seen["lstm_cells"]
    assert torch.allclose(cells[torch.arange(2), lengths - 1, :4], c_n[0], atol=1e-6)
    assert torch.allclose(cells[:, 0, 4:], c_n[1], atol=1e-6)
    assert cells[1, 3:].abs().max() == 0


def test_encoder_refuses_internals_it_cannot_give():
    class Unknown(nn.Module):
        encoder_internals = ("lstm_gates",)

    with pytest.raises(ValueError, match="unknown encoder internals"):
        RNNEncoder(tiny_dictionary(), 5, 4, 1, 0.0, extensions=[Unknown()])
    with pytest.raises(ValueError, match="one-layer encoder only, got 2 layers"):
        RNNEncoder(tiny_dictionary(), 5, 4, 2, 0.0, extensions=[InternalsProbe()])


# ------------------------------------------------------------------------- the model

def tree_batch(model, seed=0):
    src, lengths, prev = random_batch(model, bsz=4, src_len=7, seed=seed)
    return src, lengths, prev, batch_trees()


def test_no_hooks_and_checkpoints_that_held_the_encoder_lstm_twice_load():
    model = build_model("tree2seq", **SMALL)
    assert [m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks] == []
    state = model.state_dict()
    assert [k for k in state if "._lstm." in k] == []
    # before the encoder exposed its cells, the tree layer held the encoder's LSTM as "_lstm"
    old = dict(state)
    for key, value in model.encoder.lstm.state_dict().items():
        old[f"encoder.extensions.0._lstm.{key}"] = value.clone()
    fresh = build_model("tree2seq", **SMALL)
    fresh.load_state_dict(old)  # strict
    src, lengths, prev, tree = tree_batch(model)
    with torch.no_grad():
        assert torch.equal(fresh(src, lengths, prev, src_tree=tree)[0], model(src, lengths, prev, src_tree=tree)[0])


def test_attention_over_words_and_phrases_sums_to_one():
    model = build_model("tree2seq", **SMALL)
    src, lengths, prev, tree = tree_batch(model)
    with torch.no_grad():
        encoder_out = model.encoder(src, lengths, src_tree=tree)
        attention = model.decoder.attention
        state = attention.init_state(encoder_out)
        _, weights, _ = attention(torch.randn(4, 10), encoder_out, state)
    src_len, rows = src.size(1), tree.size(1)
    assert weights.shape == (4, src_len + rows)
    assert torch.allclose(weights.sum(-1), torch.ones(4), atol=1e-6)
    mask = torch.cat([src.eq(model.encoder.padding_idx), tree[..., 0].lt(0)], dim=1)
    assert mask[1].tolist()[src_len:] == [False] * 4 + [True]
    assert weights.masked_select(mask).abs().max() == 0
    assert weights[:, src_len:].masked_select(~mask[:, src_len:]).min() > 0  # phrases are attended
    logits, extra = model(src, lengths, prev, src_tree=tree)
    assert extra["attn"][0].shape == (4, prev.size(1), src_len)


@pytest.mark.parametrize("score", ["general", "dot"])
def test_phrase_attention_equals_the_backbone_layer_over_the_same_memory(score):
    """Projecting the query and [c_t; h_t] per step gives the backbone's numbers (and gradients)."""
    torch.manual_seed(5)
    phrase = PhraseAttentionLayer(6, 6, score).double()
    backbone = GlobalAttentionLayer(6, 6, score).double()
    backbone.load_state_dict(phrase.state_dict())
    memory = torch.randn(3, 5, 6, dtype=torch.double, requires_grad=True)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2, [False] * 4 + [True]])
    encoder_out = {"word_phrase_annotations": memory, "word_phrase_mask": mask,
                   "annotations": memory, "padding_mask": mask}
    hidden = torch.randn(3, 6, dtype=torch.double)
    results = []
    for layer in (phrase, backbone):
        out, weights, _ = layer(hidden, encoder_out, layer.init_state(encoder_out))
        grads = torch.autograd.grad(out.sum() + (weights * torch.arange(5.0)).sum(), [memory, *layer.parameters()])
        results.append([out, weights, *grads])
    for got, expected in zip(*results):
        assert torch.allclose(got, expected, atol=1e-12)


def test_missing_tree_is_a_clear_error():
    model = build_model("tree2seq", **SMALL)
    src, lengths, prev, _ = tree_batch(model)
    with pytest.raises(KeyError, match="syntax_translation"):
        model(src, lengths, prev)


def test_incremental_decoding_equals_full_forward_with_beam_reorder():
    model = build_model("tree2seq", **SMALL, decoder_layers=2)
    src, lengths, prev, tree = tree_batch(model)
    order = torch.tensor([3, 1, 1, 0])
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, prev, src_tree=tree)[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths, src_tree=tree), prev)
        assert torch.allclose(full, step, atol=1e-5)
        full_r = torch.log_softmax(model(src[order], lengths[order], prev[order], src_tree=tree[order])[0], -1)
        step_r = incremental_log_probs(model, model.encoder(src, lengths, src_tree=tree), prev,
                                       reorder=order, reorder_at=3)
    assert torch.allclose(full_r, step_r, atol=1e-5)


def test_padding_and_batch_neighbours_do_not_change_a_sentence():
    model = build_model("tree2seq", **SMALL)
    src, lengths, prev, tree = tree_batch(model)
    with torch.no_grad():
        batch = torch.log_softmax(model(src, lengths, prev, src_tree=tree)[0], dim=-1)
        for b in (1, 3):  # a parsed sentence and the one without a parse
            n = int(lengths[b])
            rows = max(1, int(tree[b, :, 0].ge(0).sum()))
            alone = model(src[b:b + 1, :n], lengths[b:b + 1], prev[b:b + 1], src_tree=tree[b:b + 1, :rows])
            assert torch.allclose(batch[b:b + 1], torch.log_softmax(alone[0], -1), atol=1e-5)


def test_sentence_without_tree_gets_a_zero_root():
    model = build_model("tree2seq", **SMALL)
    src, lengths, prev, tree = tree_batch(model)
    layer = model.encoder.extensions[0]
    calls = []
    handle = layer.init_cell.register_forward_hook(lambda module, args, output: calls.append(args))
    with torch.no_grad():
        out = model.encoder(src, lengths, src_tree=tree)
    handle.remove()
    (summary_h, summary_c), (root_h, root_c) = calls[0]
    assert root_h[3].abs().max() == 0 and root_c[3].abs().max() == 0
    expected_h, expected_c = layer.init_cell((summary_h, summary_c), (root_h, root_c))
    assert torch.allclose(out["summary_hidden"], expected_h) and torch.allclose(out["summary_cell"], expected_c)
    # the root of a parsed sentence is its last phrase row
    assert torch.allclose(root_h[0], out["phrase_annotations"][0, 4]) and torch.allclose(root_h[1], out["phrase_annotations"][1, 3])


def test_mixed_batch_with_an_empty_tree_trains():
    torch.manual_seed(0)
    model = build_model("tree2seq", **SMALL, dropout=0.1).train()
    src, lengths, prev, tree = tree_batch(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    for _ in range(5):
        logits, _ = model(src, lengths, prev, src_tree=tree)
        loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), prev.roll(-1, 1).view(-1))
        optimizer.zero_grad()
        loss.backward()
        tree_grads = [p.grad for p in model.encoder.extensions[0].parameters()]
        assert all(g is not None and torch.isfinite(g).all() for g in tree_grads)
        assert model.encoder.extensions[0].tree_lstm.cell.gates.weight.grad.abs().sum() > 0
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_zero_leaf_cells_allow_deeper_encoders():
    with pytest.raises(ValueError, match="--leaf-cells zero"):
        build_model("tree2seq", **SMALL, encoder_layers=2)
    model = build_model("tree2seq", **SMALL, encoder_layers=2, leaf_cells="zero")
    src, lengths, prev, tree = tree_batch(model)
    logits, _ = model(src, lengths, prev, src_tree=tree)
    assert torch.isfinite(logits).all()


# ----------------------------------------------------------------------- command line

def test_train_with_blackout_and_generate_with_length_prior(synthetic_databin, tmp_path):
    train = run_cli(train_args(synthetic_databin, tmp_path, arch="tree2seq", updates=3, extra=[
        "--criterion", "blackout", "--blackout-samples", "30", "--max-tokens", "400",
    ]))
    log = train.stdout + train.stderr
    assert re.search(r"\[train\] syntax inputs: \['tree'\]", log), log[-2000:]
    assert re.search(r"\| train \| .*\| num_updates 3 \|", log), log[-2000:]  # the epoch summary
    assert re.search(r"valid on 'valid' subset.*\| loss [0-9.]+ \| nll_loss [0-9.]+", log)
    gen = run_cli(generate_args(synthetic_databin, tmp_path / "checkpoint_last.pt", extra=[
        "--length-prior", "--print-alignment", "--max-len-b", "30",
    ])).stdout
    sources = {int(m.group(1)): m.group(2).split() for m in re.finditer(r"^S-(\d+)\t(.*)$", gen, re.M)}
    hyps = re.findall(r"^H-(\d+)\t", gen, re.M)
    aligns = re.findall(r"^A-(\d+)\t(.*)$", gen, re.M)
    assert len(sources) > 30 and len(hyps) == len(sources) and len(aligns) == len(sources)
    for sid, links in aligns:
        for link in links.split():
            src_pos, _ = map(int, link.split("-"))
            assert 0 <= src_pos <= len(sources[int(sid)])  # word columns (eos included)
