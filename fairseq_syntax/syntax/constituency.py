"""PTB-style bracketed constituency parses: reading, checking, and binarising them into the
word-level binary tree of the ``tree`` side-file (docs/design.md §4).

A bracketed parse is one line such as ``(ROOT (S (NP (DT the) (NN dog)) (VP (VBD saw))
(. .)))``: ``(`` label children ``)``, where a child is a constituent or a word (a leaf).
The label is optional (``( (S …) )``, the Penn Treebank's outer bracket). Leaves are the
words in order; ``-LRB-``/``-RRB-`` (and ``-LSB-``, ``-RSB-``, ``-LCB-``, ``-RCB-``) stand
for the brackets ``( ) [ ] { }`` when leaves are compared with the words of the text.
Penn Treebank empty elements (constituents labelled ``-NONE-``, e.g. traces) are dropped,
with the constituents they leave empty.

Binarisation (:func:`binarize_constituents`): the tree-to-sequence encoder (Eriguchi et
al., 2016, §3, eqs. 10-11: a binary Tree-LSTM over the phrases of Enju's binary HPSG
parses) needs a binary tree over the words, and a treebank-style parse is n-ary:

* **unary chains are collapsed**: a constituent with a single child is that child
  (``(S (VP (VBD slept)))`` is the word ``slept``; a preterminal ``(DT the)`` is its word);
* **n-ary constituents are right-factored**: children ``c_1 … c_k`` (k > 2) become
  ``(c_1, (c_2, (… (c_{k-1}, c_k))))``, as NLTK's ``chomsky_normal_form(factor="right")``.

The result has the representation of :func:`.dependency.binarize_head_outward`:
``[n - 1, 2]`` int64, leaves ``0 .. n-1`` (the words), row ``k`` the (left, right)
children of internal node ``n + k``, children numbered before parents, root last;
:func:`.dependency.hang_pieces_below_words` then hangs each word's subword pieces below
it. Every function is iterative (no recursion limit).

No dependency of this package reads PTB brackets (conllu, networkx and spaCy do not;
nltk is not a dependency), hence the small parser here.
"""
import itertools
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Optional, Sequence, Union

import numpy as np

from .dependency import check_binary_tree
from .errors import SyntaxInputError
from .text_io import iter_text_lines, read_text_lines

#: PTB escapes of brackets in leaves, and the characters they stand for
PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]",
               "-LCB-": "{", "-RCB-": "}"}
#: label of the Penn Treebank's empty elements (traces, null elements): dropped
EMPTY_ELEMENT = "-NONE-"

BINARISATION_RULE = (
    "Bracketed constituency parse binarised at word level: unary chains collapsed (a "
    "constituent with one child is that child; preterminals are their words), n-ary "
    "constituents right-factored, children c1 ... ck becoming (c1, (c2, (... (c_{k-1}, "
    "ck)))); -NONE- empty elements dropped. Nodes are numbered in a post-order walk "
    "(children left to right, then the constituent's own merges innermost first), so "
    "children come before parents and the root is last."
)


@dataclass(eq=False)
class Constituent:
    """One bracketed constituent: its label (``""`` when the bracket has none) and its
    children, each a :class:`Constituent` or an ``int``, the 0-based index of a leaf
    (word) of the tree."""

    label: str
    children: List[Union["Constituent", int]] = field(default_factory=list)
    column: int = 0  # 1-based column of its "(" in the line


@dataclass(eq=False)
class BracketedTree:
    """A parsed bracketed line: its leaves in order (as written, escapes kept), the root
    constituent, and the 1-based line it came from (0: not from a file)."""

    leaves: List[str]
    root: Constituent
    line: int = 0


def _tokens(text: str):
    """``(kind, value, column)`` for each ``(``, ``)`` and whitespace-free atom."""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
        elif ch in "()":
            yield ch, ch, i + 1
            i += 1
        else:
            j = i
            while j < n and not text[j].isspace() and text[j] not in "()":
                j += 1
            yield "atom", text[i:j], i + 1
            i = j


def parse_bracketed(text: str) -> BracketedTree:
    """Parse one PTB-style bracketed tree (one line); raise ``ValueError`` saying what is
    wrong and at which 1-based column: unbalanced brackets (a ``)`` that closes nothing,
    a ``(`` never closed), an empty constituent (``()`` or ``(NP)``: no word and no
    constituent), text before the first ``(`` or after the tree's last ``)`` (one tree
    per line), or a tree without words (e.g. only ``-NONE-`` elements)."""
    tokens = list(_tokens(text))
    if not tokens:
        raise ValueError("empty line: expected one bracketed tree such as (S (NP dogs) (VP bark))")
    kind, value, column = tokens[0]
    if kind == ")":
        raise ValueError(f"unbalanced brackets: the ')' at column {column} closes nothing")
    if kind != "(":
        raise ValueError(
            f"a bracketed tree starts with '(', found {value!r} at column {column}")
    leaves: List[str] = []
    stack: List[Constituent] = []
    expect_label = False
    root: Optional[Constituent] = None
    for kind, value, column in tokens:
        if root is not None and kind == ")":
            raise ValueError(
                f"unbalanced brackets: the ')' at column {column} closes nothing (the tree "
                f"ended at the ')' before it)")
        if root is not None:
            raise ValueError(
                f"text after the tree's closing bracket: {value!r} at column {column}; "
                "give exactly one bracketed tree per line")
        if kind == "(":
            node = Constituent("", [], column)
            if stack:
                stack[-1].children.append(node)
            stack.append(node)
            expect_label = True
        elif kind == ")":
            if not stack:
                raise ValueError(
                    f"unbalanced brackets: the ')' at column {column} closes nothing")
            node = stack.pop()
            if not node.children:
                shown = f"({node.label})" if node.label else "()"
                raise ValueError(
                    f"empty constituent {shown} at column {node.column}: a constituent "
                    "needs at least one word or constituent")
            expect_label = False
            if not stack:
                root = node
        else:
            if expect_label:
                stack[-1].label = value
            else:
                stack[-1].children.append(len(leaves))
                leaves.append(value)
            expect_label = False
    if stack:
        opened = ", ".join(str(node.column) for node in stack)
        raise ValueError(
            f"unbalanced brackets: {len(stack)} '(' not closed at the end of the line "
            f"(opened at column{'s' if len(stack) > 1 else ''} {opened})")
    tree = BracketedTree(leaves, root)
    _drop_empty_elements(tree)
    return tree


def _drop_empty_elements(tree: BracketedTree) -> None:
    """Remove ``-NONE-`` constituents, the constituents left without children, and their
    leaves (renumbering the others); raise ``ValueError`` if no word is left."""
    keep = [True] * len(tree.leaves)
    order: List[Constituent] = []  # pre-order
    stack = [tree.root]
    while stack:
        node = stack.pop()
        order.append(node)
        stack.extend(c for c in node.children if isinstance(c, Constituent))
    if tree.root.label == EMPTY_ELEMENT:
        raise ValueError("the tree has no words: it is a -NONE- empty element")
    found = False
    for node in reversed(order):  # children before parents
        kept = []
        for child in node.children:
            if isinstance(child, Constituent):
                if child.label == EMPTY_ELEMENT or not child.children:
                    found = True
                    _mark_dropped(child, keep)
                    continue
            kept.append(child)
        node.children = kept
    if not found:
        return
    if not tree.root.children or tree.root.label == EMPTY_ELEMENT:
        raise ValueError("the tree has no words: every leaf is inside a -NONE- empty element")
    new_index = np.cumsum(keep) - 1
    tree.leaves = [w for w, k in zip(tree.leaves, keep) if k]
    for node in order:
        node.children = [int(new_index[c]) if isinstance(c, int) else c for c in node.children]


def _mark_dropped(node: Constituent, keep: List[bool]) -> None:
    stack = [node]
    while stack:
        node = stack.pop()
        for child in node.children:
            if isinstance(child, Constituent):
                stack.append(child)
            else:
                keep[child] = False


def leaf_word(leaf: str) -> str:
    """The word a leaf stands for: ``-LRB-`` -> ``(`` etc. (:data:`PTB_ESCAPES`), any other
    leaf itself."""
    return PTB_ESCAPES.get(leaf, leaf)


def check_leaves(tree: BracketedTree, words: Sequence[str]) -> None:
    """Raise ``ValueError`` unless the tree's leaves are ``words`` (a leaf equals its word
    or is the PTB escape of it, :func:`leaf_word`), naming the first word that differs."""
    leaves = tree.leaves
    if len(leaves) == len(words) and all(
            leaf == word or leaf_word(leaf) == word for leaf, word in zip(leaves, words)):
        return
    position = next((i for i, (leaf, word) in enumerate(zip(leaves, words))
                     if leaf != word and leaf_word(leaf) != word),
                    min(len(leaves), len(words)))
    in_tree = repr(leaves[position]) if position < len(leaves) else "(nothing)"
    in_text = repr(words[position]) if position < len(words) else "(nothing)"
    raise ValueError(
        f"word {position + 1} is {in_tree} in the tree but {in_text} in the text (the tree "
        f"has {len(leaves)} leaves, the text {len(words)} tokens; the leaves must equal "
        "the line's whitespace-separated tokens, with -LRB-/-RRB- for brackets)")


def binarize_constituents(tree: Union[BracketedTree, Constituent],
                          n_leaves: Optional[int] = None) -> np.ndarray:
    """The word-level binary tree of a constituency tree: unary chains collapsed, n-ary
    constituents right-factored (see the module docstring).

    Returns ``[n - 1, 2]`` int64 over the ``n`` leaves, as
    :func:`~fairseq_syntax.syntax.dependency.binarize_head_outward` does: row ``k`` holds
    the (left, right) children of node ``n + k``. Nodes are created in a post-order walk:
    a constituent's children are binarised left to right, then its own merges are made
    innermost first, ``(c_{k-1}, c_k)``, then ``(c_{k-2}, ·)``, …, ``(c_1, ·)``; so children
    are numbered before parents and the root is last. One word gives shape ``[0, 2]``.

    Example: ``(S (NP (DT the) (JJ big) (NN dog)) (VP (VBD barked)) (. .))`` (leaves
    0-4) gives ``[[1, 2], [0, 5], [3, 4], [6, 7]]``: ``(big dog)``, ``(the ·)``, the
    ternary S right-factored as ``(NP, (barked .))``, VP -> VBD collapsed.
    """
    root = tree.root if isinstance(tree, BracketedTree) else tree
    if n_leaves is None:
        if not isinstance(tree, BracketedTree):
            raise ValueError("binarize_constituents: give n_leaves with a bare Constituent")
        n_leaves = len(tree.leaves)
    n = n_leaves
    if n < 1:
        raise ValueError("the tree has no words")
    rows = np.zeros((n - 1, 2), dtype=np.int64)
    next_node = n
    top = {}  # id(constituent) -> the node standing for it
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if not expanded:
            stack.append((node, True))
            for child in reversed(node.children):  # so that the first child is done first
                if isinstance(child, Constituent):
                    stack.append((child, False))
            continue
        tops = [top.pop(id(c)) if isinstance(c, Constituent) else c for c in node.children]
        if not tops:
            raise ValueError(f"empty constituent ({node.label}) at column {node.column}")
        cur = tops[-1]
        for left in reversed(tops[:-1]):
            if next_node - n >= n - 1:
                raise ValueError(f"the tree has more merges than its {n} leaves allow")
            rows[next_node - n] = (left, cur)
            cur = next_node
            next_node += 1
        top[id(node)] = cur
    if next_node != 2 * n - 1:
        raise ValueError(f"the tree has {next_node - n} merges; {n} leaves need {n - 1}")
    return check_binary_tree(rows, n, what="binarised constituency tree")


def read_bracketed_trees(path: str) -> List[BracketedTree]:
    """Read a file of bracketed trees, one per line (UTF-8, no empty lines), each checked
    by :func:`parse_bracketed`; errors are :class:`SyntaxInputError` naming ``path`` and
    the line (and the column in the message)."""
    trees = []
    for number, text in enumerate(read_text_lines(path), start=1):
        try:
            tree = parse_bracketed(text)
        except ValueError as err:
            raise SyntaxInputError(str(err), path, number) from None
        tree.line = number
        trees.append(tree)
    return trees


def word_trees_of_file(path: str, sentences: Sequence[Sequence[str]],
                       text_path: Optional[str] = None) -> List[np.ndarray]:
    """The word-level binary trees of a bracketed-parse file whose trees belong, line by
    line, to ``sentences`` (the tokens of ``text_path``): checked
    (:func:`check_bracketed_file`), then binarised (:func:`iter_word_trees`)."""
    check_bracketed_file(path, sentences, text_path)
    return list(iter_word_trees(path))


def check_bracketed_file(path: str, sentences: Iterable[Sequence[str]],
                         text_path: Optional[str] = None) -> None:
    """Check a bracketed-parse file against ``sentences`` (the tokens of ``text_path``, read
    alongside), one tree at a time: the lines read (:func:`read_bracketed_trees`' errors
    first), one tree per sentence, each tree's leaves the sentence's tokens
    (:func:`check_leaves`). Errors are :class:`SyntaxInputError` naming ``path`` and the line."""
    n_trees = sum(1 for _ in iter_text_lines(path))  # bad UTF-8 and empty lines first
    n_sentences, mismatch = 0, None
    for number, (text, words) in enumerate(
            itertools.zip_longest(iter_text_lines(path), sentences), start=1):
        if text is not None:
            try:
                tree = parse_bracketed(text)
            except ValueError as err:
                raise SyntaxInputError(str(err), path, number) from None
        if words is None:
            continue
        n_sentences += 1
        if mismatch is None and text is not None:
            try:
                check_leaves(tree, words)
            except ValueError as err:
                where = f"{text_path}:{number}" if text_path else f"text line {number}"
                mismatch = SyntaxInputError(f"the tree does not match {where}: {err}", path,
                                            number)
    text_name = text_path or "the text"
    if n_trees > n_sentences:
        raise SyntaxInputError(
            f"{n_trees} bracketed trees but {text_name} has {n_sentences} lines: this "
            f"tree has no line of text; give one tree per line of the text",
            path, n_sentences + 1)
    if n_trees < n_sentences:
        raise SyntaxInputError(
            f"{n_trees} bracketed trees but {text_name} has {n_sentences} lines: line "
            f"{n_trees + 1} of {text_name} has no tree; give one tree per line of the text",
            path)
    if mismatch is not None:
        raise mismatch


def iter_word_trees(path: str) -> Iterator[np.ndarray]:
    """The binarised word trees of a checked bracketed-parse file
    (:func:`check_bracketed_file`), one line at a time (:func:`binarize_constituents`)."""
    for text in iter_text_lines(path):
        yield binarize_constituents(parse_bracketed(text))
