"""The preprocessing pipeline: text + parses (+ alignments) -> fairseq data-bin.

Steps (nothing is written to ``--destdir`` unless all of them succeed):

1. read and validate every input file of every split (UTF-8, no empty lines, equal line
   counts, parse words == text tokens, trees valid, alignment indices in range); with
   ``--parser`` the source is parsed with spaCy instead
   (:mod:`fairseq_syntax.syntax.spacy_parser`; the parses are cached as CoNLL-U,
   :mod:`.spacy_parse`); with ``--ptb-suffix`` the bracketed constituency parses are
   read, their leaves checked against the text and binarised at word level
   (:mod:`fairseq_syntax.syntax.constituency`);
2. the *subword stage* (:func:`subword_stage`), which needs no parse: train (or load) a
   sentencepiece model; encode source words one by one and the target sentence as a
   whole; write fairseq's dictionaries and token binaries for the subword tokens into
   a staging folder (a sibling of ``--destdir``), byte for byte what fairseq's own
   ``fairseq-preprocess --dataset-impl mmap`` writes (:mod:`.fairseq_binary`); with
   ``--align eflomal`` align the train and valid splits (:mod:`.eflomal_align`, started
   first, in a thread); project the alignments onto subwords and binarise them as
   fairseq's alignment binarizer does;
3. project the heads onto subwords, record the word of each subword, binarise the word
   trees (the dependency tree head-outward, or with ``--ptb-suffix`` the binarised
   constituency tree) and hang each word's pieces below it, sentence by sentence with
   :func:`fairseq_syntax.syntax.annotate.annotate` (as raw input does); write the
   ``heads``/``words``/``tree`` side-files, ``spm.model`` and ``syntax_manifest.json`` into the staging folder;
4. move the staging folder into place (with ``--force``, replacing the old folder only
   at this last step).

With ``--parser`` and ``--workers`` > 1 the subword stage runs in a forked child process
while the parser's worker processes parse (:class:`BackgroundStage`), so its cost hides
behind the parse; otherwise the steps run one after the other.
"""
import json
import logging
import os
import pickle
import shutil
import signal
import tempfile
import traceback
from typing import Dict

from fairseq_syntax.syntax.errors import SyntaxInputError

from .interrupt import StopOnSignals
from .project import EarlyProjection, project_trees
from .read import cached_parse, load_split, parse_split, split_files
from .subwords import subword_stage
from .write import (SPM_MODEL_NAME, _make_parents, build_manifest, check_destdir, install,
                    write_side_files)

logger = logging.getLogger("fairseq_syntax_preprocess")


class BackgroundStage:
    """Run ``fn()`` in a forked child process (its own process group, so that
    :meth:`abort` also stops the eflomal sampler it may have started); :meth:`result`
    waits and returns ``fn``'s value, or raises its exception."""

    def __init__(self, fn, result_path: str, tmpdir: str):
        import multiprocessing as mp

        self.result_path = result_path
        self.process = mp.get_context("fork").Process(
            target=self._child, args=(fn, result_path, tmpdir), name="subword-stage")
        self.process.start()

    @staticmethod
    def _child(fn, result_path, tmpdir):
        os.setpgid(0, 0)
        tempfile.tempdir = tmpdir  # eflomal's temporary files go with the work folder
        try:
            value = ("ok", fn())
        except BaseException as err:  # handed to the parent
            value = ("error", err, traceback.format_exc())
        try:
            payload = pickle.dumps(value)
        except Exception:
            payload = pickle.dumps(("error", RuntimeError(value[-1]), value[-1]))
        with open(result_path + ".tmp", "wb") as f:
            f.write(payload)
        os.replace(result_path + ".tmp", result_path)
        if value[0] == "error":  # an eflomal sampler may still run in this group: end it
            os.killpg(0, signal.SIGTERM)

    @staticmethod
    def available() -> bool:
        import multiprocessing as mp

        return "fork" in mp.get_all_start_methods() and hasattr(os, "setpgid")

    def result(self):
        self.process.join()
        if not os.path.exists(self.result_path):
            raise RuntimeError(
                f"the subword stage died (exit code {self.process.exitcode}) without a result"
            )
        with open(self.result_path, "rb") as f:
            value = pickle.load(f)
        if value[0] == "ok":
            return value[1]
        err = value[1]
        if isinstance(err, SyntaxInputError):
            raise SyntaxInputError(str(err)) from None
        if isinstance(err, (OSError, KeyboardInterrupt)):
            raise err
        raise RuntimeError(f"the subword stage failed:\n{value[2]}")

    def abort(self):
        """Stop the stage and what it started (an eflomal sampler outlives its parent);
        the group lives on while any member does, so its id is still ours."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except OSError:  # the group is gone already
            pass
        self.process.join()


def run(args) -> None:
    """Run the whole pipeline for parsed command-line ``args`` (see ``cli.get_parser``).
    SIGTERM or SIGINT stops it with :class:`~.interrupt.Interrupted`, after the staging
    and work folders are removed; ``--destdir`` is then as it was."""
    with StopOnSignals() as stop:
        _run(args, stop)


def _run(args, stop: StopOnSignals) -> None:
    destdir = os.path.normpath(args.destdir)
    files = split_files(args)
    # what replacing --destdir must not delete (not --spm-model: it is read, and copied
    # into the data-bin as spm.model, before the old folder goes; rebuild_command uses that)
    inputs = [path for f in files for path in (f.source, f.target, f.parse, f.align, f.ptb) if path]
    if getattr(args, "parse_cache", None):
        inputs.append(args.parse_cache)
    check_destdir(destdir, args.force, inputs)
    if args.spm_model is not None and not os.path.isfile(args.spm_model):
        raise SyntaxInputError("sentencepiece model (--spm-model) not found", args.spm_model)

    # 1. read and validate everything (--parser: what is not cached is parsed below)
    use_parser = bool(getattr(args, "parser", None))
    splits = [load_split(f, align_required=(f.name == "train"), read_parse=not use_parser)
              for f in files]
    parser, to_parse = None, []
    if use_parser:
        from fairseq_syntax.syntax.spacy_parser import SpacyParser

        parser = SpacyParser(args.parser)
        to_parse = [d for d in splits if not cached_parse(d, parser)]
        if to_parse:
            parser.nlp  # load it before any process is forked, so the workers inherit it

    parent = os.path.dirname(os.path.abspath(destdir))
    created = _make_parents(parent)
    base = os.path.basename(os.path.abspath(destdir))
    staging = work = background = pool = None
    ok = False
    try:
        with stop.held():  # a folder made is a folder named, so that cleanup finds it
            staging = tempfile.mkdtemp(prefix=f".{base}.staging-", dir=parent)
            work = tempfile.mkdtemp(prefix=f".{base}.work-", dir=parent)

        # 2. the subword stage: in a child process while the parser runs, or in line
        in_background = bool(to_parse) and args.workers > 1 and BackgroundStage.available()
        counts_path = os.path.join(work, "source-counts.pickle")
        early: Dict[str, EarlyProjection] = {}

        def stage():
            # beside the parser's workers one sentencepiece thread: more threads only spin
            # (2 threads cost 3x the CPU time of 1 on Multi30k, for the same model)
            return subword_stage(args, splits, work, staging,
                                 threads=1 if in_background else None,
                                 counts_path=counts_path if in_background else None)

        if in_background:
            logger.info("subwords, fairseq binaries%s: in a background process while parsing",
                        " and eflomal" if getattr(args, "align", None) else "")
            background = BackgroundStage(stage, os.path.join(work, "subword-stage.pickle"), work)
        if to_parse:
            from fairseq_syntax.syntax.spacy_parser import ParserPool

            pool = ParserPool(parser.nlp, args.workers)
            for data in to_parse:
                on_tree = None
                if in_background:  # project the trees as they come, in this waiting process
                    on_tree = early[data.files.name] = EarlyProjection(counts_path,
                                                                       data.files.name)
                parse_split(data, parser, args.workers, args.parse_batch_size, pool=pool,
                            on_tree=on_tree)
            pool.close()
            pool = None
        if background is not None:
            try:
                output = background.result()
            finally:  # on failure: stop an eflomal sampler it may have left running
                if background.process.exitcode != 0 or not os.path.exists(
                        background.result_path):
                    background.abort()
                background = None
        else:
            output = stage()
        model_path, trained, encoded = output.model_path, output.trained, output.encoded
        for data, enc in zip(splits, encoded):
            logger.info(
                "%s: %d sentence pairs, parses %s %s%s", data.files.name, len(data.source),
                "cached in" if use_parser else "from", data.files.parse,
                f", alignments from {data.files.align or 'eflomal'}" if enc.aligned else "",
            )

        # 3. trees, side-files, model, manifest
        src, tgt = args.source_lang, args.target_lang
        for data, enc in zip(splits, encoded):
            project_trees(data, enc, early.get(data.files.name))
        write_side_files(staging, encoded, src, tgt)
        shutil.copyfile(model_path, os.path.join(staging, SPM_MODEL_NAME))
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=model_path)
        spm_source = (os.path.abspath(args.spm_model) if not trained
                      else "trained on " + " + ".join(
                          os.path.abspath(p) for p in (splits[0].files.source, splits[0].files.target)))
        manifest = build_manifest(args, splits, encoded, sp, spm_source, trained, parser)
        from fairseq_syntax.data.side_files import MANIFEST

        with open(os.path.join(staging, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
            f.write("\n")

        # 4. into place
        with stop.held():  # once in place, the run has succeeded: a late signal is dropped
            install(staging, destdir)
            ok = stop.done = True
        logger.info("wrote %s", destdir)
    finally:
        if pool is not None:
            pool.__exit__(None, None, None)
        if background is not None:
            background.abort()
        for path in (staging, work):
            if path is not None and os.path.lexists(path):
                shutil.rmtree(path, ignore_errors=True)
        if not ok:
            for path in reversed(created):
                try:
                    os.rmdir(path)
                except OSError:
                    break
