"""A LanguagePairDataset that carries source syntax and alignments with each sentence."""
from typing import Iterable, Optional

import numpy as np
from fairseq.data import LanguagePairDataset

from . import side_inputs
from .side_files import batch_rows
from .side_inputs import SIDE_INPUTS


class SyntaxLanguagePairDataset(LanguagePairDataset):
    """fairseq's :class:`LanguagePairDataset` plus per-sentence source syntax.

    Per sentence (``n`` subword tokens, then eos), optionally:

    * ``heads``: ``n + 1`` head indices (``-1`` for the root; docs/design.md §3.4);
    * ``words``: ``n + 1`` word indices (the word of each token, ``-1`` for eos);
    * ``tree``: the binary tree, ``2 (n - 1)`` children (or empty);
    * ``alignments``: the flat ``[2k]`` source-target links of fairseq's align file.

    The collater adds the side inputs ``inputs`` (default: those whose rows are given)
    as the table :data:`~fairseq_syntax.data.side_inputs.SIDE_INPUTS` says (key, level,
    collate function, padding), in the batch order fairseq's collate sorted into. The source must
    be right-padded: position ``j`` of every side tensor is source token ``j``. fairseq's
    own ``align_dataset`` (its per-sentence ``alignments`` and ``align_weights``, which
    only fairseq's ``label_smoothed_cross_entropy_with_alignment`` reads) is independent.
    """

    def __init__(
        self,
        *args,
        heads=None,
        words=None,
        tree=None,
        alignments=None,
        inputs: Optional[Iterable[str]] = None,
        split: str = "",
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        if self.left_pad_source:
            raise ValueError(
                "SyntaxLanguagePairDataset needs a right-padded source, so that side tensors "
                "index source positions: drop --left-pad-source (a switch that turns left "
                "padding on under --task syntax_translation)"
            )
        self.heads = heads
        self.words = words
        self.tree = tree
        self.alignments = alignments
        rows = {"heads": heads, "words": words, "tree": tree, "alignments": alignments}
        self.side_rows = {name: row for name, row in rows.items() if row is not None}
        if inputs is None:
            inputs = self.side_rows
        inputs = side_inputs.carried(side_inputs.checked(inputs, "the dataset"))
        missing = sorted(name for name in inputs
                         if SIDE_INPUTS[name].side_file and name not in self.side_rows)
        if missing:
            raise ValueError(
                f"split '{split}': batches of side inputs {sorted(inputs)} need the "
                f"{', '.join(missing)} side-files (fairseq_syntax/data/side_inputs.py), "
                "which were not loaded"
            )
        # the alignments only where fairseq found their file
        self.inputs = frozenset(name for name in inputs
                                if name in self.side_rows or SIDE_INPUTS[name].computed_from)
        self.split = split
        self._check_side_sizes()

    @classmethod
    def from_pair_dataset(cls, pair: LanguagePairDataset, fairseq_alignments: bool,
                          **side) -> "SyntaxLanguagePairDataset":
        """Re-wrap the dataset fairseq's ``load_langpair_dataset`` built, adding side data;
        its alignments become the ``alignments`` rows, and stay fairseq's own
        ``align_dataset`` too only with ``fairseq_alignments``."""
        if pair.buckets is not None:
            raise ValueError("--num-batch-buckets is not supported with syntax side-files")
        return cls(
            pair.src, pair.src_sizes, pair.src_dict, pair.tgt, pair.tgt_sizes, pair.tgt_dict,
            left_pad_source=pair.left_pad_source, left_pad_target=pair.left_pad_target,
            shuffle=pair.shuffle, input_feeding=pair.input_feeding,
            align_dataset=pair.align_dataset if fairseq_alignments else None, eos=pair.eos,
            pad_to_multiple=pair.pad_to_multiple, alignments=pair.align_dataset, **side,
        )

    def _check_side_sizes(self):
        src_sizes = np.asarray(self.src_sizes)
        expected = {
            "heads": (self.heads, src_sizes, "one head per source token plus eos"),
            "words": (self.words, src_sizes, "one word index per source token plus eos"),
            "tree": (self.tree, 2 * np.maximum(src_sizes - 2, 0), "2 (n - 1) children for n tokens"),
        }
        for kind, (side, want, rule) in expected.items():
            if side is None:
                continue
            if len(side) != len(src_sizes):
                raise ValueError(
                    f"split '{self.split}': the {kind} side-file has {len(side)} sentences "
                    f"but the source binary has {len(src_sizes)}"
                )
            sizes = np.asarray(side.sizes if hasattr(side, "sizes") else [len(x) for x in side])
            bad = sizes != want
            if kind == "tree":
                bad &= sizes != 0  # a sentence without a parse has an empty tree
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"split '{self.split}': sentence {i}: the {kind} side-file has {sizes[i]} "
                    f"values but the source has {src_sizes[i]} tokens (with eos); expected "
                    f"{want[i]} ({rule}); {int(bad.sum())} sentences differ"
                )

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        """fairseq 0.12's ``batch_by_size`` drops a last batch whose size is not a multiple
        of ``--required-batch-size-multiple`` (8 by default; fairseq issue #5036), so
        fairseq-generate leaves test sentences untranslated. The batches are consecutive
        slices of ``indices``: give the dropped tail back as a final batch."""
        batches = super().batch_by_size(
            indices, max_tokens, max_sentences, required_batch_size_multiple
        )
        covered = sum(len(batch) for batch in batches)
        if covered < len(indices):
            batches = list(batches) + [np.asarray(indices[covered:], dtype=np.int64)]
        return batches

    def collater(self, samples, pad_to_length=None):
        """fairseq's batch plus the side inputs, whose rows are read by sentence id straight
        from the side-files (:func:`~fairseq_syntax.data.side_files.batch_rows`)."""
        batch = super().collater(samples, pad_to_length=pad_to_length)
        if len(samples) == 0 or "net_input" not in batch or not self.inputs:
            return batch
        ids = batch["id"].numpy()
        tensors = side_inputs.collate(
            self.inputs, lambda spec: batch_rows(self.side_rows[spec.name], ids),
            batch["net_input"]["src_tokens"].size(1),
        )
        side_inputs.place(batch, tensors)
        return batch
