"""fairseq-syntax-experiment: the results table holds what the scorers measure on the
outputs it wrote, one JSON record per finished run, a second invocation skips what is
done, and the table's mean ± sd and markers are numpy's over the records."""
import json
import os
import re

import numpy as np
import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from sacrebleu.metrics import BLEU

from conftest import run_cli
from fairseq_syntax.cli import experiment
from fairseq_syntax.cli.experiment import read_train_log, smoothed_loss_floor, update_results
from fairseq_syntax.data.synthetic_corpus import agreement_report
from fairseq_syntax.syntax.conllu_io import read_conllu_trees
from fairseq_syntax.syntax.tree_scores import read_gold_trees, score_corpus

# a tiny corpus the experiment generates itself (with the gen split) and a tiny model
EXPERIMENT = [
    "fairseq-syntax-experiment", "--corpus", "synthetic", "--train-size", "400",
    "--valid-size", "40", "--test-size", "37", "--gen-size", "20", "--vocab-size", "120",
    "--methods", "attentional_rnn,sa_nmt_shared", "--updates", "4", "--embed-dim", "16",
    "--encoder-hidden", "16", "--decoder-hidden", "32", "--max-tokens", "800", "--jobs", "2",
    "--step-time-batches", "2",
]
RECORD_KEYS = {"format", "method", "seed", "settings", "scores", "commands", "wall_seconds",
               "date", "host", "run_dir", "data_bin", "experiment_command"}


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def _table(text):
    """Rows of the first Markdown table in ``text`` as {method: cells}."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\| `([^`]+)` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def _section(path, corpus="synthetic"):
    return path.read_text().split(f"<!-- {corpus}:begin -->")[1].split(f"<!-- {corpus}:end -->")[0]


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
    log.write_text("{'config': 'python repr, skipped'}\n" + "".join(
        json.dumps({"epoch": e, "valid_loss": loss, "valid_ppl": ppl,
                    "valid_num_updates": str(100 * e)}) + "\n"
        for e, loss, ppl in ((1, "2.5", "4.1"), (2, "1.2", "1.3"), (3, "1.4", "1.5"))))
    assert read_train_log(str(log)) == {"valid_loss": 1.2, "valid_ppl": 1.3,
                                        "train_epochs": 3, "train_updates": 300}


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
    text = results.read_text()
    assert "intro kept" in text and "old m30k" in text and "stale" not in text
    section = _section(results)
    assert "--methods attentional_rnn,sa_nmt_shared" in section  # the exact command
    rows = _table(section)
    assert set(rows) == {"attentional_rnn", "sa_nmt_shared"}

    raw = work / "raw"
    gold = read_gold_trees(str(raw / "test.en.conllu"))
    assert [line.split()[1] for line in _lines(work / "prepare.log")
            if line.startswith("$ ")] == ["fairseq-syntax-preprocess"]
    for key, cells in rows.items():
        (seeds, bleu_cell, agree_cell, long_cell, gen_bleu_cell, gen_agree_cell,
         gen_long_cell, aer_cell, tree_cell, ppl_cell, loss_cell, _) = cells
        assert seeds == "1"
        run = work / "runs" / key / "seed1"
        record = json.loads((experiment_run["records"] / f"{key}.seed1.json").read_text())
        assert set(record) == RECORD_KEYS
        assert (record["method"], record["seed"]) == (key, 1)
        assert record["settings"]["arch"] == key and record["settings"]["lr"] == 0.003
        assert "--seed 1 " in record["commands"]["train"]
        assert '--user-dir "$(fairseq-syntax-user-dir)"' in record["commands"]["train"]
        scores = record["scores"]
        # the project's own tools ran as Python functions, only fairseq's as commands
        commands = {line.split()[1] for line in _lines(run / "log.txt") if line.startswith("$ ")}
        assert commands == {"fairseq-train", "fairseq-generate"}
        for split, prefix, subset, cell_bleu, cell_agree, cell_long in (
                ("test", "", "test", bleu_cell, agree_cell, long_cell),
                ("gen", "gen_", "test1", gen_bleu_cell, gen_agree_cell, gen_long_cell)):
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
            bleu = BLEU()
            assert cell_bleu == f"{bleu.corpus_score(hyps, [refs]).score:.2f}"
            assert scores[prefix + "bleu"] == bleu.corpus_score(hyps, [refs]).score
            assert f"`{bleu.get_signature()}`" in section
            trees = read_conllu_trees(str(raw / f"{split}.en.conllu"))
            report = agreement_report(hyps, refs, trees)
            assert cell_agree == f"{report.accuracy:.2f}"
            assert scores[prefix + "agreement_counts"] == f"{report.correct}/{report.total}"
            assert cell_long == _percent(report.long_distance_accuracy
                                         if report.long_distance_total else None)
        alignment = json.loads(run_cli([
            "fairseq-syntax-score-alignments", "--generate", str(run / "generate.align.out"),
            "--gold", str(raw / "test.align"), "--json"]).stdout)
        assert alignment["sentences"] == 37
        assert aer_cell == f"{100 * alignment['aer']:.2f}"
        assert [scores[k] for k in ("precision", "recall")] == pytest.approx(
            [100 * alignment[k] for k in ("precision", "recall")])
        # the validation of lowest loss in fairseq-train's JSON log, and its checkpoint
        valid = [json.loads(line) for line in _lines(run / "train.log.jsonl")
                 if line.startswith("{") and "valid_ppl" in line]
        best = min(valid, key=lambda v: float(v["valid_loss"]))
        assert ppl_cell == f"{float(best['valid_ppl']):.2f}"
        assert loss_cell == f"{float(best['valid_loss']):.3f}"
        assert f"--path {run}/checkpoint_best.pt " in record["commands"]["generate_test"]
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
    results, records, argv = (experiment_run[k] for k in ("results", "records", "argv"))
    before = results.read_text()
    backbone = records / "attentional_rnn.seed1.json"
    first = json.loads(backbone.read_text())
    proc = run_cli(argv)  # same settings: every run is skipped, the same table
    assert "[skip] attentional_rnn seed 1" in proc.stderr
    assert "[skip] sa_nmt_shared seed 1" in proc.stderr and "[start]" not in proc.stderr
    assert results.read_text() == before
    assert json.loads(backbone.read_text()) == first

    # a record made with other settings is not this experiment's: that run is done again
    changed = dict(first, settings=dict(first["settings"], lr=0.1))
    backbone.write_text(json.dumps(changed))
    args = experiment.parse_args(argv[1:])
    counted = experiment.table_records(experiment.read_records(str(records)), args,
                                       experiment.corpus_description(args))
    assert set(counted) == {"sa_nmt_shared"}
    proc = run_cli(argv)
    assert "[start] attentional_rnn seed 1" in proc.stderr
    assert "[skip] sa_nmt_shared seed 1" in proc.stderr
    assert "[start] sa_nmt_shared" not in proc.stderr
    redone = json.loads(backbone.read_text())
    assert redone["settings"] == first["settings"]
    assert redone["date"] >= first["date"]
    assert _table(_section(results))["attentional_rnn"][0] == "1"


def _record(args, description, key, seed, scores):
    method = next(m for m in experiment.all_methods() if key in experiment.method_keys([m]))
    return {"format": experiment.RECORD_FORMAT, "method": key, "seed": seed,
            "settings": experiment.run_settings(method, key, args, description),
            "scores": scores, "commands": {}, "wall_seconds": 10.0,
            "date": "2026-01-0%dT00:00:00+00:00" % seed, "host": {"cpu": "test", "device": "cpu"},
            "run_dir": "runs", "data_bin": "bin", "experiment_command": "by hand"}


def test_render_only_mean_sd_and_markers(tmp_path):
    records, results = tmp_path / "records", tmp_path / "RESULTS.md"
    records.mkdir()
    argv = ["--corpus", "synthetic", "--render-only", "--results-dir", str(records),
            "--results", str(results), "--methods",
            "attentional_rnn,sdatt_syntax,sa_nmt_shared,lookahead_concat"]
    args = experiment.parse_args(argv)
    description = experiment.corpus_description(args)
    bleu = {"attentional_rnn": [10.0, 11.5, 12.1],   # mean 11.2, sd 1.08
            "sdatt_syntax": [20.3, 21.0, 22.4],      # far above: marked
            "sa_nmt_shared": [11.0, 13.2, 10.7]}     # within 2 sd: not marked
    agreement = {"attentional_rnn": [90.0, 91.0, 92.0], "sdatt_syntax": [90.5, 91.5, 89.0],
                 "sa_nmt_shared": [91.0, 90.0, 93.0]}
    for key in bleu:
        for seed in (1, 2, 3):
            scores = {"bleu": bleu[key][seed - 1], "agreement": agreement[key][seed - 1],
                      "train_seconds": 10.0 * seed}
            if key == "sa_nmt_shared":
                scores.update(da=10.0 + seed, ua=20.0 + seed)
            path = experiment.record_path(str(records), key, seed)
            with open(path, "w") as f:
                json.dump(_record(args, description, key, seed, scores), f)
    # one seed only: its value alone, never marked however far from the backbone
    with open(experiment.record_path(str(records), "fa_nmt", 1), "w") as f:
        json.dump(_record(args, description, "fa_nmt", 1, {"bleu": 50.0}), f)
    # other settings (another learning rate): not counted
    other = _record(args, description, "tree2seq", 1, {"bleu": 99.0})
    other["settings"]["lr"] = 0.5
    with open(experiment.record_path(str(records), "tree2seq", 1), "w") as f:
        json.dump(other, f)

    assert experiment.main(argv) == 0
    section = _section(results)
    rows = _table(section)
    assert list(rows) == ["attentional_rnn", "fa_nmt", "lookahead_concat", "sa_nmt_shared",
                          "sdatt_syntax"]  # the plugin's order; tree2seq not counted

    def cell(values, bold):
        text = f"{np.mean(values):.2f} ± {np.std(values, ddof=1):.2f}"
        return f"**{text}**" if bold else text

    assert rows["attentional_rnn"][:3] == ["3", cell(bleu["attentional_rnn"], False),
                                           cell(agreement["attentional_rnn"], False)]
    assert rows["sdatt_syntax"][:3] == ["3", cell(bleu["sdatt_syntax"], True),
                                        cell(agreement["sdatt_syntax"], False)]
    assert rows["sa_nmt_shared"][:3] == ["3", cell(bleu["sa_nmt_shared"], False),
                                         cell(agreement["sa_nmt_shared"], False)]
    assert rows["sa_nmt_shared"][8] == "12.0 ± 1.0 / 22.0 ± 1.0"  # DA / UA, no backbone value
    assert rows["sa_nmt_shared"][-1] == "20"  # mean train seconds
    assert rows["fa_nmt"][:2] == ["1", "50.00"]
    assert rows["lookahead_concat"][:2] == ["–", "not run yet"]
    assert "ddof=1" in section and "**Bold**" in section
    assert "from the 10 run records" in section
    # a second rendering from the same records is the same section
    assert experiment.main(argv) == 0
    assert _section(results) == section


def test_multi30k_defaults_and_train_command():
    args = experiment.parse_args(["--corpus", "multi30k", "--workdir", "w", "--seeds", "1,2,3"])
    assert args.seeds == [1, 2, 3]
    assert (args.epochs, args.updates, args.embed_dim, args.encoder_hidden,
            args.decoder_hidden, args.dropout, args.lr, args.clip_norm, args.label_smoothing,
            args.max_tokens) == (12, None, 256, 256, 512, 0.3, 0.002, 5.0, 0.1, 4000)
    keys = experiment.method_keys(experiment.select_methods(args.methods))
    assert sorted(keys) == sorted([
        "attentional_rnn", "sdatt_double_syntax", "lookahead_concat", "sa_nmt_hard",
        "sa_nmt_shared", "tree2seq", "tree2seq+length_prior",
        "attentional_rnn+supervised_attention"])
    assert args.results_dir.endswith("docs/results/multi30k")
    method = experiment.Method("attentional_rnn", "attentional_rnn")
    cmd = experiment.train_command(method, experiment.Corpus("multi30k", "bin", {}), args,
                                   "save", seed=3)
    line = " ".join(cmd)
    assert "--max-epoch 12" in line and "--max-update" not in line
    assert "--disable-validation" not in line
    assert "--seed 3 " in line and "--clip-norm 5.0" in line and "--lr 0.002" in line
    assert "--log-format json --log-file save/train.log.jsonl" in line
    synthetic = experiment.parse_args(["--corpus", "synthetic", "--workdir", "w"])
    assert (synthetic.updates, synthetic.epochs, synthetic.clip_norm, synthetic.seeds) == (
        2400, None, 1.0, [1])
    assert experiment.record_path("d", "tree2seq+length_prior", 2) == \
        "d/tree2seq_length_prior.seed2.json"


def test_a_method_with_model_args_trains_with_them_and_records_them():
    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", "w"])
    (method,) = experiment.select_methods("sdatt_double_syntax+gaussian_weights")
    cmd = experiment.train_command(method, experiment.Corpus("synthetic", "bin", {}), args,
                                   "save", seed=1)
    assert cmd[cmd.index("--arch"):cmd.index("--arch") + 4] == [
        "--arch", "sdatt_double_syntax", "--syntax-gaussian", "weights"]
    settings = experiment.run_settings(method, method.key, args, "corpus")
    assert settings["model_args"] == ["--syntax-gaussian", "weights"]
    # methods without model options keep the settings their records were written with
    (plain,) = experiment.select_methods("sdatt_double_syntax")
    assert "model_args" not in experiment.run_settings(plain, plain.key, args, "corpus")
    assert settings["arch"] == plain.arch and settings["method"] != plain.key


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

    monkeypatch.setattr(experiment, "generate_corpus", fake_corpus)
    monkeypatch.setattr(experiment, "run_tool", fake_tool)
    experiment.prepare_synthetic(args)
    assert calls == ["generate_corpus", "fairseq-syntax-preprocess"]
    stamp = json.loads((tmp_path / "corpus.json").read_text())
    assert stamp["side_files"] == FORMAT_VERSION
    calls.clear()
    experiment.prepare_synthetic(args)  # same settings: reused
    assert calls == []
    stamp["side_files"] = FORMAT_VERSION - 1  # a data-bin of the previous format
    (tmp_path / "corpus.json").write_text(json.dumps(stamp))
    experiment.prepare_synthetic(args)
    assert calls == ["generate_corpus", "fairseq-syntax-preprocess"]


def test_an_interrupted_run_resumes_from_its_checkpoint_only_with_the_same_command(
        tmp_path, monkeypatch):
    args = experiment.parse_args(["--corpus", "synthetic", "--workdir", str(tmp_path)])
    (method,) = experiment.select_methods("attentional_rnn")
    corpus = experiment.Corpus("synthetic", "bin", {})
    trained = []

    def fake_tool(cmd, log_path, env, stdout_path=None):
        trained.append(os.path.exists(os.path.join(save, "checkpoint_last.pt")))
        raise RuntimeError("stop after the training command")

    monkeypatch.setattr(experiment, "run_tool", fake_tool)
    save = experiment.run_dir(args, method.key, 1)
    experiment.run_method(method, 1, corpus, args, {})  # a fresh run writes its stamp
    open(os.path.join(save, "checkpoint_last.pt"), "w").close()  # interrupted after an epoch
    experiment.run_method(method, 1, corpus, args, {})
    stamp = json.loads(open(os.path.join(save, experiment.RUN_STAMP)).read())
    stamp["train_seconds"] = 1234.5  # its training finished: decoded again, not trained
    open(os.path.join(save, experiment.RUN_STAMP), "w").write(json.dumps(stamp))
    (row, _, _), = experiment.run_method(method, 1, corpus, args, {})
    assert row.train_seconds == 1234.5 and trained == [False, True]  # no fairseq-train
    args.lr = 0.001  # another command: the old checkpoint must not be resumed
    (row, _, _), = experiment.run_method(method, 1, corpus, args, {})
    assert trained == [False, True, False]
    assert row.error == "stop after the training command"
