"""Word alignment with eflomal (Östling & Tiedemann 2016) for ``--align eflomal``.

eflomal's Python API (``eflomal.Aligner().align(src, tgt, links_filename_fwd=...,
links_filename_rev=...)``) reads whitespace-tokenised sentences, runs its bundled
sampler binary once for both directions and writes one Pharaoh line (``i-j``, 0-based,
source index first in *both* files) per sentence pair. It has no seed: two runs can
give slightly different links. The two directions are symmetrised here with
grow-diag-final-and (:mod:`fairseq_syntax.syntax.symmetrize`).

Lowercasing is eflomal's own (its vocabulary is lowercased); tokens are the
whitespace tokens of the text, the same words the parse and the subword projection use.
"""
import logging
import os
import signal
import tempfile
import threading
from typing import List, Optional, Sequence, Tuple

from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.pharaoh import parse_pharaoh_line
from fairseq_syntax.syntax.symmetrize import grow_diag_final_and

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


def _read_links(path: str, src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]],
                what: str) -> List[List[Link]]:
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(src):
        raise RuntimeError(
            f"eflomal wrote {len(lines)} {what} alignment lines for {len(src)} sentence pairs"
        )
    out = []
    for k, line in enumerate(lines):
        links = _plain_links(line, len(src[k]), len(tgt[k]))
        if links is not None:
            out.append(links)
            continue
        try:  # something unexpected: the careful parser names the bad link
            out.append(parse_pharaoh_line(line, len(src[k]), len(tgt[k])))
        except ValueError as err:  # eflomal truncates nothing we feed it; be loud anyway
            raise RuntimeError(f"eflomal {what} alignment of pair {k + 1}: {err}") from None
    return out


def align_eflomal(
    source: Sequence[Sequence[str]],
    target: Sequence[Sequence[str]],
    workdir: Optional[str] = None,
    n_samplers: int = 3,
    rel_iterations: float = 1.0,
) -> Tuple[List[List[Link]], List[List[Link]], List[List[Link]]]:
    """Align a word-level corpus with eflomal in both directions and symmetrise it.

    ``source``/``target``: the sentences as lists of words (the whitespace tokens of the
    text), same length. Returns ``(symmetrised, forward, reverse)``, each a list of
    sorted ``(source, target)`` links per sentence pair.
    """
    if len(source) != len(target):
        raise ValueError(f"{len(source)} source but {len(target)} target sentences")
    eflomal = _import_eflomal()
    with tempfile.TemporaryDirectory(prefix="eflomal-", dir=workdir) as tmp:
        src_path = os.path.join(tmp, "source.txt")
        tgt_path = os.path.join(tmp, "target.txt")
        fwd_path = os.path.join(tmp, "forward.align")
        rev_path = os.path.join(tmp, "reverse.align")
        for path, sents in ((src_path, source), (tgt_path, target)):
            with open(path, "w", encoding="utf-8") as f:
                for words in sents:
                    f.write(" ".join(words) + "\n")
        aligner = eflomal.Aligner(n_samplers=n_samplers, rel_iterations=rel_iterations)
        with open(src_path, encoding="utf-8") as s, open(tgt_path, encoding="utf-8") as t:
            aligner.align(s, t, links_filename_fwd=fwd_path, links_filename_rev=rev_path,
                          quiet=True)
        forward = _read_links(fwd_path, source, target, "forward")
        reverse = _read_links(rev_path, source, target, "reverse")
    symmetrised = [
        grow_diag_final_and(f, r, len(s), len(t))
        for f, r, s, t in zip(forward, reverse, source, target)
    ]
    return symmetrised, forward, reverse


class BackgroundAlignment:
    """Run :func:`align_eflomal` in a thread: eflomal's sampler is an external program,
    so its work overlaps with whatever the caller does (this is not a second mechanism of
    parallelism in the pipeline, just a program waited for). :meth:`result` joins and
    re-raises errors; :meth:`abort` ends the sampler, which would outlive this process."""

    def __init__(self, source, target, workdir=None, **kwargs):
        self._result = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(
            target=self._run, args=(source, target, workdir), kwargs=kwargs,
            name="eflomal", daemon=True,
        )
        self._thread.start()

    def _run(self, source, target, workdir, **kwargs):
        try:
            self._result = align_eflomal(source, target, workdir, **kwargs)
        except BaseException as err:  # re-raised in the caller's thread
            self._error = err

    def result(self):
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
