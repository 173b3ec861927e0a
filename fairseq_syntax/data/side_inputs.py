"""The side inputs a batch can carry, in one table (docs/design.md §3.2, §3.5).

A model or criterion names what it needs with its class method ``side_inputs(cfg)``: a
set of the names of :data:`SIDE_INPUTS`. The ``syntax_translation`` task loads them, the
collater and the raw-input path build their batch tensors with the table's collate
functions, and the model's encoder passes on only the model inputs it declared.
"""
from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Iterable, Optional, Tuple

from torch import Tensor

from fairseq_syntax.syntax.side_values import HEAD_PAD, PAD_DISTANCE, WORD_PAD

from .side_files import HEADS, TREE, WORDS
from .tree_tensors import BatchRows, pad_rows, word_distances

TREE_PAD = -1
"""Value of ``src_tree`` at padding node rows (both children)."""

LINK_PAD = -1
"""Value of ``alignment_links`` at padding link rows (both ends)."""


def pad_to_source(rows: BatchRows, src_len: int, pad: int) -> Tensor:
    """One value per source position (tokens, then eos): ``[B, S]``."""
    return pad_rows(rows, src_len, pad)


def pad_pairs(rows: BatchRows, src_len: int, pad: int) -> Tensor:
    """Flat ``[2k]`` rows of pairs: ``[B, max(1, max k), 2]``."""
    width = max(1, int(rows.lengths.max(initial=0)) // 2)
    return pad_rows(rows, 2 * width, pad).view(len(rows.lengths), width, 2)


@dataclass(frozen=True)
class SideInput:
    """One side input. ``collate`` takes the batch's rows (:class:`~.tree_tensors.BatchRows`,
    in batch order), the source width and :attr:`pad`; a computed input's takes the batch tensors of
    :attr:`computed_from` instead. An input with neither :attr:`side_file` nor
    :attr:`computed_from` is one fairseq's own dataset loads when :attr:`option` is on."""

    name: str  # what models, criterions and the log line name
    key: str  # its key in the batch
    target: bool  # a loss target (sample level, beside "target"), else a model input (net_input)
    pad: int
    collate: Callable[..., Tensor]
    side_file: Optional[str] = None  # kind of {split}.{src}-{tgt}.{src}.{kind}
    computed_from: Tuple[str, ...] = ()  # computed in the collater; these come with it
    implies: Tuple[str, ...] = ()  # asking for it asks for these too
    option: Optional[str] = None  # the task option that asks for it


SIDE_INPUTS: Dict[str, SideInput] = {spec.name: spec for spec in (
    SideInput("heads", "src_heads", False, HEAD_PAD, pad_to_source, side_file=HEADS,
              option="load_heads"),
    SideInput("words", "src_words", False, WORD_PAD, pad_to_source, side_file=WORDS),
    SideInput("distances", "src_distances", False, PAD_DISTANCE, word_distances,
              computed_from=("heads", "words"), implies=("heads",), option="load_distances"),
    SideInput("tree", "src_tree", False, TREE_PAD, pad_pairs, side_file=TREE,
              option="load_tree"),
    # fairseq's {split}.align.{src}-{tgt}, read by its LanguagePairDataset (--load-alignments)
    SideInput("alignments", "alignment_links", True, LINK_PAD, pad_pairs,
              option="load_alignments"),
)}
"""Every side input, in collation order (an input after those it is computed from)."""


def checked(names: Iterable[str], who: str) -> FrozenSet[str]:
    """``names`` as a set, after checking that the table has each (``who`` declared them)."""
    names = frozenset(names)
    unknown = sorted(names - SIDE_INPUTS.keys())
    if unknown:
        raise ValueError(f"{who} declares unknown side inputs {unknown}; the side inputs are "
                         f"{list(SIDE_INPUTS)} (fairseq_syntax/data/side_inputs.py)")
    return names


def declared_by(cls, cfg) -> FrozenSet[str]:
    """What the model or criterion class ``cls`` declares for the options ``cfg`` (its class
    method ``side_inputs(cfg)``; none for a class without one, such as fairseq's own)."""
    declare = getattr(cls, "side_inputs", None)
    return checked(declare(cfg) if declare is not None else (), cls.__name__)


def requested(names: Iterable[str]) -> FrozenSet[str]:
    """``names`` and what they imply: the inputs the task's log line names."""
    out = set(names)
    for spec in reversed(list(SIDE_INPUTS.values())):
        if spec.name in out:
            out.update(spec.implies)
    return frozenset(out)


def carried(names: Iterable[str]) -> FrozenSet[str]:
    """:func:`requested` and what the computed ones are computed from: what a batch carries."""
    out = set(requested(names))
    for spec in reversed(list(SIDE_INPUTS.values())):
        if spec.name in out:
            out.update(spec.computed_from)
    return frozenset(out)


def model_input_keys(names: Iterable[str]) -> Tuple[str, ...]:
    """The ``net_input`` keys of the model inputs among ``names``, in table order."""
    names = set(names)
    return tuple(spec.key for spec in SIDE_INPUTS.values() if spec.name in names and not spec.target)


def collate(names: Iterable[str], rows_of: Callable[[SideInput], BatchRows],
            src_len: int) -> Dict[str, Tensor]:
    """``{name: batch tensor}`` of the inputs ``names`` (which hold what the computed ones
    are computed from, as :func:`carried` gives), ``rows_of(spec)`` giving each one's rows
    in batch order."""
    names = set(names)
    out: Dict[str, Tensor] = {}
    for spec in SIDE_INPUTS.values():
        if spec.name not in names:
            continue
        if spec.computed_from:
            out[spec.name] = spec.collate(*(out[name] for name in spec.computed_from))
        else:
            out[spec.name] = spec.collate(rows_of(spec), src_len, spec.pad)
    return out


def place(batch: dict, tensors: Dict[str, Tensor]) -> None:
    """Put ``{name: tensor}`` into ``batch`` under their keys: a target at sample level,
    a model input in ``batch["net_input"]``."""
    for name, tensor in tensors.items():
        spec = SIDE_INPUTS[name]
        (batch if spec.target else batch["net_input"])[spec.key] = tensor
