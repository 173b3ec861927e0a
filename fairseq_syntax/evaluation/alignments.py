"""Word alignments scored against gold links with sure and possible links (AER,
precision, recall, F1): hypotheses from a Pharaoh file or from fairseq-generate's
``--print-alignment soft|hard`` output, attention collapsed to words and made hard links."""
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional

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
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import format_pharaoh
from fairseq_syntax.syntax.subwords import pieces_per_word, word_index_of_pieces, word_links
from fairseq_syntax.syntax.text_io import atomic_text_file, iter_decoded_lines

PROG = "fairseq-syntax-score-alignments"
_GEN_LINE = re.compile(r"([STHDPAI])-(\d+)\t(.*)")
_SOFT_ROW = re.compile(r"[0-9.eE+-]+(,[0-9.eE+-]+)*")


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


def read_gold(gold: str, gold_format: str = "pharaoh", gold_index_base: int = 0,
              gold_reverse: bool = False) -> List[SentenceAlignment]:
    if gold_format == "naacl":
        links = read_naacl_file(gold)
    else:
        links = read_pharaoh_file(gold, gold_index_base, allow_possible=True)
    return [g.swapped() for g in links] if gold_reverse else links


def score_alignment_files(gold: str, generate: Optional[str] = None,
                          hypothesis: Optional[str] = None, gold_format: str = "pharaoh",
                          gold_index_base: int = 0, gold_reverse: bool = False,
                          hypothesis_index_base: int = 0, text: Optional[str] = None,
                          alignment: str = "auto", threshold: float = 0.2,
                          subword: str = "sentencepiece",
                          write_links: Optional[str] = None) -> dict:
    """AER, precision, recall and F1 (``AlignmentCounts.as_dict``) of the links of
    fairseq-generate's ``A-`` lines (``generate``) or of a Pharaoh file (``hypothesis``)
    against ``gold``; the word-level hypothesis links also to ``write_links``."""
    golds_all = read_gold(gold, gold_format, gold_index_base, gold_reverse)
    gold_base = gold_index_base if gold_format == "pharaoh" else 1

    def gold_line(k: int) -> Optional[int]:
        return k + 1 if gold_format == "pharaoh" else None

    hypotheses: List[List[Link]] = []
    golds: List[SentenceAlignment] = []
    if generate is not None:
        sentences = read_generate_output(generate)
        with_alignment = [s for s in sentences.values() if s.alignment is not None]
        if not with_alignment:
            raise SyntaxInputError(
                "no A- lines: run fairseq-generate with --print-alignment soft (or hard)",
                generate,
            )
        for sent in sorted(with_alignment, key=lambda s: s.sid):
            if sent.sid >= len(golds_all):
                raise SyntaxInputError(
                    f"sentence id {sent.sid} but the gold file has {len(golds_all)} sentences "
                    "(ids are 0-based lines of the generated split)",
                    generate, sent.alignment_line,
                )
            links = links_from_generated(sent, generate, alignment, threshold, subword)
            n_src = len(pieces_per_word(sent.source, subword))
            n_tgt = len(pieces_per_word(sent.hypothesis, subword))
            check_alignment_range(golds_all[sent.sid], n_src, n_tgt, gold,
                                  gold_line(sent.sid), gold_base, "--gold-index-base")
            hypotheses.append(links)
            golds.append(golds_all[sent.sid])
        if len(with_alignment) < len(golds_all):
            print(f"{PROG}: note: {len(with_alignment)} of {len(golds_all)} gold sentences are "
                  f"in {generate}; the others are not scored", file=sys.stderr)
    else:
        hyp = read_pharaoh_file(hypothesis, hypothesis_index_base, allow_possible=False)
        if len(hyp) != len(golds_all):
            raise SyntaxInputError(
                f"{len(hyp)} hypothesis lines but the gold file {gold} has {len(golds_all)} "
                "sentences", hypothesis,
            )
        if text is not None:
            lines = list(iter_decoded_lines(text))
            if len(lines) != len(golds_all):
                raise SyntaxInputError(
                    f"{len(lines)} lines but the gold file has {len(golds_all)} sentences", text
                )
            for k, (number, line) in enumerate(lines):
                parts = line.split("|||")
                if len(parts) != 2:
                    raise SyntaxInputError("expected 'source ||| target'", text, number)
                n_src, n_tgt = len(parts[0].split()), len(parts[1].split())
                check_alignment_range(golds_all[k], n_src, n_tgt, gold, gold_line(k),
                                      gold_base, "--gold-index-base")
                check_alignment_range(hyp[k], n_src, n_tgt, hypothesis, k + 1,
                                      hypothesis_index_base, "--hypothesis-index-base")
        hypotheses = [sorted(h.sure) for h in hyp]
        golds = golds_all
    if write_links:
        with atomic_text_file(write_links) as out:
            for links in hypotheses:
                out.write(format_pharaoh(sorted(links)) + "\n")
    return score_alignments(hypotheses, golds).as_dict()
