"""The attentional RNN backbone: shapes, attention in training, incremental decoding."""
import torch

from model_utils import build_model, incremental_log_probs, random_batch


def test_attention_is_returned_in_training_over_source_positions():
    model = build_model("attentional_rnn", dropout=0.1).train()
    src, lengths, prev = random_batch(model)
    logits, extra = model(src, lengths, prev)
    attn = extra["attn"][0]
    assert logits.shape == (3, 6, len(model.decoder.dictionary))
    assert attn.shape == (3, 6, src.size(1))
    assert attn.requires_grad
    assert torch.allclose(attn.sum(-1), torch.ones(3, 6), atol=1e-5)
    pad = src.eq(model.encoder.dictionary.pad())
    assert attn.masked_select(pad.unsqueeze(1).expand_as(attn)).abs().max() == 0


def test_incremental_decoding_equals_full_forward():
    model = build_model("attentional_rnn", decoder_layers=2)
    src, lengths, prev = random_batch(model)
    with torch.no_grad():
        full = torch.log_softmax(model(src, lengths, prev)[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths), prev)
    assert torch.allclose(full, step, atol=1e-5)


def test_incremental_decoding_after_beam_reorder():
    model = build_model("attentional_rnn", attention_score="dot", decoder_hidden_size=512)
    src, lengths, prev = random_batch(model, bsz=4)
    order = torch.tensor([2, 2, 0, 3])
    with torch.no_grad():
        full = torch.log_softmax(model(src[order], lengths[order], prev[order])[0], dim=-1)
        step = incremental_log_probs(model, model.encoder(src, lengths), prev, reorder=order, reorder_at=3)
    assert torch.allclose(full, step, atol=1e-5)


def test_padding_does_not_change_a_sentence():
    model = build_model("attentional_rnn")
    src, lengths, prev = random_batch(model, bsz=3)
    with torch.no_grad():
        batch = torch.log_softmax(model(src, lengths, prev)[0], dim=-1)
        n = int(lengths[2])
        alone = torch.log_softmax(model(src[2:, :n], lengths[2:], prev[2:])[0], dim=-1)
    assert torch.allclose(batch[2:], alone, atol=1e-5)


def test_left_padded_source_is_refused():
    model = build_model("attentional_rnn")
    src, lengths, prev = random_batch(model)
    left = torch.roll(src, shifts=1, dims=1)
    try:
        model(left, lengths, prev)
    except ValueError as err:
        assert "the source is left-padded" in str(err)
    else:
        raise AssertionError("a left-padded source must be refused")
