"""Word alignment with eflomal (Östling & Tiedemann 2016) for ``--align eflomal``.

eflomal (``eflomal-align -s SRC -t TGT -f FWD -r REV``) reads whitespace-tokenised
sentences, runs its bundled sampler binary once for both directions and writes one Pharaoh line (``i-j``, 0-based,
source index first in *both* files) per sentence pair. It has no seed: two runs can
give slightly different links. The two directions are symmetrised here with
grow-diag-final-and (:mod:`fairseq_syntax.syntax.symmetrize`).

Lowercasing is eflomal's own (its vocabulary is lowercased); tokens are the
whitespace tokens of the text, the same words the parse and the subword projection use.
Nothing here holds the corpus: eflomal runs as a process of its own (its command
``eflomal-align``) on text files written a line at a time, and the links come back one
sentence pair at a time from the files it writes (:func:`symmetrised_links`).
"""
import contextlib
import itertools
import logging
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import parse_pharaoh_line
from fairseq_syntax.syntax.symmetrize import grow_diag_final_and
from fairseq_syntax.syntax.text_io import iter_text_lines

logger = logging.getLogger("fairseq_syntax_preprocess")

Link = Tuple[int, int]

SYMMETRISATION = "grow-diag-final-and"


class EflomalError(RuntimeError):
    """eflomal failed or wrote other alignments than asked for: the command says so in one
    line (``fairseq-syntax-preprocess: error: ...``), with eflomal's own last words."""


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
        raise EflomalError(f"eflomal {what} alignment of pair {pair}: {err}") from None


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
        raise EflomalError(f"eflomal wrote alignments for {skip + n} sentence pairs, not "
                           f"{skip + count}")


def eflomal_program() -> str:
    """The path of ``eflomal-align``, the command the eflomal package installs."""
    _import_eflomal()
    path = shutil.which("eflomal-align") or os.path.join(os.path.dirname(sys.executable),
                                                         "eflomal-align")
    if not os.path.isfile(path):
        raise SyntaxInputError("--align eflomal needs eflomal's command eflomal-align, which "
                               "the eflomal package installs beside python: pip install "
                               "--force-reinstall eflomal")
    return path


class EflomalRun:
    """eflomal's own command, ``eflomal-align``, on the concatenated text of some splits
    (their source and target text files, written one line at a time into ``workdir``),
    both directions, as a process of its own: it works while the caller does, and what
    it holds is its own. :meth:`result` waits and gives the :class:`AlignedFiles`;
    :meth:`abort` ends it and the sampler it started (its process group)."""

    def __init__(self, sources: Sequence[str], targets: Sequence[str], workdir: str,
                 n_samplers: int = 3, rel_iterations: float = 1.0):
        folder = os.path.join(workdir, "eflomal")
        os.makedirs(folder, exist_ok=True)
        self.files = AlignedFiles(*(os.path.join(folder, name) for name in (
            "source.txt", "target.txt", "forward.align", "reverse.align")))
        write_sentences(self.files.source, sources)
        write_sentences(self.files.target, targets)
        self._log_path = os.path.join(folder, "eflomal.log")
        with open(self._log_path, "w", encoding="utf-8") as log:
            self._process = subprocess.Popen(
                [sys.executable, eflomal_program(), "--model", "3",
                 "--n-samplers", str(n_samplers), "--length", str(rel_iterations),
                 "-s", self.files.source, "-t", self.files.target,
                 "-f", self.files.forward, "-r", self.files.reverse, "--overwrite"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def result(self) -> AlignedFiles:
        status = self._process.wait()
        if status != 0:
            with open(self._log_path, encoding="utf-8", errors="replace") as log:
                said = log.read().strip()[-2000:]
            raise EflomalError(f"eflomal-align failed (exit status {status}): {said}")
        return self.files

    def abort(self, timeout: float = 10.0) -> None:
        """End eflomal-align and its sampler; nothing when it has finished."""
        if self._process.poll() is not None:
            return
        with contextlib.suppress(OSError):  # gone already
            os.killpg(self._process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout)
