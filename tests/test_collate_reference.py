"""The collate functions against straightforward reference definitions (issue 16 item 8).

The references are the per-row / per-piece code the collater used before it was made
faster; the batch tensors must stay bit-identical (values, dtype, shape), also on
hostile in-range heads (cycles, heads on eos or on continuation pieces).
"""
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fairseq_syntax.data.side_files import batch_rows, read_side_file, write_side_file
from fairseq_syntax.data.side_inputs import pad_pairs, pad_to_source
from fairseq_syntax.data.tree_tensors import (
    EOS_DISTANCE, EOS_WORD, HEAD_PAD, PAD_DISTANCE, WORD_PAD, BatchRows, word_distances,
)
from fairseq_syntax.syntax.dependency import project_heads_to_subwords


def reference_pad_rows(rows, length, pad_value):
    out = torch.full((len(rows), length), pad_value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : row.size(0)] = row
    return out


def reference_pad_pairs(rows, pad):
    width = max(1, max(len(row) for row in rows) // 2)
    return reference_pad_rows(rows, 2 * width, pad).view(len(rows), width, 2)


def reference_tree_distances(heads):
    """Path lengths over the piece tree: ancestor indicators, one walk step per level."""
    bsz, n = heads.shape
    real = heads.ne(HEAD_PAD)
    parent = torch.cat([heads.masked_fill(heads.lt(0), n), heads.new_full((bsz, 1), n)], dim=1)
    ancestors = torch.zeros(bsz, n, n + 1)
    batch = torch.arange(bsz).unsqueeze(1).expand(bsz, n)
    node = torch.arange(n).unsqueeze(0).expand(bsz, n)
    current = node
    for _ in range(n):
        ancestors[batch, node, current] = 1.0
        current = parent.gather(1, current)
        if bool(current.eq(n).all()):
            break
    ancestors = ancestors[..., :n]
    depth1 = ancestors.sum(-1)
    common = torch.bmm(ancestors, ancestors.transpose(1, 2))
    dist = (depth1.unsqueeze(2) + depth1.unsqueeze(1) - 2 * common).round().long()
    return dist.masked_fill(~(real.unsqueeze(2) & real.unsqueeze(1)), PAD_DISTANCE)


def reference_word_distances(heads, words):
    """Piece distances read at the first piece of each run of equal words, then eos and padding;
    int16, the collater's dtype (every value fits)."""
    real = words.ne(WORD_PAD)
    bsz, n = words.shape
    pieces = reference_tree_distances(heads)
    position = torch.arange(n).unsqueeze(0).expand(bsz, n)
    starts = torch.ones_like(real)
    starts[:, 1:] = words[:, 1:].ne(words[:, :-1])
    first = torch.where(starts, position, torch.zeros_like(position)).cummax(dim=1).values
    dist = pieces.gather(1, first.unsqueeze(2).expand(bsz, n, n))
    dist = dist.gather(2, first.unsqueeze(1).expand(bsz, n, n))
    eos = words.eq(EOS_WORD)
    dist = dist.masked_fill(eos.unsqueeze(2) ^ eos.unsqueeze(1), EOS_DISTANCE)
    dist = dist.masked_fill(eos.unsqueeze(2) & eos.unsqueeze(1), 0)
    return dist.masked_fill(~(real.unsqueeze(2) & real.unsqueeze(1)), PAD_DISTANCE).short()


def random_rows(rng, batch_size, hostile):
    """Heads and words rows of random sentences: projected word trees with multi-piece
    words and eos, or (hostile) any in-range heads and runs of repeated words."""
    heads, words = [], []
    for _ in range(batch_size):
        n_words = rng.randint(1, 8)
        counts = [rng.randint(1, 3) for _ in range(n_words)]
        n = sum(counts) + 1
        if hostile:
            head_row = [rng.randint(-1, n - 1) for _ in range(n)]
            word_row = sorted(rng.randint(0, n_words - 1) for _ in range(n - 1))
            if rng.random() < 0.5:
                rng.shuffle(word_row)
            word_row.append(EOS_WORD)
        else:
            order = list(range(n_words))
            rng.shuffle(order)
            word_heads = [-1] * n_words
            for k in range(1, n_words):
                word_heads[order[k]] = order[rng.randrange(k)]
            head_row = project_heads_to_subwords(word_heads, counts)
            word_row = [w for w, c in enumerate(counts) for _ in range(c)] + [EOS_WORD]
        heads.append(torch.tensor(head_row))
        words.append(torch.tensor(word_row))
    return heads, words


def assert_identical(new, old):
    assert new.dtype == old.dtype
    assert new.shape == old.shape
    assert torch.equal(new, old)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(0, 3), st.booleans(), st.integers(0, 10**6))
def test_word_distances_equal_the_reference(batch_size, extra_width, hostile, seed):
    rng = random.Random(seed)
    heads, words = random_rows(rng, batch_size, hostile)
    width = max(len(row) for row in heads) + extra_width
    heads = reference_pad_rows(heads, width, HEAD_PAD)
    words = reference_pad_rows(words, width, WORD_PAD)
    assert_identical(word_distances(heads, words), reference_word_distances(heads, words))


@settings(max_examples=20, deadline=None)
@given(st.integers(60, 150), st.booleans(), st.integers(0, 10**6))
def test_word_distances_of_long_sentences_equal_the_reference(n, chain, seed):
    """Over 64 positions the ancestor bitsets take more than one 64-bit word."""
    rng = random.Random(seed)
    heads = [[k - 1 if chain else rng.randint(-1, n - 1) for k in range(n)]]
    words = [sorted(rng.randint(0, n) for _ in range(n - 1)) + [EOS_WORD]]
    heads, words = torch.tensor(heads), torch.tensor(words)
    assert_identical(word_distances(heads, words), reference_word_distances(heads, words))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=6), st.integers(0, 3), st.integers(0, 10**6))
def test_padding_equals_the_reference(lengths, extra_width, seed):
    gen = torch.Generator().manual_seed(seed)
    rows = [torch.randint(-1, 50, (k,), generator=gen) for k in lengths]
    width = max(lengths) + extra_width  # wider than the rows: --pad-to-multiple
    assert_identical(pad_to_source(BatchRows.of(rows), width, -2),
                     reference_pad_rows(rows, width, -2))
    pairs = [row[: 2 * (len(row) // 2)] for row in rows]  # empty rows included
    assert_identical(pad_pairs(BatchRows.of(pairs), width, -1), reference_pad_pairs(pairs, -1))


def test_pairs_of_only_empty_rows_keep_one_padding_pair():
    rows = [torch.zeros(0, dtype=torch.long)] * 3
    assert_identical(pad_pairs(BatchRows.of(rows), 5, -1), torch.full((3, 1, 2), -1))
    assert_identical(pad_pairs(BatchRows.of(rows), 5, -1), reference_pad_pairs(rows, -1))


def test_rows_read_by_id_from_a_side_file_equal_the_rows(tmp_path):
    """The collater reads a batch's rows straight from the side-file's memory map, in batch
    order (ids unsorted, repeated, empty rows included)."""
    gen = torch.Generator().manual_seed(3)
    rows = [torch.randint(-1, 40, (k,), generator=gen) for k in (5, 0, 3, 8, 1, 0, 6)]
    prefix = str(tmp_path / "train.align.en-de")  # no range rule: any values
    write_side_file(prefix, [row.numpy().astype(np.int32) for row in rows])
    side_file = read_side_file(prefix, "train")
    for ids in ([6, 0, 3], [1, 5], [3, 3, 2, 4, 0, 1, 6, 5]):
        ids = np.array(ids)
        picked = [rows[i] for i in ids]
        from_file = batch_rows(side_file, ids)
        assert_identical(pad_to_source(from_file, 9, -2), reference_pad_rows(picked, 9, -2))
        assert_identical(pad_to_source(batch_rows(rows, ids), 9, -2),
                         reference_pad_rows(picked, 9, -2))


def test_a_source_too_wide_for_int16_distances_is_refused():
    """Distances are int16 (every path length is below the source width): a wider batch is
    refused before anything is built, not wrapped around."""
    wide = torch.full((1, 2**15), -1)
    with pytest.raises(ValueError, match="32768 source positions wide"):
        word_distances(wide, wide)
