"""The piece/word rules (fairseq_syntax.syntax.subwords) on hand-worked sentences."""
import numpy as np
import pytest

from fairseq_syntax.syntax.subwords import (
    pieces_per_word, spans_of_word_lengths, word_forms, word_index_of_pieces, word_links,
    words_row,
)

# "the bakers saw ." with "bakers" in three pieces
PIECES = ["▁the", "▁b", "ak", "ers", "▁saw", "▁."]


def test_a_word_split_into_three_pieces():
    counts = pieces_per_word(PIECES)
    assert counts == [1, 3, 1, 1]
    assert word_index_of_pieces(counts) == [0, 1, 1, 1, 2, 3]
    row = words_row(counts)  # the words side-file row: eos (-1) last
    assert row.tolist() == [0, 1, 1, 1, 2, 3, -1] and row.dtype == np.int32
    assert spans_of_word_lengths(counts) == [(0, 1), (1, 4), (4, 5), (5, 6)]
    assert word_forms(PIECES, counts) == ["the", "bakers", "saw", "."]


def test_unknown_piece_continues_a_word_unless_asked_to_start_one():
    # "bakers" = "▁b" + "<unk>" + "ers": <unk> has lost whatever mark it had
    pieces = ["▁the", "▁b", "<unk>", "ers", "▁saw"]
    assert pieces_per_word(pieces) == [1, 3, 1]
    assert pieces_per_word(pieces, unknown_starts_word=True) == [1, 1, 2, 1]
    assert word_forms(pieces, [1, 1, 2, 1]) == ["the", "b", "<unk>ers", "saw"]
    # the first piece starts a word, marked or not; an <unk> there starts only one
    assert pieces_per_word(["<unk>", "s", "▁x"]) == [2, 1]
    assert pieces_per_word(["<unk>", "s", "▁x"], unknown_starts_word=True) == [2, 1]
    assert pieces_per_word(["ers", "▁saw"]) == [1, 1]


def test_mark_alone_and_empty_words():
    # a bare "▁" piece starts a word whose text follows in the next pieces
    assert pieces_per_word(["▁", "b", "ak", "▁x"]) == [3, 1]
    assert word_forms(["▁", "b", "ak", "▁x"], [3, 1]) == ["bak", "x"]
    # a word that is only the mark has no text: "" or the given stand-in
    assert word_forms(["▁a", "▁"], [1, 1]) == ["a", ""]
    assert word_forms(["▁a", "▁"], [1, 1], empty="▁") == ["a", "▁"]


def test_bpe_none_and_auto_styles():
    assert pieces_per_word(["un@@", "believ@@", "able", "dog"], "bpe") == [3, 1]
    assert pieces_per_word(["a@@"], "bpe") == [1]
    assert pieces_per_word(["▁a", "b"], "none") == [1, 1]
    # auto: sentencepiece rules when any piece has the mark, else one word a piece
    assert pieces_per_word(["a", "▁b", "c"], "auto") == [1, 2]
    assert pieces_per_word(["a", "b@@", "c"], "auto") == [1, 1, 1]
    for style in ("sentencepiece", "bpe", "none", "auto"):
        assert pieces_per_word([], style) == []
    assert word_index_of_pieces([]) == []
    assert words_row([]).tolist() == [-1]
    assert spans_of_word_lengths([]) == []
    with pytest.raises(ValueError, match="unknown subword style 'wordpiece'"):
        pieces_per_word(["a"], "wordpiece")


def test_word_links_collapse_deduplicate_sort_and_drop_outside():
    # source words [s0 s1] [s2]; target words [t0] [t1 t2]
    src, tgt = [0, 0, 1], [0, 1, 1]
    links = [(2, 2), (0, 0), (1, 0), (2, 1), (np.int64(1), np.int64(0)), (3, 0), (0, 3)]
    assert word_links(links, src, tgt) == [(0, 0), (1, 1)]
    assert word_links([], src, tgt) == []
