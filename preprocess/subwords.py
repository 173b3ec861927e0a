"""Stage 2 of preprocessing, which needs no parse: train (or load) a sentencepiece
model; encode source words one by one and the target sentence as a whole; write
fairseq's dictionaries and token binaries for the subword tokens, byte for byte what
``fairseq-preprocess --dataset-impl mmap`` writes (:mod:`.fairseq_binary`); with
``--align eflomal`` align the train and valid splits (:mod:`.eflomal_align`); project
the word alignments onto subwords and binarise them as fairseq's alignment binarizer
does."""
import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from fairseq_syntax.syntax.annotate import annotate, encode_words
from fairseq_syntax.syntax.errors import SyntaxInputError

from .eflomal_align import SYMMETRISATION, BackgroundAlignment
from .read import SplitData, eflomal_splits

logger = logging.getLogger("fairseq_syntax_preprocess")


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
    if " ".join(pieces).split() == pieces:  # no piece empty or holding whitespace
        return
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


def project_alignments(data: SplitData, out: EncodedSplit) -> None:
    """Project the split's word alignments (if any) onto its subwords."""
    if data.alignments is None:
        return
    out.align_links = [
        annotate(src_counts, word_links=links, target_pieces_per_word=tgt_counts).links
        for links, src_counts, tgt_counts in zip(data.alignments, out.source_counts,
                                                 out.target_counts)
    ]


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


@dataclass
class SubwordOutput:
    """What the subword stage hands back to the driver."""

    model_path: str
    trained: bool
    encoded: List[EncodedSplit]


def subword_stage(args, splits: Sequence[SplitData], work: str, staging: str,
                  threads: Optional[int] = None) -> SubwordOutput:
    """Everything that needs no parse, in the main process (while the parser's workers
    parse): sentencepiece, fairseq's dictionaries and token binaries, and the alignments
    (eflomal is started first and its links are projected and binarised last). Leaves
    ``heads``/``trees`` to :mod:`.project`. ``threads``: sentencepiece training threads
    (default ``--workers``)."""
    import sentencepiece as spm

    aligner = start_eflomal(args, splits, work)
    try:
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
        aligned = {d.files.name for d in eflomal_splits(splits)} if aligner else set()
        encoded = [encode_subwords(d, sp, d.alignments is not None or d.files.name in aligned)
                   for d in splits]
        src, tgt = args.source_lang, args.target_lang
        write_token_binaries(staging, encoded, src, tgt, args.joined_dictionary)
        if aligner is not None:
            links = aligner.result()[0]
            start = 0
            for data in eflomal_splits(splits):
                data.alignments = links[start:start + len(data.source)]
                start += len(data.source)
    finally:
        if aligner is not None:  # on failure or a signal: stop eflomal's sampler too
            aligner.abort()
    for data, enc in zip(splits, encoded):
        project_alignments(data, enc)
    write_alignments(staging, encoded, src, tgt)
    for enc in encoded:  # the text is in fairseq's binaries now
        enc.source_pieces, enc.target_pieces, enc.align_links = [], [], None
    return SubwordOutput(model_path, trained, encoded)


def start_eflomal(args, splits: Sequence[SplitData], work: str) -> Optional[BackgroundAlignment]:
    """--align eflomal: start aligning the train and valid splits (eflomal's sampler is
    an external program, run from a thread); None otherwise."""
    if getattr(args, "align", None) != "eflomal":
        return None
    to_align = eflomal_splits(splits)
    logger.info("aligning %s with eflomal (both directions, %s)",
                " + ".join(d.files.name for d in to_align), SYMMETRISATION)
    return BackgroundAlignment(
        [w for d in to_align for w in d.source], [w for d in to_align for w in d.target],
        workdir=work, n_samplers=getattr(args, "eflomal_samplers", 1),
        rel_iterations=getattr(args, "eflomal_iterations", 0.5),
    )
