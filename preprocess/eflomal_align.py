"""Word alignment with eflomal (Östling & Tiedemann 2016) for ``--align eflomal``.

eflomal's Python API (``eflomal.Aligner().align(src, tgt, links_filename_fwd=...,
links_filename_rev=...)``) reads whitespace-tokenised sentences, runs its bundled
sampler binary once for both directions and writes one Pharaoh line (``i-j``, 0-based,
source index first in *both* files) per sentence pair. It has no seed: two runs can
give slightly different links. The two directions are symmetrised here with
grow-diag-final-and (:mod:`fairseq_syntax.syntax.symmetrize`).

Lowercasing is eflomal's own (its vocabulary is lowercased); tokens are the
whitespace tokens of the text, the same words the parse and the subword projection use.
Nothing here holds the corpus: the text goes to eflomal through files, and the links come
back one sentence pair at a time (:func:`symmetrised_links`); what eflomal's own reader
holds while it indexes the text (a small integer array per sentence) is eflomal's.
"""
import itertools
import logging
import os
import signal
import threading
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import parse_pharaoh_line
from fairseq_syntax.syntax.symmetrize import grow_diag_final_and
from fairseq_syntax.syntax.text_io import iter_text_lines

logger = logging.getLogger("fairseq_syntax_preprocess")

Link = Tuple[int, int]

SYMMETRISATION = "grow-diag-final-and"


def eflomal_version() -> str:
    try:
        from importlib.metadata import version

        return version("eflomal")
    except Exception:  # pragma: no cover - metadata missing
        return "unknown"


def _import_eflomal():
    try:
        import eflomal
    except ImportError:
        raise SyntaxInputError(
            "--align eflomal needs the eflomal package: pip install eflomal"
        ) from None
    return eflomal


@dataclass
class AlignedFiles:
    """What eflomal was given (one whitespace-tokenised sentence per line) and wrote (one
    Pharaoh line per pair, source index first, in both directions)."""

    source: str
    target: str
    forward: str
    reverse: str


def _plain_links(line: str, n_src: int, n_tgt: int) -> Optional[List[Link]]:
    """The links of a line of ASCII ``i-j`` tokens within the sentence lengths (what
    eflomal writes), 3x faster than :func:`parse_pharaoh_line`; None for anything else."""
    links = []
    for token in line.split():
        i, dash, j = token.partition("-")
        if not (dash and i.isascii() and i.isdigit() and j.isascii() and j.isdigit()):
            return None
        links.append((int(i), int(j)))
    if links and (max(i for i, _ in links) >= n_src or max(j for _, j in links) >= n_tgt):
        return None
    return links


def _links(line: str, n_src: int, n_tgt: int, what: str, pair: int) -> List[Link]:
    links = _plain_links(line, n_src, n_tgt)
    if links is not None:
        return links
    try:  # something unexpected: the careful parser names the bad link
        return parse_pharaoh_line(line, n_src, n_tgt)
    except ValueError as err:  # eflomal truncates nothing we feed it; be loud anyway
        raise RuntimeError(f"eflomal {what} alignment of pair {pair}: {err}") from None


def write_sentences(path: str, texts: Sequence[str]) -> int:
    """Write the whitespace-normalised lines of the text files ``texts``, one after the
    other, to ``path`` (what eflomal reads), one line at a time; the number of lines."""
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        for text in texts:
            for line in iter_text_lines(text):
                out.write(" ".join(line.split()) + "\n")
                n += 1
    return n


def align_files(source: str, target: str, workdir: str, n_samplers: int = 3,
                rel_iterations: float = 1.0) -> AlignedFiles:
    """Align the sentence pairs of two text files (whitespace-tokenised, one sentence per
    line) with eflomal in both directions; the two link files are written into
    ``workdir``."""
    eflomal = _import_eflomal()
    files = AlignedFiles(source, target, os.path.join(workdir, "forward.align"),
                         os.path.join(workdir, "reverse.align"))
    aligner = eflomal.Aligner(n_samplers=n_samplers, rel_iterations=rel_iterations)
    with open(source, encoding="utf-8") as s, open(target, encoding="utf-8") as t:
        aligner.align(s, t, links_filename_fwd=files.forward,
                      links_filename_rev=files.reverse, quiet=True)
    return files


def symmetrised_links(files: AlignedFiles, skip: int = 0,
                      count: Optional[int] = None) -> Iterator[List[Link]]:
    """The grow-diag-final-and symmetrisation of the two directions' links, one sentence
    pair at a time, for the ``count`` pairs after the first ``skip`` (all by default);
    the links are checked against the sentences' lengths."""
    with open(files.source, encoding="utf-8") as s, open(files.target, encoding="utf-8") as t, \
            open(files.forward, encoding="utf-8") as f, open(files.reverse, encoding="utf-8") as r:
        stop = None if count is None else skip + count
        n = 0
        for k, (sl, tl, fl, rl) in enumerate(itertools.islice(zip(s, t, f, r), skip, stop),
                                             skip + 1):
            n_src, n_tgt = len(sl.split()), len(tl.split())
            yield grow_diag_final_and(_links(fl, n_src, n_tgt, "forward", k),
                                      _links(rl, n_src, n_tgt, "reverse", k), n_src, n_tgt)
            n += 1
    if count is not None and n != count:
        raise RuntimeError(f"eflomal wrote alignments for {skip + n} sentence pairs, not "
                           f"{skip + count}")


class BackgroundAlignment:
    """Align the concatenation of some splits (their source and target text files) with
    eflomal in a thread: eflomal's sampler is an external program, so its work overlaps
    with whatever the caller does (this is not a second mechanism of parallelism in the
    pipeline, just a program waited for). :meth:`result` joins, re-raises errors and gives
    the :class:`AlignedFiles`; :meth:`abort` ends the sampler, which would outlive this
    process."""

    def __init__(self, sources: Sequence[str], targets: Sequence[str], workdir: str,
                 **kwargs):
        self._result: Optional[AlignedFiles] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(
            target=self._run, args=(sources, targets, workdir), kwargs=kwargs,
            name="eflomal", daemon=True,
        )
        self._thread.start()

    def _run(self, sources, targets, workdir, **kwargs):
        try:
            folder = os.path.join(workdir, "eflomal")
            os.makedirs(folder, exist_ok=True)
            source, target = os.path.join(folder, "source.txt"), os.path.join(folder, "target.txt")
            write_sentences(source, sources)
            write_sentences(target, targets)
            self._result = align_files(source, target, folder, **kwargs)
        except BaseException as err:  # re-raised in the caller's thread
            self._error = err

    def result(self) -> AlignedFiles:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result

    def abort(self, timeout: float = 10.0) -> None:
        """End the sampler the thread started (Linux: the thread's child processes, from
        /proc), then wait for the thread; nothing when it has finished."""
        if not self._thread.is_alive():
            return
        path = f"/proc/{os.getpid()}/task/{self._thread.native_id}/children"
        try:
            with open(path) as f:
                children = [int(pid) for pid in f.read().split()]
        except OSError:  # no /proc: the sampler finishes on its own
            children = []
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:  # gone already
                pass
        self._thread.join(timeout)
