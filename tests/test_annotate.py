"""The annotate step shared by preprocessing and raw input (issue 16 item 2), on a
hand-written sentence with a hand-written parse, worked out by hand.

"birds sang loudly", sentencepiece pieces ▁bird s | ▁sang | ▁loud ly (pieces 0-4, eos 5),
parse birds <- sang -> loudly (word heads [1, -1, 1]).
"""
import numpy as np

from fairseq_syntax.syntax.annotate import annotate, encode_words

WORDS = ["birds", "sang", "loudly"]
PIECES = {"birds": ["▁bird", "s"], "sang": ["▁sang"], "loudly": ["▁loud", "ly"]}
WORD_HEADS = [1, -1, 1]


class HandSentencepiece:
    """Stands in for a sentencepiece model: the pieces above; records what it encodes."""

    def __init__(self):
        self.calls = []

    def encode(self, words, out_type=str):
        self.calls.append(list(words))
        return [PIECES[w] for w in words]


def test_words_are_encoded_one_by_one_each_distinct_word_once():
    sp = HandSentencepiece()
    got = encode_words(sp, [WORDS, ["sang", "birds", "sang"]])
    assert got == [[["▁bird", "s"], ["▁sang"], ["▁loud", "ly"]],
                   [["▁sang"], ["▁bird", "s"], ["▁sang"]]]
    assert sp.calls == [["birds", "loudly", "sang"]]


def test_heads_words_and_head_outward_tree_by_hand():
    counts = [len(p) for p in encode_words(HandSentencepiece(), [WORDS])[0]]
    assert counts == [2, 1, 2]
    out = annotate(counts, WORD_HEADS)
    # first piece of a word -> first piece of its head; other pieces -> their first
    # piece; eos -> the root word's first piece (▁sang, piece 2)
    assert out.heads.tolist() == [2, 0, -1, 2, 3, 2]
    assert out.words.tolist() == [0, 0, 1, 2, 2, -1]
    # word tree, head-outward: (sang, loudly) = node 3, then (birds, node 3) = node 4.
    # pieces: (▁bird, s) = 5, (▁loud, ly) = 6; then (▁sang, 6) = 7, (5, 7) = 8
    assert out.tree.tolist() == [0, 1, 3, 4, 2, 6, 5, 7]
    assert out.heads.dtype == out.words.dtype == out.tree.dtype == np.int32
    assert out.links is None


def test_a_given_word_tree_replaces_the_head_outward_one():
    # ((birds sang) loudly): word rows (0, 1) = node 3, (3, 2) = node 4
    out = annotate([2, 1, 2], WORD_HEADS, word_tree=np.array([[0, 1], [3, 2]]))
    # pieces (▁bird, s) = 5, (▁loud, ly) = 6; then (5, ▁sang) = 7, (7, 6) = 8
    assert out.tree.tolist() == [0, 1, 3, 4, 5, 2, 7, 6]
    assert out.heads.tolist() == [2, 0, -1, 2, 3, 2]


def test_word_links_are_projected_onto_every_piece_pair():
    # target "chantaient fort·ement"-like: pieces per target word [1, 2]
    out = annotate([2, 1, 2], word_links=[(2, 0), (0, 1)], target_pieces_per_word=[1, 2])
    assert out.links == [(0, 1), (0, 2), (1, 1), (1, 2), (3, 0), (4, 0)]
    assert out.heads is None and out.tree is None


def test_a_sentence_without_words_is_eos_alone():
    out = annotate([], [])
    assert out.heads.tolist() == [-1]
    assert out.words.tolist() == [-1]
    assert out.tree.tolist() == []
