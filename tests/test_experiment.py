"""fairseq-syntax-experiment: the results table holds what the scorers measure on the
outputs it wrote, and a run rewrites only its own corpus section."""
import json
import re

from sacrebleu.metrics import BLEU

from conftest import run_cli
from fairseq_syntax.cli.experiment import update_results
from fairseq_syntax.syntax.ribes import corpus_ribes
from fairseq_syntax.syntax.tree_scores import read_gold_trees, score_corpus
from fairseq_syntax.data.synthetic_corpus import agreement_counts
from fairseq_syntax.syntax.conllu_io import read_conllu_trees


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


def test_experiment_table_equals_scorers(synthetic_raw, synthetic_databin, tmp_path):
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nintro kept\n\n<!-- multi30k:begin -->\nold m30k\n"
                       "<!-- multi30k:end -->\n\n<!-- synthetic:begin -->\nstale\n"
                       "<!-- synthetic:end -->\n")
    work = tmp_path / "work"
    proc = run_cli([
        "fairseq-syntax-experiment", "--corpus", "synthetic", "--workdir", str(work),
        "--data-bin", str(synthetic_databin), "--raw", str(synthetic_raw),
        "--methods", "attentional_rnn,sa_nmt_shared", "--updates", "4",
        "--embed-dim", "16", "--encoder-hidden", "16", "--decoder-hidden", "32",
        "--max-tokens", "800", "--jobs", "2", "--results", str(results),
    ])
    assert "[2/2]" in proc.stderr
    text = results.read_text()
    assert "intro kept" in text and "old m30k" in text and "stale" not in text
    section = text.split("<!-- synthetic:begin -->")[1].split("<!-- synthetic:end -->")[0]
    assert "--methods attentional_rnn,sa_nmt_shared" in section  # the exact command
    rows = _table(section)
    assert set(rows) == {"attentional_rnn", "sa_nmt_shared"}

    refs = _lines(synthetic_raw / "test.vf")
    gold = read_gold_trees(str(synthetic_raw / "test.en.conllu"))
    for key in rows:
        run = work / "runs" / key
        bleu_cell, ribes_cell, agree_cell, aer_cell, p_cell, r_cell, tree_cell, _ = rows[key]
        hyps = _lines(run / "test.hyp.tok")
        assert len(hyps) == len(refs)
        # the hypotheses are fairseq-generate's H- lines, in sentence order
        generated = {}
        for line in _lines(run / "generate.test.out"):
            if line.startswith("H-"):
                sid, _, hyp = line.split("\t")
                generated[int(sid[2:])] = hyp
        assert hyps == [generated[i] for i in range(len(refs))]
        bleu = BLEU()
        assert bleu_cell == f"{bleu.corpus_score(hyps, [refs]).score:.2f}"
        assert f"`{bleu.get_signature()}`" in section
        ribes = 100 * corpus_ribes([[r.split() for r in refs]], [h.split() for h in hyps])
        assert ribes_cell == f"{ribes:.2f}"
        correct, total = agreement_counts(hyps, refs)
        assert agree_cell == f"{100 * correct / total:.2f}"
        scores = json.loads(run_cli([
            "fairseq-syntax-score-alignments", "--generate", str(run / "generate.align.out"),
            "--gold", str(synthetic_raw / "test.align"), "--json"]).stdout)
        assert scores["sentences"] == len(refs)
        assert [aer_cell, p_cell, r_cell] == [
            f"{100 * scores[k]:.2f}" for k in ("aer", "precision", "recall")]
        if key == "sa_nmt_shared":
            induced = read_conllu_trees(str(run / "induced.test.conllu"))
            tree = score_corpus([t.heads for t in induced], gold)
            assert tree_cell == (f"{tree.model.directed_accuracy:.1f} / "
                                 f"{tree.model.undirected_accuracy:.1f}")
            assert (f"left-branching {tree.left.directed_accuracy:.1f} / "
                    f"{tree.left.undirected_accuracy:.1f}") in section
        else:
            assert tree_cell == "–"
