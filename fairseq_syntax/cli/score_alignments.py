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
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from fairseq_syntax.syntax.alignment_scores import (
    Link,
    SentenceAlignment,
    check_alignment_range,
    collapse_attention_to_words,
    hard_links_from_attention,
    parse_pharaoh_links,
    read_naacl_file,
    read_pharaoh_file,
    score_alignments,
)
from fairseq_syntax.syntax.errors import SyntaxInputError, exit_on_input_error
from fairseq_syntax.syntax.pharaoh import format_pharaoh
from fairseq_syntax.syntax.subwords import pieces_per_word, word_index_of_pieces, word_links
from fairseq_syntax.syntax.text_io import iter_decoded_lines

PROG = "fairseq-syntax-score-alignments"
_GEN_LINE = re.compile(r"([STHDPAI])-(\d+)\t(.*)")
_SOFT_ROW = re.compile(r"[0-9.eE+-]+(,[0-9.eE+-]+)*")


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


# --------------------------------------------------------------------------- generate output


@dataclass
class GeneratedSentence:
    """One sentence of fairseq-generate output (first hypothesis only)."""

    sid: int
    source: Optional[List[str]] = None
    reference: Optional[List[str]] = None
    hypothesis: Optional[List[str]] = None
    alignment: Optional[str] = None
    alignment_line: int = 0
    lines: Dict[str, int] = field(default_factory=dict)


def read_generate_output(path: str) -> Dict[int, GeneratedSentence]:
    """Collect S-/T-/H-/A- lines by sentence id; only the first H- and A- count (nbest)."""
    sentences: Dict[int, GeneratedSentence] = {}
    source = "/dev/stdin" if path == "-" else path
    for number, text in iter_decoded_lines(source):
        match = _GEN_LINE.fullmatch(text)
        if match is None:
            continue
        kind, sid, rest = match.group(1), int(match.group(2)), match.group(3)
        sent = sentences.setdefault(sid, GeneratedSentence(sid))
        if kind in sent.lines:
            continue
        sent.lines[kind] = number
        if kind == "S":
            sent.source = rest.split()
        elif kind == "T":
            sent.reference = rest.split()
        elif kind == "H":
            fields = rest.split("\t", 1)
            sent.hypothesis = fields[1].split() if len(fields) > 1 else []
        elif kind == "A":
            sent.alignment = rest
            sent.alignment_line = number
    return sentences


def _detect_kind(alignment: str, path: str, line: int) -> str:
    tokens = alignment.split()
    if not tokens:
        return "hard"
    if all(re.fullmatch(r"\d+-\d+", t) for t in tokens):
        return "hard"
    if all(_SOFT_ROW.fullmatch(t) for t in tokens):
        return "soft"
    raise SyntaxInputError(
        "the A- line is neither hard links (i-j) nor soft rows (comma-separated "
        "probabilities)", path, line,
    )


def links_from_generated(sent: GeneratedSentence, path: str, kind: str, threshold: float,
                         subword: str) -> List[Link]:
    """Word-level links of one generated sentence (see the module docstring)."""
    line = sent.alignment_line
    if sent.source is None or sent.hypothesis is None:
        raise SyntaxInputError(
            f"sentence {sent.sid} has an A- line but no {'S-' if sent.source is None else 'H-'} "
            "line", path, line,
        )
    ref = [p.replace("<<unk>>", "<unk>") for p in sent.reference] if sent.reference else None
    if ref is not None and ref != sent.hypothesis:
        raise SyntaxInputError(
            f"sentence {sent.sid}: the hypothesis (H-) is not the reference (T-); alignment "
            "scores need the reference force-decoded: fairseq-generate --beam 1 "
            "--prefix-size 1024 --print-alignment soft (or --score-reference "
            "--print-alignment hard)", path, sent.lines.get("H"),
        )
    src_words = word_index_of_pieces(pieces_per_word(sent.source, subword))
    tgt_words = word_index_of_pieces(pieces_per_word(sent.hypothesis, subword))
    n_src, n_tgt = len(sent.source), len(sent.hypothesis)
    if kind == "auto":
        kind = _detect_kind(sent.alignment, path, line)
    if kind == "hard":
        links = parse_pharaoh_links(sent.alignment, 0, False, path, line)
        for i, j in links.sure:
            if i >= n_src or j >= n_tgt:
                raise SyntaxInputError(
                    f"link {i}-{j} is outside the {n_src} source and {n_tgt} hypothesis "
                    "pieces of the S-/H- lines (run fairseq-generate without --post-process)",
                    path, line,
                )
        return word_links(links.sure, src_words, tgt_words)
    rows = []
    for t, token in enumerate(sent.alignment.split()):
        try:
            rows.append([float(x) for x in token.split(",")])
        except ValueError:
            raise SyntaxInputError(
                f"row {t + 1} of the soft A- line is not comma-separated numbers", path, line
            ) from None
    shapes = {len(r) for r in rows}
    if len(rows) != n_tgt + 1 or shapes != {n_src + 1}:
        raise SyntaxInputError(
            f"sentence {sent.sid}: the soft A- line has {len(rows)} rows of "
            f"{'/'.join(map(str, sorted(shapes))) or 0} values, but the H- line has {n_tgt} "
            f"pieces and the S- line {n_src} (expected {n_tgt + 1} rows of {n_src + 1}: "
            "pieces then eos); run fairseq-generate without --post-process/--remove-bpe",
            path, line,
        )
    words = collapse_attention_to_words(rows[:n_tgt], src_words, tgt_words)
    return hard_links_from_attention(words, max(src_words, default=-1) + 1, threshold)


# --------------------------------------------------------------------------- driver


def read_gold(args) -> List[SentenceAlignment]:
    if args.gold_format == "naacl":
        gold = read_naacl_file(args.gold)
    else:
        gold = read_pharaoh_file(args.gold, args.gold_index_base, allow_possible=True)
    if args.gold_reverse:
        gold = [g.swapped() for g in gold]
    return gold


def _gold_line(args, k: int) -> Optional[int]:
    return k + 1 if args.gold_format == "pharaoh" else None


def score(args) -> dict:
    """Run the command on parsed ``args``; returns the scores (see ``AlignmentCounts``)."""
    gold = read_gold(args)
    gold_base = args.gold_index_base if args.gold_format == "pharaoh" else 1
    hypotheses: List[List[Link]] = []
    golds: List[SentenceAlignment] = []
    if args.generate is not None:
        sentences = read_generate_output(args.generate)
        with_alignment = [s for s in sentences.values() if s.alignment is not None]
        if not with_alignment:
            raise SyntaxInputError(
                "no A- lines: run fairseq-generate with --print-alignment soft (or hard)",
                args.generate,
            )
        for sent in sorted(with_alignment, key=lambda s: s.sid):
            if sent.sid >= len(gold):
                raise SyntaxInputError(
                    f"sentence id {sent.sid} but the gold file has {len(gold)} sentences "
                    "(ids are 0-based lines of the generated split)",
                    args.generate, sent.alignment_line,
                )
            links = links_from_generated(sent, args.generate, args.alignment, args.threshold,
                                         args.subword)
            n_src = len(pieces_per_word(sent.source, args.subword))
            n_tgt = len(pieces_per_word(sent.hypothesis, args.subword))
            check_alignment_range(gold[sent.sid], n_src, n_tgt, args.gold,
                                  _gold_line(args, sent.sid), gold_base, "--gold-index-base")
            hypotheses.append(links)
            golds.append(gold[sent.sid])
        if len(with_alignment) < len(gold):
            print(f"{PROG}: note: {len(with_alignment)} of {len(gold)} gold sentences are in "
                  f"{args.generate}; the others are not scored", file=sys.stderr)
    else:
        hyp = read_pharaoh_file(args.hypothesis, args.hypothesis_index_base, allow_possible=False)
        if len(hyp) != len(gold):
            raise SyntaxInputError(
                f"{len(hyp)} hypothesis lines but the gold file {args.gold} has {len(gold)} "
                "sentences", args.hypothesis,
            )
        if args.text is not None:
            lines = list(iter_decoded_lines(args.text))
            if len(lines) != len(gold):
                raise SyntaxInputError(
                    f"{len(lines)} lines but the gold file has {len(gold)} sentences", args.text
                )
            for k, (number, text) in enumerate(lines):
                parts = text.split("|||")
                if len(parts) != 2:
                    raise SyntaxInputError("expected 'source ||| target'", args.text, number)
                n_src, n_tgt = len(parts[0].split()), len(parts[1].split())
                check_alignment_range(gold[k], n_src, n_tgt, args.gold, _gold_line(args, k),
                                      gold_base, "--gold-index-base")
                check_alignment_range(hyp[k], n_src, n_tgt, args.hypothesis, k + 1,
                                      args.hypothesis_index_base, "--hypothesis-index-base")
        hypotheses = [sorted(h.sure) for h in hyp]
        golds = gold
    if args.write_links:
        with open(args.write_links, "w", encoding="utf-8") as out:
            for links in hypotheses:
                out.write(format_pharaoh(sorted(links)) + "\n")
    return score_alignments(hypotheses, golds).as_dict()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point: prints the scores; bad input exits with status 1 and a one-line error."""
    parser = get_parser()
    args = parser.parse_args(argv)
    if not 0.0 <= args.threshold < 1.0:
        parser.error("--threshold must be in [0, 1)")
    if args.text is not None and args.hypothesis is None:
        parser.error("--text goes with --hypothesis (generate output carries its own text)")
    with exit_on_input_error(PROG):
        scores = score(args)
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
