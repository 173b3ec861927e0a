"""The committed run records hold no machine paths (issue 42 item 5): work folders,
data-bins and checkouts are placeholders (``$WORKDIR``, ``$DATA_BIN``, ...) or relative."""
import json
import pathlib
import re

from fairseq_syntax.experiment.records import portable, portable_record

RESULTS = pathlib.Path(__file__).resolve().parents[1] / "docs" / "results"
# a "/" that starts a path: not inside a word, a placeholder's path or a relative path
ABSOLUTE = re.compile(r"(?<![\w$.)}~/-])/[\w.+~-]+")


def absolute_paths(value):
    if isinstance(value, dict):
        return [p for v in value.values() for p in absolute_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in absolute_paths(v)]
    return ABSOLUTE.findall(value) if isinstance(value, str) else []


def test_the_pattern_finds_absolute_paths_and_only_them():
    assert absolute_paths({"a": ["x /work/exp/run", "--gold=/tmp/t", "'/home/u'"],
                           "b": "(/root/x) /data/c /mnt/z"}) == [
        "/work", "/tmp", "/home", "/root", "/data", "/mnt"]
    assert absolute_paths(["$WORKDIR/runs/a/seed1", "./docs/RESULTS.md", "12/500",
                           "$(fairseq-syntax-user-dir)", "examples/multi30k/prepare.sh"]) == []


def test_no_committed_record_holds_an_absolute_path():
    records = sorted(RESULTS.rglob("*.json"))
    assert len(records) > 50
    offenders = {str(p.relative_to(RESULTS)): found for p in records
                 if (found := absolute_paths(json.loads(p.read_text(encoding="utf-8"))))}
    assert offenders == {}


def test_an_old_record_is_rewritten_from_its_own_fields():
    old = {"run_dir": "/w/exp/runs/tree2seq/seed2", "data_bin": "/d/m30k/data-bin",
           "experiment_command": "fairseq-syntax-experiment --corpus multi30k --data-bin "
           "/d/m30k/data-bin --workdir /w/exp --results-dir /r/results",
           "commands": {"induced_trees": "fairseq-syntax-induced-trees /d/m30k/data-bin --path "
                        "/w/exp/runs/tree2seq/seed2/checkpoint_best.pt --gold "
                        "/d/m30k/tok/test.en.conllu"}}
    new = portable_record(old)
    assert new["run_dir"] == "$WORKDIR/runs/tree2seq/seed2" and new["data_bin"] == "$DATA_BIN"
    assert new["experiment_command"].endswith(
        "--data-bin $DATA_BIN --workdir $WORKDIR --results-dir $RESULTS_DIR")
    assert new["commands"]["induced_trees"] == (
        "fairseq-syntax-induced-trees $DATA_BIN --path $WORKDIR/runs/tree2seq/seed2/"
        "checkpoint_best.pt --gold $CORPUS_DIR/tok/test.en.conllu")
    assert absolute_paths(new) == []


def test_portable_keeps_a_longer_name_that_starts_with_the_path():
    assert portable("/w/exp /w/exp2 /w/exp/x", {"$WORKDIR": "/w/exp"}) == \
        "$WORKDIR /w/exp2 $WORKDIR/x"
