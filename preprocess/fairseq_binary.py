"""fairseq's dictionaries and ``mmap`` binaries, written directly with numpy.

What ``fairseq-preprocess --dataset-impl mmap`` writes for whitespace-separated token
lines, byte for byte, without its per-line torch tensors, its file chunking and its
import of fairseq's task registry (about 8 CPU seconds on the 29,000 Multi30k pairs,
against well under one here). ``tests/test_preprocess.py`` checks the bytes against
fairseq's own preprocessing.

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
import os
import struct
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's Dictionary: bos, pad, eos, unk
EOS, UNK = 2, 3
PADDING_FACTOR = 8
_HDR_MAGIC = b"MMIDIDX\x00\x00"
_DTYPE_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5,
                np.float64: 6, np.float32: 7, np.uint16: 8, np.uint32: 9}


class TokenDictionary:
    """A finalised fairseq dictionary: ``symbols`` (index order) and their ``counts``."""

    def __init__(self, symbols: List[str], counts: List[int]):
        self.symbols = symbols
        self.counts = counts
        self.indices: Dict[str, int] = {s: i for i, s in enumerate(symbols)}

    @classmethod
    def build(cls, token_lines: Iterable[Sequence[str]]) -> "TokenDictionary":
        """What fairseq's ``Dictionary.add_file_to_dictionary`` + ``finalize`` give for
        these lines (each a list of tokens)."""
        counter: Counter = Counter()
        n_lines = 0
        for tokens in token_lines:
            counter.update(tokens)
            n_lines += 1
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

    def encode(self, token_lines: Sequence[Sequence[str]]) -> Tuple[np.ndarray, np.ndarray]:
        """``(ids, sizes)``: the token ids of all lines end to end and each line's number of
        tokens (unknown tokens: ``<unk>``)."""
        get = self.indices.get
        flat = [get(t, UNK) for tokens in token_lines for t in tokens]
        ids = np.asarray(flat, dtype=np.int64)
        sizes = np.fromiter((len(t) for t in token_lines), dtype=np.int64,
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


def write_mmap(prefix: str, data: np.ndarray, sizes: np.ndarray, dtype) -> None:
    """Write ``prefix.bin`` / ``prefix.idx``: items of ``sizes[k]`` values each, laid
    end to end in ``data``, as ``MMapIndexedDatasetBuilder`` does."""
    data = np.ascontiguousarray(data, dtype=dtype)
    sizes = np.asarray(sizes, dtype=np.int64)
    if int(sizes.sum()) != data.size:
        raise ValueError(f"{prefix}: the item sizes add up to {int(sizes.sum())}, "
                         f"not to the {data.size} values given")
    with open(prefix + ".bin", "wb") as f:
        f.write(data.tobytes(order="C"))
    pointers = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes) > 1:
        np.cumsum(sizes[:-1] * np.dtype(dtype).itemsize, out=pointers[1:])
    with open(prefix + ".idx", "wb") as f:
        f.write(_HDR_MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", _DTYPE_CODES[dtype]))
        f.write(struct.pack("<Q", len(sizes)))
        f.write(sizes.astype(np.int32).tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))


def write_token_dataset(prefix: str, dictionary: TokenDictionary,
                        token_lines: Sequence[Sequence[str]]) -> np.ndarray:
    """Binarise token lines (eos appended) as ``prefix.bin/.idx``; returns the item
    sizes (tokens + 1)."""
    ids, sizes = dictionary.encode(token_lines)
    n = len(token_lines)
    out = np.empty(ids.size + n, dtype=np.int64)
    ends = np.cumsum(sizes + 1)  # one past each line's eos
    out[ends - 1] = EOS
    mask = np.ones(out.size, dtype=bool)
    mask[ends - 1] = False
    out[mask] = ids
    write_mmap(prefix, out, sizes + 1, best_fitting_dtype(len(dictionary)))
    return sizes + 1


def write_alignment_dataset(prefix: str, links: Sequence[Sequence[Sequence[int]]]) -> None:
    """Binarise alignment links (flattened ``i, j`` pairs per sentence, uint32) as
    ``fairseq-preprocess --align-suffix`` does."""
    sizes = np.fromiter((2 * len(l) for l in links), dtype=np.int64, count=len(links))
    flat = np.fromiter((v for sentence in links for pair in sentence for v in pair),
                       dtype=np.int64, count=int(sizes.sum()))
    write_mmap(prefix, flat, sizes, np.uint32)


def binarize_splits(destdir: str, splits: Sequence[tuple], src: str, tgt: str,
                    joined_dictionary: bool) -> Dict[str, TokenDictionary]:
    """fairseq-preprocess for already tokenised splits: ``splits`` holds
    ``(name, source_token_lines, target_token_lines)`` with the train split first.
    Writes ``dict.{src,tgt}.txt`` and ``{name}.{src}-{tgt}.{lang}.bin/.idx``."""
    os.makedirs(destdir, exist_ok=True)
    train = splits[0]
    if joined_dictionary:
        joined = TokenDictionary.build(list(train[1]) + list(train[2]))
        dicts = {src: joined, tgt: joined}
    else:
        dicts = {src: TokenDictionary.build(train[1]), tgt: TokenDictionary.build(train[2])}
    for lang in (src, tgt):
        dicts[lang].save(os.path.join(destdir, f"dict.{lang}.txt"))
    for name, source_lines, target_lines in splits:
        for lang, lines in ((src, source_lines), (tgt, target_lines)):
            write_token_dataset(os.path.join(destdir, f"{name}.{src}-{tgt}.{lang}"),
                                dicts[lang], lines)
    return dicts
