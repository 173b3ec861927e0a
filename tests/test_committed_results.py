"""The results the project publishes come back from its run records: each committed
section of docs/RESULTS.md and docs/same-cpu/RESULTS.md renders again, to the character
(the rendering date aside), from the records committed beside it with the command that
renders it, and every interval the README quotes among its verdicts is a cell of those
sections."""
import pathlib
import re
import shutil

import pytest

from fairseq_syntax.cli import experiment
from fairseq_syntax.experiment.tables import read_sections as sections

ROOT = pathlib.Path(__file__).resolve().parents[1]
SAME_CPU_MULTI30K = ("attentional_rnn,lstm,tree2seq,sa_nmt_shared,sdatt_double_syntax,"
                     "syntax_transformer,fairseq_transformer,"
                     "syntax_transformer+supervised_attention,transformer_align,"
                     "tree2seq_transformer")
SAME_CPU_KFTT = ("attentional_rnn,attentional_rnn+supervised_attention,"
                 "syntax_transformer,syntax_transformer+supervised_attention,transformer_align,"
                 "tree2seq_transformer,sdatt_double_transformer")
GPU_MULTI30K = ("syntax_transformer,fairseq_transformer,syntax_transformer+supervised_attention,"
                "transformer_align,pascal_transformer,sa_transformer,sdatt_transformer,"
                "sdatt_double_transformer,tree2seq_transformer")
# (results file, section, the options that render it; docs name the same commands)
RENDERINGS = [
    ("docs/RESULTS.md", "synthetic", ["--corpus", "synthetic"]),
    ("docs/RESULTS.md", "multi30k", ["--corpus", "multi30k"]),
    ("docs/RESULTS.md", "multi30k-gpu", [
        "--corpus", "multi30k", "--gpu", "--results-dir", "docs/results/multi30k-gpu",
        "--methods", GPU_MULTI30K, "--transformer-recipe",
        "epochs=10,lr=0.002,lr_scheduler=inverse_sqrt,updates=None"]),
    ("docs/RESULTS.md", "kftt-en-ja", [
        "--corpus", "kftt", "--results-dir", "docs/results/kftt-en-ja"]),
    ("docs/same-cpu/RESULTS.md", "multi30k", [
        "--corpus", "multi30k", "--results-dir", "docs/results/multi30k-same-cpu",
        "--methods", SAME_CPU_MULTI30K]),
    ("docs/same-cpu/RESULTS.md", "kftt-en-ja", [
        "--corpus", "kftt", "--results-dir", "docs/results/kftt-en-ja-same-cpu",
        "--methods", SAME_CPU_KFTT]),
]
RENDERED_ON = re.compile(r"(Rendered by `fairseq-syntax-experiment` on )\d{4}-\d{2}-\d{2}")
INTERVAL = re.compile(r"([+−-]?\d+\.\d+) \[([+−-]?\d+\.\d+), ([+−-]?\d+\.\d+)\]")


def quoted_intervals(text: str) -> list:
    """Every "Δ [low, high]" in ``text``, written as the tables write it (ASCII minus)."""
    return [f"{m[1]} [{m[2]}, {m[3]}]".replace("−", "-") for m in INTERVAL.finditer(text)]


def readme_verdicts() -> str:
    """The README's "What is shown so far": its tables and its prose, up to the next heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("### What is shown so far")
    return text[start:text.index("\n## ", start)]


@pytest.mark.parametrize("results,section,options", RENDERINGS,
                         ids=[f"{r.removeprefix('docs/')}:{s}" for r, s, _ in RENDERINGS])
def test_each_committed_section_renders_again_from_its_records(results, section, options,
                                                               tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the sections name their folders relative to the checkout
    copy = tmp_path / "RESULTS.md"
    shutil.copy(ROOT / results, copy)
    assert experiment.main([*options, "--render-only", "--results", str(copy)]) == 0
    committed = sections((ROOT / results).read_text(encoding="utf-8"))[section]
    rendered = sections(copy.read_text(encoding="utf-8"))[section]
    assert RENDERED_ON.search(committed)
    assert RENDERED_ON.sub(r"\1DATE", rendered) == RENDERED_ON.sub(r"\1DATE", committed)


def test_every_interval_the_readme_quotes_is_a_cell_of_a_rendered_section():
    rendered = "".join(
        body for results in ("docs/RESULTS.md", "docs/same-cpu/RESULTS.md")
        for body in sections((ROOT / results).read_text(encoding="utf-8")).values())
    quoted = quoted_intervals(readme_verdicts())
    assert len(quoted) > 60
    assert [q for q in quoted if q not in rendered] == []


def test_the_interval_pattern_reads_the_prose_and_the_tables_alike():
    assert quoted_intervals("BLEU **+0.90 [+0.28, +1.53]**, −0.50 [−1.63, +0.63]; "
                            "| -0.34 [-1.06, +0.38] p=0.179 (1/3) | 38.72 ± 0.31") == [
        "+0.90 [+0.28, +1.53]", "-0.50 [-1.63, +0.63]", "-0.34 [-1.06, +0.38]"]
    assert "+0.60 [-0.51, +1.70]" in quoted_intervals(readme_verdicts())
