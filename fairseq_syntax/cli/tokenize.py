"""``fairseq-syntax-tokenize``: raw text to space-separated words, and translations back.

    fairseq-syntax-tokenize tokenize --lang en --pipeline en_core_web_sm IN OUT
    fairseq-syntax-tokenize tokenize --lang de --glue-table glue.de.json IN OUT
    fairseq-syntax-tokenize tokenize --lang ja --tokenizer ja-mecab --glue-table glue.ja.json IN OUT
    fairseq-syntax-tokenize detokenize --glue-table glue.de.json IN OUT

``tokenize`` unescapes HTML entities and removes invisible format characters (Unicode
Cf, such as U+200E, but ZWNJ and ZWJ), then splits each line into words with a spaCy
pipeline's tokenizer (``--pipeline``), ``spacy.blank(LANG)``'s (any language spaCy
knows; Japanese needs ``sudachipy``), or sacreBLEU's ``ja-mecab`` (MeCab + IPAdic), and
writes them separated by single spaces; ``--glue-table`` counts per word how often it
was written without a space next to a word. ``detokenize`` joins words again where the
table says they were glued in at least half of their occurrences (see
:mod:`fairseq_syntax.syntax.detokenize`). ``-`` reads standard input or writes standard
output. Bad input prints ``fairseq-syntax-tokenize: error: FILE:LINE: message`` and exits
with 1.
"""
import argparse
import sys

PROG = "fairseq-syntax-tokenize"


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    tok = sub.add_parser("tokenize", help="raw text -> words separated by single spaces")
    tok.add_argument("--lang", required=True,
                     help="language of the text (en, de, ja, ...): spacy.blank(LANG)'s "
                          "tokenizer unless --pipeline or --tokenizer ja-mecab is given")
    tok.add_argument("--pipeline", default=None, metavar="NAME_OR_PATH",
                     help="use this spaCy pipeline's own tokenizer (an installed name such as "
                          "en_core_web_sm or ja_ginza, or a folder)")
    tok.add_argument("--tokenizer", default="spacy", choices=["spacy", "ja-mecab"],
                     help="spacy: a spaCy tokenizer (--pipeline, else spacy.blank(LANG); "
                          "blank 'ja' is SudachiPy split mode A); ja-mecab: MeCab with the IPA "
                          "dictionary, exactly sacreBLEU's ja-mecab tokenizer (needs "
                          "mecab-python3 and ipadic) (default: %(default)s)")
    tok.add_argument("--glue-table", default=None, metavar="JSON",
                     help="also write per-word glue statistics here, for detokenize")
    tok.add_argument("input", help="raw text, UTF-8, one sentence per line ('-': stdin)")
    tok.add_argument("output", help="the words, space-separated, one sentence per line "
                                    "('-': stdout)")
    detok = sub.add_parser("detokenize", help="space-separated words -> text")
    detok.add_argument("--glue-table", required=True, metavar="JSON",
                       help="the glue statistics written by tokenize --glue-table")
    detok.add_argument("input", help="space-separated words, one sentence per line ('-': stdin)")
    detok.add_argument("output", help="detokenised text, one sentence per line ('-': stdout)")
    return parser


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    from fairseq_syntax.syntax.detokenize import detokenize_file
    from fairseq_syntax.syntax.errors import exit_on_input_error
    from fairseq_syntax.syntax.word_tokenizers import tokenize_file

    with exit_on_input_error(PROG):
        if args.command == "tokenize":
            tokenize_file(args.input, args.output, args.lang, args.tokenizer, args.pipeline,
                          args.glue_table)
        else:
            detokenize_file(args.glue_table, args.input, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
