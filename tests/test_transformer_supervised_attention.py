"""Supervised cross-attention (Mi et al. 2016) on the Transformer backbone: the
``supervised_attention_cross_entropy`` criterion on the heads chosen by
``--alignment-layer``/``--alignment-heads``, against a hand computation; the alignment
gradient reaches those heads only; ``--print-alignment`` prints them."""
import json
import math
import re

import pytest
import torch

from conftest import USER_DIR, run_cli
from model_utils import FakeTask, build_model
from test_transformer_backbone import TINY, transformer_train_args
from fairseq_syntax.cli.score_alignments import main as score_main
from fairseq_syntax.criterions.supervised_attention import SupervisedAttentionCrossEntropy

CRITERION = ["--criterion", "supervised_attention_cross_entropy"]


pytestmark = pytest.mark.usefixtures("one_thread")



def model_and_batch(**overrides):
    """A 2-layer tiny Transformer and a hand-made right-padded batch of two sentences.

    Sentence A: x0 x1 x2 <eos> -> y0 y1 <eos>, links 0-0, 2-0, 1-1.
    Sentence B: x0 x1 <eos> <pad> -> y0 <eos> <pad>, link 1-0.
    """
    torch.manual_seed(0)
    model = build_model("syntax_transformer_tiny", decoder_layers=2, dropout=0.0,
                        encoder_embed_dim=16, decoder_embed_dim=16, **overrides)
    d = model.encoder.dictionary
    pad, eos = d.pad(), d.eos()
    src = torch.tensor([[5, 6, 7, eos], [8, 9, eos, pad]])
    tgt = torch.tensor([[10, 11, eos], [12, eos, pad]])
    prev = torch.tensor([[eos, 10, 11], [eos, 12, pad]])
    links = torch.tensor([[[0, 0], [2, 0], [1, 1]], [[1, 0], [-1, -1], [-1, -1]]])
    net_input = {"src_tokens": src, "src_lengths": src.ne(pad).sum(1),
                 "prev_output_tokens": prev}
    sample = {"net_input": net_input, "target": tgt, "alignment_links": links,
              "ntokens": int(tgt.ne(pad).sum()), "id": torch.tensor([0, 1])}
    return model, sample


def head_attention(model, net_input, layer):
    """Each head's cross-attention of decoder ``layer``, ``[H, B, T, S]``, computed by
    hand from the attention module's inputs: softmax_s((W_q x_t + b_q) · (W_k e_s +
    b_k) / sqrt(d_h)) over the non-padding source positions."""
    attn = model.decoder.layers[layer].encoder_attn
    seen = {}

    def grab(module, args, kwargs):
        seen.update(query=kwargs["query"], key=kwargs["key"], mask=kwargs["key_padding_mask"])

    handle = attn.register_forward_pre_hook(grab, with_kwargs=True)
    try:
        model(**net_input)
    finally:
        handle.remove()
    T, B, _ = seen["query"].shape
    S = seen["key"].size(0)
    H, dh = attn.num_heads, attn.head_dim
    q = attn.q_proj(seen["query"]).view(T, B, H, dh)
    k = attn.k_proj(seen["key"]).view(S, B, H, dh)
    scores = torch.einsum("tbhd,sbhd->hbts", q, k) / math.sqrt(dh)
    scores = scores.masked_fill(seen["mask"][None, :, None, :], float("-inf"))
    return torch.softmax(scores, dim=-1)


G = math.exp(-0.5)  # the Gaussian at distance 1 with sigma 1
# gold matrices by hand (rows: target positions, columns: source positions, eos last)
GOLD = {
    "simple": [
        [[0.5, 0, 0.5, 0], [0, 1, 0, 0], [0, 0, 0, 1]],
        [[0, 1, 0, None], [0, 0, 1, None], None],
    ],
    "smoothed": [  # window 1, sigma 1; smoothing never reaches eos
        [[1 / (2 + 2 * G), 2 * G / (2 + 2 * G), 1 / (2 + 2 * G), 0],
         [G / (1 + 2 * G), 1 / (1 + 2 * G), G / (1 + 2 * G), 0], [0, 0, 0, 1]],
        [[G / (1 + G), 1 / (1 + G), 0, None], [0, 0, 1, None], None],
    ],
}


@pytest.mark.parametrize("transform", ["simple", "smoothed"])
@pytest.mark.parametrize("layer, heads", [(0, 1), (1, 2), (-2, 2)])
def test_loss_equals_hand_computation(transform, layer, heads):
    model, sample = model_and_batch(alignment_layer=layer, alignment_heads=heads)
    crit = SupervisedAttentionCrossEntropy(
        FakeTask(model.encoder.dictionary, model.encoder.dictionary), sentence_avg=False,
        alignment_lambda=0.7,
        alignment_transform=transform, alignment_window=1, alignment_sigma=1.0)
    with torch.no_grad():
        loss, sample_size, log = crit(model, sample)
        attn = head_attention(model, sample["net_input"], layer % 2)[:heads].mean(0)
        logits = model(**sample["net_input"])[0]
    distance = 0.0
    for b, rows in enumerate(GOLD[transform]):
        for t, row in enumerate(rows):
            if row is None:
                continue  # target padding
            distance += sum((float(attn[b, t, s]) - g) ** 2
                            for s, g in enumerate(row) if g is not None)
    lprobs = torch.log_softmax(logits, dim=-1)
    tgt = sample["target"]
    nll = -sum(float(lprobs[b, t, tgt[b, t]]) for b in range(2) for t in range(3)
               if tgt[b, t] != model.decoder.dictionary.pad())
    assert log["alignment_rows"] == 5 and sample_size == 5
    assert float(log["alignment_loss"]) == pytest.approx(distance, rel=1e-5)
    assert float(log["nll_loss"]) == pytest.approx(nll, rel=1e-5)
    assert float(loss) == pytest.approx(nll + 0.7 * distance, rel=1e-5)


def test_alignment_gradient_reaches_only_the_chosen_heads():
    model, sample = model_and_batch(alignment_layer=0, alignment_heads=1)
    model.train()
    dictionary = model.encoder.dictionary
    crit = SupervisedAttentionCrossEntropy(FakeTask(dictionary, dictionary), sentence_avg=False)
    net_output = model(**sample["net_input"])
    distance, rows = crit.compute_alignment_distance(model, net_output, sample)
    assert rows == 5 and float(distance) > 0
    distance.backward()
    chosen = model.decoder.layers[0].encoder_attn
    dh = chosen.head_dim
    for proj in (chosen.q_proj, chosen.k_proj):
        assert proj.weight.grad[:dh].abs().sum() > 0  # head 0
        assert proj.weight.grad[dh:].abs().sum() == 0  # head 1
        assert proj.bias.grad[dh:].abs().sum() == 0
    # the weights do not depend on the values, the output projection or later layers
    for module in (chosen.v_proj, chosen.out_proj, model.decoder.layers[1],
                   model.decoder.output_projection):
        for name, p in module.named_parameters():
            grad = torch.zeros_like(p) if p.grad is None else p.grad
            assert grad.abs().sum() == 0, name
    # ... but on the encoder (keys) and on the decoder below (queries)
    assert model.encoder.layers[-1].fc2.weight.grad.abs().sum() > 0
    assert model.decoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_default_is_fairseqs_last_layer_over_all_heads():
    model, sample = model_and_batch()
    top, _ = model_and_batch(alignment_layer=-1, alignment_heads=2)
    with torch.no_grad():
        attn = model(**sample["net_input"])[1]["attn"][0]
        by_hand = head_attention(model, sample["net_input"], 1).mean(0)
        explicit = top(**sample["net_input"])[1]["attn"][0]
    torch.testing.assert_close(attn, by_hand)
    torch.testing.assert_close(attn, explicit)


def test_out_of_range_layer_or_heads_is_an_error():
    with pytest.raises(ValueError, match=r"--alignment-layer 2 is out of range.*2 layers"):
        build_model("syntax_transformer_tiny", alignment_layer=2)
    with pytest.raises(ValueError, match=r"--alignment-heads 3 is out of range.*2 heads"):
        build_model("syntax_transformer_tiny", alignment_heads=3)


# ----------------------------------------------------------------------- command line


def test_train_generate_prints_the_supervised_heads(synthetic_databin, synthetic_raw, tmp_path,
                                                    capsys):
    from fairseq import checkpoint_utils

    train = run_cli(transformer_train_args(synthetic_databin, tmp_path, updates=3, extra=[
        *CRITERION, "--alignment-layer", "0", "--alignment-heads", "1",
        "--alignment-transform", "smoothed"]))
    log = train.stdout + train.stderr
    assert re.search(r"\[train\] syntax inputs: \['alignments'\]", log), log[-2000:]
    assert re.search(r"\| train \| .*\| loss [0-9.]+ \| nll_loss [0-9.]+ "
                     r"\| alignment_loss [0-9.]+ \|.*\| num_updates 3 \|", log), log[-2000:]
    checkpoint = tmp_path / "checkpoint_last.pt"
    gen = run_cli([
        "fairseq-generate", str(synthetic_databin), "--user-dir", USER_DIR,
        "--task", "syntax_translation", "--path", str(checkpoint), "--gen-subset", "test",
        "--beam", "1", "--prefix-size", "1024", "--batch-size", "16", "--cpu",
        "--print-alignment", "soft",
    ]).stdout
    # the printed rows are the chosen head's teacher-forced attention
    models, _ = checkpoint_utils.load_model_ensemble([str(checkpoint)])
    model = models[0].eval()
    assert (model.decoder.alignment_layer, model.decoder.alignment_heads) == (0, 1)
    d_src, d_tgt = model.encoder.dictionary, model.decoder.dictionary
    sid, src_line = re.search(r"^S-(\d+)\t(.*)$", gen, re.M).groups()
    hyp = re.search(rf"^H-{sid}\t\S+\t(.*)$", gen, re.M).group(1)
    rows = re.search(rf"^A-{sid}\t(.*)$", gen, re.M).group(1).split()
    src = torch.tensor([[d_src.index(w) for w in src_line.split()] + [d_src.eos()]])
    tgt = [d_tgt.index(w) for w in hyp.split()] + [d_tgt.eos()]
    net_input = {"src_tokens": src, "src_lengths": torch.tensor([src.size(1)]),
                 "prev_output_tokens": torch.tensor([[d_tgt.eos()] + tgt[:-1]])}
    with torch.no_grad():
        expected = head_attention(model, net_input, 0)[0, 0]
    printed = torch.tensor([[float(p) for p in row.split(",")] for row in rows])
    assert printed.shape == expected.shape
    torch.testing.assert_close(printed, expected, atol=2e-6, rtol=0)
    # word level: fairseq-syntax-score-alignments collapses the pieces to words
    gen_file, links = tmp_path / "gen.txt", tmp_path / "links.txt"
    gen_file.write_text(gen, encoding="utf-8")
    gold = synthetic_raw / "test.align"
    assert score_main(["--generate", str(gen_file), "--gold", str(gold), "--json",
                       "--write-links", str(links)]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["sentences"] == 37 and 0.0 <= scores["aer"] <= 1.0
    words = [line.split() for line in (synthetic_raw / "test.en").read_text().splitlines()]
    for line, sentence in zip(links.read_text().splitlines(), words):
        for link in line.split():
            assert 0 <= int(link.split("-")[0]) < len(sentence)


def test_fairseq_alignment_criterion_trains_as_transformer_align(synthetic_databin, tmp_path):
    """The comparison run: fairseq's label_smoothed_cross_entropy_with_alignment on the
    same heads of syntax_transformer_tiny (--task syntax_translation, right-padded) and
    of fairseq's own transformer_align (--task translation, left-padded) trains the
    same parameters."""
    from fairseq import checkpoint_utils

    fairseq_criterion = ["--criterion", "label_smoothed_cross_entropy_with_alignment",
                         "--load-alignments", "--alignment-layer", "0", "--alignment-heads", "1"]
    ours = run_cli(transformer_train_args(synthetic_databin, tmp_path / "ours", updates=3,
                                          extra=fairseq_criterion))
    align_args = transformer_train_args(synthetic_databin, tmp_path / "align", updates=3,
                                        extra=fairseq_criterion)
    align_args[align_args.index("syntax_translation")] = "translation"
    align_args[align_args.index("syntax_transformer_tiny")] = "transformer_align"
    align_args += ["--encoder-layers", "2", "--decoder-layers", "2",
                   "--encoder-attention-heads", "2", "--decoder-attention-heads", "2"]
    theirs = run_cli(align_args)
    summary = r"\| train \| epoch 001 \| (loss [0-9.]+ \| nll_loss [0-9.]+ \| alignment_loss [0-9.]+)"
    mine = re.search(summary, ours.stdout + ours.stderr)
    fair = re.search(summary, theirs.stdout + theirs.stderr)
    assert mine and fair and mine.group(1) == fair.group(1)
    a = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "ours" / "checkpoint_last.pt"))
    b = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "align" / "checkpoint_last.pt"))
    assert a["model"].keys() == b["model"].keys()
    for key in b["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], atol=1e-5, rtol=1e-4)
