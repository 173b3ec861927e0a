"""Command line of ``fairseq-syntax-preprocess``.

Example::

    fairseq-syntax-preprocess -s de -t en --trainpref corpus/train --validpref corpus/valid \\
        --align-suffix align --vocab-size 8000 --destdir data-bin/de-en

reads ``corpus/train.de``, ``corpus/train.en``, ``corpus/train.de.conllu`` and
``corpus/train.align`` (and the same for ``valid``), and writes a fairseq data-bin with
the syntax side-files, ``spm.model`` and ``syntax_manifest.json``. With a spaCy parser
and eflomal instead of given parses and alignments::

    fairseq-syntax-preprocess -s en -t de --trainpref corpus/train --validpref corpus/val \\
        --parser en_core_web_sm --align eflomal --workers 2 --destdir data-bin/en-de

parses ``corpus/train.en`` (cached in ``corpus/train.en.conllu``) and aligns train + val.
With bracketed constituency parses for the tree side-file (``corpus/train.en.ptb``, ...;
the synthetic corpus writes them)::

    fairseq-syntax-preprocess -s en -t vf --trainpref raw/train --validpref raw/valid \
        --ptb-suffix ptb --align-suffix align --destdir data-bin/en-vf
"""
import argparse
import logging
import os
import sys
from typing import List, Optional

from fairseq_syntax.syntax.errors import exit_on_input_error

PROG = "fairseq-syntax-preprocess"


def get_parser() -> argparse.ArgumentParser:
    """The argument parser of ``fairseq-syntax-preprocess``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Turn parallel text, dependency parses of the source (CoNLL-U) and optional "
            "word alignments into a fairseq data-bin: sentencepiece subwords, fairseq's own "
            "dictionaries and binaries, plus the syntax side-files (heads, binary trees) "
            "and a manifest; optionally bracketed constituency parses for the binary trees "
            "(--ptb-suffix). Nothing is written unless every input is valid."
        ),
        allow_abbrev=False,
    )
    parser.add_argument("-s", "--source-lang", required=True, metavar="SRC",
                        help="source language suffix: text at {pref}.SRC")
    parser.add_argument("-t", "--target-lang", required=True, metavar="TGT",
                        help="target language suffix: text at {pref}.TGT")
    parser.add_argument("--trainpref", required=True, metavar="FP",
                        help="train file prefix (required): {FP}.SRC, {FP}.TGT, one "
                             "whitespace-tokenised sentence per line, UTF-8")
    parser.add_argument("--validpref", metavar="FP", default=None,
                        help="comma-separated valid file prefixes (written as valid, valid1, ...)")
    parser.add_argument("--testpref", metavar="FP", default=None,
                        help="comma-separated test file prefixes (written as test, test1, ...)")
    parser.add_argument("--parse-suffix", default="conllu", metavar="SUFFIX",
                        help="source parses are read from {pref}.SRC.SUFFIX, CoNLL-U, one tree "
                             "per text line whose words equal the line's tokens; with --parser "
                             "they are written there (default: %(default)s)")
    parser.add_argument("--parser", default=None, metavar="NAME_OR_PATH",
                        help="parse the source with this spaCy pipeline (an installed name such "
                             "as en_core_web_sm, or a folder saved with nlp.to_disk) instead of "
                             "reading CoNLL-U: one tree per line over the line's whitespace "
                             "tokens (sentence starts preset), only the parser and its tok2vec "
                             "run; the parses are written as CoNLL-U to {pref}.SRC.SUFFIX (or "
                             "into --parse-cache) and reused by a later run with the same "
                             "parser and text; recorded in the manifest for fairseq-interactive")
    parser.add_argument("--parse-cache", default=None, metavar="DIR",
                        help="with --parser: write/reuse the CoNLL-U parses in DIR "
                             "({basename(pref)}.SRC.SUFFIX) instead of next to the text")
    parser.add_argument("--parse-batch-size", type=int, default=256, metavar="N",
                        help="with --parser: sentences per spaCy batch (default: %(default)s)")
    parser.add_argument("--source-tokenization", default="whitespace",
                        choices=["whitespace", "parser"],
                        help="how the source text was tokenised, recorded in the manifest so "
                             "that fairseq-interactive splits raw input the same way: "
                             "'parser' (by the --parser pipeline's own tokenizer, as "
                             "examples/multi30k/prepare.sh does) or 'whitespace' (raw input is "
                             "given tokenised) (default: %(default)s)")
    parser.add_argument("--ptb-suffix", default=None, metavar="SUFFIX",
                        help="build the binary tree side-file (tree2seq's phrases) from "
                             "PTB-style bracketed constituency parses of the source, read from "
                             "{pref}.SRC.SUFFIX for every split: one tree per line of the text, "
                             "e.g. (ROOT (S (NP (DT the) (NN dog)) (VP (VBD barked)) (. .))), "
                             "whose leaves are the line's tokens (-LRB-/-RRB- may stand for "
                             "brackets; -NONE- empty elements are dropped). Binarised at word "
                             "level: unary chains collapsed, n-ary constituents right-factored, "
                             "children c1..ck becoming (c1, (c2, (... (c_{k-1}, ck)))); then each "
                             "word's pieces hang below it. Without it the tree is the "
                             "head-outward binarisation of the dependency parse, which still "
                             "gives the heads and distances either way")
    parser.add_argument("--align-suffix", default=None, metavar="SUFFIX",
                        help="word alignments (Pharaoh i-j, 0-based, source-target) at "
                             "{pref}.SUFFIX; required for train when given, optional for "
                             "valid/test")
    parser.add_argument("--align", default=None, choices=["eflomal"],
                        help="compute the word alignments instead of reading them: eflomal "
                             "in both directions over the train and valid splits together "
                             "(their whitespace tokens), symmetrised with grow-diag-final-and; "
                             "test splits are not aligned; runs while the parser parses")
    parser.add_argument("--eflomal-samplers", type=int, default=1, metavar="N",
                        help="with --align eflomal: independent samplers per direction "
                             "(eflomal's own default is 3, at 3x the CPU time) "
                             "(default: %(default)s)")
    parser.add_argument("--eflomal-iterations", type=float, default=0.5, metavar="REL",
                        help="with --align eflomal: sampling iterations relative to eflomal's "
                             "default for the corpus size (its rel_iterations; eflomal's own "
                             "default is 1.0, at 2x the CPU time). On the 29,000 Multi30k "
                             "pairs the defaults (1 sampler, 0.5) take about 5 CPU seconds "
                             "against 28 for eflomal's (3, 1.0); their symmetrised links agree "
                             "with those of (3, 1.0) at F1 0.955, as two runs of (1, 1.0) "
                             "agree with each other, and two runs of (3, 1.0) at 0.967 "
                             "(default: %(default)s)")
    parser.add_argument("--spm-model", default=None, metavar="FILE",
                        help="an existing sentencepiece model; without it one joint model is "
                             "trained on the train source + target text")
    parser.add_argument("--spm-train-pairs", type=int, default=50000, metavar="N",
                        help="train sentencepiece on at most N train pairs: a fixed random "
                             "sample (random.Random(1)) when the train split has more, as "
                             "the trainer holds every sentence it is given, so that memory "
                             "does not grow with the corpus (at 440,000 pairs it held 1.67 GB "
                             "against 0.52 at 50,000); 0: all pairs (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=8000,
                        help="vocabulary size of the trained sentencepiece model (a soft "
                             "limit, so tiny corpora work) (default: %(default)s)")
    parser.add_argument("--spm-model-type", default="unigram",
                        choices=["unigram", "bpe", "char", "word"],
                        help="sentencepiece model type to train (default: %(default)s)")
    parser.add_argument("--character-coverage", type=float, default=0.9995,
                        help="sentencepiece character coverage when training "
                             "(default: %(default)s)")
    parser.add_argument("--joined-dictionary", action="store_true",
                        help="build one fairseq dictionary for both languages (passed on to "
                             "fairseq's preprocessing)")
    parser.add_argument("--destdir", required=True, metavar="DIR",
                        help="the data-bin folder to write; it is created only when "
                             "everything succeeded")
    parser.add_argument("--workers", type=int, default=1,
                        help="number of processes for spaCy parsing (--parser), and of "
                             "sentencepiece training threads when nothing is parsed (beside "
                             "the parser it trains with one thread) (default: %(default)s)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing non-empty --destdir that is a data-bin "
                             "(holds syntax_manifest.json; the old folder stays untouched "
                             "until the new one is complete); refused when it holds the "
                             "inputs or the current folder")
    parser.add_argument("--force-non-data-bin", action="store_true",
                        help="with --force: also replace a --destdir that is not a data-bin "
                             "(no syntax_manifest.json), deleting everything in it")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: returns 0 on success; on bad input prints one line
    ``fairseq-syntax-preprocess: error: FILE:LINE: message`` to stderr and exits with 1.

    With ``argv=None`` (the console script) logging is configured to go to stdout; a
    caller passing ``argv`` keeps its own logging configuration.
    """
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    if args.vocab_size < 1:
        parser.error("--vocab-size must be at least 1")
    if args.align and args.align_suffix:
        parser.error("--align and --align-suffix exclude each other: compute the alignments "
                     "or read them")
    if args.eflomal_samplers < 1:
        parser.error("--eflomal-samplers must be at least 1")
    if not args.eflomal_iterations > 0:
        parser.error("--eflomal-iterations must be positive")
    if args.parse_cache and not args.parser:
        parser.error("--parse-cache needs --parser")
    if args.parse_batch_size < 1:
        parser.error("--parse-batch-size must be at least 1")
    if args.force_non_data_bin and not args.force:
        parser.error("--force-non-data-bin needs --force")
    if args.source_tokenization == "parser" and not args.parser:
        parser.error("--source-tokenization parser needs --parser")
    if args.source_lang == args.target_lang:
        parser.error(f"--source-lang and --target-lang are both {args.source_lang!r}: a "
                     "data-bin keeps one file per language; give the two sides other names")
    if argv is None:  # run as a program: log to stdout like fairseq's own commands
        logging.basicConfig(
            format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
            datefmt="%Y-%m-%d %H:%M:%S",
            level=os.environ.get("LOGLEVEL", "INFO").upper(),
            stream=sys.stdout,
            force=True,  # importing fairseq may already have configured logging to stderr
        )
    # recorded in the manifest, so that a data-bin of an outdated format names its rebuild
    args.command = [PROG] + list(sys.argv[1:] if argv is None else argv)
    from .eflomal_align import EflomalError
    from .interrupt import Interrupted
    from .pipeline import run

    try:
        with exit_on_input_error(PROG):
            run(args)
    except EflomalError as err:
        print(f"{PROG}: error: {err}; {args.destdir} is as it was", file=sys.stderr)
        sys.exit(1)
    except Interrupted as stop:
        print(f"{PROG}: error: {stop}; removed the unfinished data-bin, {args.destdir} is as it "
              "was", file=sys.stderr)
        sys.exit(128 + stop.signum)
    return 0


if __name__ == "__main__":
    sys.exit(main())
