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
  ``<!-- CORPUS:end -->``; other sections and any text outside the markers are kept),
  rendered from **every** JSON file in the results folder whose settings equal the
  current ones, so runs of earlier sessions count. It is rewritten after each finished
  run (a killed experiment leaves an up-to-date table) and at the end, and
  ``--render-only`` rewrites it without training. A cell is the mean ± the sample standard
  deviation (ddof=1) over the seeds present.

The experiment is resumable: a run whose JSON file exists with identical settings is
skipped (``[skip] METHOD seed N``), one whose settings differ is run again (its folder
under ``--workdir`` starts afresh).

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
  long-distance sentences (:func:`~fairseq_syntax.data.synthetic_corpus.agreement_report`),
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
import datetime
import json
import logging
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq_syntax.cli import FAIRSEQ_LSTM, task_arch_args
from fairseq_syntax.data.side_files import FORMAT_VERSION
from fairseq_syntax.data.synthetic_corpus import GRAMMAR_VERSION, generate_corpus
from fairseq_syntax.user_dir import user_dir

BACKBONE = "attentional_rnn"
TRANSFORMER_BACKBONE = "syntax_transformer"
FAIRSEQ_TRANSFORMER_PEER = "fairseq_transformer"  # fairseq's own transformer
TREE_INDUCING = ("sa_nmt", "fa_nmt", "sa_transformer")  # arch prefixes whose encoders induce trees
DEFAULT_RESULTS = os.path.join("docs", "RESULTS.md")
RECORD_FORMAT = "fairseq-syntax-experiment run, version 1"
RUN_STAMP = "run.json"  # in a run's folder: the training command its checkpoints belong to
DECODED_CHECKPOINT = "checkpoint_best.pt"  # the epoch of lowest validation loss
USER_DIR_SHELL = '"$(fairseq-syntax-user-dir)"'  # how a reader's shell finds the plugin

# Per-corpus defaults of the sizes and the budget (CPU-friendly for synthetic; Multi30k as
# issue 14's anchor: 256-d embeddings, BiLSTM 2 x 256, decoder 512, 12 epochs).
DEFAULTS = {
    # the quickstart's sizes; 2400 updates: the backbone's lowest valid loss is then within
    # about 2 % of smoothed_loss_floor, below which no longer run can go (800 were not
    # enough: seed 2 had 1.41 at 800, 1.13 at 2130; docs/RESULTS.md, Budgets)
    "synthetic": dict(updates=2400, epochs=None, max_tokens=3000, embed_dim=96,
                      encoder_hidden=128, decoder_hidden=256, dropout=0.1, lr=0.003,
                      clip_norm=1.0, label_smoothing=0.1, step_time_batches=0),
    "multi30k": dict(updates=None, epochs=12, max_tokens=4000, embed_dim=256,
                     encoder_hidden=256, decoder_hidden=512, dropout=0.3, lr=0.002,
                     clip_norm=5.0, label_smoothing=0.1, step_time_batches=8),
}
DEFAULT_METHODS = {
    "synthetic": ",".join([
        "attentional_rnn", "attentional_rnn+supervised_attention", "sdatt_double_syntax",
        "sa_nmt_shared", "sa_nmt_hard", "tree2seq", "lookahead_concat"]),
    "multi30k": ",".join([
        "attentional_rnn", "lstm", "sdatt_double_syntax", "lookahead_concat", "sa_nmt_hard",
        "sa_nmt_shared", "tree2seq", "tree2seq+length_prior",
        "attentional_rnn+supervised_attention"]),
}
# The Transformer family's recipe per corpus (issue 17 item 5), declared once: sizes,
# optimiser, schedule and budget of every Transformer method, each size given on the command
# line to the model's base architecture (so fairseq's transformer_align gets the same model).
# Adam (0.9, 0.98), inverse_sqrt warm-up, label smoothing 0.1, weight decay 1e-4 and a shared
# decoder input/output embedding are fairseq's IWSLT'14 Transformer recipe
# (examples/translation/README.md). --transformer-recipe KEY=VALUE overrides a value;
# --updates/--epochs, when given, are every method's budget.
TRANSFORMER_RECIPES = {
    # comparable with the RNN's quickstart sizes (1.10M parameters in all): 2 + 2 layers of
    # 128, FFN 512, 4 heads (0.95M); the RNN's 2400 updates of 3000 tokens, warm-up over the
    # first 400, peak lr 1e-3 (fairseq's upper value; the model is small).
    "synthetic": dict(updates=2400, epochs=None, max_tokens=3000, embed_dim=128, ffn_dim=512,
                      layers=2, heads=4, dropout=0.1, attention_dropout=0.0, lr=0.001,
                      warmup_updates=400, adam_betas="(0.9, 0.98)", weight_decay=0.0001,
                      clip_norm=0.0, label_smoothing=0.1, alignment_heads=1),
    # the RNN's CPU budget: fairseq-syntax-step-time on the Multi30k data-bin (1 thread, the
    # same 6 batches of 4000 tokens) gave the RNN recipe 1.29 s per update, the
    # transformer_iwslt_de_en sizes (6 + 6 layers of 512, FFN 1024) 5.95 s (the RNN's 12
    # epochs = 1812 updates buy 393 of them, 2.6 epochs), 3 + 3 layers of 512 3.17 s, and
    # 3 + 3 layers of 256, FFN 1024, 4 heads 1.50 s: 12 x 1.29 / 1.50 = 10.3, so 10 epochs of
    # the same batches (4000 tokens), ~1510 updates. Dropout 0.3 as the RNN's (29k pairs).
    "multi30k": dict(updates=None, epochs=10, max_tokens=4000, embed_dim=256, ffn_dim=1024,
                     layers=3, heads=4, dropout=0.3, attention_dropout=0.0, lr=0.001,
                     warmup_updates=400, adam_betas="(0.9, 0.98)", weight_decay=0.0001,
                     clip_norm=0.0, label_smoothing=0.1, alignment_heads=1),
}
# beam search of every decode (the test splits and the decode-only variants)
DECODING = ["--beam", "5", "--batch-size", "64", "--max-len-a", "1.5", "--max-len-b", "10",
            "--post-process", "sentencepiece"]


@dataclass
class Method:
    """One training run: ``key`` names it on the command line and in the table."""

    key: str
    arch: str
    criterion: str = "label_smoothed_cross_entropy"
    # model options of this method (e.g. a reading of a paper's equation)
    model_args: List[str] = field(default_factory=list)
    # decode-only variants sharing this run's checkpoint: (key, extra generate args)
    variants: List[tuple] = field(default_factory=list)
    # whose recipe trains it: "rnn" (the size options of this command) or "transformer"
    # (TRANSFORMER_RECIPES, given to the model's base architecture)
    family: str = "rnn"
    task: str = "syntax_translation"  # of fairseq-train and fairseq-generate
    # Transformer: supervise (and print) the recipe's alignment head (--alignment-layer/
    # --alignment-heads, as fairseq's transformer_align picks one)
    alignment_head: bool = False
    train_args: List[str] = field(default_factory=list)  # other fairseq-train options


@dataclass
class Row:
    """Measured scores of one run of one method (None: not measured). Fields without a
    prefix are of the test split, ``gen_`` of the synthetic generalisation split;
    accuracies, BLEU, chrF, RIBES, AER, P, R, DA, UA in %."""

    key: str
    arch: str
    seed: int = 1
    bleu: Optional[float] = None
    chrf: Optional[float] = None
    ribes: Optional[float] = None
    agreement: Optional[float] = None
    agreement_counts: str = ""
    agreement_long: Optional[float] = None
    agreement_long_counts: str = ""
    gen_bleu: Optional[float] = None
    gen_chrf: Optional[float] = None
    gen_ribes: Optional[float] = None
    gen_agreement: Optional[float] = None
    gen_agreement_counts: str = ""
    gen_agreement_long: Optional[float] = None
    gen_agreement_long_counts: str = ""
    bleu_tok: Optional[float] = None  # Multi30k: BLEU of the spaCy tokens (tokenize none)
    bleu_signature: str = ""
    chrf_signature: str = ""
    aer: Optional[float] = None
    precision: Optional[float] = None
    recall: Optional[float] = None
    da: Optional[float] = None
    ua: Optional[float] = None
    baselines: Dict[str, float] = field(default_factory=dict)
    valid_ppl: Optional[float] = None  # of the decoded (lowest valid loss) checkpoint
    valid_loss: Optional[float] = None  # lowest validation loss of training (bits/token)
    valid_loss_floor: Optional[float] = None  # :func:`smoothed_loss_floor` of this run
    step_time_ratio: Optional[float] = None
    train_epochs: Optional[int] = None
    train_updates: Optional[int] = None
    train_seconds: Optional[float] = None
    valid_ppl_by_epoch: List[float] = field(default_factory=list)  # epochs 1, 2, ...
    error: str = ""


def all_methods() -> List[Method]:
    """Every architecture on the RNN backbone (the sizes and budgets here are the RNN's),
    backbone first, and the criterion and option variants; then the Transformer family
    (:func:`transformer_methods`)."""
    from fairseq_syntax.cli.benchmark import rnn_architectures

    methods = [Method(a, a) for a in rnn_architectures()]
    for m in methods:
        if m.arch == "tree2seq":
            m.variants.append(("tree2seq+length_prior", ["--length-prior"]))
    methods[1:1] = [
        # fairseq's own lstm, the backbone's peer (issue 14): same sizes, batches and budget
        Method(FAIRSEQ_LSTM, FAIRSEQ_LSTM, task="translation"),
        Method(f"{BACKBONE}+supervised_attention", BACKBONE, "supervised_attention_cross_entropy"),
        Method(f"{BACKBONE}+blackout", BACKBONE, "blackout"),
    ]
    # SDAtt's Gaussian on the normalised weights instead of eq. 10's scores (issue 15)
    at = next(i for i, m in enumerate(methods) if m.key == "sdatt_double_syntax") + 1
    methods.insert(at, Method("sdatt_double_syntax+gaussian_weights", "sdatt_double_syntax",
                              model_args=["--syntax-gaussian", "weights"]))
    return methods + transformer_methods()


def transformer_methods() -> List[Method]:
    """The Transformer family (issue 17) under its recipe: every mechanism's architecture at
    the recipe's sizes (``benchmark.transformer_architectures``, backbone first), the backbone
    under ``supervised_attention_cross_entropy`` (Mi et al. on the recipe's alignment head)
    and, to compare with it, fairseq's own ``transformer_align`` under
    ``label_smoothed_cross_entropy_with_alignment`` (``--task translation --load-alignments``:
    fairseq reads the data-bin's ``{split}.align.{src}-{tgt}`` binaries; the same head).
    fairseq's own ``transformer`` (``--task translation``) is the backbone's peer, as ``lstm``
    is the RNN backbone's: same sizes, recipe, batches and budget."""
    from fairseq_syntax.cli.benchmark import transformer_architectures

    methods = [Method(a, a, family="transformer") for a in transformer_architectures()]
    methods[1:1] = [
        Method(FAIRSEQ_TRANSFORMER_PEER, "transformer", family="transformer", task="translation"),
        Method(f"{TRANSFORMER_BACKBONE}+supervised_attention", TRANSFORMER_BACKBONE,
               "supervised_attention_cross_entropy", family="transformer", alignment_head=True),
        Method("transformer_align", "transformer_align",
               "label_smoothed_cross_entropy_with_alignment", family="transformer",
               task="translation", alignment_head=True, train_args=["--load-alignments"]),
    ]
    return methods


def family_of(key: str) -> str:
    """``rnn`` or ``transformer``: the family of the method (or variant) ``key``."""
    return next((m.family for m in all_methods() if key in method_keys([m])), "rnn")


def method_keys(methods: Sequence[Method]) -> List[str]:
    """The table's keys of ``methods``: each method, then its decode-only variants."""
    return [k for m in methods for k in [m.key, *(v[0] for v in m.variants)]]


def select_methods(spec: str) -> List[Method]:
    """``all`` or comma-separated method keys (``tree2seq+length_prior`` needs ``tree2seq``);
    ``transformer`` stands for every method of the Transformer family."""
    methods = all_methods()
    if spec == "all":
        return methods
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    if "transformer" in wanted:
        at = wanted.index("transformer")
        wanted[at:at + 1] = [k for k in method_keys(transformer_methods()) if k not in wanted]
    known = set(method_keys(methods))
    unknown = [w for w in wanted if w not in known]
    if unknown:
        raise SystemExit(f"fairseq-syntax-experiment: error: unknown methods {unknown}; "
                         f"known: {', '.join(sorted(known))}")
    chosen = []
    for m in methods:
        variants = [v for v in m.variants if v[0] in wanted]
        if m.key in wanted or variants:
            m.variants = variants
            chosen.append(m)
    return chosen


def file_key(key: str) -> str:
    """``key`` as a file name part: every run of non-word characters as ``_``."""
    return re.sub(r"\W+", "_", key)


def record_path(results_dir: str, key: str, seed: int) -> str:
    return os.path.join(results_dir, f"{file_key(key)}.seed{seed}.json")


# ---------------------------------------------------------------------------------------
# running the tools
# ---------------------------------------------------------------------------------------


def tool_env(threads: Optional[int]) -> Dict[str, str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def tool_threads(args) -> Optional[int]:
    """OMP/MKL threads of each tool process (None: torch's default)."""
    return args.threads or (1 if args.jobs > 1 else None)


def run_tool(cmd: Sequence[str], log_path: str, env, stdout_path: Optional[str] = None) -> str:
    """Run ``cmd``; stdout to ``stdout_path`` (or the log), stderr to the log. Returns stdout
    text; raises RuntimeError naming the log when it fails."""
    with open(log_path, "a") as log:
        log.write("$ " + shlex.join(map(str, cmd)) + "\n")
        log.flush()
        out = open(stdout_path, "w") if stdout_path else subprocess.PIPE
        try:
            proc = subprocess.run(list(map(str, cmd)), stdout=out, stderr=log, env=env, text=True)
        finally:
            if stdout_path:
                out.close()
        text = proc.stdout if not stdout_path else open(stdout_path, encoding="utf-8").read()
        if not stdout_path:
            log.write(text)
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(str(cmd[0]))} failed ({proc.returncode}), "
                           f"see {log_path}")
    return text


def run_function(fn, kwargs: dict, log_path: str, threads: Optional[int] = None):
    """``fn(**kwargs)`` in a fresh Python process, as a tool's own process ran it: its own
    CPU clock (step times), torch threads (``threads``; None: torch's default) and memory,
    its output appended to ``log_path``. Returns what ``fn`` returns; an error exit raises
    RuntimeError naming the log."""
    with open(log_path, "a") as log:
        log.write(f"> {fn.__module__}.{fn.__qualname__}("
                  + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")\n")
    spawn = multiprocessing.get_context("spawn")  # no fork of a process with threads
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(_logged_call, fn, kwargs, log_path, threads).result()


def _logged_call(fn, kwargs: dict, log_path: str, threads: Optional[int]):
    """The child of :func:`run_function`."""
    import traceback
    import warnings

    import torch

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    warnings.simplefilter("ignore")
    if threads:
        torch.set_num_threads(threads)
    try:
        return fn(**kwargs)
    except SystemExit as err:  # the tools' error exit
        raise RuntimeError(f"{fn.__module__}.{fn.__qualname__} failed ({err}), "
                           f"see {log_path}") from None
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def shown(cmd: Sequence[str]) -> str:
    """``cmd`` as a shell line, the plugin's folder as a reader's shell finds it."""
    return shlex.join(map(str, cmd)).replace(shlex.quote(user_dir()), USER_DIR_SHELL)


def read_lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write_lines(path: str, lines: Sequence[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to a temporary file next to ``path``, then rename it over ``path``:
    a reader (or a killed run) never sees half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def hypotheses_of(generate_out: str) -> List[str]:
    """The first ``H-`` line of every sentence, in sentence order."""
    hyps: Dict[int, str] = {}
    for line in read_lines(generate_out):
        m = re.match(r"H-(\d+)\t[^\t]*\t?(.*)$", line)
        if m and int(m.group(1)) not in hyps:
            hyps[int(m.group(1))] = m.group(2)
    return [hyps[i] for i in sorted(hyps)]


def ribes_of(refs: Sequence[str], hyps: Sequence[str]) -> float:
    from fairseq_syntax.syntax.ribes import corpus_ribes

    return 100.0 * corpus_ribes([[r.split() for r in refs]], [h.split() for h in hyps])


def read_train_log(path: str) -> dict:
    """From the JSON lines of fairseq-train's ``--log-format json --log-file`` (other lines
    skipped): the lowest validation loss and the perplexity of that epoch (the checkpoint
    ``checkpoint_best.pt`` holds), the last epoch, the last update number and the validation
    perplexity of every epoch (a resumed run's log repeats epochs: the last value counts)."""
    out = {"valid_loss": None, "valid_ppl": None, "train_epochs": None,
           "train_updates": None}
    ppl_of_epoch: Dict[int, float] = {}
    for line in read_lines(path):
        if not line.startswith("{"):
            continue
        try:
            stats = json.loads(line)
        except json.JSONDecodeError:
            continue  # the config dict fairseq logs first (Python repr, not JSON)
        if "valid_loss" in stats:
            loss = float(stats["valid_loss"])
            if out["valid_loss"] is None or loss < out["valid_loss"]:
                out["valid_loss"] = loss
                out["valid_ppl"] = float(stats["valid_ppl"])
            out["train_epochs"] = int(stats["epoch"])
            ppl_of_epoch[int(stats["epoch"])] = float(stats["valid_ppl"])
        for name in ("num_updates", "train_num_updates", "valid_num_updates"):
            if name in stats:
                out["train_updates"] = int(float(stats[name]))
    out["valid_ppl_by_epoch"] = [ppl_of_epoch[e] for e in sorted(ppl_of_epoch)]
    return out


def smoothed_loss_floor(epsilon: float, vocab_size: int) -> float:
    """The lowest loss per token (bits) of fairseq's ``label_smoothed_cross_entropy``:
    it is the cross-entropy of the model's distribution against the smoothed target
    (1 - epsilon on the reference, epsilon / (V - 1) on each other word), so by Gibbs'
    inequality no model, however long it trains, goes below that target's entropy. A run
    whose validation loss is within x % of this floor is within x % of any longer run."""
    import math

    other = epsilon / (vocab_size - 1)
    nats = -(1 - epsilon) * math.log(1 - epsilon) - epsilon * math.log(other)
    return nats / math.log(2)


def target_vocab_size(databin: str) -> int:
    """Size of the output layer: the target dictionary of ``databin`` with fairseq's
    four special symbols."""
    from fairseq.data import Dictionary

    manifest = os.path.join(databin, "syntax_manifest.json")
    with open(manifest) as f:
        target = json.load(f)["target_lang"]
    return len(Dictionary.load(os.path.join(databin, f"dict.{target}.txt")))


# ---------------------------------------------------------------------------------------
# corpora
# ---------------------------------------------------------------------------------------


@dataclass
class Split:
    """One decoded split: fairseq's subset name and its reference files."""

    subset: str         # the data-bin's name (test, test1)
    ref_detok: str      # references for BLEU / chrF (raw text)
    ref_tok: str        # references tokenised like the hypotheses (RIBES)
    source_trees: str   # gold/spaCy trees of the source (CoNLL-U)


@dataclass
class Corpus:
    """Where a corpus's data-bin and its reference files are. ``splits``: ``test`` and,
    on the synthetic corpus, ``gen`` (row fields ``gen_*``)."""

    name: str
    databin: str
    splits: Dict[str, Split]
    gold_align: Optional[str] = None  # gold test alignments (synthetic only)
    glue_table: Optional[str] = None  # German detokeniser table (Multi30k)


def synthetic_raw_dir(args) -> Optional[str]:
    return args.raw or (os.path.join(args.workdir, "raw") if args.workdir else None)


def corpus_description(args) -> str:
    """The corpus as the settings record it (no machine paths). Synthetic: the generator's
    seed and sizes, or the sizes of the files given with ``--raw``."""
    if args.corpus == "multi30k":
        return ("Multi30k task 1 En→De (`examples/multi30k/prepare.sh`: spaCy tokens, "
                "en_core_web_sm parses, eflomal alignments), test_2016_flickr")
    if args.raw:
        sizes = [len(read_lines(p)) if os.path.exists(p) else 0
                 for p in (os.path.join(args.raw, f"{s}.vf")
                           for s in ("train", "valid", "test", "gen"))]
        if args.data_bin and not os.path.exists(os.path.join(args.data_bin,
                                                             "test1.en-vf.en.bin")):
            sizes[3] = 0  # a given data-bin without the gen split: gen is not decoded
        origin = "files given with --raw"
    else:
        sizes = [args.train_size, args.valid_size, args.test_size, args.gen_size]
        origin = (f"`fairseq-syntax-synthetic --seed {args.corpus_seed}`, grammar version "
                  f"{GRAMMAR_VERSION}")
    vocab = "" if args.data_bin else f", sentencepiece vocabulary {args.vocab_size}"
    return (f"synthetic en→vf corpus ({origin}), {'/'.join(map(str, sizes))} "
            f"train/valid/test/gen pairs{vocab}, gold trees and alignments")


def prepare_synthetic(args) -> Corpus:
    """Generate and preprocess the synthetic corpus (or take ``--data-bin`` and ``--raw``).

    A corpus this command generated earlier in ``--workdir`` is reused when it was made
    with the same seed, sizes, vocabulary, grammar version and side-file format version
    (``WORKDIR/corpus.json``), else made again."""
    raw = synthetic_raw_dir(args)
    databin = args.data_bin or os.path.join(args.workdir, "data-bin")
    env = tool_env(None)
    log = os.path.join(args.workdir, "prepare.log")
    if not args.data_bin:
        stamp_path = os.path.join(args.workdir, "corpus.json")
        stamp = dict(grammar=GRAMMAR_VERSION, side_files=FORMAT_VERSION, seed=args.corpus_seed, train=args.train_size, valid=args.valid_size,
                     test=args.test_size, gen=args.gen_size, vocab_size=args.vocab_size,
                     raw=None if not args.raw else os.path.abspath(args.raw))
        old = json.load(open(stamp_path)) if os.path.exists(stamp_path) else None
        if old != stamp or not os.path.exists(os.path.join(databin, "syntax_manifest.json")):
            if not args.raw:
                shutil.rmtree(raw, ignore_errors=True)  # WORKDIR/raw: no stale gen files
                summary = generate_corpus(raw, args.corpus_seed, args.train_size,
                                          args.valid_size, args.test_size, args.gen_size)
                with open(log, "a") as f:
                    f.write(f"> generate_corpus: {summary['sizes']} pairs to {raw}\n")
            tests = f"{raw}/test" + (f",{raw}/gen" if os.path.exists(f"{raw}/gen.vf") else "")
            run_tool(["fairseq-syntax-preprocess", "--source-lang", "en", "--target-lang", "vf",
                      "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
                      "--testpref", tests, "--align-suffix", "align",
                      "--vocab-size", str(args.vocab_size), "--destdir", databin,
                      "--workers", "1", "--force"], log, env)
            write_atomically(stamp_path, json.dumps(stamp, indent=1) + "\n")
    for name in ("test.vf", "test.align", "test.en.conllu"):
        if not os.path.exists(os.path.join(raw, name)):
            raise SystemExit(f"fairseq-syntax-experiment: error: {raw}/{name} is missing "
                             "(--raw must be the folder fairseq-syntax-synthetic wrote)")
    splits = {"test": Split("test", f"{raw}/test.vf", f"{raw}/test.vf", f"{raw}/test.en.conllu")}
    # the generalisation split, where the data-bin has it as its second test split
    if os.path.exists(f"{raw}/gen.vf") and os.path.exists(
            os.path.join(databin, "test1.en-vf.en.bin")):
        splits["gen"] = Split("test1", f"{raw}/gen.vf", f"{raw}/gen.vf", f"{raw}/gen.en.conllu")
    else:
        print("fairseq-syntax-experiment: note: no gen split (raw gen.vf and the data-bin's "
              "test1), gen columns stay empty", file=sys.stderr)
    return Corpus("synthetic", databin, splits, gold_align=os.path.join(raw, "test.align"))


def prepare_multi30k(args) -> Corpus:
    """The data-bin of ``examples/multi30k/prepare.sh`` and the files next to it."""
    if not args.data_bin:
        raise SystemExit("fairseq-syntax-experiment: error: --corpus multi30k needs --data-bin "
                         "(the data-bin examples/multi30k/prepare.sh made, e.g. "
                         "data/multi30k/data-bin)")
    dest = args.multi30k_dir or os.path.dirname(os.path.abspath(args.data_bin))
    files = dict(ref_detok=os.path.join(dest, "raw", "test_2016_flickr.de"),
                 ref_tok=os.path.join(dest, "tok", "test_2016_flickr.de"),
                 source_trees=os.path.join(dest, "tok", "test_2016_flickr.en.conllu"),
                 glue_table=os.path.join(dest, "tok", "glue.de.json"))
    for path in files.values():
        if not os.path.exists(path):
            raise SystemExit(f"fairseq-syntax-experiment: error: {path} is missing (run "
                             "examples/multi30k/prepare.sh, or give --multi30k-dir)")
    glue = files.pop("glue_table")
    return Corpus("multi30k", args.data_bin, {"test": Split("test", **files)}, glue_table=glue)


# ---------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------


def criterion_args(method: Method, args) -> List[str]:
    smoothing = [] if method.criterion == "blackout" else \
        ["--label-smoothing", str(label_smoothing_of(method, args))]
    return ["--criterion", method.criterion, *smoothing]


def label_smoothing_of(method: Method, args) -> float:
    return args.transformer["label_smoothing"] if method.family == "transformer" \
        else args.label_smoothing


def transformer_size_args(recipe: dict) -> List[str]:
    """The recipe's sizes as options of fairseq's Transformer (every size given, so any
    base architecture of the family builds the same shape)."""
    out = []
    for side in ("encoder", "decoder"):
        out += [f"--{side}-embed-dim", str(recipe["embed_dim"]),
                f"--{side}-ffn-embed-dim", str(recipe["ffn_dim"]),
                f"--{side}-layers", str(recipe["layers"]),
                f"--{side}-attention-heads", str(recipe["heads"])]
    return out + ["--dropout", str(recipe["dropout"]),
                  "--attention-dropout", str(recipe["attention_dropout"]),
                  "--share-decoder-input-output-embed"]


def alignment_head_args(recipe: dict) -> List[str]:
    """The supervised head: the first ``alignment_heads`` heads of the second-to-last decoder
    layer (fairseq's transformer_align default, layer 4 of 6), the bottom one of 2 layers."""
    return ["--alignment-layer", str(max(0, recipe["layers"] - 2)),
            "--alignment-heads", str(recipe["alignment_heads"])]


def transformer_model_args(method: Method, recipe: dict) -> List[str]:
    """What the recipe gives the model of ``method``: sizes and, for a supervised method,
    its alignment head."""
    return [*transformer_size_args(recipe),
            *(alignment_head_args(recipe) if method.alignment_head else [])]


def transformer_train_command(method: Method, corpus: Corpus, args, save: str,
                              seed: int) -> List[str]:
    r = args.transformer
    interval = max(1, r["updates"] // 10) if r["updates"] else 100
    budget = [*(["--max-update", str(r["updates"])] if r["updates"] else []),
              *(["--max-epoch", str(r["epochs"])] if r["epochs"] else []),
              *(["--stop-time-hours", str(args.max_minutes / 60)] if args.max_minutes else [])]
    return [
        "fairseq-train", corpus.databin, "--user-dir", user_dir(), "--task", method.task,
        *method.train_args, "--arch", method.arch, *method.model_args,
        *transformer_model_args(method, r), *criterion_args(method, args),
        "--optimizer", "adam", "--adam-betas", r["adam_betas"], "--lr", str(r["lr"]),
        "--lr-scheduler", "inverse_sqrt", "--warmup-updates", str(r["warmup_updates"]),
        "--weight-decay", str(r["weight_decay"]), "--clip-norm", str(r["clip_norm"]),
        "--max-tokens", str(r["max_tokens"]), *budget,
        "--seed", str(seed), "--num-workers", "0",
        "--save-dir", save, "--no-epoch-checkpoints", "--no-progress-bar",
        "--log-format", "json", "--log-file", os.path.join(save, "train.log.jsonl"),
        "--log-interval", str(interval), *device_args(args),
    ]


def budget_args(args) -> List[str]:
    return ([*(["--max-update", str(args.updates)] if args.updates else []),
             *(["--max-epoch", str(args.epochs)] if args.epochs else []),
             *(["--stop-time-hours", str(args.max_minutes / 60)] if args.max_minutes else [])])


def train_command(method: Method, corpus: Corpus, args, save: str, seed: int) -> List[str]:
    if method.family == "transformer":
        return transformer_train_command(method, corpus, args, save, seed)
    interval = max(1, args.updates // 10) if args.updates else 100
    return [
        "fairseq-train", corpus.databin, "--user-dir", user_dir(),
        *task_arch_args(method.arch, args.embed_dim, method.task),
        *method.model_args, *criterion_args(method, args),
        *size_args(args), "--optimizer", "adam", "--lr", str(args.lr), "--clip-norm", str(args.clip_norm),
        "--max-tokens", str(args.max_tokens), *budget_args(args),
        "--seed", str(seed), "--num-workers", "0",
        "--save-dir", save, "--no-epoch-checkpoints", "--no-progress-bar",
        "--log-format", "json", "--log-file", os.path.join(save, "train.log.jsonl"),
        "--log-interval", str(interval), *device_args(args),
    ]


def size_args(args) -> List[str]:
    e = str(args.embed_dim)
    return ["--encoder-embed-dim", e, "--decoder-embed-dim", e,
            "--encoder-hidden-size", str(args.encoder_hidden),
            "--decoder-hidden-size", str(args.decoder_hidden), "--dropout", str(args.dropout)]


def device_args(args) -> List[str]:
    return [] if args.gpu else ["--cpu"]


def generate_command(corpus: Corpus, ckpt: str, args, subset: str = "test",
                     extra=(), task: str = "syntax_translation") -> List[str]:
    return ["fairseq-generate", corpus.databin, "--user-dir", user_dir(),
            "--task", task, "--path", ckpt, "--gen-subset", subset,
            *DECODING, *task_generate_args(task), *device_args(args), *extra]


def task_generate_args(task: str) -> List[str]:
    """fairseq-generate options a task needs: fairseq's ``translation`` translated only 32 of
    37 test sentences with its default ``--required-batch-size-multiple 8`` (the batch of
    the last 5 was lost; measured on the tiny synthetic corpus of tests/test_experiment.py),
    all 37 with 1."""
    return ["--required-batch-size-multiple", "1"] if task == "translation" else []


def run_settings(method: Method, key: str, args, description: str) -> dict:
    """Everything that defines the run of ``key`` (a method or one of its decode-only
    variants) but its seed: two runs with equal settings differ only by the seed."""
    extra = next((e for k, e in method.variants if k == key), [])
    model_args = {"model_args": method.model_args} if method.model_args else {}
    if method.family == "transformer":  # (RNN records keep the keys below, unchanged)
        return {
            "corpus": args.corpus,
            "corpus_description": description,
            "method": key,
            "family": "transformer",
            "arch": method.arch,
            "task": method.task,
            **model_args,
            "criterion": criterion_args(method, args),
            "train_args": method.train_args,
            "recipe": dict(args.transformer),
            "model": transformer_model_args(method, args.transformer),
            "max_minutes": args.max_minutes or None,
            "checkpoint": "best",
            "decoding": [*DECODING, *extra],
        }
    return {
        "corpus": args.corpus,
        "corpus_description": description,
        "method": key,
        "arch": method.arch,
        **model_args,
        "criterion": criterion_args(method, args),
        "label_smoothing": None if method.criterion == "blackout" else args.label_smoothing,
        "embed_dim": args.embed_dim,
        "encoder_hidden": args.encoder_hidden,
        "decoder_hidden": args.decoder_hidden,
        "dropout": args.dropout,
        "optimizer": "adam",
        "lr": args.lr,
        "clip_norm": args.clip_norm,
        "max_tokens": args.max_tokens,
        "updates": args.updates,
        "epochs": args.epochs,
        "max_minutes": args.max_minutes or None,
        "checkpoint": "best",
        "decoding": [*DECODING, *extra],
    }


def score_split(row: Row, prefix: str, corpus: Corpus, split: Split, gen_out: str,
                out_prefix: str) -> None:
    """BLEU, chrF, RIBES (and agreement) of the ``H-`` lines of ``gen_out`` into the
    ``prefix`` fields of ``row``."""
    from sacrebleu.metrics import BLEU, CHRF

    from fairseq_syntax.syntax.detokenize import detokenize_line, read_glue_table

    hyps_tok = hypotheses_of(gen_out)
    hyp_tok = out_prefix + ".hyp.tok"
    write_lines(hyp_tok, hyps_tok)
    hyps = hyps_tok
    if corpus.glue_table:  # Multi30k: German spaCy tokens -> text, like train.sh
        table = read_glue_table(corpus.glue_table)
        hyps = [detokenize_line(h.split(), table) for h in hyps_tok]
        write_lines(out_prefix + ".hyp", hyps)
    refs = read_lines(split.ref_detok)
    if corpus.name == "synthetic":  # BLEU of the text as written, like Multi30k's
        from fairseq_syntax.data.synthetic_corpus import detokenize

        hyps, refs = [detokenize(h) for h in hyps], [detokenize(r) for r in refs]
    if len(hyps) != len(refs):
        raise RuntimeError(f"{len(hyps)} translations of {split.subset} but {len(refs)} "
                           f"references in {split.ref_detok} (see {gen_out})")
    bleu, chrf = BLEU(), CHRF()
    setattr(row, prefix + "bleu", bleu.corpus_score(hyps, [refs]).score)
    setattr(row, prefix + "chrf", chrf.corpus_score(hyps, [refs]).score)
    row.bleu_signature, row.chrf_signature = str(bleu.get_signature()), str(chrf.get_signature())
    setattr(row, prefix + "ribes", ribes_of(read_lines(split.ref_tok), hyps_tok))
    if corpus.glue_table and not prefix:  # comparable with published tokenised BLEU
        row.bleu_tok = tokenised_bleu(hyps_tok, read_lines(split.ref_tok))
    if corpus.name == "synthetic":
        from fairseq_syntax.data.synthetic_corpus import agreement_report
        from fairseq_syntax.syntax.conllu_io import read_conllu_trees

        report = agreement_report(hyps_tok, refs, read_conllu_trees(split.source_trees))
        setattr(row, prefix + "agreement", report.accuracy)
        setattr(row, prefix + "agreement_counts", f"{report.correct}/{report.total}")
        setattr(row, prefix + "agreement_long",
                report.long_distance_accuracy if report.long_distance_total else None)
        setattr(row, prefix + "agreement_long_counts",
                f"{report.long_distance_correct}/{report.long_distance_total}")


def tokenised_bleu(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """BLEU of already tokenised text (``tokenize="none"``), without sacreBLEU's warning
    that the text looks tokenised: here it is meant to be."""
    from sacrebleu.metrics import BLEU

    sacrelogger = logging.getLogger("sacrebleu")
    level = sacrelogger.level
    sacrelogger.setLevel(logging.ERROR)
    try:
        return BLEU(tokenize="none").corpus_score(list(hyps), [list(refs)]).score
    finally:
        sacrelogger.setLevel(level)


def score_alignments(generate_out: str, gold: str) -> dict:
    from fairseq_syntax.cli.score_alignments import get_parser, score

    return score(get_parser().parse_args(["--generate", generate_out, "--gold", gold]))


def run_dir(args, key: str, seed: int) -> str:
    return os.path.join(args.workdir, "runs", file_key(key), f"seed{seed}")


def decode_and_score(row: Row, corpus: Corpus, ckpt: str, args, save: str, name: str,
                     extra, log: str, env, commands: dict,
                     task: str = "syntax_translation") -> None:
    """Beam search on every split of ``corpus`` and its scores into ``row``."""
    for split_name, split in corpus.splits.items():
        prefix = "" if split_name == "test" else split_name + "_"
        out = os.path.join(save, f"generate.{split_name}{name}.out")
        cmd = generate_command(corpus, ckpt, args, split.subset, extra, task)
        commands[f"generate_{split_name}"] = shown(cmd)
        run_tool(cmd, log, env, stdout_path=out)
        score_split(row, prefix, corpus, split, out, os.path.join(save, f"{split_name}{name}"))


def run_method(method: Method, seed: int, corpus: Corpus, args, env
               ) -> List[Tuple[Row, dict, float]]:
    """Train one method with one seed, decode and score; returns (row, command lines, wall
    seconds) of the method and of each of its variants. A run interrupted after a
    checkpoint resumes from ``checkpoint_last.pt`` when its training command is the same
    (``RUN_STAMP`` in the run's folder), one whose training finished is only decoded and
    scored again; otherwise the folder starts empty."""
    save = run_dir(args, method.key, seed)
    cmd = train_command(method, corpus, args, save, seed)
    stamp = os.path.join(save, RUN_STAMP)
    last = os.path.join(save, "checkpoint_last.pt")
    ckpt = os.path.join(save, DECODED_CHECKPOINT)
    old = json.load(open(stamp)) if os.path.exists(stamp) else {}
    resume = os.path.exists(last) and old.get("train") == shown(cmd)
    if not resume:
        shutil.rmtree(save, ignore_errors=True)  # never resume another run's checkpoint
        os.makedirs(save)
        write_atomically(stamp, json.dumps({"train": shown(cmd)}) + "\n")
    log = os.path.join(save, "log.txt")
    open(log, "a" if resume else "w").close()
    start = time.time()
    row = Row(method.key, method.arch, seed)
    commands: dict = {}
    results = [(row, commands, 0.0)]
    try:
        commands["train"] = shown(cmd)
        if resume and "train_seconds" in old:  # a trained run is only decoded again
            row.train_seconds = old["train_seconds"]
        else:
            run_tool(cmd, log, env, stdout_path=os.path.join(save, "train.out"))
            row.train_seconds = round(training_seconds(last) if resume else time.time() - start, 1)
            write_atomically(stamp, json.dumps({"train": shown(cmd),
                                                "train_seconds": row.train_seconds}) + "\n")
        for name, value in read_train_log(os.path.join(save, "train.log.jsonl")).items():
            setattr(row, name, value)
        if method.criterion != "blackout":
            row.valid_loss_floor = smoothed_loss_floor(label_smoothing_of(method, args),
                                                       target_vocab_size(corpus.databin))
        decode_and_score(row, corpus, ckpt, args, save, "", [], log, env, commands,
                         method.task)
        if corpus.gold_align:  # attention of the force-decoded reference vs gold alignments
            align_out = os.path.join(save, "generate.align.out")
            cmd = ["fairseq-generate", corpus.databin, "--user-dir", user_dir(),
                   "--task", method.task, "--path", ckpt, "--gen-subset", "test",
                   "--beam", "1", "--prefix-size", "1024", "--print-alignment", "soft",
                   "--batch-size", "32", *task_generate_args(method.task), *device_args(args)]
            commands["align"] = shown(cmd)
            run_tool(cmd, log, env, stdout_path=align_out)
            scores = score_alignments(align_out, corpus.gold_align)
            row.aer, row.precision, row.recall = (100.0 * scores[k] for k in
                                                  ("aer", "precision", "recall"))
        if method.arch.startswith(TREE_INDUCING):
            induced_scores(row, corpus, ckpt, args, save, log, commands)
        if step_time_batches_of(method, args):
            row.step_time_ratio = step_time_ratio(method, corpus, args, save, log, commands)
        results[0] = (row, commands, time.time() - start)
        for key, extra in method.variants:
            t0 = time.time()
            variant = Row(key, method.arch, seed, valid_ppl=row.valid_ppl,  # decode only
                          valid_loss=row.valid_loss, valid_loss_floor=row.valid_loss_floor,
                          train_epochs=row.train_epochs, train_updates=row.train_updates,
                          train_seconds=row.train_seconds,
                          valid_ppl_by_epoch=row.valid_ppl_by_epoch)
            vcommands = {"train": commands["train"]}
            results.append((variant, vcommands, 0.0))
            decode_and_score(variant, corpus, ckpt, args, save, "." + file_key(key), extra,
                             log, env, vcommands, method.task)
            results[-1] = (variant, vcommands, row.train_seconds + time.time() - t0)
    except Exception as err:  # noqa: BLE001 - one failed run must not stop the others
        results[-1][0].error = str(err) if isinstance(err, RuntimeError) else \
            f"{type(err).__name__}: {err} (see {log})"
    return results


def training_seconds(checkpoint: str) -> float:
    """fairseq's training time up to ``checkpoint``, summed over every process that trained
    towards it (``extra_state["previous_training_time"]``): a resumed run's whole time."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)  # fairseq's own file
    return float(state["extra_state"]["previous_training_time"])


def step_time_ratio(method: Method, corpus: Corpus, args, save: str, log: str,
                    commands: dict) -> float:
    """CPU time of a training step of ``method`` over the backbone's, on the same batches
    (:func:`~fairseq_syntax.cli.step_time.measure` in its own process, one thread; the
    seconds per step also to ``step_time.json``)."""
    from fairseq_syntax.cli.step_time import measure, per_step

    spec = method.arch + ("" if method.criterion == "label_smoothed_cross_entropy"
                          else "+" + method.criterion)
    if method.family == "transformer":
        backbone, batches = TRANSFORMER_BACKBONE, args.step_time_batches
        model_args = transformer_model_args(method, args.transformer)
        max_tokens = args.transformer["max_tokens"]
    else:
        backbone, batches = BACKBONE, args.step_time_batches
        model_args, max_tokens = size_args(args), args.max_tokens
    if spec == backbone:
        return 1.0
    out = os.path.join(save, "step_time.json")
    cmd = ["fairseq-syntax-step-time", corpus.databin, "--runs", f"{backbone},{spec}",
           "--model-args", shlex.join(model_args), "--batches", str(batches),
           "--rounds", "1", "--max-tokens", str(max_tokens), "--json", out]
    commands["step_time"] = shown(cmd)  # the same measurement as a command line
    totals = run_function(measure, dict(
        databin=corpus.databin, specs=[backbone, spec], model_args=model_args,
        batches=batches, rounds=1, max_tokens=max_tokens), log, threads=1)
    seconds = per_step(totals, batches)
    with open(out, "w") as f:
        json.dump(seconds, f, indent=1)
    return seconds[spec]["cpu_ratio"]


def step_time_batches_of(method: Method, args) -> int:
    """Batches of the step-time measurement of ``method`` (0: not measured). fairseq-syntax-step-time
    builds runs of ``syntax_translation`` and fairseq's lstm (for which the ratio's inverse is the
    backbone's words/s over lstm's)."""
    measured = method.task == "syntax_translation" or method.arch == FAIRSEQ_LSTM
    return args.step_time_batches if measured else 0


def induced_scores(row: Row, corpus: Corpus, ckpt: str, args, save: str, log: str,
                   commands: dict) -> None:
    """DA/UA of the trees the checkpoint induces on the test source and the branching
    baselines (:func:`~fairseq_syntax.cli.induced_trees.score_checkpoint` in its own
    process), to one decimal as earlier records hold them."""
    from fairseq_syntax.cli.induced_trees import score_checkpoint

    gold, output = corpus.splits["test"].source_trees, os.path.join(save, "induced.test.conllu")
    cmd = ["fairseq-syntax-induced-trees", corpus.databin, "--path", ckpt,
           "--gen-subset", "test", "--gold", gold, "--output", output, *device_args(args)]
    commands["induced_trees"] = shown(cmd)  # the same scores as a command line
    scores = run_function(score_checkpoint, dict(
        data=corpus.databin, path=ckpt, split="test", gold=gold, output=output,
        cpu=not args.gpu), log, threads=tool_threads(args)).scores
    row.da, row.ua = (round(scores.model.directed_accuracy, 1),
                      round(scores.model.undirected_accuracy, 1))
    row.baselines = {name: round(value, 1) for name, value in (
        ("left DA", scores.left.directed_accuracy), ("left UA", scores.left.undirected_accuracy),
        ("right DA", scores.right.directed_accuracy),
        ("right UA", scores.right.undirected_accuracy))}


# ---------------------------------------------------------------------------------------
# run records (one JSON file per finished run)
# ---------------------------------------------------------------------------------------


def _version(*dists: str) -> Optional[str]:
    from importlib import metadata

    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def host_facts(args, threads: Optional[int]) -> dict:
    """Facts about the machine and the software a run was measured with."""
    device = "cpu"
    if args.gpu:
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "gpu"
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "device": device,
        "threads_per_process": threads,
        "jobs": args.jobs,
        "python": platform.python_version(),
        "torch": _version("torch"),
        "fairseq": _version("fairseq-fixed", "fairseq"),
        "sacrebleu": _version("sacrebleu"),
    }


def run_record(row: Row, settings: dict, commands: dict, wall_seconds: float, host: dict,
               save: str, databin: str, command: str) -> dict:
    """The JSON record of one finished run. Keys: ``format``, ``method``, ``seed``,
    ``settings`` (:func:`run_settings`; compared to skip a run and to choose the runs of
    the table), ``scores`` (the fields of :class:`Row` but ``key``/``arch``/``seed``/
    ``error``), ``commands`` (train, generate_test, generate_gen, align, induced_trees: the
    ones that ran, the plugin's folder as ``"$(fairseq-syntax-user-dir)"``),
    ``wall_seconds`` (training, decoding and scoring), ``date`` (UTC, when it finished),
    ``host`` (:func:`host_facts`), ``run_dir`` (logs, checkpoint and outputs),
    ``data_bin``, and ``experiment_command`` (the invocation that ran it)."""
    scores = {k: v for k, v in asdict(row).items() if k not in ("key", "arch", "seed", "error")}
    return {
        "format": RECORD_FORMAT,
        "method": row.key,
        "seed": row.seed,
        "settings": settings,
        "scores": scores,
        "commands": commands,
        "wall_seconds": round(wall_seconds, 1),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": host,
        "run_dir": save,
        "data_bin": databin,
        "experiment_command": command,
    }


def write_record(path: str, record: dict) -> None:
    write_atomically(path, json.dumps(record, indent=1, ensure_ascii=False) + "\n")


def read_record(path: str) -> Optional[dict]:
    """The record in ``path``, or None when it is missing or not a run record."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not all(
            k in record for k in ("method", "seed", "settings", "scores")):
        return None
    return record


def read_records(results_dir: str) -> List[dict]:
    """Every run record in ``results_dir`` (other files are skipped with a note)."""
    records = []
    if not os.path.isdir(results_dir):
        return records
    for name in sorted(os.listdir(results_dir)):
        if not name.endswith(".json") or name.startswith("."):
            continue
        record = read_record(os.path.join(results_dir, name))
        if record is None:
            print(f"fairseq-syntax-experiment: note: {results_dir}/{name} is not a run record, "
                  "skipped", file=sys.stderr)
        else:
            records.append(record)
    return records


# ---------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------


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


def differs(stat: Stat, base: Optional[Stat]) -> bool:
    """True when ``stat``'s mean is more than 2 standard deviations (the larger of the two)
    from ``base``'s; only when both have at least 2 seeds."""
    if base is None or stat.sd is None or base.sd is None:
        return False
    return abs(stat.mean - base.mean) > 2 * max(stat.sd, base.sd)


def fmt_stat(stat: Stat, digits: int, base: Optional[Stat] = None) -> str:
    if stat.mean is None:
        return "–"
    text = f"{stat.mean:.{digits}f}" + ("" if stat.sd is None else f" ± {stat.sd:.{digits}f}")
    return f"**{text}**" if differs(stat, base) else text


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


# table columns per corpus: (header, score names joined by " / " in one cell, digits)
COLUMNS = {
    "synthetic": [
        ("BLEU", ["bleu"], 2), ("agreement", ["agreement"], 2),
        ("long-dist. agr.", ["agreement_long"], 2), ("gen BLEU", ["gen_bleu"], 2),
        ("gen agreement", ["gen_agreement"], 2), ("gen long-dist. agr.", ["gen_agreement_long"], 2),
        ("AER", ["aer"], 2), ("DA / UA", ["da", "ua"], 1), ("valid ppl", ["valid_ppl"], 2),
        ("valid loss", ["valid_loss"], 3),
    ],
    "multi30k": [
        ("BLEU", ["bleu"], 2), ("chrF", ["chrf"], 2), ("RIBES", ["ribes"], 2),
        ("valid ppl", ["valid_ppl"], 2), ("DA / UA", ["da", "ua"], 1),
        ("step time", ["step_time_ratio"], 2),
    ],
}


def table_records(records: Sequence[dict], args, description: str
                  ) -> Dict[str, List[dict]]:
    """The records whose settings equal what this invocation would run for their method,
    per method key, in seed order."""
    expected = {}
    for m in all_methods():
        for key in method_keys([m]):
            expected[key] = run_settings(m, key, args, description)
    chosen: Dict[str, Dict[int, dict]] = {}
    for r in records:
        if r["method"] in expected and r["settings"] == expected[r["method"]]:
            old = chosen.setdefault(r["method"], {}).get(int(r["seed"]))
            if old is None or str(r.get("date", "")) > str(old.get("date", "")):
                chosen[r["method"]][int(r["seed"])] = r
    return {k: [v[s] for s in sorted(v)] for k, v in chosen.items()}


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


def section_markdown(corpus_name: str, keys: Sequence[str], by_key: Dict[str, List[dict]],
                     args, description: str, failures: Sequence[str] = ()) -> str:
    """The corpus section: the rows of ``keys`` (selected methods, ``not run yet`` without
    records) and of every other method with records, in the plugin's order."""
    synthetic = corpus_name == "synthetic"
    title = "Synthetic corpus (en → vf)" if synthetic else "Multi30k En → De (test_2016_flickr)"
    methods = all_methods()
    order = method_keys(methods)
    family = {k: m.family for m in methods for k in method_keys([m])}
    every_row = [k for k in order if k in keys or k in by_key]
    rows = [k for k in every_row if family[k] == "rnn"]
    transformer_rows = [k for k in every_row if family[k] == "transformer"]
    runs = [r for k in every_row for r in by_key.get(k, [])]
    dates = sorted(str(r.get("date", ""))[:10] for r in runs)
    hosts = sorted({"{} ({})".format((r.get("host") or {}).get("cpu") or "?",
                                     (r.get("host") or {}).get("device") or "?") for r in runs})
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
           + f", {sum(float(r.get('wall_seconds') or 0) for r in runs) / 60:.0f} min of run "
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
    lines += [f"* Data: {description}."]
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
            decode + "`--gen-subset test`; detokenised with `fairseq_syntax.syntax.detokenize` "
            "(the glue table of `examples/multi30k/prepare.sh`) for sacreBLEU BLEU and chrF against the raw references; RIBES on spaCy tokens.",
        ]
    sigs = [(r["scores"].get("bleu_signature"), r["scores"].get("chrf_signature")) for r in runs]
    bleu_sig = next((b for b, _ in sigs if b), "")
    chrf_sig = next((c for _, c in sigs if c), "")
    if bleu_sig:
        lines.append(f"* BLEU signature: `{bleu_sig}`" +
                     ("" if synthetic or not chrf_sig else f"; chrF signature: `{chrf_sig}`"))
    lines += [
        "* DA / UA: directed / undirected attachment accuracy (%, punctuation excluded) of "
        "the trees the `sa_nmt*` / `fa_nmt*` encoders induce on the test source, against the "
        + ("gold trees" if synthetic else "spaCy `en_core_web_sm` parses")
        + " (`fairseq-syntax-induced-trees`).",
        "* valid ppl: fairseq's `valid_ppl` of the decoded checkpoint."
        + (" valid loss: its label-smoothed validation loss (bits per token), and how far "
           "above the floor no model can go below (`smoothed_loss_floor`: the entropy of the "
           "smoothed target). A run within 2 % of the floor is within 2 % of any longer "
           "run, so it has converged in issue 14's sense." if synthetic else ""),
        *(convergence_lines(by_key.get(BACKBONE, [])) if synthetic else []),
        "",
    ]
    marked = False
    if rows:
        table, marked = results_table(rows, by_key, COLUMNS[corpus_name], BACKBONE)
        lines += table
    base = next((r["scores"]["baselines"] for r in runs if r["scores"].get("baselines")), None)
    if base:
        lines += ["", f"Branching baselines on the same test trees (DA / UA): left-branching "
                      f"{base['left DA']:.1f} / {base['left UA']:.1f}, right-branching "
                      f"{base['right DA']:.1f} / {base['right UA']:.1f}."]
    if transformer_rows:
        block, t_marked = transformer_section(corpus_name, transformer_rows, by_key, args)
        lines += ["", *block]
        marked |= t_marked
    decode_only = {key for m in methods for key, _ in m.variants}  # a trained row's curve
    lines += epoch_table([k for k in every_row if k not in decode_only], by_key)
    lines += [
        "",
        "Cells: mean ± sample standard deviation (numpy `std(ddof=1)`) over the `seeds` runs of "
        "the row; a single run gives its value alone. **Bold**: the mean differs from "
        f"`{BACKBONE}`'s" + (f" (Transformer table: `{TRANSFORMER_BACKBONE}`'s)"
                             if transformer_rows else "")
        + " by more than 2 standard deviations (the larger of the two; only where "
        "both rows have ≥ 2 seeds" + ("" if marked else "; no cell here") + "). "
        "`not run yet`: a selected method without a record with these settings. `train s`: mean "
        "wall seconds of `fairseq-train` (machine shared, not a speed measurement; see "
        "`fairseq-syntax-benchmark`). Each record names its folder of logs, checkpoint and "
        "outputs (`run_dir`).",
    ]
    if failures:
        lines += ["", "Runs that failed in the invocation that wrote this section (no record): "
                      + "; ".join(failures) + "."]
    return "\n".join(lines) + "\n"


def epoch_table(rows: Sequence[str], by_key: Dict[str, List[dict]]) -> List[str]:
    """Validation perplexity after each epoch, a line per run that recorded it (``[]`` if
    none did): how fast each method learns next to the backbone."""
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
        lines.append(f"| `{key}` | {r['seed']} | " + " | ".join(cells) + " |")
    return lines


def results_table(rows: Sequence[str], by_key: Dict[str, List[dict]], columns, backbone: str
                  ) -> Tuple[List[str], bool]:
    """Markdown lines of the table of ``rows`` (cells: mean ± sd over the seeds, bold where
    the mean differs from ``backbone``'s) and whether a cell is bold."""
    head = ["method", "seeds", *(c[0] for c in columns), "train s"]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]

    def stats(key: str, name: str) -> Optional[Stat]:
        recs = by_key.get(key)
        return Stat.of([r["scores"].get(name) for r in recs]) if recs else None

    marked = False
    for key in rows:
        recs = by_key.get(key)
        if not recs:
            lines.append(f"| `{key}` | – | not run yet |" + " |" * (len(head) - 3))
            continue
        cells = [f"`{key}`", str(len(recs))]
        for _, names, digits in columns:
            parts = []
            for name in names:
                base = stats(backbone, name) if key != backbone else None
                stat = stats(key, name)
                marked |= differs(stat, base)
                parts.append(fmt_stat(stat, digits, base))
            cells.append(" / ".join(parts) if any(p != "–" for p in parts) else "–")
        train = Stat.of([r["scores"].get("train_seconds") for r in recs])
        cells.append(fmt(train.mean, 0))
        lines.append("| " + " | ".join(cells) + " |")
    return lines, marked


# the Transformer tables' columns: the RNN's, with tokenised BLEU on Multi30k
TRANSFORMER_COLUMNS = {
    "synthetic": COLUMNS["synthetic"],
    "multi30k": [COLUMNS["multi30k"][0], ("tok. BLEU", ["bleu_tok"], 2),
                 *COLUMNS["multi30k"][1:]],
}


def transformer_section(corpus_name: str, rows: Sequence[str], by_key: Dict[str, List[dict]],
                        args) -> Tuple[List[str], bool]:
    """The Transformer family's part of the corpus section: its recipe, one training
    command, and its table (bold against ``syntax_transformer``)."""
    r = args.transformer
    budget = " and ".join([*([f"{r['updates']} updates"] if r["updates"] else []),
                           *([f"{r['epochs']} epochs"] if r["epochs"] else [])])
    lines = [
        "### Transformer family",
        "",
        f"* Recipe of every Transformer method (`TRANSFORMER_RECIPES`): {budget} of at most "
        f"{r['max_tokens']} tokens"
        + (f" (or {args.max_minutes} min, whichever first)" if args.max_minutes else "")
        + f", {r['layers']} + {r['layers']} layers of {r['embed_dim']}, FFN {r['ffn_dim']}, "
        f"{r['heads']} heads, shared decoder input/output embeddings, dropout {r['dropout']}, "
        f"Adam {r['adam_betas']} lr {r['lr']} with inverse-sqrt decay after "
        f"{r['warmup_updates']} warm-up updates, weight decay {r['weight_decay']}, clip-norm "
        f"{r['clip_norm']} (0: none), label smoothing {r['label_smoothing']}; each size given "
        "to the model's base architecture. Supervised attention "
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
    if corpus_name == "multi30k":
        lines.append("* tok. BLEU: sacreBLEU with `tokenize='none'` of the spaCy-tokenised "
                     "hypotheses against the spaCy-tokenised references (`tok/`), the figure "
                     "fairseq-generate's BLEU4 line computes, comparable with published "
                     "tokenised Multi30k results; BLEU: detokenised sacreBLEU as above.")
    lines.append("* DA / UA: of the trees `sa_transformer` induces (its first tree head of the "
                 "highest tree layer); bold: against `syntax_transformer`.")
    lines.append("")
    table, marked = results_table(rows, by_key, TRANSFORMER_COLUMNS[corpus_name],
                                  TRANSFORMER_BACKBONE)
    return lines + table, marked


HEADER = """# Results

Measured by `fairseq-syntax-experiment` (`fairseq_syntax/cli/experiment.py`); each corpus
section is rendered from the run records in `docs/results/CORPUS/`, nothing in it is typed
by hand. How to reproduce: README.md, "Results".
"""


def update_results(path: str, corpus: str, body: str) -> None:
    """Replace (or append) the ``corpus`` section of the results file (atomically)."""
    begin, end = f"<!-- {corpus}:begin -->", f"<!-- {corpus}:end -->"
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else HEADER
    block = f"{begin}\n{body}{end}"
    if begin in old and end in old:
        before, rest = old.split(begin, 1)
        after = rest.split(end, 1)[1]
        new = before + block + after
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    write_atomically(path, new)


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fairseq-syntax-experiment",
        description="Train every method with the same budget and sizes on one corpus, once "
        "per seed, decode and score the test split(s), write one JSON record per finished "
        "run (method, seed) to the results folder and render the corpus's section of the "
        "results file (default docs/RESULTS.md) from all records with the same settings. "
        "Runs that already have a record with the same settings are skipped.")
    p.add_argument("--corpus", choices=["synthetic", "multi30k"], required=True,
                   help="synthetic: the built-in en->vf corpus with gold trees and alignments "
                   "(generated unless --data-bin/--raw); multi30k: the data-bin of "
                   "examples/multi30k/prepare.sh (--data-bin)")
    p.add_argument("--workdir",
                   help="folder for the generated corpus, checkpoints, outputs and logs "
                   "(WORKDIR/runs/METHOD/seedN/); required unless --render-only")
    p.add_argument("--data-bin",
                   help="an existing data-bin (synthetic: made by fairseq-syntax-preprocess "
                   "from --raw, with --testpref RAW/test,RAW/gen for the gen split; "
                   "multi30k: DEST/data-bin of prepare.sh)")
    p.add_argument("--raw", help="synthetic: the folder fairseq-syntax-synthetic wrote "
                   "(test.vf, test.align, test.en.conllu, gen.*); default WORKDIR/raw")
    p.add_argument("--multi30k-dir", help="multi30k: prepare.sh's --dest (raw/, tok/); "
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
                   "tree2seq+length_prior, syntax_transformer+supervised_attention, "
                   "transformer_align; 'transformer' stands for the Transformer family "
                   "(trained with TRANSFORMER_RECIPES) (default: synthetic "
                   + DEFAULT_METHODS["synthetic"] + "; multi30k "
                   + DEFAULT_METHODS["multi30k"] + ")")
    p.add_argument("--seeds", default="1",
                   help="comma-separated training seeds; every (method, seed) is one run "
                   "with fairseq-train --seed N (default: 1)")
    p.add_argument("--results-dir",
                   help="folder of the run records, METHOD.seedN.json (default: "
                   "docs/results/CORPUS/)")
    p.add_argument("--render-only", action="store_true",
                   help="train nothing: render the corpus section of --results from the "
                   "records in --results-dir whose settings equal these options'")
    p.add_argument("--updates", type=int,
                   help="training updates of every method (default: synthetic 2400; multi30k: "
                   "none, --epochs; Transformers: their recipe's); with --epochs, whichever "
                   "comes first")
    p.add_argument("--epochs", type=int,
                   help="training epochs of every method (fairseq-train --max-epoch; default: "
                   "multi30k 12; synthetic: none, --updates; Transformers: their recipe's)")
    p.add_argument("--max-minutes", type=float, default=0,
                   help="also stop each training after this many minutes (0: no limit; "
                   "makes the budget machine-dependent)")
    p.add_argument("--max-tokens", type=int,
                   help="tokens per batch (default: synthetic 3000, multi30k 4000)")
    p.add_argument("--embed-dim", type=int,
                   help="source and target embedding size (default: synthetic 96, multi30k 256)")
    p.add_argument("--encoder-hidden", type=int,
                   help="encoder LSTM size per direction (default: synthetic 128, multi30k 256)")
    p.add_argument("--decoder-hidden", type=int,
                   help="decoder LSTM size (default: synthetic 256, multi30k 512)")
    p.add_argument("--dropout", type=float, help="dropout (default: synthetic 0.1, multi30k 0.3)")
    p.add_argument("--lr", type=float, help="Adam learning rate (default: synthetic 0.003, "
                   "multi30k 0.002)")
    p.add_argument("--clip-norm", type=float,
                   help="gradient clipping norm (default: synthetic 1.0, multi30k 5.0)")
    p.add_argument("--label-smoothing", type=float,
                   help="label smoothing of the cross-entropy criterions, not BlackOut "
                   "(default: 0.1)")
    p.add_argument("--step-time-batches", type=int, default=None,
                   help="training batches on which each method's step time is compared with "
                   "the backbone's (fairseq-syntax-step-time, CPU seconds; default: multi30k "
                   "8, synthetic 0 = not measured)")
    p.add_argument("--transformer-recipe", default="", metavar="KEY=VALUE,...",
                   help="override values of the Transformer family's recipe of the corpus "
                   "(TRANSFORMER_RECIPES: "
                   + ", ".join(TRANSFORMER_RECIPES["synthetic"]) + "); --updates/--epochs, "
                   "when given, are every method's budget")
    p.add_argument("--gpu", action="store_true",
                   help="train and decode on the GPU (default: CPU, --cpu to every tool)")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at the same time (default 1; with N > 1 each tool "
                   "process gets --threads threads)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP/MKL threads per tool process (default: 1 when --jobs > 1, "
                   "else torch's default)")
    p.add_argument("--results", default=DEFAULT_RESULTS,
                   help="Markdown file whose corpus section is rewritten (default: "
                   "docs/RESULTS.md)")
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
    defaults = DEFAULTS[args.corpus]
    args.transformer = transformer_recipe(parser, args)
    if args.updates is None and args.epochs is None:
        args.updates, args.epochs = defaults["updates"], defaults["epochs"]
    for name, value in defaults.items():
        if name not in ("updates", "epochs") and getattr(args, name) is None:
            setattr(args, name, value)
    if args.methods is None:
        args.methods = DEFAULT_METHODS[args.corpus]
    if args.results_dir is None:
        args.results_dir = os.path.join("docs", "results", args.corpus)
    args.seeds = parse_seeds(parser, args.seeds)
    if any(v is not None and v <= 0 for v in (args.updates, args.epochs)) or args.jobs <= 0:
        parser.error("--updates, --epochs and --jobs must be positive")
    if not args.workdir and not args.render_only:
        parser.error("--workdir is required (unless --render-only)")
    return args


def transformer_recipe(parser, args) -> dict:
    """The corpus's Transformer recipe with ``--transformer-recipe`` applied (each value
    read as the type of the recipe's own; ``none`` for an empty budget) and, when given,
    ``--updates``/``--epochs`` as its budget."""
    recipe = dict(TRANSFORMER_RECIPES[args.corpus])
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
            recipe[key] = kind(value)
        except ValueError:
            parser.error(f"--transformer-recipe {item!r}: {key} takes a {kind.__name__}")
    if args.updates is not None or args.epochs is not None:
        recipe["updates"], recipe["epochs"] = args.updates, args.epochs
    if not recipe["updates"] and not recipe["epochs"]:
        parser.error("the Transformer recipe needs updates or epochs")
    return recipe


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    argv_used = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["fairseq-syntax-experiment", *argv_used])
    methods = select_methods(args.methods)
    keys = method_keys(methods)
    description = corpus_description(args)
    lock = threading.Lock()
    failures: List[str] = []

    def render() -> str:
        by_key = table_records(read_records(args.results_dir), args, description)
        body = section_markdown(args.corpus, keys, by_key, args, description, failures)
        update_results(args.results, args.corpus, body)
        return body

    if args.render_only:
        body = render()
        print(body)
        print(f"wrote the {args.corpus} section of {args.results}", file=sys.stderr)
        return 0

    os.makedirs(args.workdir, exist_ok=True)
    corpus = prepare_synthetic(args) if args.corpus == "synthetic" else prepare_multi30k(args)
    description = corpus_description(args)  # --raw: the files prepare_synthetic checked
    threads = tool_threads(args)
    env = tool_env(threads)
    host = host_facts(args, threads)

    todo: List[Tuple[Method, int]] = []
    for method in methods:
        for seed in args.seeds:
            settings = {k: run_settings(method, k, args, description)
                        for k in method_keys([method])}
            records = {k: read_record(record_path(args.results_dir, k, seed)) for k in settings}
            if all(r is not None and r["settings"] == settings[k] for k, r in records.items()):
                for k in settings:
                    print(f"[skip] {k} seed {seed}", file=sys.stderr, flush=True)
            else:
                todo.append((method, seed))
    total = len(todo)
    done = [0]

    def one(task: Tuple[Method, int]) -> None:
        method, seed = task
        t0 = time.time()
        with lock:
            print(f"[start] {method.key} seed {seed}", file=sys.stderr, flush=True)
        results = run_method(method, seed, corpus, args, env)
        with lock:
            for row, commands, wall in results:
                if row.error:
                    failures.append(f"`{row.key}` seed {seed}: {row.error}")
                    continue
                settings = run_settings(method, row.key, args, description)
                write_record(record_path(args.results_dir, row.key, seed),
                             run_record(row, settings, commands, wall, host,
                                        run_dir(args, method.key, seed), corpus.databin,
                                        command))
            done[0] += 1
            r = results[0][0]
            status = (f"failed: {r.error}" if r.error else
                      f"BLEU {fmt(r.bleu)}"
                      + (f" chrF {fmt(r.chrf)}" if args.corpus == "multi30k" else "")
                      + (f" agreement {fmt(r.agreement)}" if r.agreement is not None else "")
                      + (f" gen BLEU {fmt(r.gen_bleu)} gen agreement {fmt(r.gen_agreement)}"
                         if r.gen_bleu is not None else "")
                      + (f" AER {fmt(r.aer)}" if r.aer is not None else "")
                      + (f" DA/UA {r.da:.1f}/{r.ua:.1f}" if r.da is not None else "")
                      + f" valid ppl {fmt(r.valid_ppl)}")
            print(f"[{done[0]}/{total}] {method.key} seed {seed}: {status} "
                  f"({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
            render()  # a killed experiment still leaves an up-to-date table

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, todo))
    body = render()
    print(body)
    print(f"wrote the {args.corpus} section of {args.results} "
          f"({total} run(s), {len(failures)} failed; records in {args.results_dir})",
          file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
