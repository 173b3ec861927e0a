"""fairseq's dictionaries and ``mmap`` binaries, written directly with numpy.

What ``fairseq-preprocess --dataset-impl mmap`` writes for whitespace-separated token
lines, byte for byte, without its per-line torch tensors and its import of fairseq's
task registry (about 8 CPU seconds on the 29,000 Multi30k pairs, against well under one
here); like fairseq's binariser it writes chunk by chunk (:class:`MmapWriter`), so its
memory does not grow with the corpus. ``tests/test_preprocess.py`` checks the bytes
against fairseq's own preprocessing.

* **Dictionary** (``fairseq.data.Dictionary`` + ``finalize(threshold=0, nwords=-1,
  padding_factor=8)``): ``<s> <pad> </s> <unk>`` first (indices 0-3), then the train
  file's tokens by count, most frequent first, ties in code point order; every line
  counts one ``</s>``; padded with ``madeupword0000``, ... (count 0) to a multiple of 8.
  ``dict.{lang}.txt`` lists the non-special symbols as ``symbol count``.
* **Binaries** (``MMapIndexedDatasetBuilder``): ``.bin`` holds every line's token ids
  plus eos, in the smallest of uint16 (fewer than 65,500 symbols), uint32, int64; the
  ``.idx`` holds the header ``MMIDIDX\\0\\0``, version 1, the dtype code, the number of
  items, their sizes (int32) and byte offsets (int64). Unknown tokens become ``<unk>``.
"""
import itertools
import os
import struct
from array import array
from collections import Counter
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary: bos, pad, eos, unk
EOS, UNK = 2, 3
PADDING_FACTOR = 8
_HDR_MAGIC = b"MMIDIDX\x00\x00"
_DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
                np.float64: 6, np.float32: 7, np.uint16: 8, np.uint32: 9}


def chunked(items: Iterable, size: int) -> Iterator[list]:
    """Lists of ``size`` consecutive items (the last one shorter)."""
    items = iter(items)
    while True:
        chunk = list(itertools.islice(items, size))
        if not chunk:
            return
        yield chunk


class TokenDictionary:
    """A finalised fairseq dictionary: ``symbols`` (index order) and their ``counts``."""

    def __init__(self, symbols: List[str], counts: List[int]):
        self.symbols = symbols
        self.counts = counts
        self.indices: Dict[str, int] = {s: i for i, s in enumerate(symbols)}

    @classmethod
    def from_counts(cls, tokens: Counter, n_lines: int) -> "TokenDictionary":
        """:meth:`build` from the lines' token counts and their number."""
        counter = Counter(tokens)
        counter[SPECIALS[EOS]] += n_lines
        counts = [1] * len(SPECIALS)  # Dictionary() adds each special symbol with n=1
        for i, special in enumerate(SPECIALS):
            counts[i] += counter.pop(special, 0)
        ranked = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
        symbols = list(SPECIALS) + [s for s, _ in ranked]
        counts += [c for _, c in ranked]
        present = set(symbols)
        k = 0
        while len(symbols) % PADDING_FACTOR:
            name = "madeupword{:04d}".format(k)
            if name not in present:
                symbols.append(name)
                counts.append(0)
                present.add(name)
            k += 1
        return cls(symbols, counts)

    def __len__(self) -> int:
        return len(self.symbols)

    def save(self, path: str) -> None:
        """``dict.{lang}.txt`` as ``Dictionary.save`` writes it."""
        with open(path, "w", encoding="utf-8") as f:
            for symbol, count in zip(self.symbols[len(SPECIALS):], self.counts[len(SPECIALS):]):
                f.write(f"{symbol} {count}\n")

    def items(self, token_lines: Sequence[Sequence[str]]) -> Tuple[np.ndarray, np.ndarray]:
        """``(ids, sizes)``: the token ids of the lines, each line's followed by eos, end
        to end, and each line's number of ids (unknown tokens: ``<unk>``)."""
        get = self.indices.get
        ids = np.fromiter((i for tokens in token_lines for i in
                           itertools.chain((get(t, UNK) for t in tokens), (EOS,))),
                          dtype=np.int64)
        sizes = np.fromiter((len(t) + 1 for t in token_lines), dtype=np.int64,
                            count=len(token_lines))
        return ids, sizes


def best_fitting_dtype(vocab_size: Optional[int]):
    """fairseq's ``best_fitting_int_dtype``."""
    if vocab_size is None:
        return np.uint32
    if vocab_size < 65500:
        return np.uint16
    if vocab_size < 4294967295:
        return np.uint32
    return np.int64


class MmapWriter:
    """``prefix.bin`` / ``prefix.idx`` written chunk by chunk, as
    ``MMapIndexedDatasetBuilder`` writes them: the values go to ``.bin`` as they come,
    the item sizes are kept (a compact int64 array) for the ``.idx`` written by
    :meth:`close`."""

    def __init__(self, prefix: str, dtype):
        self.prefix, self.dtype = prefix, dtype
        self._bin = open(prefix + ".bin", "wb")
        self._sizes = array("q")

    def add(self, values: np.ndarray, sizes: np.ndarray) -> None:
        """Append items of ``sizes[k]`` values each, laid end to end in ``values``."""
        values = np.ascontiguousarray(values, dtype=self.dtype)
        sizes = np.asarray(sizes, dtype=np.int64)
        if int(sizes.sum()) != values.size:
            raise ValueError(f"{self.prefix}: the item sizes add up to {int(sizes.sum())}, "
                             f"not to the {values.size} values given")
        self._bin.write(values.tobytes(order="C"))
        self._sizes.frombytes(sizes.tobytes())

    def add_rows(self, rows: Sequence[np.ndarray]) -> None:
        """Append one item per row."""
        if rows:
            self.add(np.concatenate([np.asarray(r).reshape(-1) for r in rows]),
                     np.fromiter((np.size(r) for r in rows), dtype=np.int64, count=len(rows)))

    def close(self) -> None:
        self._bin.close()
        sizes = np.frombuffer(self._sizes, dtype=np.int64)
        pointers = np.zeros(len(sizes), dtype=np.int64)
        if len(sizes) > 1:
            np.cumsum(sizes[:-1] * np.dtype(self.dtype).itemsize, out=pointers[1:])
        with open(self.prefix + ".idx", "wb") as f:
            f.write(_HDR_MAGIC)
            f.write(struct.pack("<Q", 1))
            f.write(struct.pack("<B", _DTYPE_CODES[self.dtype]))
            f.write(struct.pack("<Q", len(sizes)))
            f.write(sizes.astype(np.int32).tobytes(order="C"))
            f.write(pointers.tobytes(order="C"))

    def __enter__(self) -> "MmapWriter":
        return self

    def __exit__(self, exc_type, *exc) -> bool:
        if exc_type is None:
            self.close()
        else:
            self._bin.close()
        return False


def write_token_dataset(prefix: str, dictionary: TokenDictionary,
                        token_lines: Iterable[Sequence[str]], chunk: int = 10000) -> None:
    """Binarise token lines (eos appended) as ``prefix.bin/.idx``, ``chunk`` lines at a
    time."""
    with MmapWriter(prefix, best_fitting_dtype(len(dictionary))) as out:
        for lines in chunked(token_lines, chunk):
            out.add(*dictionary.items(lines))


def alignment_items(links: Sequence[Sequence[Sequence[int]]]) -> Tuple[np.ndarray, np.ndarray]:
    """``(values, sizes)`` of alignment items: each sentence's links as flattened ``i, j``
    pairs, as ``fairseq-preprocess --align-suffix`` binarises them (uint32)."""
    sizes = np.fromiter((2 * len(l) for l in links), dtype=np.int64, count=len(links))
    flat = np.fromiter((v for sentence in links for pair in sentence for v in pair),
                       dtype=np.int64, count=int(sizes.sum()))
    return flat, sizes
