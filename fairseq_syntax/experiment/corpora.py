"""The corpus of an experiment (``--corpus``): the synthetic corpus (generated and
preprocessed on demand), the presets ``multi30k`` and ``kftt`` (the data-bins of their
``examples/*/prepare.sh``) or a user's corpus description (a JSON file,
:mod:`fairseq_syntax.evaluation.corpus`)."""
import json
import os
import shutil
import sys
from typing import Optional, Tuple

from fairseq_syntax.data.side_files import FORMAT_VERSION, SyntaxInputError, read_manifest
from fairseq_syntax.data.synthetic_corpus import GRAMMAR_VERSION, generate_corpus

from fairseq_syntax.evaluation.corpus import (
    MULTI30K_DESCRIPTION, Corpus, CorpusError, TestSet, check_references, description_of, kftt_corpus, load_corpus, multi30k_corpus, read_description,
)
from fairseq_syntax.syntax.text_io import read_json, read_text_lines

from .records import read_records
from .tools import run_tool, tool_env, write_atomically


PRESETS = ("synthetic", "multi30k", "kftt")


def corpus_name(args) -> str:
    """The corpus's name in tables, records and folders: the preset (``kftt`` with its
    direction, ``kftt-en-ja`` or ``kftt-ja-en``, from the data-bin's manifest, or for a
    rendering without it, from the records: :func:`recorded_corpus`), or the ``name`` of
    the description file ``--corpus``."""
    if args.corpus == "kftt" and not args.data_bin and args.render_only:
        return recorded_corpus(args)[0]
    if args.corpus == "kftt" and args.data_bin:
        try:
            manifest = read_manifest(args.data_bin)
        except SyntaxInputError as err:
            raise SystemExit(f"fairseq-syntax-experiment: error: --data-bin: {err}") from None
        if "source_lang" in manifest and "target_lang" in manifest:
            return f"kftt-{manifest['source_lang']}-{manifest['target_lang']}"
    if args.corpus in PRESETS:
        return args.corpus
    try:
        return str(read_description(args.corpus)["name"])
    except CorpusError as err:
        raise SystemExit(f"fairseq-syntax-experiment: error: --corpus {args.corpus}: not a "
                         f"preset ({', '.join(PRESETS)}) nor a corpus description ({err})"
                         ) from None


def prepare_corpus(args, to_train: bool = False) -> Corpus:
    """The corpus of ``--corpus``, its files checked (the synthetic one made if needed);
    ``to_train``: its references too, against the data-bin's test subsets
    (:func:`check_references`)."""
    try:
        if args.corpus == "synthetic":
            corpus = prepare_synthetic(args)
        elif args.corpus in ("multi30k", "kftt"):
            if not args.data_bin:
                raise SystemExit(f"fairseq-syntax-experiment: error: --corpus {args.corpus} "
                                 f"needs --data-bin (the data-bin examples/{args.corpus}/"
                                 "prepare.sh made)")
            preset = multi30k_corpus if args.corpus == "multi30k" else kftt_corpus
            corpus = preset(args.data_bin, args.corpus_dir)
        else:
            corpus = load_corpus(args.corpus)
        if to_train:
            check_references(corpus)
        return corpus
    except CorpusError as err:
        raise SystemExit(f"fairseq-syntax-experiment: error: {err}") from None


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
    stamp = read_json(path)
    return stamp if stamp.get("raw") is None else None  # None: it generated these files


def recorded_corpus(args) -> Tuple[str, str]:
    """The corpus name and description that the records in ``--results-dir`` agree on:
    what a rendering of ``--corpus kftt`` reads when no data-bin names the direction."""
    where = args.results_dir
    if where is None:
        raise SystemExit("fairseq-syntax-experiment: error: --render-only --corpus kftt needs "
                         "--data-bin (its direction names the section) or --results-dir "
                         "(the records' folder, e.g. docs/results/kftt-en-ja)")
    found = {(r["settings"]["corpus"], r["settings"].get("corpus_description", ""))
             for r in read_records(where)}
    if len(found) != 1:
        raise SystemExit(f"fairseq-syntax-experiment: error: --results-dir {where}: "
                         + (f"its records are of {len(found)} corpora "
                            f"({', '.join(sorted(n for n, _ in found))}): give --data-bin"
                            if found else "no run records to render"))
    return found.pop()


def corpus_description(args, corpus: Optional[Corpus] = None) -> str:
    """The corpus as the settings record it (no machine paths): ``corpus.description``, or
    for the synthetic corpus, the generator's
    seed and sizes (also for ``--raw``/``--data-bin`` of a corpus this command generated:
    :func:`generated_stamp`), or the sizes of the files given with ``--raw``."""
    if args.corpus != "synthetic":
        if corpus is not None:
            return corpus.description
        if args.corpus == "multi30k":
            return MULTI30K_DESCRIPTION
        if args.corpus not in PRESETS:  # a description file: its words, files or not
            return description_of(read_description(args.corpus))
        if args.corpus == "kftt" and not args.data_bin and args.render_only:
            return recorded_corpus(args)[1]
        return prepare_corpus(args).description
    stamp = generated_stamp(args)
    vocab = (stamp or {}).get("vocab_size") if args.data_bin else args.vocab_size
    if args.raw and stamp is None:
        sizes = [len(read_text_lines(p, allow_empty=True)) if os.path.exists(p) else 0
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


def build_synthetic(raw: str, databin: str, log: str, vocab_size: int,
                    sizes: Optional[Tuple[int, int, int, int]] = (20000, 500, 500, 500),
                    seed: int = 1, env=None) -> None:
    """Generate the synthetic corpus into ``raw`` (train/valid/test/gen ``sizes``; None: the
    files there are given) and preprocess it into ``databin`` (``log``: what ran)."""
    if sizes is not None:
        shutil.rmtree(raw, ignore_errors=True)  # no stale gen files
        summary = generate_corpus(raw, seed, *sizes)
        with open(log, "a") as f:
            f.write(f"> generate_corpus: {summary['sizes']} pairs to {raw}\n")
    tests = f"{raw}/test" + (f",{raw}/gen" if os.path.exists(f"{raw}/gen.vf") else "")
    run_tool(["fairseq-syntax-preprocess", "--source-lang", "en", "--target-lang", "vf",
              "--trainpref", f"{raw}/train", "--validpref", f"{raw}/valid",
              "--testpref", tests, "--align-suffix", "align",
              "--vocab-size", str(vocab_size), "--destdir", databin,
              "--workers", "1", "--force"], log, env if env is not None else tool_env(None))


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
        old = read_json(stamp_path)
        if old != stamp or not os.path.exists(os.path.join(databin, "syntax_manifest.json")):
            sizes = None if args.raw else (args.train_size, args.valid_size, args.test_size,
                                           args.gen_size)
            build_synthetic(raw, databin, log, args.vocab_size, sizes, args.corpus_seed, env)
            write_atomically(stamp_path, json.dumps(stamp, indent=1) + "\n")
    for name in ("test.vf", "test.align", "test.en.conllu"):
        if not os.path.exists(os.path.join(raw, name)):
            raise SystemExit(f"fairseq-syntax-experiment: error: {raw}/{name} is missing "
                             "(--raw must be the folder fairseq-syntax-synthetic wrote)")
    tests = [TestSet("test", "test", f"{raw}/test.vf", f"{raw}/test.vf",
                     f"{raw}/test.en.conllu", f"{raw}/test.align")]
    # the generalisation split, where the data-bin has it as its second test split
    if os.path.exists(f"{raw}/gen.vf") and os.path.exists(
            os.path.join(databin, "test1.en-vf.en.bin")):
        tests.append(TestSet("gen", "test1", f"{raw}/gen.vf", f"{raw}/gen.vf",
                             f"{raw}/gen.en.conllu"))
    else:
        print("fairseq-syntax-experiment: note: no gen split (raw gen.vf and the data-bin's "
              "test1), gen columns stay empty", file=sys.stderr)
    return Corpus("synthetic", "en", "vf", databin, tests, corpus_description(args),
                  "synthetic", "13a", ["agreement", "aer", "induced_trees"])
