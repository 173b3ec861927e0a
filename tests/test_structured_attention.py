"""Structured-attention NMT (Tran & Bisk 2018): encoder layers, decoder layers, the six
architectures through fairseq's command lines, and fairseq-syntax-induced-trees."""
import argparse
import math
import sys

import conllu
import numpy as np
import pytest
import torch

from conftest import USER_DIR, generate_args, train_args
from model_utils import build_model, incremental_log_probs, random_batch

from fairseq_syntax.models.structured_attention_rnn import StructuredAttentionRNNModel
from fairseq_syntax.modules.matrix_tree import dependency_marginals
from fairseq_syntax.modules.structured_attention import (
    FlatSelfAttention, StructuredSelfAttention, head_weights, straight_through_heads, word_mask,
)
from fairseq_syntax.modules.syntax_gate_attention import SyntaxGateAttentionLayer
from fairseq_syntax.syntax.dependency import validate_heads
from fairseq_syntax.syntax.tree_scores import left_branching, read_gold_trees, score_corpus

ARCHS = ["sa_nmt_shared", "sa_nmt", "sa_nmt_1set", "sa_nmt_hard", "fa_nmt_shared", "fa_nmt"]
COLUMNS = {"sa_nmt_shared": "sa_shared", "sa_nmt": "sa_separate", "sa_nmt_1set": "sa_1set",
           "sa_nmt_hard": "sa_hard", "fa_nmt_shared": "fa_shared", "fa_nmt": "fa_separate"}


def encoder_dict(bsz=3, src_len=7, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([src_len - 2 * (i % 2) - (i // 2) for i in range(bsz)])
    padding = torch.arange(src_len).unsqueeze(0) >= lengths.unsqueeze(1)
    x = torch.randn(bsz, src_len, dim, generator=g).masked_fill(padding.unsqueeze(-1), 0)
    return {"annotations": x, "padding_mask": padding}, lengths


# --- encoder layers ----------------------------------------------------------------------


def test_word_mask_excludes_padding_and_eos():
    padding = torch.tensor([[False] * 4, [False, False, True, True], [False, True, True, True]])
    assert word_mask(padding).tolist() == [
        [True, True, True, False], [True, False, False, False], [False] * 4,
    ]


@pytest.mark.parametrize("layer_cls,kwargs", [
    (StructuredSelfAttention, {}), (StructuredSelfAttention, {"hard": True}),
    (FlatSelfAttention, {}), (StructuredSelfAttention, {"one_set": True}),
])
def test_marginals_mask_padding(layer_cls, kwargs):
    torch.manual_seed(0)
    layer = layer_cls(8, 6, **kwargs).eval()
    enc, lengths = encoder_dict()
    key = "annotations" if kwargs.get("one_set") else "syntax_annotations"
    with torch.no_grad():
        batch = layer(dict(enc))
        for b, n in enumerate(lengths.tolist()):
            alone = layer({k: v[b:b + 1, :n] for k, v in enc.items()})
            torch.testing.assert_close(batch[key][b, :n], alone[key][0], atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(batch["head_marginals"][b, :n, :n], alone["head_marginals"][0])
            torch.testing.assert_close(batch["root_marginals"][b, :n], alone["root_marginals"][0])
            # padding and eos are outside the tree: zero marginals, zero syntax annotation
            assert batch["head_marginals"][b, n - 1:].abs().sum() == 0
            assert batch["head_marginals"][b, :, n - 1:].abs().sum() == 0
            assert batch["root_marginals"][b, n - 1:].abs().sum() == 0
            if key == "syntax_annotations":
                assert batch[key][b, n - 1:].abs().sum() == 0
            # every word has one head or the root
            total = batch["head_marginals"][b].sum(0) + batch["root_marginals"][b]
            torch.testing.assert_close(total[: n - 1], torch.ones(n - 1))


def test_syntax_annotation_is_the_expected_head():
    torch.manual_seed(1)
    layer = StructuredSelfAttention(8).eval()
    enc, lengths = encoder_dict(bsz=1)
    with torch.no_grad():
        out = layer(dict(enc))
        values = layer.value(enc["annotations"])[0]
    head, root = out["head_marginals"][0], out["root_marginals"][0]
    n = int(lengths[0]) - 1
    for m in range(n):
        expected = sum(head[h, m] * values[h] for h in range(n) if h != m) + root[m] * values[m]
        torch.testing.assert_close(out["syntax_annotations"][0, m], expected, atol=1e-6, rtol=1e-5)


def test_flat_attention_reports_self_weight_as_root():
    torch.manual_seed(2)
    layer = FlatSelfAttention(8).eval()
    enc, lengths = encoder_dict(bsz=1)
    with torch.no_grad():
        out = layer(dict(enc))
        q, k = layer.query(enc["annotations"]), layer.key(enc["annotations"])
    n = int(lengths[0]) - 1
    scores = (q[0, :n] @ k[0, :n].T) * layer.scale
    expected = torch.softmax(scores, dim=-1)  # [m, h]
    torch.testing.assert_close(out["root_marginals"][0, :n], expected.diagonal())
    torch.testing.assert_close(out["head_marginals"][0, :n, :n],
                               (expected - torch.diag(expected.diagonal())).T)


def test_hard_heads_are_one_hot_with_straight_through_gradients():
    torch.manual_seed(3)
    n = 5
    head_scores = torch.randn(2, n, n, requires_grad=True)
    root_scores = torch.randn(2, n, requires_grad=True)
    mask = torch.tensor([[True] * n, [True, True, True, False, False]])
    head, root = dependency_marginals(head_scores, root_scores, mask)
    soft = head_weights(head, root)
    hard = straight_through_heads(soft, mask)
    # forward: one-hot rows at the most probable head (the diagonal = root); zero non-word rows
    assert set(hard.detach().unique().tolist()) <= {0.0, 1.0}
    assert hard.detach().sum(-1).tolist() == [[1.0] * n, [1, 1, 1, 0, 0]]
    assert torch.equal(hard.detach().argmax(-1)[mask], soft.detach().argmax(-1)[mask])
    values = torch.randn(2, n, 4)
    (torch.bmm(hard, values) * torch.randn(2, n, 4)).sum().backward()
    assert head_scores.grad.abs().sum() > 0 and root_scores.grad.abs().sum() > 0


def test_sa_nmt_hard_forward_uses_one_hot_heads_and_trains_the_scores():
    model = build_model("sa_nmt_hard", dropout=0.0).train()
    src, lengths, prev = random_batch(model)
    layer = model.encoder.extensions[0]
    encoder_out = model.encoder(src, lengths)
    # the syntactic annotation of each word is exactly the value of one position
    values = layer.value(encoder_out["annotations"]).detach()
    weights = head_weights(encoder_out["head_marginals"], encoder_out["root_marginals"]).detach()
    picked = torch.gather(values, 1, weights.argmax(-1, keepdim=True).expand_as(values))
    mask = word_mask(encoder_out["padding_mask"])
    torch.testing.assert_close(encoder_out["syntax_annotations"][mask], picked[mask])
    logits, _ = model.decoder(prev, encoder_out=encoder_out)
    logits.sum().backward()
    for param in (layer.query.weight, layer.key.weight, layer.root_query):
        assert param.grad is not None and param.grad.abs().sum() > 0


def test_flat_hard_is_refused():
    with pytest.raises(ValueError, match="structured"):
        build_model("fa_nmt", head_selection="hard")


def test_one_set_annotation_is_x_plus_gated_expected_head_by_hand():
    """SA-NMT-1set (eq. 16): ``x_m + σ(W_z x_m) ⊙ s_m``, against a hand computation on a
    two-word sentence, whose two trees are root→0→1 and root→1→0."""
    layer = StructuredSelfAttention(2, 2, one_set=True).eval()
    with torch.no_grad():
        layer.query.weight.copy_(torch.tensor([[1.0, 1.0], [0.0, 1.0]]))
        layer.key.weight.copy_(torch.eye(2))
        layer.value.weight.copy_(torch.tensor([[2.0, 0.0], [1.0, -1.0]]))
        layer.root_query.copy_(torch.tensor([1.0, -1.0]))
        layer.fuse_gate.weight.copy_(torch.tensor([[1.0, 0.0], [0.5, -2.0]]))
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]])  # word 0, word 1, eos
    out = layer({"annotations": x, "padding_mask": torch.zeros(1, 3, dtype=torch.bool)})
    r2 = math.sqrt(2.0)
    # q_0 = (1, 0), q_1 = (1, 1), k_0 = (1, 0), k_1 = (0, 1); scores / √2
    s01 = (1 * 0 + 0 * 1) / r2  # 0 heads 1: q_0 · k_1
    s10 = (1 * 1 + 1 * 0) / r2  # 1 heads 0: q_1 · k_0
    root0, root1 = 1 / r2, -1 / r2  # q_root · k_m
    w1, w2 = math.exp(root0 + s01), math.exp(root1 + s10)  # root→0→1, root→1→0
    p1, p2 = w1 / (w1 + w2), w2 / (w1 + w2)
    v0, v1 = (2.0, 1.0), (0.0, -1.0)  # W_v x
    # α[0] = (P(root→0), P(1→0)) = (p1, p2); α[1] = (P(0→1), P(root→1)) = (p1, p2)
    syntax = [tuple(p1 * a + p2 * b for a, b in zip(v0, v1))] * 2
    sig = lambda z: 1.0 / (1.0 + math.exp(-z))  # noqa: E731
    gates = [(sig(1.0), sig(0.5)), (sig(0.0), sig(-2.0))]  # σ(W_z x_m)
    words = [(1.0, 0.0), (0.0, 1.0)]
    expected = [[xm[i] + gm[i] * sm[i] for i in range(2)]
                for xm, gm, sm in zip(words, gates, syntax)]
    expected.append([0.5, 0.5])  # eos is outside the tree: s = 0, x unchanged
    torch.testing.assert_close(out["annotations"][0], torch.tensor(expected), atol=1e-6, rtol=0)
    torch.testing.assert_close(out["root_marginals"][0], torch.tensor([p1, p2, 0.0]))
    assert "syntax_annotations" not in out


def test_arc_score_clamp_bounds_the_scores():
    """The arc and root scores enter the matrix-tree theorem clamped to the authors'
    [-5, 7]: the sa_nmt* presets' default, off with --no-arc-score-clamp."""
    torch.manual_seed(5)
    layer = StructuredSelfAttention(8, 4, clamp=(-5.0, 7.0)).eval()
    plain = StructuredSelfAttention(8, 4).eval()
    plain.load_state_dict(layer.state_dict())
    with torch.no_grad():
        for param in (layer.query.weight, layer.key.weight, layer.root_query):
            param.mul_(20.0)
        plain.load_state_dict(layer.state_dict())
    enc, _ = encoder_dict(bsz=2)
    head, root = layer.scores(enc["annotations"])
    raw_head, raw_root = plain.scores(enc["annotations"])
    assert raw_head.max() > 7 and raw_head.min() < -5  # the test scores do leave the bounds
    assert raw_root.max() > 7 and raw_root.min() < -5
    assert head.max() == 7.0 and head.min() == -5.0
    assert root.max() == 7.0 and root.min() == -5.0
    torch.testing.assert_close(head, raw_head.clamp(-5, 7))
    torch.testing.assert_close(root, raw_root.clamp(-5, 7))
    # the marginals are those of the clamped scores
    mask = word_mask(enc["padding_mask"])
    out = layer(dict(enc))
    expected = dependency_marginals(raw_head.clamp(-5, 7), raw_root.clamp(-5, 7), mask)
    torch.testing.assert_close(out["head_marginals"], expected[0])
    torch.testing.assert_close(out["root_marginals"], expected[1])
    # through the model options: on by default, off with --no-arc-score-clamp, refused for FA
    for arch in ("sa_nmt_shared", "sa_nmt", "sa_nmt_1set", "sa_nmt_hard"):
        assert build_model(arch).encoder.extensions[0].clamp == (-5.0, 7.0)
    assert build_model("sa_nmt_hard", no_arc_score_clamp=True).encoder.extensions[0].clamp is None
    # a checkpoint's config from before the option keeps its own setting (clamp_arc_scores)
    old = dict(self_attention="structured", head_selection="hard", syntax_context="shared",
               self_attention_dim=0, dropout=0.0)
    for clamp_arc_scores, expected in ((False, None), (True, (-5.0, 7.0))):
        cfg = argparse.Namespace(clamp_arc_scores=clamp_arc_scores, **old)
        layer, = StructuredAttentionRNNModel.build_encoder_extensions(cfg, 8)
        assert layer.clamp == expected
    with pytest.raises(ValueError, match="--self-attention structured"):
        build_model("fa_nmt_shared", no_arc_score_clamp=True)
    with pytest.raises(ValueError, match="min < max"):
        StructuredSelfAttention(8, clamp=(7.0, -5.0))


@pytest.mark.parametrize("arch", ARCHS)
def test_presets_tie_target_embeddings_to_the_output_layer(arch):
    """§5.2: every model shares the target embeddings and the output layer."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    model = build_model(arch)
    assert model.decoder.fc_out.weight is model.decoder.embed_tokens.weight
    untied = build_model(arch, share_decoder_input_output_embed=False)
    assert untied.decoder.fc_out.weight is not untied.decoder.embed_tokens.weight
    # fairseq's own option parsing applies the preset
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        "data-bin", "--user-dir", USER_DIR, "--task", "syntax_translation", "--arch", arch])
    assert convert_namespace_to_omegaconf(args).model.share_decoder_input_output_embed is True


# --- decoder layer -----------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False])
def test_gate_layer_shares_or_separates_weights_and_returns_its_gates(shared):
    torch.manual_seed(4)
    layer = SyntaxGateAttentionLayer(6, 8, shared=shared).eval()
    enc, _ = encoder_dict(bsz=2)
    enc["syntax_annotations"] = torch.randn(2, 7, 8)
    state = layer.init_state(enc)
    assert ("syntax_keys" in state) is not shared
    hidden = torch.randn(2, 6)
    out, weights, new_state = layer(hidden, enc, state)
    gate = new_state["extra.syntax_gate"]  # the decoder returns it as extra["syntax_gate"]
    torch.testing.assert_close(gate, torch.sigmoid(layer.gate(hidden)))
    assert gate.shape == (2, 8) and bool(((gate > 0) & (gate < 1)).all())
    assert out.shape == (2, 6) and torch.allclose(weights.sum(-1), torch.ones(2))
    # the syntactic vector: content weights if shared, the second attention if not
    syntax_weights = weights if shared else torch.softmax(
        layer.syntax_score(hidden, state["syntax_keys"]).masked_fill(enc["padding_mask"], -1e9), -1)
    syntax = torch.bmm(syntax_weights.unsqueeze(1), enc["syntax_annotations"]).squeeze(1)
    context = torch.bmm(weights.unsqueeze(1), enc["annotations"]).squeeze(1)
    expected = torch.tanh(layer.combine(torch.cat([context, hidden, gate * syntax], -1)))
    torch.testing.assert_close(out, expected)


# --- whole models ------------------------------------------------------------------------


def test_table3_columns_belong_to_the_induced_trees_tool_not_to_the_models():
    from fairseq.models import MODEL_REGISTRY

    from fairseq_syntax.evaluation.induced_trees import table3_column

    ours = [cls for cls in MODEL_REGISTRY.values() if cls.__module__.startswith("fairseq_syntax.")]
    assert StructuredAttentionRNNModel in ours
    assert [cls.__name__ for cls in ours if hasattr(cls, "table3_column")] == []
    assert {arch: table3_column(build_model(arch)) for arch in ARCHS} == COLUMNS


@pytest.mark.parametrize("arch", ARCHS)
def test_incremental_decoding_equals_full_forward_after_reorder(arch):
    model = build_model(arch, decoder_layers=2)
    src, lengths, prev = random_batch(model, bsz=4)
    order = torch.tensor([2, 2, 0, 3])
    with torch.no_grad():
        full = torch.log_softmax(model(src[order], lengths[order], prev[order])[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths), prev,
                                     reorder=order, reorder_at=3)
        plain = torch.log_softmax(model(src, lengths, prev)[0], dim=-1)
        step_plain = incremental_log_probs(model, model.encoder(src, lengths), prev)
    assert torch.allclose(full, step, atol=1e-5)
    assert torch.allclose(plain, step_plain, atol=1e-5)


@pytest.mark.parametrize("arch", ["sa_nmt", "fa_nmt_shared"])
def test_decoder_returns_the_syntax_gates_of_every_step(arch):
    model = build_model(arch, decoder_layers=2)
    src, lengths, prev = random_batch(model, bsz=3)
    with torch.no_grad():
        encoder_out = model.encoder(src, lengths)
        _, extra = model.decoder(prev, encoder_out=encoder_out)
        gates = extra["syntax_gate"][0]
        assert gates.shape == (3, prev.size(1), 2 * model.encoder.lstm.hidden_size)
        assert bool(((gates > 0) & (gates < 1)).all())
        # step t's gate is the one an incremental decoder computes at step t
        state = {}
        for t in range(prev.size(1)):
            _, step_extra = model.decoder(prev[:, :t + 1], encoder_out=encoder_out, incremental_state=state)
            torch.testing.assert_close(step_extra["syntax_gate"][0][:, 0], gates[:, t])


@pytest.mark.parametrize("arch", ["sa_nmt_shared", "fa_nmt"])
def test_padding_does_not_change_a_sentence(arch):
    model = build_model(arch)
    src, lengths, prev = random_batch(model, bsz=3)
    n = int(lengths[2])
    with torch.no_grad():
        batch = model.encoder(src, lengths)
        alone = model.encoder(src[2:, :n], lengths[2:])
        for key in ("syntax_annotations", "root_marginals"):
            torch.testing.assert_close(batch[key][2, :n], alone[key][0], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(batch["head_marginals"][2, :n, :n], alone["head_marginals"][0],
                                   atol=1e-6, rtol=1e-5)


# --- command lines -----------------------------------------------------------------------


def run_fairseq(main_module, argv, monkeypatch):
    """Run a fairseq console script's entry point (fairseq_cli.X:cli_main) with ``argv``
    in-process, as the console script does, without a new interpreter per call."""
    monkeypatch.setattr(sys, "argv", [str(a) for a in argv])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models; the machine is shared
    try:
        main_module.cli_main()
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoints(synthetic_databin, tmp_path_factory):
    """Train each architecture once (a few updates), on demand."""
    from fairseq_cli import train

    cache = {}

    def get(arch):
        if arch not in cache:
            save = tmp_path_factory.mktemp(arch)
            with pytest.MonkeyPatch.context() as mp:
                run_fairseq(train, train_args(synthetic_databin, save, arch, updates=3), mp)
            cache[arch] = save / "checkpoint_last.pt"
            assert cache[arch].exists()
        return cache[arch]

    return get


@pytest.mark.parametrize("arch", ARCHS)
def test_each_variant_trains_and_decodes_through_the_command_lines(
        arch, checkpoints, synthetic_databin, synthetic_raw, monkeypatch, capsys):
    from fairseq_cli import generate

    n_test = len((synthetic_raw / "test.en").read_text(encoding="utf-8").splitlines())

    checkpoint = checkpoints(arch)
    capsys.readouterr()
    run_fairseq(generate, generate_args(synthetic_databin, checkpoint, ["--max-len-b", "12"]),
                monkeypatch)
    out = capsys.readouterr().out
    hypotheses = [line for line in out.splitlines() if line.startswith("H-")]
    assert sorted(int(h.split("\t")[0][2:]) for h in hypotheses) == list(range(n_test))


def test_induced_trees_cli_writes_conllu_and_prints_table3(
        checkpoints, synthetic_databin, synthetic_raw, tmp_path, capsys):
    from fairseq_syntax.cli.induced_trees import main

    archs = ["sa_nmt_shared", "fa_nmt"]
    paths = [checkpoints(a) for a in archs]
    gold_path = synthetic_raw / "test.en.conllu"
    template = tmp_path / "{arch}.conllu"
    argv = [str(synthetic_databin), "--gen-subset", "test", "--output", str(template),
            "--gold", str(gold_path), "--cpu"]
    for path in paths:
        argv += ["--path", str(path)]
    capsys.readouterr()
    main(argv)
    out = capsys.readouterr().out
    gold = read_gold_trees(str(gold_path))
    for arch in archs:
        with open(tmp_path / f"{arch}.conllu", encoding="utf-8") as f:
            sentences = list(conllu.parse_incr(f))
        assert len(sentences) == len(gold) > 0
        for sentence, tree in zip(sentences, gold):
            assert [t["form"] for t in sentence] == tree.words
            heads = [t["head"] - 1 for t in sentence]
            validate_heads(heads)  # one root, no cycle
    # the Table 3 layout: groups, columns, one row with the filled columns and baselines
    lines = out.splitlines()
    i = next(k for k, line in enumerate(lines) if line.split() == ["FA", "SA", "Baseline"])
    assert lines[i + 1].split() == ["no-shared", "shared", "no-shared", "shared", "hard",
                                    "L", "R", "Un"]
    row = lines[i + 2].split()
    assert row[:2] == ["EN", "(VF)"] and len(row) == 2 + 8
    filled = [cell != "-" for cell in row[2:7]]
    assert filled == [True, False, False, True, False]  # fa no-shared, sa shared
    left = score_corpus([left_branching(len(t.heads)) for t in gold], gold).left
    assert row[7] == f"{left.directed_accuracy:04.1f}"
    assert row[9] == f"{left.undirected_accuracy:04.1f}"


def test_induced_trees_cli_gate_analysis(checkpoints, synthetic_databin, synthetic_raw, tmp_path):
    from fairseq_syntax.cli.induced_trees import main

    n_test = len((synthetic_raw / "test.en").read_text(encoding="utf-8").splitlines())

    gates, png = tmp_path / "gates.tsv", tmp_path / "gates.png"
    main([str(synthetic_databin), "--path", str(checkpoints("sa_nmt_shared")), "--cpu",
          "--gate-out", str(gates), "--gate-heatmap", str(png), "--heatmap-sentences", "3",
          "--max-len-b", "8", "--beam", "2"])
    blocks = gates.read_text(encoding="utf-8").strip("\n").split("\n\n")
    assert len(blocks) == n_test
    dim = 2 * 16  # the gate has the size of the syntactic annotations
    for k, block in enumerate(blocks):
        lines = block.split("\n")
        assert lines[0] == f"# id = {k}"
        rows = [line.split("\t") for line in lines if not line.startswith("#")]
        assert rows[-1][0] == "</s>" and 1 <= len(rows) <= 9
        assert all(0 < float(norm) < dim ** 0.5 for _, norm in rows)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit, match="no syntax gate"):
        main([str(synthetic_databin), "--path", str(checkpoints("sa_nmt_1set")), "--cpu",
              "--gate-out", str(tmp_path / "x.tsv"), "--max-len-b", "4"])


def test_induced_trees_group_unknown_pieces_by_the_gold_words(
        checkpoints, synthetic_databin, synthetic_raw, tmp_path, capsys):
    """A source piece outside the dictionary reads ``<unk>`` and has lost its ``▁`` mark
    (Multi30k test sentence 315: "Lama"). With --gold the pieces are grouped by the gold
    words encoded with the data-bin's spm.model, so word counts still match the gold."""
    import shutil

    from fairseq.data import data_utils
    from fairseq.data.dictionary import Dictionary

    from fairseq_syntax.cli.induced_trees import main
    from fairseq_syntax.syntax.subwords import pieces_per_word

    databin = tmp_path / "data-bin"
    shutil.copytree(synthetic_databin, databin)
    src_dict = Dictionary.load(str(databin / "dict.en.txt"))
    prefix = str(databin / "test.en-vf.en")
    dataset = data_utils.load_indexed_dataset(prefix, src_dict)
    # one word-initial piece (merged into the previous word by the ▁ rule) and one
    # word-internal piece (split off as a word of its own by the <unk> rule) become <unk>
    offsets = np.concatenate([[0], np.cumsum(dataset.sizes)])
    flat = np.memmap(prefix + ".bin", dtype=dataset._index.dtype, mode="r+")
    chosen = {}
    for k in range(len(dataset)):
        pieces = [src_dict[t] for t in dataset[k][:-1].tolist()]
        for i in range(1, len(pieces)):
            starts = pieces[i].startswith("▁")
            if ("start" if starts else "inside") not in chosen and k not in chosen.values():
                chosen["start" if starts else "inside"] = k
                flat[offsets[k] + i] = src_dict.unk()
                break
    flat.flush()
    del flat
    assert set(chosen) == {"start", "inside"}

    gold_path = synthetic_raw / "test.en.conllu"
    gold = read_gold_trees(str(gold_path))
    dataset = data_utils.load_indexed_dataset(prefix, src_dict)
    for case, k in chosen.items():
        pieces = [src_dict[t] for t in dataset[k][:-1].tolist()]
        assert "<unk>" in pieces
        # without the gold words, either reading of <unk> miscounts one of the sentences
        guess = pieces if case == "inside" else [p.replace("<unk>", "x") for p in pieces]
        assert len(pieces_per_word(guess, unknown_starts_word=True)) != len(gold[k].words)

    out = tmp_path / "induced.conllu"
    main([str(databin), "--path", str(checkpoints("sa_nmt_shared")), "--gen-subset", "test",
          "--output", str(out), "--gold", str(gold_path), "--cpu"])
    with open(out, encoding="utf-8") as f:
        sentences = list(conllu.parse_incr(f))
    for k, (sentence, tree) in enumerate(zip(sentences, gold)):
        forms = [t["form"] for t in sentence]
        assert len(forms) == len(tree.words)
        if k in chosen.values():
            assert sum("<unk>" in form for form in forms) == 1
            assert [f for f in forms if "<unk>" not in f] == [
                w for f, w in zip(forms, tree.words) if "<unk>" not in f]
        else:
            assert forms == tree.words
