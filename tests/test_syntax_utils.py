"""Torch-free syntax utilities: projection, binarisation, validation, Pharaoh, file readers."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairseq_syntax.syntax.conllu_io import (
    ParsedSentence,
    format_conllu,
    read_conllu_trees,
    write_conllu,
)
from fairseq_syntax.syntax.dependency import (
    binarize_head_outward,
    hang_pieces_below_words,
    project_heads_to_subwords,
    project_dependency_tree,
    subword_binary_tree,
    validate_heads,
)
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import (
    format_pharaoh,
    parse_pharaoh_line,
    project_alignment_to_subwords,
)
from fairseq_syntax.syntax.text_io import read_text_lines

# --------------------------------------------------------------------------- projection


def test_projection_word_split_into_three_pieces():
    # The un·believ·able dog barked <eos>
    #  0   1   2    3    4    5      6
    # word heads: The->dog, unbelievable->dog, dog->barked, barked=root
    heads = project_heads_to_subwords([2, 2, 3, -1], [1, 3, 1, 1])
    assert heads == [4, 4, 1, 1, 5, -1, 5]


def test_projection_root_word_split_in_two():
    # she sle·eps <eos>: the root's second piece and eos attach to the root's first piece
    assert project_heads_to_subwords([1, -1], [1, 2]) == [1, -1, 1, 1]


def test_projection_first_word_is_split_root():
    # r·un fa·st <eos>: fast -> run
    assert project_heads_to_subwords([-1, 0], [2, 2]) == [-1, 0, 0, 2, 0]


def test_projection_single_word():
    assert project_heads_to_subwords([-1], [1]) == [-1, 0]
    assert project_heads_to_subwords([-1], [3]) == [-1, 0, 0, 0]


def test_projection_rejects_bad_input():
    with pytest.raises(ValueError, match="no subword pieces|0 subword pieces"):
        project_heads_to_subwords([1, -1], [0, 1])
    with pytest.raises(ValueError, match="piece count"):
        project_heads_to_subwords([1, -1], [1])
    with pytest.raises(ValueError, match="several roots"):
        project_heads_to_subwords([-1, -1], [1, 1])


# --------------------------------------------------------------------------- binarisation


def check_binary_tree(rows: np.ndarray, n: int) -> None:
    """Structural properties every binarisation must have."""
    assert rows.shape == (max(n - 1, 0), 2)
    if n == 1:
        return
    parent_of = {}
    for k, (left, right) in enumerate(rows.tolist()):
        node = n + k
        for child in (left, right):
            assert 0 <= child < node, "children are numbered before parents"
            assert child not in parent_of, f"node {child} has two parents"
            parent_of[child] = node
    root = 2 * n - 2
    assert set(parent_of) == set(range(root)), "every node but the root has a parent"
    assert root not in parent_of, "the last node is the root"
    # every leaf covered exactly once under the root
    leaves = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node < n:
            leaves.append(node)
        else:
            stack.extend(rows[node - n].tolist())
    assert sorted(leaves) == list(range(n))


def leaf_sets(rows: np.ndarray, n: int):
    sets = [frozenset([i]) for i in range(n)]
    for left, right in rows.tolist():
        sets.append(sets[left] | sets[right])
    return sets


def subtree(heads, h):
    out = {h}
    changed = True
    while changed:
        changed = False
        for i, hh in enumerate(heads):
            if hh in out and i not in out:
                out.add(i)
                changed = True
    return frozenset(out)


def test_binarisation_hand_worked():
    # the big dog barked loudly: the->dog, big->dog, dog->barked, loudly->barked
    rows = binarize_head_outward([2, 2, 3, -1, 3])
    # dog absorbs big (closest left) then the; barked absorbs loudly (right) then the NP
    expected = [[1, 2], [0, 5], [3, 4], [6, 7]]
    assert rows.tolist() == expected
    check_binary_tree(rows, 5)


def test_binarisation_subword_pieces_form_a_phrase_first():
    # projected heads of "The un·believ·able dog barked" without eos
    rows = binarize_head_outward([4, 4, 1, 1, 5, -1])
    assert rows.tolist() == [[1, 2], [6, 3], [7, 4], [0, 8], [9, 5]]
    assert frozenset({1, 2, 3}) in leaf_sets(rows, 6)


def test_binarisation_single_leaf_and_pair():
    assert binarize_head_outward([-1]).shape == (0, 2)
    assert binarize_head_outward([-1, 0]).tolist() == [[0, 1]]
    assert binarize_head_outward([1, -1]).tolist() == [[0, 1]]


def test_binarisation_long_chain_no_recursion_limit():
    n = 5000
    left_chain = list(range(1, n)) + [-1]  # each word's head is its right neighbour
    rows = binarize_head_outward(left_chain)
    check_binary_tree(rows, n)
    right_chain = [-1] + list(range(0, n - 1))
    check_binary_tree(binarize_head_outward(right_chain), n)


def test_binarisation_rejects_invalid_tree():
    with pytest.raises(ValueError, match="cycle"):
        binarize_head_outward([-1, 2, 1])


@st.composite
def random_trees(draw, max_n=40):
    """Random heads forming a tree: attach the words in a random order to earlier ones."""
    n = draw(st.integers(min_value=1, max_value=max_n))
    order = draw(st.permutations(list(range(n))))
    heads = [0] * n
    heads[order[0]] = -1
    for k in range(1, n):
        heads[order[k]] = order[draw(st.integers(min_value=0, max_value=k - 1))]
    return heads


@settings(max_examples=200, deadline=None)
@given(random_trees())
def test_binarisation_properties_on_random_trees(heads):
    n = len(heads)
    rows = binarize_head_outward(heads)
    check_binary_tree(rows, n)
    sets = leaf_sets(rows, n)
    # every word's dependency subtree is one phrase of the binary tree
    for h in range(n):
        assert subtree(heads, h) in sets


@settings(max_examples=100, deadline=None)
@given(random_trees(max_n=12), st.lists(st.integers(min_value=1, max_value=3), min_size=12))
def test_projection_properties_on_random_trees(heads, counts):
    counts = counts[: len(heads)]
    sub = project_heads_to_subwords(heads, counts)
    assert len(sub) == sum(counts) + 1
    validate_heads(sub)  # one tree, eos included
    rows = subword_binary_tree(heads, counts)
    check_binary_tree(rows, sum(counts))
    both = project_dependency_tree(heads, counts)  # the two rows at once, validated once
    assert both[0] == sub and both[1].tolist() == rows.tolist()
    sets = leaf_sets(rows, sum(counts))
    start = 0
    for c in counts:  # every word's pieces form a phrase
        assert frozenset(range(start, start + c)) in sets
        start += c


# ------------------------------------------------------------- pieces hung below words


def piece_span(counts, words):
    """The pieces of a set of words."""
    starts = np.concatenate([[0], np.cumsum(counts)])
    return frozenset(p for w in words for p in range(starts[w], starts[w + 1]))


def test_hanging_pieces_hand_worked():
    # a b·c·d e: pieces a=0, b=1, c=2, d=3, e=4; word tree: (bcd, e) = node 3, (a, 3) = 4.
    # Word bcd: (c, d) = 5, (b, 5) = 6; then the word nodes: (6, e) = 7, (a, 7) = 8.
    rows = hang_pieces_below_words([[1, 2], [0, 3]], [1, 3, 1])
    assert rows.tolist() == [[2, 3], [1, 5], [6, 4], [0, 7]]
    check_binary_tree(rows, 5)


def test_side_file_tree_is_word_level_with_right_branching_pieces():
    # The un·believ·able dog barked: word heads The->dog, unbelievable->dog, dog->barked.
    # Word tree (head-outward): (unbelievable, dog), (The, ·), (·, barked). The word's
    # pieces hang right-branching: (believ, able) = 6, (un, 6) = 7; then the word nodes.
    rows = subword_binary_tree([2, 2, 3, -1], [1, 3, 1, 1])
    assert rows.tolist() == [[2, 3], [1, 6], [7, 4], [0, 8], [9, 5]]
    sets = leaf_sets(rows, 6)
    assert frozenset({2, 3}) in sets and frozenset({1, 2}) not in sets
    # binarising the projected piece tree instead gives the left-branching ((un, believ), able)
    old = binarize_head_outward(project_heads_to_subwords([2, 2, 3, -1], [1, 3, 1, 1])[:-1])
    assert frozenset({1, 2}) in leaf_sets(old, 6)


def test_hanging_single_word_and_single_pieces():
    assert hang_pieces_below_words(np.zeros((0, 2), dtype=np.int64), [1]).shape == (0, 2)
    assert hang_pieces_below_words(np.zeros((0, 2), dtype=np.int64), [3]).tolist() == [[1, 2], [0, 3]]
    word_tree = [[1, 2], [0, 3]]  # one piece per word: the word tree itself
    assert hang_pieces_below_words(word_tree, [1, 1, 1]).tolist() == word_tree


@st.composite
def random_binary_trees(draw, max_n=10):
    """Any binary tree over n leaves: merge two random current phrases until one is left
    (so phrases need not be contiguous, as a non-projective tree can make them)."""
    n = draw(st.integers(min_value=1, max_value=max_n))
    alive = list(range(n))
    rows = []
    while len(alive) > 1:
        i = draw(st.integers(0, len(alive) - 1))
        left = alive.pop(i)
        j = draw(st.integers(0, len(alive) - 1))
        right = alive.pop(j)
        rows.append([left, right])
        alive.append(n + len(rows) - 1)
    return np.asarray(rows, dtype=np.int64).reshape(-1, 2)


@settings(max_examples=200, deadline=None)
@given(random_binary_trees(), st.lists(st.integers(min_value=1, max_value=4), min_size=10))
def test_hanging_properties_on_random_word_trees(word_tree, counts):
    n_words = word_tree.shape[0] + 1
    counts = counts[:n_words]
    n = sum(counts)
    rows = hang_pieces_below_words(word_tree, counts)
    check_binary_tree(rows, n)
    sets = leaf_sets(rows, n)
    word_sets = leaf_sets(word_tree, n_words)
    # the nodes are exactly: the pieces, each word's right-branching suffixes of pieces,
    # and the word tree's phrases
    expected = {frozenset([p]) for p in range(n)}
    start = 0
    for c in counts:
        expected |= {frozenset(range(start + j, start + c)) for j in range(c)}
        start += c
    expected |= {piece_span(counts, words) for words in word_sets}
    assert set(sets) == expected
    assert len(sets) == 2 * n - 1  # no phrase twice


@pytest.mark.parametrize("tree, counts, pattern", [
    ([[0, 1]], [1, 0], "word 1 has 0 subword pieces"),
    ([[0, 1]], [1, 1, 1], r"needs 2 internal nodes.*shape \(1, 2\)"),
    ([[0, 3], [1, 2]], [1, 1, 1], "node 3 has children"),
    ([[0, 0], [1, 3]], [1, 1, 1], "node 0 is a child 2 times"),
])
def test_hanging_rejects_bad_input(tree, counts, pattern):
    with pytest.raises(ValueError, match=pattern):
        hang_pieces_below_words(tree, counts)


# --------------------------------------------------------------------------- validation


def test_validate_heads_accepts_tree():
    validate_heads([2, 2, 3, -1, 3])
    validate_heads([-1])


@pytest.mark.parametrize(
    "heads, pattern",
    [
        ([1, -1, 5], r"word 2 has head 5, out of range"),
        ([1, -1, -2], r"word 2 has head -2, out of range"),
        ([0, -1], r"word 0 is its own head"),
        ([1, 2, 0], r"no root.*0 -> 1 -> 2 -> 0"),
        ([-1, 0, -1, -1], r"several roots: words 0, 2, 3"),
        ([-1, 2, 3, 1], r"cycle: words 1 -> 2 -> 3 -> 1"),
        ([], r"no root"),
    ],
)
def test_validate_heads_errors(heads, pattern):
    with pytest.raises(ValueError, match=pattern):
        validate_heads(heads)


def test_validate_heads_conllu_numbering():
    with pytest.raises(ValueError, match=r"words 1 \('a'\), 3 \('c'\) all have head 0"):
        validate_heads([-1, 0, -1], words=["a", "b", "c"], index_base=1)


# --------------------------------------------------------------------------- Pharaoh


def test_parse_pharaoh_line():
    assert parse_pharaoh_line("0-1 2-0  1-1\n", 3, 2) == [(0, 1), (2, 0), (1, 1)]
    assert parse_pharaoh_line("", 3, 2) == []


@pytest.mark.parametrize(
    "text, pattern",
    [
        ("0-1 0:1", r"link 2 '0:1' is not of the form i-j"),
        ("a-b", r"link 1 'a-b'"),
        ("0-1 1-", r"link 2 '1-'"),
        ("0-0 3-1", r"link 2 '3-1': source index 3 is out of range \(source sentence has 3 "
                    r"words, target sentence has 2 words"),
        ("0-2", r"link 1 '0-2': target index 2 is out of range"),
    ],
)
def test_parse_pharaoh_errors(text, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_pharaoh_line(text, 3, 2)


def test_project_alignment_hand_worked():
    # source words: [p0 p1] [p2]; target words: [q0] [q1 q2]
    links = [(0, 1), (1, 0), (0, 1)]
    projected = project_alignment_to_subwords(links, [2, 1], [1, 2])
    assert projected == [(0, 1), (0, 2), (1, 1), (1, 2), (2, 0)]
    assert format_pharaoh(projected) == "0-1 0-2 1-1 1-2 2-0"
    assert format_pharaoh([]) == ""
    with pytest.raises(ValueError, match="out of range"):
        project_alignment_to_subwords([(2, 0)], [2, 1], [1, 2])


# --------------------------------------------------------------------------- readers


def test_read_text_lines(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes("\ufeffone two\r\n three \nlast".encode("utf-8"))
    assert read_text_lines(str(path)) == ["one two", " three ", "last"]


@pytest.mark.parametrize(
    "data, line, pattern",
    [
        (b"ok\nbad \xff byte\n", 2, "not valid UTF-8: byte 0xff at byte column 5"),
        (b"ok\n\nok\n", 2, "empty line"),
        (b"ok\n \t \nok\n", 2, "empty line"),
        (b"ok\nok\n\n", 3, "empty line"),
    ],
)
def test_read_text_lines_errors(tmp_path, data, line, pattern):
    path = tmp_path / "a.txt"
    path.write_bytes(data)
    with pytest.raises(SyntaxInputError, match=pattern) as info:
        read_text_lines(str(path))
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert info.value.line == line


CONLLU = (
    "# sent_id = 1\n"
    "# text = the dog\n"
    "1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n"
    "2\tdog\tdog\tNOUN\t_\t_\t0\troot\t_\t_\n"
    "\n"
    "# sent_id = 2\n"
    "1-2\tdel\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "1\tde\tde\tADP\t_\t_\t2\tcase\t_\t_\n"
    "2\tel\tel\tDET\t_\t_\t3\tdet\t_\t_\n"
    "2.1\tx\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "3\tfin\tfin\tNOUN\t_\t_\t0\troot\t_\t_\n"
    "\n"
)


def test_read_conllu_trees(tmp_path):
    path = tmp_path / "a.conllu"
    path.write_text(CONLLU, encoding="utf-8")
    trees = read_conllu_trees(str(path))
    assert trees == [
        ParsedSentence(["the", "dog"], [1, -1], ["det", "root"], 1),
        ParsedSentence(["de", "el", "fin"], [1, 2, -1], ["case", "det", "root"], 6),
    ]
    out = tmp_path / "b.conllu"
    write_conllu(str(out), trees)
    again = read_conllu_trees(str(out))
    assert [(t.words, t.heads, t.deprels) for t in again] == [
        (t.words, t.heads, t.deprels) for t in trees
    ]


def test_write_conllu_stopped_by_a_bad_sentence_leaves_the_old_file(tmp_path):
    """The second sentence has a word with a tab: the error names it, and the file holds what
    it held before (no first sentence, no temporary file beside it)."""
    out = tmp_path / "trees.conllu"
    out.write_text(CONLLU, encoding="utf-8")
    good, bad = ParsedSentence(["a", "b"], [1, -1]), ParsedSentence(["c\td"], [-1])
    with pytest.raises(ValueError, match=r"word 1 'c\\td' is empty or holds a tab"):
        write_conllu(str(out), [good, bad])
    assert out.read_text(encoding="utf-8") == CONLLU
    assert [p.name for p in tmp_path.iterdir()] == ["trees.conllu"]


def test_format_conllu_hand_worked(tmp_path):
    block = format_conllu(["the", "dogs", "bark"], [1, 2, -1], ["det", "nsubj", "root"],
                          [("sent_id", "s-1")], ["the", "dog", "bark"], ["DET", "NOUN", "VERB"],
                          ["_", "Number=Plur", "_"])
    assert block == (
        "# sent_id = s-1\n"
        "# text = the dogs bark\n"
        "1\tthe\tthe\tDET\t_\t_\t2\tdet\t_\t_\n"
        "2\tdogs\tdog\tNOUN\t_\tNumber=Plur\t3\tnsubj\t_\t_\n"
        "3\tbark\tbark\tVERB\t_\t_\t0\troot\t_\t_\n"
        "\n"
    )
    # columns not given are "_", and so is an empty DEPREL
    assert format_conllu(["hi", "!"], [-1, 0], ["", "punct"]) == (
        "# text = hi !\n1\thi\t_\t_\t_\t_\t0\t_\t_\t_\n2\t!\t_\t_\t_\t_\t1\tpunct\t_\t_\n\n")
    out = tmp_path / "c.conllu"
    write_conllu(str(out), [ParsedSentence(["hi", "!"], [-1, 0]), ParsedSentence(["x"], [-1])])
    assert out.read_text(encoding="utf-8") == (
        "# text = hi !\n1\thi\t_\t_\t_\t_\t0\t_\t_\t_\n2\t!\t_\t_\t_\t_\t1\t_\t_\t_\n\n"
        "# text = x\n1\tx\t_\t_\t_\t_\t0\t_\t_\t_\n\n")
    with pytest.raises(ValueError, match="word 2 'a\\\\tb' is empty or holds a tab"):
        write_conllu(str(out), [ParsedSentence(["x", "a\tb"], [-1, 0])])


@pytest.mark.parametrize(
    "old, new, line, pattern",
    [
        ("3\tfin\tfin\tNOUN\t_\t_\t0", "3\tfin\tfin\tNOUN\t_\t_\t1", 6, "no root"),
        ("2\tel\tel\tDET\t_\t_\t3", "2\tel\tel\tDET\t_\t_\t0", 6, r"several roots: words 2 \('el'\), 3"),
        ("2\tel\tel\tDET\t_\t_\t3", "2\tel\tel\tDET\t_\t_\t9", 6, "word 2 \\('el'\\) has head 9, out of range"),
        ("1\tde\tde\tADP\t_\t_\t2", "1\tde\tde\tADP\t_\t_\t1", 6, "its own head"),
        ("2\tel\tel\tDET\t_\t_\t3", "2\tel\tel\tDET\t_\t_\t1", 6, r"cycle: words 1 \('de'\) -> 2"),
        ("2\tel\tel\tDET\t_\t_\t3", "2\tel\tel\tDET\t_\t_\tX", 9, "malformed CoNLL-U line"),
        ("2\tel\tel\tDET\t_\t_\t3", "2\tel\tel\tDET\t_\t_\t_", 9, "no HEAD"),
        ("3\tfin", "4\tfin", 11, "word ID 4 where 3 was expected"),
        ("2\tdog\tdog", "2\tdo\udcffg\tdog", 4, "not valid UTF-8"),
    ],
)
def test_read_conllu_errors(tmp_path, old, new, line, pattern):
    path = tmp_path / "a.conllu"
    assert old in CONLLU
    path.write_bytes(CONLLU.replace(old, new).encode("utf-8", "surrogateescape"))
    with pytest.raises(SyntaxInputError, match=pattern) as info:
        read_conllu_trees(str(path))
    assert str(info.value).startswith(f"{path}:{line}: ")


def test_atomic_text_file_replaces_the_file_only_when_the_block_succeeds(tmp_path):
    from fairseq_syntax.syntax.text_io import atomic_text_file

    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_text_file(str(path)) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_text_file(str(path)) as f:
        f.write("new ü\n")
    assert path.read_text(encoding="utf-8") == "new ü\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_atomic_text_file_writes_a_pipe_and_a_links_target_in_place(tmp_path):
    """A pipe (as /dev/stdout may be) is written into, not replaced by a regular file; a
    symbolic link stays a link and its target gets the new text."""
    import os
    import stat
    import threading

    from fairseq_syntax.syntax.text_io import atomic_text_file

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got = []
    reader = threading.Thread(target=lambda: got.append(open(pipe).read()), daemon=True)
    reader.start()
    with atomic_text_file(str(pipe)) as f:
        f.write("through the pipe\n")
    reader.join(10)
    assert got == ["through the pipe\n"] and stat.S_ISFIFO(os.lstat(pipe).st_mode)
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    with atomic_text_file(str(link)) as f:
        f.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "pipe", "target.txt"]


def test_atomic_text_file_gives_the_mode_open_would(tmp_path):
    """A new file: 0666 less the umask, as open() gives (not mkstemp's 0600); a replaced
    file keeps its own mode."""
    import os
    import stat

    from fairseq_syntax.syntax.text_io import atomic_text_file

    old_mask = os.umask(0o027)
    try:
        with open(tmp_path / "by_open.txt", "w") as f:
            f.write("x")
        with atomic_text_file(str(tmp_path / "new.txt")) as f:
            f.write("x")
    finally:
        os.umask(old_mask)
    mode = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert mode == {"by_open.txt": 0o640, "new.txt": 0o640}
    (tmp_path / "new.txt").chmod(0o604)
    with atomic_text_file(str(tmp_path / "new.txt")) as f:
        f.write("y")
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o604
