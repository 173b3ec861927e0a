"""Look-ahead attention (Zhou et al.): the decoder attends to its own past, in three patterns."""
import json
import re

import pytest
import torch
import torch.nn.functional as F

from conftest import generate_args, run_cli, train_args
from model_utils import build_model, incremental_log_probs, random_batch

from fairseq_syntax.modules.look_ahead_attention import LookAheadAttention
from fairseq_syntax.modules.rnn_decoder import STATE_KEY

ARCHS = {"concat": "lookahead_concat", "enc_dec": "lookahead_enc_dec", "dec_enc": "lookahead_dec_enc"}
PATTERNS = list(ARCHS)
SIZES = dict(encoder_embed_dim=8, encoder_hidden_size=8, decoder_embed_dim=8, decoder_hidden_size=16)


def tiny(arch, **overrides):
    """A small model in eval mode (the registered defaults are large)."""
    return build_model(arch, **{**SIZES, **overrides})


def log_probs(model, src, lengths, prev):
    return torch.log_softmax(model(src, lengths, prev)[0], dim=-1)


# -- the look-ahead attention module (eq. 10) ----------------------------------------------

@pytest.mark.parametrize("score", ["dot", "general"])
def test_look_ahead_attention_is_a_softmax_average_of_the_past(score):
    torch.manual_seed(0)
    attention = LookAheadAttention(6, 6, score)
    query, past = torch.randn(3, 6), torch.randn(3, 4, 6)
    context, weights = attention(query, past)
    keys = past if score == "dot" else attention.score.proj(past)  # q^T W s_i, keys projected
    expected = torch.softmax(torch.einsum("bh,bth->bt", query, keys), dim=-1)
    assert torch.allclose(weights, expected, atol=1e-6)
    assert torch.allclose(context, torch.einsum("bt,bth->bh", expected, past), atol=1e-6)


def test_look_ahead_context_is_zero_without_a_past():
    attention = LookAheadAttention(6, 5, "general")
    context, weights = attention(torch.randn(3, 6), torch.zeros(3, 0, 5))
    assert context.shape == (3, 5) and weights.shape == (3, 0)
    assert context.abs().max() == 0


@pytest.mark.parametrize("pattern", PATTERNS)
def test_first_step_look_ahead_context_is_zero_in_the_model(pattern):
    model = tiny(ARCHS[pattern])
    src, lengths, prev = random_batch(model)
    seen = []
    hook = model.decoder.attention.look_ahead.register_forward_hook(
        lambda mod, inputs, output: seen.append((inputs[1].shape[1], output[0].clone(), output[1]))
    )
    with torch.no_grad():
        model(src, lengths, prev)
    hook.remove()
    assert [n for n, _, _ in seen] == list(range(prev.size(1)))  # step j sees j-1 past states
    past_len, context, weights = seen[0]
    assert weights.shape == (3, 0) and context.abs().max() == 0
    assert all(c.abs().max() > 0 for _, c, _ in seen[1:])


# -- decoding: causal, incremental == full, beam reorder, linear memory -----------------------

@pytest.mark.parametrize("pattern", PATTERNS)
def test_changing_a_later_target_token_never_changes_an_earlier_step(pattern):
    model = tiny(ARCHS[pattern], decoder_layers=2)
    src, lengths, prev = random_batch(model, tgt_len=7)
    with torch.no_grad():
        before = log_probs(model, src, lengths, prev)
        for k in range(1, prev.size(1)):
            changed = prev.clone()
            changed[:, k] = (changed[:, k] + 1 - 4) % (len(model.decoder.dictionary) - 4) + 4
            after = log_probs(model, src, lengths, changed)
            assert torch.equal(before[:, :k], after[:, :k]), k
            assert not torch.equal(before[:, k:], after[:, k:]), k


@pytest.mark.parametrize("pattern", PATTERNS)
def test_incremental_decoding_equals_full_forward(pattern):
    model = tiny(ARCHS[pattern], decoder_layers=2, look_ahead_score="general")
    src, lengths, prev = random_batch(model)
    with torch.no_grad():
        full = log_probs(model, src, lengths, prev)
        step = incremental_log_probs(model, model.encoder(src, lengths), prev)
    assert torch.allclose(full, step, atol=1e-5)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_incremental_decoding_after_beam_reorder(pattern):
    model = tiny(ARCHS[pattern])
    src, lengths, prev = random_batch(model, bsz=4, tgt_len=7)
    order = torch.tensor([2, 2, 0, 3])
    with torch.no_grad():
        full = log_probs(model, src[order], lengths[order], prev[order])
        step = incremental_log_probs(model, model.encoder(src, lengths), prev, reorder=order, reorder_at=4)
        # the cached past after the reorder really is the permuted past (not only the output)
        state = {}
        encoder_out = model.encoder(src, lengths)
        for t in range(4):
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        past = model.decoder.get_incremental_state(state, STATE_KEY)["attention.past"]
        model.decoder.reorder_incremental_state_scripting(state, order)
        reordered = model.decoder.get_incremental_state(state, STATE_KEY)["attention.past"]
    assert torch.allclose(full, step, atol=1e-5)
    assert past.shape[1] == 4 and torch.equal(reordered, past[order])


@pytest.mark.parametrize("pattern", PATTERNS)
def test_incremental_cache_grows_linearly_with_target_length(pattern):
    model = tiny(ARCHS[pattern])
    src, lengths, prev = random_batch(model, tgt_len=9)
    encoder_out = model.encoder(src, lengths)
    state, sizes = {}, []
    with torch.no_grad():
        for t in range(prev.size(1)):
            model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
            cache = model.decoder.get_incremental_state(state, STATE_KEY)
            sizes.append(sum(v.numel() for v in cache.values()))
            assert cache["attention.past"].shape == (3, t + 1, model.decoder.hidden_size)
    growth = [b - a for a, b in zip(sizes, sizes[1:])]
    assert growth == [growth[0]] * len(growth)  # constant growth per step: linear memory
    assert growth[0] == 3 * (model.decoder.hidden_size + 1)  # one state and one weight per sentence


# -- the three patterns follow their equations ---------------------------------------------

def _record(model, src, lengths, prev):
    """Per step: the top hidden s_j, the source-attention query, the look-ahead query and
    past, and the attentional output, captured by hooks during a full forward pass."""
    layer = model.decoder.attention
    steps, inner = [], {}
    hooks = [
        layer.source_score.register_forward_hook(lambda m, i, o: inner.update(src_q=i[0])),
        layer.look_ahead.register_forward_hook(lambda m, i, o: inner.update(la_q=i[0], past=i[1])),
        # the layer's own hook fires when its step is done: one record per step
        layer.register_forward_hook(lambda m, i, o: steps.append(dict(inner, s=i[0], out=o[0]))),
    ]
    with torch.no_grad():
        encoder_out = model.encoder(src, lengths)
        model.decoder(prev, encoder_out=encoder_out)
    for h in hooks:
        h.remove()
    return steps, encoder_out


def _attend(query, keys, values, mask=None):
    """softmax(query . keys) . values, written out; zero context without keys."""
    if keys.size(1) == 0:
        return values.new_zeros(values.size(0), values.size(2))
    scores = torch.einsum("bh,bsh->bs", query, keys)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.einsum("bs,bsh->bh", torch.softmax(scores, dim=-1), values)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_follow_the_paper_equations(pattern):
    model = tiny(ARCHS[pattern], decoder_layers=2)
    layer = model.decoder.attention
    src, lengths, prev = random_batch(model)
    steps, encoder_out = _record(model, src, lengths, prev)
    h, mask = encoder_out["annotations"], encoder_out["padding_mask"]
    W_a = layer.source_score.proj.weight  # source score 'general': q^T W_a h_i
    assert len(steps) == prev.size(1)
    for j, step in enumerate(steps):
        s = step["s"]
        past = torch.stack([steps[i]["s"] for i in range(j)], dim=1) if j else s.new_zeros(3, 0, s.size(1))
        assert torch.equal(step["past"], past)  # eq. 10 runs over exactly s_1 .. s_{j-1}
        if pattern == "concat":  # eqs. 10-11
            c = _attend(s, h @ W_a.T, h, mask)
            c_d = _attend(s, past, past)
            expected = torch.tanh(F.linear(torch.cat([s, c, c_d], -1), layer.combine.weight, layer.combine.bias))
            assert torch.equal(step["src_q"], s) and torch.equal(step["la_q"], s)
        elif pattern == "enc_dec":  # eq. 4, then eqs. 12-13
            c = _attend(s, h @ W_a.T, h, mask)
            t_e = torch.tanh(F.linear(torch.cat([c, s], -1), layer.source.combine.weight))
            c_d = _attend(t_e, past, past)
            expected = torch.tanh(F.linear(torch.cat([t_e, c_d], -1), layer.combine.weight, layer.combine.bias))
            assert torch.equal(step["src_q"], s)
            assert torch.allclose(step["la_q"], t_e, atol=1e-6)
        else:  # eqs. 14-16: the source attention's query is the look-ahead state t^d
            c_d = _attend(s, past, past)
            lac = layer.look_ahead_combine
            t_d = torch.tanh(F.linear(torch.cat([s, c_d], -1), lac.weight, lac.bias))
            c_e = _attend(t_d, h @ W_a.T, h, mask)
            expected = torch.tanh(F.linear(torch.cat([t_d, c_e], -1), layer.combine.weight, layer.combine.bias))
            assert torch.equal(step["la_q"], s)
            assert torch.allclose(step["src_q"], t_d, atol=1e-6)
            assert not torch.allclose(step["src_q"], s, atol=1e-3)
        assert torch.allclose(step["out"], expected, atol=1e-5), (pattern, j)


def test_the_three_patterns_are_different_models():
    outputs = {}
    for pattern, arch in ARCHS.items():
        torch.manual_seed(0)
        model = tiny(arch)
        assert model.decoder.attention.pattern == pattern
        src, lengths, prev = random_batch(model)
        with torch.no_grad():
            outputs[pattern] = log_probs(model, src, lengths, prev)
    assert not torch.allclose(outputs["concat"], outputs["enc_dec"])
    assert not torch.allclose(outputs["enc_dec"], outputs["dec_enc"])


def test_look_ahead_rnn_takes_the_pattern_as_an_option():
    model = tiny("look_ahead_rnn", look_ahead_pattern="dec_enc")
    assert model.decoder.attention.pattern == "dec_enc"
    with pytest.raises(ValueError, match="dot"):
        build_model("lookahead_concat", look_ahead_score="general", attention_score="dot",
                    decoder_hidden_size=48, encoder_hidden_size=16)


def test_look_ahead_weights_of_a_forced_decoding():
    model = tiny("lookahead_enc_dec")
    src, lengths, prev = random_batch(model)
    weights = model.look_ahead_attention(src, lengths, prev)
    T = prev.size(1)
    assert weights.shape == (3, T, T)
    assert weights[:, 0].abs().max() == 0
    assert torch.allclose(weights[:, 1:].sum(-1), torch.ones(3, T - 1), atol=1e-5)
    assert torch.equal(weights, weights.tril(-1))  # only previous steps


# -- the real command lines ----------------------------------------------------------------

def _parallel(commands):
    """Run console commands side by side (each is mostly start-up time)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(commands)) as pool:
        return list(pool.map(run_cli, commands))


@pytest.fixture(scope="module")
def cli_runs(synthetic_databin, tmp_path_factory):
    """fairseq-train (3 updates) then fairseq-generate (beam 5) for each architecture."""
    archs = list(ARCHS.values())
    checkpoints = {arch: tmp_path_factory.mktemp(arch) / "checkpoint_last.pt" for arch in archs}
    trained = _parallel([train_args(synthetic_databin, checkpoints[a].parent, a, updates=3) for a in archs])
    generated = _parallel([
        generate_args(synthetic_databin, checkpoints[a], ["--max-len-b", "12", "--batch-size", "64"])
        for a in archs
    ])
    return {a: (checkpoints[a], t.stdout, g.stdout) for a, t, g in zip(archs, trained, generated)}


def _num_sentences(databin, split="test"):
    from fairseq.data import data_utils

    return len(data_utils.load_indexed_dataset(str(databin / f"{split}.en-vf.en"), None))


@pytest.mark.parametrize("pattern", PATTERNS)
def test_each_architecture_trains_and_decodes_through_the_command_lines(pattern, synthetic_databin, cli_runs):
    checkpoint, train_log, generate_log = cli_runs[ARCHS[pattern]]
    assert checkpoint.exists()
    assert re.search(rf"'look_ahead_pattern': '?{pattern}'?[,}}]", train_log)
    assert re.search(r"\| train \| .*num_updates 3\b", train_log)
    hyps = sorted(int(line.split("\t")[0][2:]) for line in generate_log.splitlines() if line.startswith("H-"))
    assert hyps == list(range(_num_sentences(synthetic_databin)))


def test_every_option_is_documented():
    """fairseq-train --help stops before model options are added, so check the parser they
    are generated into from the dataclass."""
    import argparse
    import dataclasses

    from fairseq.dataclass.utils import gen_parser_from_dataclass

    from fairseq_syntax.models.look_ahead_rnn import LookAheadRNNConfig

    fields = [f for f in dataclasses.fields(LookAheadRNNConfig) if not f.name.startswith("_")]
    assert fields and all(f.metadata.get("help") for f in fields)
    parser = argparse.ArgumentParser()
    gen_parser_from_dataclass(parser, LookAheadRNNConfig())
    text = " ".join(parser.format_help().split())
    assert "--look-ahead-pattern {concat,enc_dec,dec_enc}" in text
    assert "--look-ahead-score {general,dot}" in text
    args = parser.parse_args(["--look-ahead-pattern", "dec_enc"])
    assert args.look_ahead_pattern == "dec_enc"


PIXELS = re.compile(r"wrote (\S+): (\d+) x (\d+) pixels \(([\d.]+) x ([\d.]+) in at (\d+) dpi\)")


def test_heatmap_command_writes_a_png_of_the_computed_size(synthetic_databin, cli_runs, tmp_path):
    from PIL import Image

    png, weights_json = tmp_path / "fig.png", tmp_path / "weights.json"
    stdout = run_cli([
        "python", "-m", "fairseq_syntax.cli.lookahead_heatmap", str(synthetic_databin),
        "--path", str(cli_runs["lookahead_dec_enc"][0]), "--gen-subset", "test", "--index", "3",
        "--out", str(png), "--weights-out", str(weights_json), "--max-len-b", "12", "--dpi", "60",
    ]).stdout
    m = PIXELS.search(stdout)
    width, height = int(m.group(2)), int(m.group(3))
    assert (width, height) == (int(float(m.group(4)) * 60), int(float(m.group(5)) * 60))
    assert Image.open(png).size == (width, height)
    assert Image.open(png).format == "PNG"
    data = json.loads(weights_json.read_text())
    hyp = re.search(r"^H-3\t(.*)$", stdout, re.M).group(1).split()
    assert data["target"] == hyp + ["</s>"] and data["previous"] == hyp
    assert data["weights"][0] == []  # no past at the first step
    for j, row in enumerate(data["weights"]):
        assert len(row) == j
        if j:
            assert abs(sum(row) - 1) < 1e-4


def test_heatmap_command_honours_figsize_and_draws_the_reference(synthetic_databin, cli_runs, tmp_path, capsys):
    from PIL import Image

    from fairseq_syntax.cli.lookahead_heatmap import main

    png = tmp_path / "ref.png"
    main([str(synthetic_databin), "--path", str(cli_runs["lookahead_concat"][0]), "--index", "0",
          "--reference", "--out", str(png), "--figsize", "4", "3", "--dpi", "50"])
    stdout = capsys.readouterr().out
    assert Image.open(png).size == (200, 150)
    assert PIXELS.search(stdout).group(2, 3) == ("200", "150")
    assert re.search(r"^T-0\t", stdout, re.M)


def test_heatmap_command_refuses_a_sentence_out_of_range(synthetic_databin, cli_runs, tmp_path):
    from fairseq_syntax.cli.lookahead_heatmap import main

    with pytest.raises(SystemExit, match="out of range"):
        main([str(synthetic_databin), "--path", str(cli_runs["lookahead_enc_dec"][0]),
              "--index", "100000", "--out", str(tmp_path / "x.png")])
    assert not (tmp_path / "x.png").exists()


def test_a_command_refuses_a_checkpoint_of_another_kind_of_model(synthetic_databin, cli_runs, tmp_path):
    from fairseq_syntax.cli.induced_trees import main

    with pytest.raises(SystemExit, match="holds a LookAheadRNNModel, not a "
                                         "structured_attention_rnn or sa_transformer model"):
        main([str(synthetic_databin), "--path", str(cli_runs["lookahead_concat"][0]),
              "--gen-subset", "test", "--output", str(tmp_path / "trees.conllu"), "--cpu"])
    assert not (tmp_path / "trees.conllu").exists()
