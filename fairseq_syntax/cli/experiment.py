"""``fairseq-syntax-experiment``: the quality experiment behind ``docs/RESULTS.md``.

For one corpus it trains every method of the plugin with the same budget and the same
sizes through the real ``fairseq-train``, once per seed (``--seeds 1,2,3``), decodes the
test split(s) with the real ``fairseq-generate`` (beam 5), scores the outputs with the
project's scorers and writes

* one JSON file per finished run (method, seed) to ``--results-dir`` (default
  ``docs/results/CORPUS/``, meant to be committed), named ``METHOD.seedN.json`` (``METHOD``
  with every non-word character as ``_``), written atomically and only when the run
  finished without error. It holds the scores, the settings that define the run (corpus,
  method, sizes, budget, optimiser, decoding), the command lines, wall seconds, the date
  and facts about the host (schema: :func:`run_record`);
* that corpus's section of the results file (between ``<!-- CORPUS:begin -->`` and
  ``<!-- CORPUS:end -->``; other sections and any text outside the markers are kept;
  runs trained with ``--gpu`` have records, folder and section of their own, ``CORPUS-gpu``),
  rendered from **every** JSON file in the results folder whose settings equal the
  current ones, so runs of earlier sessions count. It is rewritten after each finished
  run (a killed experiment leaves an up-to-date table) and at the end, and
  ``--render-only`` rewrites it without training. A cell is the mean ± the sample standard
  deviation (ddof=1) over the seeds present.

The experiment is resumable: a run whose JSON file exists with identical settings is
skipped (``[skip] METHOD seed N``), one whose settings differ is run again (its folder
under ``--workdir`` starts afresh; ``[rerun] METHOD seed N`` names the settings that differ)
and its old record, with its translations, is moved to ``RESULTS_DIR/replaced/`` when the
new one is written: a rerun on another data-bin of the same corpus loses nothing.
Invocations can share a ``--workdir``: a run's folder is locked while it trains
(``runs/METHOD/seedN.lock``), and a run another invocation is training is left to it
(``[busy] METHOD seed N``). While a run trains, a line ``[progress] METHOD seed N |bar|``
says how far it is through its budget (epochs, updates) and the time left, each time its
fairseq log moves on (:mod:`fairseq_syntax.experiment.progress`).

Methods: every registered architecture of the plugin (the backbone ``attentional_rnn``
first), the backbone under ``supervised_attention_cross_entropy`` (gold/eflomal
alignments of the training data) and under ``blackout``, and ``tree2seq`` decoded again
with ``--length-prior`` (no extra training). Every run of a method uses the same model
sizes, optimiser and budget (``--updates`` or ``--epochs``), validation after every epoch,
and the checkpoint of lowest validation loss (``checkpoint_best.pt``) is decoded.
The Transformer family (``--methods transformer``: every ``syntax_transformer``-based
architecture, the backbone under ``supervised_attention_cross_entropy``, and fairseq's own
``transformer_align``) is trained with a recipe of its own per corpus
(``TRANSFORMER_RECIPES``) and gets a table of its own in the corpus section.

Scores per run:

* synthetic corpus: BLEU (sacreBLEU), main-verb agreement accuracy, overall and on
  long-distance sentences (:func:`~fairseq_syntax.evaluation.agreement.agreement_report`),
  on the in-distribution test split and on the generalisation split ``gen`` (deeper
  nesting, more attractors; the data-bin's ``test1``); AER, precision and recall of the
  attention against the gold test alignments (teacher-forced reference, soft attention,
  threshold 0.2);
* Multi30k En-De: BLEU and chrF (sacreBLEU) of the detokenised ``test_2016_flickr``
  translations against the raw references, tokenised BLEU (sacreBLEU, ``tokenize='none'``,
  spaCy tokens on both sides), RIBES on spaCy tokens;
* both: the lowest validation loss of training and its perplexity (from fairseq's
  ``--log-format json --log-file``) with the loss floor of label smoothing
  (:func:`smoothed_loss_floor`: a run near it has converged), and the directed/undirected attachment accuracy of the trees the
  structured-attention models (``sa_nmt*``, ``fa_nmt*``, ``sa_transformer``) induce on the test source against
  the gold (synthetic) or spaCy (Multi30k) trees, with the left/right-branching baselines
  (``fairseq-syntax-induced-trees``).

Examples::

    fairseq-syntax-experiment --corpus synthetic --workdir exp/synthetic --seeds 1,2,3
    fairseq-syntax-experiment --corpus multi30k --data-bin data/multi30k/data-bin \\
        --workdir exp/multi30k --gpu --seeds 1,2,3
    fairseq-syntax-experiment --corpus synthetic --render-only   # table from the JSONs
"""
import argparse
import concurrent.futures
import logging
import os
import shlex
import sys
import threading
import time
from typing import List, Optional, Sequence, Tuple

from fairseq_syntax.experiment.corpora import (
    PRESETS, corpus_description, corpus_name, prepare_corpus,
)
from fairseq_syntax.experiment.methods import (
    BACKBONE, TRANSFORMER_BACKBONE, DEFAULTS, DEFAULT_METHODS, DEFAULT_RESULTS, LR_SCHEDULERS, Method, TRANSFORMER_RECIPES,
    method_keys, record_path, select_methods,
)
from fairseq_syntax.experiment.comparisons import (
    PairedTests, ReferencesChanged, backbones_of, check_references, compare_methods,
    compare_seeds, cpu_pairings, recorded_tokenize,
)
from fairseq_syntax.experiment.records import (
    REPLACED_DIR, changed_settings, host_facts, hypotheses_path, keep_replaced, places_of,
    read_record, read_records, run_record, write_hypotheses, write_record,
)
from fairseq_syntax.experiment.commands import run_settings, train_command
from fairseq_syntax.experiment.progress import INTERVAL as PROGRESS_INTERVAL, ProgressMonitor
from fairseq_syntax.experiment.runs import run_dir, run_method
from fairseq_syntax.experiment.tables import (
    fmt, no_matching_record, section_markdown, section_name, table_records, update_results,
)
from fairseq_syntax.experiment.tools import exclusive_lock, tool_env, tool_threads, training_budget


def per_corpus(key: str) -> str:
    """A ``DEFAULTS`` value of every preset, for an option's help: "synthetic 3000, ..."."""
    return ", ".join(f"{corpus} {'none' if d[key] is None else d[key]}"
                     for corpus, d in DEFAULTS.items())


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fairseq-syntax-experiment",
        description="Train every method with the same budget and sizes on one corpus, once "
        "per seed, decode and score the test split(s), write one JSON record per finished "
        "run (method, seed) to the results folder and render the corpus's section of the "
        "results file (default docs/RESULTS.md) from all records with the same settings. "
        "Runs that already have a record with the same settings are skipped.")
    p.add_argument("--corpus", required=True, metavar="NAME|FILE",
                   help="synthetic: the built-in en->vf corpus with gold trees and alignments "
                   "(generated unless --data-bin/--raw); multi30k, kftt: the data-bin of "
                   "examples/multi30k|kftt/prepare.sh (--data-bin); or a corpus description "
                   "FILE (JSON: data-bin, languages, test sets and references, detokenizer, "
                   "sacreBLEU tokenizer, extra scores; see docs/workflow.md, 'Your corpus in "
                   "the harness'), whose sizes and budget default to multi30k's")
    p.add_argument("--workdir",
                   help="folder for the generated corpus, checkpoints, outputs and logs "
                   "(WORKDIR/runs/METHOD/seedN/); invocations may share it: a run another "
                   "one is training is left to it ([busy]); required unless --render-only")
    p.add_argument("--data-bin",
                   help="an existing data-bin (synthetic: made by fairseq-syntax-preprocess "
                   "from --raw, with --testpref RAW/test,RAW/gen for the gen split; "
                   "multi30k: DEST/data-bin of prepare.sh)")
    p.add_argument("--raw", help="synthetic: the folder fairseq-syntax-synthetic wrote "
                   "(test.vf, test.align, test.en.conllu, gen.*); default WORKDIR/raw")
    p.add_argument("--corpus-dir", help="multi30k, kftt: prepare.sh's --dest (raw/, tok/); "
                   "default: the parent of --data-bin")
    p.add_argument("--train-size", type=int, default=20000,
                   help="synthetic: training pairs to generate (default: 20000)")
    p.add_argument("--valid-size", type=int, default=200,
                   help="synthetic: validation pairs to generate (default: 200)")
    p.add_argument("--test-size", type=int, default=500,
                   help="synthetic: test pairs to generate (default: 500)")
    p.add_argument("--gen-size", type=int, default=500,
                   help="synthetic: generalisation pairs to generate (gen split: deeper "
                   "nesting, more attractors; default: 500; 0: none)")
    p.add_argument("--corpus-seed", type=int, default=1,
                   help="synthetic: seed of the generated corpus (default: 1)")
    p.add_argument("--vocab-size", type=int, default=1000,
                   help="synthetic: sentencepiece vocabulary (default: 1000)")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods, or 'all': the architectures, "
                   "attentional_rnn+supervised_attention, attentional_rnn+blackout, "
                   "sdatt_double_syntax+gaussian_scores (eq. 10 as written), "
                   "sdatt_double_syntax+row_words (--syntax-row words), tree2seq+length_prior, "
                   "syntax_transformer+supervised_attention, transformer_align, and "
                   "fairseq's own lstm and fairseq_transformer (the backbones' peers); "
                   "'transformer' stands for the Transformer family "
                   "(trained with TRANSFORMER_RECIPES) (default: synthetic "
                   + DEFAULT_METHODS["synthetic"] + "; multi30k "
                   + DEFAULT_METHODS["multi30k"] + "; kftt " + DEFAULT_METHODS["kftt"]
                   + "; with --render-only, these and "
                   "'transformer')")
    p.add_argument("--seeds", default="1",
                   help="comma-separated training seeds; every (method, seed) is one run "
                   "with fairseq-train --seed N (default: 1)")
    p.add_argument("--results-dir",
                   help="folder of the run records, METHOD.seedN.json (default: "
                   "docs/results/CORPUS/; with --gpu docs/results/CORPUS-gpu/)")
    p.add_argument("--render-only", action="store_true",
                   help="train nothing: render the corpus section of --results from the "
                   "records in --results-dir whose settings equal these options' (kftt "
                   "without --data-bin: the corpus its records name; paired tests not "
                   "in RESULTS_DIR/significance.json need the references); an error, "
                   "naming how they differ, when it holds records and none matches")
    p.add_argument("--updates", type=int,
                   help="training updates of every method (default: " + per_corpus("updates")
                   + "; none: --epochs; Transformers: their recipe's); with --epochs, "
                   "whichever comes first")
    p.add_argument("--epochs", type=int,
                   help="training epochs of every method (fairseq-train --max-epoch; default: "
                   + per_corpus("epochs") + " (kftt: for its 20,000-pair CPU sample); none: "
                   "--updates; Transformers: their recipe's)")
    p.add_argument("--max-minutes", type=float, default=0,
                   help="also stop each training after this many minutes (0: no limit; "
                   "makes the budget machine-dependent)")
    p.add_argument("--max-tokens", type=int,
                   help="tokens per batch (default: " + per_corpus("max_tokens") + ")")
    p.add_argument("--embed-dim", type=int,
                   help="source and target embedding size (default: " + per_corpus("embed_dim")
                   + ")")
    p.add_argument("--encoder-hidden", type=int,
                   help="encoder LSTM size per direction (default: "
                   + per_corpus("encoder_hidden") + ")")
    p.add_argument("--decoder-hidden", type=int,
                   help="decoder LSTM size (default: " + per_corpus("decoder_hidden") + ")")
    p.add_argument("--dropout", type=float,
                   help="dropout (default: " + per_corpus("dropout") + ")")
    p.add_argument("--lr", type=float,
                   help="Adam learning rate (default: " + per_corpus("lr") + ")")
    p.add_argument("--clip-norm", type=float,
                   help="gradient clipping norm (default: " + per_corpus("clip_norm") + ")")
    p.add_argument("--label-smoothing", type=float,
                   help="label smoothing of the cross-entropy criterions, not BlackOut "
                   "(default: " + per_corpus("label_smoothing") + ")")
    p.add_argument("--step-time-batches", type=int, default=None,
                   help="training batches on which each method's step time is compared with "
                   "the backbone's (fairseq-syntax-step-time, CPU seconds; default: "
                   + per_corpus("step_time_batches") + "; 0: not measured)")
    p.add_argument("--transformer-recipe", default="", metavar="KEY=VALUE,...",
                   help="override values of the Transformer family's recipe of the corpus "
                   "(TRANSFORMER_RECIPES: "
                   + ", ".join(TRANSFORMER_RECIPES["synthetic"]) + "); --updates/--epochs, "
                   "when given, are every method's budget")
    p.add_argument("--gpu", action="store_true",
                   help="train and decode on the GPU (default: CPU, --cpu to every tool); "
                   "its records are apart from the CPU's (settings key device=gpu, "
                   "docs/results/CORPUS-gpu/, the results file's CORPUS-gpu section)")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at the same time (default 1; with N > 1 each tool "
                   "process gets --threads threads)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP/MKL threads per tool process (default: 1 when --jobs > 1, "
                   "else torch's default)")
    p.add_argument("--progress-seconds", type=float, default=PROGRESS_INTERVAL,
                   help="how often to look at the training logs for the [progress] lines (a "
                   "bar, epochs and updates of the budget, time left) of the runs under way; "
                   f"0: no such lines (default {PROGRESS_INTERVAL:g})")
    p.add_argument("--results", default=DEFAULT_RESULTS,
                   help="Markdown file whose corpus section (with --gpu: the CORPUS-gpu "
                   "section) is rewritten (default: docs/RESULTS.md)")
    return p


def parse_seeds(parser, text: str) -> List[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--seeds takes comma-separated integers, got {text!r}")
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        parser.error(f"--seeds needs distinct non-negative integers, got {text!r}")
    return seeds


def parse_args(argv: Optional[Sequence[str]] = None, parser=None) -> argparse.Namespace:
    """The options with the corpus's defaults filled in (``args.seeds`` a list of ints)."""
    parser = parser or get_parser()
    args = parser.parse_args(argv)
    args.corpus_name = corpus_name(args)
    args.preset = args.corpus if args.corpus in DEFAULTS else "multi30k"  # real data
    defaults = DEFAULTS[args.preset]
    args.transformer = transformer_recipe(parser, args)
    if args.updates is None and args.epochs is None:
        args.updates, args.epochs = defaults["updates"], defaults["epochs"]
    for name, value in defaults.items():
        if name not in ("updates", "epochs") and getattr(args, name) is None:
            setattr(args, name, value)
    if args.methods is None:  # a rendering shows the Transformer family's open rows too
        args.methods = section_methods(args) if args.render_only else DEFAULT_METHODS[args.preset]
    if not args.render_only and args.transformer["lr_scheduler"] == "linear" \
            and not args.transformer["updates"] and any(
            m.family == "transformer" for m in select_methods(args.methods)):
        parser.error("the Transformer recipe's lr_scheduler=linear decays to 0 at the last "
                     "update: give the budget in updates (--updates, or --transformer-recipe "
                     "updates=1510,epochs=none), or lr_scheduler=inverse_sqrt")
    if args.results_dir is None:
        args.results_dir = os.path.join("docs", "results", section_name(args))
    args.seeds = parse_seeds(parser, args.seeds)
    if any(v is not None and v <= 0 for v in (args.updates, args.epochs)) or args.jobs <= 0:
        parser.error("--updates, --epochs and --jobs must be positive")
    if not args.workdir and not args.render_only:
        parser.error("--workdir is required (unless --render-only)")
    return args


def boolean(value: str) -> bool:
    """``true``/``false`` (any case), ``1``/``0``, ``yes``/``no``."""
    known = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if value.lower() not in known:
        raise ValueError(value)
    return known[value.lower()]


def transformer_recipe(parser, args) -> dict:
    """The corpus's Transformer recipe with ``--transformer-recipe`` applied (each value
    read as the type of the recipe's own; ``none`` for an empty budget) and, when given,
    ``--updates``/``--epochs`` as its budget."""
    recipe = dict(TRANSFORMER_RECIPES[args.preset])
    for item in (i.strip() for i in args.transformer_recipe.split(",") if i.strip()):
        key, sep, value = item.partition("=")
        if not sep or key not in recipe:
            parser.error(f"--transformer-recipe {item!r}: give KEY=VALUE with KEY one of "
                         + ", ".join(recipe))
        old = recipe[key]
        if value.lower() == "none" and key in ("updates", "epochs"):
            recipe[key] = None
            continue
        kind = type(old) if old is not None else int
        try:
            recipe[key] = boolean(value) if kind is bool else kind(value)
        except ValueError:
            parser.error(f"--transformer-recipe {item!r}: {key} takes a "
                         + ("true or false" if kind is bool else kind.__name__))
    if args.updates is not None or args.epochs is not None:
        recipe["updates"], recipe["epochs"] = args.updates, args.epochs
    if not recipe["updates"] and not recipe["epochs"]:
        parser.error("the Transformer recipe needs updates or epochs")
    if recipe["lr_scheduler"] not in LR_SCHEDULERS:
        parser.error(f"--transformer-recipe lr_scheduler={recipe['lr_scheduler']}: choose one "
                     f"of {', '.join(LR_SCHEDULERS)}")
    if recipe["average_last"] < 0:
        parser.error("--transformer-recipe average_last: give a number of epochs (0: decode "
                     "the checkpoint of lowest validation loss)")
    return recipe


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    # importing fairseq's models runs logging.basicConfig(level=DEBUG) (in
    # fairseq/models/wav2vec/wav2vec2_classification.py): without this, every figure
    # printed thousands of matplotlib DEBUG lines
    logging.getLogger().setLevel(logging.INFO)
    argv_used = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["fairseq-syntax-experiment", *argv_used])
    methods = select_methods(args.methods)
    keys = method_keys(methods)
    if not args.render_only:  # the section keeps the open rows of the methods not run now
        keys = list(dict.fromkeys(method_keys(select_methods(section_methods(args))) + keys))
    corpus = render_corpus(args) if args.render_only else None
    if not args.render_only:
        os.makedirs(args.workdir, exist_ok=True)
        corpus = prepare_corpus(args, to_train=True)
    description = corpus_description(args, corpus)
    lock = threading.Lock()
    failures: List[str] = []

    def table() -> dict:
        """The records of the section, per method key, all scored on the same references."""
        records = read_records(args.results_dir)
        by_key = table_records(records, args, description)
        if args.render_only and records and not by_key:  # not a section of empty rows
            raise SystemExit("fairseq-syntax-experiment: error: --render-only: "
                             + no_matching_record(records, args, description)
                             + f"\n{args.results} is left as it was.")
        try:
            check_references([r for rs in by_key.values() for r in rs], corpus)
        except ReferencesChanged as err:
            raise SystemExit(
                f"fairseq-syntax-experiment: error: {err}. Move the stale record (METHOD.seedN."
                f"json and its .hyp files) out of {args.results_dir} and run the experiment "
                f"again with its --workdir: a run whose training finished there is only "
                f"decoded and scored again. {args.results} is left as it was.") from None
        return by_key

    def render() -> str:
        by_key = table()
        tests = PairedTests(args.corpus_name, corpus, args.results_dir,
                            corpus.bleu_tokenize if corpus else
                            recorded_tokenize([r for rs in by_key.values() for r in rs]))
        comparisons = compare_methods(by_key, backbones_of(by_key), tests)
        warn_cross_cpu_pairs(by_key)
        seed_pairs = compare_seeds(by_key, [BACKBONE, TRANSFORMER_BACKBONE], tests)
        tests.save()
        if tests.untested:  # a table of fewer seeds than its records would read as complete
            raise SystemExit(
                f"fairseq-syntax-experiment: error: --render-only: the paired tests of "
                f"{len(tests.untested)} pair(s) of runs are not in {tests.cache_path} "
                f"({'; '.join(tests.untested)}), and they need the corpus's references: give "
                f"its files (--data-bin, --corpus-dir). {args.results} is left as it was.")
        figures = os.path.join(os.path.dirname(os.path.abspath(args.results)), "figures")
        body = section_markdown(args.corpus_name, keys, by_key, args, description, failures,
                                comparisons, figures, seed_pairs)
        update_results(args.results, section_name(args), body)
        return body

    if args.render_only:
        body = render()
        print(body)
        print(f"wrote the {section_name(args)} section of {args.results}", file=sys.stderr)
        return 0

    table()  # other references than the records' are found before anything trains
    threads = tool_threads(args)
    env = tool_env(threads)
    host = host_facts(args, threads)
    places = places_of(args.workdir, corpus.databin, corpus_home(args), args.results_dir,
                       args.results)

    def recorded(method: Method, seed: int) -> bool:
        """Whether every row of this run has a record with these settings and translations
        (a record of version 1 kept no translations: run again, to be tested)."""
        for k in method_keys([method]):
            path = record_path(args.results_dir, k, seed)
            r = read_record(path)
            if r is None or r["settings"] != run_settings(method, k, args, description) \
                    or not os.path.exists(hypotheses_path(path)):
                return False
        return True

    todo: List[Tuple[Method, int]] = []
    for method in methods:
        for seed in args.seeds:
            if recorded(method, seed):
                for k in method_keys([method]):
                    print(f"[skip] {k} seed {seed}", file=sys.stderr, flush=True)
                continue
            todo.append((method, seed))
            for k in method_keys([method]):
                changed = changed_settings(read_record(record_path(args.results_dir, k, seed)),
                                           run_settings(method, k, args, description))
                if changed:
                    print(f"[rerun] {k} seed {seed}: its record has other "
                          f"{', '.join(changed)}; it will be kept in "
                          f"{os.path.join(args.results_dir, REPLACED_DIR)}/",
                          file=sys.stderr, flush=True)
    total = len(todo)
    done = [0]

    def one(task: Tuple[Method, int]) -> None:
        """Run ``task`` unless another invocation holds its folder's lock (it is training it)
        or has recorded it since the list was made."""
        method, seed = task
        with exclusive_lock(run_dir(args, method.key, seed) + ".lock") as holder:
            if holder is None and not recorded(method, seed):
                train_and_record(method, seed)
                return
        with lock:
            done[0] += 1
            if holder is None:
                print(f"[skip] {method.key} seed {seed}: recorded meanwhile by another "
                      "invocation", file=sys.stderr, flush=True)
            else:
                print(f"[busy] {method.key} seed {seed}: another fairseq-syntax-experiment "
                      f"(pid {holder}) is training it in {run_dir(args, method.key, seed)}; "
                      "not started", file=sys.stderr, flush=True)

    def train_and_record(method: Method, seed: int) -> None:
        t0 = time.time()
        label, save = f"{method.key} seed {seed}", run_dir(args, method.key, seed)
        with lock:
            print(f"[start] {label}", file=sys.stderr, flush=True)
        progress.add(label, os.path.join(save, "train.log.jsonl"),
                     training_budget(train_command(method, corpus, args, save, seed)))
        try:
            results = run_method(method, seed, corpus, args, env)
        finally:
            progress.remove(label)
        with lock:
            for row, commands, wall in results:
                if row.error:
                    failures.append(f"`{row.key}` seed {seed}: {row.error}")
                    continue
                settings = run_settings(method, row.key, args, description)
                path = record_path(args.results_dir, row.key, seed)
                keep_replaced(path, settings)
                write_hypotheses(path, row.hypotheses)
                if row.hypotheses_tok:
                    write_hypotheses(path, row.hypotheses_tok, tokenised=True)
                write_record(path, run_record(row, settings, commands, wall, host,
                                              run_dir(args, method.key, seed), corpus.databin,
                                              command, places))
            done[0] += 1
            r = results[0][0]
            status = f"failed: {r.error}" if r.error else run_summary(r)
            print(f"[{done[0]}/{total}] {method.key} seed {seed}: {status} "
                  f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
            render()  # a killed experiment still leaves an up-to-date table

    progress = ProgressMonitor(lock, args.progress_seconds)  # a bar and an ETA per run
    if args.progress_seconds > 0:
        progress.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(one, todo))
    finally:
        progress.stop()
    body = render()
    print(body)
    print(f"wrote the {section_name(args)} section of {args.results} "
          f"({total} run(s), {len(failures)} failed; records in {args.results_dir})",
          file=sys.stderr)
    return 1 if failures else 0


def run_summary(row) -> str:
    """One line of a finished run's scores (each test set's BLEU, chrF, agreement)."""
    parts = []
    for test, scores in row.tests.items():
        parts.append(f"{test}: BLEU {fmt(scores.get('bleu'))} chrF {fmt(scores.get('chrf'))}"
                     + (f" agreement {fmt(scores['agreement'])}" if "agreement" in scores else ""))
    return "; ".join(parts + [*([f"AER {fmt(row.aer)}"] if row.aer is not None else []),
                              *([f"DA/UA {row.da:.1f}/{row.ua:.1f}"] if row.da is not None else []),
                              f"valid ppl {fmt(row.valid_ppl)}"])


def section_methods(args) -> str:
    """The methods a corpus section lists by default: the corpus's own and the
    Transformer family (rows without records read ``not run yet``)."""
    return DEFAULT_METHODS[args.preset] + ",transformer"


def render_corpus(args):
    """The corpus of a rendering, for the references of paired tests not yet cached; None
    (with a note) where its files are not here; a synthetic corpus only where its data-bin
    (--data-bin, or WORKDIR/data-bin) exists."""
    databin = args.data_bin or (args.workdir and os.path.join(args.workdir, "data-bin"))
    if args.corpus == "synthetic" and not (
            databin and os.path.exists(os.path.join(databin, "syntax_manifest.json"))):
        return None
    try:
        return prepare_corpus(args)
    except SystemExit as err:
        reason = str(err).replace("fairseq-syntax-experiment: error: ", "")
        print(f"fairseq-syntax-experiment: note: {reason}; paired tests come from the cache "
              "only", file=sys.stderr)
        return None


def corpus_home(args) -> Optional[str]:
    """The folder of the corpus's test files: ``--corpus-dir``, the parent of ``--raw``, or
    the description file's folder (None: the data-bin's parent)."""
    if args.corpus not in PRESETS:
        return os.path.dirname(os.path.abspath(args.corpus))
    return args.corpus_dir or (os.path.dirname(os.path.abspath(args.raw)) if args.raw else None)


def warn_cross_cpu_pairs(by_key) -> None:
    """Name on stderr the method-backbone pairs that ran on two kinds of machine."""
    pairs = cpu_pairings(by_key)
    across = [f"{key} seed {seed}" for key, by_seed in pairs.items()
              for seed, same in sorted(by_seed.items()) if same is False]
    if across:
        print(f"warning: {len(across)} of {sum(map(len, pairs.values()))} method-backbone "
              f"pairs ran on two kinds of CPU ({', '.join(across)}): their paired tests also "
              "test the CPUs (the tables' 'one CPU' column)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
