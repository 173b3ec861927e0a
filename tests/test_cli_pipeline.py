"""The real command lines: preprocess -> fairseq-train -> fairseq-generate / -interactive."""
import re

import pytest

from conftest import USER_DIR, generate_args, run_cli, train_args


@pytest.fixture(scope="module")
def backbone_checkpoint(synthetic_databin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("backbone")
    run_cli(train_args(synthetic_databin, save_dir, "attentional_rnn", updates=6,
                       extra=["--load-distances", "--load-tree", "--load-alignments"]))
    return save_dir / "checkpoint_last.pt"


def test_train_help_lists_syntax_options():
    out = run_cli(["fairseq-train", "--user-dir", USER_DIR, "--task", "syntax_translation",
                   "--arch", "attentional_rnn", "--help"]).stdout
    for option in ("--load-heads", "--load-distances", "--load-tree", "--load-alignments",
                   "--encoder-hidden-size", "--attention-score"):
        assert option in out, option
    help_of = re.search(r"--load-distances\s+(.*?)--load-tree", out, re.S).group(1)
    assert "distance" in help_of


def test_generate_decodes_every_test_sentence_with_alignments(synthetic_databin, backbone_checkpoint):
    out = run_cli(generate_args(synthetic_databin, backbone_checkpoint, ["--print-alignment"])).stdout
    hyps = [line for line in out.splitlines() if line.startswith("H-")]
    aligns = [line for line in out.splitlines() if line.startswith("A-")]
    assert len(hyps) == 37 and len(aligns) == 37  # none dropped (fairseq #5036)
    for line in aligns:
        for link in line.split("\t")[1].split():
            src, tgt = map(int, link.split("-"))
            assert src >= 0 and tgt >= 0


def test_interactive_translates_raw_subword_input(synthetic_databin, backbone_checkpoint):
    proc = run_cli(
        ["fairseq-interactive", str(synthetic_databin), "--user-dir", USER_DIR,
         "--task", "syntax_translation", "--path", str(backbone_checkpoint), "--cpu",
         "--beam", "2", "--source-lang", "en", "--target-lang", "vf"],
        input="▁the ▁dog ▁saw ▁a ▁cat ▁.\n",
    )
    assert re.search(r"^H-0\t", proc.stdout, re.M)


def test_plain_fairseq_reads_the_data_bin(synthetic_databin, tmp_path):
    """Without the plugin, fairseq's own translation task and LSTM train on the data-bin."""
    run_cli([
        "fairseq-train", str(synthetic_databin), "--task", "translation", "--arch", "lstm",
        "--encoder-embed-dim", "16", "--encoder-hidden-size", "16", "--decoder-embed-dim", "16",
        "--decoder-hidden-size", "16", "--decoder-out-embed-dim", "16",
        "--optimizer", "adam", "--lr", "0.001", "--max-tokens", "800", "--max-update", "2",
        "--cpu", "--save-dir", str(tmp_path), "--no-save", "--load-alignments",
    ])
