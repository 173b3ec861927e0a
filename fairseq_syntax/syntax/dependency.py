"""Dependency trees as head arrays: validation, subword projection, head-outward binarisation,
and binary word trees turned into binary trees over subword pieces.

A tree over ``n`` words is a sequence ``heads`` of length ``n``: ``heads[i]`` is the
0-based index of word ``i``'s head, ``-1`` for the (single) root. All functions here are
iterative, so sentences of any length work (no recursion limit).
"""
from typing import List, Optional, Sequence

import numpy as np


def _describe(i: int, words: Optional[Sequence[str]], base: int) -> str:
    if words is not None and 0 <= i < len(words):
        return f"{i + base} ({words[i]!r})"
    return f"{i + base}"


def _find_cycle(heads: Sequence[int]) -> Optional[List[int]]:
    """Return the words of one cycle in head-pointer order, or None if there is none.

    Assumes every head is in range. Each word is walked at most once: O(n).
    """
    n = len(heads)
    state = [0] * n  # 0 unvisited, 1 on the current walk, 2 done (reaches the root)
    for start in range(n):
        if state[start]:
            continue
        walk = []
        node = start
        while node != -1 and state[node] == 0:
            state[node] = 1
            walk.append(node)
            node = heads[node]
        if node != -1 and state[node] == 1:
            return walk[walk.index(node):]
        for w in walk:
            state[w] = 2
    return None


def validate_heads(
    heads: Sequence[int], *, words: Optional[Sequence[str]] = None, index_base: int = 0
) -> None:
    """Check that ``heads`` is one dependency tree; raise ``ValueError`` saying why not.

    Checks, in this order: a non-empty sentence; every head in ``-1 .. n-1``; no word its
    own head; exactly one root (several roots are listed); no cycle (the words on it are
    listed in head order).

    ``words`` (optional) are quoted next to word numbers in the messages, and
    ``index_base`` shifts the numbers shown (1 for CoNLL-U, where word ``i`` is ID ``i+1``
    and the root's head is 0); the ``heads`` themselves are always 0-based with -1 for root.
    """
    n = len(heads)
    root_head = index_base - 1

    def word(i: int) -> str:
        return _describe(i, words, index_base)

    if n == 0:
        raise ValueError("no root: the sentence has no words")
    for i, h in enumerate(heads):
        h = int(h)
        if h < -1 or h >= n:
            raise ValueError(
                f"word {word(i)} has head {h + index_base}, out of range: a sentence of {n} "
                f"words has heads {index_base}..{n - 1 + index_base} and {root_head} for the root"
            )
    for i, h in enumerate(heads):
        if int(h) == i:
            raise ValueError(f"word {word(i)} is its own head (a self-loop)")
    roots = [i for i, h in enumerate(heads) if int(h) == -1]
    if not roots:
        cycle = _find_cycle([int(h) for h in heads])
        shown = " -> ".join(word(i) for i in cycle) if cycle else "?"
        raise ValueError(
            f"no root: no word has head {root_head}, so the heads form a cycle "
            f"({shown} -> {word(cycle[0]) if cycle else '?'})"
        )
    if len(roots) > 1:
        raise ValueError(
            f"several roots: words {', '.join(word(i) for i in roots)} all have head "
            f"{root_head}; a tree has exactly one root"
        )
    cycle = _find_cycle([int(h) for h in heads])
    if cycle is not None:
        raise ValueError(
            f"cycle: words {' -> '.join(word(i) for i in cycle)} -> {word(cycle[0])} "
            f"(each arrow points to the head) never reach the root"
        )


def _check_one_count_per_word(word_heads: Sequence[int], pieces_per_word: Sequence[int]) -> None:
    if len(word_heads) != len(pieces_per_word):
        raise ValueError(
            f"{len(word_heads)} heads but {len(pieces_per_word)} piece counts: "
            "need one piece count per word"
        )


def project_heads_to_subwords(
    word_heads: Sequence[int], pieces_per_word: Sequence[int]
) -> List[int]:
    """Project a word-level tree onto subword pieces plus fairseq's final eos.

    docs/design.md §3.4: the first piece of a word stands for the word, so its head is the
    first piece of the word's head (``-1`` for the root word); the word's other pieces
    attach to its first piece; one extra final position, fairseq's ``eos``, attaches to
    the root word's first piece. The result has ``sum(pieces_per_word) + 1`` entries and
    is a single tree with the root word's first piece as root.

    Example: words ``[a, bcd, e]`` with heads ``[1, -1, 1]`` and pieces ``[1, 3, 1]``
    give ``[1, -1, 1, 1, 1, 1]`` (positions a, b, c, d, e, eos).
    """
    _check_one_count_per_word(word_heads, pieces_per_word)
    validate_heads(word_heads)
    return _project_valid_heads(word_heads, pieces_per_word)


def _project_valid_heads(word_heads: Sequence[int], pieces_per_word: Sequence[int]) -> List[int]:
    first = []
    total = 0
    for i, count in enumerate(pieces_per_word):
        if count < 1:
            raise ValueError(f"word {i} has {count} subword pieces; every word needs at least one")
        first.append(total)
        total += count
    out: List[int] = []
    root_first = -1
    for i, (h, count) in enumerate(zip(word_heads, pieces_per_word)):
        h = int(h)
        if h == -1:
            root_first = first[i]
            out.append(-1)
        else:
            out.append(first[h])
        out.extend([first[i]] * (count - 1))
    out.append(root_first)
    return out


def binarize_head_outward(heads: Sequence[int]) -> np.ndarray:
    """Binary phrase tree over the ``n`` leaves of a dependency tree, head-outward.

    ``heads`` is a tree over ``n`` leaves (0-based, ``-1`` for the one root; no eos
    position). The phrase of head ``h`` starts as leaf ``h``; it then absorbs the phrases
    of its right dependents, closest first, each as ``(cur, dep)``, then the phrases of its
    left dependents, closest first, each as ``(dep, cur)``. The result is an int64 array of
    shape ``[n - 1, 2]``: row ``k`` holds the (left, right) children of internal node
    ``n + k``; leaves are ``0 .. n-1``. Nodes are created in a post-order walk (all of a
    head's dependents' phrases are built, in the order they will be absorbed, before the
    head's own merges), so children are numbered before parents and the root is last.
    ``n = 1`` gives shape ``[0, 2]``.

    Every phrase is a contiguous span when the tree is projective. The side-files apply it
    to the word-level tree and then hang each word's subword pieces below the word
    (:func:`subword_binary_tree`, :func:`hang_pieces_below_words`), so that phrases are
    word phrases (docs/design.md §4).

    Iterative (explicit stack): no recursion limit for long sentences.
    """
    heads = [int(h) for h in heads]
    validate_heads(heads)
    return _binarize_valid_heads(heads)


def _binarize_valid_heads(heads: List[int]) -> np.ndarray:
    n = len(heads)
    dependents: List[List[int]] = [[] for _ in range(n)]
    root = -1
    for i, h in enumerate(heads):
        if h == -1:
            root = i
        else:
            dependents[h].append(i)  # ascending order of position
    # absorption order: right dependents closest first, then left dependents closest first
    order = [[d for d in deps if d > h] + [d for d in reversed(deps) if d < h]
             for h, deps in enumerate(dependents)]
    # post-order (each head after its dependents' phrases, in absorption order): the
    # reverse of the pre-order that visits a head's dependents last-absorbed first
    visit, walk = [root], []
    while visit:
        h = visit.pop()
        walk.append(h)
        visit.extend(order[h])
    rows: List[tuple] = []  # row k: the children of node n + k
    phrase = list(range(n))  # current top node of each head's phrase
    for h in reversed(walk):
        cur = h
        for d in order[h]:
            rows.append((cur, phrase[d]) if d > h else (phrase[d], cur))
            cur = n + len(rows) - 1
        phrase[h] = cur
    return np.array(rows, dtype=np.int64).reshape(max(n - 1, 0), 2)


def check_binary_tree(rows, n: int, what: str = "binary tree") -> np.ndarray:
    """Check that ``rows`` is a binary tree over leaves ``0 .. n-1`` as this package stores
    it (``[n - 1, 2]``: row ``k`` holds the children of node ``n + k``; children numbered
    before parents; every node but the last, the root, has exactly one parent); raise
    ``ValueError`` saying what is wrong. Returns ``rows`` as an int64 array."""
    rows = np.asarray(rows, dtype=np.int64)
    if n < 1:
        raise ValueError(f"{what}: a tree needs at least one leaf, got {n}")
    if rows.size == 0 and n == 1:
        return rows.reshape(0, 2)
    if rows.ndim != 2 or rows.shape != (n - 1, 2):
        raise ValueError(
            f"{what}: over {n} leaves it needs {n - 1} internal nodes as (left, right) "
            f"rows, shape ({n - 1}, 2); got shape {tuple(rows.shape)}"
        )
    node = np.arange(n, 2 * n - 1)[:, None]
    bad = (rows < 0) | (rows >= node)
    if bad.any():
        k = int(np.flatnonzero(bad.any(1))[0])
        raise ValueError(
            f"{what}: node {n + k} has children {rows[k].tolist()}; children must be leaves "
            f"0..{n - 1} or nodes numbered before their parent (below {n + k})"
        )
    used = np.bincount(rows.reshape(-1), minlength=2 * n - 1)
    if (used[:-1] != 1).any():
        child = int(np.flatnonzero(used[:-1] != 1)[0])
        raise ValueError(
            f"{what}: node {child} is a child {int(used[child])} times; in a tree every node "
            "but the root (the last one) is a child exactly once"
        )
    return rows


def hang_pieces_below_words(word_tree, pieces_per_word: Sequence[int]) -> np.ndarray:
    """Binary tree over subword pieces from a binary tree over words (docs/design.md §4).

    ``word_tree``: any binary tree over the ``W`` words, ``[W - 1, 2]`` as
    :func:`binarize_head_outward` returns it (leaves ``0 .. W-1``, row ``k`` is node
    ``W + k``, children before parents, root last); it may come from a dependency tree or
    from a binarised constituency parse. ``pieces_per_word``: the ``W`` piece counts (each
    >= 1), ``n`` pieces in all. Each word's pieces ``p_0 … p_{c-1}`` form a right-branching
    subtree ``(p_0, (p_1, (… (p_{c-2}, p_{c-1}))))`` that takes the word's place as a leaf
    of the word tree, so every phrase of the word tree covers whole words.

    Returns ``[n - 1, 2]`` int64 over the piece leaves ``0 .. n-1``: first the ``c - 1``
    internal nodes of each word's subtree, word by word (innermost first), then the word
    tree's ``W - 1`` nodes in their own order; children before parents, root last.

    Example: words ``a b·c·d e`` (pieces 0, 1-3, 4), word tree ``[[1, 2], [0, 3]]`` (word
    ``bcd`` with ``e``, then ``a`` with that) gives ``[[2, 3], [1, 5], [6, 4], [0, 7]]``.
    """
    counts = [int(c) for c in pieces_per_word]
    n_words = len(counts)
    if n_words == 0:
        raise ValueError("no words: a tree needs at least one word")
    for w, c in enumerate(counts):
        if c < 1:
            raise ValueError(f"word {w} has {c} subword pieces; every word needs at least one")
    return _hang_pieces(check_binary_tree(word_tree, n_words, what="word tree"), counts)


def _hang_pieces(word_tree: np.ndarray, counts: List[int]) -> np.ndarray:
    n_words, n = len(counts), sum(counts)
    if n == n_words:  # one piece per word: the word tree itself
        return word_tree.reshape(n - 1, 2).copy()
    rows: List[tuple] = []
    top = []  # the node that stands for each word
    start = 0
    for c in counts:
        right = start + c - 1  # innermost first: (p_{c-2}, p_{c-1}), then (p_{c-3}, ·), ...
        for left in range(start + c - 2, start - 1, -1):
            rows.append((left, right))
            right = n + len(rows) - 1
        top.append(right)
        start += c
    pieces = np.array(rows, dtype=np.int64).reshape(-1, 2)
    # word tree nodes: leaf w -> top[w]; node W + k -> the k-th node after the pieces' nodes
    top = np.array(top, dtype=np.int64)
    words = np.where(word_tree < n_words, top[np.minimum(word_tree, n_words - 1)],
                     word_tree - n_words + n + len(rows))
    return np.concatenate([pieces, words.reshape(-1, 2)])


def subword_binary_tree(word_heads: Sequence[int], pieces_per_word: Sequence[int]) -> np.ndarray:
    """The binary tree side-file row of a dependency tree (docs/design.md §4): the
    word-level tree binarised head-outward (:func:`binarize_head_outward`), then each
    word's pieces hung below it (:func:`hang_pieces_below_words`). ``[n - 1, 2]`` int64
    over the ``n`` subword pieces (eos excluded)."""
    return project_dependency_tree(word_heads, pieces_per_word)[1]


def project_dependency_tree(word_heads: Sequence[int], pieces_per_word: Sequence[int]):
    """Both side-file rows of a dependency tree at once: ``(heads, tree)`` as
    :func:`project_heads_to_subwords` and :func:`subword_binary_tree` give them, the word
    tree validated once."""
    _check_one_count_per_word(word_heads, pieces_per_word)
    heads = [int(h) for h in word_heads]
    validate_heads(heads)
    counts = [int(c) for c in pieces_per_word]
    pieces = _project_valid_heads(heads, counts)  # checks every count >= 1
    return pieces, _hang_pieces(_binarize_valid_heads(heads), counts)
