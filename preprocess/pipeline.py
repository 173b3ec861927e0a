"""The preprocessing pipeline: text + parses (+ alignments) -> fairseq data-bin.

Steps (nothing is written to ``--destdir`` unless all of them succeed):

1. read and validate every input file of every split (UTF-8, no empty lines, equal line
   counts, parse words == text tokens, trees valid, alignment indices in range); with
   ``--parser`` the source is parsed with spaCy instead
   (:mod:`fairseq_syntax.syntax.spacy_parser`; the parses are cached as CoNLL-U,
   :mod:`.spacy_parse`); with ``--ptb-suffix`` the bracketed constituency parses are
   read, their leaves checked against the text and binarised at word level
   (:mod:`fairseq_syntax.syntax.constituency`);
2. the *subword stage* (:func:`subword_stage`), which needs no parse: train (or load) a
   sentencepiece model; encode source words one by one and the target sentence as a
   whole; write fairseq's dictionaries and token binaries for the subword tokens into
   a staging folder (a sibling of ``--destdir``), byte for byte what fairseq's own
   ``fairseq-preprocess --dataset-impl mmap`` writes (:mod:`.fairseq_binary`); with
   ``--align eflomal`` align the train and valid splits (:mod:`.eflomal_align`, started
   first, in a thread); project the alignments onto subwords and binarise them as
   fairseq's alignment binarizer does;
3. project the heads onto subwords, record the word of each subword, binarise the word
   trees (the dependency tree head-outward, or with ``--ptb-suffix`` the binarised
   constituency tree) and hang each word's pieces below it, sentence by sentence with
   :func:`fairseq_syntax.syntax.annotate.annotate` (as raw input does); write the
   ``heads``/``words``/``tree`` side-files, ``spm.model`` and ``syntax_manifest.json`` into the staging folder;
4. move the staging folder into place (with ``--force``, replacing the old folder only
   at this last step).

With ``--parser`` and ``--workers`` > 1 the subword stage runs in a forked child process
while the parser's worker processes parse (:class:`BackgroundStage`), so its cost hides
behind the parse; otherwise the steps run one after the other.
"""
import json
import logging
import os
import pickle
import shutil
import signal
import tempfile
import traceback
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from fairseq_syntax.syntax import constituency
from fairseq_syntax.syntax.annotate import annotate, encode_words
from fairseq_syntax.syntax.conllu_io import ParsedSentence, read_conllu_trees
from fairseq_syntax.data.side_files import FORMAT_VERSION
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import parse_pharaoh_line
from fairseq_syntax.syntax.text_io import read_text_lines

from .eflomal_align import SYMMETRISATION, BackgroundAlignment, eflomal_version
from .interrupt import StopOnSignals

logger = logging.getLogger("fairseq_syntax_preprocess")

SPM_MODEL_NAME = "spm.model"

PROJECTION_RULE = (
    "Source words are encoded one by one with sentencepiece. Heads: the first piece of a "
    "word stands for the word, its head is the first piece of the word's head (-1 for the "
    "root word); the word's other pieces attach to its first piece; the final position, "
    "fairseq's eos, attaches to the root word's first piece. Each heads row has "
    "n_subwords + 1 entries."
)
WORDS_RULE = (
    "Words: per sentence, the 0-based index of the source word each subword token belongs "
    "to, then -1 for eos (not a word); n_subwords + 1 entries. The collater takes the "
    "distance between any pieces of words a and b as the word tree distance d(a, b) (0 "
    "within a word) and eos as farther than any window (EOS_DISTANCE)."
)
HEAD_OUTWARD_RULE = (
    "Head-outward binarisation of the word-level dependency tree: the phrase of a head "
    "starts as its own leaf, absorbs its right dependents' phrases closest first as "
    "(phrase, dependent), then its left dependents' phrases closest first as (dependent, "
    "phrase)."
)
HANGING_RULE = (
    "Then each word's subword pieces hang below it as a right-branching subtree "
    "(p0, (p1, (... (p_{c-2}, p_{c-1})))), so every phrase covers whole words "
    "(fairseq_syntax.syntax.dependency.hang_pieces_below_words). Leaves are the n subword "
    "pieces 0..n-1 (eos excluded); internal node k is n+k: first the pieces' nodes, word "
    "by word, then the word tree's nodes; each row is (left, right), children before "
    "parents, root last; each tree row is the flattened [n-1, 2] array."
)
BINARISATION_RULE = HEAD_OUTWARD_RULE + " " + HANGING_RULE
CONSTITUENCY_RULE = constituency.BINARISATION_RULE + " " + HANGING_RULE
ALIGNMENT_RULE = (
    "Pharaoh i-j (0-based, source-target) word links projected onto subwords: every piece "
    "of source word i is linked to every piece of target word j; sorted, deduplicated; "
    "binarised as fairseq's --align-suffix does (train.align.{src}-{tgt}.bin/.idx)."
)


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


@dataclass
class EncodedSplit:
    """One split at subword level, ready to be written."""

    name: str
    source_pieces: List[List[str]] = field(default_factory=list)  # the tokens fairseq sees
    target_pieces: List[List[str]] = field(default_factory=list)
    align_links: Optional[List[List[Tuple[int, int]]]] = None  # subword links per sentence
    heads: List[np.ndarray] = field(default_factory=list)
    words: List[np.ndarray] = field(default_factory=list)  # word of each subword, -1 for eos
    trees: List[np.ndarray] = field(default_factory=list)
    source_lengths: List[int] = field(default_factory=list)
    target_lengths: List[int] = field(default_factory=list)
    source_words: int = 0
    source_counts: List[List[int]] = field(default_factory=list)  # pieces per source word
    target_counts: Optional[List[List[int]]] = None  # pieces per target word (alignments)
    aligned: bool = False  # alignments were binarised for this split


# --------------------------------------------------------------------------- reading


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


def parse_split(data: SplitData, parser, workers: int, batch_size: int, pool=None,
                on_tree=None) -> None:
    """Parse one split's source with spaCy and write its CoNLL-U cache: ``data.trees``."""
    from .spacy_parse import parse_and_cache

    try:
        trees = parse_and_cache(parser, data.files.source, data.source, data.files.parse,
                                workers=workers, batch_size=batch_size,
                                desc=f"parse {data.files.name}", pool=pool, on_tree=on_tree)
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


# --------------------------------------------------------------------------- subwords


def train_sentencepiece(splits: Sequence[SplitData], model_prefix: str, vocab_size: int,
                        model_type: str, character_coverage: float, threads: int) -> str:
    """Train one joint sentencepiece model on the train source + target text."""
    import sentencepiece as spm

    train = splits[0]
    sentences = [" ".join(t) for t in train.source] + [" ".join(t) for t in train.target]
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_prefix=model_prefix,
            vocab_size=vocab_size,
            model_type=model_type,
            hard_vocab_limit=False,
            character_coverage=character_coverage,
            num_threads=max(1, threads),
            minloglevel=1,
        )
    except RuntimeError as err:
        raise SyntaxInputError(
            f"sentencepiece training on {train.files.source} + {train.files.target} failed "
            f"(check --vocab-size, --spm-model-type, --character-coverage): {err}"
        ) from None
    return model_prefix + ".model"


def _check_pieces(pieces: List[str], path: str, line: int, what: str) -> None:
    for piece in pieces:
        if not piece or len(piece.split()) != 1 or piece != piece.strip():
            raise SyntaxInputError(
                f"{what}: sentencepiece produced the piece {piece!r}, which fairseq would "
                "split at whitespace; use a model that escapes whitespace",
                path,
                line,
            )


def encode_subwords(data: SplitData, sp, target_words: bool) -> EncodedSplit:
    """Encode one split with sentencepiece: source words one by one, the target sentence
    as a whole, and with ``target_words`` (alignments to project) target words one by
    one too. sentencepiece runs in batch (one call per kind)."""
    files = data.files
    out = EncodedSplit(name=files.name)
    all_src_pieces = encode_words(sp, data.source)
    all_flat_tgt = sp.encode([" ".join(t) for t in data.target], out_type=str)
    all_tgt_word_pieces = encode_words(sp, data.target) if target_words else None
    if target_words:
        out.target_counts = []
    for k in range(len(data.source)):
        words = data.source[k]
        src_pieces = all_src_pieces[k]
        counts = [len(p) for p in src_pieces]
        for i, c in enumerate(counts):
            if c == 0:
                raise SyntaxInputError(
                    f"word {i + 1} {words[i]!r} encodes to no sentencepiece pieces (the "
                    "model's normalisation removes it); remove it from the text and the parse",
                    files.source,
                    k + 1,
                )
        flat_src = [p for pieces in src_pieces for p in pieces]
        _check_pieces(flat_src, files.source, k + 1, "source")
        flat_tgt = all_flat_tgt[k]
        _check_pieces(flat_tgt, files.target, k + 1, "target")
        if target_words:
            # Links to a target word with no pieces (removed by normalisation) vanish.
            tgt_pieces_per_word = all_tgt_word_pieces[k]
            if [p for pieces in tgt_pieces_per_word for p in pieces] != flat_tgt:
                raise SyntaxInputError(
                    "the target encoded word by word gives other pieces than the target "
                    "encoded as a sentence, so word alignments cannot be projected onto its "
                    "subwords; use a sentencepiece model that splits at whitespace",
                    files.target,
                    k + 1,
                )
            out.target_counts.append([len(p) for p in tgt_pieces_per_word])
        out.source_counts.append(counts)
        out.source_pieces.append(flat_src)
        out.target_pieces.append(flat_tgt)
        out.source_lengths.append(len(flat_src))
        out.target_lengths.append(len(flat_tgt))
        out.source_words += len(words)
    return out


class EarlyProjection:
    """Projects a split's trees while the parser still parses (``on_tree`` of
    :func:`parse_split`), in the main process, which otherwise only waits for the
    workers: once the background stage has written the pieces per source word
    (``counts_path``), each arriving tree is projected and binarised. Anything unexpected
    (a tree that does not fit its counts) stops it quietly: :func:`project_trees` then
    does the rest, and raises the error as it always has."""

    CHECK_EVERY = 256  # trees between looks for the counts file

    def __init__(self, counts_path: str, name: str):
        self.counts_path = counts_path
        self.name = name
        self.counts: Optional[List[List[int]]] = None
        self.heads: List[np.ndarray] = []
        self.words: List[np.ndarray] = []
        self.trees: List[np.ndarray] = []
        self.stopped = False

    def __call__(self, parsed: Sequence[ParsedSentence]) -> None:
        if self.stopped:
            return
        if self.counts is None:
            if len(parsed) % self.CHECK_EVERY or not os.path.exists(self.counts_path):
                return
            with open(self.counts_path, "rb") as f:
                self.counts = pickle.load(f).get(self.name)
            if self.counts is None:
                self.stopped = True
                return
        try:
            for k in range(len(self.heads), min(len(parsed), len(self.counts))):
                sentence = annotate(self.counts[k], parsed[k].heads)
                self.heads.append(sentence.heads)
                self.words.append(sentence.words)
                self.trees.append(sentence.tree)
        except (ValueError, IndexError):
            self.stopped = True


def write_counts(path: str, encoded: Sequence[EncodedSplit]) -> None:
    """The pieces per source word of every split, for :class:`EarlyProjection`."""
    with open(path + ".tmp", "wb") as f:
        pickle.dump({e.name: e.source_counts for e in encoded}, f, pickle.HIGHEST_PROTOCOL)
    os.replace(path + ".tmp", path)


def project_trees(data: SplitData, out: EncodedSplit,
                  early: Optional[EarlyProjection] = None) -> None:
    """Project the split's word trees onto its subwords (heads) and binarise them
    (after what ``early`` projected already while parsing, if given); with constituency
    trees (``data.word_trees``) the binary trees are theirs."""
    files = data.files
    word_trees = data.word_trees
    start = 0
    if early is not None and early.counts == out.source_counts and word_trees is None:
        start = len(early.heads)
        out.heads, out.words, out.trees = early.heads[:], early.words[:], early.trees[:]
    for k, (tree, counts) in enumerate(zip(data.trees, out.source_counts)):
        if k < start:
            continue
        try:
            sentence = annotate(counts, tree.heads, None if word_trees is None else word_trees[k])
        except ValueError as err:
            raise SyntaxInputError(f"sentence {k + 1}: {err}", files.parse,
                                   tree.line or None) from None
        out.heads.append(sentence.heads)
        out.words.append(sentence.words)
        out.trees.append(sentence.tree)


def project_alignments(data: SplitData, out: EncodedSplit) -> None:
    """Project the split's word alignments (if any) onto its subwords."""
    if data.alignments is None:
        return
    out.align_links = [
        annotate(src_counts, word_links=links, target_pieces_per_word=tgt_counts).links
        for links, src_counts, tgt_counts in zip(data.alignments, out.source_counts,
                                                 out.target_counts)
    ]


# --------------------------------------------------------------------------- writing


def write_token_binaries(staging: str, encoded: Sequence[EncodedSplit], src: str, tgt: str,
                         joined_dictionary: bool) -> None:
    """fairseq's dictionaries (built on the train split) and token binaries of every
    split, byte for byte what ``fairseq-preprocess --dataset-impl mmap`` writes for the
    subword text (:mod:`.fairseq_binary`, without fairseq's per-line tensors)."""
    from .fairseq_binary import binarize_splits

    binarize_splits(staging, [(e.name, e.source_pieces, e.target_pieces) for e in encoded],
                    src, tgt, joined_dictionary)


def write_alignments(staging: str, encoded: Sequence[EncodedSplit], src: str, tgt: str) -> None:
    """Binarise the subword alignments of every aligned split as
    ``{split}.align.{src}-{tgt}.bin/.idx``, byte for byte what ``fairseq-preprocess
    --align-suffix`` writes for the same Pharaoh lines (``uint32`` items of flattened
    ``i, j`` pairs), without its per-link text parsing."""
    from .fairseq_binary import write_alignment_dataset

    for split in encoded:
        if split.align_links is None:
            continue
        write_alignment_dataset(os.path.join(staging, f"{split.name}.align.{src}-{tgt}"),
                                split.align_links)
        split.aligned = True


def write_side_files(staging: str, encoded: Sequence[EncodedSplit], src: str, tgt: str) -> None:
    """Write the heads, words and tree side-files of every split."""
    from fairseq_syntax.data.side_files import HEADS, TREE, WORDS, side_file_prefix, write_side_file

    for split in encoded:
        write_side_file(side_file_prefix(staging, split.name, src, tgt, HEADS), split.heads)
        write_side_file(side_file_prefix(staging, split.name, src, tgt, WORDS), split.words)
        write_side_file(side_file_prefix(staging, split.name, src, tgt, TREE), split.trees)


def length_counts(split: EncodedSplit) -> Dict[str, Dict[str, int]]:
    """Counts of (source length, target length) in subword tokens without eos."""
    pairs = Counter(zip(split.source_lengths, split.target_lengths))
    nested: Dict[str, Dict[str, int]] = {}
    for (s, t), count in sorted(pairs.items()):
        nested.setdefault(str(s), {})[str(t)] = count
    return nested


def parse_record(args, splits: Sequence[SplitData], parser=None) -> dict:
    """The manifest's ``parse`` entry: CoNLL-U files given, or the spaCy parser used
    (``fairseq-interactive`` parses raw input with the same one)."""
    record = {
        "kind": "spacy" if parser is not None else "conllu",
        "files": [os.path.abspath(s.files.parse) for s in splits],
    }
    if parser is not None:
        from dataclasses import asdict

        record["parser"] = asdict(parser.info)
        record["cache_reused"] = {s.files.name: bool(s.parse_reused) for s in splits}
        record["one_tree_per_line"] = (
            "Doc(words=line.split(), sent_starts=[True] + [False] * (n - 1)); only the "
            "parser and the components it listens to run"
        )
    return record


def alignment_record(args, splits: Sequence[SplitData]) -> Optional[dict]:
    """The manifest's ``alignments`` entry (None without alignments)."""
    if getattr(args, "align", None) == "eflomal":
        return {
            "kind": "eflomal",
            "eflomal_version": eflomal_version(),
            "symmetrisation": SYMMETRISATION,
            "samplers": getattr(args, "eflomal_samplers", 1),
            "rel_iterations": getattr(args, "eflomal_iterations", 0.5),
            "splits": [d.files.name for d in eflomal_splits(splits)],
            "note": "one eflomal run over the concatenated train and valid splits "
                    "(whitespace tokens; eflomal lowercases), both directions, no seed",
        }
    if args.align_suffix:
        return {"kind": "pharaoh", "suffix": args.align_suffix}
    return None


def build_manifest(args, splits: Sequence[SplitData], encoded: Sequence[EncodedSplit],
                   sp, spm_source: str, trained: bool, parser=None) -> dict:
    """The manifest recording how the side-files were made."""
    return {
        "format_version": FORMAT_VERSION,
        "command": ({"argv": list(args.command), "cwd": os.getcwd()}
                    if getattr(args, "command", None) else None),
        "source_lang": args.source_lang,
        "target_lang": args.target_lang,
        "parse": parse_record(args, splits, parser),
        "source_tokenization": getattr(args, "source_tokenization", None) or "whitespace",
        "alignments": alignment_record(args, splits),
        "spm_model": SPM_MODEL_NAME,
        "spm_vocab_size": int(sp.get_piece_size()),
        "spm": {
            "trained": trained,
            "from": spm_source,
            "model_type": args.spm_model_type if trained else None,
            "requested_vocab_size": args.vocab_size if trained else None,
        },
        "projection": PROJECTION_RULE,
        "words": WORDS_RULE,
        "binarisation": CONSTITUENCY_RULE if getattr(args, "ptb_suffix", None)
        else BINARISATION_RULE,
        "tree_source": "constituency" if getattr(args, "ptb_suffix", None) else "dependency",
        "constituency": ({"kind": "ptb", "suffix": args.ptb_suffix,
                          "files": [os.path.abspath(s.files.ptb) for s in splits]}
                         if getattr(args, "ptb_suffix", None) else None),
        "alignment_projection": ALIGNMENT_RULE if any(e.aligned for e in encoded) else None,
        "side_files": {
            "heads": "{split}.{src}-{tgt}.{src}.heads",
            "words": "{split}.{src}-{tgt}.{src}.words",
            "tree": "{split}.{src}-{tgt}.{src}.tree",
        },
        "splits": {
            e.name: {
                "sentences": len(e.source_lengths),
                "source_words": e.source_words,
                "source_tokens": int(sum(e.source_lengths)),
                "target_tokens": int(sum(e.target_lengths)),
                "aligned": e.aligned,
                "source_file": os.path.abspath(s.files.source),
                "target_file": os.path.abspath(s.files.target),
                "alignment_file": os.path.abspath(s.files.align) if s.files.align else None,
            }
            for s, e in zip(splits, encoded)
        },
        "length_counts": length_counts(encoded[0]),
    }


# --------------------------------------------------------------------------- destdir


def _is_nonempty_dir(path: str) -> bool:
    return os.path.isdir(path) and bool(os.listdir(path))


def _inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies below it (symbolic links resolved)."""
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def check_destdir(destdir: str, force: bool, inputs: Sequence[str] = ()) -> None:
    """Refuse a destdir that is a file, the current folder or one above it (it cannot be
    replaced while in use), a folder holding any of ``inputs`` (replacing it would delete
    them), or a non-empty folder without ``--force``."""
    if os.path.lexists(destdir) and not os.path.isdir(destdir):
        raise SyntaxInputError("--destdir exists and is not a folder", destdir)
    if not os.path.isdir(destdir):
        return
    if _inside(os.getcwd(), destdir):
        raise SyntaxInputError(
            "--destdir is the current folder (or holds it), which cannot be replaced while in "
            "use: give a new folder, e.g. --destdir data-bin", destdir)
    for path in inputs:
        if _inside(path, destdir):
            raise SyntaxInputError(
                f"--destdir holds the input {path}, which replacing the folder would delete: "
                "write the data-bin to another folder", destdir)
    if _is_nonempty_dir(destdir) and not force:
        raise SyntaxInputError(
            "--destdir exists and is not empty; use --force to replace it", destdir
        )


def install(staging: str, destdir: str) -> None:
    """Move ``staging`` to ``destdir``; an existing ``destdir`` is replaced only now."""
    if not os.path.lexists(destdir):
        os.rename(staging, destdir)
        return
    parent = os.path.dirname(os.path.abspath(destdir))
    trash = tempfile.mkdtemp(prefix=f".{os.path.basename(destdir)}.old-", dir=parent)
    old = os.path.join(trash, "old")
    try:
        os.rename(destdir, old)
        try:
            os.rename(staging, destdir)
        except BaseException:
            os.rename(old, destdir)
            raise
    finally:
        shutil.rmtree(trash, ignore_errors=True)


# --------------------------------------------------------------------------- driver


def _make_parents(folder: str) -> List[str]:
    """Create ``folder`` and its missing ancestors; return the created ones, outermost first."""
    missing = []
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    missing.reverse()
    for path in missing:
        os.mkdir(path)
    return missing


@dataclass
class SubwordOutput:
    """What the subword stage hands back to the driver."""

    model_path: str
    trained: bool
    encoded: List[EncodedSplit]


def subword_stage(args, splits: Sequence[SplitData], work: str, staging: str,
                  threads: Optional[int] = None, counts_path: Optional[str] = None
                  ) -> SubwordOutput:
    """Everything that needs no parse: sentencepiece, fairseq's dictionaries and token
    binaries, and the alignments (eflomal is started first, in a thread, and its links
    are projected and binarised last). Leaves ``heads``/``trees`` to the driver.
    ``threads``: sentencepiece training threads (default ``--workers``);
    ``counts_path``: where to write the pieces per source word as soon as they are known
    (:func:`write_counts`)."""
    import sentencepiece as spm

    aligner = None
    eflomal = getattr(args, "align", None) == "eflomal"
    if eflomal:
        to_align = eflomal_splits(splits)
        logger.info("aligning %s with eflomal (both directions, %s)",
                    " + ".join(d.files.name for d in to_align), SYMMETRISATION)
        aligner = BackgroundAlignment(
            [w for d in to_align for w in d.source], [w for d in to_align for w in d.target],
            workdir=work, n_samplers=getattr(args, "eflomal_samplers", 1),
            rel_iterations=getattr(args, "eflomal_iterations", 0.5),
        )
    if args.spm_model is not None:
        model_path, trained = args.spm_model, False
    else:
        logger.info("training a %s sentencepiece model (vocab size %d) on %s + %s",
                    args.spm_model_type, args.vocab_size, splits[0].files.source,
                    splits[0].files.target)
        model_path = train_sentencepiece(
            splits, os.path.join(work, "spm"), args.vocab_size, args.spm_model_type,
            args.character_coverage, args.workers if threads is None else threads,
        )
        trained = True
    try:
        sp = spm.SentencePieceProcessor(model_file=model_path)
    except (RuntimeError, OSError) as err:
        raise SyntaxInputError(f"not a sentencepiece model: {err}", model_path) from None
    aligned_names = {d.files.name for d in eflomal_splits(splits)} if eflomal else set()
    encoded = [encode_subwords(d, sp, d.alignments is not None or d.files.name in aligned_names)
               for d in splits]
    if counts_path is not None:
        write_counts(counts_path, encoded)

    src, tgt = args.source_lang, args.target_lang
    write_token_binaries(staging, encoded, src, tgt, args.joined_dictionary)
    if aligner is not None:
        links = aligner.result()[0]
        start = 0
        for data in eflomal_splits(splits):
            data.alignments = links[start:start + len(data.source)]
            start += len(data.source)
    for data, enc in zip(splits, encoded):
        project_alignments(data, enc)
    write_alignments(staging, encoded, src, tgt)
    for enc in encoded:  # the text is in fairseq's binaries now
        enc.source_pieces, enc.target_pieces, enc.align_links = [], [], None
    return SubwordOutput(model_path, trained, encoded)


class BackgroundStage:
    """Run ``fn()`` in a forked child process (its own process group, so that
    :meth:`abort` also stops the eflomal sampler it may have started); :meth:`result`
    waits and returns ``fn``'s value, or raises its exception."""

    def __init__(self, fn, result_path: str, tmpdir: str):
        import multiprocessing as mp

        self.result_path = result_path
        self.process = mp.get_context("fork").Process(
            target=self._child, args=(fn, result_path, tmpdir), name="subword-stage")
        self.process.start()

    @staticmethod
    def _child(fn, result_path, tmpdir):
        os.setpgid(0, 0)
        tempfile.tempdir = tmpdir  # eflomal's temporary files go with the work folder
        try:
            value = ("ok", fn())
        except BaseException as err:  # handed to the parent
            value = ("error", err, traceback.format_exc())
        try:
            payload = pickle.dumps(value)
        except Exception:
            payload = pickle.dumps(("error", RuntimeError(value[-1]), value[-1]))
        with open(result_path + ".tmp", "wb") as f:
            f.write(payload)
        os.replace(result_path + ".tmp", result_path)
        if value[0] == "error":  # an eflomal sampler may still run in this group: end it
            os.killpg(0, signal.SIGTERM)

    @staticmethod
    def available() -> bool:
        import multiprocessing as mp

        return "fork" in mp.get_all_start_methods() and hasattr(os, "setpgid")

    def result(self):
        self.process.join()
        if not os.path.exists(self.result_path):
            raise RuntimeError(
                f"the subword stage died (exit code {self.process.exitcode}) without a result"
            )
        with open(self.result_path, "rb") as f:
            value = pickle.load(f)
        if value[0] == "ok":
            return value[1]
        err = value[1]
        if isinstance(err, SyntaxInputError):
            raise SyntaxInputError(str(err)) from None
        if isinstance(err, (OSError, KeyboardInterrupt)):
            raise err
        raise RuntimeError(f"the subword stage failed:\n{value[2]}")

    def abort(self):
        """Stop the stage and what it started (an eflomal sampler outlives its parent);
        the group lives on while any member does, so its id is still ours."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except OSError:  # the group is gone already
            pass
        self.process.join()


def run(args) -> None:
    """Run the whole pipeline for parsed command-line ``args`` (see ``cli.get_parser``).
    SIGTERM or SIGINT stops it with :class:`~.interrupt.Interrupted`, after the staging
    and work folders are removed; ``--destdir`` is then as it was."""
    with StopOnSignals() as stop:
        _run(args, stop)


def _run(args, stop: StopOnSignals) -> None:
    destdir = os.path.normpath(args.destdir)
    files = split_files(args)
    # what replacing --destdir must not delete (not --spm-model: it is read, and copied
    # into the data-bin as spm.model, before the old folder goes; rebuild_command uses that)
    inputs = [path for f in files for path in (f.source, f.target, f.parse, f.align, f.ptb) if path]
    if getattr(args, "parse_cache", None):
        inputs.append(args.parse_cache)
    check_destdir(destdir, args.force, inputs)
    if args.spm_model is not None and not os.path.isfile(args.spm_model):
        raise SyntaxInputError("sentencepiece model (--spm-model) not found", args.spm_model)

    # 1. read and validate everything (--parser: what is not cached is parsed below)
    use_parser = bool(getattr(args, "parser", None))
    splits = [load_split(f, align_required=(f.name == "train"), read_parse=not use_parser)
              for f in files]
    parser, to_parse = None, []
    if use_parser:
        from fairseq_syntax.syntax.spacy_parser import SpacyParser

        parser = SpacyParser(args.parser)
        to_parse = [d for d in splits if not cached_parse(d, parser)]
        if to_parse:
            parser.nlp  # load it before any process is forked, so the workers inherit it

    parent = os.path.dirname(os.path.abspath(destdir))
    created = _make_parents(parent)
    base = os.path.basename(os.path.abspath(destdir))
    staging = work = background = pool = None
    ok = False
    try:
        with stop.held():  # a folder made is a folder named, so that cleanup finds it
            staging = tempfile.mkdtemp(prefix=f".{base}.staging-", dir=parent)
            work = tempfile.mkdtemp(prefix=f".{base}.work-", dir=parent)

        # 2. the subword stage: in a child process while the parser runs, or in line
        in_background = bool(to_parse) and args.workers > 1 and BackgroundStage.available()
        counts_path = os.path.join(work, "source-counts.pickle")
        early: Dict[str, EarlyProjection] = {}

        def stage():
            # beside the parser's workers one sentencepiece thread: more threads only spin
            # (2 threads cost 3x the CPU time of 1 on Multi30k, for the same model)
            return subword_stage(args, splits, work, staging,
                                 threads=1 if in_background else None,
                                 counts_path=counts_path if in_background else None)

        if in_background:
            logger.info("subwords, fairseq binaries%s: in a background process while parsing",
                        " and eflomal" if getattr(args, "align", None) else "")
            background = BackgroundStage(stage, os.path.join(work, "subword-stage.pickle"), work)
        if to_parse:
            from fairseq_syntax.syntax.spacy_parser import ParserPool

            pool = ParserPool(parser.nlp, args.workers)
            for data in to_parse:
                on_tree = None
                if in_background:  # project the trees as they come, in this waiting process
                    on_tree = early[data.files.name] = EarlyProjection(counts_path,
                                                                       data.files.name)
                parse_split(data, parser, args.workers, args.parse_batch_size, pool=pool,
                            on_tree=on_tree)
            pool.close()
            pool = None
        if background is not None:
            try:
                output = background.result()
            finally:  # on failure: stop an eflomal sampler it may have left running
                if background.process.exitcode != 0 or not os.path.exists(
                        background.result_path):
                    background.abort()
                background = None
        else:
            output = stage()
        model_path, trained, encoded = output.model_path, output.trained, output.encoded
        for data, enc in zip(splits, encoded):
            logger.info(
                "%s: %d sentence pairs, parses %s %s%s", data.files.name, len(data.source),
                "cached in" if use_parser else "from", data.files.parse,
                f", alignments from {data.files.align or 'eflomal'}" if enc.aligned else "",
            )

        # 3. trees, side-files, model, manifest
        src, tgt = args.source_lang, args.target_lang
        for data, enc in zip(splits, encoded):
            project_trees(data, enc, early.get(data.files.name))
        write_side_files(staging, encoded, src, tgt)
        shutil.copyfile(model_path, os.path.join(staging, SPM_MODEL_NAME))
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=model_path)
        spm_source = (os.path.abspath(args.spm_model) if not trained
                      else "trained on " + " + ".join(
                          os.path.abspath(p) for p in (splits[0].files.source, splits[0].files.target)))
        manifest = build_manifest(args, splits, encoded, sp, spm_source, trained, parser)
        from fairseq_syntax.data.side_files import MANIFEST

        with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
            f.write("\n")

        # 4. into place
        with stop.held():  # once in place, the run has succeeded: a late signal is dropped
            install(staging, destdir)
            ok = stop.done = True
        logger.info("wrote %s", destdir)
    finally:
        if pool is not None:
            pool.__exit__(None, None, None)
        if background is not None:
            background.abort()
        for path in (staging, work):
            if path is not None and os.path.lexists(path):
                shutil.rmtree(path, ignore_errors=True)
        if not ok:
            for path in reversed(created):
                try:
                    os.rmdir(path)
                except OSError:
                    break
