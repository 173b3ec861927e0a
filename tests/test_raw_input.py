"""Raw input for fairseq-interactive (fairseq_syntax.data.raw_input): a ``▁`` (U+2581) in
the text is read as text, as preprocessing reads it, with a warning."""
import logging

import sentencepiece as spm
import torch
from fairseq.data import Dictionary

from fairseq_syntax.data.raw_input import RawInputAdapter

WORD_START = "\u2581"


def _as_preprocessing_encodes(sp, dictionary, words):
    """Pieces per word and token ids, each word encoded alone (fairseq-syntax-preprocess)."""
    per_word = sp.encode(words, out_type=str)
    pieces = [p for word in per_word for p in word]
    tokens = dictionary.encode_line(" ".join(pieces), add_if_not_exist=False, append_eos=True)
    return [len(p) for p in per_word], tokens.long()


def test_word_start_inside_text_is_text_not_unknown_pieces(synthetic_raw, synthetic_databin,
                                                           caplog):
    dictionary = Dictionary.load(str(synthetic_databin / "dict.en.txt"))
    sp = spm.SentencePieceProcessor(model_file=str(synthetic_databin / "spm.model"))
    words = (synthetic_raw / "valid.en").read_text().splitlines()[0].split()
    k = max(range(len(words)), key=lambda i: len(words[i]))
    words[k] = words[k][:2] + WORD_START + words[k][2:]  # e.g. "bo▁ys"
    line = " ".join(words)

    processor = RawInputAdapter(str(synthetic_databin), dictionary)
    with caplog.at_level(logging.WARNING, logger="fairseq_syntax.data.raw_input"):
        (source,) = processor.encode([line])
    counts, tokens = _as_preprocessing_encodes(sp, dictionary, words)
    assert source.words == words  # one word each, not one word of the whole line
    assert source.pieces_per_word == counts
    assert torch.equal(source.tokens, tokens)
    assert source.tokens.eq(dictionary.unk()).sum() == tokens.eq(dictionary.unk()).sum()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "U+2581" in warnings[0] and "read as text" in warnings[0]
    assert f"in {words[k]!r}" in warnings[0]  # names the word that holds it

    # fairseq-interactive's --bpe sentencepiece reads it as text too, and warns
    bpe = RawInputAdapter(str(synthetic_databin), dictionary)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fairseq_syntax.data.raw_input"):
        bpe.encode([line], lambda text: " ".join(sp.encode(text, out_type=str)))
    assert any("U+2581" in r.getMessage() for r in caplog.records)


def test_a_line_of_dictionary_pieces_is_kept_as_pieces(synthetic_raw, synthetic_databin,
                                                       caplog):
    """fairseq-generate's S- lines (pieces of the dictionary) keep their pieces, unwarned."""
    dictionary = Dictionary.load(str(synthetic_databin / "dict.en.txt"))
    sp = spm.SentencePieceProcessor(model_file=str(synthetic_databin / "spm.model"))
    words = (synthetic_raw / "valid.en").read_text().splitlines()[1].split()
    counts, tokens = _as_preprocessing_encodes(sp, dictionary, words)
    assert max(counts) > 1, "the test needs a word split into pieces"
    pieces = dictionary.string(tokens[:-1])
    assert WORD_START in pieces and tokens.ne(dictionary.unk()).all()
    with caplog.at_level(logging.WARNING, logger="fairseq_syntax.data.raw_input"):
        (source,) = RawInputAdapter(str(synthetic_databin), dictionary).encode([pieces])
    assert source.pieces == pieces.split()
    assert source.words == words
    assert source.pieces_per_word == counts
    assert torch.equal(source.tokens, tokens)
    assert not caplog.records
