"""PASCAL, parent-scaled self-attention (Bugliarello & Okazaki 2020), on the Transformer
backbone: parent positions and head weights against a hand-worked example, padding,
parent ignoring, incremental decoding, raw input, and the command lines."""
import math
import re

import pytest
import torch

from conftest import USER_DIR, run_cli
from model_utils import build_model, incremental_log_probs
from test_transformer_backbone import transformer_train_args
from fairseq_syntax.modules.parent_scaled_attention import parent_gaussian, parent_positions


pytestmark = pytest.mark.usefixtures("one_thread")


# "The monkey eats a banana" (the paper's figure 1) with banana in two pieces, and
# "monkey eats" with eats in two pieces, right-padded:
#   A: The(0) monkey(1) eats(2) a(3) ban(4) ana(5) <eos>(6)
#      The -> monkey, monkey -> eats, eats = root, a -> banana, banana -> eats
#   B: monkey(0) ea(1) ts(2) <eos>(3) <pad> <pad> <pad>
HEADS = torch.tensor([[1, 2, -1, 4, 2, 4, 2],          # pieces: first piece of the head word
                      [1, -1, 1, 1, -2, -2, -2]])      # (other pieces: their first piece)
WORDS = torch.tensor([[0, 1, 2, 3, 4, 4, -1],
                      [0, 1, 1, -1, -2, -2, -2]])
# parents by hand: a piece inherits its word's parent, which sits at the mean position of
# its pieces (banana: 4.5, eats in B: 1.5); the root and eos are their own parents
PARENTS = [[1, 2, 2, 4.5, 2, 2, 6],
           [1.5, 1.5, 1.5, 3, 0, 0, 0]]


def test_parent_positions_by_hand():
    assert parent_positions(HEADS, WORDS).tolist() == PARENTS


def test_parent_gaussian_is_the_normal_density():
    weights = parent_gaussian(torch.tensor(PARENTS), sigma=2.0)
    # row "a" of A: N(j; 4.5, 4) = exp(-(j - 4.5)^2 / 8) / sqrt(8 pi)
    expected = [math.exp(-(j - 4.5) ** 2 / 8) / math.sqrt(8 * math.pi) for j in range(7)]
    assert weights[0, 3].tolist() == pytest.approx(expected, rel=1e-6)
    assert float(weights[0, 3, 4]) == pytest.approx(0.19333, abs=1e-5)  # exp(-1/32) / 5.0133


def pascal_batch(model):
    d = model.encoder.dictionary
    src = torch.tensor([[4, 5, 6, 7, 8, 9, d.eos()],
                        [5, 10, 11, d.eos(), d.pad(), d.pad(), d.pad()]])
    return src, torch.tensor([7, 4])


def layer_attention(model, src, lengths, layer=0, **side):
    """The attention probabilities ``[B, H, T, S]`` inside encoder layer ``layer``'s
    forward (the input of its dropout)."""
    attn = model.encoder.layers[layer].self_attn
    seen = []
    handle = attn.dropout_module.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    try:
        encoder_out = model.encoder(src, lengths, **side)
    finally:
        handle.remove()
    bsz, width = src.shape
    return seen[0].view(bsz, attn.num_heads, width, width), encoder_out


def test_pascal_head_weights_by_hand():
    """Every score q·k/√d is 1 (constant projections), so the plain head is uniform over
    the real positions and the PASCAL head is softmax_j N(j; p_t, 1) over them."""
    model = build_model("pascal_transformer_tiny", encoder_embed_dim=16, dropout=0.0)
    attn = model.encoder.layers[0].self_attn
    c = attn.head_dim ** -0.25  # q·k·scaling = head_dim · c² / sqrt(head_dim) = 1
    with torch.no_grad():
        for proj in (attn.q_proj, attn.k_proj):
            proj.weight.zero_()
            proj.bias.fill_(c)
    src, lengths = pascal_batch(model)
    weights, _ = layer_attention(model, src, lengths, src_heads=HEADS, src_words=WORDS)
    g = [math.exp(-(j - 4.5) ** 2 / 2) / math.sqrt(2 * math.pi) for j in range(7)]
    row_a = [math.exp(x) / sum(math.exp(y) for y in g) for x in g]  # token "a", p = 4.5
    assert weights[0, 0, 3].tolist() == pytest.approx(row_a, rel=1e-5)
    # by hand: N(4; 4.5, 1) = exp(-1/8) / sqrt(2 pi) = 0.35206, N(0; 4.5, 1) = 1.6e-5, ...
    # e^N summed over j = 0..6: 8.13911, so row_a[4] = e^0.35206 / 8.13911 = 0.17471
    assert row_a[4] == pytest.approx(0.17471, abs=1e-5) and row_a[0] == pytest.approx(0.12287, abs=1e-5)
    for b, n in ((0, 7), (1, 4)):
        for t in range(n):
            scaled = [math.exp(-(j - PARENTS[b][t]) ** 2 / 2) / math.sqrt(2 * math.pi) for j in range(n)]
            total = sum(math.exp(x) for x in scaled)
            assert weights[b, 0, t, :n].tolist() == pytest.approx(
                [math.exp(x) / total for x in scaled], rel=1e-5)
            assert weights[b, 1, t, :n].tolist() == pytest.approx([1 / n] * n, rel=1e-5)
            assert weights[b, :, t, n:].abs().sum() == 0  # padding


def test_padding_does_not_change_a_sentence():
    model = build_model("pascal_transformer_tiny", pascal_sigma=0.7)
    src, lengths = pascal_batch(model)
    with torch.no_grad():
        batch = model.encoder(src, lengths, src_heads=HEADS, src_words=WORDS)["encoder_out"][0]
        alone = model.encoder(src[1:, :4], lengths[1:], src_heads=HEADS[1:, :4],
                              src_words=WORDS[1:, :4])["encoder_out"][0]
    torch.testing.assert_close(batch[:4, 1:], alone, atol=1e-5, rtol=1e-5)


def test_pascal_changes_only_the_chosen_layers_and_heads():
    model = build_model("pascal_transformer_tiny", pascal_layers="1")
    src, lengths = pascal_batch(model)
    assert type(model.encoder.layers[0]).__name__ == "TransformerEncoderLayerBase"
    weights, _ = layer_attention(model, src, lengths, layer=1, src_heads=HEADS, src_words=WORDS)
    assert weights.shape == (2, 2, 7, 7)
    with pytest.raises(ValueError, match=r"--pascal-heads 3: .*2 heads"):
        build_model("pascal_transformer_tiny", pascal_heads=3)
    with pytest.raises(ValueError, match=r"--pascal-layers \[2\]: the encoder has 2 layers"):
        build_model("pascal_transformer_tiny", pascal_layers="0,2")


def test_parent_ignoring_leaves_whole_rows_unscaled_in_training_only():
    model = build_model("pascal_transformer_tiny", parent_ignoring=0.5, dropout=0.0)
    attn = model.encoder.layers[0].self_attn
    src, lengths = pascal_batch(model)
    side = dict(src_heads=HEADS, src_words=WORDS)
    torch.manual_seed(0)
    model.train()
    trained, _ = layer_attention(model, src, lengths, **side)
    model.eval()
    scaled, _ = layer_attention(model, src, lengths, **side)
    attn.pascal_heads = 0  # the same layer without scaling (no head is PASCAL)
    plain, _ = layer_attention(model, src, lengths, **side)
    attn.pascal_heads = 1
    kinds = []
    for b, n in ((0, 7), (1, 4)):
        for t in range(n):
            row = trained[b, 0, t]
            is_scaled = torch.allclose(row, scaled[b, 0, t], atol=1e-6)
            is_plain = torch.allclose(row, plain[b, 0, t], atol=1e-6)
            assert is_scaled != is_plain
            kinds.append(is_scaled)
    assert 0 < sum(kinds) < len(kinds)  # 11 rows, q = 0.5
    torch.testing.assert_close(trained[:, 1], scaled[:, 1])  # the other head is untouched


def test_incremental_decoding_equals_full_forward():
    model = build_model("pascal_transformer_tiny")
    src, lengths = pascal_batch(model)
    prev = torch.tensor([[2, 5, 6, 7, 8], [2, 9, 10, 11, 12]])
    side = dict(src_heads=HEADS, src_words=WORDS)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, prev, **side)[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths, **side), prev)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)


def test_raw_input_gives_heads_and_words_without_distances(synthetic_raw, synthetic_databin):
    """fairseq-interactive's path for a model that needs heads and words only."""
    from fairseq_syntax.data.raw_input import side_tensors
    from test_syntax_dataset import GoldParser, _setup_task

    task = _setup_task(synthetic_databin)
    task.declared_inputs |= {"heads", "words"}  # what pascal_transformer declares
    task.load_dataset("valid")
    stored = task.datasets["valid"]
    assert stored.words is not None and stored.inputs == {"heads", "words"}
    lines = (synthetic_raw / "valid.en").read_text().splitlines()[:6]
    task.raw_input_adapter()._parser = GoldParser(str(synthetic_raw / "valid.en.conllu"))
    tokens, lengths = task.get_interactive_tokens_and_lengths(lines, lambda x: x)
    raw = task.build_dataset_for_inference(tokens, lengths)
    batch = raw.collater([raw[k] for k in range(len(raw))])["net_input"]
    assert "src_distances" not in batch
    sources = [task.raw_input_adapter().batch.lookup(t, task.source_dictionary.pad()) for t in tokens]
    bare = side_tensors(sources, max(len(t) for t in tokens), {"heads", "words"})
    assert set(bare) == {"src_heads", "src_words"}
    for k in range(len(lines)):
        want = stored.collater([stored[k]])["net_input"]
        n = len(tokens[k])
        row = raw.collater([raw[k]])["net_input"]
        for key in ("src_heads", "src_words"):
            assert torch.equal(row[key][0, :n], want[key][0]), key
            assert torch.equal(bare[key][k, :n], want[key][0]), key


def test_train_and_generate_through_the_command_lines(synthetic_databin, tmp_path):
    train = run_cli(transformer_train_args(synthetic_databin, tmp_path, updates=3, extra=[
        "--arch", "pascal_transformer_tiny", "--parent-ignoring", "0.3",
        "--pascal-sigma", "1.5"]))
    log = train.stdout + train.stderr
    assert re.search(r"\[train\] syntax inputs: \['heads', 'words'\]", log), log[-2000:]
    assert re.search(r"\bpascal_sigma=1\.5,", log) and re.search(r"\bparent_ignoring=0\.3,", log)
    assert re.search(r"\| train \| .*\| loss [0-9.]+ \|.*\| num_updates 3 \|", log), log[-2000:]
    gen = run_cli([
        "fairseq-generate", str(synthetic_databin), "--user-dir", USER_DIR,
        "--task", "syntax_translation", "--path", str(tmp_path / "checkpoint_last.pt"),
        "--gen-subset", "test", "--beam", "5", "--batch-size", "16", "--cpu",
    ]).stdout
    assert len(re.findall(r"^H-\d+\t-?[0-9.]+\t", gen, re.M)) == 37
    assert re.search(r"Generate test with beam=5: BLEU4 = [0-9.]+", gen)
