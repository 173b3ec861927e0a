"""Dependency trees as head arrays: validation, subword projection, head-outward binarisation.

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


def project_heads_to_subwords(
    word_heads: Sequence[int], pieces_per_word: Sequence[int]
) -> List[int]:
    """Project a word-level tree onto subword pieces plus fairseq's final eos.

    DESIGN.md section 2: the first piece of a word stands for the word, so its head is the
    first piece of the word's head (``-1`` for the root word); the word's other pieces
    attach to its first piece; one extra final position, fairseq's ``eos``, attaches to
    the root word's first piece. The result has ``sum(pieces_per_word) + 1`` entries and
    is a single tree with the root word's first piece as root.

    Example: words ``[a, bcd, e]`` with heads ``[1, -1, 1]`` and pieces ``[1, 3, 1]``
    give ``[1, -1, 1, 1, 1, 1]`` (positions a, b, c, d, e, eos).
    """
    if len(word_heads) != len(pieces_per_word):
        raise ValueError(
            f"{len(word_heads)} heads but {len(pieces_per_word)} piece counts: "
            "need one piece count per word"
        )
    validate_heads(word_heads)
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

    Every phrase is a contiguous span when the tree is projective. A word split into
    subword pieces (pieces attached to the word's first piece, see
    :func:`project_heads_to_subwords`) forms a phrase of its own before meeting any other
    dependent: its pieces are the first piece's closest right dependents, so they are
    absorbed first.

    Iterative (explicit stack): no recursion limit for long sentences.
    """
    heads = [int(h) for h in heads]
    validate_heads(heads)
    n = len(heads)
    dependents: List[List[int]] = [[] for _ in range(n)]
    root = -1
    for i, h in enumerate(heads):
        if h == -1:
            root = i
        else:
            dependents[h].append(i)  # ascending order of position
    # absorption order: right dependents closest first, then left dependents closest first
    order: List[List[int]] = []
    for h in range(n):
        right = [d for d in dependents[h] if d > h]
        left = [d for d in dependents[h] if d < h]
        order.append(right + left[::-1])

    rows = np.zeros((max(n - 1, 0), 2), dtype=np.int64)
    phrase = list(range(n))  # current top node of each head's phrase
    next_node = n
    stack = [(root, False)]
    while stack:
        h, expanded = stack.pop()
        if not expanded:
            stack.append((h, True))
            for d in reversed(order[h]):  # so that order[h][0] is built first
                stack.append((d, False))
            continue
        cur = h
        for d in order[h]:
            pair = (cur, phrase[d]) if d > h else (phrase[d], cur)
            rows[next_node - n] = pair
            cur = next_node
            next_node += 1
        phrase[h] = cur
    return rows
