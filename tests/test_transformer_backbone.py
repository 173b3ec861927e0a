"""The Transformer backbone ``syntax_transformer``: fairseq's own Transformer (same
parameters, same outputs) on the right-padded source, incremental decoding, side inputs
for the layers, and the real command lines."""
import argparse
import re

import pytest
import torch
from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

from conftest import USER_DIR, run_cli
from model_utils import FakeTask, build_model, incremental_log_probs, random_batch, tiny_dictionary
from fairseq_syntax.models.syntax_transformer import SyntaxTransformerModel, syntax_transformer_tiny
from fairseq_syntax.modules.transformer_encoder import SyntaxTransformerEncoder


pytestmark = pytest.mark.usefixtures("one_thread")


def build_pair(seed=0, **overrides):
    """``syntax_transformer_tiny`` and fairseq's ``transformer_tiny`` from one seed."""
    torch.manual_seed(seed)
    ours = build_model("syntax_transformer_tiny", **overrides)
    torch.manual_seed(seed)
    theirs = build_model("transformer_tiny", **overrides)
    return ours, theirs


def left_padded(src, pad):
    """The same sentences padded on the left, as ``--task translation`` pads them."""
    out = torch.full_like(src, pad)
    for i, row in enumerate(src):
        tokens = row[row.ne(pad)]
        out[i, src.size(1) - len(tokens):] = tokens
    return out


@pytest.mark.parametrize("learned", [False, True])
def test_same_parameters_and_outputs_as_fairseq_transformer(learned):
    ours, theirs = build_pair(encoder_learned_pos=learned, decoder_learned_pos=learned)
    assert type(ours.encoder) is SyntaxTransformerEncoder
    mine, fair = ours.state_dict(), theirs.state_dict()
    assert mine.keys() == fair.keys()
    for key in fair:  # fairseq's initialisation, bit for bit
        assert torch.equal(mine[key], fair[key]), key
    src, lengths, prev = random_batch(ours, bsz=4, src_len=9)
    pad = ours.encoder.dictionary.pad()
    assert src[:, -1].eq(pad).any()  # really right-padded
    with torch.no_grad():
        out_r, extra_r = ours(src, lengths, prev)
        out_l, extra_l = theirs(left_padded(src, pad), lengths, prev)
    torch.testing.assert_close(out_r, out_l, atol=1e-5, rtol=1e-5)
    # the cross-attention of the last layer, over source positions: the left-padded
    # one shifted back to the left
    attn_l = torch.stack([row.roll(-int(src.size(1) - n), dims=-1)
                          for row, n in zip(extra_l["attn"][0], lengths)])
    torch.testing.assert_close(extra_r["attn"][0], attn_l, atol=1e-6, rtol=1e-5)


def test_training_step_equals_fairseq_transformers_with_the_kftt_recipe():
    """In training mode, with the KFTT recipe's pre-norm layers, dropout 0.2 and attention
    dropout 0.1, the same weights and dropout draws give fairseq's outputs and gradients bit
    for bit (on unpadded sentences, where right and left padding are the same batch): the
    two Transformers differ in training only by where padding puts the dropout masks."""
    recipe = dict(encoder_normalize_before=True, decoder_normalize_before=True, dropout=0.2,
                  attention_dropout=0.1, share_decoder_input_output_embed=True)
    ours, theirs = build_pair(**recipe)
    ours.train(), theirs.train()
    src, _, prev = random_batch(ours, bsz=4, src_len=9)
    src[:, -1] = ours.encoder.dictionary.eos()
    src[src.eq(ours.encoder.dictionary.pad())] = ours.encoder.dictionary.nspecial
    lengths = torch.full((4,), 9)
    outputs = []
    for model in (ours, theirs):
        torch.manual_seed(5)
        out, _ = model(src, lengths, prev)
        (out.log_softmax(-1)[..., 0].sum()).backward()
        outputs.append(out)
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.equal(outputs[0], theirs.eval()(src, lengths, prev)[0])  # dropout drew
    grads = dict(theirs.named_parameters())
    for name, param in ours.named_parameters():
        assert torch.equal(param.grad, grads[name].grad), name


@pytest.mark.parametrize("overrides", [{}, {"decoder_learned_pos": True, "decoder_layers": 3,
                                            "decoder_normalize_before": True}])
def test_incremental_decoding_equals_full_forward(overrides):
    model = build_model("syntax_transformer_tiny", **overrides)
    src, lengths, prev = random_batch(model, bsz=3, src_len=8, tgt_len=7)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, prev)[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths), prev)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)


class HeadsModel(SyntaxTransformerModel):
    """The backbone declaring ``heads`` (its layers do not read them)."""

    @classmethod
    def side_inputs(cls, cfg):
        return {"heads"}


def test_incremental_decoding_after_beam_reorder_with_side_inputs():
    """fairseq's cross-attention cache keeps its keys when the beam is reordered (beam
    rows of one sentence share them), so rows move only within a sentence's beam."""
    args = argparse.Namespace()
    syntax_transformer_tiny(args)
    torch.manual_seed(0)
    model = HeadsModel.build_model(args, FakeTask(tiny_dictionary(), tiny_dictionary(24))).eval()
    src, lengths, prev = random_batch(model, bsz=2)
    beam = torch.tensor([0, 0, 1, 1])  # two sentences, beam 2
    src, lengths = src[beam], lengths[beam]
    prev = random_batch(model, bsz=4, seed=1)[2]
    heads = torch.arange(4 * src.size(1)).view(4, -1)  # any batch-first side tensor
    order = torch.tensor([1, 1, 3, 2])
    with torch.no_grad():
        full = torch.log_softmax(model(src[order], lengths[order], prev[order])[0], dim=-1)
        encoder_out = model.encoder(src, lengths, src_heads=heads)
        step = incremental_log_probs(model, encoder_out, prev, reorder=order, reorder_at=3)
        reordered = model.encoder.reorder_encoder_out(encoder_out, order)
    torch.testing.assert_close(full, step, atol=1e-5, rtol=1e-5)
    assert torch.equal(encoder_out["src_heads"][0], heads)
    assert torch.equal(reordered["src_heads"][0], heads[order])


def test_encoder_passes_on_only_the_declared_side_inputs():
    model = build_model("syntax_transformer_tiny")  # declares none
    src, lengths, _ = random_batch(model)
    heads = torch.zeros_like(src)
    with torch.no_grad():
        encoder_out = model.encoder(src, lengths, src_heads=heads, src_tree=heads)
    assert "src_heads" not in encoder_out and "src_tree" not in encoder_out
    args = argparse.Namespace()
    syntax_transformer_tiny(args)
    declaring = HeadsModel.build_model(args, FakeTask(tiny_dictionary(), tiny_dictionary(24)))
    with torch.no_grad():
        encoder_out = declaring.encoder(src, lengths, src_heads=heads, src_tree=heads)
    assert encoder_out["src_heads"][0] is heads and "src_tree" not in encoder_out
    assert declaring.decoder.side_input_keys == ("src_heads",)


def test_padding_does_not_change_a_sentence():
    model = build_model("syntax_transformer_tiny")
    src, lengths, prev = random_batch(model, bsz=3)
    with torch.no_grad():
        batch = torch.log_softmax(model(src, lengths, prev)[0], dim=-1)
        n = int(lengths[2])
        alone = torch.log_softmax(model(src[2:, :n], lengths[2:], prev[2:])[0], dim=-1)
    torch.testing.assert_close(batch[2:], alone, atol=1e-5, rtol=1e-5)


def test_attention_in_training_is_over_source_positions():
    model = build_model("syntax_transformer_tiny", dropout=0.1, attention_dropout=0.1).train()
    src, lengths, prev = random_batch(model)
    logits, extra = model(src, lengths, prev)
    attn = extra["attn"][0]
    assert attn.shape == (3, 6, src.size(1)) and attn.requires_grad
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, 6))
    pad = src.eq(model.encoder.dictionary.pad())
    assert attn.masked_select(pad[:, None, :].expand_as(attn)).abs().max() == 0


def test_left_padded_source_is_refused():
    model = build_model("syntax_transformer_tiny")
    src, lengths, prev = random_batch(model)
    with pytest.raises(ValueError, match="the source is left-padded"):
        model(left_padded(src, model.encoder.dictionary.pad()), lengths, prev)


class RecordingLayer(TransformerEncoderLayerBase):
    """An encoder layer that needs ``src_heads`` and records what it was given."""

    side_input_keys = ("src_heads",)

    def forward(self, x, encoder_padding_mask, attn_mask=None):
        self.seen = self.side_inputs["src_heads"]
        return super().forward(x, encoder_padding_mask, attn_mask)


class RecordingEncoder(SyntaxTransformerEncoder):
    def build_encoder_layer(self, cfg):
        return RecordingLayer(cfg)


class RecordingModel(HeadsModel):
    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return RecordingEncoder(cfg, src_dict, embed_tokens,
                                side_input_keys=cls.side_input_keys(cfg))


def test_layers_that_declare_side_inputs_get_them_for_one_forward():
    args = argparse.Namespace()
    syntax_transformer_tiny(args)
    model = RecordingModel.build_model(args, FakeTask(tiny_dictionary(), tiny_dictionary(24)))
    model.eval()
    src, lengths, prev = random_batch(model)
    heads = torch.randint(-1, 5, src.shape)
    with torch.no_grad():
        model(src, lengths, prev, src_heads=heads)
    for layer in model.encoder.layers:
        assert layer.seen is heads and layer.side_inputs is None
    with pytest.raises(ValueError, match="needs src_heads.*--task syntax_translation"):
        model(src, lengths, prev)


# ----------------------------------------------------------------------- command line

TINY = ["--arch", "syntax_transformer_tiny", "--encoder-embed-dim", "16",
        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
        "--decoder-ffn-embed-dim", "32", "--dropout", "0"]


def transformer_train_args(databin, save_dir, updates=4, extra=()):
    return [
        "fairseq-train", str(databin), "--user-dir", USER_DIR, "--task", "syntax_translation",
        *TINY, "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "800",
        "--max-update", str(updates), "--cpu", "--seed", "1", "--save-dir", str(save_dir),
        "--no-epoch-checkpoints", "--no-progress-bar", "--log-interval", "1", *extra,
    ]


def generate_test_split(databin, save_dir):
    """``fairseq-generate`` output of ``save_dir``'s last checkpoint on the test split
    (beam 5, with ``--print-alignment``)."""
    return run_cli([
        "fairseq-generate", str(databin), "--user-dir", USER_DIR,
        "--task", "syntax_translation", "--path", str(save_dir / "checkpoint_last.pt"),
        "--gen-subset", "test", "--beam", "5", "--batch-size", "16", "--cpu",
        "--print-alignment",
    ]).stdout


def test_train_and_generate_through_the_command_lines(synthetic_databin, tmp_path):
    train = run_cli(transformer_train_args(synthetic_databin, tmp_path, updates=4))
    log = train.stdout + train.stderr
    assert re.search(r"\[train\] syntax inputs: none", log), log[-2000:]
    assert re.search(r"model: SyntaxTransformerModel", log), log[-2000:]
    assert re.search(r"\| train \| .*\| loss [0-9.]+ \|.*\| num_updates 4 \|", log), log[-2000:]
    assert re.search(r"valid on 'valid' subset \| loss [0-9.]+ \| ppl [0-9.]+ .*\| num_updates 4\b", log)
    gen = generate_test_split(synthetic_databin, tmp_path)
    sources = {int(i): s.split() for i, s in re.findall(r"^S-(\d+)\t(.*)$", gen, re.M)}
    hyps = re.findall(r"^H-(\d+)\t(-?[0-9.]+)\t", gen, re.M)
    aligns = re.findall(r"^A-(\d+)\t(.*)$", gen, re.M)
    assert len(sources) == 37 and len(hyps) == 37 and len(aligns) == 37
    for sid, links in aligns:
        for link in links.split():
            src_pos, tgt_pos = map(int, link.split("-"))
            assert 0 <= src_pos < len(sources[int(sid)]) and tgt_pos >= 0
    assert re.search(r"Generate test with beam=5: BLEU4 = [0-9.]+", gen)
