"""The German detokeniser (glue table) lives in the package: ``fairseq-syntax-tokenize
detokenize`` (the Multi30k recipe's) and the experiment call the same function, the
experiment without the repository's examples/ folder."""
import json
import subprocess

from sacrebleu.metrics import BLEU

from conftest import run_cli
from fairseq_syntax.evaluation.corpus import Corpus, TestSet
from fairseq_syntax.experiment import methods, scoring
from fairseq_syntax.syntax.detokenize import detokenize_line, read_glue_table

# '.' glues left, '(' right, '-' both ways, '!' exactly at the threshold, ',' below it
TABLE = {".": {"left": 1.0}, "(": {"right": 0.9}, "-": {"left": 0.6, "right": 0.6},
         "!": {"left": 0.5}, ",": {"left": 0.4}}
TOKENS = "Ein Mann ( alt ) spielt saftig - grünes Gras , schnell !".split()
TEXT = "Ein Mann (alt ) spielt saftig-grünes Gras , schnell!"  # worked by hand


def test_detokenize_line_glues_by_the_table():
    assert detokenize_line(TOKENS, TABLE) == TEXT
    assert detokenize_line(TOKENS, {}) == " ".join(TOKENS)  # unseen tokens: spaces
    assert detokenize_line(["(", "-"], TABLE, threshold=0.95) == "( -"


def test_example_command_line_writes_the_same_text(tmp_path):
    table, tok, out = tmp_path / "glue.de.json", tmp_path / "hyp.tok", tmp_path / "hyp"
    table.write_text(json.dumps(TABLE), encoding="utf-8")
    tok.write_text(" ".join(TOKENS) + "\nein Hund .\n", encoding="utf-8")
    run_cli(["fairseq-syntax-tokenize", "detokenize",
             "--glue-table", str(table), str(tok), str(out)], cwd=str(tmp_path))
    assert out.read_text(encoding="utf-8") == TEXT + "\nein Hund.\n"
    assert read_glue_table(str(table)) == TABLE


def test_experiment_detokenises_multi30k_hypotheses_in_process(tmp_path, monkeypatch):
    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a subprocess was started: {args}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    (tmp_path / "glue.de.json").write_text(json.dumps(TABLE), encoding="utf-8")
    (tmp_path / "generate.out").write_text(
        "S-1\tein Hund\nH-1\t-0.2\tein Hund .\nS-0\tx\nH-0\t-0.5\t" + " ".join(TOKENS) + "\n",
        encoding="utf-8")
    refs = ["Ein Mann (alt) spielt saftig-grünes Gras, schnell!", "Ein Hund."]
    (tmp_path / "ref").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (tmp_path / "ref.tok").write_text(" ".join(TOKENS) + "\nEin Hund .\n", encoding="utf-8")
    test = TestSet("test_2016_flickr", "test", str(tmp_path / "ref"), str(tmp_path / "ref.tok"))
    corpus = Corpus("multi30k", "en", "de", "bin", [test],
                    detokenizer="glue:" + str(tmp_path / "glue.de.json"), scores=["ribes"])
    row = methods.Row("m", "m")
    scoring.score_test_set(row, corpus, test, str(tmp_path / "generate.out"), str(tmp_path / "test"))
    hyps = [TEXT, "ein Hund."]
    assert (tmp_path / "test.hyp").read_text(encoding="utf-8") == "".join(h + "\n" for h in hyps)
    assert row.tests["test_2016_flickr"]["bleu"] == BLEU().corpus_score(hyps, [refs]).score
    assert row.hypotheses["test_2016_flickr"] == hyps
    from fairseq_syntax.syntax.ribes import corpus_ribes  # on the model's own words

    assert row.tests["test_2016_flickr"]["ribes"] == 100 * corpus_ribes(
        [[TOKENS, "Ein Hund .".split()]], [TOKENS, "ein Hund .".split()])
    assert row.ribes_signature.startswith("nrefs:1|tok:recipe-words|")
    # kept for the paired RIBES test: the words RIBES scored, in the test's order
    assert row.hypotheses_tok["test_2016_flickr"] == [" ".join(TOKENS), "ein Hund ."]
