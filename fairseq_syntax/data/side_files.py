"""Syntax side-files in fairseq's indexed-dataset format (DESIGN.md section 2).

Next to fairseq's ``{split}.{src}-{tgt}.{lang}.bin/.idx`` the data-bin holds

* ``{split}.{src}-{tgt}.{src}.heads``: per sentence, ``n + 1`` int32 values (one per
  subword token, then eos): the index of the head, ``-1`` for the root;
* ``{split}.{src}-{tgt}.{src}.tree``: per sentence, ``2 (n - 1)`` int32 values, the
  flattened ``(left, right)`` children of the binary tree's internal nodes (leaves are
  ``0 .. n-1``, internal node ``k`` is numbered ``n + k``, children before parents, root
  last); empty when the sentence has no tree.
"""
import os
from typing import Iterable, Optional

import numpy as np
import torch
from fairseq.data import indexed_dataset

HEADS = "heads"
TREE = "tree"
MANIFEST = "syntax_manifest.json"


def side_file_prefix(data_dir: str, split: str, src: str, tgt: str, kind: str) -> str:
    """Path prefix (no .bin/.idx) of a side-file of ``kind`` (``heads`` or ``tree``)."""
    return os.path.join(data_dir, f"{split}.{src}-{tgt}.{src}.{kind}")


def write_side_file(prefix: str, rows: Iterable[np.ndarray]) -> int:
    """Write int32 rows as an mmap indexed dataset at ``prefix``; returns the row count."""
    builder = indexed_dataset.MMapIndexedDatasetBuilder(
        indexed_dataset.data_file_path(prefix), dtype=np.int32
    )
    count = 0
    for row in rows:
        builder.add_item(torch.from_numpy(np.asarray(row, dtype=np.int32).reshape(-1)))
        count += 1
    builder.finalize(indexed_dataset.index_file_path(prefix))
    return count


def read_side_file(prefix: str) -> Optional[indexed_dataset.MMapIndexedDataset]:
    """Open a side-file, or return None when it does not exist."""
    if not indexed_dataset.MMapIndexedDataset.exists(prefix):
        return None
    return indexed_dataset.MMapIndexedDataset(prefix)
