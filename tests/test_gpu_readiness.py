"""fairseq-syntax-gpu-readiness on the CPU with the tiny preset: a row per architecture,
numbers that follow from their definitions, fp16 skipped with a note."""
import concurrent.futures
import multiprocessing
import shlex
import shutil

import numpy as np
import pytest
from conftest import run_cli
from fairseq_syntax.cli.gpu_readiness import main
from fairseq_syntax.evaluation.architectures import rnn_architectures, transformer_architectures
from fairseq_syntax.evaluation import readiness

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS, WARMUP, MAX_TOKENS = 2, 1, 300


def _measure(databin):
    """The tiny preset measured on CPU, one thread (run in a process of its own)."""
    import torch

    torch.set_num_threads(1)
    # the loader's workers fork, as under fairseq-train on Linux: a spawned process starts
    # its own children by spawning, and each spawned worker imported fairseq again (about
    # 7 s a run, 165 of this fixture's 220 s)
    multiprocessing.set_start_method("fork", force=True)
    sizes = readiness.preset_sizes("tiny")
    runs = readiness.readiness_runs(shlex.split(sizes["rnn"]), shlex.split(sizes["transformer"]))
    return readiness.measure_readiness(databin, runs, ("fp32", "fp16", "bf16"),
                                       steps=STEPS, warmup=WARMUP, max_tokens=MAX_TOKENS,
                                       device="cpu", loader_batches=3)


@pytest.fixture(scope="module")
def measured(synthetic_databin):
    # in a spawned process: timing the loader forks DataLoader workers, after which torch's
    # thread pool in this process hung a later test's torch.linalg.inv (test_matrix_tree)
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        result = pool.submit(_measure, str(synthetic_databin)).result()
    return result, readiness.markdown(result)


def table_rows(table):
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    header = [c.strip() for c in lines[0].split("|")[1:-1]]
    return header, {cells[0]: cells for cells in
                    ([c.strip() for c in line.split("|")[1:-1]] for line in lines[2:])}


def number(cell):
    return float(cell.split()[0].replace(",", ""))


def test_a_row_per_architecture_and_reference(measured):
    result, table = measured
    _, rows = table_rows(table)
    archs = rnn_architectures() + transformer_architectures()
    assert list(rows) == ["lstm", *rnn_architectures(), "transformer", *transformer_architectures()]
    assert len(archs) >= 20 and "sdatt_double_syntax" in archs and "pascal_transformer" in archs
    assert rows["attentional_rnn"][1] == "lstm" and rows["syntax_transformer"][1] == "transformer"
    assert rows["tree2seq"][1] == "attentional_rnn" and rows["sa_transformer"][1] == "syntax_transformer"
    assert "failed" not in table, table  # every architecture trains in fp32 and bf16 on CPU


def test_fp16_is_skipped_on_cpu_with_a_note_and_bf16_measured(measured):
    result, table = measured
    header, _ = table_rows(table)
    assert result.precisions == ["fp32", "bf16"] and "fp16" in result.skipped
    assert "fp16: fairseq's --fp16 is a CUDA path" in table and "fp16 tok/s" not in header
    assert result.device.startswith("CPU") and f"GPU readiness on **{result.device}**" in table
    assert "peak RSS" in table and result.peak_rss_mb > 0


def test_every_run_counts_the_target_tokens_of_the_same_batches(measured, synthetic_databin):
    result, _ = measured
    # the batches, chosen as the library says: the first run's train split batched by size,
    # shuffled with the seed; target tokens = target length (eos included), fairseq's ntokens
    from fairseq_syntax.evaluation.step_time import build_run

    first = result.runs[0]
    task, *_ = build_run(str(synthetic_databin), first.spec, first.model_args)
    task.load_dataset("train")
    chosen = readiness._choose_batches(task, MAX_TOKENS, STEPS, seed=1)
    tokens = int(sum(task.dataset("train").tgt_sizes[b].sum() for b in chosen))
    for precision in result.precisions:
        for run in result.runs:
            t = result.timings[precision][run.spec]
            assert (t.steps, t.tokens) == (STEPS, tokens), (precision, run.spec)
            assert t.seconds > 0 and t.tokens_per_s == t.tokens / t.seconds
            assert t.batches_per_s == t.steps / t.seconds and t.peak_mb is None


def test_table_numbers_follow_from_the_measurements(measured):
    result, table = measured
    header, rows = table_rows(table)
    for run in result.runs:
        cells = rows[run.spec]
        for precision in result.precisions:
            at = header.index(f"{precision} tok/s")
            t = result.timings[precision][run.spec]
            assert number(cells[at]) == pytest.approx(t.tokens / t.seconds, abs=0.5)
            if run.reference:  # ratio = the run's tokens/s over its reference's, same precision
                ref = result.timings[precision][run.reference]
                expected = (t.tokens / t.seconds) / (ref.tokens / ref.seconds)
                assert number(cells[at + 1]) == pytest.approx(expected, abs=0.005)
                assert result.ratio(precision, run) == pytest.approx(expected)
            else:
                assert cells[at + 1] == "–"
        loader = result.loader[run.spec]
        assert loader.batches == 3 and loader.seconds > 0
        assert number(cells[header.index("loader b/s")]) == pytest.approx(3 / loader.seconds, abs=0.05)
        best = max(result.precisions, key=lambda p: result.timings[p][run.spec].batches_per_s)
        step_bps = result.timings[best][run.spec].batches_per_s
        assert cells[header.index("step b/s (fastest)")] == f"{step_bps:,.1f} ({best})"
        keeps = cells[header.index("loader keeps up")]
        assert keeps.startswith("yes" if loader.batches_per_s >= step_bps else "**no**")
        assert keeps.endswith(f"({loader.batches_per_s / step_bps:.1f}×)")
        assert cells[header.index("peak MB fp32/bf16")] == "–"


def test_the_command_writes_the_table_and_names_the_device(synthetic_databin, tmp_path):
    # in a process of its own, as a user runs it (in this one, torch's thread pool hung a
    # later test's torch.linalg.inv)
    assert shutil.which("fairseq-syntax-gpu-readiness")
    out = tmp_path / "readiness.md"
    # --time-budget spent at once: the first precision is measured, the next skipped with a
    # note and the loaders not timed, and the table is still written
    proc = run_cli(["fairseq-syntax-gpu-readiness", str(synthetic_databin), "--preset", "tiny",
                    "--cpu", "--archs", "sdatt_transformer", "--precisions", "fp32,bf16",
                    "--steps", "1", "--warmup", "0", "--loader-batches", "2",
                    "--time-budget", "0.001", "--out", str(out)])
    table = out.read_text()
    assert table.strip() in proc.stdout
    _, rows = table_rows(table)
    assert list(rows) == ["transformer", "syntax_transformer", "sdatt_transformer"]
    assert table.startswith("GPU readiness on **CPU: ") and "--archs sdatt_transformer" in table
    assert np.isfinite(number(rows["sdatt_transformer"][2]))
    assert "bf16: not measured: the time budget (0 s) would be spent" in table and "bf16 tok/s" not in table
    assert "sdatt_transformer, loader: not timed: the time budget" in table


def test_errors_say_what_to_fix(tmp_path, synthetic_databin):
    with pytest.raises(SystemExit, match="not a data-bin.*fairseq-syntax-preprocess"):
        main([str(tmp_path), "--cpu"])
    with pytest.raises(SystemExit, match="unknown architecture"):
        main([str(synthetic_databin), "--cpu", "--archs", "nope"])
    with pytest.raises(ValueError, match="unknown architecture.*choose from"):
        readiness.readiness_runs([], [], ["no_such_arch"])
    with pytest.raises(ValueError, match="unknown size preset"):
        readiness.preset_sizes("huge")


class _Criterion:
    """Stands in for a run's criterion: the step below records which run stepped which batch."""
    def __init__(self, spec):
        self.spec = spec

    def to(self, device):
        return self


def test_each_run_warms_up_on_every_timed_batch_before_it_is_timed(monkeypatch):
    # a batch shape first met while timed costs its GPU kernels' set-up to the run that meets
    # it first (on an H200, fairseq's transformer in fp16: 5,364 tok/s after 3 warm-up steps,
    # 43,187 after 10): with warmup = steps, every run has stepped every timed batch before
    # the round-robin starts
    import torch

    steps = []
    monkeypatch.setattr(readiness, "_optimizer", lambda model, precision: None)
    monkeypatch.setattr(readiness, "_prepare", lambda sample, device, precision: sample)
    monkeypatch.setattr(readiness, "_step", lambda model, criterion, optimizer, sample, precision:
                        steps.append((criterion.spec, sample)) or (1, False))
    runs = [readiness.Run("a", "rnn", None, []), readiness.Run("b", "rnn", "a", [])]
    built = {r.spec: readiness._Built(None, torch.nn.Linear(1, 1), _Criterion(r.spec),
                                      samples=[10, 11, 12, 13]) for r in runs}
    readiness._time_precision(built, runs, "fp32", torch.device("cpu"), warmup=4, steps=4,
                              progress=lambda message: None)
    assert steps == [("a", 10), ("a", 11), ("a", 12), ("a", 13), ("b", 10), ("b", 11), ("b", 12),
                     ("b", 13)] + [(spec, s) for s in (10, 11, 12, 13) for spec in "ab"]


def test_the_warm_up_defaults_to_every_timed_batch_once(monkeypatch):
    # measure_readiness (and the command, whose --warmup defaults to None) warm up `steps` steps
    seen = {}
    dataset = type("Dataset", (), {"__getitem__": lambda self, i: i, "collater": lambda self, items: items})()
    task = type("Task", (), {"dataset": lambda self, split: dataset})()
    monkeypatch.setattr(readiness, "_build", lambda databin, runs, progress:
                        {r.spec: readiness._Built(task, None, None) for r in runs})
    monkeypatch.setattr(readiness, "_choose_batches", lambda task, max_tokens, count, seed: [[0]] * count)
    monkeypatch.setattr(readiness, "_time_loader", lambda *a: readiness.Loader())
    monkeypatch.setattr(readiness, "_time_precision", lambda built, runs, precision, device, warmup,
                        steps, progress: seen.setdefault(precision, (warmup, steps)) and {})
    runs = [readiness.Run("a", "rnn", None, [])]
    readiness.measure_readiness("unused", runs, ("fp32",), steps=7, device="cpu")
    readiness.measure_readiness("unused", runs, ("bf16",), steps=7, warmup=2, device="cpu")
    assert seen == {"fp32": (7, 7), "bf16": (2, 7)}
    from fairseq_syntax.cli.gpu_readiness import get_parser
    assert get_parser().parse_args(["data-bin"]).warmup is None
