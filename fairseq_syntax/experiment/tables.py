"""The corpus sections of ``docs/RESULTS.md``, rendered from the run records: scores per
test set (mean ± sd over seeds), each method's difference from its backbone with its 95 %
interval (paired bootstrap per seed, Student-t over seeds; bold only where significant),
per-epoch valid ppl, and the figures."""
import datetime
import os
import re
import shlex
from dataclasses import dataclass
from typing import Collection, Dict, List, Optional, Sequence

from fairseq_syntax.evaluation.host import same_cpu
from fairseq_syntax.evaluation.positions import degenerated
from fairseq_syntax.evaluation.significance import Delta, interval, seed_mean

from .comparisons import Comparisons, SeedPairs, cpu_pairings, paired_scores
from .methods import (
    BACKBONE, TRANSFORMER_BACKBONE, all_methods, method_keys, subset_validated,
)
from .commands import alignment_head_args, run_settings
from .records import wall_seconds
from .tools import folder_lock, write_atomically


@dataclass
class Stat:
    """Mean and sample standard deviation (ddof=1; None under 2 values) of one score."""

    mean: Optional[float]
    sd: Optional[float]
    n: int

    @staticmethod
    def of(values: Sequence[Optional[float]]) -> "Stat":
        import numpy as np

        values = [float(v) for v in values if v is not None]
        if not values:
            return Stat(None, None, 0)
        sd = float(np.std(values, ddof=1)) if len(values) >= 2 else None
        return Stat(float(np.mean(values)), sd, len(values))


def fmt_stat(stat: Stat, digits: int) -> str:
    if stat.mean is None:
        return "–"
    return f"{stat.mean:.{digits}f}" + ("" if stat.sd is None else f" ± {stat.sd:.{digits}f}")


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def score_of(record: dict, name: str, test: Optional[str] = None):
    """A score of a record: of the test set ``test``, or one of the whole run."""
    scores = record["scores"]
    return (scores.get("tests", {}).get(test) or {}).get(name) if test else scores.get(name)


def test_label(name: str) -> str:
    """A test set's short name in a table header (Multi30k's test_2016_flickr: 2016)."""
    return re.sub(r"^test_(\d{4})_flickr$", r"\1", name)


def test_names(runs: Sequence[dict]) -> List[str]:
    """The test sets the records score, in the order the records hold them."""
    names: List[str] = []
    for r in runs:
        names += [t for t in r["scores"].get("tests", {}) if t not in names]
    return names


def test_sets_line(runs: Sequence[dict]) -> List[str]:
    """The section's line naming every test set its records score, and how many runs score
    each where not all do (records of version 1 scored the first test set only)."""
    names = test_names(runs)
    if not names:
        return []
    scored = [sum(name in r["scores"].get("tests", {}) for r in runs) for name in names]
    return ["* Test sets scored: " + ", ".join(
        f"`{name}`" + ("" if n == len(runs) else f" ({n} of the {len(runs)} runs)")
        for name, n in zip(names, scored)) + "."]


def columns_of(corpus_name: str, tests: Sequence[str], family: str) -> List[tuple]:
    """The columns of a family's results table: (header, [(score, test set or None)],
    digits) per cell; BLEU and chrF of every test set first."""
    cols = []
    for t in tests:
        label = test_label(t)
        cols += [(f"BLEU {label}", [("bleu", t)], 2), (f"chrF {label}", [("chrf", t)], 2)]
        if corpus_name == "synthetic":
            cols += [(f"agreement {label}", [("agreement", t)], 2),
                     (f"long-dist. agr. {label}", [("agreement_long", t)], 2)]
    if tests and corpus_name != "synthetic":
        first = test_label(tests[0])
        cols.append((f"RIBES {first}", [("ribes", tests[0])], 2))
        if family == "transformer":
            cols.append((f"tok. BLEU {first}", [("bleu_tok", tests[0])], 2))
    if corpus_name == "synthetic":
        cols.append(("AER", [("aer", None)], 2))
    cols += [("DA / UA", [("da", None), ("ua", None)], 1), ("valid ppl", [("valid_ppl", None)], 2)]
    if corpus_name == "synthetic":
        cols.append(("valid loss", [("valid_loss", None)], 3))
    else:
        cols.append(("step time", [("step_time_ratio", None)], 2))
    return cols


def expected_settings(args, description: str) -> Dict[str, dict]:
    """The settings this invocation would run each method key with."""
    return {key: run_settings(m, key, args, description)
            for m in all_methods() for key in method_keys([m])}


def table_records(records: Sequence[dict], args, description: str
                  ) -> Dict[str, List[dict]]:
    """The records whose settings equal what this invocation would run for their method,
    per method key, in seed order."""
    expected = expected_settings(args, description)
    chosen: Dict[str, Dict[int, dict]] = {}
    for r in records:
        if r["method"] in expected and r["settings"] == expected[r["method"]]:
            old = chosen.setdefault(r["method"], {}).get(int(r["seed"]))
            if old is None or str(r.get("date", "")) > str(old.get("date", "")):
                chosen[r["method"]][int(r["seed"])] = r
    return {k: [v[s] for s in sorted(v)] for k, v in chosen.items()}


def setting_differences(recorded: dict, expected: dict, prefix: str = "") -> List[str]:
    """``KEY: recorded R, these options V`` for each setting (``recipe.updates`` inside a
    dict) whose recorded value is not what these options give."""
    lines = []
    for key in sorted(set(recorded) | set(expected), key=str):
        r, e = recorded.get(key), expected.get(key)
        if isinstance(r, dict) and isinstance(e, dict):
            lines += setting_differences(r, e, f"{prefix}{key}.")
        elif r != e:
            lines.append(f"{prefix}{key}: recorded {r!r}, these options {e!r}")
    return lines


def no_matching_record(records: Sequence[dict], args, description: str) -> str:
    """Why none of ``records`` has this invocation's settings: how the newest one's differ
    from them, and the command that made it (its options render its section)."""
    expected = expected_settings(args, description)
    known = [r for r in records if r["method"] in expected]
    if not known:
        return (f"none of the {len(records)} records in {args.results_dir} is a run of a "
                "known method")
    newest = max(known, key=lambda r: str(r.get("date", "")))
    key = newest["method"]
    differences = setting_differences(newest["settings"], expected[key])
    return (f"none of the {len(records)} records in {args.results_dir} was run with these "
            f"settings. The newest, {key} seed {newest['seed']}, differs in:\n  "
            + "\n  ".join(differences[:12])
            + ("\n  ..." if len(differences) > 12 else "")
            + f"\nIt was made by: {newest.get('experiment_command', '?')}\n"
            "Render with the options of the command that made the records.")


def convergence_lines(backbone: Sequence[dict]) -> List[str]:
    """One bullet: each backbone run's lowest validation loss against its floor."""
    runs = [(r["seed"], r["scores"].get("valid_loss"), r["scores"].get("valid_loss_floor"))
            for r in backbone]
    runs = [(seed, loss, floor) for seed, loss, floor in runs if loss and floor]
    if not runs:
        return []
    gaps = [100.0 * (loss / floor - 1) for _, loss, floor in runs]
    return [f"* Convergence of the backbone: floor {runs[0][2]:.3f} bits; lowest valid loss "
            + ", ".join(f"{loss:.3f} (seed {seed}, +{gap:.1f} %)"
                        for (seed, loss, _), gap in zip(runs, gaps))
            + (": every seed within 2 % of the floor." if max(gaps) <= 2.0 else
               ": **not every seed is within 2 % of the floor**; a longer budget may still "
               "change the table.")]


FLAT = 2.0  # % : a backbone whose last epoch lowered valid ppl by less has flattened


def flattening_lines(by_key: Dict[str, List[dict]]) -> List[str]:
    """One bullet per backbone with a per-epoch curve: how much its last epoch lowered
    valid ppl, per seed, and the budget's verdict where no loss floor is known: still
    falling (a seed's last epoch lowered it by ``FLAT`` % or more), past its best (a seed
    ended ``FLAT`` % or more above its lowest: the recipe overfits or its lr is too high),
    else flattened."""
    lines = []
    for key in (BACKBONE, TRANSFORMER_BACKBONE):
        runs = [(r["seed"], r["scores"]["valid_ppl_by_epoch"]) for r in by_key.get(key, [])
                if len(r["scores"].get("valid_ppl_by_epoch") or []) >= 2]
        if not runs:
            continue
        drops = [(seed, curve[-2], curve[-1], 100.0 * (1 - curve[-1] / curve[-2]))
                 for seed, curve in runs]
        past_best = []  # (seed, lowest, its epoch, % above it at the last)
        for seed, curve in runs:
            low = curve.index(min(curve))
            rise = 100.0 * (curve[-1] / curve[low] - 1)
            if rise >= FLAT:
                past_best.append((seed, curve[low], low + 1, rise))
        if max(d for *_, d in drops) >= FLAT:
            verdict = (f": **still falling** ({FLAT:.0f} % or more in the last epoch); a "
                       "longer budget may change the table.")
        elif past_best:
            verdict = (": **past its best**, " + ", ".join(
                f"lowest {low:.2f} at epoch {epoch}, {rise:+.1f} % at the last (seed {seed})"
                for seed, low, epoch, rise in past_best)
                + ": the recipe overfits (or its lr is too high) at this budget.")
        else:
            verdict = f": every seed under {FLAT:.0f} %, flattened at this budget."
        lines.append(
            f"* Has `{key}` flattened? Valid ppl over its last epoch: "
            + ", ".join(f"{a:.2f} → {b:.2f} ({-d:+.1f} %, seed {seed})" for seed, a, b, d in drops)
            + verdict)
    return lines


DIVERGED = 1.5  # a run whose last valid ppl is this many times its best has diverged


def host_label(host: dict) -> str:
    """"AMD EPYC [25/1, AVX2] (cpu)": the CPU's name, its family/model and PyTorch's kernels
    where the record has them (:func:`fairseq_syntax.evaluation.host.cpu_kernels`), the
    device. One CPU name can cover kernels that round differently."""
    kernels = [host[k] for k in ("cpu_family_model", "torch_cpu_capability") if host.get(k)]
    return "{}{} ({})".format(host.get("cpu") or "?",
                              f" [{', '.join(kernels)}]" if kernels else "",
                              host.get("device") or "?")


def data_bin_lines(runs: Sequence[dict]) -> List[str]:
    """Which data-bin the runs trained on, by their records' ``data_bin_digest``
    (:func:`.records.data_bin_digest`): one line when all recorded the same; else the
    runs of each, and whether they read the same tokens: yes where the sentencepiece model
    files or the token files' digests agree, no where the token files' digests differ, and
    not known where the model files differ and a run recorded no token digest."""
    groups: Dict[tuple, List[str]] = {}
    for r in sorted(runs, key=lambda r: (r["method"], r["seed"])):
        digest = r.get("data_bin_digest") or {}
        key = tuple(str(digest.get(k) or "?")[:12] for k in ("spm", "side_files", "tokens"))
        groups.setdefault(key if digest else None, []).append(f"`{r['method']}` {r['seed']}")
    recorded = {k: v for k, v in groups.items() if k is not None}
    if not recorded:
        return []
    n = len(groups.get(None, []))
    unrecorded = (f"; {n} run{'s' * (n > 1)} recorded before data-bin digests (2026-11-30) "
                  f"{'do' if n > 1 else 'does'} not say" if n else "")
    what = "Data-bin (sha256 of its sentencepiece model / over its side-files / over its " \
           "token files, record key `data_bin_digest`; `?` where a run recorded none)"
    if len(recorded) == 1:
        (spm, sides, tokens), = recorded
        return [f"* {what}: `{spm}…` / `{sides}…` / `{tokens}…` for the runs that recorded "
                f"it{unrecorded}."]
    parts = [f"`{spm}…` / `{sides}…` / `{tokens}…`: {', '.join(names)}"
             for (spm, sides, tokens), names in sorted(recorded.items())]
    models = {spm for spm, _, _ in recorded}
    tokens = {tokens for _, _, tokens in recorded}
    if len(models) == 1 or (len(tokens) == 1 and "?" not in tokens):
        verdict = " Same tokens" + (
            "" if len(models) == 1 else " (the sentencepiece model files differ only as a "
            "data-bin built before 2026-12-01 wrote its build folder into its model)") + (
            "; the side-files differ (a rebuilt data-bin: eflomal has no seed), which only "
            "the methods that read them see." if len({s for _, s, _ in recorded}) > 1 else ".")
    elif "?" not in tokens:
        verdict = (" **The token files differ: those runs did not read the same tokens; "
                   "compare them only through the detokenised text.**")
    else:
        verdict = (" **The sentencepiece model files differ, and a run recorded no digest of "
                   "its token files, so whether those runs read the same tokens is not "
                   "known** (a data-bin built before 2026-12-01 wrote its build folder into "
                   "its model, so a rebuild of the same text differs there too).")
    return [f"* {what}, {len(recorded)} of them: " + "; ".join(parts) + unrecorded + "."
            + verdict]


def divergence_lines(by_key: Dict[str, List[dict]]) -> List[str]:
    """One bullet naming the runs whose valid ppl after the last epoch is ``DIVERGED``
    times their best or more, with the checkpoint each decoded: the best one came before
    the divergence, an average of the last epochs may not. The best epoch is the decoded
    checkpoint's (``decoded_epoch``); a record without it names every epoch at the lowest
    rounded ppl."""
    runs = []
    for key, rs in by_key.items():
        for r in rs:
            curve = r["scores"].get("valid_ppl_by_epoch") or []
            if not curve or curve[-1] < DIVERGED * min(curve):
                continue
            best = r["scores"].get("decoded_epoch")
            epochs = [best] if best else [e + 1 for e, p in enumerate(curve) if p == min(curve)]
            at = (f"epoch {epochs[0]}" if len(epochs) == 1 else
                  "epochs " + ", ".join(map(str, epochs)))
            runs.append(f"`{key}` seed {r['seed']} ({curve[epochs[0] - 1]:.2f} at {at} → "
                        f"{curve[-1]:.2f}; {r['settings'].get('checkpoint', 'best')})")
    if not runs:
        return []
    return ["* **Diverged late** (valid ppl after the last epoch ≥ "
            f"{DIVERGED:g} × the best; the checkpoint decoded): " + ", ".join(runs)
            + ". A best checkpoint comes from before the divergence; an average of the last "
            "epochs may not."]


def section_markdown(corpus_name: str, keys: Sequence[str], by_key: Dict[str, List[dict]],
                     args, description: str, failures: Sequence[str] = (),
                     comparisons: Optional[Comparisons] = None,
                     figures_dir: Optional[str] = None,
                     seed_pairs: Optional[SeedPairs] = None) -> str:
    """The corpus section: the rows of ``keys`` (selected methods, ``not run yet`` without
    records) and of every other method with records, in the plugin's order."""
    synthetic = corpus_name == "synthetic"
    title = {"synthetic": "Synthetic corpus (en → vf)", "multi30k": "Multi30k En → De",
             "kftt-en-ja": "KFTT En → Ja", "kftt-ja-en": "KFTT Ja → En"}.get(
        corpus_name, corpus_name) + (", trained on the GPU" if args.gpu else "")
    comparisons = comparisons or {}
    cpu_pairs = cpu_pairings(by_key)
    methods = all_methods()
    order = method_keys(methods)
    family = {k: m.family for m in methods for k in method_keys([m])}
    decode_only = {key for m in methods for key, _ in m.variants}  # a trained row's curve
    subset = subset_validated(methods)
    every_row = [k for k in order if k in keys or k in by_key]
    rows = [k for k in every_row if family[k] == "rnn"]
    transformer_rows = [k for k in every_row if family[k] == "transformer"]
    runs = [r for k in every_row for r in by_key.get(k, [])]
    dates = sorted(str(r.get("date", ""))[:10] for r in runs)
    hosts = sorted({host_label(r.get("host") or {}) for r in runs})
    commands = []
    for r in sorted(runs, key=lambda r: str(r.get("date", ""))):
        c = r.get("experiment_command")
        if c and c not in commands:
            commands.append(c)
    results_dir = args.results_dir
    lines = [
        f"## {title}",
        "",
        f"Rendered by `fairseq-syntax-experiment` on {datetime.date.today().isoformat()} from "
        f"the {len(runs)} run records (one JSON file per method and seed) in "
        f"`{results_dir}` whose settings are the ones below"
        + (f"; runs finished {dates[0]}" + (f" to {dates[-1]}" if dates[-1] != dates[0] else "")
           + f", {sum(map(wall_seconds, runs)) / 60:.0f} min of run "
           f"wall time in all, on {'; '.join(hosts)}" if runs else "")
        + ". Rerunning a command skips the runs that have a record, so more `--seeds` or "
        "the open rows can be added in later sessions"
        + (". Command(s) of the runs:" if commands else "."),
        "",
    ]
    if commands:
        lines += ["```bash", *commands, "```", ""]
    budget = " and ".join(
        [*([f"{args.updates} updates"] if args.updates else []),
         *([f"{args.epochs} epochs"] if args.epochs else [])])
    lines += [f"* Data: {description}.", *test_sets_line(runs), *data_bin_lines(runs)]
    lines += [] if not rows else [
        f"* Same budget and sizes for every method: {budget} of at most {args.max_tokens} "
        "tokens"
        + (f" (or {args.max_minutes} min, whichever first)" if args.max_minutes else "")
        + f", embeddings {args.embed_dim}, BiLSTM encoder 2 × {args.encoder_hidden}, decoder "
        f"LSTM {args.decoder_hidden}, dropout {args.dropout}, Adam lr {args.lr}, clip-norm "
        f"{args.clip_norm}, label smoothing {args.label_smoothing} (BlackOut: none), "
        "validation after every epoch, the checkpoint of lowest validation loss "
        "(`checkpoint_best.pt`) decoded; one run per seed (`--seed N`).",
    ]
    example = next((r for k in [BACKBONE, *rows] for r in by_key.get(k, [])), None)
    if example and example.get("commands", {}).get("train"):
        lines += ["* Training command of one run (other methods change `--arch` or "
                  "`--criterion`, other seeds `--seed`):", "", "```bash",
                  example["commands"]["train"], "```", ""]
    decode = ("* Decoding: `fairseq-generate --beam 5 --max-len-a 1.5 --max-len-b 10 "
              "--post-process sentencepiece`, ")
    if synthetic:
        lines += [
            decode + "`--gen-subset test` (in-distribution test split) and `--gen-subset "
            "test1` (`gen`: the generalisation split of `fairseq-syntax-synthetic`: a fronted "
            "PP in every sentence, deeper nesting, more attractors, longer than any training "
            "sentence).",
            "* BLEU: sacreBLEU against `test.vf` / `gen.vf`. Agreement: share of translations "
            "whose main verb has the reference's number; long-dist.: on the sentences with "
            "≥ 2 attractors (nouns before the main verb with the other number than the subject head) (`agreement_report` of "
            "`fairseq_syntax.data.synthetic_corpus`).",
            "* AER: attention of the teacher-forced reference (`fairseq-generate --beam 1 "
            "--prefix-size 1024 --print-alignment soft`) against the gold test alignments, "
            "word level, threshold 0.2 (precision and recall are in the run records).",
        ]
    else:
        lines += [
            decode + "each test set's subset; detokenised with the corpus's detokenizer "
            "(the glue table of its `prepare.sh`) for sacreBLEU BLEU and chrF against the raw "
            "references; RIBES on tokenised text.",
        ]
    sigs = [(r["scores"].get("bleu_signature"), r["scores"].get("chrf_signature")) for r in runs]
    bleu_sig = next((b for b, _ in sigs if b), "")
    chrf_sig = next((c for _, c in sigs if c), "")
    if bleu_sig:
        lines.append(f"* BLEU signature: `{bleu_sig}`" +
                     ("" if synthetic or not chrf_sig else f"; chrF signature: `{chrf_sig}`"))
    lines += [] if not rows else [
        "* DA / UA: directed / undirected attachment accuracy (%, punctuation excluded) of "
        "the trees the `sa_nmt*` / `fa_nmt*` encoders induce on the test source, against the "
        + ("gold trees" if synthetic else "spaCy `en_core_web_sm` parses")
        + " (`fairseq-syntax-induced-trees`)."]
    lines += [
        "* valid ppl: fairseq's `valid_ppl` of the decoded checkpoint, on every valid "
        "sentence (`whole_split_loss` for `--task translation` runs, whose per-epoch "
        "validation is marked (subset): see the note under the per-epoch table)."
        + (" valid loss: its label-smoothed validation loss (bits per token), and how far "
           "above the floor no model can go below (`smoothed_loss_floor`: the entropy of the "
           "smoothed target). A run within 2 % of the floor is within 2 % of any longer "
           "run, so it has converged in issue 14's sense." if synthetic else ""),
        *(convergence_lines(by_key.get(BACKBONE, [])) if synthetic else
          flattening_lines(by_key)),
        *divergence_lines({k: rs for k, rs in by_key.items() if k not in decode_only}),
        "",
    ]
    tests = test_names(runs)
    lines += [f"* Test sets: {', '.join(f'`{t}`' for t in tests)}." if tests else "",
              SIGNIFICANCE_NOTE, ""]
    for family_rows, backbone, name in ((rows, BACKBONE, "RNN family"),
                                        (transformer_rows, TRANSFORMER_BACKBONE,
                                         "Transformer family")):
        if not family_rows:
            continue
        if backbone == TRANSFORMER_BACKBONE:
            lines += transformer_recipe_lines(corpus_name, family_rows, by_key, args)
        else:
            lines += [f"### {name}", ""]
        lines += results_table(family_rows, by_key, columns_of(corpus_name, tests,
                                                              family[family_rows[0]]))
        lines += ["", f"Difference from `{backbone}` (method − backbone; 95 % interval):", ""]
        lines += significance_table([k for k in family_rows if k != backbone], comparisons,
                                    tests, tested_scores(corpus_name, comparisons),
                                    degenerated_seeds(family_rows, by_key), cpu_pairs)
        lines += seed_pairs_table(backbone, seed_pairs or {}, tests,
                                  tested_scores(corpus_name, comparisons),
                                  {int(r["seed"]): r.get("host") or {}
                                   for r in by_key.get(backbone, [])})
        if figures_dir:
            lines += section_figures(figures_dir, section_name(args), name, backbone,
                                     family_rows, by_key, comparisons, tests, corpus_name,
                                     subset, decode_only)
        lines.append("")
    base = next((r["scores"]["baselines"] for r in runs if r["scores"].get("baselines")), None)
    if base:
        lines += [f"Branching baselines on the same test trees (DA / UA): left-branching "
                  f"{base['left DA']:.1f} / {base['left UA']:.1f}, right-branching "
                  f"{base['right DA']:.1f} / {base['right UA']:.1f}.", ""]
    lines += seed_table(comparisons, tests, tested_scores(corpus_name, comparisons), cpu_pairs)
    lines += epoch_table([k for k in every_row if k not in decode_only], by_key, subset)
    lines += positions_table(every_row, by_key)
    lines += [
        "",
        "Cells: mean ± sample standard deviation (numpy `std(ddof=1)`) over the `seeds` runs of "
        "the row; a single run gives its value alone. `not run yet`: a selected method without "
        "a record with these settings. `train s`: mean wall seconds of `fairseq-train` "
        "(machine shared, not a speed measurement; see `fairseq-syntax-benchmark`). Each record "
        "names its folder of logs, checkpoint and outputs (`run_dir`).",
    ]
    if failures:
        lines += ["", "Runs that failed in the invocation that wrote this section (no record): "
                      + "; ".join(failures) + "."]
    return "\n".join(lines) + "\n"


SUBSET_MARK = " (subset)"  # a row or curve of :func:`subset_validated`
SUBSET_NOTE = ("(subset): a `--task translation` run (fairseq's own peers, `transformer_align`): "
               "fairseq 0.12's own datasets leave out a last batch whose size is not a multiple "
               "of `--required-batch-size-multiple` (8; fairseq issue #5036), so it was "
               "validated after each epoch without that batch of the longest valid sentences "
               "(Multi30k: 1008 of 1014, KFTT: 1160 of 1166); the other runs on every valid "
               "sentence.")


def epoch_table(rows: Sequence[str], by_key: Dict[str, List[dict]],
                subset: Collection[str] = ()) -> List[str]:
    """Validation perplexity after each epoch, a line per run that recorded it (``[]`` if
    none did): how fast each method learns next to the backbone. Rows in ``subset`` are
    marked (subset): fairseq's own dataset validated them on fewer sentences."""
    runs = [(key, r) for key in rows for r in by_key.get(key, [])
            if r["scores"].get("valid_ppl_by_epoch")]
    if not runs:
        return []
    epochs = max(len(r["scores"]["valid_ppl_by_epoch"]) for _, r in runs)
    lines = ["", "Validation perplexity after each epoch (runs whose record has it):", "",
             "| method | seed | " + " | ".join(str(e) for e in range(1, epochs + 1)) + " |",
             "| --- | ---: |" + " ---: |" * epochs]
    for key, r in runs:
        ppl = r["scores"]["valid_ppl_by_epoch"]
        cells = [f"{v:.2f}" for v in ppl] + [""] * (epochs - len(ppl))
        lines.append(f"| `{key}`{SUBSET_MARK if key in subset else ''} | {r['seed']} | "
                     + " | ".join(cells) + " |")
    return lines + (["", SUBSET_NOTE] if any(key in subset for key, _ in runs) else [])


def positions_table(rows: Sequence[str], by_key: Dict[str, List[dict]]) -> List[str]:
    """Where each run's position predictors put ``p_i`` on the first test set
    (:mod:`fairseq_syntax.evaluation.positions`), a line per run that recorded it (``[]`` if
    none did), with :func:`~fairseq_syntax.evaluation.positions.degenerated`'s verdict."""
    runs = [(key, r) for key in rows for r in by_key.get(key, []) if r["scores"].get("positions")]
    if not runs:
        return []
    lines = ["", "Where the position predictors put p_i (first test set, teacher-forced target "
             "steps; `fairseq_syntax/evaluation/positions.py`). Degenerated: over 50 % of steps "
             "at eos or at one end of the source, or sd p/J under 0.05 (the window stays in one "
             "place); such a run tests something other than the paper's method. a/J: the mean "
             "source position linked to the step's target token, on the valid set's alignments "
             "(runs of 2026-11-29 on); a predictor that follows them correlates near 1:", "",
             "| method | seed | at eos % | at the first word % | at the last word % | mean p/J | "
             "sd p/J | correlation with i/I | correlation with a/J (valid) | degenerated |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for key, r in runs:
        p = r["scores"]["positions"]
        lines.append(f"| `{key}` | {r['seed']} | {fmt(p.get('position_at_eos'), 1)} | "
                     f"{fmt(p.get('position_at_first'), 1)} | "
                     f"{fmt(p.get('position_at_last'), 1)} | "
                     f"{fmt(p.get('position_mean_relative'))} | "
                     f"{fmt(p.get('position_sd_relative'))} | "
                     f"{fmt(p.get('position_target_correlation'))} | "
                     f"{fmt(p.get('position_alignment_correlation'))} | "
                     f"{degenerated(p) or 'no'} |")
    return lines


def results_table(rows: Sequence[str], by_key: Dict[str, List[dict]], columns) -> List[str]:
    """Markdown lines of the table of ``rows``: each cell the mean ± sd over the seeds."""
    head = ["method", "seeds", *(c[0] for c in columns), "train s"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for key in rows:
        recs = by_key.get(key)
        if not recs:
            lines.append(f"| `{key}` | – | not run yet |" + " |" * (len(head) - 3))
            continue
        cells = [f"`{key}`", str(len(recs))]
        for _, names, digits in columns:
            parts = [fmt_stat(Stat.of([score_of(r, name, test) for r in recs]), digits)
                     for name, test in names]
            cells.append(" / ".join(parts) if any(p != "–" for p in parts) else "–")
        cells.append(fmt(Stat.of([r["scores"].get("train_seconds") for r in recs]).mean, 0))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


SIGNIFICANCE_NOTE = (
    "* Differences from the backbone: per seed, sacreBLEU's paired bootstrap resampling "
    "(`sacrebleu.significance.PairedTest`, 1000 resamples of the test sentences, seed 12345) of "
    "the method's translations against its backbone's of the same training seed: Δ, its 95 % "
    "interval over the resamples, and p. A cell gives the mean Δ over the seeds with a "
    "Student-t 95 % interval, the two-sided p of the one-sample t test of the seeds' Δ "
    "against 0 (compare it with 0.05 / k to correct for testing k cells of a row, as "
    "Bonferroni does) and how many seeds were significant alone (one seed: that seed's "
    "bootstrap interval and p). **Bold**: significant (the interval over ≥ 2 seeds excludes 0; one "
    "seed: p < 0.05 and its interval excludes 0, marked † as one training run; sacreBLEU's p "
    "and its percentile interval can disagree near the edge, so both are asked). Otherwise no "
    "difference is shown. A bound that is not 0 but rounds to ±0.00 keeps two significant "
    "digits (-0.0026). Runs without kept translations (records of version 1) are not tested.")


def comparison_cell(by_seed: Dict[int, Delta]) -> str:
    """One significance cell: mean Δ [interval] over seeds, the one-sample t test's p, how
    many seeds were significant alone."""
    if not by_seed:
        return "–"
    deltas = [by_seed[s] for s in sorted(by_seed)]
    if len(deltas) == 1:
        d = deltas[0]
        text = f"{interval(d.delta, d.low, d.high)} {fmt_p(d.p)}"
        return f"**{text}** †" if d.significant else text
    mean = seed_mean([d.delta for d in deltas])
    hits = sum(d.significant for d in deltas)
    if mean.low is None:  # the same Δ in every seed: no t interval
        return f"{mean.mean:+.2f} in every seed, no interval ({hits}/{len(deltas)})"
    text = interval(mean.mean, mean.low, mean.high)
    return ((f"**{text}**" if mean.significant else text)
            + f" {fmt_p(mean.p)} ({hits}/{len(deltas)})")


def fmt_p(p: float) -> str:
    """p to three decimals, ``p<0.001`` below that."""
    return "p<0.001" if p < 0.0005 else f"p={p:.3f}"


def one_cpu_label(same: Optional[bool]) -> str:
    """A paired test's machines (:func:`~fairseq_syntax.evaluation.host.same_cpu`): yes,
    **no** or ? (not known)."""
    return {True: "yes", False: "**no**", None: "?"}[same]


def one_cpu_cell(by_seed: Dict[int, Optional[bool]]) -> str:
    """How many of a row's paired seeds ran method and backbone on one kind of machine."""
    if not by_seed:
        return "–"
    flags = list(by_seed.values())
    cell = f"{flags.count(True)} of {len(flags)}"
    if flags.count(False):
        cell += f", **{flags.count(False)} across CPUs**"
    if flags.count(None):
        cell += f", {flags.count(None)} not known"
    return cell


CROSS_CPU_NOTE = (
    "One CPU: of the seeds tested, how many ran the method and the backbone on one kind of "
    "machine (the records' CPU name, family/model, PyTorch's kernels and device; runs on "
    "GPUs: the GPU; not known where a record older than 2026-12-01 names no family/model). "
    "The same seed on another "
    "CPU is another run, whose difference can be significant by itself (docs/same-cpu): a "
    "difference that rests on pairs across CPUs may be the CPUs'. Run the method and its "
    "backbone on one kind of machine, or render the pairs that did from a folder of their "
    "records (`--results-dir`).")


def significance_table(rows: Sequence[str], comparisons: Comparisons, tests: Sequence[str],
                       scores: Sequence[str],
                       degenerate: Optional[Dict[str, List[int]]] = None,
                       cpu_pairs: Optional[Dict[str, Dict[int, Optional[bool]]]] = None
                       ) -> List[str]:
    """A row per method: its difference from the backbone for every test set and score, and
    how many of its pairs ran on one kind of machine (``cpu_pairs``: method -> seed ->
    :func:`~fairseq_syntax.evaluation.host.same_cpu`); a method whose position predictor
    degenerated (``degenerate``: its seeds) is marked ‡."""
    degenerate = degenerate or {}
    cols = [(t, s) for t in tests for s in scores]
    cols = [(t, s) for t, s in cols if s != "ribes" or any(  # RIBES: where it was tested
        (k, t, s) in comparisons for k in rows)]
    # the pairs tested, not every same-seed pair (a record of version 1 kept no translations)
    cpu_pairs = {key: {seed: same for seed, same in (cpu_pairs or {}).get(key, {}).items()
                       if any(seed in comparisons.get((key, t, s), {}) for t, s in cols)}
                 for key in rows}
    lines = ["| method | " + " | ".join(f"Δ {SCORE_NAMES[s]} {test_label(t)}" for t, s in cols)
             + " | one CPU |", "| --- |" + " ---: |" * len(cols) + " --- |"]
    footnotes = []
    if any(flag is not True for key in rows for flag in cpu_pairs.get(key, {}).values()):
        footnotes += ["", CROSS_CPU_NOTE]
    for key in rows:
        lines.append(f"| `{key}`{' ‡' if key in degenerate else ''} | " + " | ".join(
            comparison_cell(comparisons.get((key, t, s), {})) for t, s in cols)
            + f" | {one_cpu_cell(cpu_pairs.get(key, {}))} |")
        if key in degenerate:
            seeds = ", ".join(str(s) for s in degenerate[key])
            footnotes += ["", f"‡ `{key}`: its position predictor degenerated in seed(s) {seeds} "
                              "(positions table below), so these differences do not test the "
                              "paper's method."]
    return lines + footnotes


def seed_pairs_table(backbone: str, seed_pairs: SeedPairs, tests: Sequence[str],
                     scores: Sequence[str], hosts: Optional[Dict[int, dict]] = None
                     ) -> List[str]:
    """The backbone against itself: a row per pair of its seeds, Δ [interval] of the later
    seed against the earlier for every test set and score, bold where the one-seed test
    calls it significant, whether the two ran on one kind of machine (``hosts``: seed ->
    its record's host), and how many such false alarms there are."""
    hosts = hosts or {}
    cols = [(t, s) for t in tests for s in scores if (backbone, t, s) in seed_pairs]
    pairs = sorted({pair for t, s in cols for pair in seed_pairs[backbone, t, s]})
    if not pairs:
        return []
    lines = ["", f"`{backbone}` against itself: each pair of its seeds tested as a method "
             "against its backbone (later seed − earlier). Two runs of one model differ only by "
             "training noise, so each bold cell is a false alarm of the one-seed test; the "
             "interval over seeds above allows for that noise.", "",
             "| seeds | " + " | ".join(f"Δ {SCORE_NAMES[s]} {test_label(t)}" for t, s in cols)
             + " | one CPU |", "| --- |" + " ---: |" * len(cols) + " --- |"]
    alarms = tested = 0
    for early, late in pairs:
        cells = []
        for t, s in cols:
            d = seed_pairs[backbone, t, s].get((early, late))
            if d is None:
                cells.append("–")
                continue
            tested += 1
            alarms += d.significant
            text = interval(d.delta, d.low, d.high)
            cells.append(f"**{text}**" if d.significant else text)
        same = same_cpu(hosts.get(late) or {}, hosts.get(early) or {})
        lines.append(f"| {late} − {early} | " + " | ".join(cells)
                     + f" | {one_cpu_label(same)} |")
    return lines + ["", f"Significant: {alarms} of the {tested} tests of one seed against "
                        "another."]


def degenerated_seeds(rows: Sequence[str], by_key: Dict[str, List[dict]]) -> Dict[str, List[int]]:
    """Each row's seeds whose position predictor degenerated
    (:func:`~fairseq_syntax.evaluation.positions.degenerated`); rows without any left out."""
    out = {}
    for key in rows:
        seeds = sorted(r["seed"] for r in by_key.get(key, [])
                       if degenerated(r["scores"].get("positions") or {}))
        if seeds:
            out[key] = seeds
    return out


SCORE_NAMES = {"bleu": "BLEU", "chrf": "chrF", "agreement": "agreement", "ribes": "RIBES"}


def tested_scores(corpus_name: str, comparisons: Comparisons) -> List[str]:
    """The scores of the difference tables: :func:`~.comparisons.paired_scores`, and RIBES
    where some run kept tokenised translations to test it on."""
    return [*paired_scores(corpus_name),
            *(["ribes"] if any(s == "ribes" for _, _, s in comparisons) else [])]


def seed_table(comparisons: Comparisons, tests: Sequence[str], scores: Sequence[str],
               cpu_pairs: Optional[Dict[str, Dict[int, Optional[bool]]]] = None
               ) -> List[str]:
    """Every paired test: method, seed, test set, per score Δ [interval] p, and whether the
    two runs ran on one kind of machine (``cpu_pairs`` as :func:`significance_table`'s)."""
    cpu_pairs = cpu_pairs or {}
    keys = sorted({(k, seed) for (k, _, _), by_seed in comparisons.items() for seed in by_seed})
    if not keys:
        return []
    lines = ["Each paired test (method against its backbone, same seed; Δ [95 % interval] p):",
             "", "| method | seed | test set | " + " | ".join(f"Δ {SCORE_NAMES[s]}" for s in scores)
             + " | one CPU |", "| --- | ---: | --- |" + " ---: |" * len(scores) + " --- |"]
    for key, seed in keys:
        for t in tests:
            cells = []
            for s in scores:
                d = comparisons.get((key, t, s), {}).get(seed)
                cells.append("–" if d is None else
                             f"{interval(d.delta, d.low, d.high)} {d.p:.3f}")
            if any(c != "–" for c in cells):
                same = one_cpu_label(cpu_pairs.get(key, {}).get(seed))
                lines.append(f"| `{key}` | {seed} | {t} | " + " | ".join(cells) + f" | {same} |")
    return lines + [""]


def section_figures(figures_dir: str, section: str, family: str, backbone: str,
                    rows: Sequence[str], by_key: Dict[str, List[dict]],
                    comparisons: Comparisons, tests: Sequence[str], corpus_name: str,
                    subset: Collection[str] = (), decode_only: Collection[str] = ()
                    ) -> List[str]:
    """The family's learning curves (rows in ``subset`` labelled (subset), as in
    :func:`epoch_table`; a ``decode_only`` row, decoded from another row's training, has
    none of its own) and, per test set, its Δ chart with a bar per row (PNG files in
    ``figures_dir``); the Markdown lines that embed them (paths relative to the results
    file, which lies in the folder above ``figures_dir``)."""
    from fairseq_syntax.evaluation.figures import delta_chart, learning_curves

    os.makedirs(figures_dir, exist_ok=True)
    stem = f"{section}-{'rnn' if family.startswith('RNN') else 'transformer'}"
    where = os.path.basename(os.path.normpath(figures_dir))
    lines = []
    curves = {k + (SUBSET_MARK if k in subset else ""):
              [r["scores"]["valid_ppl_by_epoch"] for r in by_key.get(k, [])
               if r["scores"].get("valid_ppl_by_epoch")] for k in rows if k not in decode_only}
    curves = {k: v for k, v in curves.items() if v}
    if curves:
        name = f"{stem}-valid-ppl.png"
        learning_curves(os.path.join(figures_dir, name),
                        f"{section}, {family}: valid ppl per epoch", curves)
        lines += ["", f"![valid ppl per epoch, {family}]({where}/{name})"]
    score = "agreement" if corpus_name == "synthetic" else "bleu"
    for t in tests:
        bars = []
        for k in rows:
            by_seed = comparisons.get((k, t, score), {})
            if k == backbone or not by_seed:
                continue
            deltas = [by_seed[s] for s in sorted(by_seed)]
            if len(deltas) == 1:
                d = deltas[0]
                bars.append((f"{k} (1)", d.delta, d.low, d.high, d.significant))
            else:
                m = seed_mean([d.delta for d in deltas])
                bars.append((f"{k} ({m.n})", m.mean, m.mean if m.low is None else m.low,
                             m.mean if m.high is None else m.high, m.significant))
        if bars:
            name = f"{stem}-{t}-delta-{score}.png"
            delta_chart(os.path.join(figures_dir, name),
                        f"{section}, {family}, {t}: Δ {SCORE_NAMES[score]} against {backbone}",
                        bars, f"Δ {SCORE_NAMES[score]} (95 % interval; seeds)")
            lines += ["", f"![Δ {SCORE_NAMES[score]} on {t}, {family}]({where}/{name})"]
    return lines


def transformer_recipe_lines(corpus_name: str, rows: Sequence[str],
                             by_key: Dict[str, List[dict]], args) -> List[str]:
    """The Transformer family's heading, its recipe and one training command."""
    r = args.transformer
    budget = " and ".join([*([f"{r['updates']} updates"] if r["updates"] else []),
                           *([f"{r['epochs']} epochs"] if r["epochs"] else [])])
    lines = [
        "### Transformer family",
        "",
        f"* Recipe of every Transformer method (`TRANSFORMER_RECIPES`): {budget} of at most "
        f"{r['max_tokens']} tokens"
        + (f" (or {args.max_minutes} min, whichever first)" if args.max_minutes else "")
        + f", {r['layers']} + {r['layers']} {'pre-norm ' if r['normalize_before'] else ''}"
        f"layers of {r['embed_dim']}, FFN {r['ffn_dim']}, "
        f"{r['heads']} heads, shared decoder input/output embeddings, dropout {r['dropout']}, "
        f"Adam {r['adam_betas']} lr {r['lr']} with "
        + ("inverse-sqrt decay" if r["lr_scheduler"] == "inverse_sqrt" else
           "linear decay to 0 at the last update")
        + f" after {r['warmup_updates']} warm-up updates, weight decay {r['weight_decay']}, "
        f"clip-norm {r['clip_norm']} (0: none), label smoothing {r['label_smoothing']}"
        + (f", the average of the last {r['average_last']} epochs' checkpoints decoded (valid "
           "ppl: of that average, on every valid sentence)" if r["average_last"] else "")
        + "; each size given to the model's base architecture. Supervised attention "
        "(`syntax_transformer+supervised_attention`, Mi et al.'s squared distance) and "
        "fairseq's `transformer_align` (`label_smoothed_cross_entropy_with_alignment`, "
        "`--task translation --load-alignments`) supervise the same head: "
        f"`{shlex.join(alignment_head_args(r))}`; their AER is that head's attention. "
        "`fairseq_transformer` is fairseq's own `transformer` (`--task translation`), the "
        "backbone's peer.",
    ]
    example = next((x for k in [TRANSFORMER_BACKBONE, *rows] for x in by_key.get(k, [])), None)
    if example and example.get("commands", {}).get("train"):
        lines += ["* Training command of one run:", "", "```bash",
                  example["commands"]["train"], "```", ""]
    if corpus_name != "synthetic":
        lines.append("* tok. BLEU: sacreBLEU with `tokenize='none'` of the tokenised "
                     "hypotheses against the tokenised references (`tok/`), the figure "
                     "fairseq-generate's BLEU4 line computes, comparable with published "
                     "tokenised results; BLEU: detokenised sacreBLEU as above.")
    lines.append("* DA / UA: of the trees `sa_transformer` induces (its first tree head of the "
                 "highest tree layer).")
    return lines + [""]


HEADER = """# Results

Measured by `fairseq-syntax-experiment` (`fairseq_syntax/experiment/`); each corpus
section is rendered from the run records in `docs/results/CORPUS/`, nothing in it is typed
by hand. How to reproduce: README.md, "Does it help?".
"""


def section_name(args) -> str:
    """The corpus's section of the results file and its records' folder: ``CORPUS``, or
    ``CORPUS-gpu`` for runs trained on the GPU (other numerics and wall times)."""
    return args.corpus_name + ("-gpu" if args.gpu else "")


def section_markers(name: str) -> tuple:
    """The comment lines that open and close the section ``name`` of a results file."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def read_sections(text: str) -> Dict[str, str]:
    """Every section of a results file's ``text``: name -> what stands between its markers."""
    begin, end = (re.escape(marker).split("NAME") for marker in section_markers("NAME"))
    pattern = begin[0] + r"(\S+)" + begin[1] + "(.*?)" + end[0] + r"\1" + end[1]
    return dict(re.findall(pattern, text, re.S))


def update_results(path: str, corpus: str, body: str) -> None:
    """Replace (or append) the ``corpus`` section of the results file (atomically; the
    experiments of other corpora that share the file wait their turn, none undoes another's)."""
    begin, end = section_markers(corpus)
    with folder_lock(os.path.dirname(os.path.abspath(path))):
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else HEADER
        block = f"{begin}\n{body}{end}"
        if begin in old and end in old:
            before, rest = old.split(begin, 1)
            after = rest.split(end, 1)[1]
            new = before + block + after
        else:
            new = old.rstrip("\n") + "\n\n" + block + "\n"
        write_atomically(path, new)
