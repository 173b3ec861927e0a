"""fairseq-syntax-experiment: the results table holds what the scorers measure on the
outputs it wrote, one JSON record per finished run, a second invocation skips what is
done, and the table's mean ± sd and markers are numpy's over the records."""
import fcntl
import hashlib
import json
import logging
import os
import re

import numpy as np
import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from sacrebleu.metrics import BLEU, CHRF

from conftest import TINY_MODEL, USER_DIR, drop_words, run_cli
from fairseq_syntax.cli import experiment
from fairseq_syntax.cli.parity import get_parser as parity_parser
from fairseq_syntax.evaluation.architectures import task_arch_args
from fairseq_syntax.experiment import (
    commands, comparisons, corpora, methods, parity, records, runs, scoring, tables,
)
from fairseq_syntax.experiment.parity import LSTM
from fairseq_syntax.evaluation.corpus import Corpus, TestSet
from fairseq_syntax.experiment.tables import update_results
from fairseq_syntax.evaluation.fairseq_log import read_train_log
from fairseq_syntax.experiment.tools import (
    average_checkpoints, exclusive_lock, smoothed_loss_floor, whole_split_loss,
)
from fairseq_syntax.data.synthetic_corpus import detokenize
from fairseq_syntax.evaluation.agreement import agreement_report
from fairseq_syntax.evaluation.alignments import score_alignment_files
from fairseq_syntax.syntax.conllu_io import read_conllu_trees
from fairseq_syntax.syntax.tree_scores import read_gold_trees, score_corpus

# a tiny corpus the experiment generates itself (with the gen split) and a tiny model
EXPERIMENT = [
    "fairseq-syntax-experiment", "--corpus", "synthetic", "--train-size", "400",
    "--valid-size", "40", "--test-size", "37", "--gen-size", "20", "--vocab-size", "120",
    "--methods", "attentional_rnn,sa_nmt_shared", "--updates", "4", "--embed-dim", "16",
    "--encoder-hidden", "16", "--decoder-hidden", "32", "--max-tokens", "800", "--jobs", "2",
    "--step-time-batches", "2", "--progress-seconds", "0.2",
]
RECORD_KEYS = {"format", "method", "seed", "settings", "scores", "commands", "wall_seconds",
               "date", "host", "run_dir", "data_bin", "data_bin_digest", "experiment_command"}


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _table(text):
    """Rows of the Markdown tables in ``text`` as {method: cells}, each method's first row
    (the results tables come before the per-epoch table)."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([^`]+)` \| (.*) \|$", line)
        if m:
            rows.setdefault(m.group(1), [c.strip() for c in m.group(2).split("|")])
    return rows


def _section(path, corpus="synthetic"):
    return tables.read_sections(path.read_text())[corpus]


def _percent(value):
    return "–" if value is None else f"{value:.2f}"


def test_update_results_keeps_other_sections(tmp_path):
    path = tmp_path / "RESULTS.md"
    update_results(str(path), "multi30k", "multi30k numbers\n")
    update_results(str(path), "synthetic", "first\n")
    update_results(str(path), "synthetic", "second\n")
    text = path.read_text()
    assert text.count("<!-- synthetic:begin -->") == 1 and "first" not in text
    assert "<!-- synthetic:begin -->\nsecond\n<!-- synthetic:end -->" in text
    assert "<!-- multi30k:begin -->\nmulti30k numbers\n<!-- multi30k:end -->" in text
    assert text.startswith("# Results")


def test_update_results_waits_for_another_experiment_rewriting_the_file(tmp_path):
    import threading

    path = tmp_path / "RESULTS.md"
    update_results(str(path), "multi30k", "multi30k numbers\n")
    before = path.read_text()
    fd = os.open(tmp_path, os.O_RDONLY)  # another experiment holds the folder's lock
    fcntl.flock(fd, fcntl.LOCK_EX)
    writer = threading.Thread(target=update_results, args=(str(path), "synthetic", "mine\n"))
    writer.start()
    writer.join(timeout=1.0)
    assert writer.is_alive() and path.read_text() == before  # it waits: nothing read yet
    os.close(fd)
    writer.join()
    assert path.read_text() == before.rstrip("\n") + \
        "\n\n<!-- synthetic:begin -->\nmine\n<!-- synthetic:end -->\n"


def test_smoothed_loss_floor_is_the_minimum_of_fairseqs_criterion():
    """The floor is fairseq's label-smoothed loss at the smoothed target itself, every
    other distribution scores higher, and gradient descent from random logits stops at it."""
    epsilon, vocab = 0.1, 88
    target = torch.tensor([[5]])
    smoothed = torch.full((1, vocab), epsilon / (vocab - 1))
    smoothed[0, 5] = 1 - epsilon

    def bits(lprobs):
        loss, _ = label_smoothed_nll_loss(lprobs, target, epsilon, reduce=True)
        return loss.item() / np.log(2)

    floor = smoothed_loss_floor(epsilon, vocab)
    assert bits(smoothed.log()) == pytest.approx(floor, rel=1e-6)
    assert floor == pytest.approx(1.1133, abs=1e-4)  # the synthetic corpus: 84 words + 4
    torch.manual_seed(0)
    for _ in range(20):
        assert bits(torch.randn(1, vocab).log_softmax(-1)) > floor
    logits = torch.randn(1, vocab, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=0.1)
    for _ in range(2000):
        optimizer.zero_grad()
        loss, _ = label_smoothed_nll_loss(logits.log_softmax(-1), target, epsilon)
        loss.backward()
        optimizer.step()
    assert bits(logits.log_softmax(-1)) == pytest.approx(floor, rel=1e-4)


def test_read_train_log_takes_the_lowest_validation(tmp_path):
    log = tmp_path / "train.log.jsonl"

    def write(validations):
        log.write_text("{'config': 'python repr, skipped'}\n" + "".join(
            json.dumps({"epoch": e, "valid_loss": loss, "valid_ppl": ppl,
                        "valid_num_updates": str(100 * e)}) + "\n" for e, loss, ppl in validations))
        return read_train_log(str(log))

    # epoch 2 twice: a run interrupted after it and resumed appends to the same log
    assert write(((1, "2.5", "4.1"), (2, "1.2", "1.3"), (2, "1.25", "1.35"),
                  (3, "1.4", "1.5"))) == {"valid_loss": 1.25, "valid_ppl": 1.35,
                                          "train_epochs": 3, "train_updates": 300,
                                          "valid_ppl_by_epoch": [4.1, 1.35, 1.5]}
    # equal logged losses: checkpoint_best.pt holds the later (KFTT sa_nmt_shared seed 1:
    # 6.051 at epochs 15 and 16, ppl 29.43 and 29.38; epoch 16 decoded)
    assert write(((1, "2.5", "4.1"), (2, "1.2", "1.31"), (3, "1.2", "1.3"), (4, "1.3", "1.4"))
                 )["valid_ppl"] == 1.3


def test_a_run_lock_is_held_until_its_holder_ends_even_killed(tmp_path):
    import signal
    import subprocess
    import sys

    path = tmp_path / "runs" / "m" / "seed1.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\n"
         "from fairseq_syntax.experiment.tools import exclusive_lock\n"
         f"with exclusive_lock({str(path)!r}) as other:\n"
         "    print(other, flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "None\n"  # it holds the lock
        with exclusive_lock(str(path)) as other:
            assert other == str(holder.pid)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with exclusive_lock(str(path)) as other:
        assert other is None and path.read_text() == f"{os.getpid()}\n"


def test_epoch_table_has_a_line_per_run_with_a_curve():
    def record(seed, curve):
        return {"seed": seed, "scores": {"valid_ppl_by_epoch": curve}}

    lines = tables.epoch_table(
        ["attentional_rnn", "tree2seq", "lookahead_concat"],
        {"attentional_rnn": [record(1, [27.11, 11.39, 7.95])], "tree2seq": [record(1, [30.0, 12.5])],
         "lookahead_concat": [record(1, [])]})
    assert lines[3:] == ["| method | seed | 1 | 2 | 3 |", "| --- | ---: | ---: | ---: | ---: |",
                         "| `attentional_rnn` | 1 | 27.11 | 11.39 | 7.95 |",
                         "| `tree2seq` | 1 | 30.00 | 12.50 |  |"]
    assert tables.epoch_table(["lookahead_concat"], {"lookahead_concat": [record(1, [])]}) == []


def test_data_bin_lines_tell_runs_of_different_data_bins_apart(tmp_path):
    """A record's ``data_bin_digest`` comes from the manifest's checksums and fairseq's own
    files; the section says which runs share a data-bin and whether they read the same
    tokens: by the model files, by the token files, or not known."""
    sides = {"train.en-de.en.heads.bin": "ab" * 32, "train.en-de.en.heads.idx": "cd" * 32}
    (tmp_path / "syntax_manifest.json").write_text(json.dumps(
        {"spm_sha256": "12" * 32, "side_file_sha256": sides, "source_lang": "en",
         "target_lang": "de"}))
    token_files = {"dict.de.txt": b"a 3\n", "dict.en.txt": b"b 2\n",
                   "train.en-de.de.bin": b"\x01", "train.en-de.en.idx": b"\x02"}
    for name, data in {**token_files, "train.en-de.en.heads.bin": b"\x03",
                       "train.align.en-de.bin": b"\x04", "spm.model": b"\x05"}.items():
        (tmp_path / name).write_bytes(data)
    digest = records.data_bin_digest(str(tmp_path))
    assert digest == {"spm": "12" * 32, "side_files": hashlib.sha256(json.dumps(
        dict(sorted(sides.items()))).encode()).hexdigest(), "tokens": hashlib.sha256(json.dumps(
            {n: hashlib.sha256(token_files[n]).hexdigest() for n in sorted(token_files)}
        ).encode()).hexdigest()}
    assert records.data_bin_digest(str(tmp_path / "none")) is None

    def run(method, seed, spm, side, tokens=None):
        digest = {"spm": spm * 32, "side_files": side * 32}
        return {"method": method, "seed": seed,
                "data_bin_digest": {**digest, **({"tokens": tokens * 32} if tokens else {})}}
    old = {"method": "lstm", "seed": 1}
    one = tables.data_bin_lines(
        [run("a", 1, "12", "ab", "ef"), run("b", 2, "12", "ab", "ef"), old])
    assert one == ["* Data-bin (sha256 of its sentencepiece model / over its side-files / over "
                   "its token files, record key `data_bin_digest`; `?` where a run recorded "
                   "none): `121212121212…` / `abababababab…` / `efefefefefef…` for the runs that "
                   "recorded it; 1 run recorded before data-bin digests (2026-11-30) does not say."]
    two_old = tables.data_bin_lines([run("a", 1, "12", "ab"), old, {"method": "b", "seed": 1}])
    assert two_old[0].endswith("; 2 runs recorded before data-bin digests (2026-11-30) do not say.")
    rebuilt = tables.data_bin_lines([run("a", 1, "12", "ab"), run("a", 2, "12", "cd")])
    assert "`a` 1; `121212121212…` / `cdcdcdcdcdcd…` / `?…`: `a` 2." in rebuilt[0]
    assert "Same tokens; the side-files differ" in rebuilt[0]
    moved = tables.data_bin_lines([run("a", 1, "12", "ab", "ef"), run("b", 1, "34", "ab", "ef")])
    assert "Same tokens (the sentencepiece model files differ only" in moved[0]
    assert "side-files differ" not in moved[0]
    same = tables.data_bin_lines([run("a", 1, "12", "ab"), run("b", 1, "12", "ab", "ef")])
    assert same[0].endswith(" Same tokens.")
    other = tables.data_bin_lines([run("a", 1, "12", "ab", "ef"), run("b", 1, "34", "ab", "99")])
    assert "**The token files differ" in other[0]
    unknown = tables.data_bin_lines([run("a", 1, "12", "ab"), run("b", 1, "34", "ab", "ef")])
    assert "whether those runs read the same tokens is not known" in unknown[0]
    assert tables.data_bin_lines([old]) == []


def test_test_sets_line_names_every_scored_test_set_and_the_runs_that_lack_one():
    """The section names each test set the records score; where a record of version 1
    scored only the first, it says how many runs score each."""
    def run(*tests):
        return {"scores": {"tests": {t: {"bleu": 1.0} for t in tests}}}
    every = [run("test_2016_flickr", "test_2017_flickr")] * 2
    assert tables.test_sets_line(every) == [
        "* Test sets scored: `test_2016_flickr`, `test_2017_flickr`."]
    assert tables.test_sets_line([*every, run("test_2016_flickr")]) == [
        "* Test sets scored: `test_2016_flickr`, `test_2017_flickr` (2 of the 3 runs)."]
    assert tables.test_sets_line([{"scores": {}}]) == []


def test_epoch_table_marks_runs_that_fairseq_validated_on_a_subset():
    """fairseq's own datasets drop a last valid batch whose size is not a multiple of 8
    (fairseq #5036): the rows of ``--task translation`` methods say so."""
    subset = methods.subset_validated(methods.all_methods())
    assert {"lstm", "fairseq_transformer", "transformer_align"} <= subset
    assert "syntax_transformer" not in subset and "attentional_rnn" not in subset
    curve = {"seed": 1, "scores": {"valid_ppl_by_epoch": [37.5]}}
    lines = tables.epoch_table(["syntax_transformer", "fairseq_transformer"],
                               {"syntax_transformer": [curve], "fairseq_transformer": [curve]},
                               subset)
    assert lines[5:7] == ["| `syntax_transformer` | 1 | 37.50 |",
                          "| `fairseq_transformer` (subset) | 1 | 37.50 |"]
    assert lines[-1] == tables.SUBSET_NOTE
    assert tables.epoch_table(["syntax_transformer"], {"syntax_transformer": [curve]},
                              subset)[-1] == "| `syntax_transformer` | 1 | 37.50 |"


def test_positions_table_has_a_line_per_run_that_recorded_positions():
    shares = {"position_at_eos": 0.0, "position_at_first": 99.394, "position_mean_relative": 0.00183,
              "position_sd_relative": 0.0272, "position_target_correlation": -0.0288}
    lines = tables.positions_table(
        ["attentional_rnn", "sdatt_double_syntax"],
        {"attentional_rnn": [{"seed": 1, "scores": {"positions": {}}}],
         "sdatt_double_syntax": [{"seed": 2, "scores": {"positions": shares}}]})
    assert lines[-1] == ("| `sdatt_double_syntax` | 2 | 0.0 | 99.4 | – | 0.00 | 0.03 | -0.03 | – | "
                         "99.4 % of steps at the first word |")
    assert len(lines) == 6
    shares["position_at_last"] = 0.6
    shares["position_alignment_correlation"] = 0.0201
    lines = tables.positions_table(["sdatt_double_syntax"], {"sdatt_double_syntax": [
        {"seed": 2, "scores": {"positions": shares}}]})
    assert lines[-1] == ("| `sdatt_double_syntax` | 2 | 0.0 | 99.4 | 0.6 | 0.00 | 0.03 | -0.03 | "
                         "0.02 | 99.4 % of steps at the first word |")
    assert tables.positions_table(["attentional_rnn"], {"attentional_rnn": [
        {"seed": 1, "scores": {}}]}) == []


def test_the_difference_table_marks_a_method_whose_predictor_degenerated():
    from fairseq_syntax.evaluation.significance import Delta

    still = {"position_at_eos": 0.0, "position_mean_relative": 0.49, "position_sd_relative": 0.02}
    moving = {**still, "position_sd_relative": 0.22}
    by_key = {"sdatt_double_syntax": [{"seed": 1, "scores": {"positions": still}},
                                      {"seed": 2, "scores": {"positions": moving}}],
              "tree2seq": [{"seed": 1, "scores": {}}]}
    degenerate = tables.degenerated_seeds(["sdatt_double_syntax", "tree2seq"], by_key)
    assert degenerate == {"sdatt_double_syntax": [1]}
    comparisons = {("sdatt_double_syntax", "test", "bleu"): {1: Delta(-0.08, -0.48, 0.29, 0.245)},
                   ("tree2seq", "test", "bleu"): {1: Delta(0.5, 0.1, 0.9, 0.01)}}
    lines = tables.significance_table(["sdatt_double_syntax", "tree2seq"], comparisons, ["test"],
                                      ["bleu"], degenerate)
    assert lines[2] == "| `sdatt_double_syntax` ‡ | -0.08 [-0.48, +0.29] p=0.245 | – |"
    assert lines[3] == "| `tree2seq` | **+0.50 [+0.10, +0.90] p=0.010** † | – |"
    assert lines[5] == ("‡ `sdatt_double_syntax`: its position predictor degenerated in seed(s) 1 "
                        "(positions table below), so these differences do not test the paper's "
                        "method.")
    assert len(lines) == 6


def test_the_difference_tables_say_which_pairs_ran_on_one_cpu():
    """A paired test of a method's run against its backbone's on another CPU also tests the
    CPUs (docs/same-cpu): each table says, per row and per test, whether the pair ran on
    one kind of machine (:func:`fairseq_syntax.evaluation.host.same_cpu`)."""
    from fairseq_syntax.evaluation.significance import Delta

    amd = {"cpu": "AMD EPYC", "cpu_family_model": "25/17", "torch_cpu_capability": "AVX512",
           "device": "cpu"}
    intel = {"cpu": "Intel(R) Xeon(R) Processor", "device": "cpu"}
    by_key = {"syntax_transformer": [{"seed": 1, "host": intel}, {"seed": 2, "host": amd},
                                     {"seed": 3, "host": amd}],
              "transformer_align": [{"seed": 1, "host": {"cpu": "Intel(R) Xeon(R) Processor"}},
                                    {"seed": 2, "host": amd},
                                    {"seed": 3, "host": dict(amd, cpu_family_model="26/2")}],
              "sa_transformer": [{"seed": 2, "host": amd}]}
    pairs = comparisons.cpu_pairings(by_key)
    assert pairs == {"transformer_align": {1: None, 2: True, 3: False}, "sa_transformer": {2: True}}
    deltas = {("transformer_align", "test", "bleu"): {s: Delta(0.1, -0.2, 0.4, 0.3)
                                                      for s in (1, 2, 3)},
              ("sa_transformer", "test", "bleu"): {2: Delta(0.1, -0.2, 0.4, 0.3)}}
    lines = tables.significance_table(["transformer_align", "sa_transformer"], deltas, ["test"],
                                      ["bleu"], cpu_pairs=pairs)
    assert lines[0] == "| method | Δ BLEU test | one CPU |"
    assert lines[2].endswith(" | 1 of 3, **1 across CPUs**, 1 not known |")
    assert lines[3].endswith(" | 1 of 1 |")
    assert lines[5] == tables.CROSS_CPU_NOTE and len(lines) == 6
    assert len(tables.significance_table(["sa_transformer"], deltas, ["test"], ["bleu"],
                                         cpu_pairs=pairs)) == 3  # one CPU: no note
    untested = {k: v for k, v in deltas.items() if k[0] == "sa_transformer"}
    untested["transformer_align", "test", "bleu"] = {2: Delta(0.1, -0.2, 0.4, 0.3)}
    lines = tables.significance_table(["transformer_align"], untested, ["test"], ["bleu"],
                                      cpu_pairs=pairs)  # seeds 1 and 3 kept no translations
    assert lines[2].endswith(" | 1 of 1 |") and len(lines) == 3
    rows = tables.seed_table(deltas, ["test"], ["bleu"], pairs)
    assert rows[4].startswith("| `sa_transformer` | 2 |") and rows[4].endswith(" | yes |")
    assert [r.rsplit("|", 2)[-2].strip() for r in rows[5:8]] == ["?", "yes", "**no**"]
    seed_pairs = {("syntax_transformer", "test", "bleu"): {
        (1, 2): Delta(0.5, 0.1, 0.9, 0.01), (2, 3): Delta(0.0, -0.3, 0.3, 0.5)}}
    rows = tables.seed_pairs_table("syntax_transformer", seed_pairs, ["test"], ["bleu"],
                                   {r["seed"]: r["host"] for r in by_key["syntax_transformer"]})
    assert rows[5].startswith("| 2 − 1 |") and rows[5].endswith(" | **no** |")
    assert rows[6].startswith("| 3 − 2 |") and rows[6].endswith(" | yes |")


def test_a_decode_only_variant_has_a_bar_in_the_delta_chart_but_no_curve(tmp_path, monkeypatch):
    """``tree2seq+length_prior`` is decoded from ``tree2seq``'s checkpoint: its Δ gets a bar
    beside the others (value and interval of its one seed), its learning curve is
    ``tree2seq``'s and is not drawn twice."""
    from fairseq_syntax.evaluation import figures
    from fairseq_syntax.evaluation.significance import Delta

    drawn = {}
    monkeypatch.setattr(figures, "delta_chart", lambda path, title, bars, label:
                        drawn.setdefault("bars", bars))
    monkeypatch.setattr(figures, "learning_curves", lambda path, title, curves:
                        drawn.setdefault("curves", curves))
    run = {"seed": 1, "scores": {"valid_ppl_by_epoch": [30.0, 20.0]}}
    rows = ["attentional_rnn", "tree2seq", "tree2seq+length_prior"]
    deltas = {("tree2seq", "test", "bleu"): {1: Delta(0.5, 0.1, 0.9, 0.01)},
              ("tree2seq+length_prior", "test", "bleu"): {1: Delta(-0.3, -0.7, 0.1, 0.2)}}
    tables.section_figures(str(tmp_path), "kftt-en-ja", "RNN family", "attentional_rnn", rows,
                           {k: [run] for k in rows}, deltas, ["test"], "kftt-en-ja",
                           decode_only={"tree2seq+length_prior"})
    assert drawn["bars"] == [("tree2seq (1)", 0.5, 0.1, 0.9, True),
                             ("tree2seq+length_prior (1)", -0.3, -0.7, 0.1, False)]
    assert list(drawn["curves"]) == ["attentional_rnn", "tree2seq"]


def test_a_predictor_is_degenerated_at_one_end_at_eos_or_standing_still():
    from fairseq_syntax.evaluation.positions import degenerated

    moving = {"position_at_eos": 0.0, "position_at_first": 0.0, "position_at_last": 0.0,
              "position_mean_relative": 0.39, "position_sd_relative": 0.22}  # Multi30k seed 1
    assert degenerated(moving) is None
    assert degenerated({**moving, "position_at_eos": 91.0}) == "91.0 % of steps at eos"
    assert degenerated({**moving, "position_at_last": 50.5}) == "50.5 % of steps at the last word"
    assert degenerated({**moving, "position_at_first": 50.0}) is None  # over half, not half
    # KFTT en-ja seed 1: the logit stayed near 0, p_i at the source's middle
    assert degenerated({**moving, "position_mean_relative": 0.49, "position_sd_relative": 0.02}) \
        == "p/J stays at 0.49 (sd 0.02)"
    assert degenerated({**moving, "position_sd_relative": 0.05}) is None


@pytest.fixture(scope="module")
def experiment_run(tmp_path_factory):
    """One invocation: the corpus, two methods with seed 1, records and the table."""
    tmp = tmp_path_factory.mktemp("experiment")
    results = tmp / "RESULTS.md"
    results.write_text("# Results\n\nintro kept\n\n<!-- multi30k:begin -->\nold m30k\n"
                       "<!-- multi30k:end -->\n\n<!-- synthetic:begin -->\nstale\n"
                       "<!-- synthetic:end -->\n")
    argv = [*EXPERIMENT, "--workdir", str(tmp / "work"), "--results", str(results),
            "--results-dir", str(tmp / "records")]
    proc = run_cli(argv)
    return dict(tmp=tmp, work=tmp / "work", results=results, records=tmp / "records",
                argv=argv, stderr=proc.stderr)


def test_experiment_table_equals_scorers(experiment_run):
    work, results = experiment_run["work"], experiment_run["results"]
    assert "[2/2]" in experiment_run["stderr"]
    # each run's progress, read from its fairseq log while it was under way: its last line
    # comes once all 4 updates are trained, while the run decodes
    for key in ("attentional_rnn", "sa_nmt_shared"):
        lines = [line for line in experiment_run["stderr"].splitlines()
                 if line.startswith(f"[progress] {key} seed 1 |")]
        assert lines[-1].startswith(f"[progress] {key} seed 1 |{'█' * 20}| 100 % epoch ")
        assert ", update 4 of 4, " in lines[-1]
        assert lines[-1].endswith("; trained, now decoding and scoring")
    text = results.read_text()
    assert "intro kept" in text and "old m30k" in text and "stale" not in text
    section = _section(results)
    assert "--methods attentional_rnn,sa_nmt_shared" in section  # the exact command
    rows = _table(section)
    # the corpus's other methods keep their rows, open
    expected = methods.method_keys(methods.select_methods(
        methods.DEFAULT_METHODS["synthetic"] + ",transformer"))
    assert list(rows) == expected
    assert {k for k, cells in rows.items() if cells[1] != "not run yet"} == {
        "attentional_rnn", "sa_nmt_shared"}
    rows = {k: rows[k] for k in ("attentional_rnn", "sa_nmt_shared")}

    raw = work / "raw"
    gold = read_gold_trees(str(raw / "test.en.conllu"))
    assert [line.split()[1] for line in _lines(work / "prepare.log")
            if line.startswith("$ ")] == ["fairseq-syntax-preprocess"]
    for key, cells in rows.items():
        (seeds, bleu_cell, chrf_cell, agree_cell, long_cell, gen_bleu_cell, gen_chrf_cell,
         gen_agree_cell, gen_long_cell, aer_cell, tree_cell, ppl_cell, loss_cell, _) = cells
        assert seeds == "1"
        run = work / "runs" / key / "seed1"
        record = json.loads((experiment_run["records"] / f"{key}.seed1.json").read_text())
        assert set(record) == RECORD_KEYS
        assert (record["method"], record["seed"]) == (key, 1)
        # the data-bin it trained on: its sentencepiece model's sha256, computed here
        assert record["data_bin_digest"]["spm"] == hashlib.sha256(
            (work / "data-bin" / "spm.model").read_bytes()).hexdigest()
        assert record["settings"]["arch"] == key and record["settings"]["lr"] == 0.003
        assert "--seed 1 " in record["commands"]["train"]
        assert '--user-dir "$(fairseq-syntax-user-dir)"' in record["commands"]["train"]
        scores = record["scores"]
        # the project's own tools ran as Python functions, only fairseq's as commands
        commands = {line.split()[1] for line in _lines(run / "log.txt") if line.startswith("$ ")}
        assert commands == {"fairseq-train", "fairseq-generate"}
        kept = records.read_hypotheses(str(experiment_run["records"] / f"{key}.seed1.json"))
        for split, subset, cell_bleu, cell_chrf, cell_agree, cell_long in (
                ("test", "test", bleu_cell, chrf_cell, agree_cell, long_cell),
                ("gen", "test1", gen_bleu_cell, gen_chrf_cell, gen_agree_cell, gen_long_cell)):
            refs = _lines(raw / f"{split}.vf")
            hyps = _lines(run / f"{split}.hyp.tok")
            assert len(hyps) == len(refs)
            # the hypotheses are fairseq-generate's H- lines, in sentence order
            generated = {}
            for line in _lines(run / f"generate.{split}.out"):
                if line.startswith("H-"):
                    sid, _, hyp = line.split("\t")
                    generated[int(sid[2:])] = hyp
            assert hyps == [generated[i] for i in range(len(refs))]
            assert f"--gen-subset {subset} " in record["commands"][f"generate_{split}"]
            bleu, text, text_refs = BLEU(), [detokenize(h) for h in hyps], [detokenize(r) for r in refs]
            assert kept[split] == text  # the translations kept beside the record
            assert cell_bleu == f"{bleu.corpus_score(text, [text_refs]).score:.2f}"
            assert scores["tests"][split]["bleu"] == bleu.corpus_score(text, [text_refs]).score
            assert cell_chrf == f"{CHRF().corpus_score(text, [text_refs]).score:.2f}"
            assert f"`{bleu.get_signature()}`" in section
            trees = read_conllu_trees(str(raw / f"{split}.en.conllu"))
            report = agreement_report(hyps, refs, trees)
            assert cell_agree == f"{report.accuracy:.2f}"
            assert scores["tests"][split]["agreement_counts"] == f"{report.correct}/{report.total}"
            assert cell_long == _percent(report.long_distance_accuracy
                                         if report.long_distance_total else None)
        alignment = score_alignment_files(str(raw / "test.align"), str(run / "generate.align.out"))
        assert alignment["sentences"] == 37
        assert aer_cell == f"{100 * alignment['aer']:.2f}"
        assert [scores[k] for k in ("precision", "recall")] == pytest.approx(
            [100 * alignment[k] for k in ("precision", "recall")])
        # the validation of lowest loss in fairseq-train's JSON log, and its checkpoint
        valid = [json.loads(line) for line in _lines(run / "train.log.jsonl")
                 if line.startswith("{") and "valid_ppl" in line]
        # fairseq's checkpoint_best.pt: of equal logged losses the later (is_better: a <= b)
        best = min(valid, key=lambda v: (float(v["valid_loss"]), -int(v["epoch"])))
        assert scores["decoded_epoch"] == int(best["epoch"])
        assert ppl_cell == f"{float(valid[scores['decoded_epoch'] - 1]['valid_ppl']):.2f}"
        curve = [float(v["valid_ppl"]) for v in valid]  # one validation per epoch
        assert scores["valid_ppl_by_epoch"] == curve and curve
        assert f"| `{key}` | 1 | " + " | ".join(f"{v:.2f}" for v in curve) in section
        assert loss_cell == f"{float(best['valid_loss']):.3f}"
        assert "--path $WORKDIR/runs/" + key + "/seed1/checkpoint_best.pt " in \
            record["commands"]["generate_test"]  # no machine path in a record
        vocab = len(Dictionary.load(str(work / "data-bin" / "dict.vf.txt")))
        assert scores["valid_loss_floor"] == pytest.approx(smoothed_loss_floor(0.1, vocab))
        # step time over the backbone's, as fairseq-syntax-step-time measured it
        if key == "attentional_rnn":
            assert scores["step_time_ratio"] == 1.0 and "step_time" not in record["commands"]
        else:
            measured = json.loads((run / "step_time.json").read_text())
            assert scores["step_time_ratio"] == measured["sa_nmt_shared"]["cpu_ratio"] > 0
            assert "--runs attentional_rnn,sa_nmt_shared" in record["commands"]["step_time"]
        if key == "sa_nmt_shared":
            induced = read_conllu_trees(str(run / "induced.test.conllu"))
            tree = score_corpus([t.heads for t in induced], gold)
            assert tree_cell == (f"{tree.model.directed_accuracy:.1f} / "
                                 f"{tree.model.undirected_accuracy:.1f}")
            assert [scores["da"], scores["ua"], scores["baselines"]["right UA"]] == [
                round(tree.model.directed_accuracy, 1), round(tree.model.undirected_accuracy, 1),
                round(tree.right.undirected_accuracy, 1)]
            assert "--gold " in record["commands"]["induced_trees"]
            assert (f"left-branching {tree.left.directed_accuracy:.1f} / "
                    f"{tree.left.undirected_accuracy:.1f}") in section
        else:
            assert tree_cell == "–"


def test_second_invocation_skips_and_changed_settings_rerun(experiment_run):
    results, records_dir, argv = (experiment_run[k] for k in ("results", "records", "argv"))
    before = results.read_text()
    backbone = records_dir / "attentional_rnn.seed1.json"
    first = json.loads(backbone.read_text())
    proc = run_cli(argv)  # same settings: every run is skipped, the same table
    assert "[skip] attentional_rnn seed 1" in proc.stderr
    assert "[skip] sa_nmt_shared seed 1" in proc.stderr and "[start]" not in proc.stderr
    assert results.read_text() == before
    assert json.loads(backbone.read_text()) == first

    # a record made with other settings is not this experiment's: that run is done again
    changed = dict(first, settings=dict(first["settings"], lr=0.1))
    backbone.write_text(json.dumps(changed))
    # ... but not while another invocation trains it in the same folder (holds its lock)
    run = experiment_run["work"] / "runs" / "attentional_rnn" / "seed1"
    checkpoint = (run / "checkpoint_best.pt").read_bytes()
    with open(f"{run}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        proc = run_cli(argv)
    assert f"[busy] attentional_rnn seed 1: another fairseq-syntax-experiment (pid 4242) " \
           f"is training it in {run}; not started" in proc.stderr
    assert "[start]" not in proc.stderr and (run / "checkpoint_best.pt").read_bytes() == checkpoint
    assert json.loads(backbone.read_text()) == changed
    args = experiment.parse_args(argv[1:])
    counted = tables.table_records(records.read_records(str(records_dir)), args,
                                       corpora.corpus_description(args))
    assert set(counted) == {"sa_nmt_shared"}
    hyps = records_dir / "attentional_rnn.seed1.hyp.json.gz"
    old_hyps = hyps.read_bytes()
    proc = run_cli(argv)
    assert "[start] attentional_rnn seed 1" in proc.stderr
    assert "[rerun] attentional_rnn seed 1: its record has other lr;" in proc.stderr
    assert "[skip] sa_nmt_shared seed 1" in proc.stderr
    assert "[start] sa_nmt_shared" not in proc.stderr
    redone = json.loads(backbone.read_text())
    assert redone["settings"] == first["settings"]
    assert redone["date"] >= first["date"]
    # the replaced record and its translations are kept where no table reads them
    stamp = "".join(c for c in first["date"] if c.isdigit() or c == "T")[:15]
    kept = records_dir / "replaced" / f"attentional_rnn.seed1.{stamp}.json"
    assert json.loads(kept.read_text()) == changed
    assert (records_dir / "replaced" / f"attentional_rnn.seed1.{stamp}.hyp.json.gz"
            ).read_bytes() == old_hyps
    assert _table(_section(results))["attentional_rnn"][0] == "1"


def _record(args, description, key, seed, scores):
    method = next(m for m in methods.all_methods() if key in methods.method_keys([m]))
    return {"format": methods.RECORD_FORMAT, "method": key, "seed": seed,
            "settings": commands.run_settings(method, key, args, description),
            "scores": scores, "commands": {}, "wall_seconds": 10.0,
            "date": "2026-01-0%dT00:00:00+00:00" % seed, "host": {"cpu": "test", "device": "cpu"},
            "run_dir": "runs", "data_bin": "bin", "experiment_command": "by hand"}


def _corpus_file(tmp_path, refs_by_test):
    """A corpus description of its own (two test sets, raw references) over a stand-in
    data-bin (the files a description is checked for; a rendering trains nothing)."""
    databin = tmp_path / "data-bin"
    databin.mkdir()
    (databin / "syntax_manifest.json").write_text("{}")
    tests = []
    for i, (name, refs) in enumerate(refs_by_test.items()):
        subset = "test" if i == 0 else f"test{i}"
        (databin / f"{subset}.en-de.en.bin").write_bytes(b"")
        (tmp_path / f"{name}.de").write_text("".join(r + "\n" for r in refs))
        tests.append({"name": name, "subset": subset, "reference": f"{name}.de"})
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"name": "mine", "source": "en", "target": "de",
                                "data_bin": "data-bin", "description": "my corpus",
                                "test_sets": tests}))
    return str(path)


def test_render_only_tests_each_method_against_its_backbone_with_paired_bootstrap(tmp_path):
    """Every cell of the difference table is sacreBLEU's own PairedTest on the kept
    translations (per seed) and a Student-t interval over seeds; bold only where
    significant. Score cells are numpy's mean ± sd over the seeds."""
    from sacrebleu.significance import PairedTest
    from scipy.stats import t as student_t
    from scipy.stats import ttest_1samp

    rng = np.random.default_rng(0)
    words = "a man dog runs the red ball on grass near water two women sit bench".split()
    refs = {name: [" ".join(rng.choice(words, size=rng.integers(4, 12))) for _ in range(120)]
            for name in ("first", "second")}
    corpus = _corpus_file(tmp_path, refs)
    records_dir, results = tmp_path / "records", tmp_path / "RESULTS.md"
    argv = ["--corpus", corpus, "--render-only", "--results-dir", str(records_dir),
            "--results", str(results), "--methods", "attentional_rnn,sa_nmt_shared,tree2seq"]
    args = experiment.parse_args(argv)
    assert args.corpus_name == "mine" and args.preset == "multi30k"
    records_dir.mkdir()
    drop = {"attentional_rnn": 0.4, "sa_nmt_shared": 0.2, "tree2seq": 0.4}  # sa_nmt better
    hyps = {}
    for key, share in drop.items():
        for seed in (1, 2, 3):
            hyps[key, seed] = {name: drop_words(r, share, 100 * seed + len(key))
                               for name, r in refs.items()}
            scores = {"tests": {name: {"bleu": BLEU().corpus_score(h, [refs[name]]).score}
                                for name, h in hyps[key, seed].items()},
                      "valid_ppl_by_epoch": [9.0 - seed, 5.0 - seed / 10]}
            if (key, seed) == ("tree2seq", 3):  # resumed by an older harness: wall < train
                scores["train_seconds"] = 600.0
            path = methods.record_path(str(records_dir), key, seed)
            with open(path, "w") as f:
                json.dump(_record(args, "my corpus", key, seed, scores), f)
            records.write_hypotheses(path, hyps[key, seed])
    assert experiment.main(argv) == 0
    section = _section(results, "mine")
    # 8 runs of 10 s, and one counted at least its 600 s of training
    assert ", 11 min of run wall time in all," in section
    rows = _table(section)
    bleu = [rows[k][1] for k in drop]
    assert bleu == [
        f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}" for v in (
            [BLEU().corpus_score(hyps[k, s]["first"], [refs["first"]]).score for s in (1, 2, 3)]
            for k in drop)]

    def direct(key, seed, name, metric):
        test = PairedTest([("b", hyps["attentional_rnn", seed][name]),
                           ("m", hyps[key, seed][name])], {"m": metric}, [refs[name]],
                          test_type="bs", n_samples=1000)
        _, res = test()
        score = next(k for k in res if k != "System")
        return res[score][1].score - res[score][0].score, res[score][1].p_value

    diff_table = section.split("Difference from `attentional_rnn`")[1]
    diff_rows = _table(diff_table)
    for key, expect_bold in (("sa_nmt_shared", True), ("tree2seq", False)):
        for column, (name, metric) in enumerate([("first", BLEU()), ("first", CHRF()),
                                                 ("second", BLEU()), ("second", CHRF())]):
            per_seed = [direct(key, s, name, metric) for s in (1, 2, 3)]
            deltas = [d for d, _ in per_seed]
            half = student_t.ppf(0.975, 2) * np.std(deltas, ddof=1) / np.sqrt(3)
            mean = np.mean(deltas)
            text = f"{mean:+.2f} [{mean - half:+.2f}, {mean + half:+.2f}]"
            bold = mean - half > 0 or mean + half < 0
            hits = sum(p < 0.05 for _, p in per_seed)  # as many as PairedTest finds
            cell = diff_rows[key][column]
            assert cell.startswith(f"**{text}**" if bold else text), (key, column, cell)
            p = ttest_1samp(deltas, 0.0).pvalue  # the one-sample t test over the seeds
            assert f" {'p<0.001' if p < 0.0005 else f'p={p:.3f}'} (" in cell, cell
            assert cell.endswith(f"/3)")
            assert bold == expect_bold
            if key == "sa_nmt_shared":
                assert cell.endswith(f"({hits}/3)") and hits == 3
            for seed in (1, 2, 3):
                assert f"| `{key}` | {seed} | {name} |" in section
        # each seed's test in the per-test table: Δ and p as PairedTest gives them
        delta, p = direct(key, 2, "second", BLEU())
        line = next(x for x in section.splitlines() if x.startswith(f"| `{key}` | 2 | second |"))
        assert line.split("|")[4].strip().startswith(f"{delta:+.2f} [")
        assert line.split("|")[4].strip().endswith(f" {p:.3f}")
    # the backbone against itself: each pair of its seeds, PairedTest's Δ of the later seed
    pair_lines = [x for x in section.split("`attentional_rnn` against itself")[1].splitlines()
                  if re.match(r"\| \d − \d \|", x)]
    assert [x.split("|")[1].strip() for x in pair_lines] == ["2 − 1", "3 − 1", "3 − 2"]
    bold = 0
    for line, (early, late) in zip(pair_lines, ((1, 2), (1, 3), (2, 3))):
        cells = [c.strip() for c in line.split("|")[2:-1]]
        for cell, (name, metric) in zip(cells, [("first", BLEU()), ("first", CHRF()),
                                                ("second", BLEU()), ("second", CHRF())]):
            test = PairedTest([("b", hyps["attentional_rnn", early][name]),
                               ("m", hyps["attentional_rnn", late][name])], {"m": metric},
                              [refs[name]], test_type="bs", n_samples=1000)
            _, res = test()
            score = next(k for k in res if k != "System")
            delta, p = res[score][1].score - res[score][0].score, res[score][1].p_value
            shown = float(cell.lstrip("*").split(" [")[0])  # of the cache's 4 decimals
            assert abs(shown - delta) <= 0.0051, (line, cell)
            bold += cell.startswith("**")
            assert p < 0.05 or not cell.startswith("**")
    assert f"Significant: {bold} of the 12 tests of one seed against another." in section
    assert "![valid ppl per epoch, RNN family](figures/mine-rnn-valid-ppl.png)" in section
    assert (tmp_path / "figures" / "mine-rnn-first-delta-bleu.png").exists()
    cache = json.loads((records_dir / "significance.json").read_text())
    assert len(cache) == 2 * 3 * 2 * 2 + 3 * 2 * 2  # (methods x seeds + backbone's seed
    # pairs) x test sets x scores
    # a second rendering reads the cache: the same section, without the references
    (tmp_path / "first.de").unlink()
    assert experiment.main(argv) == 0
    assert _section(results, "mine") == section


def test_ribes_is_tested_on_the_kept_tokenised_translations(tmp_path):
    """A corpus that scores RIBES: each method's Δ RIBES is PairedTest's on the tokenised
    translations kept beside its record (``.hyp.tok.json.gz``) against the tokenised
    references; a run that kept none (records before 2026-11-28) gets no RIBES cell."""
    from sacrebleu.significance import PairedTest

    from fairseq_syntax.evaluation.translation_scores import RibesMetric

    rng = np.random.default_rng(1)
    words = "kare wa hon o yomu ga kanojo ni tegami kaku shita node".split()
    refs = [" ".join(rng.choice(words, size=rng.integers(4, 10), replace=False))
            for _ in range(100)]
    corpus = _corpus_file(tmp_path, {"first": refs})
    spec = json.loads(open(corpus).read())
    (tmp_path / "first.tok").write_text("".join(r + "\n" for r in refs))
    spec["test_sets"][0]["reference_tok"] = "first.tok"
    spec["scores"] = ["ribes"]
    open(corpus, "w").write(json.dumps(spec))
    records_dir, results = tmp_path / "records", tmp_path / "RESULTS.md"
    argv = ["--corpus", corpus, "--render-only", "--results-dir", str(records_dir),
            "--results", str(results), "--methods", "attentional_rnn,sa_nmt_shared,tree2seq"]
    args = experiment.parse_args(argv)
    records_dir.mkdir()
    shuffled = [" ".join(rng.permutation(r.split())) for r in refs]
    tok = {"attentional_rnn": shuffled,  # sa_nmt_shared keeps half the sentences in order
           "sa_nmt_shared": [r if k % 2 else s for k, (r, s) in enumerate(zip(refs, shuffled))],
           "tree2seq": refs}
    for key, hyps in tok.items():
        path = methods.record_path(str(records_dir), key, 1)
        with open(path, "w") as f:
            json.dump(_record(args, "my corpus", key, 1, {"tests": {"first": {}}}), f)
        records.write_hypotheses(path, {"first": hyps})
        if key != "tree2seq":
            records.write_hypotheses(path, {"first": hyps}, tokenised=True)
    assert experiment.main(argv) == 0
    section = _section(results, "mine")
    diff = section.split("Difference from `attentional_rnn`")[1]
    assert "| method | Δ BLEU first | Δ chrF first | Δ RIBES first |" in diff
    _, res = PairedTest([("b", tok["attentional_rnn"]), ("m", tok["sa_nmt_shared"])],
                        {"ribes": RibesMetric()}, [refs], test_type="bs", n_samples=1000)()
    delta, p = res["RIBES"][1].score - res["RIBES"][0].score, res["RIBES"][1].p_value
    cell = _table(diff)["sa_nmt_shared"][2]
    assert cell.startswith(f"**{delta:+.2f} [") and cell.endswith(f"p={p:.3f}** †")
    assert delta > 10 and p < 0.05
    assert _table(diff)["tree2seq"][2] == "–"


def _two_methods_rendering(tmp_path):
    """A corpus of its own with one test set of 40 references, an empty records folder and
    the ``--render-only`` options of the backbone and ``tree2seq`` on them."""
    refs = {"first": [f"a dog runs on grass number {i}" for i in range(40)]}
    corpus = _corpus_file(tmp_path, refs)
    records_dir, results = tmp_path / "records", tmp_path / "RESULTS.md"
    argv = ["--corpus", corpus, "--render-only", "--results-dir", str(records_dir),
            "--results", str(results), "--methods", "attentional_rnn,tree2seq"]
    records_dir.mkdir()
    return refs, records_dir, results, argv, experiment.parse_args(argv)


def test_a_rendering_without_references_refuses_untested_pairs_and_uses_the_cache(tmp_path):
    """``--render-only`` without the corpus's references tests from the cache only: where a
    method's seed pairs with its backbone's (or two backbone seeds pair) but their test is
    not cached, it stops, names the pairs and leaves the results file as it was, rather than
    render a cell of fewer seeds; once a rendering with the references cached them, it
    renders the same cells."""
    refs, records_dir, results, argv, args = _two_methods_rendering(tmp_path)
    for key, share in (("attentional_rnn", 0.4), ("tree2seq", 0.2)):
        for seed in (1, 2):
            path = methods.record_path(str(records_dir), key, seed)
            with open(path, "w") as f:
                json.dump(_record(args, "my corpus", key, seed, {"tests": {"first": {}}}), f)
            records.write_hypotheses(path, {"first": drop_words(refs["first"], share, seed)})
    reference = tmp_path / "first.de"
    kept = reference.read_text()
    reference.unlink()  # a clone without the corpus's files
    results.write_text("before\n")
    with pytest.raises(SystemExit) as stop:
        experiment.main(argv)
    message = str(stop.value)
    assert "the paired tests of 3 pair(s) of runs are not in" in message
    assert ("(tree2seq seed 1 − attentional_rnn seed 1; tree2seq seed 2 − attentional_rnn "
            "seed 2; attentional_rnn seed 2 − attentional_rnn seed 1)") in message
    assert results.read_text() == "before\n"
    assert not (records_dir / "significance.json").exists()
    reference.write_text(kept)
    assert experiment.main(argv) == 0
    cells = _table(_section(results, "mine").split("Difference from")[1])["tree2seq"]
    reference.unlink()
    assert experiment.main(argv) == 0  # every test cached: the same cells without references
    assert _table(_section(results, "mine").split("Difference from")[1])["tree2seq"] == cells
    assert cells[0].endswith("/2)")  # both seeds tested: a cell over two seeds


def _references_sha256(refs, refs_tok=None):
    """The definition a record's ``references_sha256`` is held to."""
    return hashlib.sha256(json.dumps([refs, refs_tok], ensure_ascii=False).encode()).hexdigest()


def test_runs_scored_against_other_references_are_never_compared(tmp_path):
    """A record keeps the sha256 of the references it was scored against: a rendering
    refuses records whose references differ from each other, or from the corpus's files now,
    naming the record and the file, and leaves the results file as it was; the paired-test
    cache is keyed by those references too."""
    refs, records_dir, results, argv, args = _two_methods_rendering(tmp_path)

    def write(key, seed, digest):
        path = methods.record_path(str(records_dir), key, seed)
        scores = {"tests": {"first": {}}, "references_sha256": {"first": digest}}
        with open(path, "w") as f:
            json.dump(_record(args, "my corpus", key, seed, scores), f)
        records.write_hypotheses(path, {"first": drop_words(refs["first"], 0.3, seed + len(key))})

    digest = _references_sha256(refs["first"])
    for key in ("attentional_rnn", "tree2seq"):
        write(key, 1, digest)
    assert experiment.main(argv) == 0
    cache = json.loads((records_dir / "significance.json").read_text())
    hyps = {k: records.read_hypotheses(methods.record_path(str(records_dir), k, 1))["first"]
            for k in ("attentional_rnn", "tree2seq")}
    key = hashlib.sha1(json.dumps(["mine", "first", "bleu", "13a", 1000, hyps["attentional_rnn"],
                                   hyps["tree2seq"], digest]).encode()).hexdigest()
    assert key in cache  # the references are part of the key
    rendered = results.read_text()
    reference = tmp_path / "first.de"
    reference.write_text(reference.read_text().replace("number 7\n", "number seven\n"))
    with pytest.raises(SystemExit) as stop:
        experiment.main(argv)
    assert ("the record of attentional_rnn seed 1 was scored against other references of test "
            f"set first than {reference} hold now (sha256 {digest[:12]}…, now "
            f"{_references_sha256(_lines(reference))[:12]}…)") in str(stop.value)
    assert results.read_text() == rendered
    reference.unlink()  # without the corpus: records that disagree with each other
    write("tree2seq", 1, _references_sha256(["another reference"]))
    with pytest.raises(SystemExit) as stop:
        experiment.main(argv)
    assert ("the records of attentional_rnn seed 1 and tree2seq seed 1 were scored against "
            "other references of test set first") in str(stop.value)
    assert results.read_text() == rendered


@pytest.mark.parametrize("src,tgt", [("en", "ja"), ("ja", "en")])
def test_kftt_is_named_by_its_direction_with_its_own_budget(tmp_path, src, tgt):
    """The two directions' records and sections stay apart; KFTT has its own budget."""
    (tmp_path / "syntax_manifest.json").write_text(json.dumps(
        {"source_lang": src, "target_lang": tgt}))
    args = experiment.parse_args(["--corpus", "kftt", "--data-bin", str(tmp_path),
                                  "--workdir", "w"])
    assert args.corpus_name == f"kftt-{src}-{tgt}"
    assert args.results_dir == os.path.join("docs", "results", f"kftt-{src}-{tgt}")
    assert (args.updates, args.epochs, args.transformer["updates"]) == (None, 16, 3040)
    assert args.methods.split(",")[0] == "attentional_rnn"
    assert "lookahead_enc_dec" in args.methods.split(",")


def test_kftt_records_of_two_data_bins_stay_apart(tmp_path):
    """The KFTT preset's description (part of every record's settings) names the data-bin's
    training pairs and vocabulary, read from its manifest; test and tune are its tests."""
    bin_dir = tmp_path / "data-bin"
    bin_dir.mkdir()
    for sub in ("raw", "tok"):
        (tmp_path / sub).mkdir()
    (tmp_path / "tok" / "glue.ja.json").write_text("{}")
    for name, subset in (("test", "test"), ("tune", "test1")):
        (tmp_path / "raw" / f"{name}.ja").write_text("x\n")
        (tmp_path / "tok" / f"{name}.ja").write_text("x\n")
        (tmp_path / "tok" / f"{name}.en.conllu").write_text("")
        (bin_dir / f"{subset}.en-ja.en.bin").write_bytes(b"")
    descriptions = []
    for pairs, vocab in ((34864, 8000), (87057, 16000)):
        (bin_dir / "syntax_manifest.json").write_text(json.dumps(
            {"source_lang": "en", "target_lang": "ja", "spm_vocab_size": vocab,
             "splits": {"train": {"sentences": pairs}}}))
        corpus = corpora.kftt_corpus(str(bin_dir))
        assert [(t.name, t.subset) for t in corpus.test_sets] == [("test", "test"),
                                                                  ("tune", "test1")]
        assert corpus.bleu_tokenize == "ja-mecab"
        descriptions.append(corpus.description)
    assert descriptions == [
        "KFTT en→ja (`examples/kftt/prepare.sh`; 34,864 training pairs, sentencepiece 8,000)",
        "KFTT en→ja (`examples/kftt/prepare.sh`; 87,057 training pairs, sentencepiece 16,000)"]


def test_gpu_runs_are_records_and_a_section_of_their_own(tmp_path):
    """A run trained on the GPU (other numerics, other wall time) never stands in a CPU
    table, nor a CPU run in the GPU's: device=gpu in its settings, its own folder and
    section."""
    records_dir, results = tmp_path / "records", tmp_path / "RESULTS.md"
    records_dir.mkdir()
    base = ["--corpus", "multi30k", "--render-only", "--results-dir", str(records_dir),
            "--results", str(results), "--methods", "syntax_transformer,sdatt_transformer"]
    cpu, gpu = experiment.parse_args(base), experiment.parse_args([*base, "--gpu"])
    description = corpora.corpus_description(cpu)
    for args, key, bleu in ((cpu, "syntax_transformer", 30.0), (gpu, "sdatt_transformer", 40.0)):
        with open(methods.record_path(str(records_dir), key, 1), "w") as f:
            json.dump(_record(args, description, key, 1, {"bleu": bleu}), f)
    assert experiment.main(base) == 0 and experiment.main([*base, "--gpu"]) == 0
    cpu_rows, gpu_rows = _table(_section(results, "multi30k")), _table(_section(results, "multi30k-gpu"))
    assert (cpu_rows["syntax_transformer"][1], cpu_rows["sdatt_transformer"][1]) == ("30.00", "not run yet")
    assert (gpu_rows["syntax_transformer"][1], gpu_rows["sdatt_transformer"][1]) == ("not run yet", "40.00")
    assert "trained on the GPU" in _section(results, "multi30k-gpu")
    default = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", "--gpu"])
    assert default.results_dir == os.path.join("docs", "results", "multi30k-gpu")
    method = methods.Method("syntax_transformer", "syntax_transformer", family="transformer")
    assert "--cpu" not in commands.train_command(method, Corpus("multi30k", "en", "de", "bin", []),
                                             default, "save", seed=1)


def test_a_rendering_that_matches_no_record_refuses_and_names_the_differences(tmp_path):
    """``--render-only`` with options other than the records' (here the GPU records'
    recipe, rendered with the default one) would rewrite the section as ``not run yet``
    rows: it stops instead, names each differing setting and the records' command, and
    leaves the results file byte for byte."""
    records_dir, results = tmp_path / "records", tmp_path / "RESULTS.md"
    records_dir.mkdir()
    base = ["--corpus", "multi30k", "--render-only", "--gpu", "--results-dir",
            str(records_dir), "--results", str(results), "--methods", "syntax_transformer"]
    made = experiment.parse_args([*base, "--transformer-recipe", "lr=0.002"])
    record = _record(made, corpora.corpus_description(made), "syntax_transformer", 1,
                     {"bleu": 30.0})
    record["experiment_command"] = "fairseq-syntax-experiment --gpu --transformer-recipe lr=0.002"
    with open(methods.record_path(str(records_dir), "syntax_transformer", 1), "w") as f:
        json.dump(record, f)
    assert experiment.main([*base, "--transformer-recipe", "lr=0.002"]) == 0
    rendered = results.read_bytes()
    assert _table(_section(results, "multi30k-gpu"))["syntax_transformer"][1] == "30.00"
    with pytest.raises(SystemExit) as stop:
        experiment.main(base)
    message = str(stop.value)
    default_lr = experiment.parse_args(base).transformer["lr"]
    assert f"recipe.lr: recorded 0.002, these options {default_lr!r}" in message
    assert message.count("recorded") == 1  # the one setting that differs, and only it
    assert "--transformer-recipe lr=0.002" in message
    assert results.read_bytes() == rendered


def test_a_rendering_without_methods_keeps_the_transformer_familys_open_rows(tmp_path):
    """``--render-only`` alone renders the section as committed: the default methods, the
    Transformer family (``not run yet`` where a method has no record) and every method with
    records; a training run without ``--methods`` trains the default methods only."""
    records_dir, results = tmp_path / "records", tmp_path / "RESULTS.md"
    records_dir.mkdir()
    argv = ["--corpus", "multi30k", "--render-only", "--results-dir", str(records_dir),
            "--results", str(results)]
    args = experiment.parse_args(argv)
    with open(methods.record_path(str(records_dir), "syntax_transformer", 1), "w") as f:
        json.dump(_record(args, corpora.corpus_description(args), "syntax_transformer", 1,
                          {"bleu": 30.0}), f)
    logging.getLogger().setLevel(logging.DEBUG)  # as importing fairseq's models leaves it
    assert experiment.main(argv) == 0
    # so the figures print no matplotlib DEBUG lines (thousands of them)
    assert logging.getLogger("matplotlib.font_manager").getEffectiveLevel() == logging.INFO
    rows = _table(_section(results, "multi30k"))
    family = methods.method_keys(methods.select_methods("transformer"))
    assert [rows[k][1] for k in family] == ["30.00"] + ["not run yet"] * (len(family) - 1)
    assert rows["attentional_rnn"][1] == "not run yet"
    # --epochs for the RNN rows: nothing is trained, so the linear recipe's budget is no error
    assert experiment.parse_args([*argv, "--epochs", "12"]).methods.endswith(",transformer")
    trained = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w"])
    assert trained.methods == methods.DEFAULT_METHODS["multi30k"]


def test_multi30k_defaults_and_train_command():
    args = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", "--seeds", "1,2,3"])
    assert args.seeds == [1, 2, 3]
    assert (args.epochs, args.updates, args.embed_dim, args.encoder_hidden,
            args.decoder_hidden, args.dropout, args.lr, args.clip_norm, args.label_smoothing,
            args.max_tokens) == (12, None, 256, 256, 512, 0.3, 0.002, 5.0, 0.1, 4000)
    keys = methods.method_keys(methods.select_methods(args.methods))
    assert sorted(keys) == sorted([  # issue 39 item 4's RNN rows
        "attentional_rnn", "lstm", "sdatt_double_syntax", "lookahead_enc_dec", "sa_nmt_shared",
        "tree2seq", "attentional_rnn+supervised_attention"])
    assert args.results_dir.endswith("docs/results/multi30k")
    method = methods.Method("attentional_rnn", "attentional_rnn")
    cmd = commands.train_command(method, Corpus("multi30k", "en", "de", "bin", []), args,
                                   "save", seed=3)
    line = " ".join(cmd)
    assert "--max-epoch 12" in line and "--max-update" not in line
    assert "--disable-validation" not in line
    assert "--seed 3 " in line and "--clip-norm 5.0" in line and "--lr 0.002" in line
    assert "--log-format json --log-file save/train.log.jsonl" in line
    synthetic = experiment.parse_args(["--corpus", "synthetic", "--workdir", "w"])
    assert (synthetic.updates, synthetic.epochs, synthetic.clip_norm, synthetic.seeds) == (
        2400, None, 1.0, [1])
    assert methods.record_path("d", "tree2seq+length_prior", 2) == \
        "d/tree2seq_length_prior.seed2.json"


def test_each_budget_options_help_names_every_presets_default():
    """--help reads the defaults from the one table that sets them (kftt once went unsaid)."""
    helps = {a.dest: " ".join(a.help.split()) for a in experiment.get_parser()._actions}
    for key in ("updates", "epochs", "max_tokens", "embed_dim", "encoder_hidden",
                "decoder_hidden", "dropout", "lr", "clip_norm", "label_smoothing",
                "step_time_batches"):
        for corpus in ("synthetic", "multi30k", "kftt"):
            value = methods.DEFAULTS[corpus][key]
            assert f"{corpus} {'none' if value is None else value}" in helps[key], key
    assert "multi30k 4000, kftt 4000" in helps["max_tokens"]
    assert "synthetic none, multi30k 12, kftt 16" in helps["epochs"]


def peer_and_backbone(peer_key, backbone_key):
    """Multi30k options, corpus, and (method, fairseq-train command) of a peer and a backbone."""
    args = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w"])
    corpus = Corpus("multi30k", "en", "de", "bin", [])
    return args, corpus, *(
        (method, commands.train_command(method, corpus, args, "save", seed=1))
        for key in (peer_key, backbone_key) for method in methods.select_methods(key))


def test_fairseq_lstm_is_trained_as_the_backbones_peer():
    """``--methods lstm``: fairseq's own lstm with the backbone's sizes, optimiser, batches and
    budget, built as fairseq-syntax-parity and fairseq-syntax-step-time build it, decoded under
    ``--task translation``, and its step time measured against the backbone's."""
    args, corpus, (lstm, cmd), (backbone, ours) = peer_and_backbone("lstm", "attentional_rnn")
    assert cmd[cmd.index("--task"):cmd.index("--criterion")] == [
        "--task", "translation", "--arch", "lstm", "--encoder-bidirectional",
        "--decoder-out-embed-dim", "256"]
    assert cmd[cmd.index("--criterion"):] == ours[ours.index("--criterion"):]
    assert parity.train_command(LSTM, "bin", parity_parser().parse_args(
        ["--corpus", "multi30k", "--workdir", "w"]), "save")[:11] == cmd[:11]
    generate = commands.generate_command(corpus, "ckpt", args, task=lstm.task)
    assert generate[generate.index("--task") + 1] == "translation"
    assert "--required-batch-size-multiple" in generate
    assert scoring.step_time_batches_of(lstm, args) == 8
    settings = commands.run_settings(lstm, lstm.key, args, "corpus")
    assert settings == dict(commands.run_settings(backbone, backbone.key, args, "corpus"),
                            method="lstm", arch="lstm")


def test_fairseq_command_lines_have_one_builder_each():
    """Every ``fairseq-train`` and ``fairseq-generate`` command of the package (experiment,
    parity, benchmark, AER) comes from ``evaluation/fairseq_commands.py``; the generate
    builder puts the plugin's user dir first, whatever the task."""
    import pathlib
    from fairseq_syntax.evaluation.fairseq_commands import fairseq_generate_command
    from fairseq_syntax.user_dir import user_dir

    assert fairseq_generate_command("BIN", ["--task", "translation"], "CK", "test1",
                                    ["--beam", "5", "--cpu"]) == [
        "fairseq-generate", "BIN", "--user-dir", user_dir(), "--task", "translation",
        "--path", "CK", "--gen-subset", "test1", "--beam", "5", "--cpu"]
    package = pathlib.Path(user_dir())
    builders = sorted(str(f.relative_to(package)) for f in package.rglob("*.py")
                      for head in ('["fairseq-train"', '["fairseq-generate"')
                      if head in f.read_text(encoding="utf-8"))
    assert builders == ["evaluation/fairseq_commands.py"] * 2


def test_whole_split_loss_reads_every_sentence_that_fairseqs_validation_leaves_out(
        synthetic_databin, tmp_path):
    """fairseq 0.12's translation task leaves a last batch whose size is not a multiple of 8
    out of its batches (fairseq issue #5036); ``whole_split_loss`` counts every valid sentence
    and equals the criterion summed over batches of one sentence, whatever its batching."""
    from fairseq import checkpoint_utils

    run_cli(["fairseq-train", str(synthetic_databin), "--user-dir", USER_DIR,
             *task_arch_args(LSTM, 16), *TINY_MODEL, "--criterion", "label_smoothed_cross_entropy",
             "--label-smoothing", "0.1", "--optimizer", "adam", "--lr", "0.003",
             "--max-tokens", "800", "--max-update", "3", "--cpu", "--seed", "1",
             "--save-dir", str(tmp_path), "--no-epoch-checkpoints", "--no-progress-bar"])
    ckpt = str(tmp_path / "checkpoint_last.pt")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [ckpt], arg_overrides={"data": str(synthetic_databin)})
    task.load_dataset("valid")
    dataset, criterion = task.dataset("valid"), task.build_criterion(cfg.criterion)
    dropping = [t for t in range(100, 1000, 20) if sum(map(len, dataset.batch_by_size(
        dataset.ordered_indices(), max_tokens=t, required_batch_size_multiple=8))) < len(dataset)]
    assert dropping  # fairseq's own batching leaves sentences out at these sizes
    loss = nll = tokens = 0.0
    for i in range(len(dataset)):
        _, _, out = task.valid_step(dataset.collater([dataset[i]]), models[0], criterion)
        loss, nll, tokens = loss + out["loss"], nll + out["nll_loss"], tokens + out["ntokens"]
    for max_tokens in (dropping[0], 800):
        whole = whole_split_loss(str(synthetic_databin), ckpt, max_tokens=max_tokens)
        assert whole["sentences"] == len(dataset)
        assert whole["loss"] == pytest.approx(float(loss) / tokens / np.log(2), rel=1e-5)
        assert whole["ppl"] == pytest.approx(2 ** (float(nll) / tokens / np.log(2)), rel=1e-5)


def test_fairseq_transformer_is_trained_as_the_transformer_backbones_peer():
    """``--methods fairseq_transformer``: fairseq's own transformer under ``--task translation``,
    with syntax_transformer's sizes, recipe, batches and budget, and its step time measured
    against the backbone's."""
    args, corpus, (peer, cmd), (_, ours) = peer_and_backbone("fairseq_transformer",
                                                              "syntax_transformer")
    at = cmd.index("--task")
    assert cmd[at:at + 4] == ["--task", "translation", "--arch", "transformer"]
    assert ours[at:at + 4] == ["--task", "syntax_translation", "--arch", "syntax_transformer"]
    assert cmd[:at] + cmd[at + 4:] == ours[:at] + ours[at + 4:]
    assert "fairseq_transformer" in methods.method_keys(methods.select_methods("transformer"))
    generate = commands.generate_command(corpus, "ckpt", args, task=peer.task)
    assert generate[generate.index("--task") + 1] == "translation"
    assert scoring.step_time_batches_of(peer, args) == 8


def test_a_method_with_model_args_trains_with_them_and_records_them():
    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", "w"])
    (method,) = methods.select_methods("sdatt_double_syntax+gaussian_scores")
    cmd = commands.train_command(method, Corpus("synthetic", "en", "vf", "bin", []), args,
                                   "save", seed=1)
    assert cmd[cmd.index("--arch"):cmd.index("--arch") + 4] == [
        "--arch", "sdatt_double_syntax", "--syntax-gaussian", "scores"]
    settings = commands.run_settings(method, method.key, args, "corpus")
    assert settings["model_args"] == ["--syntax-gaussian", "scores"]
    # methods without model options keep the settings their records were written with
    (plain,) = methods.select_methods("sdatt_double_syntax")
    assert "model_args" not in commands.run_settings(plain, plain.key, args, "corpus")
    assert settings["arch"] == plain.arch and settings["method"] != plain.key
    (words,) = methods.select_methods("sdatt_double_syntax+row_words")
    cmd = commands.train_command(words, Corpus("synthetic", "en", "vf", "bin", []), args,
                                 "save", seed=1)
    assert cmd[cmd.index("--arch"):cmd.index("--arch") + 4] == [
        "--arch", "sdatt_double_syntax", "--syntax-row", "words"]


def test_synthetic_data_bin_is_remade_for_another_side_file_format(tmp_path, monkeypatch):
    """A data-bin in --workdir made for another side-file format (or grammar) is made
    again, not reused: the task would refuse it."""
    import os

    from fairseq_syntax.data.side_files import FORMAT_VERSION

    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", str(tmp_path)])
    calls = []

    def fake_corpus(raw, *sizes):
        calls.append("generate_corpus")
        os.makedirs(raw, exist_ok=True)
        for name in ("test.vf", "test.align", "test.en.conllu"):
            open(os.path.join(raw, name), "w").close()
        return {"sizes": sizes}

    def fake_tool(cmd, log_path, env, stdout_path=None):
        calls.append(cmd[0])
        databin = cmd[cmd.index("--destdir") + 1]
        os.makedirs(databin, exist_ok=True)
        open(os.path.join(databin, "syntax_manifest.json"), "w").write("{}")
        return ""

    monkeypatch.setattr(corpora, "generate_corpus", fake_corpus)
    monkeypatch.setattr(corpora, "run_tool", fake_tool)
    corpora.prepare_synthetic(args)
    assert calls == ["generate_corpus", "fairseq-syntax-preprocess"]
    stamp = json.loads((tmp_path / "corpus.json").read_text())
    assert stamp["side_files"] == FORMAT_VERSION
    calls.clear()
    corpora.prepare_synthetic(args)  # same settings: reused
    assert calls == []
    stamp["side_files"] = FORMAT_VERSION - 1  # a data-bin of the previous format
    (tmp_path / "corpus.json").write_text(json.dumps(stamp))
    corpora.prepare_synthetic(args)
    assert calls == ["generate_corpus", "fairseq-syntax-preprocess"]


def test_an_interrupted_run_resumes_from_its_checkpoint_only_with_the_same_command(
        tmp_path, monkeypatch):
    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", str(tmp_path)])
    (method,) = methods.select_methods("attentional_rnn")
    corpus = Corpus("synthetic", "en", "vf", "bin", [])
    trained = []

    def fake_tool(cmd, log_path, env, stdout_path=None):
        trained.append(os.path.exists(os.path.join(save, "checkpoint_last.pt")))
        raise RuntimeError("stop after the training command")

    monkeypatch.setattr(runs, "run_tool", fake_tool)
    save = runs.run_dir(args, method.key, 1)
    runs.run_method(method, 1, corpus, args, {})  # a fresh run writes its stamp
    open(os.path.join(save, "checkpoint_last.pt"), "w").close()  # interrupted after an epoch
    runs.run_method(method, 1, corpus, args, {})
    stamp = json.loads(open(os.path.join(save, methods.RUN_STAMP)).read())
    stamp["train_seconds"] = 1234.5  # its training finished: decoded again, not trained
    open(os.path.join(save, methods.RUN_STAMP), "w").write(json.dumps(stamp))
    (row, _, _), = runs.run_method(method, 1, corpus, args, {})
    assert row.train_seconds == 1234.5 and trained == [False, True]  # no fairseq-train
    args.lr = 0.001  # another command: the old checkpoint must not be resumed
    (row, _, _), = runs.run_method(method, 1, corpus, args, {})
    assert trained == [False, True, False]
    assert row.error == "stop after the training command"


def test_a_resumed_run_records_the_training_time_of_every_attempt(tmp_path, monkeypatch):
    """fairseq restarts its wall clock on resume; the record takes the checkpoint's sum."""
    import torch

    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", str(tmp_path)])
    (method,) = methods.select_methods("attentional_rnn")
    save = runs.run_dir(args, method.key, 1)
    last = os.path.join(save, "checkpoint_last.pt")

    def fake_tool(cmd, log_path, env, stdout_path=None):
        if cmd[0] != "fairseq-train":
            raise RuntimeError("stop after the training command")
        torch.save({"extra_state": {"previous_training_time": 4321.5}}, last)

    monkeypatch.setattr(runs, "run_tool", fake_tool)
    monkeypatch.setattr(runs, "read_train_log", lambda path: {})
    corpus = Corpus("synthetic", "en", "vf", "bin", [])
    (row, _, _), = runs.run_method(method, 1, corpus, args, {})  # fresh: its own wall time
    assert row.train_seconds < 60
    (row, _, _), = runs.run_method(method, 1, corpus, args, {})  # trained: not again
    stamp_path = os.path.join(save, methods.RUN_STAMP)
    stamp = json.loads(open(stamp_path).read())
    del stamp["train_seconds"]  # as if interrupted after an epoch
    open(stamp_path, "w").write(json.dumps(stamp))
    (row, _, _), = runs.run_method(method, 1, corpus, args, {})
    assert row.train_seconds == 4321.5


def test_a_run_resumed_on_another_machine_records_both(tmp_path, monkeypatch):
    """Each training invocation adds its machine to the run's stamp; the record's host
    lists them (``training_cpus``), so a run trained on two CPUs pairs with no other as
    one CPU's; a stamp older than that list counts its training as on a machine not known."""
    from fairseq_syntax.evaluation.host import CPU_KEYS, same_cpu

    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", str(tmp_path)])
    (method,) = methods.select_methods("attentional_rnn")
    save = runs.run_dir(args, method.key, 1)
    first = {"cpu": "AMD EPYC", "cpu_family_model": "26/2", "torch_cpu_capability": "AVX512",
             "device": "cpu", "jobs": 1}
    second = dict(first, cpu_family_model="25/17")
    machine = [first]

    def fake_tool(cmd, log_path, env, stdout_path=None):
        raise RuntimeError("stop after the training command")

    monkeypatch.setattr(runs, "run_tool", fake_tool)
    monkeypatch.setattr(runs, "host_facts", lambda args, threads: dict(machine[0]))
    corpus = Corpus("synthetic", "en", "vf", "bin", [])
    runs.run_method(method, 1, corpus, args, {})  # killed in its first epoch: starts again
    open(os.path.join(save, "checkpoint_last.pt"), "w").close()  # then after an epoch
    runs.run_method(method, 1, corpus, args, {})
    machine[0] = second
    (row, _, _), = runs.run_method(method, 1, corpus, args, {})  # resumed on another machine
    keys = {k: first[k] for k in CPU_KEYS}
    assert row.training_cpus == [keys, dict(keys, cpu_family_model="25/17")]
    stamp_path = os.path.join(save, methods.RUN_STAMP)
    assert json.loads(open(stamp_path).read())["training_cpus"] == row.training_cpus
    record = records.run_record(row, {}, {}, 1.0, dict(second, platform="p"), save, "bin",
                                "cmd", {})
    assert record["host"]["training_cpus"] == row.training_cpus
    assert "training_cpus" not in record["scores"]
    assert same_cpu(record["host"], second) is False

    stamp = json.loads(open(stamp_path).read())
    del stamp["training_cpus"]  # a stamp written before 2026-12-03
    open(stamp_path, "w").write(json.dumps(stamp))
    (row, _, _), = runs.run_method(method, 1, corpus, args, {})
    assert row.training_cpus == [dict.fromkeys(CPU_KEYS), dict(keys, cpu_family_model="25/17")]


# --------------------------------------------------------------------- Transformer family

# the settings the committed RNN records were written with (docs/results/synthetic,
# attentional_rnn.seed1.json and the model_args variant): a change here makes every
# committed record stale, and the experiment would train them all again
RNN_SETTINGS = {
    "corpus": "synthetic",
    "corpus_description": "synthetic en→vf corpus (`fairseq-syntax-synthetic --seed 1`, "
    "grammar version 2), 20000/200/500/500 train/valid/test/gen pairs, sentencepiece "
    "vocabulary 1000, gold trees and alignments",
    "method": "attentional_rnn", "arch": "attentional_rnn",
    "criterion": ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"],
    "label_smoothing": 0.1, "embed_dim": 96, "encoder_hidden": 128, "decoder_hidden": 256,
    "dropout": 0.1, "optimizer": "adam", "lr": 0.003, "clip_norm": 1.0, "max_tokens": 3000,
    "updates": 2400, "epochs": None, "max_minutes": None, "checkpoint": "best",
    "decoding": ["--beam", "5", "--batch-size", "64", "--max-len-a", "1.5", "--max-len-b",
                 "10", "--post-process", "sentencepiece"],
}


def test_rnn_settings_are_the_ones_of_the_committed_records():
    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", "w"])
    description = corpora.corpus_description(args)
    assert description == RNN_SETTINGS["corpus_description"]
    expected = {
        "attentional_rnn": RNN_SETTINGS,
        "attentional_rnn+supervised_attention": dict(
            RNN_SETTINGS, method="attentional_rnn+supervised_attention",
            criterion=["--criterion", "supervised_attention_cross_entropy",
                       "--label-smoothing", "0.1"]),
        "sdatt_double_syntax+gaussian_scores": dict(
            RNN_SETTINGS, method="sdatt_double_syntax+gaussian_scores",
            arch="sdatt_double_syntax", model_args=["--syntax-gaussian", "scores"]),
        "tree2seq+length_prior": dict(
            RNN_SETTINGS, method="tree2seq+length_prior", arch="tree2seq",
            decoding=[*RNN_SETTINGS["decoding"], "--length-prior"]),
    }
    for key, settings in expected.items():
        method = next(m for m in methods.all_methods() if key in methods.method_keys([m]))
        assert method.family == "rnn"
        assert commands.run_settings(method, key, args, description) == settings
    # the Transformer recipe given on the command line changes no RNN setting
    other = experiment.parse_args(["--corpus", "synthetic", "--workdir", "w",
                                   "--transformer-recipe", "lr=0.01,layers=3"])
    (backbone,) = methods.select_methods("attentional_rnn")
    assert commands.run_settings(backbone, backbone.key, other, description) == RNN_SETTINGS


def test_the_raw_files_and_data_bin_of_a_generated_corpus_are_described_as_that_corpus(tmp_path):
    """--raw W/raw --data-bin W/data-bin of a corpus generated in W: its records match those
    of --workdir W; user files (no stamp, or a stamp of files given with --raw) do not."""
    home = tmp_path / "syn"
    (home / "raw").mkdir(parents=True)
    (home / "data-bin").mkdir()
    for split, n in (("train", 3), ("valid", 2), ("test", 1)):
        (home / "raw" / f"{split}.vf").write_text("w\n" * n)
    given = ["--corpus", "synthetic", "--workdir", str(tmp_path / "other"),
             "--raw", str(home / "raw"), "--data-bin", str(home / "data-bin")]
    as_files = ("synthetic en→vf corpus (files given with --raw), 3/2/1/0 train/valid/test/gen "
                "pairs, gold trees and alignments")
    assert corpora.corpus_description(experiment.parse_args(given)) == as_files
    stamp = dict(grammar=2, side_files=2, seed=1, train=20000, valid=200, test=500, gen=500,
                 vocab_size=1000, raw=None)
    (home / "corpus.json").write_text(json.dumps(stamp))
    described = corpora.corpus_description(experiment.parse_args(given))
    assert described == RNN_SETTINGS["corpus_description"]
    assert described == corpora.corpus_description(
        experiment.parse_args(["--corpus", "synthetic", "--workdir", str(home)]))
    # the raw files alone, preprocessed here with another vocabulary
    raw_only = experiment.parse_args([*given[:6], "--vocab-size", "500"])
    assert corpora.corpus_description(raw_only) == RNN_SETTINGS["corpus_description"].replace(
        "vocabulary 1000", "vocabulary 500")
    # a data-bin from elsewhere, or a stamp of files the user gave: the files as given
    elsewhere = experiment.parse_args([*given[:6], "--data-bin", str(tmp_path / "bin")])
    assert corpora.corpus_description(elsewhere) == as_files
    (home / "corpus.json").write_text(json.dumps(dict(stamp, raw=str(tmp_path / "mine"))))
    assert corpora.corpus_description(experiment.parse_args(given)) == as_files

def test_transformer_methods_train_with_the_transformer_recipe():
    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", "w"])
    recipe = methods.TRANSFORMER_RECIPES["synthetic"]
    family = methods.select_methods("transformer")
    # the registry's architectures at one size each (no _tiny/_iwslt_de_en presets), the
    # backbone's peer fairseq transformer, the supervised backbone and fairseq's transformer_align
    assert [m.key for m in family] == [
        "syntax_transformer", "fairseq_transformer", "syntax_transformer+supervised_attention",
        "transformer_align",
        "pascal_transformer", "sa_transformer", "sdatt_double_transformer",
        "sdatt_double_transformer+one_head", "sdatt_transformer", "sdatt_transformer+one_head",
        "tree2seq_transformer"]
    assert not any(m.family == "transformer" for m in methods.select_methods(
        methods.DEFAULT_METHODS["synthetic"]))
    corpus = Corpus("synthetic", "en", "vf", "bin", [])
    for method in family:
        cmd = commands.train_command(method, corpus, args, "save", seed=2)
        assert cmd[0] == "fairseq-train" and method.family == "transformer"

        def value(option):
            return cmd[cmd.index(option) + 1]

        assert value("--arch") == method.arch
        for option, key in (("--encoder-embed-dim", "embed_dim"), ("--decoder-embed-dim", "embed_dim"),
                            ("--encoder-ffn-embed-dim", "ffn_dim"), ("--decoder-ffn-embed-dim", "ffn_dim"),
                            ("--encoder-layers", "layers"), ("--decoder-layers", "layers"),
                            ("--encoder-attention-heads", "heads"), ("--dropout", "dropout"),
                            ("--lr", "lr"), ("--warmup-updates", "warmup_updates"),
                            ("--max-tokens", "max_tokens"), ("--max-update", "updates"),
                            ("--label-smoothing", "label_smoothing")):
            assert value(option) == str(recipe[key]), option
        assert (value("--optimizer"), value("--adam-betas"), value("--lr-scheduler")) == (
            "adam", "(0.9, 0.98)", "inverse_sqrt")
        assert "--encoder-hidden-size" not in cmd and "--share-decoder-input-output-embed" in cmd
        assert value("--seed") == "2" and "--max-epoch" not in cmd
        settings = commands.run_settings(method, method.key, args, "corpus")
        assert settings["family"] == "transformer" and settings["recipe"]["lr"] == recipe["lr"]
        head = ["--alignment-layer", "0", "--alignment-heads", "1"]  # 2 layers: the bottom one
        supervised = method.key in ("syntax_transformer+supervised_attention", "transformer_align")
        assert (cmd[cmd.index("--alignment-layer"):cmd.index("--alignment-layer") + 4] == head
                if supervised else "--alignment-layer" not in cmd)
        assert value("--task") == ("translation" if method.key in (
            "transformer_align", "fairseq_transformer") else "syntax_translation")
        assert ("--load-alignments" in cmd) == (method.key == "transformer_align")
    by_key = {m.key: m for m in family}
    assert by_key["transformer_align"].criterion == "label_smoothed_cross_entropy_with_alignment"
    assert by_key["syntax_transformer+supervised_attention"].criterion == \
        "supervised_attention_cross_entropy"
    for arch in ("sdatt_transformer", "sdatt_double_transformer"):  # every head, then one
        one = commands.train_command(by_key[arch + "+one_head"], corpus, args, "save", 1)
        assert "--sdatt-heads 1" in " ".join(one)
        assert "--sdatt-heads" not in commands.train_command(by_key[arch], corpus, args, "save", 1)
    # overrides and the budget: --updates/--epochs, when given, are every family's
    small = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", "--updates", "7",
                                   "--transformer-recipe", "layers=1,lr=0.002"])
    assert (small.transformer["updates"], small.transformer["epochs"], small.transformer["layers"],
            small.transformer["lr"], small.updates) == (7, None, 1, 0.002, 7)
    m30k = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w"])
    assert m30k.transformer == methods.TRANSFORMER_RECIPES["multi30k"] and m30k.epochs == 12
    cmd = commands.train_command(by_key["transformer_align"], corpus, m30k, "save", 1)
    assert cmd[cmd.index("--alignment-layer") + 1] == str(m30k.transformer["layers"] - 2)
    with pytest.raises(SystemExit):
        experiment.parse_args(["--corpus", "synthetic", "--workdir", "w",
                               "--transformer-recipe", "depth=3"])


def test_a_pre_norm_recipe_builds_fairseqs_pre_norm_layers():
    """``normalize_before=true`` gives fairseq's --encoder/--decoder-normalize-before, which
    fairseq's Transformer reads as layer norm before each sublayer, and a final layer norm
    (absent from post-norm, the default); a value other than a boolean is an error."""
    from fairseq_syntax.evaluation.checkpoints import training_config

    (backbone,) = methods.select_methods("syntax_transformer")
    corpus = Corpus("multi30k", "en", "de", "bin", [])
    norms = {}
    for value in ("true", "False"):
        args = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w",
                                      "--transformer-recipe", f"normalize_before={value}"])
        cmd = commands.train_command(backbone, corpus, args, "save", 1)
        cfg = training_config(["bin", "--arch", "transformer",
                               *commands.transformer_size_args(args.transformer)])
        norms[value] = (args.transformer["normalize_before"], "--encoder-normalize-before" in cmd,
                        "--decoder-normalize-before" in cmd, cfg.model.encoder_normalize_before,
                        cfg.model.decoder_normalize_before)
    assert norms == {"true": (True, True, True, True, True),
                     "False": (False, False, False, False, False)}
    with pytest.raises(SystemExit):
        experiment.parse_args(["--corpus", "multi30k", "--workdir", "w",
                               "--transformer-recipe", "normalize_before=sometimes"])


def test_a_linear_schedule_decays_to_zero_at_the_budget_and_averaging_keeps_its_epochs():
    recipe = ["--transformer-recipe",
              "lr_scheduler=linear,updates=1510,epochs=none,average_last=3"]
    args = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", *recipe])
    (backbone,) = methods.select_methods("syntax_transformer")
    cmd = commands.train_command(backbone, Corpus("multi30k", "en", "de", "bin", []), args, "save", 1)
    assert "--max-epoch" not in cmd and "--no-epoch-checkpoints" not in cmd
    assert cmd[cmd.index("--keep-last-epochs") + 1] == "3"
    assert commands.run_settings(backbone, backbone.key, args, "c")["checkpoint"] == \
        "average of the last 3 epochs"
    # fairseq's own scheduler, built from the command: warm-up to the peak, then a straight
    # line to 0 at the last update
    from fairseq import optim
    from fairseq.optim import lr_scheduler
    from fairseq_syntax.evaluation.checkpoints import training_config

    cfg = training_config(["bin", *cmd[cmd.index("--optimizer"):cmd.index("--max-tokens")],
                           "--arch", "transformer", "--max-update", "1510"])
    optimizer = optim.build_optimizer(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    schedule = lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, optimizer)
    peak = methods.TRANSFORMER_RECIPES["multi30k"]["lr"]
    for update, lr in ((200, peak / 2), (400, peak), (955, peak / 2), (1510, 0.0)):
        assert schedule.step_update(update) == pytest.approx(lr, abs=1e-12), update
    for bad in ("lr_scheduler=cosine", "updates=none,epochs=10", "average_last=-1"):
        with pytest.raises(SystemExit):  # linear needs its budget in updates
            experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", "--methods",
                                   "syntax_transformer", "--transformer-recipe", bad])
    # a budget in epochs for the RNN rows alone leaves the Transformer recipe unused
    rnn = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", "--epochs", "12",
                                 "--methods", "attentional_rnn"])
    assert rnn.epochs == 12 and rnn.transformer["lr_scheduler"] == "linear"
    with pytest.raises(SystemExit):
        experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", "--epochs", "12",
                               "--methods", "attentional_rnn,transformer"])


def test_averaged_checkpoint_is_the_mean_of_the_last_epochs(tmp_path):
    for epoch, w in ((2, 1.0), (9, 2.0), (10, 6.0), (1, 100.0)):  # 10 after 9, not after 1
        torch.save({"model": {"w": torch.full((2,), w), "n": torch.tensor([epoch])},
                    "epoch": epoch}, tmp_path / f"checkpoint{epoch}.pt")
    (tmp_path / "checkpoint_best.pt").touch()
    paths = runs.last_epoch_checkpoints(str(tmp_path), 3)
    assert [os.path.basename(p) for p in paths] == [
        "checkpoint2.pt", "checkpoint9.pt", "checkpoint10.pt"]
    average_checkpoints(paths, str(tmp_path / "avg.pt"))
    state = torch.load(tmp_path / "avg.pt", weights_only=False)
    assert state["model"]["w"].tolist() == [3.0, 3.0]  # (1 + 2 + 6) / 3
    assert state["model"]["n"].tolist() == [10] and state["epoch"] == 10  # the last one's
    with pytest.raises(RuntimeError, match="holds 4 epoch checkpoints"):
        runs.last_epoch_checkpoints(str(tmp_path), 5)


def test_a_transformer_run_decodes_the_average_of_its_last_epochs(experiment_run):
    tmp, work = experiment_run["tmp"], experiment_run["work"]
    argv = [*EXPERIMENT, "--workdir", str(tmp / "averaged"), "--data-bin",
            str(work / "data-bin"), "--raw", str(work / "raw"), "--results", str(tmp / "A.md"),
            "--results-dir", str(tmp / "a_records"), "--jobs", "1",
            "--methods", "syntax_transformer", "--updates", "20", "--transformer-recipe",
            "embed_dim=16,ffn_dim=16,layers=1,heads=2,max_tokens=2000,warmup_updates=2,"
            "lr_scheduler=linear,average_last=2"]
    assert "(1 run(s), 0 failed;" in run_cli(argv).stderr
    record = json.loads((tmp / "a_records" / "syntax_transformer.seed1.json").read_text())
    run = tmp / "averaged" / "runs" / "syntax_transformer" / "seed1"
    epochs = sorted(p.name for p in run.glob("checkpoint[0-9]*.pt"))
    assert len(epochs) == 2 and record["scores"]["train_epochs"] >= 2  # the last two kept
    average = run / "checkpoint_average.pt"
    assert "--path $WORKDIR/runs/syntax_transformer/seed1/checkpoint_average.pt " in \
        record["commands"]["generate_test"]
    states = [torch.load(run / name, weights_only=False)["model"] for name in epochs]
    averaged = torch.load(average, weights_only=False)["model"]
    for name, value in averaged.items():
        if value.is_floating_point():
            assert torch.allclose(value, (states[0][name] + states[1][name]) / 2, atol=1e-6)
    whole = whole_split_loss(str(work / "data-bin"), str(average))  # an average's own valid ppl
    assert (record["scores"]["valid_loss"], record["scores"]["valid_ppl"]) == (
        round(whole["loss"], 3), round(whole["ppl"], 2))
    section = _section(tmp / "A.md")
    assert "linear decay to 0 at the last update" in section
    assert "the average of the last 2 epochs' checkpoints decoded" in section
    # a trained run without its record is only decoded again, from the average it wrote
    written = average.stat().st_mtime_ns
    (tmp / "a_records" / "syntax_transformer.seed1.json").unlink()
    assert "(1 run(s), 0 failed;" in run_cli(argv).stderr
    assert average.stat().st_mtime_ns == written
    again = json.loads((tmp / "a_records" / "syntax_transformer.seed1.json").read_text())
    assert again["scores"]["tests"] == record["scores"]["tests"]


def test_a_record_written_before_a_recipe_key_reads_with_the_value_it_was_trained_with(
        tmp_path):
    inverse_sqrt = "lr=0.002,lr_scheduler=inverse_sqrt,updates=none,epochs=10"
    args = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w",
                                  "--transformer-recipe", inverse_sqrt])
    (backbone,) = methods.select_methods("syntax_transformer")
    settings = commands.run_settings(backbone, backbone.key, args, "c")
    old = json.loads(json.dumps(settings))
    for key in methods.RECIPE_KEYS_ADDED:
        del old["recipe"][key]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"method": backbone.key, "seed": 1, "settings": old,
                                "scores": {}}))
    assert records.read_record(str(path))["settings"] == settings
    linear = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w"])  # the recipe
    assert records.read_record(str(path))["settings"] != commands.run_settings(
        backbone, backbone.key, linear, "c")


def test_tiny_transformer_runs_write_records_and_their_table(experiment_run):
    """The supervised Transformer, fairseq's transformer_align and sa_transformer on the
    corpus of experiment_run: records, AER of the supervised heads, induced trees, and the
    Transformer table."""
    tmp, work = experiment_run["tmp"], experiment_run["work"]
    results, records_dir = tmp / "T.md", tmp / "t_records"
    keys = ["syntax_transformer+supervised_attention", "transformer_align", "sa_transformer"]
    argv = [*EXPERIMENT, "--workdir", str(work), "--results", str(results),
            "--results-dir", str(records_dir), "--jobs", "1",
            "--methods", ",".join(keys), "--transformer-recipe",
            "embed_dim=16,ffn_dim=16,layers=2,heads=2,max_tokens=800,warmup_updates=2"]
    proc = run_cli(argv)
    assert "[3/3]" in proc.stderr
    assert "(3 run(s), 0 failed;" in proc.stderr
    section = _section(results)
    assert "### Transformer family" in section
    rows = _table(section)
    # the RNN family's rows stay open: none selected, none recorded here
    assert {k for k, cells in rows.items() if cells[1] != "not run yet"} == set(keys)
    assert "attentional_rnn" in rows
    raw = work / "raw"
    for key in keys:
        record = json.loads((records_dir / f"{methods.file_key(key)}.seed1.json").read_text())
        assert set(record) == RECORD_KEYS
        settings, scores, train = record["settings"], record["scores"], record["commands"]["train"]
        assert settings["family"] == "transformer" and settings["recipe"]["embed_dim"] == 16
        assert "--lr-scheduler inverse_sqrt" in train and "--max-update 4 " in train
        assert scores["train_updates"] == 4 and scores["tests"]["test"]["bleu"] is not None
        assert scores["tests"]["gen"]["bleu"] is not None
        run = work / "runs" / methods.file_key(key) / "seed1"
        alignment = score_alignment_files(str(raw / "test.align"), str(run / "generate.align.out"))
        assert alignment["sentences"] == 37
        assert scores["aer"] == pytest.approx(100 * alignment["aer"])
        cells = rows[key]
        assert cells[0] == "1" and cells[9] == f"{100 * alignment['aer']:.2f}"
        task = "translation" if key == "transformer_align" else "syntax_translation"
        assert f"--task {task} " in train and f"--task {task} " in record["commands"]["align"]
        if task == "translation":  # valid ppl over every sentence, not fairseq's log's
            assert record["data_bin"] == "$DATA_BIN"  # no machine path in a record
            whole = whole_split_loss(str(work / "data-bin"), str(run / "checkpoint_best.pt"))
            assert (scores["valid_loss"], scores["valid_ppl"]) == (
                round(whole["loss"], 3), round(whole["ppl"], 2))
        if key == "sa_transformer":
            gold = read_gold_trees(str(raw / "test.en.conllu"))
            tree = score_corpus([t.heads for t in read_conllu_trees(
                str(run / "induced.test.conllu"))], gold)
            assert [scores["da"], scores["ua"]] == [round(tree.model.directed_accuracy, 1),
                                                    round(tree.model.undirected_accuracy, 1)]
            assert cells[10] == f"{scores['da']:.1f} / {scores['ua']:.1f}"
        else:
            assert scores["da"] is None and cells[10] == "–"
        if key == "transformer_align":  # fairseq-syntax-step-time builds syntax_translation runs
            assert scores["step_time_ratio"] is None
        else:  # against the Transformer backbone, at the recipe's sizes
            measured = json.loads((run / "step_time.json").read_text())
            spec = "syntax_transformer+supervised_attention_cross_entropy" \
                if key.endswith("supervised_attention") else key
            assert scores["step_time_ratio"] == measured[spec]["cpu_ratio"] > 0
            assert f"--runs syntax_transformer,{spec}" in record["commands"]["step_time"]
            assert "--encoder-ffn-embed-dim 16" in record["commands"]["step_time"]
    # the supervised head's print-alignment: transformer_align decodes left-padded sources
    assert "--load-alignments" in json.loads(
        (records_dir / "transformer_align.seed1.json").read_text())["commands"]["train"]


def test_a_corpus_of_its_own_runs_end_to_end_with_two_test_sets(experiment_run):
    """A user's corpus description (no preset): the harness trains, decodes both test sets,
    keeps the translations and its difference cell is sacreBLEU's PairedTest on them."""
    from sacrebleu.significance import PairedTest

    tmp, work = experiment_run["tmp"], experiment_run["work"]
    home = tmp / "own"
    home.mkdir()
    (home / "corpus.json").write_text(json.dumps({
        "name": "own", "source": "en", "target": "vf", "data_bin": "../work/data-bin",
        "description": "the generated corpus, described by hand", "detokenizer": "none",
        "test_sets": [{"name": "first", "subset": "test", "reference": "../work/raw/test.vf"},
                      {"name": "second", "subset": "test1", "reference": "../work/raw/gen.vf"}]}))
    argv = ["fairseq-syntax-experiment", "--corpus", str(home / "corpus.json"),
            "--workdir", str(home / "work"), "--results", str(home / "R.md"),
            "--results-dir", str(home / "records"), "--methods", "attentional_rnn,sa_nmt_shared",
            "--updates", "4", "--embed-dim", "16", "--encoder-hidden", "16",
            "--decoder-hidden", "32", "--max-tokens", "800", "--jobs", "2",
            "--step-time-batches", "0", "--seeds", "1"]
    assert "(2 run(s), 0 failed;" in run_cli(argv).stderr
    kept = {k: records.read_hypotheses(str(home / "records" / f"{k}.seed1.json"))
            for k in ("attentional_rnn", "sa_nmt_shared")}
    for k in kept:  # each record names the references it was scored against
        recorded = records.read_record(str(home / "records" / f"{k}.seed1.json"))
        assert recorded["scores"]["references_sha256"] == {
            name: _references_sha256(_lines(work / "raw" / f"{ref}.vf"))
            for name, ref in (("first", "test"), ("second", "gen"))}
    section = _section(home / "R.md", "own")
    diff = _table(section.split("Difference from `attentional_rnn`")[1])["sa_nmt_shared"]
    for column, (name, ref) in enumerate([("first", "test"), ("second", "gen")]):
        refs = _lines(work / "raw" / f"{ref}.vf")
        hyps = {k: _lines(home / "work" / "runs" / k / "seed1" / f"{name}.hyp") for k in kept}
        assert kept["sa_nmt_shared"][name] == hyps["sa_nmt_shared"]  # the H- lines, kept
        _, res = PairedTest([("b", hyps["attentional_rnn"]), ("m", hyps["sa_nmt_shared"])],
                            {"chrf": CHRF()}, [refs], test_type="bs", n_samples=1000)()
        chrf = next(k for k in res if k != "System")
        delta, p = res[chrf][1].score - res[chrf][0].score, res[chrf][1].p_value
        cell = diff[2 * column + 1]  # Δ BLEU, Δ chrF per test set
        assert cell.replace("**", "").startswith(f"{delta:+.2f} [")
        assert f"p={p:.3f}" in cell


def test_a_reference_that_does_not_fit_its_test_set_stops_the_harness_before_training(
        experiment_run):
    tmp, work = experiment_run["tmp"], experiment_run["work"]
    home = tmp / "misfit"
    home.mkdir()
    refs = _lines(work / "raw" / "gen.vf")  # the data-bin's test1 has one sentence per line
    (home / "gen.vf").write_text("".join(r + "\n" for r in refs[:-1]))
    (home / "corpus.json").write_text(json.dumps({
        "name": "misfit", "source": "en", "target": "vf", "data_bin": "../work/data-bin",
        "test_sets": [{"name": "first", "subset": "test", "reference": "../work/raw/test.vf"},
                      {"name": "second", "subset": "test1", "reference": "gen.vf"}]}))
    argv = ["fairseq-syntax-experiment", "--corpus", str(home / "corpus.json"),
            "--workdir", str(home / "work"), "--results", str(home / "R.md"),
            "--results-dir", str(home / "records"), "--methods", "attentional_rnn"]
    proc = run_cli(argv, check=False)
    assert proc.returncode == 1 and "[start]" not in proc.stderr
    assert (f"fairseq-syntax-experiment: error: test set second: reference: {home / 'gen.vf'} "
            f"has {len(refs) - 1} lines, the data-bin's subset test1 {len(refs)} sentences"
            ) in proc.stderr
    (home / "gen.vf").write_bytes(b"".join(r.encode() + b"\n" for r in refs[:2]) + b"\xe9\n")
    proc = run_cli(argv, check=False)
    assert proc.returncode == 1 and "[start]" not in proc.stderr
    assert f"error: test set second: reference: {home / 'gen.vf'}:3: not valid UTF-8" in proc.stderr
    assert not (home / "work" / "runs").exists() and not (home / "records").exists()


def test_references_with_html_entities_are_unescaped_as_training_text_was(tmp_path):
    """KFTT's raw English keeps &apos; and the like, which the tokeniser unescaped for
    training: a description that says so scores against the unescaped text."""
    from fairseq_syntax.evaluation.corpus import load_corpus

    path = _corpus_file(tmp_path, {"test": ["Kyoto &apos;s temples", "A &amp; B"]})
    spec = json.loads(open(path).read())
    corpus = load_corpus(path)
    assert corpus.references(corpus.test_sets[0]) == ["Kyoto &apos;s temples", "A &amp; B"]
    spec["unescape_references"] = True
    with open(path, "w") as f:
        json.dump(spec, f)
    corpus = load_corpus(path)
    assert corpus.references(corpus.test_sets[0]) == ["Kyoto 's temples", "A & B"]


def test_a_description_names_its_mistakes_instead_of_falling_back_to_defaults(tmp_path):
    """A misspelt key, a test set's unknown key or a tokenizer sacreBLEU does not know stop
    with the file's name and what is known, before anything trains; without
    ``bleu_tokenize`` the tokenizer is sacreBLEU's own choice for the target language
    (its documented defaults: zh, ja-mecab, ko-mecab, else 13a)."""
    from fairseq_syntax.evaluation.corpus import CorpusError, load_corpus

    path = _corpus_file(tmp_path, {"test": ["a b"]})
    spec = json.loads(open(path).read())

    def load(**changes):
        with open(path, "w") as f:
            json.dump({**spec, **changes}, f)
        return load_corpus(path)

    for target, tokenizer in (("de", "13a"), ("ja", "ja-mecab"), ("zh", "zh"),
                              ("ko", "ko-mecab"), ("fr", "13a")):
        (tmp_path / "data-bin" / f"test.en-{target}.en.bin").write_bytes(b"")
        assert load(target=target).bleu_tokenize == tokenizer
    assert load(target="ja", bleu_tokenize="char").bleu_tokenize == "char"
    with pytest.raises(CorpusError, match=r"corpus.json: unknown key\(s\) bleu_tokenizer; "
                                          r"known: name, source, target, data_bin, test_sets"):
        load(bleu_tokenizer="ja-mecab")
    with pytest.raises(CorpusError, match=r"corpus.json: bleu_tokenize 'mecab': one of "
                                          r"sacreBLEU's none, zh, 13a, intl, char, ja-mecab"):
        load(bleu_tokenize="mecab")
    tests = [{**spec["test_sets"][0], "refrence_tok": "test.de"}]
    with pytest.raises(CorpusError, match=r"corpus.json: test_sets\[0\]: unknown key\(s\) "
                                          r"refrence_tok; known: name, subset, reference"):
        load(test_sets=tests)
    with pytest.raises(CorpusError, match=r"corpus.json: test_sets is a list of objects"):
        load(test_sets="test.de")


def test_flattening_reads_each_backbones_last_epoch():
    """Where no loss floor is known, the budget's check is the backbone's last epoch: its
    relative fall in valid ppl per seed, flattened only when every seed's is under 2 % and
    none ended 2 % or more above its lowest."""
    def run(seed, curve):
        return {"seed": seed, "scores": {"valid_ppl_by_epoch": curve}}

    lines = tables.flattening_lines({
        "attentional_rnn": [run(1, [30.0, 10.0, 9.9]), run(2, [30.0, 10.0, 9.0])],
        "syntax_transformer": [run(1, [20.0, 8.0, 7.92])],
        "sa_nmt_shared": [run(1, [30.0, 40.0])],  # not a backbone: no line
        "lstm": [run(1, [5.0])]})
    assert lines == [
        "* Has `attentional_rnn` flattened? Valid ppl over its last epoch: 10.00 → 9.90 "
        "(-1.0 %, seed 1), 10.00 → 9.00 (-10.0 %, seed 2): **still falling** (2 % or more "
        "in the last epoch); a longer budget may change the table.",
        "* Has `syntax_transformer` flattened? Valid ppl over its last epoch: 8.00 → 7.92 "
        "(-1.0 %, seed 1): every seed under 2 %, flattened at this budget."]
    # KFTT's syntax_transformer seed 1: lowest 64.60 at epoch 10, 71.04 at the 16th
    kftt = [370.84, 160.72, 106.20, 87.05, 80.62, 72.92, 68.02, 69.16, 66.17, 64.60,
            69.10, 69.06, 68.77, 66.84, 68.83, 71.04]
    assert tables.flattening_lines({"syntax_transformer": [run(1, kftt)]}) == [
        "* Has `syntax_transformer` flattened? Valid ppl over its last epoch: 68.83 → 71.04 "
        "(+3.2 %, seed 1): **past its best**, lowest 64.60 at epoch 10, +10.0 % at the last "
        "(seed 1): the recipe overfits (or its lr is too high) at this budget."]


def test_divergence_names_the_runs_whose_last_epoch_rose_above_their_best():
    """A run is named when its last valid ppl is at least 1.5 times its lowest, with the
    decoded checkpoint's epoch; a record without it names every epoch at the lowest rounded
    ppl (tree2seq seed 1: 1.10 at epochs 3, 5, 6, its best checkpoint from epoch 5)."""
    def run(seed, curve, checkpoint="best", decoded_epoch=None):
        return {"seed": seed, "scores": {"valid_ppl_by_epoch": curve,
                                         "decoded_epoch": decoded_epoch},
                "settings": {"checkpoint": checkpoint}}

    lines = tables.divergence_lines({
        "attentional_rnn": [run(1, [3.0, 1.1, 1.09, 1.63]), run(2, [3.0, 1.1, 1.7])],
        "sa_nmt_shared": [run(2, [1.79, 1.1, 118.14, 316.92])],
        "syntax_transformer": [run(1, [9.0, 4.0, 6.5], "average of the last 2 epochs")],
        "tree2seq": [run(1, []), run(2, [2.3, 1.1, 1.1, 1.11, 1.1, 2.04]),
                     run(3, [2.3, 1.1, 1.1, 1.11, 1.1, 2.04], decoded_epoch=5)]})
    assert lines == [
        "* **Diverged late** (valid ppl after the last epoch ≥ 1.5 × the best; the checkpoint "
        "decoded): `attentional_rnn` seed 2 (1.10 at epoch 2 → 1.70; best), `sa_nmt_shared` "
        "seed 2 (1.10 at epoch 2 → 316.92; best), `syntax_transformer` seed 1 (4.00 at "
        "epoch 2 → 6.50; average of the last 2 epochs), `tree2seq` seed 2 (1.10 at epochs "
        "2, 3, 5 → 2.04; best), `tree2seq` seed 3 (1.10 at epoch 5 → 2.04; best). A best "
        "checkpoint comes from before the divergence; an average of the last epochs may "
        "not."]
    assert tables.divergence_lines({"attentional_rnn": [run(1, [3.0, 1.1, 1.2])]}) == []


def test_read_records_notes_strays_but_not_the_significance_cache(tmp_path, capsys):
    """A stray JSON file beside the records is named in a note; the paired tests' cache,
    which every rendering writes there, is not a stray."""
    record = {"method": "attentional_rnn", "seed": 1, "settings": {},
              "scores": {"tests": {}}}
    (tmp_path / "attentional_rnn.seed1.json").write_text(json.dumps(record))
    (tmp_path / records.SIGNIFICANCE_CACHE).write_text("{}")
    (tmp_path / "notes.json").write_text("[]")
    found = records.read_records(str(tmp_path))
    assert [(r["method"], r["seed"]) for r in found] == [("attentional_rnn", 1)]
    err = capsys.readouterr().err
    assert f"{tmp_path}/notes.json is not a run record" in err
    assert "significance.json" not in err


def test_a_kftt_rendering_without_its_data_bin_reads_corpus_and_tokenizer_from_the_records(
        tmp_path):
    """``--render-only --corpus kftt`` without ``--data-bin``: the section's name and the
    corpus description are the records', and the paired tests come from the cache, keyed
    by the tokenizer the records' sacreBLEU signatures name (ja-mecab: not 13a)."""
    from fairseq_syntax.experiment.comparisons import PairedTests, recorded_tokenize

    rng = np.random.default_rng(1)
    words = "彼 は 寺 を 建て た 。 京都 の 僧 が 年 に".split()
    refs = [" ".join(rng.choice(words, size=rng.integers(4, 12))) for _ in range(80)]
    (tmp_path / "ref.ja").write_text("".join(r + "\n" for r in refs))
    corpus = Corpus("kftt-en-ja", "en", "ja", str(tmp_path), [TestSet("test", "test", str(
        tmp_path / "ref.ja"))], "KFTT en→ja (17,472 training pairs)", bleu_tokenize="char")
    records_dir = tmp_path / "records"
    records_dir.mkdir()
    args = experiment.parse_args(["--corpus", "multi30k", "--render-only"])
    runs = []
    for key, share in (("attentional_rnn", 0.4), ("attentional_rnn+supervised_attention", 0.2)):
        hyps = {"test": drop_words(refs, share, len(key))}
        bleu = BLEU(tokenize="char")
        bleu.corpus_score(hyps["test"], [refs])  # a signature needs a score first
        signature = bleu.get_signature().format()
        record = _record(args, corpus.description, key, 1,
                         {"tests": {"test": {"bleu": 1.0}}, "bleu_signature": signature})
        record["settings"].update(corpus="kftt-en-ja", corpus_description=corpus.description)
        path = methods.record_path(str(records_dir), key, 1)
        with open(path, "w") as f:
            json.dump(record, f)
        records.write_hypotheses(path, hyps)
        runs.append(records.read_record(path))
    assert "tok:char" in runs[0]["scores"]["bleu_signature"]
    assert recorded_tokenize(runs) == "char" and recorded_tokenize([]) == "13a"
    assert recorded_tokenize([{"scores": {
        "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:ja-mecab-0.996-IPA|smooth:exp"}}]) \
        == "ja-mecab"
    with_refs = PairedTests("kftt-en-ja", corpus, str(records_dir), "char")
    tested = with_refs.of(*runs)
    with_refs.save()
    assert set(tested) == {("test", "bleu"), ("test", "chrf")}
    cached = PairedTests("kftt-en-ja", None, str(records_dir), recorded_tokenize(runs))
    assert cached.of(*runs) == tested
    assert PairedTests("kftt-en-ja", None, str(records_dir), "13a").of(*runs) == {}

    argv = ["--corpus", "kftt", "--render-only", "--results-dir", str(records_dir)]
    rendering = experiment.parse_args(argv)
    assert rendering.corpus_name == "kftt-en-ja"
    assert corpora.corpus_description(rendering) == corpus.description
    with pytest.raises(SystemExit, match="--data-bin .* or --results-dir"):
        experiment.parse_args(argv[:3])
    (records_dir / "lstm.seed1.json").write_text(json.dumps(
        _record(args, "Multi30k", "lstm", 1, {"tests": {}})))
    with pytest.raises(SystemExit, match="of 2 corpora \\(kftt-en-ja, multi30k\\)"):
        experiment.parse_args(argv)
