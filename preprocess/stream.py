"""Stage 3 of preprocessing: one pass over each split in chunks of :data:`CHUNK` sentence
pairs, as fairseq's binariser streams its input. Each chunk is encoded (:mod:`.subwords`),
projected (:mod:`.project`) and appended to the side-file and alignment binaries in the
staging folder; its piece lines go to the work folder and its tokens are counted. Then
fairseq's dictionaries from the train split's counts, and the token binaries from the
piece lines, again in chunks (:mod:`.fairseq_binary`). One chunk is held at a time."""
import contextlib
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Optional, Sequence

import numpy as np

from fairseq_syntax.data.side_files import HEADS, TREE, WORDS, side_file_prefix
from fairseq_syntax.syntax.errors import SyntaxInputError

from .fairseq_binary import (MmapWriter, TokenDictionary, alignment_items, chunked,
                             write_token_dataset)
from .project import project_chunk
from .read import Pair, SplitData
from .subwords import encode_chunk

CHUNK = 10000  # sentence pairs per chunk
logger = logging.getLogger("fairseq_syntax_preprocess")


@dataclass
class SplitSummary:
    """What the dictionaries and the manifest need of a binarised split."""

    name: str
    aligned: bool  # alignments were binarised for this split
    sentences: int = 0
    source_words: int = 0
    lengths: Counter = field(default_factory=Counter)  # (source, target) tokens -> pairs
    source_counts: Counter = field(default_factory=Counter)  # token -> count
    target_counts: Counter = field(default_factory=Counter)
    #: the first tree that does not fit its sentence (raised once all splits are encoded)
    tree_error: Optional[SyntaxInputError] = None
    #: word links to a target word that sentencepiece's normalisation removed (no piece to
    #: link to), and the line of the first
    dropped_links: int = 0
    first_dropped_line: Optional[int] = None


def piece_path(work: str, split: str, lang: str) -> str:
    """Where a split's piece lines are kept until the token binaries are written."""
    return os.path.join(work, f"{split}.{lang}.pieces")


def binarise_split(data: SplitData, pairs: Iterable[Pair], sp, staging: str, work: str,
                   src: str, tgt: str, aligned: bool) -> SplitSummary:
    """Encode, check and project the split's ``pairs`` chunk by chunk; write its
    side-files (and with ``aligned`` its alignments) into ``staging``, its piece lines into
    ``work``. A tree that does not fit stops the projection, not the encoding: its error
    waits in the summary, so that encoding errors of later splits come first."""
    from tqdm import tqdm

    name = data.files.name
    summary = SplitSummary(name, aligned)
    with contextlib.ExitStack() as stack:
        side = [stack.enter_context(MmapWriter(side_file_prefix(staging, name, src, tgt, kind),
                                               np.int32)) for kind in (HEADS, WORDS, TREE)]
        links = (stack.enter_context(MmapWriter(
            os.path.join(staging, f"{name}.align.{src}-{tgt}"), np.uint32)) if aligned else None)
        pieces = [stack.enter_context(open(piece_path(work, name, lang), "w", encoding="utf-8",
                                           newline="\n")) for lang in (src, tgt)]
        bar = stack.enter_context(tqdm(total=data.sentences, desc=f"binarise {name}",
                                       unit="pair", disable=None, mininterval=1.0))
        for part in chunked(pairs, CHUNK):
            _binarise_chunk(data, part, sp, summary, side, links, pieces)
            bar.update(len(part))
    if summary.dropped_links:
        logger.warning(f"{data.files.target}: {summary.dropped_links} alignment link(s) point at "
                       "target words that sentencepiece's normalisation removes (no piece to "
                       f"link to) and were left out; the first at line "
                       f"{summary.first_dropped_line}")
    return summary


def _binarise_chunk(data: SplitData, pairs: List[Pair], sp, summary: SplitSummary,
                    side: Sequence[MmapWriter], links: Optional[MmapWriter],
                    pieces: Sequence) -> None:
    first = summary.sentences
    encoded = encode_chunk(sp, data.files, first, [p.source for p in pairs],
                           [p.target for p in pairs], target_words=summary.aligned)
    projected = project_chunk(data.files, first, pairs, encoded,
                              trees=summary.tree_error is None)
    summary.tree_error = summary.tree_error or projected.error
    for writer, rows in zip(side, (projected.heads, projected.words, projected.trees)):
        writer.add_rows(rows)
    if links is not None:
        links.add(*alignment_items(projected.links))
        for k, (pair, counts) in enumerate(zip(pairs, encoded.target_counts)):
            dropped = sum(counts[j] == 0 for _, j in pair.links)
            if dropped and summary.first_dropped_line is None:
                summary.first_dropped_line = first + k + 1
            summary.dropped_links += dropped
    for out, lines, counts in ((pieces[0], encoded.source_pieces, summary.source_counts),
                               (pieces[1], encoded.target_pieces, summary.target_counts)):
        out.write("".join(" ".join(line) + "\n" for line in lines))
        for line in lines:
            counts.update(line)
    summary.lengths.update(zip(map(len, encoded.source_pieces), map(len, encoded.target_pieces)))
    summary.sentences += len(pairs)
    summary.source_words += sum(len(p.source) for p in pairs)


def _piece_lines(path: str) -> Iterator[List[str]]:
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            yield line.split()


def write_token_binaries(staging: str, work: str, splits: Sequence[SplitSummary], src: str,
                         tgt: str, joined_dictionary: bool) -> None:
    """fairseq's dictionaries (from the train split's counts) and token binaries of every
    split (from its piece lines), byte for byte what ``fairseq-preprocess --dataset-impl
    mmap`` writes for the subword text."""
    train = splits[0]
    if joined_dictionary:
        joined = TokenDictionary.from_counts(train.source_counts + train.target_counts,
                                             2 * train.sentences)
        dicts = {src: joined, tgt: joined}
    else:
        dicts = {src: TokenDictionary.from_counts(train.source_counts, train.sentences),
                 tgt: TokenDictionary.from_counts(train.target_counts, train.sentences)}
    for lang in (src, tgt):
        dicts[lang].save(os.path.join(staging, f"dict.{lang}.txt"))
    for split in splits:
        for lang in (src, tgt):
            write_token_dataset(os.path.join(staging, f"{split.name}.{src}-{tgt}.{lang}"),
                                dicts[lang], _piece_lines(piece_path(work, split.name, lang)),
                                CHUNK)
