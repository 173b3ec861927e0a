"""The corpora of the experiment: the synthetic corpus (generated and preprocessed on
demand) and the Multi30k data-bin of ``examples/multi30k/prepare.sh``."""
import json
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Dict, Optional

from fairseq_syntax.data.side_files import FORMAT_VERSION
from fairseq_syntax.data.synthetic_corpus import GRAMMAR_VERSION, generate_corpus

from .tools import read_lines, run_tool, tool_env, write_atomically


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


def corpus_stamp(args) -> dict:
    """What ``WORKDIR/corpus.json`` records of the corpus this command makes with ``args``."""
    return dict(grammar=GRAMMAR_VERSION, side_files=FORMAT_VERSION, seed=args.corpus_seed,
                train=args.train_size, valid=args.valid_size, test=args.test_size,
                gen=args.gen_size, vocab_size=args.vocab_size,
                raw=None if not args.raw else os.path.abspath(args.raw))


def generated_stamp(args) -> Optional[dict]:
    """The stamp (``corpus.json``) of a corpus this command generated, where ``--raw`` is its
    ``raw/`` folder (and ``--data-bin``, if given, its ``data-bin/``): such files are that
    corpus, and are described as it is."""
    if not args.raw or os.path.basename(os.path.abspath(args.raw)) != "raw":
        return None
    home = os.path.dirname(os.path.abspath(args.raw))
    path = os.path.join(home, "corpus.json")
    if not os.path.exists(path) or (
            args.data_bin and os.path.abspath(args.data_bin) != os.path.join(home, "data-bin")):
        return None
    stamp = json.load(open(path))
    return stamp if stamp.get("raw") is None else None  # None: it generated these files


def corpus_description(args) -> str:
    """The corpus as the settings record it (no machine paths). Synthetic: the generator's
    seed and sizes (also for ``--raw``/``--data-bin`` of a corpus this command generated:
    :func:`generated_stamp`), or the sizes of the files given with ``--raw``."""
    if args.corpus == "multi30k":
        return ("Multi30k task 1 En→De (`examples/multi30k/prepare.sh`: spaCy tokens, "
                "en_core_web_sm parses, eflomal alignments), test_2016_flickr")
    stamp = generated_stamp(args)
    vocab = (stamp or {}).get("vocab_size") if args.data_bin else args.vocab_size
    if args.raw and stamp is None:
        sizes = [len(read_lines(p)) if os.path.exists(p) else 0
                 for p in (os.path.join(args.raw, f"{s}.vf")
                           for s in ("train", "valid", "test", "gen"))]
        if args.data_bin and not os.path.exists(os.path.join(args.data_bin,
                                                             "test1.en-vf.en.bin")):
            sizes[3] = 0  # a given data-bin without the gen split: gen is not decoded
        origin = "files given with --raw"
    else:
        made = stamp or corpus_stamp(args)
        sizes = [made[k] for k in ("train", "valid", "test", "gen")]
        origin = f"`fairseq-syntax-synthetic --seed {made['seed']}`, grammar version {made['grammar']}"
    vocab = f", sentencepiece vocabulary {vocab}" if vocab else ""
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
        stamp = corpus_stamp(args)
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
