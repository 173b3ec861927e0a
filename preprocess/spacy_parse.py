"""The CoNLL-U cache of ``fairseq-syntax-preprocess --parser``, and parsing a file alone.

The spaCy parser itself (one tree per line, on the line's own words; worker processes)
is :mod:`fairseq_syntax.syntax.spacy_parser`, shared with raw input to
``fairseq-interactive``.

* **Cache.** :func:`parse_and_cache` writes the parses as CoNLL-U whose first line is
  ``# fairseq_syntax_parse = {json}`` (parser name, package, version, spaCy version,
  SHA-256 of the text file); a later run with the same parser and the same text reads
  the file instead of parsing.
* **Resuming.** While parsing, the trees are appended in chunks of :data:`RESUME_CHUNK`
  sentences (flushed and synced) to ``{cache}.partial``, which already has the final
  header; once all are parsed it is renamed to ``{cache}``, so the cache is never seen
  half written. A run that was killed leaves the partial file: the next run with the same
  parser and text (the same header) keeps its complete sentences (a torn last sentence is
  cut off) and parses only the rest (:func:`resume_parses`); the cache it ends with is
  byte for byte what an uninterrupted run writes.

Run as ``python -m fairseq_syntax_preprocess.spacy_parse --parser NAME --workers N
TEXT [-o OUT.conllu]`` to parse a file alone (e.g. to time parsing by itself).
"""
import argparse
import contextlib
import json
import logging
import os
import sys
import time
from typing import Iterable, Iterator, List, Optional

from fairseq_syntax.data.side_files import file_sha256
from fairseq_syntax.syntax.conllu_io import ParsedSentence, format_conllu
from fairseq_syntax.syntax.dependency import validate_heads
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.spacy_parser import ParserPool, SpacyParser, iter_parses
from fairseq_syntax.syntax.text_io import iter_text_lines, iter_words

logger = logging.getLogger("fairseq_syntax_preprocess")

CACHE_HEADER = "# fairseq_syntax_parse = "
PARTIAL_SUFFIX = ".partial"
RESUME_CHUNK = 1000  # sentences per append to the partial cache (what a killed run keeps)

# --------------------------------------------------------------------------- cache


def cache_path(prefix: str, lang: str, suffix: str, cache_dir: Optional[str]) -> str:
    """``{prefix}.{lang}.{suffix}``, or the same file name inside ``cache_dir``."""
    name = f"{prefix}.{lang}.{suffix}"
    if cache_dir is None:
        return name
    return os.path.join(cache_dir, os.path.basename(name))


def read_cache_header(path: str) -> Optional[dict]:
    """The JSON header of a cache file, or None when the file has none."""
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8", errors="replace").rstrip("\r\n")
    if not first.startswith(CACHE_HEADER):
        return None
    try:
        return json.loads(first[len(CACHE_HEADER):])
    except ValueError:
        return None


def partial_path(cache: str) -> str:
    """Where the parses of an unfinished run are kept: ``{cache}.partial``."""
    return cache + PARTIAL_SUFFIX


def cache_header(parser: SpacyParser, text_path: str, n_sentences: int) -> dict:
    """The header of the cache of ``n_sentences`` parses of ``text_path``."""
    info = parser.info
    return {"parser": info.identity(), "source_sha256": file_sha256(text_path),
            "source_file": os.path.abspath(text_path), "sentences": n_sentences}


def _header_line(header: dict) -> str:
    return CACHE_HEADER + json.dumps(header, sort_keys=True) + "\n"


def iter_cache_trees(path: str) -> Iterator[ParsedSentence]:
    """The trees of a cache file written by :func:`parse_and_cache`, one by one (fast: no
    general CoNLL-U parser). Raises ``ValueError`` on anything it does not write, and on
    a sentence that is not a tree."""
    words: List[str] = []
    heads: List[int] = []
    rels: List[str] = []
    start = 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            line = line.rstrip("\n")
            if line.startswith("#"):
                continue
            if not line:
                if words:
                    validate_heads(heads, words=words)
                    yield ParsedSentence(words, heads, rels, start)
                    words, heads, rels = [], [], []
                continue
            cols = line.split("\t")
            if len(cols) != 10 or cols[0] != str(len(words) + 1):
                raise ValueError(f"{path}:{number}: not a line of a parse cache")
            if not words:
                start = number
            words.append(cols[1])
            heads.append(int(cols[6]) - 1)
            rels.append(cols[7])
    if words:
        validate_heads(heads, words=words)
        yield ParsedSentence(words, heads, rels, start)


def _same_words(trees: Iterable[ParsedSentence], text_path: str) -> int:
    """How many of ``trees`` there are, when each has the words of its line of
    ``text_path`` (there may be fewer trees than lines); -1 at the first that has not."""
    n = 0
    for tree, words in zip(trees, iter_words(text_path)):
        if tree.words != words:
            return -1
        n += 1
    return n


def load_cached(parser: SpacyParser, text_path: str, n_sentences: int, cache: str,
                desc: str = "parse") -> bool:
    """Whether ``cache`` holds the parses of the ``n_sentences`` lines of ``text_path``
    by this parser (same :meth:`ParserInfo.identity`, SHA-256 of the text and words),
    read one tree at a time; False when it has to be parsed (again). Never loads the
    pipeline.

    A file at ``cache`` without the header line (say a gold parse) is never overwritten:
    that raises :class:`SyntaxInputError`.
    """
    if not os.path.exists(cache):
        return False
    header = read_cache_header(cache)
    if header is None:
        raise SyntaxInputError(
            "this CoNLL-U file exists but was not written by --parser; remove it, give "
            "--parse-cache DIR, or leave out --parser to use it as the parse",
            cache,
        )
    if (header.get("parser") == parser.info.identity()
            and header.get("source_sha256") == file_sha256(text_path)
            and header.get("sentences") == n_sentences):
        try:
            same = _same_words(iter_cache_trees(cache), text_path)
        except ValueError as err:
            logger.warning("%s: cannot reuse %s (%s); parsing again", desc, cache, err)
        else:
            if same == n_sentences:
                logger.info("%s: reusing the parses in %s", desc, cache)
                return True
    logger.info("%s: %s was made by another parser or for another text; parsing again",
                desc, cache)
    return False


def resume_parses(parser: SpacyParser, text_path: str, n_sentences: int, cache: str,
                  desc: str = "parse") -> int:
    """How many sentences a killed run parsed into ``{cache}.partial`` for the
    ``n_sentences`` lines of ``text_path`` with this parser: its complete sentences, the
    file cut after the last of them; 0 when there is none, or when it was made by another
    parser or for another text (it is removed then). Never loads the pipeline."""
    partial = partial_path(cache)
    if not os.path.isfile(partial):
        return 0
    head = _header_line(cache_header(parser, text_path, n_sentences)).encode("utf-8")
    with open(partial, "rb") as f:
        matches = f.readline() == head
        end = offset = len(head)
        if matches:
            for raw in f:  # the end of the last complete sentence (its blank line)
                offset += len(raw)
                if raw == b"\n":
                    end = offset
    kept = -1
    if matches:
        try:
            os.truncate(partial, end)
            kept = _same_words(iter_cache_trees(partial), text_path)
        except (OSError, ValueError, UnicodeDecodeError) as err:
            logger.warning("%s: cannot resume from %s (%s)", desc, partial, err)
    if kept < 0:
        logger.info("%s: %s was left by a run with another parser or text; parsing from the "
                    "start", desc, partial)
        os.unlink(partial)
        return 0
    logger.info("%s: resuming after the %d sentences parsed in %s", desc, kept, partial)
    return kept


def parse_and_cache(parser: SpacyParser, text_path: str, n_sentences: int, cache: str,
                    workers: int = 1, batch_size: int = 256, desc: str = "parse",
                    stream=None, started: Optional[float] = None, resumed: int = 0) -> None:
    """Parse the ``n_sentences`` lines of ``text_path`` after the first ``resumed`` (those
    :func:`resume_parses` kept) and write the trees to ``cache`` (with the header line) as
    they come, in chunks through ``{cache}.partial`` (see the module's docstring); no
    more than a chunk of trees is held. ``stream``: what :meth:`ParserPool.imap` returned
    for those lines; ``started``: when the workers started on it (for the log)."""
    start = time.time() if started is None else started
    partial = partial_path(cache)
    if resumed:
        out = open(partial, "a", encoding="utf-8")
    else:
        os.makedirs(os.path.dirname(os.path.abspath(partial)), exist_ok=True)
        out = open(partial, "w", encoding="utf-8")
        out.write(_header_line(cache_header(parser, text_path, n_sentences)))
    pending: List[ParsedSentence] = []

    def flush() -> None:
        out.write("".join(format_conllu(t.words, t.heads, t.deprels) for t in pending))
        out.flush()
        os.fsync(out.fileno())
        pending.clear()

    pool = None
    try:
        if stream is None:
            pool = ParserPool(parser.nlp, workers)
            stream = pool.imap(iter_words(text_path, resumed), batch_size)
        for tree in iter_parses(stream, n_sentences - resumed, desc):
            pending.append(tree)
            if len(pending) >= RESUME_CHUNK:
                flush()
        flush()
        if pool is not None:
            pool.close()
    except BaseException:
        with contextlib.suppress(OSError, ValueError):  # keep what was parsed
            flush()
        raise
    finally:
        out.close()
        if pool is not None:
            pool.__exit__(None, None, None)
    os.replace(partial, cache)
    info = parser.info
    logger.info("%s: parsed %d sentences with %s %s in %.1f s (%d workers)", desc,
                n_sentences - resumed, info.package, info.version, time.time() - start,
                workers)


# --------------------------------------------------------------------------- command line


def main(argv: Optional[List[str]] = None) -> int:
    """Parse a whitespace-tokenised text file alone (one tree per line) into CoNLL-U."""
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_syntax_preprocess.spacy_parse",
        description="Parse a whitespace-tokenised text file (one sentence per line) with a "
                    "spaCy pipeline, exactly as fairseq-syntax-preprocess --parser does, and "
                    "write CoNLL-U (a cache fairseq-syntax-preprocess --parser reuses).",
    )
    parser.add_argument("text", help="input text, UTF-8, one sentence per line")
    parser.add_argument("--parser", required=True, metavar="NAME_OR_PATH",
                        help="spaCy pipeline, by package name or path (as --parser of "
                        "fairseq-syntax-preprocess)")
    parser.add_argument("--workers", type=int, default=1,
                        help="parser processes (default: 1)")
    parser.add_argument("--parse-batch-size", type=int, default=256,
                        help="sentences per spaCy batch (default: 256)")
    parser.add_argument("-o", "--output", default=None,
                        help="CoNLL-U to write (default: TEXT.conllu)")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s",
                        level=logging.INFO, stream=sys.stderr)
    start = time.time()
    try:
        handle = SpacyParser(args.parser)
        n = sum(1 for _ in iter_text_lines(args.text))
        output = args.output or args.text + ".conllu"
        parse_and_cache(handle, args.text, n, output, workers=args.workers,
                        batch_size=args.parse_batch_size,
                        resumed=resume_parses(handle, args.text, n, output))
    except SyntaxInputError as err:
        print(f"spacy_parse: error: {err}", file=sys.stderr)
        return 1
    logger.info("parsed %d sentences in %.1f s (whole command, %d workers)", n,
                time.time() - start, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
