"""Stage 1 of preprocessing: the split files named on the command line, read and
cross-checked (UTF-8, no empty lines, equal line counts, parse words == text tokens,
trees valid, alignment indices in range), and with ``--parser`` the source parsed with
spaCy (:mod:`fairseq_syntax.syntax.spacy_parser`; the parses are cached as CoNLL-U,
:mod:`.spacy_parse`); with ``--ptb-suffix`` the bracketed constituency parses read,
their leaves checked against the text and binarised at word level
(:mod:`fairseq_syntax.syntax.constituency`)."""
import os
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax.syntax import constituency
from fairseq_syntax.syntax.conllu_io import ParsedSentence, read_conllu_trees
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import parse_pharaoh_line
from fairseq_syntax.syntax.text_io import read_text_lines


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
    """One split's validated inputs (word level)."""

    files: SplitFiles
    source: List[List[str]]
    target: List[List[str]]
    trees: Optional[List[ParsedSentence]]  # None until parsed (--parser)
    alignments: Optional[List[List[Tuple[int, int]]]]
    parse_reused: Optional[bool] = None  # --parser: whether the CoNLL-U cache was reused
    #: --ptb-suffix: the binarised constituency tree of each sentence, over its words
    word_trees: Optional[List[np.ndarray]] = None


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


def load_split(files: SplitFiles, align_required: bool, read_parse: bool = True) -> SplitData:
    """Read and cross-check one split's text, parse and alignment files (without
    ``read_parse`` the parse is left to :func:`parse_split`)."""
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

    source = [line.split() for line in read_text_lines(files.source)]
    target = [line.split() for line in read_text_lines(files.target)]
    _check_count(files.source, len(source), "lines", files.target, len(target), "lines")
    trees = None
    if read_parse:
        trees = read_conllu_trees(files.parse)
        _check_count(
            files.source, len(source), "lines", files.parse, len(trees), "sentences",
            line_of_b=lambda k: trees[k].line,
        )
        for k, (tokens, tree) in enumerate(zip(source, trees)):
            _check_words(files, k, tokens, tree)
    if not source:
        raise SyntaxInputError(f"no sentences (split {files.name})", files.source)
    word_trees = None
    if files.ptb is not None:
        word_trees = constituency.word_trees_of_file(files.ptb, source, files.source)

    alignments = None
    if align_path is not None:
        align_lines = read_text_lines(align_path, allow_empty=True)
        _check_count(files.source, len(source), "lines", align_path, len(align_lines), "lines")
        alignments = []
        for k, line in enumerate(align_lines):
            try:
                alignments.append(parse_pharaoh_line(line, len(source[k]), len(target[k])))
            except ValueError as err:
                raise SyntaxInputError(str(err), align_path, k + 1) from None
    files = SplitFiles(files.name, files.prefix, files.source, files.target, files.parse,
                       align_path, files.ptb)
    return SplitData(files, source, target, trees, alignments, word_trees=word_trees)


def cached_parse(data: SplitData, parser) -> bool:
    """--parser: take the split's parses from its CoNLL-U cache when it matches; returns
    whether it did (the pipeline is not loaded for that)."""
    from .spacy_parse import load_cached

    trees = load_cached(parser, data.files.source, data.source, data.files.parse,
                        desc=f"parse {data.files.name}")
    if trees is None:
        return False
    _attach_parses(data, trees, reused=True)
    return True


@dataclass
class Parsing:
    """--parser: the splits to parse, handed to the parser's worker processes at once
    (:meth:`start`), their trees read later (:meth:`collect`) while the main process
    does the subword stage in between; no workers (``--workers 1``): parsed in
    :meth:`collect`. The parser pool is the run's one mechanism for parallelism."""

    parser: object = None  # SpacyParser, or None without --parser
    splits: List[SplitData] = field(default_factory=list)  # those not in the cache
    workers: int = 1
    batch_size: int = 256
    pool: object = None  # ParserPool while started
    streams: list = field(default_factory=list)
    #: split name -> the parses a killed run left (``{cache}.partial``), not parsed again
    resumed: dict = field(default_factory=dict)

    @classmethod
    def of(cls, args, splits: Sequence[SplitData]) -> "Parsing":
        """Take what the cache holds; load the pipeline when anything is left to parse
        (before any process is forked, so the workers inherit it)."""
        if not getattr(args, "parser", None):
            return cls()
        from fairseq_syntax.syntax.spacy_parser import SpacyParser

        from .spacy_parse import resume_parses

        parser = SpacyParser(args.parser)
        to_parse = [d for d in splits if not cached_parse(d, parser)]
        resumed = {d.files.name: resume_parses(parser, d.files.source, d.source, d.files.parse,
                                               desc=f"parse {d.files.name}")
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
        self.streams = [(d, self.pool.imap(d.source[len(self.resumed.get(d.files.name, ())):],
                                           self.batch_size), time.time())
                        for d in self.splits]

    def collect(self, on_tree: Callable[[SplitData], Optional[Callable]] = lambda d: None
                ) -> None:
        """Read each split's trees (``on_tree(split)``: what is called as they arrive,
        see :func:`parse_split`), write its CoNLL-U cache, close the pool."""
        for data, stream, started in self.streams:
            parse_split(data, self.parser, self.workers, self.batch_size, stream, started,
                        on_tree(data), resumed=self.resumed.get(data.files.name, ()))
        if self.pool is not None:
            self.pool.close()

    def __exit__(self, *exc) -> bool:
        if self.pool is not None:
            self.pool.__exit__(*exc)
        return False


def parse_split(data: SplitData, parser, workers: int, batch_size: int, stream=None,
                started: Optional[float] = None, on_tree=None,
                resumed: Sequence[ParsedSentence] = ()) -> None:
    """Parse one split's source with spaCy (or read the trees of ``stream``, what
    :meth:`ParserPool.imap` returned for the sentences after ``resumed``, the parses a
    killed run left) and write its CoNLL-U cache: ``data.trees``."""
    from .spacy_parse import parse_and_cache

    try:
        trees = parse_and_cache(parser, data.files.source, data.source, data.files.parse,
                                workers=workers, batch_size=batch_size,
                                desc=f"parse {data.files.name}", on_tree=on_tree,
                                stream=stream, started=started, resumed=resumed)
    except ValueError as err:
        if isinstance(err, SyntaxInputError):
            raise
        raise SyntaxInputError(f"parsing failed: {err}", data.files.source) from None
    _attach_parses(data, trees, reused=False)


def _attach_parses(data: SplitData, trees, reused: bool) -> None:
    for k, tree in enumerate(trees):
        _check_words(data.files, k, data.source[k], tree)
    data.trees = trees
    data.parse_reused = reused


def eflomal_splits(splits: Sequence[SplitData]) -> List[SplitData]:
    """The splits ``--align eflomal`` aligns: train and every valid split (one eflomal run
    over their concatenation); test splits are not aligned."""
    return [d for d in splits if not d.files.name.startswith("test")]
