"""The backbone learns at least as fast as fairseq's own ``lstm``: its initialisation
(fairseq lstm's U(-0.1, 0.1), for every architecture's parameters) and a short
side-by-side training run through ``fairseq-syntax-parity``'s function."""
import argparse

import pytest
import torch

from fairseq_syntax.cli.benchmark import plugin_architectures
from fairseq_syntax.cli.parity import BACKBONE, LSTM, get_parser, parity
from fairseq_syntax.modules.tree_lstm import TreeLSTMCell
from model_utils import build_model


@pytest.mark.parametrize("arch", plugin_architectures())
def test_every_parameter_is_drawn_from_uniform_0_1(arch):
    torch.manual_seed(0)
    model = build_model(arch, encoder_hidden_size=64, decoder_hidden_size=128)
    forget_biases = set()
    for module in model.modules():
        if isinstance(module, TreeLSTMCell):  # the paper's forget-gate bias 1.0 is kept
            d = module.dim
            assert torch.equal(module.gates.bias[d:3 * d], torch.ones(2 * d))
            assert torch.equal(module.gates.bias[:d], torch.zeros(d))
            forget_biases.add(id(module.gates.bias))
        if isinstance(module, torch.nn.Embedding):
            assert module.weight[module.padding_idx].abs().max() == 0
    values = torch.cat([p.detach().flatten() for p in model.parameters()
                        if id(p) not in forget_biases])
    assert values.abs().max() <= 0.1
    # U(-0.1, 0.1): mean 0, standard deviation 0.1 / sqrt(3)
    assert abs(values.mean().item()) < 3e-3
    assert abs(values.std().item() - 0.1 / 3 ** 0.5) < 2e-3


def test_init_uniform_0_keeps_pytorchs_initialisation():
    torch.manual_seed(0)
    model = build_model(BACKBONE, decoder_hidden_size=512, init_uniform=0)
    bound = 512 ** -0.5  # nn.LSTMCell: U(-1/sqrt(H), 1/sqrt(H))
    assert model.decoder.layers[0].weight_hh.abs().max() <= bound


def _parity(databin, raw, workdir, backbone_args=""):
    args = get_parser().parse_args([
        "--corpus", "synthetic", "--data-bin", str(databin), "--raw", str(raw),
        "--workdir", str(workdir), "--updates", "150", "--epochs", "1", "--no-decode",
        "--embed-dim", "96", "--encoder-hidden", "128", "--decoder-hidden", "256",
        "--dropout", "0.1", "--lr", "0.003", "--clip-norm", "1", "--max-tokens", "3000",
        "--backbone-args", backbone_args])
    models = parity(args)["models"]
    return {name: models[name]["epochs"][1]["valid_loss"] for name in (LSTM, BACKBONE)}


@pytest.fixture(scope="module")
def parity_corpus(tmp_path_factory):
    """A synthetic corpus large enough for 150 updates of 3000 tokens within one epoch."""
    from conftest import run_cli
    from fairseq_syntax.data.synthetic_corpus import generate_corpus

    raw = tmp_path_factory.mktemp("parity_raw")
    generate_corpus(str(raw), seed=2, train=20000, valid=200, test=20, gen=0)
    databin = tmp_path_factory.mktemp("parity_bin") / "data-bin"
    run_cli(["fairseq-syntax-preprocess", "--source-lang", "en", "--target-lang", "vf",
             "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
             "--testpref", f"{raw}/test", "--vocab-size", "1000", "--destdir", str(databin)])
    return databin, raw


def test_backbone_valid_loss_is_at_most_fairseq_lstms(parity_corpus, tmp_path):
    """Same data, sizes, batches, seed and 150 updates: the backbone's valid loss is at most
    fairseq lstm's; with PyTorch's default initialisation (the backbone before issue 14)
    it is not."""
    databin, raw = parity_corpus
    loss = _parity(databin, raw, tmp_path / "fixed")
    assert loss[BACKBONE] <= loss[LSTM]
    old = _parity(databin, raw, tmp_path / "old", "--init-uniform 0")
    assert old[LSTM] == loss[LSTM]  # the same fairseq run: deterministic
    assert old[BACKBONE] > loss[LSTM]
