"""The CoNLL-U cache of ``fairseq-syntax-preprocess --parser``, and parsing a file alone.

The spaCy parser itself (one tree per line, on the line's own words; worker processes)
is :mod:`fairseq_syntax.syntax.spacy_parser`, shared with raw input to
``fairseq-interactive``.

* **Cache.** :func:`parse_with_cache` writes the parses as CoNLL-U whose first line is
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
from typing import Iterator, List, Optional, Sequence, Tuple

from fairseq_syntax.data.side_files import file_sha256
from fairseq_syntax.syntax.conllu_io import ParsedSentence, format_conllu
from fairseq_syntax.syntax.dependency import validate_heads
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.spacy_parser import ParserPool, SpacyParser
from fairseq_syntax.syntax.text_io import atomic_text_file

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


def write_cache(path: str, trees: Sequence[ParsedSentence], header: dict) -> None:
    """Write ``trees`` as CoNLL-U with the header line, atomically (temp file + rename)."""
    with atomic_text_file(path) as out:
        out.write(_header_line(header))
        for tree in trees:
            out.write(format_conllu(tree.words, tree.heads, tree.deprels))


def read_cache_trees(path: str) -> List[ParsedSentence]:
    """All the trees of a cache file (see :func:`iter_cache_trees`)."""
    return list(iter_cache_trees(path))


def iter_cache_trees(path: str) -> Iterator[ParsedSentence]:
    """The trees of a cache file written by :func:`write_cache`, one by one (fast: no
    general CoNLL-U parser). Raises ``ValueError`` on anything :func:`write_cache` does
    not write, and on a sentence that is not a tree."""
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


def load_cached(parser: SpacyParser, text_path: str, sentences: Sequence[Sequence[str]],
                cache: str, desc: str = "parse") -> Optional[List[ParsedSentence]]:
    """The cached parses of ``sentences`` (the words of ``text_path``) when ``cache`` was
    written by the same parser (same :meth:`ParserInfo.identity`) for the same text (same
    SHA-256 and words); None when it has to be parsed (again). Never loads the pipeline.

    A file at ``cache`` without the header line (say a gold parse) is never overwritten:
    that raises :class:`SyntaxInputError`.
    """
    if not os.path.exists(cache):
        return None
    header = read_cache_header(cache)
    if header is None:
        raise SyntaxInputError(
            "this CoNLL-U file exists but was not written by --parser; remove it, give "
            "--parse-cache DIR, or leave out --parser to use it as the parse",
            cache,
        )
    if (header.get("parser") == parser.info.identity()
            and header.get("source_sha256") == file_sha256(text_path)
            and header.get("sentences") == len(sentences)):
        try:
            trees = read_cache_trees(cache)
        except ValueError as err:
            logger.warning("%s: cannot reuse %s (%s); parsing again", desc, cache, err)
        else:
            if len(trees) == len(sentences) and all(
                    t.words == list(w) for t, w in zip(trees, sentences)):
                logger.info("%s: reusing the parses in %s", desc, cache)
                return trees
    logger.info("%s: %s was made by another parser or for another text; parsing again",
                desc, cache)
    return None


def resume_parses(parser: SpacyParser, text_path: str, sentences: Sequence[Sequence[str]],
                  cache: str, desc: str = "parse") -> List[ParsedSentence]:
    """The parses a killed run left in ``{cache}.partial`` for these ``sentences`` (the
    words of ``text_path``) with this parser: its complete sentences, the file cut after
    the last of them; ``[]`` when there is none, or when it was made by another parser or
    for another text (it is removed then). Never loads the pipeline."""
    partial = partial_path(cache)
    if not os.path.isfile(partial):
        return []
    head = _header_line(cache_header(parser, text_path, len(sentences))).encode("utf-8")
    with open(partial, "rb") as f:
        matches = f.readline() == head
        end = offset = len(head)
        if matches:
            for raw in f:  # the end of the last complete sentence (its blank line)
                offset += len(raw)
                if raw == b"\n":
                    end = offset
    trees: List[ParsedSentence] = []
    if matches:
        try:
            os.truncate(partial, end)
            trees = read_cache_trees(partial)
        except (OSError, ValueError, UnicodeDecodeError) as err:
            logger.warning("%s: cannot resume from %s (%s)", desc, partial, err)
            matches = False
        else:
            matches = len(trees) <= len(sentences) and all(
                t.words == list(w) for t, w in zip(trees, sentences))
    if not matches:
        logger.info("%s: %s was left by a run with another parser or text; parsing from the "
                    "start", desc, partial)
        os.unlink(partial)
        return []
    for tree in trees:  # as the parser gives them: from no file
        tree.line = 0
    logger.info("%s: resuming after the %d sentences parsed in %s", desc, len(trees), partial)
    return trees


def parse_and_cache(parser: SpacyParser, text_path: str, sentences: Sequence[Sequence[str]],
                    cache: str, workers: int = 1, batch_size: int = 256, desc: str = "parse",
                    pool: Optional[ParserPool] = None, stream=None,
                    started: Optional[float] = None,
                    resumed: Sequence[ParsedSentence] = ()) -> List[ParsedSentence]:
    """Parse ``sentences`` and write them to ``cache`` (with the header line), in chunks
    through ``{cache}.partial`` (see the module's docstring). ``resumed``: the parses of
    the first sentences, from :func:`resume_parses` (then ``stream``, if given, holds
    those of the rest). ``stream``: see :func:`parse_words`; ``started``: when the
    workers started on ``stream`` (for the log)."""
    start = time.time() if started is None else started
    trees: List[ParsedSentence] = list(resumed)
    partial = partial_path(cache)
    if trees:
        out = open(partial, "a", encoding="utf-8")
    else:
        os.makedirs(os.path.dirname(os.path.abspath(partial)), exist_ok=True)
        out = open(partial, "w", encoding="utf-8")
        out.write(_header_line(cache_header(parser, text_path, len(sentences))))
    pending: List[ParsedSentence] = []

    def flush() -> None:
        out.write("".join(format_conllu(t.words, t.heads, t.deprels) for t in pending))
        out.flush()
        os.fsync(out.fileno())
        pending.clear()

    def arrived(new: Sequence[ParsedSentence]) -> None:
        trees.append(new[-1])
        pending.append(new[-1])
        if len(pending) >= RESUME_CHUNK:
            flush()

    try:
        parser.parse(sentences[len(trees):], workers=workers, batch_size=batch_size,
                     desc=desc, pool=pool, on_tree=arrived, stream=stream)
        flush()
    except BaseException:
        with contextlib.suppress(OSError, ValueError):  # keep what was parsed
            flush()
        raise
    finally:
        out.close()
    os.replace(partial, cache)
    info = parser.info
    logger.info("%s: parsed %d sentences with %s %s in %.1f s (%d workers)", desc,
                len(trees) - len(resumed), info.package, info.version, time.time() - start,
                workers)
    return trees


def parse_with_cache(parser: SpacyParser, text_path: str, sentences: Sequence[Sequence[str]],
                     cache: str, workers: int = 1, batch_size: int = 256, desc: str = "parse",
                     pool: Optional[ParserPool] = None) -> Tuple[List[ParsedSentence], bool]:
    """:func:`load_cached`, else :func:`parse_and_cache`. Returns ``(trees, reused)``."""
    trees = load_cached(parser, text_path, sentences, cache, desc)
    if trees is not None:
        return trees, True
    return parse_and_cache(parser, text_path, sentences, cache, workers, batch_size, desc,
                           pool, resumed=resume_parses(parser, text_path, sentences, cache,
                                                       desc)), False


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
    from fairseq_syntax.syntax.text_io import read_text_lines

    start = time.time()
    try:
        handle = SpacyParser(args.parser)
        sentences = [line.split() for line in read_text_lines(args.text)]
        output = args.output or args.text + ".conllu"
        trees = parse_and_cache(handle, args.text, sentences, output, workers=args.workers,
                                batch_size=args.parse_batch_size,
                                resumed=resume_parses(handle, args.text, sentences, output))
    except SyntaxInputError as err:
        print(f"spacy_parse: error: {err}", file=sys.stderr)
        return 1
    logger.info("parsed %d sentences in %.1f s (whole command, %d workers)", len(trees),
                time.time() - start, args.workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
