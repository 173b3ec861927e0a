"""Phrase memory (Tree-to-Sequence, Eriguchi et al. 2016) on the Transformer: the phrase
rows against a node-by-node recursion of eq. 11 over the encoder states, the memory mask,
equality with the backbone for sentences without a parse, the attention the criterion
folds, incremental decoding, errors and the command lines."""
import re

import pytest
import torch

from conftest import run_cli
from model_utils import build_model, incremental_log_probs
from test_transformer_backbone import generate_test_split, transformer_train_args
from test_tree_to_sequence import batch_trees, recursive_reference, tree_batch
from fairseq_syntax.criterions.supervised_attention import supervised_weights
from fairseq_syntax.modules.phrase_folding import fold_phrase_attention

pytestmark = pytest.mark.usefixtures("one_thread")

ARCH = "tree2seq_transformer_tiny"


def test_phrase_rows_are_eq11_over_the_encoder_states():
    model = build_model(ARCH)
    src, lengths, prev, tree = tree_batch(model)
    encoder = model.encoder
    with torch.no_grad():
        out = encoder(src, lengths, src_tree=tree)
        memory = out["encoder_out"][0].transpose(0, 1)  # [B, S + M, C]
        mask = out["encoder_padding_mask"][0]
    src_len, rows = src.size(1), tree.size(1)
    assert memory.shape[1] == src_len + rows
    for b in range(src.size(0)):
        n = int(lengths[b]) - 1
        parsed = [tuple(r) for r in tree[b].tolist() if r[0] >= 0]
        with torch.no_grad():
            nodes = recursive_reference(encoder.tree_lstm.cell, memory[b, :n],
                                        torch.zeros_like(memory[b, :n]), parsed, n)
            for k in range(len(parsed)):
                want = encoder.phrase_layer_norm(nodes[n + k][0])
                torch.testing.assert_close(memory[b, src_len + k], want, atol=1e-5, rtol=1e-5)
        assert mask[b].tolist() == [j >= n + 1 for j in range(src_len)] + \
            [k >= len(parsed) for k in range(rows)]
    assert mask[3, src_len:].all()  # sentence 3 has no parse: no phrase rows


def test_a_sentence_without_a_parse_is_decoded_as_by_the_backbone():
    """The backbone's parameters in the tree model: every sentence without a parse (only
    padding tree rows) gets the backbone's output exactly; a parsed one does not."""
    backbone = build_model("syntax_transformer_tiny")
    model = build_model(ARCH)
    missing, unexpected = model.load_state_dict(backbone.state_dict(), strict=False)
    assert unexpected == [] and sorted({k.split(".")[1] for k in missing}) == ["phrase_layer_norm", "tree_lstm"]
    src, lengths, prev, tree = tree_batch(model)
    with torch.no_grad():
        want = backbone(src, lengths, prev)[0]
        none = model(src, lengths, prev, src_tree=torch.full_like(tree, -1))[0]
        parsed = model(src, lengths, prev, src_tree=tree)[0]
    torch.testing.assert_close(none, want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(parsed[3], want[3], atol=1e-6, rtol=1e-6)
    assert (parsed[0] - want[0]).abs().max() > 1e-3


def test_alignment_is_the_word_columns_and_the_criterion_folds_the_phrases():
    model = build_model(ARCH, alignment_layer=0, alignment_heads=1)
    src, lengths, prev, tree = tree_batch(model)
    with torch.no_grad():
        _, extra = model(src, lengths, prev, src_tree=tree)
    memory, attn = extra["memory_attn"][0], extra["attn"][0]
    src_len = src.size(1)
    assert memory.shape == (4, prev.size(1), src_len + tree.size(1))
    torch.testing.assert_close(attn, memory[..., :src_len])
    torch.testing.assert_close(memory.sum(-1), torch.ones(4, prev.size(1)))
    assert memory[1, :, src_len + 4].abs().max() == 0 and memory[3, :, src_len:].abs().max() == 0
    assert memory[0, :, src_len:].min() > 0  # the phrases are attended
    nonpad = src.ne(model.encoder.padding_idx)
    folded = supervised_weights(extra, {"src_tree": tree}, nonpad)
    torch.testing.assert_close(folded, fold_phrase_attention(memory, tree, nonpad))
    torch.testing.assert_close(folded.sum(-1), torch.ones(4, prev.size(1)))


def test_the_tree_lstm_learns():
    model = build_model(ARCH, dropout=0.0).train()
    src, lengths, prev, tree = tree_batch(model)
    out, _ = model(src, lengths, prev, src_tree=tree)
    out.log_softmax(-1)[..., 4].sum().backward()
    assert model.encoder.tree_lstm.cell.gates.weight.grad.abs().sum() > 0
    assert model.encoder.phrase_layer_norm.weight.grad.abs().min() > 0
    forget = model.encoder.tree_lstm.cell.gates.bias.detach()[64:3 * 64]
    assert forget.eq(1.0).all()


def test_incremental_decoding_equals_full_forward_with_beam_reorder():
    """Beam 2 over sentences 0 and 3 (parsed and not); rows move within a sentence's beam
    (fairseq's cross-attention cache keeps its keys), the trees move with encoder_out."""
    model = build_model(ARCH)
    src, lengths, prev, tree = tree_batch(model)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, prev, src_tree=tree)[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths, src_tree=tree), prev)
        torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)
        beam = torch.tensor([0, 0, 3, 3])
        src, lengths, tree = src[beam], lengths[beam], tree[beam]
        prev = torch.cat([prev[:2], prev[2:].flip(1)])
        order = torch.tensor([1, 1, 3, 2])
        full = torch.log_softmax(model(src[order], lengths[order], prev[order], src_tree=tree[order])[0], -1)
        step = incremental_log_probs(model, model.encoder(src, lengths, src_tree=tree), prev,
                                     reorder=order, reorder_at=3)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)


def test_errors_say_what_to_fix():
    model = build_model(ARCH)
    src, lengths, prev, tree = tree_batch(model)
    with pytest.raises(KeyError, match=r"needs the source binary trees .*--task syntax_translation"):
        model(src, lengths, prev)
    short = batch_trees()
    short[0, 4] = -1  # 4 internal nodes for 6 leaves
    with pytest.raises(ValueError, match=r"batch row 0: the binary tree has 4 internal nodes for 6 tokens"):
        model(src, lengths, prev, src_tree=short)


def test_train_with_supervised_attention_and_generate_through_the_command_lines(synthetic_databin, tmp_path):
    train = run_cli(transformer_train_args(synthetic_databin, tmp_path, updates=3, extra=[
        "--arch", ARCH, "--criterion", "supervised_attention_cross_entropy",
        "--alignment-layer", "0", "--alignment-heads", "1"]))
    log = train.stdout + train.stderr
    assert re.search(r"model: TreeToSequenceTransformerModel", log), log[-2000:]
    assert re.search(r"\| train \| .*\| alignment_loss [0-9.]+ \|.*\| num_updates 3 \|", log), log[-2000:]
    gen = generate_test_split(synthetic_databin, tmp_path)
    sources = {int(i): s.split() for i, s in re.findall(r"^S-(\d+)\t(.*)$", gen, re.M)}
    aligns = re.findall(r"^A-(\d+)\t(.*)$", gen, re.M)
    assert len(re.findall(r"^H-\d+\t-?[0-9.]+\t", gen, re.M)) == 37 and len(aligns) == 37
    for sid, links in aligns:
        for link in links.split():
            assert 0 <= int(link.split("-")[0]) < len(sources[int(sid)])
    assert re.search(r"Generate test with beam=5: BLEU4 = [0-9.]+", gen)
