"""The preprocessing pipeline: text + parses (+ alignments) -> fairseq data-bin, in a
straight line (nothing is written to ``--destdir`` unless all succeed), its memory not
growing with the corpus:

1. :mod:`.read`: check every input file of every split, one line (or tree) at a time;
   with ``--parser`` the source is parsed with spaCy into its CoNLL-U cache;
2. :mod:`.subwords`: sentencepiece trained on the train text (or ``--spm-model``);
   with ``--align eflomal`` the train and valid splits aligned meanwhile;
3. :mod:`.stream`: each split read pair by pair, in chunks: encoded, its trees and
   alignments projected (:mod:`.project`) and binarised into a staging folder beside
   ``--destdir``; then fairseq's dictionaries and token binaries;
4. :mod:`.write`: ``spm.model`` and ``syntax_manifest.json``; then the staging folder
   moved into place (with ``--force``, replacing the old folder only at this last step).

Parallelism is the parser's pool of worker processes alone: the splits to parse are
handed to the workers first, and sentencepiece is trained in the main process while they
parse. eflomal is a program of its own, started first and waited for when its links are
needed (:mod:`.eflomal_align`).
"""
import contextlib
import errno
import logging

from .interrupt import StopOnSignals
from .read import Parsing, check_split, parse_trees, read_pairs, split_files
from .stream import binarise_split, write_token_binaries
from .subwords import eflomal_links, sentencepiece_model, start_eflomal
from .write import Staging, check_inputs, write_model_and_manifest

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
        splits = [check_split(f, align_required=(f.name == "train"),
                              read_parse=not getattr(args, "parser", None)) for f in files]
        parsing = Parsing.of(args, splits)  # the cached parses are taken here
        with _naming_a_full_disk(args.destdir), Staging(
                args.destdir, stop, args.force,
                getattr(args, "force_non_data_bin", False)) as folders, parsing:
            parsing.start()
            aligner = start_eflomal(args, splits, folders.work)
            try:
                if parsing.concurrent:
                    logger.info("sentencepiece%s: while the parser's workers parse",
                                " and eflomal" if aligner else "")
                # beside the parser's workers one sentencepiece thread: more threads only
                # spin (2 threads cost 3x the CPU time of 1 on Multi30k, for the same model)
                sp, model_path, trained = sentencepiece_model(
                    args, splits[0], folders.work,
                    threads=1 if parsing.concurrent else None)
                parsing.collect()
                computed = eflomal_links(aligner, splits)
            finally:
                if aligner is not None:  # on failure or a signal: stop eflomal's sampler too
                    aligner.abort()
            src, tgt = args.source_lang, args.target_lang
            summaries = []
            for data in splits:
                links = computed.pop(data.files.name, None)
                pairs = read_pairs(data, parse_trees(data, parsing.parser is not None), links)
                summaries.append(binarise_split(
                    data, pairs, sp, folders.staging, folders.work, src, tgt,
                    aligned=links is not None or data.files.align is not None))
                logger.info(
                    "%s: %d sentence pairs, parses %s %s%s", data.files.name, data.sentences,
                    "cached in" if parsing.parser else "from", data.files.parse,
                    f", alignments from {data.files.align or 'eflomal'}"
                    if summaries[-1].aligned else "")
            for summary in summaries:
                if summary.tree_error is not None:
                    raise summary.tree_error
            write_token_binaries(folders.staging, folders.work, summaries, src, tgt,
                                 args.joined_dictionary)
            write_model_and_manifest(args, folders.staging, splits, summaries, model_path,
                                     trained, parsing.parser)
            folders.install()
        logger.info("wrote %s", folders.destdir)
