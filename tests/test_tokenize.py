"""``fairseq-syntax-tokenize``: round trips (tokenise, then detokenise with the glue table
learned by tokenising) on English and Japanese, KFTT's real sentences (SHARED_DATA) and
an inline set; errors name file and line; Japanese scores with sacreBLEU's ja-mecab."""
import gzip
import html
import os

import pytest

from conftest import SHARED_DATA, run_cli
from fairseq_syntax.syntax.detokenize import PAIRS, detokenize_line
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.word_tokenizers import glue_flags

KFTT = os.path.join(SHARED_DATA, "kftt")
needs_kftt = pytest.mark.skipif(not os.path.exists(os.path.join(KFTT, "dev.ja.gz")),
                                reason=f"KFTT not found at {KFTT} (FAIRSEQ_SYNTAX_DATA)")

ENGLISH = [
    "He was born in Akahama, Bicchu Province (present-day Soja City), in 1420.",
    "Later he accompanied a mission to Ming Dynasty China and learned ink painting.",
    "He was given the posthumous name &quot;Toyo&quot;.",  # the entities are unescaped
    "It isn't clear whether the works are really his.",
    "Kyoto's temples (e.g. Kinkaku-ji) draw many visitors.",
]
JAPANESE = [
    "諱は「等楊（とうよう）」、もしくは「拙宗（せっしゅう）」と号した。",
    "1420年備中国赤浜（現在の岡山県総社市）に生まれる。",
    "京都大学（Kyoto University）は京都市にある国立大学である。",
    "その後遣明使に随行して中国（明）に渡って中国の水墨画を学んだ。",
    "生家は小田氏という武家とされている。",
]


def _round_trip(tmp_path, train, test, tokenize_args):
    """Tokenise ``train`` (learning the glue table) and ``test`` with the console script,
    detokenise ``test``; returns (test words, detokenised lines)."""
    for name, lines in (("train", train), ("test", test)):
        (tmp_path / f"{name}.raw").write_text("".join(line + "\n" for line in lines),
                                               encoding="utf-8")
    table = tmp_path / "glue.json"
    run_cli(["fairseq-syntax-tokenize", "tokenize", *tokenize_args, "--glue-table", str(table),
             str(tmp_path / "train.raw"), str(tmp_path / "train.tok")])
    if test is not train:
        run_cli(["fairseq-syntax-tokenize", "tokenize", *tokenize_args,
                 str(tmp_path / "test.raw"), str(tmp_path / "test.tok")])
    else:
        (tmp_path / "test.tok").write_bytes((tmp_path / "train.tok").read_bytes())
    run_cli(["fairseq-syntax-tokenize", "detokenize", "--glue-table", str(table),
             str(tmp_path / "test.tok"), str(tmp_path / "test.detok")])
    words = (tmp_path / "test.tok").read_text(encoding="utf-8").splitlines()
    return words, (tmp_path / "test.detok").read_text(encoding="utf-8").splitlines()


def _read_gz(name):
    with gzip.open(os.path.join(KFTT, name), "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def test_english_round_trip_inline(tmp_path):
    words, back = _round_trip(tmp_path, ENGLISH, ENGLISH, ["--lang", "en"])
    assert words[0] == ("He was born in Akahama , Bicchu Province ( present - day Soja City ) , "
                        "in 1420 .")
    assert words[2] == 'He was given the posthumous name " Toyo " .'
    assert back == [html.unescape(line) for line in ENGLISH]


def test_japanese_mecab_round_trip_inline(tmp_path):
    pytest.importorskip("MeCab")
    pytest.importorskip("ipadic")
    words, back = _round_trip(tmp_path, JAPANESE, JAPANESE,
                              ["--lang", "ja", "--tokenizer", "ja-mecab"])
    assert words[4] == "生家 は 小田 氏 という 武家 と さ れ て いる 。"
    assert words[2].split()[2:6] == ["（", "Kyoto", "University", "）"]
    assert back == JAPANESE


def test_japanese_blank_sudachi_round_trip_inline(tmp_path):
    pytest.importorskip("sudachipy")
    pytest.importorskip("sudachidict_core")
    words, back = _round_trip(tmp_path, JAPANESE, JAPANESE, ["--lang", "ja"])
    assert words[4] == "生家 は 小田 氏 と いう 武家 と さ れ て いる 。"
    assert back[1:] == JAPANESE[1:]
    # ）」 meet nowhere else in these 5 lines, and no word beside either token tells, nor
    # do 20 boundaries of their character classes: a space (a corpus-sized table glues)
    assert back[0] == JAPANESE[0].replace("）」、", "） 」、", 1)


@needs_kftt
def test_english_round_trip_on_kftt_dev(tmp_path):
    """Glue learned on tune (1,235 lines), dev (1,166) tokenised and put back: 1,007 lines
    come back exactly; only spaces differ in the others (25 of them hold straight double
    quotes)."""
    raw = [html.unescape(line) for line in _read_gz("dev.en.gz")]
    words, back = _round_trip(tmp_path, _read_gz("tune.en.gz"), raw, ["--lang", "en"])
    assert len(words) == len(back) == 1166
    assert sum(a == b for a, b in zip(raw, back)) == 1007
    assert sum(a != b and '"' in a for a, b in zip(raw, back)) == 25
    assert all(a.replace(" ", "") == b.replace(" ", "") for a, b in zip(raw, back))


@needs_kftt
def test_japanese_mecab_round_trip_on_kftt_dev(tmp_path):
    """Glue learned on tune, dev put back: 1,055 of 1,166 lines exactly; only spaces
    differ in the others (6 lines hold an ideographic space U+3000, which no word keeps)."""
    pytest.importorskip("MeCab")
    pytest.importorskip("ipadic")
    raw = _read_gz("dev.ja.gz")
    words, back = _round_trip(tmp_path, _read_gz("tune.ja.gz"), raw,
                              ["--lang", "ja", "--tokenizer", "ja-mecab"])
    assert len(words) == len(back) == 1166
    assert sum(a == b for a, b in zip(raw, back)) == 1055
    assert sum("\u3000" in a for a in raw) == 6
    assert all(a.replace("\u3000", "").replace(" ", "") == b.replace(" ", "")
               for a, b in zip(raw, back))


def test_unseen_tokens_glue_by_character_classes():
    table = {"(": {"left": 0.0, "right": 1.0}, "1420": {"right": 1.0},
             PAIRS: {"WL WL": 0.99, "WL N": 0.98, "L L": 0.0}}
    # both unseen: the classes decide (kanji-kanji glue, Latin-Latin do not)
    assert detokenize_line(["今北", "洪川"], table) == "今北洪川"
    assert detokenize_line(["Muken", "Jigoku"], table) == "Muken Jigoku"
    assert detokenize_line(["享年", "1420"], table) == "享年1420"
    # one token tells: the table decides, not the classes
    assert detokenize_line(["Jigoku", "(", "x"], table) == "Jigoku (x"
    assert detokenize_line(["今北", "洪川"], {}) == "今北 洪川"  # no pairs: no glue


def test_words_must_be_the_text():
    assert glue_flags("a  b,c", ["a", "b", ",", "c"]) == [False, False, True, True]
    with pytest.raises(SyntaxInputError, match=r"^f:3: the tokenizer changed the text: word 2"):
        glue_flags("a b", ["a", "c"], "f", 3)


def test_empty_line_names_file_and_line(tmp_path):
    (tmp_path / "in.txt").write_text("One line.\n\nThree.\n", encoding="utf-8")
    proc = run_cli(["fairseq-syntax-tokenize", "tokenize", "--lang", "en",
                    str(tmp_path / "in.txt"), str(tmp_path / "out.txt")], check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        f"fairseq-syntax-tokenize: error: {tmp_path / 'in.txt'}:2: no words after "
        "tokenisation (an empty line?)")
    assert not (tmp_path / "out.txt").exists()


def test_japanese_scores_use_ja_mecab():
    """BLEU and chrF as sacreBLEU gives them (ja-mecab for Japanese), RIBES on the given
    words as the RIBES module gives it, with signatures."""
    pytest.importorskip("MeCab")
    pytest.importorskip("ipadic")
    from sacrebleu.metrics import BLEU, CHRF

    from fairseq_syntax.evaluation.translation_scores import bleu_tokenization, score_translations
    from fairseq_syntax.syntax.ribes import corpus_ribes

    refs = JAPANESE[:3]
    hyps = ["諱は「等楊」と号した。", "1420年に備中国赤浜に生まれる。", refs[2]]
    mecab = BLEU(tokenize="ja-mecab").tokenizer
    refs_tok, hyps_tok = [mecab(r) for r in refs], [mecab(h) for h in hyps]
    scores = score_translations(hyps, refs, bleu_tokenization("ja"), hyps_tok, refs_tok)
    assert scores.bleu == BLEU(tokenize="ja-mecab").corpus_score(hyps, [refs]).score
    assert scores.chrf == CHRF().corpus_score(hyps, [refs]).score
    ribes = corpus_ribes([[r.split() for r in refs_tok]], [h.split() for h in hyps_tok])
    assert scores.ribes == 100 * ribes
    assert 0 < scores.ribes < 100
    assert "tok:ja-mecab-" in scores.signatures["bleu"]
    assert scores.signatures["ribes"].startswith("nrefs:1|tok:recipe-words|")
    perfect = score_translations(refs, refs, "ja-mecab", refs_tok, refs_tok)
    assert perfect.bleu == pytest.approx(100.0)
    assert perfect.ribes == 100.0
    english = score_translations(ENGLISH[:2], ENGLISH[:2], bleu_tokenization("en"))
    assert "tok:13a" in english.signatures["bleu"]
    assert english.ribes is None and "ribes" not in english.signatures
    with pytest.raises(ValueError, match="2 references but 3 hypotheses"):
        score_translations(hyps, refs[:2], "ja-mecab")


def test_unknown_language_and_ja_mecab_misuse_are_named():
    from fairseq_syntax.syntax.word_tokenizers import load_tokenizer

    with pytest.raises(SyntaxInputError, match=r"^spacy\.blank\('zz'\) cannot be made: \[E048\]"):
        load_tokenizer("spacy", "zz")
    with pytest.raises(SyntaxInputError, match="tokenises Japanese only"):
        load_tokenizer("ja-mecab", "en")


def test_invisible_format_characters_are_removed(tmp_path):
    """KFTT's Japanese holds U+200E marks that MeCab makes words of their own, which
    sentencepiece then deletes (the preprocessor refuses such a word): the tokeniser
    removes Unicode Cf characters (direction marks, zero-width space, soft hyphen, BOM)
    but keeps ZWNJ and ZWJ, which choose letter forms, and counts what it removed."""
    from fairseq_syntax.syntax.word_tokenizers import load_tokenizer, tokenize_lines

    stats = {}
    lines = ["京都\u200e大学\u200bは\u00ad国立", "می\u200cخواهم \ufeffok"]
    mecab = load_tokenizer("ja-mecab", "ja")
    words = list(tokenize_lines(mecab, lines[:1], stats=stats))
    assert words == list(mecab(["京都大学は国立"])) and "".join(words[0]) == "京都大学は国立"
    assert stats["invisible_removed"] == 3
    words = list(tokenize_lines(load_tokenizer("spacy", "fa"), lines[1:], stats=stats))
    assert words == [["می\u200cخواهم", "ok"]]
    assert stats["invisible_removed"] == 4
    raw = tmp_path / "raw.ja"
    raw.write_text("平安\u200e時代\n", encoding="utf-8")  # MeCab: 平安 | U+200E | 時代
    result = run_cli(["fairseq-syntax-tokenize", "tokenize", "--lang", "ja", "--tokenizer",
                      "ja-mecab", str(raw), str(tmp_path / "tok.ja")])
    assert (tmp_path / "tok.ja").read_text(encoding="utf-8") == "平安 時代\n"
    assert "1 invisible format characters removed" in result.stderr
