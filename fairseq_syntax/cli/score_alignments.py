"""``fairseq-syntax-score-alignments``: AER, precision, recall and F1 of word alignments.

Hypothesis alignments come from a Pharaoh file (``--hypothesis``) or from
``fairseq-generate`` output (``--generate``), where they are extracted from attention:

* ``--print-alignment soft``: each ``A-`` line holds, per target token (the hypothesis
  pieces, then eos), a comma-separated probability list over the source positions (the
  source pieces, then eos). Subwords are collapsed to words (a source word's
  probability is the sum over its pieces, a target word's row the mean of its pieces'
  rows; word starts are the sentencepiece ``▁`` pieces of the ``S-``/``H-`` lines, see
  ``--subword``), then each target word is linked to its most probable source word when
  that probability exceeds ``--threshold`` (0.2; Mi et al. 2016, section 5.3); a maximum
  on the source eos means unaligned.
* ``--print-alignment hard``: ``A-`` lines hold fairseq's argmax links ``i-j`` between
  source and target pieces (0-based, eos excluded, no threshold), collapsed to words.

Alignment quality is measured on the **reference**: make fairseq-generate force-decode
it. With ``--prefix-size`` at least the longest target (eos included), the beam follows
the reference exactly and the soft ``A-`` lines hold its teacher-forced attention::

    fairseq-generate data-bin --user-dir "$(fairseq-syntax-user-dir)" \\
        --task syntax_translation --path checkpoints/checkpoint_best.pt --gen-subset test \\
        --beam 1 --prefix-size 1024 --print-alignment soft --batch-size 32 > gen.txt
    fairseq-syntax-score-alignments --generate gen.txt --gold corpus/test.align

(``--score-reference --print-alignment hard`` works too; fairseq's scorer cannot print
soft alignments.) Do not use ``--post-process``/``--remove-bpe``: the pieces of the
``S-``/``H-`` lines are needed to map subwords to words. A hypothesis that differs from
its ``T-`` reference is an error. Sentence ``S-k`` is scored against line ``k + 1`` of the
gold file (fairseq's sentence ids are 0-based line numbers of the split).

Gold alignments: ``--gold-format pharaoh`` (``i-j`` sure, ``ipj`` possible, one line per
sentence) or ``naacl`` (``sentence_id i j [S|P]`` lines, 1-based), ``--gold-index-base``
0 or 1, ``--gold-reverse`` when the gold lists target-source. Possible links include the
sure ones. Scores: see :mod:`fairseq_syntax.syntax.alignment_scores`.

Exit status 0; bad input prints ``fairseq-syntax-score-alignments: error: FILE:LINE:
message`` and exits with 1.
"""
import argparse
import json
import sys
from typing import Optional, Sequence

from fairseq_syntax.evaluation.alignments import PROG, score_alignment_files
from fairseq_syntax.syntax.errors import exit_on_input_error


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Score word alignments (AER, precision, recall, F1) against gold "
        "alignments with sure and possible links; hypotheses from a Pharaoh file or from "
        "fairseq-generate --print-alignment soft|hard output (attention -> hard links).",
    )
    hyp = parser.add_mutually_exclusive_group(required=True)
    hyp.add_argument("--generate", metavar="FILE",
                     help="fairseq-generate output with A- lines ('-' for stdin)")
    hyp.add_argument("--hypothesis", metavar="FILE",
                     help="hypothesis alignments, Pharaoh i-j (source-target), one line per "
                          "gold sentence")
    parser.add_argument("--gold", required=True, metavar="FILE", help="gold alignments")
    parser.add_argument("--gold-format", choices=["pharaoh", "naacl"], default="pharaoh",
                        help="pharaoh: i-j sure / ipj possible per line; naacl: "
                             "'sentence_id i j [S|P]' lines, 1-based (default: %(default)s)")
    parser.add_argument("--gold-index-base", type=int, choices=[0, 1], default=0,
                        help="first word index of Pharaoh gold links (default: %(default)s; "
                             "the NAACL format is always 1-based)")
    parser.add_argument("--gold-reverse", action="store_true",
                        help="gold links are target-source (i on the target side)")
    parser.add_argument("--hypothesis-index-base", type=int, choices=[0, 1], default=0,
                        help="first word index of --hypothesis links (default: %(default)s)")
    parser.add_argument("--text", metavar="FILE",
                        help="with --hypothesis: 'source ||| target' word lines, to check that "
                             "every link is in range")
    parser.add_argument("--alignment", choices=["auto", "soft", "hard"], default="auto",
                        help="kind of the A- lines of --generate (default: detected)")
    parser.add_argument("--threshold", type=float, default=0.2,
                        help="soft attention: link a target word to its most probable source "
                             "word when the probability exceeds this (default: %(default)s)")
    parser.add_argument("--subword", choices=["sentencepiece", "bpe", "none"],
                        default="sentencepiece",
                        help="how S-/H- pieces form words: sentencepiece ('▁' starts a word), "
                             "bpe ('@@' continues one) or none (default: %(default)s)")
    parser.add_argument("--write-links", metavar="FILE",
                        help="write the word-level hypothesis links (Pharaoh, 0-based), one line "
                             "per scored sentence, in gold order")
    parser.add_argument("--json", action="store_true", help="print the scores as one JSON object")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point: prints the scores; bad input exits with status 1 and a one-line error."""
    parser = get_parser()
    args = parser.parse_args(argv)
    if not 0.0 <= args.threshold < 1.0:
        parser.error("--threshold must be in [0, 1)")
    if args.text is not None and args.hypothesis is None:
        parser.error("--text goes with --hypothesis (generate output carries its own text)")
    with exit_on_input_error(PROG):
        scores = score_alignment_files(
            args.gold, args.generate, args.hypothesis, args.gold_format, args.gold_index_base,
            args.gold_reverse, args.hypothesis_index_base, args.text, args.alignment,
            args.threshold, args.subword, args.write_links)
    if args.json:
        print(json.dumps(scores, sort_keys=True))
    else:
        print(f"sentences {scores['sentences']}")
        print(f"links: hypothesis {scores['hypothesis_links']}, sure {scores['sure_links']}, "
              f"hypothesis & sure {scores['hyp_and_sure']}, "
              f"hypothesis & possible {scores['hyp_and_possible']}")
        for key, name in (("precision", "precision"), ("recall", "recall"), ("f1", "F1"),
                          ("aer", "AER")):
            print(f"{name} {100 * scores[key]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
