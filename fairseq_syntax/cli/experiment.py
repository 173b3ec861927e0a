"""``fairseq-syntax-experiment``: the quality experiment behind ``docs/RESULTS.md``.

For one corpus it trains every method of the plugin with the same budget and the same
sizes through the real ``fairseq-train``, decodes the test split with the real
``fairseq-generate`` (beam 5), scores the outputs with the project's scorers and writes
the measured numbers as Markdown into that corpus's section of the results file
(between ``<!-- CORPUS:begin -->`` and ``<!-- CORPUS:end -->``; other sections and any
text outside the markers are kept).

Methods: every registered architecture of the plugin (the backbone ``attentional_rnn``
first), the backbone under ``supervised_attention_cross_entropy`` (gold/eflomal
alignments of the training data) and under ``blackout``, and ``tree2seq`` decoded again
with ``--length-prior`` (no extra training). Every run uses ``--seed 1``, the same model
sizes, optimiser and number of updates, and the last checkpoint.

Scores per method:

* BLEU (sacreBLEU, its signature printed once) and RIBES
  (:mod:`fairseq_syntax.syntax.ribes`) of the beam-5 translations of the test split;
* synthetic corpus: agreement accuracy (``fairseq-syntax-score-agreement``), AER,
  precision and recall of the attention against the gold alignments
  (``fairseq-syntax-score-alignments`` on the teacher-forced reference, soft attention,
  threshold 0.2), and directed/undirected attachment accuracy of the trees the
  structured-attention models (``sa_nmt*``, ``fa_nmt*``) induce against the gold trees,
  with the left/right-branching baselines (``fairseq-syntax-induced-trees``);
* Multi30k En-De: BLEU of the detokenised ``test_2016_flickr`` translations against the
  raw references, RIBES on spaCy tokens, and the induced trees against the spaCy
  (``en_core_web_sm``) parses of the test source that ``examples/multi30k/prepare.sh``
  wrote.

Examples::

    fairseq-syntax-experiment --corpus synthetic --workdir exp/synthetic
    fairseq-syntax-experiment --corpus multi30k --data-bin data/multi30k/data-bin \\
        --workdir exp/multi30k --gpu
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from fairseq_syntax.user_dir import user_dir

BACKBONE = "attentional_rnn"
TREE_INDUCING = ("sa_nmt", "fa_nmt")  # arch prefixes whose encoders induce trees
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_RESULTS = os.path.join("docs", "RESULTS.md")

# Per-corpus defaults of the sizes and the budget (CPU-friendly for synthetic).
DEFAULTS = {
    "synthetic": dict(updates=300, max_tokens=2000, embed_dim=64, encoder_hidden=64,
                      decoder_hidden=128, dropout=0.1, lr=0.003),
    "multi30k": dict(updates=6000, max_tokens=4000, embed_dim=256, encoder_hidden=256,
                     decoder_hidden=512, dropout=0.3, lr=0.001),
}
LABEL_SMOOTHING = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"]


@dataclass
class Method:
    """One training run: ``key`` names it on the command line and in the table."""

    key: str
    arch: str
    criterion: List[str] = field(default_factory=lambda: list(LABEL_SMOOTHING))
    # decode-only variants sharing this run's checkpoint: (key, extra generate args)
    variants: List[tuple] = field(default_factory=list)


@dataclass
class Row:
    """Measured scores of one method (None: not measured)."""

    key: str
    arch: str
    bleu: Optional[float] = None
    bleu_signature: str = ""
    ribes: Optional[float] = None
    agreement: Optional[float] = None
    agreement_counts: str = ""
    aer: Optional[float] = None
    precision: Optional[float] = None
    recall: Optional[float] = None
    da: Optional[float] = None
    ua: Optional[float] = None
    baselines: Dict[str, float] = field(default_factory=dict)
    train_seconds: Optional[float] = None
    train_updates: Optional[int] = None
    error: str = ""


def plugin_architectures() -> List[str]:
    """Registered architectures of the plugin, backbone first (as the benchmark lists them)."""
    from fairseq_syntax.cli.benchmark import plugin_architectures as archs

    return archs()


def all_methods() -> List[Method]:
    methods = [Method(a, a) for a in plugin_architectures()]
    for m in methods:
        if m.arch == "tree2seq":
            m.variants.append(("tree2seq+length_prior", ["--length-prior"]))
    methods[1:1] = [
        Method(f"{BACKBONE}+supervised_attention", BACKBONE,
               ["--criterion", "supervised_attention_cross_entropy", "--label-smoothing", "0.1"]),
        Method(f"{BACKBONE}+blackout", BACKBONE, ["--criterion", "blackout"]),
    ]
    return methods


def select_methods(spec: str) -> List[Method]:
    """``all`` or comma-separated method keys (``tree2seq+length_prior`` needs ``tree2seq``)."""
    methods = all_methods()
    if spec == "all":
        return methods
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    known = {m.key for m in methods} | {k for m in methods for k, _ in m.variants}
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


# ---------------------------------------------------------------------------------------
# running the tools
# ---------------------------------------------------------------------------------------


def tool_env(threads: Optional[int]) -> Dict[str, str]:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


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


def read_lines(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write_lines(path: str, lines: Sequence[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def hypotheses_of(generate_out: str) -> List[str]:
    """The first ``H-`` line of every sentence, in sentence order."""
    hyps: Dict[int, str] = {}
    for line in read_lines(generate_out):
        m = re.match(r"H-(\d+)\t[^\t]*\t?(.*)$", line)
        if m and int(m.group(1)) not in hyps:
            hyps[int(m.group(1))] = m.group(2)
    return [hyps[i] for i in sorted(hyps)]


def sacrebleu_json(ref: str, hyp: str, log: str, env) -> dict:
    text = run_tool(["sacrebleu", ref, "-i", hyp, "-m", "bleu", "-w", "2", "-f", "json"], log, env)
    return json.loads(text)


def ribes_of(ref_tokens: str, hyp_tokens: str) -> float:
    from fairseq_syntax.syntax.ribes import corpus_ribes

    refs = [line.split() for line in read_lines(ref_tokens)]
    hyps = [line.split() for line in read_lines(hyp_tokens)]
    return 100.0 * corpus_ribes([refs], hyps)


# ---------------------------------------------------------------------------------------
# corpora
# ---------------------------------------------------------------------------------------


@dataclass
class Corpus:
    """Where a corpus's data-bin and its test-side reference files are."""

    name: str
    databin: str
    ref_detok: str      # references for BLEU (raw text)
    ref_tok: str        # references tokenised like the hypotheses (RIBES)
    gold_trees: str     # gold/spaCy trees of the test source (CoNLL-U)
    gold_align: Optional[str] = None  # gold test alignments (synthetic only)
    glue_table: Optional[str] = None  # German detokeniser table (Multi30k)
    description: str = ""


def prepare_synthetic(args) -> Corpus:
    """Generate and preprocess the synthetic corpus (or take ``--data-bin`` and ``--raw``)."""
    raw = args.raw or os.path.join(args.workdir, "raw")
    databin = args.data_bin or os.path.join(args.workdir, "data-bin")
    env = tool_env(None)
    log = os.path.join(args.workdir, "prepare.log")
    if not args.data_bin and not os.path.exists(os.path.join(databin, "syntax_manifest.json")):
        if not args.raw:
            run_tool(["fairseq-syntax-synthetic", "--out", raw, "--seed", str(args.corpus_seed),
                      "--train", str(args.train_size), "--valid", str(args.valid_size),
                      "--test", str(args.test_size)], log, env)
        run_tool(["fairseq-syntax-preprocess", "--source-lang", "en", "--target-lang", "vf",
                  "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
                  "--testpref", f"{raw}/test", "--align-suffix", "align",
                  "--vocab-size", str(args.vocab_size), "--destdir", databin,
                  "--workers", "1", "--force"], log, env)
    for name in ("test.vf", "test.align", "test.en.conllu"):
        if not os.path.exists(os.path.join(raw, name)):
            raise SystemExit(f"fairseq-syntax-experiment: error: {raw}/{name} is missing "
                             "(--raw must be the folder fairseq-syntax-synthetic wrote)")
    sizes = [len(read_lines(os.path.join(raw, f"{s}.vf"))) for s in ("train", "valid", "test")]
    desc = (f"synthetic en→vf corpus (`fairseq-syntax-synthetic`), "
            f"{sizes[0]}/{sizes[1]}/{sizes[2]} train/valid/test pairs, gold trees and "
            f"alignments; data-bin `{databin}`")
    ref = os.path.join(raw, "test.vf")
    return Corpus("synthetic", databin, ref, ref, os.path.join(raw, "test.en.conllu"),
                  gold_align=os.path.join(raw, "test.align"), description=desc)


def prepare_multi30k(args) -> Corpus:
    """The data-bin of ``examples/multi30k/prepare.sh`` and the files next to it."""
    if not args.data_bin:
        raise SystemExit("fairseq-syntax-experiment: error: --corpus multi30k needs --data-bin "
                         "(the data-bin examples/multi30k/prepare.sh made, e.g. "
                         "data/multi30k/data-bin)")
    dest = args.multi30k_dir or os.path.dirname(os.path.abspath(args.data_bin))
    files = dict(ref_detok=os.path.join(dest, "raw", "test_2016_flickr.de"),
                 ref_tok=os.path.join(dest, "tok", "test_2016_flickr.de"),
                 gold_trees=os.path.join(dest, "tok", "test_2016_flickr.en.conllu"),
                 glue_table=os.path.join(dest, "tok", "glue.de.json"))
    for path in files.values():
        if not os.path.exists(path):
            raise SystemExit(f"fairseq-syntax-experiment: error: {path} is missing (run "
                             "examples/multi30k/prepare.sh, or give --multi30k-dir)")
    desc = (f"Multi30k task 1 En→De (`examples/multi30k/prepare.sh`: spaCy tokens, "
            f"en_core_web_sm parses, eflomal alignments), test_2016_flickr; data-bin "
            f"`{args.data_bin}`")
    return Corpus("multi30k", args.data_bin, description=desc, **files)


# ---------------------------------------------------------------------------------------
# one method
# ---------------------------------------------------------------------------------------


def train_command(method: Method, corpus: Corpus, args, save: str) -> List[str]:
    return [
        "fairseq-train", corpus.databin, "--user-dir", user_dir(), "--task", "syntax_translation",
        "--arch", method.arch, *method.criterion, *size_args(args),
        "--optimizer", "adam", "--lr", str(args.lr), "--clip-norm", "1.0",
        "--max-tokens", str(args.max_tokens), "--max-update", str(args.updates),
        *(["--stop-time-hours", str(args.max_minutes / 60)] if args.max_minutes else []),
        "--seed", "1", "--num-workers", "0", "--disable-validation",
        "--save-dir", save, "--no-epoch-checkpoints", "--no-progress-bar",
        "--log-format", "simple", "--log-interval", str(max(1, args.updates // 10)),
        *device_args(args),
    ]


def size_args(args) -> List[str]:
    e = str(args.embed_dim)
    return ["--encoder-embed-dim", e, "--decoder-embed-dim", e,
            "--encoder-hidden-size", str(args.encoder_hidden),
            "--decoder-hidden-size", str(args.decoder_hidden), "--dropout", str(args.dropout)]


def device_args(args) -> List[str]:
    return [] if args.gpu else ["--cpu"]


def generate_command(corpus: Corpus, ckpt: str, args, extra=()) -> List[str]:
    return ["fairseq-generate", corpus.databin, "--user-dir", user_dir(),
            "--task", "syntax_translation", "--path", ckpt, "--gen-subset", "test",
            "--beam", "5", "--batch-size", "64", "--max-len-a", "1.5", "--max-len-b", "10",
            "--post-process", "sentencepiece", *device_args(args), *extra]


def score_translations(row: Row, corpus: Corpus, args, gen_out: str, prefix: str, log: str, env):
    """BLEU, RIBES (and agreement) of the ``H-`` lines of ``gen_out``."""
    hyp_tok = prefix + ".hyp.tok"
    write_lines(hyp_tok, hypotheses_of(gen_out))
    hyp = hyp_tok
    if corpus.glue_table:  # Multi30k: German spaCy tokens -> text, like train.sh
        hyp = prefix + ".hyp"
        run_tool([sys.executable, os.path.join(REPO, "examples", "multi30k", "spacy_text.py"),
                  "detokenize", "--glue-table", corpus.glue_table, hyp_tok, hyp], log, env)
    bleu = sacrebleu_json(corpus.ref_detok, hyp, log, env)
    row.bleu, row.bleu_signature = float(bleu["score"]), bleu["signature"]
    row.ribes = ribes_of(corpus.ref_tok, hyp_tok)
    if corpus.name == "synthetic":
        text = run_tool(["fairseq-syntax-score-agreement", "--hyp", hyp_tok,
                         "--ref", corpus.ref_detok], log, env)
        m = re.search(r"agreement accuracy: ([\d.]+) \((\d+)/(\d+)\)", text)
        row.agreement = 100.0 * int(m.group(2)) / int(m.group(3))
        row.agreement_counts = f"{m.group(2)}/{m.group(3)}"


def run_method(method: Method, corpus: Corpus, args, env) -> List[Row]:
    """Train one method, decode and score; returns its row and its variants' rows."""
    name = re.sub(r"\W+", "_", method.key)
    save = os.path.join(args.workdir, "runs", name)
    os.makedirs(save, exist_ok=True)
    log = os.path.join(save, "log.txt")
    open(log, "w").close()
    row = Row(method.key, method.arch)
    rows = [row]
    ckpt = os.path.join(save, "checkpoint_last.pt")
    try:
        start = time.time()
        text = run_tool(train_command(method, corpus, args, save), log, env,
                        stdout_path=os.path.join(save, "train.out"))
        row.train_seconds = time.time() - start
        updates = re.findall(r"num_updates[ =](\d+)", text)
        row.train_updates = int(updates[-1]) if updates else None
        gen_out = os.path.join(save, "generate.test.out")
        run_tool(generate_command(corpus, ckpt, args), log, env, stdout_path=gen_out)
        score_translations(row, corpus, args, gen_out, os.path.join(save, "test"), log, env)
        if corpus.gold_align:  # attention of the force-decoded reference vs gold alignments
            align_out = os.path.join(save, "generate.align.out")
            run_tool(["fairseq-generate", corpus.databin, "--user-dir", user_dir(),
                      "--task", "syntax_translation", "--path", ckpt, "--gen-subset", "test",
                      "--beam", "1", "--prefix-size", "1024", "--print-alignment", "soft",
                      "--batch-size", "32", *device_args(args)], log, env, stdout_path=align_out)
            scores = json.loads(run_tool(
                ["fairseq-syntax-score-alignments", "--generate", align_out,
                 "--gold", corpus.gold_align, "--json"], log, env))
            row.aer, row.precision, row.recall = (100.0 * scores[k] for k in
                                                  ("aer", "precision", "recall"))
        if method.arch.startswith(TREE_INDUCING):
            text = run_tool(["fairseq-syntax-induced-trees", corpus.databin, "--path", ckpt,
                             "--gen-subset", "test", "--gold", corpus.gold_trees,
                             "--output", os.path.join(save, "induced.test.conllu"),
                             *device_args(args)], log, env)
            parse_induced(row, text)
        for key, extra in method.variants:
            variant = Row(key, method.arch, train_updates=row.train_updates)  # decode only
            rows.append(variant)
            vname = re.sub(r"\W+", "_", key)
            out = os.path.join(save, f"generate.test.{vname}.out")
            run_tool(generate_command(corpus, ckpt, args, extra), log, env, stdout_path=out)
            score_translations(variant, corpus, args, out, os.path.join(save, f"test.{vname}"),
                               log, env)
    except Exception as err:  # noqa: BLE001 - one failed method must not stop the others
        rows[-1].error = str(err) if isinstance(err, RuntimeError) else \
            f"{type(err).__name__}: {err} (see {log})"
    return rows


def parse_induced(row: Row, text: str) -> None:
    """DA/UA and the branching baselines from ``fairseq-syntax-induced-trees`` output."""
    m = re.search(r"DA/UA ([\d.]+)/([\d.]+)\s", text)
    row.da, row.ua = float(m.group(1)), float(m.group(2))
    b = re.search(r"left-branching DA/UA ([\d.]+)/([\d.]+), right-branching DA/UA "
                  r"([\d.]+)/([\d.]+)", text)
    row.baselines = {"left DA": float(b.group(1)), "left UA": float(b.group(2)),
                     "right DA": float(b.group(3)), "right UA": float(b.group(4))}


# ---------------------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------------------


def fmt(value: Optional[float], digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def section_markdown(corpus: Corpus, rows: List[Row], args, command: str, minutes: float) -> str:
    synthetic = corpus.name == "synthetic"
    title = "Synthetic corpus (en → vf)" if synthetic else "Multi30k En → De (test_2016_flickr)"
    backbone = next((r for r in rows if r.key == BACKBONE), rows[0])
    device = "GPU" if args.gpu else f"CPU ({os.cpu_count()} cores)"
    lines = [
        f"## {title}",
        "",
        f"Written by `fairseq-syntax-experiment` on {datetime.date.today().isoformat()} "
        f"({minutes:.0f} min wall, {device}, {args.jobs} run(s) at a time, "
        f"Python {platform.python_version()}). Command:",
        "",
        "```bash",
        command,
        "```",
        "",
        f"* Data: {corpus.description}.",
        f"* Same budget and sizes for every method: {args.updates} updates of at most "
        f"{args.max_tokens} tokens"
        + (f" (or {args.max_minutes} min, whichever first)" if args.max_minutes else "")
        + f", embeddings {args.embed_dim}, BiLSTM encoder 2 × {args.encoder_hidden}, decoder "
        f"LSTM {args.decoder_hidden}, dropout {args.dropout}, Adam lr {args.lr}, clip-norm 1.0, "
        "label smoothing 0.1 (BlackOut: none), seed 1, last checkpoint.",
        "* Training command of the backbone (other methods change `--arch` or `--criterion`):",
        "",
        "```bash",
        # the plugin's folder as a reader's shell finds it, not this machine's path
        shlex.join(train_command(Method(BACKBONE, BACKBONE), corpus, args,
                                 os.path.join(args.workdir, "runs", BACKBONE))).replace(
            shlex.quote(user_dir()), '"$(fairseq-syntax-user-dir)"'),
        "```",
        "",
        "* Decoding: `fairseq-generate --gen-subset test --beam 5 --max-len-a 1.5 "
        "--max-len-b 10 --post-process sentencepiece`"
        + ("; detokenised with `examples/multi30k/spacy_text.py` for BLEU against the raw "
           "references; RIBES on spaCy tokens." if not synthetic else
           "; BLEU and RIBES against `test.vf`."),
        f"* BLEU signature: `{backbone.bleu_signature or next((r.bleu_signature for r in rows if r.bleu_signature), '')}`",
    ]
    if synthetic:
        lines += [
            "* Agreement: share of test translations whose main verb has the reference's "
            "number (`fairseq-syntax-score-agreement`).",
            "* AER / P / R: attention of the teacher-forced reference (`fairseq-generate "
            "--beam 1 --prefix-size 1024 --print-alignment soft`) against the gold test "
            "alignments, word level, threshold 0.2 (`fairseq-syntax-score-alignments`).",
        ]
    lines += [
        "* DA / UA: directed / undirected attachment accuracy (%, punctuation excluded) of "
        "the trees the `sa_nmt*` / `fa_nmt*` encoders induce on the test source, against the "
        + ("gold trees" if synthetic else "spaCy `en_core_web_sm` parses")
        + " (`fairseq-syntax-induced-trees`).",
        "",
    ]
    head = ["method", "BLEU", "RIBES"]
    if synthetic:
        head += ["agreement", "AER", "P", "R"]
    head += ["DA / UA", "train s"]
    lines += ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for r in rows:
        if r.error:
            lines.append(f"| `{r.key}` | failed: {r.error} |" + " |" * (len(head) - 2))
            continue
        cells = [f"`{r.key}`", fmt(r.bleu), fmt(r.ribes)]
        if synthetic:
            cells += [fmt(r.agreement), fmt(r.aer), fmt(r.precision), fmt(r.recall)]
        cells += ["–" if r.da is None else f"{r.da:.1f} / {r.ua:.1f}", fmt(r.train_seconds, 0)]
        lines.append("| " + " | ".join(cells) + " |")
    base = next((r.baselines for r in rows if r.baselines), None)
    if base:
        lines += ["", f"Branching baselines on the same test trees (DA / UA): left-branching "
                      f"{base['left DA']:.1f} / {base['left UA']:.1f}, right-branching "
                      f"{base['right DA']:.1f} / {base['right UA']:.1f}."]
    lines += ["", "`train s`: wall seconds of `fairseq-train` (machine shared, not a speed "
                  "measurement; see `fairseq-syntax-benchmark`). Logs, checkpoints and outputs: "
                  f"`{os.path.join(args.workdir, 'runs')}/METHOD/`."]
    return "\n".join(lines) + "\n"


HEADER = """# Results

Measured by `fairseq-syntax-experiment` (`fairseq_syntax/cli/experiment.py`); each corpus
section is rewritten by its own run, nothing in it is typed by hand. How to reproduce:
README.md, "Results".
"""


def update_results(path: str, corpus: str, body: str) -> None:
    """Replace (or append) the ``corpus`` section of the results file."""
    begin, end = f"<!-- {corpus}:begin -->", f"<!-- {corpus}:end -->"
    old = open(path, encoding="utf-8").read() if os.path.exists(path) else HEADER
    block = f"{begin}\n{body}{end}"
    if begin in old and end in old:
        before, rest = old.split(begin, 1)
        after = rest.split(end, 1)[1]
        new = before + block + after
    else:
        new = old.rstrip("\n") + "\n\n" + block + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fairseq-syntax-experiment",
        description="Train every method with the same budget and sizes on one corpus, "
        "decode and score the test split, and write the measured numbers into that "
        "corpus's section of the results file (default docs/RESULTS.md).")
    p.add_argument("--corpus", choices=["synthetic", "multi30k"], required=True,
                   help="synthetic: the built-in en->vf corpus with gold trees and alignments "
                   "(generated unless --data-bin/--raw); multi30k: the data-bin of "
                   "examples/multi30k/prepare.sh (--data-bin)")
    p.add_argument("--workdir", required=True,
                   help="folder for the generated corpus, checkpoints, outputs and logs")
    p.add_argument("--data-bin",
                   help="an existing data-bin (synthetic: made by fairseq-syntax-preprocess "
                   "from --raw; multi30k: DEST/data-bin of prepare.sh)")
    p.add_argument("--raw", help="synthetic: the folder fairseq-syntax-synthetic wrote "
                   "(test.vf, test.align, test.en.conllu); default WORKDIR/raw")
    p.add_argument("--multi30k-dir", help="multi30k: prepare.sh's --dest (raw/, tok/); "
                   "default: the parent of --data-bin")
    p.add_argument("--train-size", type=int, default=20000,
                   help="synthetic: training pairs to generate (default: 20000)")
    p.add_argument("--valid-size", type=int, default=200,
                   help="synthetic: validation pairs to generate (default: 200)")
    p.add_argument("--test-size", type=int, default=500,
                   help="synthetic: test pairs to generate (default: 500)")
    p.add_argument("--corpus-seed", type=int, default=1,
                   help="synthetic: seed of the generated corpus (default: 1)")
    p.add_argument("--vocab-size", type=int, default=1000,
                   help="synthetic: sentencepiece vocabulary (default: 1000)")
    p.add_argument("--methods", default="all",
                   help="comma-separated methods, or 'all' (default): the architectures, "
                   "attentional_rnn+supervised_attention, attentional_rnn+blackout, "
                   "tree2seq+length_prior")
    p.add_argument("--updates", type=int,
                   help="training updates of every method (default: synthetic 300, multi30k 6000)")
    p.add_argument("--max-minutes", type=float, default=0,
                   help="also stop each training after this many minutes (0: no limit; "
                   "makes the budget machine-dependent)")
    p.add_argument("--max-tokens", type=int,
                   help="tokens per batch (default: synthetic 2000, multi30k 4000)")
    p.add_argument("--embed-dim", type=int,
                   help="source and target embedding size (default: synthetic 64, multi30k 256)")
    p.add_argument("--encoder-hidden", type=int,
                   help="encoder LSTM size per direction (default: synthetic 64, multi30k 256)")
    p.add_argument("--decoder-hidden", type=int,
                   help="decoder LSTM size (default: synthetic 128, multi30k 512)")
    p.add_argument("--dropout", type=float, help="dropout (default: synthetic 0.1, multi30k 0.3)")
    p.add_argument("--lr", type=float, help="Adam learning rate (default: synthetic 0.003, "
                   "multi30k 0.001)")
    p.add_argument("--gpu", action="store_true",
                   help="train and decode on the GPU (default: CPU, --cpu to every tool)")
    p.add_argument("--jobs", type=int, default=1,
                   help="methods run at the same time (default 1; with N > 1 each tool "
                   "process gets --threads threads)")
    p.add_argument("--threads", type=int, default=None,
                   help="OMP/MKL threads per tool process (default: 1 when --jobs > 1, "
                   "else torch's default)")
    p.add_argument("--results", default=DEFAULT_RESULTS,
                   help="Markdown file whose corpus section is rewritten (default: "
                   "docs/RESULTS.md)")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    for name, value in DEFAULTS[args.corpus].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.updates <= 0 or args.jobs <= 0:
        parser.error("--updates and --jobs must be positive")
    argv_used = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["fairseq-syntax-experiment", *argv_used])
    os.makedirs(args.workdir, exist_ok=True)
    methods = select_methods(args.methods)
    corpus = prepare_synthetic(args) if args.corpus == "synthetic" else prepare_multi30k(args)
    threads = args.threads or (1 if args.jobs > 1 else None)
    env = tool_env(threads)
    start = time.time()
    lock = threading.Lock()
    total = len(methods)
    done = [0]

    def one(method: Method) -> List[Row]:
        t0 = time.time()
        with lock:
            print(f"[start] {method.key}", file=sys.stderr, flush=True)
        rows = run_method(method, corpus, args, env)
        with lock:
            done[0] += 1
            r = rows[0]
            status = (f"failed: {r.error}" if r.error else
                      f"BLEU {fmt(r.bleu)} RIBES {fmt(r.ribes)}"
                      + (f" agreement {fmt(r.agreement)} AER {fmt(r.aer)}" if r.aer is not None else "")
                      + (f" DA/UA {r.da:.1f}/{r.ua:.1f}" if r.da is not None else ""))
            print(f"[{done[0]}/{total}] {method.key}: {status} ({time.time() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
        return rows

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, methods))
    rows = [r for group in results for r in group]
    minutes = (time.time() - start) / 60
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump([r.__dict__ for r in rows], f, indent=1)
    body = section_markdown(corpus, rows, args, command, minutes)
    update_results(args.results, args.corpus, body)
    print(body)
    print(f"wrote the {args.corpus} section of {args.results}", file=sys.stderr)
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
