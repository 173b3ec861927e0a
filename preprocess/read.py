"""Stage 1 of preprocessing: the split files named on the command line, checked one line
(or tree) at a time, keeping only counts (UTF-8, no empty lines, equal line counts, parse
words == text tokens, trees valid, alignment indices in range), then read again pair by
pair (:func:`read_pairs`) as the chunk loop (:mod:`.stream`) asks; with ``--parser`` the
source parsed with spaCy (:mod:`fairseq_syntax.syntax.spacy_parser`; the parses are
cached as CoNLL-U, :mod:`.spacy_parse`, and read back from there); with ``--ptb-suffix``
the bracketed constituency parses checked against the text and binarised at word level
(:mod:`fairseq_syntax.syntax.constituency`)."""
import itertools
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax.syntax import constituency
from fairseq_syntax.syntax.conllu_io import (
    ParsedSentence,
    iter_checked_conllu_trees,
    iter_conllu_trees,
)
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import parse_pharaoh_line
from fairseq_syntax.syntax.text_io import iter_decoded_lines, iter_text_lines, iter_words

Link = Tuple[int, int]


@dataclass
class SplitFiles:
    """Where one split's inputs are."""

    name: str  # fairseq's output prefix: train, valid, valid1, test, ...
    prefix: str
    source: str
    target: str
    parse: str
    align: Optional[str]
    ptb: Optional[str] = None  # --ptb-suffix: bracketed constituency parses of the source


@dataclass
class SplitData:
    """One split's checked inputs: where they are, and how many sentence pairs."""

    files: SplitFiles
    sentences: int
    parse_reused: Optional[bool] = None  # --parser: whether the CoNLL-U cache was reused


class Pair(NamedTuple):
    """One checked sentence pair, word level."""

    source: List[str]
    target: List[str]
    tree: ParsedSentence
    word_tree: Optional[np.ndarray]  # --ptb-suffix: the binarised constituency tree
    links: Optional[List[Link]]  # the word alignment, if the split has one


def split_files(args) -> List[SplitFiles]:
    """The splits named on the command line (fairseq's naming: valid, valid1, ...)."""
    src, tgt = args.source_lang, args.target_lang
    named: List[Tuple[str, str]] = [("train", args.trainpref)]
    for option, base in ((args.validpref, "valid"), (args.testpref, "test")):
        if option:
            for k, prefix in enumerate(option.split(",")):
                named.append((base if k == 0 else f"{base}{k}", prefix))
    out = []
    for name, prefix in named:
        align = f"{prefix}.{args.align_suffix}" if args.align_suffix else None
        parse = f"{prefix}.{src}.{args.parse_suffix}"
        if getattr(args, "parser", None):
            from .spacy_parse import cache_path

            parse = cache_path(prefix, src, args.parse_suffix, args.parse_cache)
        ptb_suffix = getattr(args, "ptb_suffix", None)
        out.append(
            SplitFiles(
                name=name,
                prefix=prefix,
                source=f"{prefix}.{src}",
                target=f"{prefix}.{tgt}",
                parse=parse,
                align=align,
                ptb=f"{prefix}.{src}.{ptb_suffix}" if ptb_suffix else None,
            )
        )
    return out


def _check_count(path_a: str, n_a: int, what_a: str, path_b: str, n_b: int, what_b: str,
                 line_of_b=None) -> None:
    """Raise if two files of a split disagree in length, naming the first unmatched line."""
    if n_a == n_b:
        return
    counts = f"{path_a} has {n_a} {what_a} but {path_b} has {n_b} {what_b}"
    if n_a > n_b:
        raise SyntaxInputError(
            f"{counts}: line {n_b + 1} of {path_a} has no counterpart in {path_b}",
            path_a,
            n_b + 1,
        )
    if line_of_b is None:
        line, which = n_a + 1, f"line {n_a + 1}"
    else:
        line = line_of_b(n_a)
        which = f"{what_b[:-1]} {n_a + 1} (line {line})"
    raise SyntaxInputError(
        f"{counts}: {which} of {path_b} has no counterpart in {path_a}", path_b, line
    )


def _check_words(files: SplitFiles, k: int, tokens: List[str], tree: ParsedSentence) -> None:
    """Raise if the parse's words differ from the text line's tokens."""
    if tree.words == tokens:
        return
    position = next(
        (i for i, (a, b) in enumerate(zip(tree.words, tokens)) if a != b),
        min(len(tree.words), len(tokens)),
    )
    in_parse = repr(tree.words[position]) if position < len(tree.words) else "(nothing)"
    in_text = repr(tokens[position]) if position < len(tokens) else "(nothing)"
    raise SyntaxInputError(
        f"sentence {k + 1} does not match {files.source}:{k + 1}: word {position + 1} is "
        f"{in_parse} in the parse but {in_text} in the text (the parse has "
        f"{len(tree.words)} words, the text {len(tokens)} tokens; the parse's words must "
        "equal the line's whitespace-separated tokens, multi-word token ranges are skipped)",
        files.parse,
        tree.line,
    )


def _count_lines(path: str, allow_empty: bool = False) -> int:
    return sum(1 for _ in iter_text_lines(path, allow_empty))


def check_split(files: SplitFiles, align_required: bool, read_parse: bool = True) -> SplitData:
    """Check one split's text, parse and alignment files, reading them one line (or tree)
    at a time and keeping only counts; the first error is the one reading whole files
    in this order reports: source, target, parse, bracketed parse, alignments (without
    ``read_parse`` the parse is left to :class:`Parsing`)."""
    needed = [(files.source, "source text"), (files.target, "target text")]
    if read_parse:
        needed.append((files.parse, "source parse"))
    if files.ptb is not None:
        needed.append((files.ptb, "bracketed source parse (--ptb-suffix)"))
    for path, what in needed:
        if not os.path.isfile(path):
            raise SyntaxInputError(f"{what} file not found (split {files.name})", path)
    align_path = files.align
    if align_path is not None and not os.path.isfile(align_path):
        if align_required:
            raise SyntaxInputError(
                f"alignment file not found (--align-suffix is given, so the train split "
                f"needs one)",
                align_path,
            )
        align_path = None

    n = _count_lines(files.source)
    _check_count(files.source, n, "lines", files.target, _count_lines(files.target), "lines")
    if read_parse:
        _check_parse(files, n)
    if not n:
        raise SyntaxInputError(f"no sentences (split {files.name})", files.source)
    if files.ptb is not None:
        constituency.check_bracketed_file(files.ptb, iter_words(files.source), files.source)
    if align_path is not None:
        _check_count(files.source, n, "lines", align_path,
                     _count_lines(align_path, allow_empty=True), "lines")
        for k, (line, source, target) in enumerate(zip(
                iter_text_lines(align_path, allow_empty=True), iter_words(files.source),
                iter_words(files.target))):
            try:
                parse_pharaoh_line(line, len(source), len(target))
            except ValueError as err:
                raise SyntaxInputError(str(err), align_path, k + 1) from None
    files = SplitFiles(files.name, files.prefix, files.source, files.target, files.parse,
                       align_path, files.ptb)
    return SplitData(files, n)


def _check_parse(files: SplitFiles, n: int) -> None:
    """The CoNLL-U parse: bad UTF-8 first, then every tree, then one per line of the
    source (``n``), then each tree's words the line's tokens."""
    for _ in iter_decoded_lines(files.parse):
        pass
    count, extra_line, mismatch = 0, None, None
    for k, (tree, tokens) in enumerate(itertools.zip_longest(iter_conllu_trees(files.parse),
                                                             iter_words(files.source))):
        if tree is None:
            break
        count += 1
        if tokens is None:
            extra_line = extra_line or tree.line
        elif mismatch is None:
            try:
                _check_words(files, k, tokens, tree)
            except SyntaxInputError as err:
                mismatch = err
    if mismatch is not None:  # the first sentence that differs, e.g. where a tree is missing
        raise mismatch
    _check_count(files.source, n, "lines", files.parse, count, "sentences",
                 line_of_b=lambda k: extra_line)


def read_pairs(data: SplitData, trees: Iterable[ParsedSentence],
               alignments: Optional[Iterable[List[Link]]] = None) -> Iterator[Pair]:
    """The checked split's sentence pairs one by one, with ``trees`` (the parses, in order)
    and ``alignments`` (computed ones; by default those of the alignment file, if any)."""
    files = data.files
    sources, targets = iter_words(files.source), iter_words(files.target)
    word_trees = (constituency.iter_word_trees(files.ptb) if files.ptb is not None
                  else itertools.repeat(None))
    lines = (iter_text_lines(files.align, allow_empty=True)
             if alignments is None and files.align is not None else None)
    links = iter(alignments) if alignments is not None else None
    for source, target, tree, word_tree in zip(sources, targets, trees, word_trees):
        if lines is not None:
            yield Pair(source, target, tree, word_tree,
                       parse_pharaoh_line(next(lines), len(source), len(target)))
        else:
            yield Pair(source, target, tree, word_tree, None if links is None else next(links))


def parse_trees(data: SplitData, parsed: bool) -> Iterator[ParsedSentence]:
    """The split's parses one by one: the CoNLL-U given (read fast: :func:`check_split`
    has checked it), or with ``parsed`` (--parser) the cache :class:`Parsing` wrote or
    reused."""
    if parsed:
        from .spacy_parse import iter_cache_trees

        return iter_cache_trees(data.files.parse)
    return iter_checked_conllu_trees(data.files.parse)


@dataclass
class Parsing:
    """--parser: the splits to parse, handed to the parser's worker processes at once
    (:meth:`start`), their trees written to the CoNLL-U cache later (:meth:`collect`)
    while the main process trains sentencepiece in between; no workers (``--workers 1``):
    parsed in :meth:`collect`. The parser pool is the run's one mechanism for
    parallelism. The workers read the source text a chunk at a time; the trees that
    arrive before :meth:`collect` wait in the pool."""

    parser: object = None  # SpacyParser, or None without --parser
    splits: List[SplitData] = field(default_factory=list)  # those not in the cache
    workers: int = 1
    batch_size: int = 256
    pool: object = None  # ParserPool while started
    streams: list = field(default_factory=list)
    #: split name -> how many sentences a killed run left parsed (``{cache}.partial``)
    resumed: dict = field(default_factory=dict)

    @classmethod
    def of(cls, args, splits: Sequence[SplitData]) -> "Parsing":
        """Take what the cache holds; load the pipeline when anything is left to parse
        (before any process is forked, so the workers inherit it)."""
        if not getattr(args, "parser", None):
            return cls()
        from fairseq_syntax.syntax.spacy_parser import SpacyParser

        from .spacy_parse import load_cached, resume_parses

        parser = SpacyParser(args.parser)
        to_parse = []
        for data in splits:
            data.parse_reused = load_cached(parser, data.files.source, data.sentences,
                                            data.files.parse, desc=f"parse {data.files.name}")
            if not data.parse_reused:
                to_parse.append(data)
        resumed = {d.files.name: resume_parses(parser, d.files.source, d.sentences,
                                               d.files.parse, desc=f"parse {d.files.name}")
                   for d in to_parse}
        if to_parse:
            parser.nlp  # loaded now, so that the forked workers inherit it
        return cls(parser, to_parse, args.workers, args.parse_batch_size, resumed=resumed)

    @property
    def concurrent(self) -> bool:
        """Whether worker processes parse while the main process works on."""
        return bool(self.splits) and self.workers > 1

    def __enter__(self) -> "Parsing":
        if self.splits:
            from fairseq_syntax.syntax.spacy_parser import ParserPool

            self.pool = ParserPool(self.parser.nlp, self.workers)
        return self

    def start(self) -> None:
        self.streams = [(d, self.pool.imap(iter_words(d.files.source,
                                                      self.resumed[d.files.name]),
                                           self.batch_size), time.time())
                        for d in self.splits]

    def collect(self) -> None:
        """Read each split's trees and write its CoNLL-U cache, close the pool."""
        for data, stream, started in self.streams:
            parse_split(data, self.parser, self.workers, stream, started,
                        resumed=self.resumed.pop(data.files.name))
        if self.pool is not None:
            self.pool.close()

    def __exit__(self, *exc) -> bool:
        if self.pool is not None:
            self.pool.__exit__(*exc)
        return False


def parse_split(data: SplitData, parser, workers: int, stream, started: float,
                resumed: int) -> None:
    """Read the trees of ``stream`` (what :meth:`ParserPool.imap` returned for the split's
    source after its first ``resumed`` lines, the parses a killed run left) and write the
    split's CoNLL-U cache."""
    from .spacy_parse import parse_and_cache

    try:
        parse_and_cache(parser, data.files.source, data.sentences, data.files.parse,
                        workers=workers, desc=f"parse {data.files.name}", stream=stream,
                        started=started, resumed=resumed)
    except ValueError as err:
        if isinstance(err, SyntaxInputError):
            raise
        raise SyntaxInputError(f"parsing failed: {err}", data.files.source) from None


def eflomal_splits(splits: Sequence[SplitData]) -> List[SplitData]:
    """The splits ``--align eflomal`` aligns: train and every valid split (one eflomal run
    over their concatenation); test splits are not aligned."""
    return [d for d in splits if not d.files.name.startswith("test")]
