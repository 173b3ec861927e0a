"""Induced-tree extraction and scoring (fairseq_syntax.syntax.tree_scores), torch-free."""
import itertools

import numpy as np
import pytest

from fairseq_syntax.syntax.dependency import project_heads_to_subwords, validate_heads
from fairseq_syntax.syntax.subwords import pieces_per_word, spans_of_word_lengths
from fairseq_syntax.syntax.tree_scores import (
    AttachmentCounts, GoldTree, attachment_counts, collapse_marginals, extract_tree,
    format_table3, left_branching, max_spanning_tree, read_gold_trees, right_branching,
    score_corpus,
)


def word_spans(pieces):
    """The words extract_tree finds by default: ▁ marks, <unk> starting a word."""
    return spans_of_word_lengths(pieces_per_word(pieces, unknown_starts_word=True))

# "the dogs saw cats ." with "dogs" and "cats" in two pieces each
WORDS = ["the", "dogs", "saw", "cats", "."]
PIECES = ["▁the", "▁do", "gs", "▁saw", "▁c", "ats", "▁."]
PIECES_PER_WORD = [1, 2, 1, 2, 1]
GOLD = [1, 2, -1, 2, 2]


def one_hot_marginals(piece_heads):
    """Marginals that put all mass on one tree over the pieces (eos included)."""
    n = len(piece_heads)
    head = np.zeros((n, n))
    root = np.zeros(n)
    for m, h in enumerate(piece_heads):
        if h == -1:
            root[m] = 1.0
        else:
            head[h, m] = 1.0
    return head, root


def test_word_spans_start_at_the_word_mark():
    assert word_spans(PIECES) == [(0, 1), (1, 3), (3, 4), (4, 6), (6, 7)]
    # the first piece starts a word even without the mark (e.g. <unk>)
    assert word_spans(["<unk>", "s", "▁x"]) == [(0, 2), (2, 3)]
    assert word_spans([]) == []


def test_extraction_recovers_the_gold_tree_from_its_marginals():
    piece_heads = project_heads_to_subwords(GOLD, PIECES_PER_WORD)  # pieces + eos
    assert len(piece_heads) == len(PIECES) + 1
    head, root = one_hot_marginals(piece_heads)
    words, heads = extract_tree(PIECES, head, root)
    assert words == WORDS
    assert heads == GOLD


def test_extraction_drops_the_eos_position():
    piece_heads = project_heads_to_subwords(GOLD, PIECES_PER_WORD)
    head, root = one_hot_marginals(piece_heads)
    eos = len(PIECES)
    # heavy mass on arcs from and to eos would change the tree if eos were kept
    head[eos, :eos] = 5.0
    head[:eos, eos] = 5.0
    root[eos] = 9.0
    assert extract_tree(PIECES, head, root) == (WORDS, GOLD)


def test_collapsing_sums_the_marginals_of_the_pieces():
    # pieces ▁a b ▁c: word A = pieces {0, 1}, word C = piece {2}
    head = np.array([[0.0, 0.7, 0.2],
                     [0.0, 0.0, 0.5],
                     [0.6, 0.2, 0.0]])
    root = np.array([0.4, 0.2, 0.3])
    arcs, roots = collapse_marginals(head, root, word_spans(["▁a", "b", "▁c"]))
    # A -> C: 0.2 + 0.5; C -> A: 0.6 + 0.2; the arc inside A (0.7) is dropped
    np.testing.assert_allclose(arcs, [[0.0, 0.7], [0.8, 0.0]])
    np.testing.assert_allclose(roots, [0.6, 0.3])


def brute_force_tree(arcs, roots):
    """Best single-root tree by enumerating every head assignment."""
    k = len(roots)
    best, best_heads = -np.inf, None
    for heads in itertools.product(range(-1, k), repeat=k):
        if sum(h == -1 for h in heads) != 1:
            continue
        try:
            validate_heads(heads)
        except ValueError:
            continue
        score = sum(roots[m] if h == -1 else arcs[h, m] for m, h in enumerate(heads))
        if score > best:
            best, best_heads = score, list(heads)
    return best_heads


@pytest.mark.parametrize("k,seed", [(2, 0), (3, 1), (4, 2), (5, 3), (5, 4), (5, 5)])
def test_chu_liu_edmonds_equals_brute_force(k, seed):
    rng = np.random.default_rng(seed)
    arcs = rng.normal(size=(k, k))
    # root scores high enough that an unconstrained solution would take several roots
    roots = rng.normal(size=k) + 2.0
    heads = max_spanning_tree(arcs, roots)
    assert sum(h == -1 for h in heads) == 1
    assert heads == brute_force_tree(arcs, roots)


def test_chu_liu_edmonds_on_marginal_like_weights():
    rng = np.random.default_rng(7)
    for _ in range(5):
        arcs = rng.random((5, 5))
        roots = rng.random(5)
        assert max_spanning_tree(arcs, roots) == brute_force_tree(arcs, roots)


def test_chu_liu_edmonds_small_sentences():
    assert max_spanning_tree(np.zeros((0, 0)), np.zeros(0)) == []
    assert max_spanning_tree(np.zeros((1, 1)), np.array([0.3])) == [-1]


# --- hand-worked scores -----------------------------------------------------------------
# gold: "the dog saw a cat ."   the->dog, dog->saw, saw=root, a->cat, cat->saw, .->saw
HW_GOLD = [1, 2, -1, 4, 2, 2]
HW_UPOS = ["DET", "NOUN", "VERB", "DET", "NOUN", "PUNCT"]
# predicted: cat=root, saw->cat, dog->saw, the->dog, a->saw, .->cat
HW_PRED = [1, 2, 4, 2, -1, 4]


def test_attachment_scores_by_hand():
    # scored words (no punctuation): the, dog, saw, a, cat
    #   the: 1 = 1 (D, U); dog: 2 = 2 (D, U)
    #   saw: 4 != root; gold head of cat is saw, reversed arc (U)
    #   a: 2 != 4; gold head of saw is root, not a; cat: root != 2; -
    # directed 2/5, undirected 3/5
    counts = attachment_counts(HW_PRED, HW_GOLD, HW_UPOS)
    assert (counts.directed, counts.undirected, counts.total) == (2, 3, 5)
    assert counts.directed_accuracy == pytest.approx(40.0)
    assert counts.undirected_accuracy == pytest.approx(60.0)
    # with punctuation: '.' -> cat is neither gold nor reversed: 2/6 and 3/6
    counts = attachment_counts(HW_PRED, HW_GOLD, None)
    assert (counts.directed, counts.undirected, counts.total) == (2, 3, 6)


def test_branching_baselines_by_hand():
    assert left_branching(4) == [1, 2, 3, -1]
    assert right_branching(4) == [-1, 0, 1, 2]
    # left: the->dog D, dog->saw D, saw->a -, a->cat D, cat->'.' -          : D 3/5, U 3/5
    left = attachment_counts(left_branching(6), HW_GOLD, HW_UPOS)
    assert (left.directed, left.undirected, left.total) == (3, 3, 5)
    # right: the=root -, dog->the U, saw->dog U, a->saw -, cat->a U         : D 0/5, U 3/5
    right = attachment_counts(right_branching(6), HW_GOLD, HW_UPOS)
    assert (right.directed, right.undirected, right.total) == (0, 3, 5)


def test_corpus_scores_sum_over_sentences():
    gold = [GoldTree(["the", "dog", "saw", "a", "cat", "."], HW_GOLD, HW_UPOS),
            GoldTree(["dogs", "bark"], [1, -1], ["NOUN", "VERB"])]
    scores = score_corpus([HW_PRED, [1, -1]], gold)
    # sentence 2 is right, directed and undirected: 2 + 2 of 5 + 2 words
    assert scores.model == AttachmentCounts(4, 5, 7)
    # left-branching gets sentence 2 right (dogs -> bark, bark = root): 3 + 2 of 7
    assert scores.left == AttachmentCounts(5, 5, 7)
    assert scores.right == AttachmentCounts(0, 4, 7)  # bark -> dogs is dogs -> bark reversed
    assert scores.baselines() == pytest.approx({"L": 500 / 7, "R": 0.0, "Un": 500 / 7})
    with pytest.raises(ValueError, match="sentence 1"):
        score_corpus([HW_PRED, [-1]], gold)


def test_table3_layout():
    text = format_table3("EN (DE)", {"sa_shared": (27.8, 42.6), "fa_separate": (17.0, 25.2)},
                         {"L": 34.0, "R": 7.8, "Un": 40.9})
    groups, columns, row = text.splitlines()
    assert groups.split() == ["FA", "SA", "Baseline"]
    assert columns.split() == ["no-shared", "shared", "no-shared", "shared", "hard", "L", "R", "Un"]
    assert row.split() == ["EN", "(DE)", "17.0/25.2", "-", "-", "27.8/42.6", "-", "34.0", "07.8",
                           "40.9"]
    # the columns line up: each cell overlaps its column name
    for name, cell in [("hard", "-"), ("Un", "40.9")]:
        start = columns.rindex(name)
        assert row[start - 3:start + len(name) + 3].strip() == cell
    one_set = format_table3("X", {"sa_1set": (1.0, 2.0)}, {"L": 0, "R": 0, "Un": 0})
    assert "1set" in one_set.splitlines()[1]
    with pytest.raises(ValueError):
        format_table3("X", {"nonsense": (1.0, 2.0)}, {"L": 0, "R": 0, "Un": 0})


def test_read_gold_trees_keeps_upos(tmp_path):
    path = tmp_path / "gold.conllu"
    path.write_text(
        "# text = dogs bark .\n"
        "1\tdogs\tdog\tNOUN\t_\t_\t2\tnsubj\t_\t_\n"
        "2\tbark\tbark\tVERB\t_\t_\t0\troot\t_\t_\n"
        "3\t.\t.\t_\t_\t_\t2\tpunct\t_\t_\n\n",
        encoding="utf-8",
    )
    (tree,) = read_gold_trees(str(path))
    assert tree.words == ["dogs", "bark", "."]
    assert tree.heads == [1, -1, 1]
    assert tree.upos == ["NOUN", "VERB", "PUNCT"]  # '_' with deprel punct counts as PUNCT


def test_unknown_pieces_start_words_unless_the_word_lengths_are_given():
    # "<unk>" lost its ▁ mark: by default it is a word of its own
    assert word_spans(["▁the", "<unk>", "▁saw"]) == [(0, 1), (1, 2), (2, 3)]
    assert spans_of_word_lengths([1, 2, 1]) == [(0, 1), (1, 3), (3, 4)]
    assert spans_of_word_lengths([]) == []
    # "dogs" = "▁do" + "<unk>": the word lengths keep it one word, and the tree is found
    pieces = ["▁the", "▁do", "<unk>", "▁saw", "▁c", "ats", "▁."]
    piece_heads = project_heads_to_subwords(GOLD, PIECES_PER_WORD)
    head, root = one_hot_marginals(piece_heads)
    assert len(word_spans(pieces)) == 6
    words, heads = extract_tree(pieces, head, root, spans_of_word_lengths(PIECES_PER_WORD))
    assert words == ["the", "do<unk>", "saw", "cats", "."]
    assert heads == GOLD
    with pytest.raises(ValueError, match="do not cover"):
        extract_tree(pieces, head, root, spans_of_word_lengths([1, 2]))
