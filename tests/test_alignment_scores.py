"""AER / precision / recall / F1 with sure and possible links, Pharaoh and NAACL reading,
attention -> hard links, and the ``fairseq-syntax-score-alignments`` command."""
import json
import os

import pytest

from conftest import SHARED_DATA
from fairseq_syntax.cli.score_alignments import main as score_main
from fairseq_syntax.syntax.alignment_scores import (
    AlignmentCounts,
    SentenceAlignment,
    collapse_attention_to_words,
    count_links,
    hard_links_from_attention,
    parse_pharaoh_links,
    read_naacl_file,
    read_pharaoh_file,
    score_alignments,
)
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.subwords import pieces_per_word, word_index_of_pieces, word_links

HANSARDS = os.path.join(SHARED_DATA, "alignment-gold", "en-fr-hansards")
needs_hansards = pytest.mark.skipif(
    not os.path.isfile(os.path.join(HANSARDS, "enfr.gold")),
    reason=f"Hansards gold alignments not found under {HANSARDS} (set FAIRSEQ_SYNTAX_DATA)",
)


def run_score(argv, capsys):
    assert score_main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


# --------------------------------------------------------------------------- scores


def test_hand_worked_sure_and_possible():
    # S = {0-0, 1-1}, P = S + {1-2}; A = {0-0, 1-2, 2-2}
    # |A| = 3, |S| = 2, |A & S| = 1 (0-0), |A & P| = 2 (0-0, 1-2)
    gold = SentenceAlignment.from_links(sure=[(0, 0), (1, 1)], possible=[(1, 2)])
    c = count_links([(0, 0), (1, 2), (2, 2)], gold)
    assert (c.hypothesis, c.sure, c.hyp_and_sure, c.hyp_and_possible) == (3, 2, 1, 2)
    assert c.precision == pytest.approx(2 / 3)
    assert c.recall == pytest.approx(1 / 2)
    assert c.aer == pytest.approx(1 - (1 + 2) / (3 + 2))  # 0.4
    assert c.f1 == pytest.approx(4 / 7)  # 2 * (2/3) * (1/2) / (2/3 + 1/2)


def test_corpus_scores_sum_counts_before_dividing():
    g1 = SentenceAlignment.from_links(sure=[(0, 0)])
    g2 = SentenceAlignment.from_links(sure=[(0, 0), (1, 1), (2, 2)])
    total = score_alignments([[(0, 0)], [(0, 0), (2, 1)]], [g1, g2])
    # sentence 1: A=1, S=1, AS=1; sentence 2: A=2, S=3, AS=1
    assert (total.hypothesis, total.sure, total.hyp_and_sure) == (3, 4, 2)
    assert total.aer == pytest.approx(1 - (2 + 2) / (3 + 4))
    assert total.recall == pytest.approx(2 / 4)  # not the mean of per-sentence recalls


def test_empty_denominators():
    assert AlignmentCounts().aer == 0.0
    c = count_links([], SentenceAlignment.from_links(sure=[(0, 0)]))
    assert (c.precision, c.recall, c.f1, c.aer) == (0.0, 0.0, 0.0, 1.0)


def test_possible_includes_sure_and_duplicates_count_once():
    gold = parse_pharaoh_links("0-0 0p0 1p2 1p2")
    assert gold.sure == {(0, 0)} and gold.possible == {(0, 0), (1, 2)}
    assert count_links([(0, 0), (0, 0)], gold).hypothesis == 1


# --------------------------------------------------------------------------- reading


def test_pharaoh_one_based_and_errors(tmp_path):
    path = tmp_path / "gold.txt"
    path.write_text("1-1 2p3\n\n3-1\n", encoding="utf-8")
    gold = read_pharaoh_file(str(path), index_base=1)
    assert gold[0].sure == {(0, 0)} and gold[0].possible == {(0, 0), (1, 2)}
    assert gold[1].possible == frozenset()
    assert gold[2].sure == {(2, 0)}
    path.write_text("1-1\n0-2\n", encoding="utf-8")
    with pytest.raises(SyntaxInputError, match=r"gold\.txt:2: .*index 0.*1-based"):
        read_pharaoh_file(str(path), index_base=1)
    path.write_text("1-1 1:2\n", encoding="utf-8")
    with pytest.raises(SyntaxInputError, match=r"gold\.txt:1: link 2 '1:2'"):
        read_pharaoh_file(str(path))
    path.write_text("0-1 1p2\n", encoding="utf-8")
    with pytest.raises(SyntaxInputError, match="possible link"):
        read_pharaoh_file(str(path), allow_possible=False)


def test_naacl_format(tmp_path):
    path = tmp_path / "gold.naacl"
    path.write_text("1 1 1 S\n1 2 3 P 0.8\n1 0 2 S\n3 2 2\n", encoding="utf-8")
    gold = read_naacl_file(str(path))
    assert len(gold) == 3
    assert gold[0].sure == {(0, 0)} and gold[0].possible == {(0, 0), (1, 2)}  # NULL link dropped
    assert gold[1].possible == frozenset()
    assert gold[2].sure == {(1, 1)}
    path.write_text("1 1 1 X\n", encoding="utf-8")
    with pytest.raises(SyntaxInputError, match=r"gold\.naacl:1: link kind"):
        read_naacl_file(str(path))


# --------------------------------------------------------------------------- attention -> links


def test_word_index_of_pieces():
    pieces = ["\u2581the", "\u2581", "b", "ak", "ers", "\u2581sa", "w", "\u2581."]
    assert word_index_of_pieces(pieces_per_word(pieces)) == [0, 1, 1, 1, 1, 2, 2, 3]
    assert word_index_of_pieces(pieces_per_word(["un@@", "believ@@", "able", "dog"], "bpe")
                                ) == [0, 0, 0, 1]
    assert word_index_of_pieces(pieces_per_word(["a", "b"], "none")) == [0, 1]


def test_collapse_sums_source_pieces_and_averages_target_pieces():
    # source words: [s0 s1] [s2], then eos; target words: [t0] [t1 t2]
    attention = [
        [0.1, 0.2, 0.6, 0.1],
        [0.5, 0.3, 0.1, 0.1],
        [0.1, 0.1, 0.2, 0.6],
    ]
    words = collapse_attention_to_words(attention, [0, 0, 1], [0, 1, 1])
    assert words[0] == pytest.approx([0.3, 0.6, 0.1])
    assert words[1] == pytest.approx([(0.8 + 0.2) / 2, (0.1 + 0.2) / 2, (0.1 + 0.6) / 2])
    # t0 -> s-word 1 (0.6 > 0.2); t1: maximum 0.5 on word 0 (0.5 > 0.35 eos)
    assert hard_links_from_attention(words, 2, 0.2) == [(1, 0), (0, 1)]


def test_threshold_and_eos_maximum_mean_unaligned():
    rows = [[0.2, 0.2, 0.2, 0.4], [0.19, 0.18, 0.17, 0.46], [0.45, 0.1, 0.05, 0.4]]
    # row 0: maximum on eos; row 1: eos; row 2: word 0 with 0.45
    assert hard_links_from_attention(rows, 3, 0.2) == [(0, 2)]
    flat = [[0.2, 0.1, 0.1, 0.15]]  # maximum 0.2 is not above the threshold
    assert hard_links_from_attention(flat, 3, 0.2) == []
    assert word_links([(0, 0), (1, 0), (2, 1)], [0, 0, 1], [0, 1]) == [(0, 0), (1, 1)]


# --------------------------------------------------------------------------- generate output


GENERATE_SOFT = (
    "S-1\t\u2581a \u2581bak ers \u2581.\n"
    "T-1\t\u2581ko \u2581bra di \u2581.\n"
    "H-1\t-1.5\t\u2581ko \u2581bra di \u2581.\n"
    "D-1\t-1.5\tko bradi .\n"
    "P-1\t-0.1 -0.2 -0.3 -0.4 -0.5\n"
    # rows: ko, bra, di, ., eos; columns: a, bak, ers, ., eos
    "A-1\t0.7,0.1,0.1,0.05,0.05 0.1,0.3,0.4,0.1,0.1 0.1,0.5,0.2,0.1,0.1 "
    "0.05,0.05,0.05,0.15,0.7 0.0,0.0,0.0,0.1,0.9\n"
    "S-0\t\u2581a \u2581.\n"
    "T-0\t\u2581ko \u2581.\n"
    "H-0\t-0.5\t\u2581ko \u2581.\n"
    "A-0\t0.1,0.1,0.8 0.1,0.8,0.1 0.0,0.0,1.0\n"
)


def test_generate_soft_output(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text("2026-01-01 | INFO | a log line\n" + GENERATE_SOFT, encoding="utf-8")
    gold = tmp_path / "gold.align"
    gold.write_text("1-1\n0-0 1-1 2-2\n", encoding="utf-8")
    links = tmp_path / "links.txt"
    scores = run_score(["--generate", str(gen), "--gold", str(gold), "--write-links", str(links)],
                       capsys)
    # sentence 0: ko -> eos (0.8), so unaligned; '.' -> '.' (0.8)
    # sentence 1: ko -> a (0.7); bradi: mean of rows -> bakers ((0.3+0.4) + (0.5+0.2))/2 = 0.7;
    #             '.' -> eos (0.7): unaligned
    assert links.read_text().splitlines() == ["1-1", "0-0 1-1"]
    assert scores["hypothesis_links"] == 3 and scores["sure_links"] == 4
    assert scores["hyp_and_sure"] == 3
    assert scores["aer"] == pytest.approx(1 - 6 / 7)
    scores = run_score(["--generate", str(gen), "--gold", str(gold), "--threshold", "0.75"], capsys)
    assert scores["hypothesis_links"] == 1  # only 0.8 passes, the two 0.7 do not


def test_generate_hard_output_and_mismatch_errors(tmp_path, capsys):
    gold = tmp_path / "gold.align"
    gold.write_text("0-0 1-1\n", encoding="utf-8")
    gen = tmp_path / "gen.txt"
    gen.write_text("S-0\t\u2581a \u2581bak ers\nH-0\t-1\t\u2581ko \u2581bra\nA-0\t0-0 2-1\n",
                   encoding="utf-8")
    scores = run_score(["--generate", str(gen), "--gold", str(gold)], capsys)
    assert scores["aer"] == 0.0 and scores["hypothesis_links"] == 2
    # Hypothesis differs from the reference: the scores would be meaningless.
    gen.write_text("S-0\t\u2581a \u2581b\nT-0\t\u2581ko \u2581x\nH-0\t-1\t\u2581ko \u2581bra\n"
                   "A-0\t0-0 1-1\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        score_main(["--generate", str(gen), "--gold", str(gold)])
    err = capsys.readouterr().err
    assert "gen.txt:3: sentence 0: the hypothesis (H-) is not the reference" in err
    # Soft rows that do not fit the pieces (e.g. --post-process was used).
    gen.write_text("S-0\ta b\nH-0\t-1\tko bra\nA-0\t0.5,0.5 0.5,0.5 1,0\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        score_main(["--generate", str(gen), "--gold", str(gold)])
    err = capsys.readouterr().err
    assert "gen.txt:3: sentence 0: the soft A- line has 3 rows of 2 values" in err
    # A gold link outside the sentence is an error naming the gold file and line.
    gen.write_text("S-0\t\u2581a\nH-0\t-1\t\u2581ko \u2581bra\nA-0\t0-0 0-1\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        score_main(["--generate", str(gen), "--gold", str(gold)])
    assert "gold.align:1: source index 1 is out of range" in capsys.readouterr().err


# --------------------------------------------------------------------------- Hansards gold


def _read_hansards():
    sure, possible = [], []
    with open(os.path.join(HANSARDS, "enfr.gold"), encoding="utf-8") as f:
        for line in f:
            s, p = set(), set()
            for tok in line.split():
                if "p" in tok:
                    i, j = tok.split("p")
                    p.add((int(i), int(j)))
                else:
                    i, j = tok.split("-")
                    s.add((int(i), int(j)))
            sure.append(s)
            possible.append(p | s)
    return sure, possible


@needs_hansards
def test_hansards_gold_against_itself_and_a_shifted_copy(tmp_path, capsys):
    gold = os.path.join(HANSARDS, "enfr.gold")
    text = os.path.join(HANSARDS, "enfr.src-tgt")
    sure, possible = _read_hansards()
    assert len(sure) == 447
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(s)) + "\n" for s in sure))
    common = ["--gold", gold, "--gold-index-base", "1", "--hypothesis-index-base", "1"]
    scores = run_score(["--hypothesis", str(hyp), "--text", text, *common], capsys)
    assert scores["aer"] == 0.0 and scores["precision"] == 1.0 and scores["recall"] == 1.0
    assert scores["sentences"] == 447

    # Shift every English index by one: a known figure from a direct set computation.
    shifted = [{(i + 1, j) for i, j in s} for s in sure]
    hyp.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(s)) + "\n" for s in shifted))
    a = sum(len(h) for h in shifted)
    s_n = sum(len(s) for s in sure)
    a_s = sum(len(h & s) for h, s in zip(shifted, sure))
    a_p = sum(len(h & p) for h, p in zip(shifted, possible))
    scores = run_score(["--hypothesis", str(hyp), *common], capsys)
    assert scores["aer"] == pytest.approx(1 - (a_s + a_p) / (a + s_n))
    assert scores["precision"] == pytest.approx(a_p / a)
    assert scores["recall"] == pytest.approx(a_s / s_n)
    assert 0.5 < scores["aer"] < 1.0  # a shift is a poor alignment, but not disjoint

    # The same file read as 0-based does not fit the sentences: a clear error.
    with pytest.raises(SystemExit):
        score_main(["--hypothesis", str(hyp), "--text", text, "--gold", gold])
    err = capsys.readouterr().err
    assert "enfr.gold:" in err and "out of range" in err


def test_hypothesis_line_count_must_match(tmp_path, capsys):
    gold = tmp_path / "gold"
    gold.write_text("0-0\n1-1\n")
    hyp = tmp_path / "hyp"
    hyp.write_text("0-0\n")
    with pytest.raises(SystemExit):
        score_main(["--hypothesis", str(hyp), "--gold", str(gold)])
    assert "1 hypothesis lines but the gold file" in capsys.readouterr().err


def test_text_output(tmp_path, capsys):
    gold = tmp_path / "gold"
    gold.write_text("0-0 1-1\n")
    assert score_main(["--hypothesis", str(gold), "--gold", str(gold)]) == 0
    out = capsys.readouterr().out
    assert "AER 0.00" in out and "precision 100.00" in out
