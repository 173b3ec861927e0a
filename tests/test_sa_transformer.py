"""Structured attention on the Transformer (sa_transformer; Tran & Bisk 2018): tree heads
against enumeration of all trees, padding, gradients, float32 matrix-tree under autocast
and in half-precision models, incremental decoding, option errors, and fairseq-train /
fairseq-generate / fairseq-syntax-induced-trees on a trained checkpoint."""
import re

import conllu
import numpy as np
import pytest
import torch

from conftest import USER_DIR, run_cli
from model_utils import build_model, incremental_log_probs, random_batch
from test_matrix_tree import brute_force
from test_transformer_backbone import transformer_train_args

from fairseq_syntax.evaluation.induced_trees import table3_column
from fairseq_syntax.modules.tree_marginal_attention import tree_marginal_weights
from fairseq_syntax.syntax.dependency import validate_heads
from fairseq_syntax.syntax.tree_scores import format_table3, read_gold_trees, score_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


def capture_self_attention(model, layer, src, lengths):
    """(input [T, B, C], key padding mask or None, output [T, B, C], head weights
    [H, B, T, S], encoder_out) of encoder layer ``layer``'s self-attention."""
    attn = model.encoder.layers[layer].self_attn
    seen = {}

    def hook(module, args, kwargs, output):
        if "x" in seen:  # the call below
            return
        seen.update(x=kwargs["query"], mask=kwargs["key_padding_mask"], out=output[0])
        with torch.no_grad():  # the same call again, for the per-head weights
            seen["weights"] = module(query=kwargs["query"], key=kwargs["query"],
                                     value=kwargs["query"],
                                     key_padding_mask=kwargs["key_padding_mask"],
                                     need_head_weights=True)[1]

    handle = attn.register_forward_hook(hook, with_kwargs=True)
    try:
        encoder_out = model.encoder(src, lengths)
    finally:
        handle.remove()
    return seen["x"], seen["mask"], seen["out"], seen["weights"], encoder_out


def reference_self_attention(attn, x, lengths, clamp=(-np.inf, np.inf)):
    """float64 numpy from the definition: per sentence, tree heads from the enumeration of
    all single-root trees over its words (eos and padding outside; arc and root scores clipped
    to ``clamp``), the other heads a softmax over the real positions; rows of real positions
    only. Returns per sentence
    ``(output [n, C], weights [H, n, n], edge [K, w, w], root [K, w])``."""
    def linear(lin, v):
        return v @ lin.weight.detach().double().numpy().T + lin.bias.detach().double().numpy()

    d, heads, k = attn.head_dim, attn.num_heads, attn.tree_heads
    u = attn.root_key.detach().double().numpy()
    out = []
    for b, n in enumerate(lengths.tolist()):
        xb = x[:n, b].detach().double().numpy()
        q, kk, v = linear(attn.q_proj, xb) / np.sqrt(d), linear(attn.k_proj, xb), linear(attn.v_proj, xb)
        contexts, weights, edges, roots = [], [], [], []
        for h in range(heads):
            qh, kh, vh = (t[:, h * d:(h + 1) * d] for t in (q, kk, v))
            logits = qh @ kh.T  # [m, h']: the modifier's query against the head's key
            if h < k:
                w = n - 1  # words: every real position but eos
                edge, root, _ = brute_force(np.clip(logits[:w, :w].T, *clamp),
                                            np.clip(qh[:w] @ u[h], *clamp))
                alpha = np.zeros((n, n))
                alpha[:w, :w] = edge.T + np.diag(root)
                alpha[w, w] = 1.0  # eos attends to itself
                edges.append(edge)
                roots.append(root)
            else:
                e = np.exp(logits - logits.max(1, keepdims=True))
                alpha = e / e.sum(1, keepdims=True)
            weights.append(alpha)
            contexts.append(alpha @ vh)
        output = linear(attn.out_proj, np.concatenate(contexts, axis=1))
        out.append((output, np.stack(weights), np.stack(edges), np.stack(roots)))
    return out


@pytest.mark.parametrize("sa_heads, sa_layers", [(1, None), (2, "0,1")])
def test_tree_heads_equal_the_enumeration_of_all_trees(sa_heads, sa_layers):
    """Sentences of 5, 4 and 3 words (+ eos, right-padded); the query projection is scaled
    up so that the head distributions are far from uniform."""
    torch.manual_seed(0)
    model = build_model("sa_transformer_tiny", sa_heads=sa_heads, sa_layers=sa_layers)
    src, lengths, _ = random_batch(model, bsz=3, src_len=6)
    layers = [1] if sa_layers is None else [0, 1]
    for layer in layers:
        attn = model.encoder.layers[layer].self_attn
        with torch.no_grad():
            attn.q_proj.weight.mul_(4.0)
        x, mask, out, weights, encoder_out = capture_self_attention(model, layer, src, lengths)
        assert mask is not None and mask.tolist() == (src == model.encoder.padding_idx).tolist()
        reference = reference_self_attention(attn, x, lengths)
        for b, n in enumerate(lengths.tolist()):
            output, alpha, edge, root = reference[b]
            np.testing.assert_allclose(weights[:, b, :n, :n].double().numpy(), alpha, atol=1e-5)
            assert weights[:, b, :n, n:].abs().sum() == 0  # no weight on padding
            np.testing.assert_allclose(out[:n, b].detach().double().numpy(), output, atol=1e-5)
            assert root.max() > 0.5  # the scaled queries make the distributions peaked
            if layer == max(layers):  # the induced tree: first tree head, highest tree layer
                w = n - 1
                head = encoder_out["head_marginals"][0][b].double().numpy()
                np.testing.assert_allclose(head[:w, :w], edge[0], atol=1e-5)
                np.testing.assert_allclose(
                    encoder_out["root_marginals"][0][b, :w].double().numpy(), root[0], atol=1e-5)
                assert np.abs(head[w:]).sum() == 0 and np.abs(head[:, w:]).sum() == 0


def test_arc_score_clamp_equals_the_enumeration_over_clipped_scores():
    """``--sa-arc-score-clamp``: scores far outside [-5, 7] (queries scaled up 40 times) are
    clipped before the matrix-tree, as in the authors' code; unclipped they would differ."""
    torch.manual_seed(0)
    model = build_model("sa_transformer_tiny", sa_arc_score_clamp=True)
    src, lengths, _ = random_batch(model, bsz=3, src_len=6)
    attn = model.encoder.layers[1].self_attn
    assert attn.arc_score_clamp == (-5.0, 7.0)
    with torch.no_grad():
        attn.q_proj.weight.mul_(40.0)
        attn.root_key.mul_(40.0)
    x, _, out, weights, _ = capture_self_attention(model, 1, src, lengths)
    clipped = reference_self_attention(attn, x, lengths, clamp=(-5.0, 7.0))
    unclipped = reference_self_attention(attn, x, lengths)
    for b, n in enumerate(lengths.tolist()):
        np.testing.assert_allclose(weights[:1, b, :n, :n].double().numpy(), clipped[b][1][:1],
                                   atol=1e-5)
        np.testing.assert_allclose(out[:n, b].detach().double().numpy(), clipped[b][0],
                                   atol=1e-4)
        assert np.abs(clipped[b][1][0] - unclipped[b][1][0]).max() > 0.05


def test_padding_does_not_change_a_sentence():
    torch.manual_seed(0)
    model = build_model("sa_transformer_tiny", sa_heads=2, sa_layers="0,1")
    src, lengths, prev = random_batch(model, bsz=3, src_len=7)
    with torch.no_grad():
        batch_out = model.encoder(src, lengths)
        batch_logits = model(src, lengths, prev)[0]
        for b, n in enumerate(lengths.tolist()):
            alone = model.encoder(src[b:b + 1, :n], lengths[b:b + 1])
            torch.testing.assert_close(batch_out["encoder_out"][0][:n, b:b + 1],
                                       alone["encoder_out"][0], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(batch_out["head_marginals"][0][b, :n, :n],
                                       alone["head_marginals"][0][0], atol=1e-6, rtol=1e-5)
            logits = model(src[b:b + 1, :n], lengths[b:b + 1], prev[b:b + 1])[0]
            torch.testing.assert_close(batch_logits[b:b + 1], logits, atol=1e-5, rtol=1e-5)
    assert lengths.tolist() == [7, 6, 5]


def test_tree_weights_are_differentiable_and_gradients_reach_the_score_parameters():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 1, 4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    root = torch.randn(2, 1, 4, generator=g, dtype=torch.float64, requires_grad=True)
    words = torch.tensor([[True, True, True, False], [True, True, False, False]])
    assert torch.autograd.gradcheck(lambda a, r: tree_marginal_weights(a, r, words)[0],
                                    (logits, root))

    torch.manual_seed(0)
    model = build_model("sa_transformer_tiny", dropout=0.0)
    model.train()
    src, lengths, prev = random_batch(model)
    logits = model(src, lengths, prev)[0]
    (logits * torch.randn_like(logits)).sum().backward()
    attn = model.encoder.layers[1].self_attn
    d = attn.head_dim
    # the root key and the tree head's query rows enter the output through the tree only
    for grad in (attn.root_key.grad, attn.q_proj.weight.grad[:d], attn.k_proj.weight.grad[:d]):
        assert torch.isfinite(grad).all()
        assert grad.abs().sum() > 0


def test_matrix_tree_runs_in_float32_under_autocast(monkeypatch):
    """bfloat16 scores under CPU autocast: the Laplacian is inverted in float32, and the
    marginals are the float32 ones cast back to bfloat16, finite."""
    inverted = []
    inverse = torch.linalg.inv

    def recording_inverse(matrix):
        inverted.append(matrix.dtype)
        return inverse(matrix)

    monkeypatch.setattr(torch.linalg, "inv", recording_inverse)
    g = torch.Generator().manual_seed(2)
    logits = (8 * torch.randn(2, 2, 5, 5, generator=g)).to(torch.bfloat16)
    root = (8 * torch.randn(2, 2, 5, generator=g)).to(torch.bfloat16)
    words = torch.tensor([[True] * 4 + [False], [True] * 2 + [False] * 3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        weights, head, root_marginals = tree_marginal_weights(logits, root, words)
    assert inverted == [torch.float32]
    assert weights.dtype == head.dtype == root_marginals.dtype == torch.bfloat16
    for tensor in (weights, head, root_marginals):
        assert torch.isfinite(tensor).all()
    exact = tree_marginal_weights(logits.float(), root.float(), words)
    for got, want in zip((weights, head, root_marginals), exact):
        assert torch.equal(got, want.to(torch.bfloat16))
    for b, w in enumerate((4, 2)):
        for k in range(2):
            edge, top, _ = brute_force(logits[b, k, :w, :w].double().T.numpy().copy(),
                                       root[b, k, :w].double().numpy())
            np.testing.assert_allclose(head[b, k, :w, :w].double().numpy(), edge, atol=8e-3)
            np.testing.assert_allclose(root_marginals[b, k, :w].double().numpy(), top, atol=8e-3)


@pytest.mark.parametrize("mode", ["autocast_bfloat16", "float16_model", "bfloat16_model"])
def test_half_precision_model_is_finite_and_close_to_float32(mode, monkeypatch):
    """A model under CPU autocast, or cast to float16/bfloat16 as --fp16/--bf16 do: the
    inverse runs in float32, the padded batch stays finite (no -inf/-1e9 fill), no weight
    on padding, and the marginals and log-probs are close to the float32 model's."""
    torch.manual_seed(0)
    model = build_model("sa_transformer_tiny", sa_heads=2)
    src, lengths, prev = random_batch(model, bsz=3, src_len=7)
    with torch.no_grad():
        want = model.encoder(src, lengths)["head_marginals"][0]
        want_lp = torch.log_softmax(model(src, lengths, prev)[0], -1)
    inverted = []
    inverse = torch.linalg.inv
    monkeypatch.setattr(torch.linalg, "inv",
                        lambda matrix: (inverted.append(matrix.dtype), inverse(matrix))[1])
    dtype = torch.float16 if mode == "float16_model" else torch.bfloat16
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                         enabled=mode == "autocast_bfloat16"):
        if mode != "autocast_bfloat16":
            model.to(dtype)
        _, _, out, weights, encoder_out = capture_self_attention(model, 1, src, lengths)
        lp = model(src, lengths, prev)[0].float().log_softmax(-1)
    got = encoder_out["head_marginals"][0]
    assert inverted and set(inverted) == {torch.float32}
    assert got.dtype == dtype
    for tensor in (got, out, weights, lp):
        assert torch.isfinite(tensor).all()
    for b, n in enumerate(lengths.tolist()):
        assert weights[:, b, :n, n:].abs().sum() == 0
    torch.testing.assert_close(got.float(), want, atol=0.03, rtol=0)
    torch.testing.assert_close(lp, want_lp, atol=0.1, rtol=0)


def test_incremental_decoding_equals_full_forward():
    torch.manual_seed(0)
    model = build_model("sa_transformer_tiny", sa_heads=2, sa_layers="0,1")
    src, lengths, prev = random_batch(model, bsz=2)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, prev)[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths), prev)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)


def test_incremental_decoding_after_beam_reorder():
    """Beam 2 over two sentences; rows move within a sentence's beam (fairseq's
    cross-attention cache keeps its keys), the marginals move with encoder_out."""
    torch.manual_seed(0)
    model = build_model("sa_transformer_tiny", sa_heads=2, sa_layers="0,1")
    src, lengths, prev = random_batch(model, bsz=2)
    beam = torch.tensor([0, 0, 1, 1])
    src, lengths = src[beam], lengths[beam]
    prev = torch.cat([prev, prev.flip(1)])[torch.tensor([0, 2, 1, 3])]
    order = torch.tensor([1, 1, 3, 2])
    with torch.no_grad():
        full = torch.log_softmax(model(src[order], lengths[order], prev[order])[0], -1)
        encoder_out = model.encoder(src, lengths)
        step = incremental_log_probs(model, encoder_out, prev, reorder=order, reorder_at=3)
        reordered = model.encoder.reorder_encoder_out(encoder_out, order)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)
    assert torch.equal(reordered["head_marginals"][0], encoder_out["head_marginals"][0][order])
    assert torch.equal(reordered["root_marginals"][0], encoder_out["root_marginals"][0][order])


def test_defaults_and_option_errors():
    model = build_model("sa_transformer_tiny")
    layers = [type(layer.self_attn).__name__ for layer in model.encoder.layers]
    assert layers == ["MultiheadAttention", "TreeMarginalSelfAttention"]  # the top layer
    assert model.encoder.layers[1].self_attn.tree_heads == 1
    assert table3_column(model) == "sa_transformer"
    with pytest.raises(ValueError, match=r"--sa-heads 3: the encoder layers have 2 heads"):
        build_model("sa_transformer_tiny", sa_heads=3)
    with pytest.raises(ValueError, match=r"--sa-layers \[2\]: the encoder has 2 layers"):
        build_model("sa_transformer_tiny", sa_layers="0,2")
    with pytest.raises(ValueError, match=r"--sa-layers 'x': give comma-separated"):
        build_model("sa_transformer_tiny", sa_layers="x")
    with pytest.raises(ValueError, match=r"--sa-layers \[\]: .*give one or more"):
        build_model("sa_transformer_tiny", sa_layers=",")
    attn = model.encoder.layers[1].self_attn
    x = torch.zeros(3, 1, attn.embed_dim)
    with pytest.raises(ValueError, match="takes no attn_mask"):
        attn(x, x, x, attn_mask=torch.zeros(3, 3))


def test_table3_has_a_transformer_column_when_given():
    text = format_table3("EN (VF)", {"sa_transformer": (30.0, 40.0)}, {"L": 1, "R": 2, "Un": 3})
    groups, columns, row = text.splitlines()
    assert columns.split() == ["no-shared", "shared", "no-shared", "shared", "hard",
                               "transformer", "L", "R", "Un"]
    assert row.split()[2:] == ["-"] * 5 + ["30.0/40.0", "01.0", "02.0", "03.0"]


def test_train_generate_and_induced_trees_through_the_command_lines(
        synthetic_databin, synthetic_raw, tmp_path, capsys):
    from fairseq_syntax.cli.induced_trees import main

    train = run_cli(transformer_train_args(synthetic_databin, tmp_path, updates=3, extra=[
        "--arch", "sa_transformer_tiny", "--sa-heads", "2", "--sa-layers", "0,1"]))
    log = train.stdout + train.stderr
    assert re.search(r"\[train\] syntax inputs: none", log), log[-2000:]
    assert re.search(r"model: SATransformerModel", log), log[-2000:]
    assert re.search(r"\bsa_heads=2, sa_layers='0,1'", log), log[-2000:]
    assert re.search(r"\| train \| .*\| loss [0-9.]+ \|.*\| num_updates 3 \|", log), log[-2000:]
    checkpoint = tmp_path / "checkpoint_last.pt"
    gen = run_cli([
        "fairseq-generate", str(synthetic_databin), "--user-dir", USER_DIR,
        "--task", "syntax_translation", "--path", str(checkpoint),
        "--gen-subset", "test", "--beam", "5", "--batch-size", "16", "--cpu",
    ]).stdout
    assert len(re.findall(r"^H-\d+\t-?[0-9.]+\t", gen, re.M)) == 37
    assert re.search(r"Generate test with beam=5: BLEU4 = [0-9.]+", gen)

    gold_path = synthetic_raw / "test.en.conllu"
    output = tmp_path / "induced.conllu"
    capsys.readouterr()
    main([str(synthetic_databin), "--path", str(checkpoint), "--gen-subset", "test",
          "--output", str(output), "--gold", str(gold_path), "--cpu"])
    out = capsys.readouterr().out
    gold = read_gold_trees(str(gold_path))
    with open(output, encoding="utf-8") as f:
        sentences = list(conllu.parse_incr(f))
    assert len(sentences) == len(gold) == 37
    predicted = []
    for sentence, tree in zip(sentences, gold):
        assert [t["form"] for t in sentence] == tree.words
        heads = [t["head"] - 1 for t in sentence]
        validate_heads(heads)  # one root, no cycle
        predicted.append(heads)
    scores = score_corpus(predicted, gold).model
    lines = out.splitlines()
    i = next(k for k, line in enumerate(lines) if line.split() == ["FA", "SA", "Baseline"])
    assert lines[i + 1].split()[5] == "transformer"
    row = lines[i + 2].split()
    assert row[2:7] == ["-"] * 5
    assert row[7] == f"{scores.directed_accuracy:04.1f}/{scores.undirected_accuracy:04.1f}"
    with pytest.raises(SystemExit, match="no syntax gate"):
        main([str(synthetic_databin), "--path", str(checkpoint), "--cpu",
              "--gate-out", str(tmp_path / "gates.tsv")])
