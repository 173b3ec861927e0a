"""A LanguagePairDataset that carries source syntax and alignments with each sentence."""
from typing import Optional

import numpy as np
import torch
from fairseq.data import LanguagePairDataset

from .tree_tensors import HEAD_PAD, WORD_PAD, pad_rows, word_distances


class SyntaxLanguagePairDataset(LanguagePairDataset):
    """fairseq's :class:`LanguagePairDataset` plus per-sentence source syntax.

    Per sentence (``n`` subword tokens, then eos), optionally:

    * ``heads``: ``n + 1`` head indices (``-1`` for the root; DESIGN.md section 2);
    * ``words``: ``n + 1`` word indices (the word of each token, ``-1`` for eos);
    * ``tree``: the binary tree, ``[n - 1, 2]`` children (or empty);
    * ``alignment``: fairseq's own flat ``[2k]`` source-target links.

    The collater adds, in the batch order fairseq's collate sorted into,
    ``net_input["src_heads"]`` ``[B, S]`` (padding :data:`HEAD_PAD`),
    ``net_input["src_words"]`` ``[B, S]`` (padding :data:`WORD_PAD`),
    ``net_input["src_distances"]`` ``[B, S, S]`` (when ``compute_distances``: distances
    between words, spread to their pieces, :func:`word_distances`),
    ``net_input["src_tree"]`` ``[B, max(n) - 1, 2]`` (padding ``-1``) and
    ``net_input["alignment_links"]`` ``[B, k_max, 2]`` (padding ``-1``). The source must
    be right-padded: position ``j`` of every side tensor is source token ``j``.
    """

    def __init__(
        self,
        *args,
        heads=None,
        words=None,
        tree=None,
        compute_distances: bool = False,
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
        if compute_distances and (heads is None or words is None):
            raise ValueError(
                "distance matrices are computed from the heads and the words of the subword "
                "tokens: load the heads and words side-files"
            )
        self.heads = heads
        self.words = words
        self.tree = tree
        self.compute_distances = compute_distances
        self.split = split
        self._check_side_sizes()

    @classmethod
    def from_pair_dataset(cls, pair: LanguagePairDataset, **side) -> "SyntaxLanguagePairDataset":
        """Re-wrap the dataset fairseq's ``load_langpair_dataset`` built, adding side data."""
        if pair.buckets is not None:
            raise ValueError("--num-batch-buckets is not supported with syntax side-files")
        return cls(
            pair.src, pair.src_sizes, pair.src_dict, pair.tgt, pair.tgt_sizes, pair.tgt_dict,
            left_pad_source=pair.left_pad_source, left_pad_target=pair.left_pad_target,
            shuffle=pair.shuffle, input_feeding=pair.input_feeding,
            align_dataset=pair.align_dataset, eos=pair.eos,
            pad_to_multiple=pair.pad_to_multiple, **side,
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

    def __getitem__(self, index):
        example = super().__getitem__(index)
        if self.heads is not None:
            example["heads"] = self.heads[index].long()
        if self.words is not None:
            example["words"] = self.words[index].long()
        if self.tree is not None:
            example["tree"] = self.tree[index].long().view(-1, 2)
        return example

    def collater(self, samples, pad_to_length=None):
        batch = super().collater(samples, pad_to_length=pad_to_length)
        if len(samples) == 0 or "net_input" not in batch:
            return batch
        by_id = {sample["id"]: sample for sample in samples}
        ordered = [by_id[i] for i in batch["id"].tolist()]
        net_input = batch["net_input"]
        src_len = net_input["src_tokens"].size(1)
        if self.heads is not None:
            heads = pad_rows([s["heads"] for s in ordered], src_len, HEAD_PAD)
            net_input["src_heads"] = heads
        if self.words is not None:
            words = pad_rows([s["words"] for s in ordered], src_len, WORD_PAD)
            net_input["src_words"] = words
            if self.compute_distances:
                net_input["src_distances"] = word_distances(heads, words)
        if self.tree is not None:
            nodes = max(1, max(s["tree"].size(0) for s in ordered))
            net_input["src_tree"] = pad_rows([s["tree"] for s in ordered], nodes, -1, (2,))
        if self.align_dataset is not None:
            links = [s["alignment"].view(-1, 2) for s in ordered]
            width = max(1, max(link.size(0) for link in links))
            net_input["alignment_links"] = pad_rows(links, width, -1, (2,))
        return batch
