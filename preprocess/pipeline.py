"""The preprocessing pipeline: text + parses (+ alignments) -> fairseq data-bin, as four
stages in a straight line (nothing is written to ``--destdir`` unless all succeed):

1. :mod:`.read`: read and validate every input file of every split; with ``--parser``
   the source is parsed with spaCy (cached as CoNLL-U), with ``--ptb-suffix`` the
   bracketed constituency parses are read;
2. :mod:`.subwords`: sentencepiece, fairseq's dictionaries and token binaries, and the
   word alignments (read, or with ``--align eflomal`` computed) projected onto subwords
   and binarised, into a staging folder beside ``--destdir``;
3. :mod:`.project`: the trees projected onto subwords (heads, words, binary trees);
4. :mod:`.write`: the side-files, ``spm.model`` and ``syntax_manifest.json``; then the
   staging folder moved into place (with ``--force``, replacing the old folder only at
   this last step).

Parallelism is the parser's pool of worker processes alone: the splits to parse are
handed to the workers first, the subword stage runs in the main process while they
parse, and the trees are projected as they arrive. eflomal's sampler is an external
program, waited for from a thread (:mod:`.eflomal_align`).
"""
import contextlib
import errno
import logging

from .interrupt import StopOnSignals
from .project import TreeProjection
from .read import Parsing, load_split, split_files
from .subwords import subword_stage
from .write import Staging, check_inputs, write_model_and_manifest, write_side_files

logger = logging.getLogger("fairseq_syntax_preprocess")


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@contextlib.contextmanager
def _naming_a_full_disk(destdir: str):
    """A full disk (or quota) while the data-bin is written: an ``OSError`` naming
    ``destdir``, beside which the staging and work folders were being written."""
    try:
        yield
    except OSError as err:
        if err.errno not in _DISK_FULL or err.filename is not None:
            raise
        raise OSError(err.errno, f"{err.strerror} while writing the data-bin (beside this "
                      "folder; what was written is removed): free space on that disk, or give "
                      "a --destdir on another one, and rerun", destdir) from err


def run(args) -> None:
    """Run the whole pipeline for parsed command-line ``args`` (see ``cli.get_parser``).
    SIGTERM or SIGINT stops it with :class:`~.interrupt.Interrupted`, after the staging
    and work folders are removed (and the parser's workers and eflomal's sampler
    stopped); ``--destdir`` is then as it was. A full disk is an ``OSError`` naming
    ``--destdir`` (a failed write names no file)."""
    with StopOnSignals() as stop:
        files = split_files(args)
        check_inputs(args, files)
        splits = [load_split(f, align_required=(f.name == "train"),
                             read_parse=not getattr(args, "parser", None)) for f in files]
        parsing = Parsing.of(args, splits)  # the cached parses are taken here
        with _naming_a_full_disk(args.destdir), Staging(
                args.destdir, stop, args.force,
                getattr(args, "force_non_data_bin", False)) as folders, parsing:
            parsing.start()
            if parsing.concurrent:
                logger.info("subwords, fairseq binaries%s: while the parser's workers parse",
                            " and eflomal" if getattr(args, "align", None) else "")
            # beside the parser's workers one sentencepiece thread: more threads only spin
            # (2 threads cost 3x the CPU time of 1 on Multi30k, for the same model)
            subwords = subword_stage(args, splits, folders.work, folders.staging,
                                     threads=1 if parsing.concurrent else None)
            projections = {d.files.name: TreeProjection(d, e)
                           for d, e in zip(splits, subwords.encoded)}
            parsing.collect(on_tree=lambda data: projections[data.files.name])
            for data, enc in zip(splits, subwords.encoded):
                logger.info(
                    "%s: %d sentence pairs, parses %s %s%s", data.files.name,
                    len(data.source), "cached in" if parsing.parser else "from",
                    data.files.parse,
                    f", alignments from {data.files.align or 'eflomal'}" if enc.aligned else "")
            for projection in projections.values():
                projection.finish()
            src, tgt = args.source_lang, args.target_lang
            write_side_files(folders.staging, subwords.encoded, src, tgt)
            write_model_and_manifest(args, folders.staging, splits, subwords.encoded,
                                     subwords.model_path, subwords.trained, parsing.parser)
            folders.install()
        logger.info("wrote %s", folders.destdir)
