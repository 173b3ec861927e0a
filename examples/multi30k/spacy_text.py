"""Tokenise raw Multi30k text with spaCy's tokenizers, and detokenise translations.

    python spacy_text.py tokenize --lang en --pipeline en_core_web_sm IN OUT
    python spacy_text.py tokenize --lang de --glue-table glue.de.json IN OUT
    python spacy_text.py detokenize --glue-table glue.de.json IN OUT

tokenize
    HTML entities are unescaped first (16 lines of Multi30k's train.en and 1 of train.de
    hold ``&amp;``), then each line is tokenised: with ``--pipeline``, by that spaCy
    pipeline's own tokenizer (the one ``fairseq-interactive`` applies to raw input when
    the data-bin records ``--source-tokenization parser``), else by ``spacy.blank(LANG)``'s
    rule-based tokenizer (no model needed: German has no parser here). The words are
    written separated by single spaces: the whitespace tokens every later step (parse,
    alignment, subword projection) uses. With ``--glue-table`` the tokenizer's own
    whitespace information is counted per token: how often a token had no space before
    it (``left``) and after it (``right``).

detokenize
    Joins the space-separated tokens of each line again: a token is glued to the one
    before it when the glue table says it (or its predecessor, looking right) was
    written without a space in at least half of its training occurrences: ``left[t]``
    is counted over the occurrences of ``t`` after a word (a token with a letter or
    digit), ``right[t]`` over those before a word, so ``.`` glues left, ``(`` right,
    ``-`` in ``saftig-grünes`` both ways, and a word before ``.`` learns nothing. Unseen
    tokens are separated by a space.
"""
import argparse
import html
import json
import re
import sys
from collections import defaultdict

from fairseq_syntax.syntax.detokenize import detokenize_file

_ENTITY = re.compile(r"&(#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);")


def load_tokenizer(lang, pipeline=None):
    import spacy

    if pipeline:
        from fairseq_syntax.syntax.errors import SyntaxInputError
        from fairseq_syntax.syntax.spacy_parser import resolve_pipeline

        try:
            folder, _ = resolve_pipeline(pipeline)
        except SyntaxInputError as err:
            sys.exit(f"spacy_text.py: {err}")
        return spacy.load(folder).tokenizer
    return spacy.blank(lang).tokenizer


def tokenize(args):
    tokenizer = load_tokenizer(args.lang, args.pipeline)
    # token -> [after a word, glued to it, before a word, glued to it]
    counts = defaultdict(lambda: [0, 0, 0, 0])
    unescaped = 0
    with open(args.input, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    texts = []
    for line in lines:
        if _ENTITY.search(line):
            line, unescaped = html.unescape(line), unescaped + 1
        texts.append(line)
    with open(args.output, "w", encoding="utf-8") as out:
        for number, doc in enumerate(tokenizer.pipe(texts, batch_size=1000), start=1):
            words, glued = [], []  # glued[k]: no whitespace between words k-1 and k
            space_after_last = True
            for token in doc:
                if token.is_space:
                    space_after_last = True
                    continue
                for k, piece in enumerate(token.text.split()):
                    glued.append(bool(words) and k == 0 and not space_after_last)
                    words.append(piece)
                    space_after_last = k < len(token.text.split()) - 1
                space_after_last = space_after_last or bool(token.whitespace_)
            if not words:
                sys.exit(f"{args.input}:{number}: no words after tokenisation")
            for k in range(1, len(words)):
                before, here = words[k - 1], words[k]
                if _is_word(before):
                    counts[here][0] += 1
                    counts[here][1] += glued[k]
                if _is_word(here):
                    counts[before][2] += 1
                    counts[before][3] += glued[k]
            out.write(" ".join(words) + "\n")
    print(f"{args.input}: {len(lines)} lines tokenised ({unescaped} with HTML entities "
          f"unescaped) -> {args.output}", file=sys.stderr)
    if args.glue_table:
        table = {}
        for t, (after_word, left, before_word, right) in counts.items():
            entry = {}
            if left:
                entry["left"] = round(left / after_word, 4)
            if right:
                entry["right"] = round(right / before_word, 4)
            if entry:
                table[t] = entry
        with open(args.glue_table, "w", encoding="utf-8") as out:
            json.dump(table, out, ensure_ascii=False, sort_keys=True, indent=0)


def _is_word(token):
    return any(c.isalnum() for c in token)


def detokenize(args):
    detokenize_file(args.glue_table, args.input, args.output)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    tok = sub.add_parser("tokenize", help="raw text -> space-separated spaCy tokens")
    tok.add_argument("--lang", required=True,
                     help="language of the text (en, de): spacy.blank(LANG)'s tokenizer "
                     "unless --pipeline is given")
    tok.add_argument("--pipeline", default=None,
                     help="use this spaCy pipeline's tokenizer (name or path)")
    tok.add_argument("--glue-table", default=None, help="write per-token glue statistics")
    tok.add_argument("input", help="raw text, one sentence per line")
    tok.add_argument("output", help="the tokens, space-separated, one sentence per line")
    detok = sub.add_parser("detokenize", help="space-separated tokens -> text")
    detok.add_argument("--glue-table", required=True,
                       help="the per-token glue statistics written by tokenize --glue-table")
    detok.add_argument("input", help="space-separated tokens, one sentence per line")
    detok.add_argument("output", help="detokenised text, one sentence per line")
    args = parser.parse_args(argv)
    (tokenize if args.command == "tokenize" else detokenize)(args)


if __name__ == "__main__":
    main()
