"""Sentencepiece for preprocessing: train (or load) the model, streaming the train text
into the trainer; encode a chunk of sentence pairs, source words one by one and the
target sentence as a whole, checking the pieces; with ``--align eflomal`` start aligning
the train and valid splits (:mod:`.eflomal_align`) and hand back each split's links."""
import itertools
import logging
import os
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from fairseq_syntax.syntax.annotate import encode_words
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.text_io import iter_text_lines

from .eflomal_align import SYMMETRISATION, EflomalRun, Link, symmetrised_links
from .read import SplitData, SplitFiles, eflomal_splits

logger = logging.getLogger("fairseq_syntax_preprocess")


SPM_SAMPLE_SEED = 1


def sampled_lines(path: str, keep: Optional[set]):
    """The lines of ``path`` (whitespace normalised) whose 0-based index is in ``keep``
    (all when ``keep`` is None), read one at a time."""
    for i, line in enumerate(iter_text_lines(path)):
        if keep is None or i in keep:
            yield " ".join(line.split())


def train_sentencepiece(train: SplitFiles, pairs: int, max_pairs: int, model_prefix: str,
                        vocab_size: int, model_type: str, character_coverage: float,
                        threads: int) -> str:
    """Train one joint sentencepiece model on the train source + target text of at most
    ``max_pairs`` of the split's ``pairs`` (a fixed sample, ``random.Random(1)``, when it
    has more: the trainer keeps its own copy of every sentence it is given), read line by
    line into the trainer, and write it to ``model_prefix + ".model"``. The trainer hands
    the model back in memory (``model_writer``), so it records no ``model_prefix``: the same
    text and options give the same bytes in any build folder, and so the same sha256 in the
    manifest and in the experiment records (``data_bin_digest``)."""
    import io
    import random

    import sentencepiece as spm

    keep = None
    if 0 < max_pairs < pairs:
        keep = set(random.Random(SPM_SAMPLE_SEED).sample(range(pairs), max_pairs))
        logger.info("sentencepiece trains on a fixed sample of %d of the %d train pairs "
                    "(--spm-train-pairs)", max_pairs, pairs)
    sentences = itertools.chain(sampled_lines(train.source, keep), sampled_lines(train.target, keep))
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            hard_vocab_limit=False,
            character_coverage=character_coverage,
            num_threads=max(1, threads),
            minloglevel=1,
        )
    except RuntimeError as err:
        raise SyntaxInputError(
            f"sentencepiece training on {train.source} + {train.target} failed "
            f"(check --vocab-size, --spm-model-type, --character-coverage): {err}"
        ) from None
    with open(model_prefix + ".model", "wb") as f:
        f.write(model.getvalue())
    return model_prefix + ".model"


def sentencepiece_model(args, train: SplitData, work: str,
                        threads: Optional[int] = None) -> Tuple[object, str, bool]:
    """``(processor, model path, trained)``: ``--spm-model``, or a model trained on the
    train split (at most ``--spm-train-pairs`` of it) into ``work`` with ``threads`` threads
    (default ``--workers``)."""
    import sentencepiece as spm

    if args.spm_model is not None:
        model_path, trained = args.spm_model, False
    else:
        logger.info("training a %s sentencepiece model (vocab size %d) on %s + %s",
                    args.spm_model_type, args.vocab_size, train.files.source, train.files.target)
        model_path = train_sentencepiece(
            train.files, train.sentences, args.spm_train_pairs, os.path.join(work, "spm"),
            args.vocab_size, args.spm_model_type,
            args.character_coverage, args.workers if threads is None else threads,
        )
        trained = True
    try:
        sp = spm.SentencePieceProcessor(model_file=model_path)
    except (RuntimeError, OSError) as err:
        raise SyntaxInputError(f"not a sentencepiece model: {err}", model_path) from None
    return sp, model_path, trained


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


@dataclass
class EncodedChunk:
    """A chunk of sentence pairs at subword level."""

    source_pieces: List[List[str]]  # the tokens fairseq sees
    target_pieces: List[List[str]]
    source_counts: List[List[int]]  # pieces per source word
    target_counts: Optional[List[List[int]]]  # pieces per target word (alignments)


def encode_chunk(sp, files: SplitFiles, first: int, sources: Sequence[List[str]],
                 targets: Sequence[List[str]], target_words: bool) -> EncodedChunk:
    """Encode the pairs from line ``first + 1`` of the split with sentencepiece: source
    words one by one, the target sentence as a whole, and with ``target_words``
    (alignments to project) target words one by one too; one batched call per kind.
    Errors name the file and line."""
    all_src_pieces = encode_words(sp, sources)
    all_flat_tgt = sp.encode([" ".join(t) for t in targets], out_type=str)
    all_tgt_word_pieces = encode_words(sp, targets) if target_words else None
    out = EncodedChunk([], [], [], [] if target_words else None)
    for k, (words, src_pieces, flat_tgt) in enumerate(zip(sources, all_src_pieces,
                                                         all_flat_tgt)):
        line = first + k + 1
        counts = [len(p) for p in src_pieces]
        for i, c in enumerate(counts):
            if c == 0:
                raise SyntaxInputError(
                    f"word {i + 1} {words[i]!r} encodes to no sentencepiece pieces (the "
                    "model's normalisation removes it); remove it from the text and the parse",
                    files.source,
                    line,
                )
        flat_src = [p for pieces in src_pieces for p in pieces]
        _check_pieces(flat_src, files.source, line, "source")
        _check_pieces(flat_tgt, files.target, line, "target")
        if not flat_tgt:
            raise SyntaxInputError(
                "the target encodes to no sentencepiece pieces (the model's normalisation "
                "removes every character of it); remove the pair", files.target, line)
        if target_words:
            # Links to a target word with no pieces (removed by normalisation) vanish;
            # stream.py counts them and warns.
            tgt_pieces_per_word = all_tgt_word_pieces[k]
            if [p for pieces in tgt_pieces_per_word for p in pieces] != flat_tgt:
                raise SyntaxInputError(
                    "the target encoded word by word gives other pieces than the target "
                    "encoded as a sentence, so word alignments cannot be projected onto its "
                    "subwords; use a sentencepiece model that splits at whitespace",
                    files.target,
                    line,
                )
            out.target_counts.append([len(p) for p in tgt_pieces_per_word])
        out.source_counts.append(counts)
        out.source_pieces.append(flat_src)
        out.target_pieces.append(flat_tgt)
    return out


def start_eflomal(args, splits: Sequence[SplitData], work: str) -> Optional[EflomalRun]:
    """--align eflomal: start aligning the train and valid splits (eflomal runs as a
    process of its own, reading their text from files); None otherwise."""
    if getattr(args, "align", None) != "eflomal":
        return None
    to_align = eflomal_splits(splits)
    logger.info("aligning %s with eflomal (both directions, %s)",
                " + ".join(d.files.name for d in to_align), SYMMETRISATION)
    return EflomalRun(
        [d.files.source for d in to_align], [d.files.target for d in to_align],
        workdir=work, n_samplers=getattr(args, "eflomal_samplers", 1),
        rel_iterations=getattr(args, "eflomal_iterations", 0.5),
    )


def eflomal_links(aligner: Optional[EflomalRun],
                  splits: Sequence[SplitData]) -> Dict[str, Iterator[List[Link]]]:
    """Wait for eflomal: split name -> its symmetrised links, one sentence pair at a time
    (read from eflomal's files as they are taken; {} without --align eflomal)."""
    if aligner is None:
        return {}
    files = aligner.result()
    out, start = {}, 0
    for data in eflomal_splits(splits):
        out[data.files.name] = symmetrised_links(files, skip=start, count=data.sentences)
        start += data.sentences
    return out
