"""The fast CoNLL-U reader for checked files (``iter_checked_conllu_trees``) gives exactly
the trees of the careful one (``iter_conllu_trees``, the definition) on every file the
careful one accepts: the shared UD treebanks and hand-written tricky files."""
import glob
import os

import pytest

from conftest import SHARED_DATA
from fairseq_syntax.syntax.conllu_io import iter_checked_conllu_trees, iter_conllu_trees
from fairseq_syntax.syntax.errors import SyntaxInputError

UD_FILES = sorted(glob.glob(os.path.join(SHARED_DATA, "ud", "**", "*.conllu"), recursive=True))


def _word(i, form, head, deprel="dep", sep="\t"):
    return sep.join([str(i), form, "_", "_", "_", "_", str(head), deprel, "_", "_"])


TRICKY = {
    "ranges_and_empty_nodes": "# sent_id = 1\n# text = Im Haus\n1-2\tIm\t_\t_\t_\t_\t_\t_\t_\t_\n"
    + _word(1, "In", 3) + "\n" + _word(2, "dem", 3) + "\n"
    + "2.1\tleer\t_\t_\t_\t_\t_\t_\t3:dep\t_\n" + _word(3, "Haus", 0, "root") + "\n\n",
    "comments_inside_a_sentence": _word(1, "a", 2) + "\n# inside\n" + _word(2, "b", 0, "root")
    + "\n  # indented\n\n# before\n" + _word(1, "c", 0, "root") + "\n# after\n\n",
    "no_final_blank_line": _word(1, "a", 0, "root") + "\n\n" + _word(1, "b", 0, "root"),
    "no_final_newline_after_comment": _word(1, "a", 0, "root") + "\n# end",
    "crlf": "# text = a b\r\n" + _word(1, "a", 2) + "\r\n" + _word(2, "b", 0, "root")
    + "\r\n\r\n" + _word(1, "c", 0, "root") + "\r\r\n\r\n",
    "bom": "\ufeff# text = a\n" + _word(1, "a", 0, "root") + "\n\n",
    "bom_on_a_word_line": "\ufeff" + _word(1, "a", 0, "root") + "\n\n",
    "underscore_and_empty_deprel": _word(1, "a", 3, "_") + "\n" + _word(2, "b", 3, "")
    + "\n" + "3\tc\t_\t_\t_\t_\t0\n\n",
    "underscore_form": _word(1, "_", 0, "root") + "\n\n",
    "trailing_whitespace_and_tabs": _word(1, "a", 2) + " \t\n" + _word(2, "b", 0, "root")
    + "\t\t\n\n",
    "leading_whitespace": "  " + _word(1, "a", 0, "root") + "\n\n",
    "spaces_for_tabs": _word(1, "a", 2, sep="  ") + "\n" + _word(2, "b", 0, "root", sep="   ")
    + "\n\n",
    "blank_lines_of_whitespace": "\n \n" + _word(1, "a", 0, "root") + "\n \t\n\x0c\n\n"
    + _word(1, "b", 0, "root") + "\n\u3000\n",
    "standard_global_columns": "# global.columns = ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL "
    "DEPS MISC\n" + _word(1, "a", 0, "root") + "\n\n",
    "unicode_words": _word(1, "Straße", 2) + "\n" + _word(2, "日本\u00a0語", 0, "root") + "\n\n",
}


def _assert_same_trees(path):
    """The fast reader's trees equal the careful reader's, field by field; skip a file
    the careful reader refuses."""
    try:
        careful = list(iter_conllu_trees(path))
    except SyntaxInputError as err:
        pytest.skip(f"the careful reader refuses {path}: {err}")
    fast = list(iter_checked_conllu_trees(path))
    assert len(fast) == len(careful)
    for a, b in zip(fast, careful):
        assert (a.words, a.heads, a.deprels, a.line) == (b.words, b.heads, b.deprels, b.line)


@pytest.mark.parametrize("path", UD_FILES, ids=os.path.basename)  # none: skipped
def test_ud_treebanks(path):
    _assert_same_trees(path)


@pytest.mark.parametrize("name", sorted(TRICKY))
def test_tricky_files(tmp_path, name):
    path = tmp_path / f"{name}.conllu"
    path.write_bytes(TRICKY[name].encode("utf-8"))
    _assert_same_trees(str(path))


def test_other_global_columns_refused(tmp_path):
    """conllu would read the columns a ``# global.columns`` names (a reader that ignores
    the comment, the ten): both readers refuse it, naming file and line, so a file the
    checks pass is read the same by both."""
    from fairseq_syntax.syntax.errors import SyntaxInputError

    path = tmp_path / "columns.conllu"
    for columns in ("= FORM ID LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC", "=ID FORM HEAD"):
        path.write_text(f"# global.columns {columns}\n"
                        "1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
        for reader in (iter_conllu_trees, iter_checked_conllu_trees):
            with pytest.raises(SyntaxInputError, match=f"^{path}:1: # global.columns names"):
                list(reader(str(path)))
