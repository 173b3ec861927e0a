"""Raw text to space-separated words and back: the tokenisation of the recipes' text.

* **Tokenizers** (:func:`load_tokenizer`). ``spacy``: a spaCy pipeline's own tokenizer
  (``pipeline``, name or path: the one ``fairseq-interactive`` applies to raw input when
  the data-bin records ``--source-tokenization parser``) or ``spacy.blank(lang)``'s
  rule-based one (Japanese: SudachiPy, split mode A; needs ``sudachipy`` and
  ``sudachidict_core``). ``ja-mecab``: MeCab with the IPA dictionary, exactly sacreBLEU's
  ``ja-mecab`` tokenizer (``mecab-python3`` + ``ipadic``), so the words are the units
  that ``BLEU(tokenize='ja-mecab')`` counts.
* **Words.** Each line's words are its tokens without whitespace, written separated by
  single spaces: the units every later step (parse, alignment, subword projection)
  uses. HTML entities (``&amp;``, ``&quot;``, ...) are unescaped first.
* **Glue.** The words are found again in the (unescaped) line, so whether each word was
  written without a space after the one before it is known; :class:`GlueCounter` counts
  it per word into the table that :mod:`fairseq_syntax.syntax.detokenize` reads.
"""
import html
import json
import re
import unicodedata
from collections import defaultdict
from typing import Callable, Dict, Iterable, Iterator, List, Sequence, Tuple

from .detokenize import PAIRS, boundary, glue_keys
from .errors import SyntaxInputError
from .text_io import atomic_text_file, iter_decoded_lines

SPACY, JA_MECAB = "spacy", "ja-mecab"
TOKENIZERS = (SPACY, JA_MECAB)

MIN_PAIR_BOUNDARIES = 20  # a character-class pair's share is kept when seen this often

_ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);")

# texts in, one word list per text out, in order
Tokenizer = Callable[[Sequence[str]], Iterator[List[str]]]


def unescape_entities(line: str) -> Tuple[str, bool]:
    """``(line with HTML entities unescaped, whether it held any)``."""
    if _ENTITY.search(line):
        return html.unescape(line), True
    return line, False


# ZERO WIDTH NON-JOINER and JOINER choose letter forms in Persian, Indic scripts and emoji
KEPT_FORMAT_CHARACTERS = {"\u200c", "\u200d"}


def remove_invisible(line: str) -> Tuple[str, int]:
    """``(line without its invisible format characters, how many)``: Unicode category Cf
    (direction marks such as U+200E, zero-width space, soft hyphen, byte order mark), but
    for ZWNJ and ZWJ. A word made of them alone would be a word that sentencepiece's
    normalisation deletes (KFTT's Japanese holds a few U+200E that MeCab makes words)."""
    if line.isascii():
        return line, 0
    kept = "".join(c for c in line
                   if c in KEPT_FORMAT_CHARACTERS or unicodedata.category(c) != "Cf")
    return kept, len(line) - len(kept)


def _spacy_tokenizer(lang: str, pipeline: str = None, batch_size: int = 1000) -> Tokenizer:
    import spacy

    if pipeline:
        from .spacy_parser import resolve_pipeline

        folder, _ = resolve_pipeline(pipeline)
        tokenizer = spacy.load(folder).tokenizer
    else:
        try:
            tokenizer = spacy.blank(lang).tokenizer
        except ImportError as err:  # an unknown language, or blank("ja") without sudachipy
            hint = ("; Japanese needs sudachipy and sudachidict_core, or use --tokenizer "
                    "ja-mecab" if lang == "ja" else "")
            raise SyntaxInputError(f"spacy.blank({lang!r}) cannot be made: {err}{hint}") from None

    def words(texts: Sequence[str]) -> Iterator[List[str]]:
        for doc in tokenizer.pipe(texts, batch_size=batch_size):
            yield [w for t in doc if not t.is_space for w in t.text.split()]

    return words


def mecab_tagger():
    """sacreBLEU's ``ja-mecab`` tokenizer (MeCab + IPAdic, wakati output)."""
    try:
        from sacrebleu.tokenizers.tokenizer_ja_mecab import TokenizerJaMecab
        return TokenizerJaMecab()
    except ImportError as err:
        raise SyntaxInputError(
            f"the ja-mecab tokenizer needs mecab-python3 and ipadic ({err}): "
            'pip install "fairseq-syntax[ja]" (or mecab-python3==1.0.10 ipadic==1.0.0)'
        ) from None


def _mecab_tokenizer() -> Tokenizer:
    tagger = mecab_tagger()

    def words(texts: Sequence[str]) -> Iterator[List[str]]:
        for text in texts:
            yield tagger(text).split()

    return words


def load_tokenizer(kind: str, lang: str, pipeline: str = None) -> Tokenizer:
    """A :data:`Tokenizer`: ``kind`` ``spacy`` (``pipeline``'s tokenizer, else
    ``spacy.blank(lang)``) or ``ja-mecab`` (Japanese only)."""
    if kind == JA_MECAB:
        if lang != "ja" or pipeline:
            raise SyntaxInputError(f"--tokenizer {JA_MECAB} tokenises Japanese only "
                                   "(--lang ja, no --pipeline)")
        return _mecab_tokenizer()
    if kind != SPACY:
        raise SyntaxInputError(f"unknown tokenizer {kind!r} (one of {', '.join(TOKENIZERS)})")
    return _spacy_tokenizer(lang, pipeline)


def glue_flags(text: str, words: Sequence[str], path: str = None, line: int = None) -> List[bool]:
    """``glued[k]``: word ``k`` follows word ``k - 1`` in ``text`` with no whitespace
    between (``glued[0]`` is False). The words must be ``text`` less its whitespace."""
    glued, at = [], 0
    for k, word in enumerate(words):
        start = at
        while at < len(text) and text[at].isspace():
            at += 1
        if not text.startswith(word, at):
            raise SyntaxInputError(
                f"the tokenizer changed the text: word {k + 1} {word!r} is not at character "
                f"{at + 1} of the line", path, line)
        glued.append(k > 0 and at == start)
        at += len(word)
    if text[at:].strip():
        raise SyntaxInputError(f"the tokenizer dropped the text after character {at}: "
                               f"{text[at:at + 20]!r}", path, line)
    return glued


def is_word(token: str) -> bool:
    """A token that starts and ends with a letter or digit (glue is counted next to words
    only: a clitic such as ``'s`` is no word, so ``India`` before it learns nothing)."""
    return token[0].isalnum() and token[-1].isalnum()


class GlueCounter:
    """Per token (:func:`~fairseq_syntax.syntax.detokenize.glue_keys`: a straight quote
    as opening or closing): how often it came after a word and was glued to it
    (``left``), and before a word with the word glued to it (``right``); per character-class pair
    (:func:`~fairseq_syntax.syntax.detokenize.boundary`), how often the two tokens that
    met there were glued."""

    def __init__(self):
        # token -> [after a word, glued to it, before a word, glued to it]
        self.counts: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0, 0])
        self.pairs: Dict[str, List[int]] = defaultdict(lambda: [0, 0])  # [boundaries, glued]

    def add(self, words: Sequence[str], glued: Sequence[bool]) -> None:
        keys = glue_keys(words)
        for k in range(1, len(words)):
            before, here = words[k - 1], words[k]
            pair = self.pairs[boundary(before, here)]
            pair[0] += 1
            pair[1] += glued[k]
            if is_word(before):
                self.counts[keys[k]][0] += 1
                self.counts[keys[k]][1] += glued[k]
            if is_word(here):
                self.counts[keys[k - 1]][2] += 1
                self.counts[keys[k - 1]][3] += glued[k]

    def table(self) -> Dict[str, Dict[str, float]]:
        """``{token: {"left": share, "right": share}, PAIRS: {pair: share}}``; a token's
        share only where it was seen on that side of a word."""
        table = {}
        for t, (after_word, left, before_word, right) in self.counts.items():
            entry = {}
            if after_word:
                entry["left"] = round(left / after_word, 4)
            if before_word:
                entry["right"] = round(right / before_word, 4)
            table[t] = entry
        table[PAIRS] = {pair: round(glued / n, 4) for pair, (n, glued) in self.pairs.items()
                        if n >= MIN_PAIR_BOUNDARIES}
        return table

    def write(self, path: str) -> None:
        with atomic_text_file(path) as out:
            json.dump(self.table(), out, ensure_ascii=False, sort_keys=True, indent=0)


def tokenize_lines(tokenizer: Tokenizer, lines: Iterable[str], path: str = "<input>",
                   glue: GlueCounter = None, stats: Dict[str, int] = None,
                   chunk: int = 10000) -> Iterator[List[str]]:
    """The words of each raw line (entities unescaped, invisible format characters
    removed: :func:`remove_invisible`), in order, ``chunk`` lines at a time; counts glue
    into ``glue``. A line without words is an error naming ``path`` and the line;
    ``stats`` gets ``lines``, ``unescaped`` and ``invisible_removed``."""
    stats = {} if stats is None else stats
    stats.setdefault("lines", 0)
    stats.setdefault("unescaped", 0)
    stats.setdefault("invisible_removed", 0)
    batch: List[str] = []

    def flush():
        first = stats["lines"] + 1
        for offset, (text, words) in enumerate(zip(batch, tokenizer(batch))):
            number = first + offset
            if not words:
                raise SyntaxInputError("no words after tokenisation (an empty line?)",
                                       path, number)
            if glue is not None:
                glue.add(words, glue_flags(text, words, path, number))
            yield words
        stats["lines"] += len(batch)
        batch.clear()

    for line in lines:
        text, changed = unescape_entities(line.rstrip("\n"))
        stats["unescaped"] += changed
        text, removed = remove_invisible(text)
        stats["invisible_removed"] += removed
        batch.append(text)
        if len(batch) >= chunk:
            yield from flush()
    if batch:
        yield from flush()


def tokenize_file(input_path: str, output_path: str, lang: str, kind: str = SPACY,
                  pipeline: str = None, glue_table: str = None) -> Dict[str, int]:
    """Tokenise ``input_path`` into ``output_path`` (``-``: stdin, stdout; a file is
    replaced only when every line tokenised); with ``glue_table``, write the glue
    statistics there. Returns ``{"lines": n, "unescaped": n, "invisible_removed": n}`` and
    reports it on stderr."""
    import sys

    tokenizer = load_tokenizer(kind, lang, pipeline)
    glue = GlueCounter() if glue_table else None
    stats: Dict[str, int] = {}
    name = "<stdin>" if input_path == "-" else input_path
    source = "/dev/stdin" if input_path == "-" else input_path
    lines = (text for _, text in iter_decoded_lines(source))
    words = tokenize_lines(tokenizer, lines, name, glue, stats)
    if output_path == "-":
        for row in words:
            sys.stdout.write(" ".join(row) + "\n")
    else:
        with atomic_text_file(output_path) as out:
            for row in words:
                out.write(" ".join(row) + "\n")
    if glue is not None:
        glue.write(glue_table)
    print(f"{name}: {stats['lines']} lines tokenised ({stats['unescaped']} with HTML entities "
          f"unescaped, {stats['invisible_removed']} invisible format characters removed) -> "
          f"{output_path}", file=sys.stderr)
    return stats
