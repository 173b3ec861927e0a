"""The scores of one run: BLEU, chrF and the corpus's extra scores of its translations,
attention against gold alignments, the trees it induces, its step time."""
import json
import logging
import os
import shlex
from typing import Sequence

from fairseq_syntax.evaluation.architectures import FAIRSEQ_PEERS
from fairseq_syntax.evaluation.corpus import Corpus, TestSet, references_sha256
from fairseq_syntax.evaluation.fairseq_commands import rnn_size_args
from fairseq_syntax.evaluation.translation_scores import score_translations

from .commands import device_args, transformer_model_args
from .methods import BACKBONE, Method, Row, TRANSFORMER_BACKBONE
from .tools import hypotheses_of, run_function, shown, tool_threads, write_atomically, write_lines


def score_test_set(row: Row, corpus: Corpus, test: TestSet, gen_out: str,
                   out_prefix: str) -> None:
    """BLEU, chrF and the corpus's extra scores of the ``H-`` lines of ``gen_out`` into
    ``row.tests[test.name]``; the detokenised hypotheses into ``row.hypotheses`` (and the
    tokenised ones, which RIBES scores, into ``row.hypotheses_tok``)."""
    hyps_tok = hypotheses_of(gen_out)
    write_lines(out_prefix + ".hyp.tok", hyps_tok)
    hyps = corpus.detokenize()(hyps_tok)
    write_lines(out_prefix + ".hyp", hyps)
    refs = corpus.references(test)
    if len(hyps) != len(refs):
        raise RuntimeError(f"{len(hyps)} translations of {test.subset} but {len(refs)} "
                           f"references in {test.reference} (see {gen_out})")
    refs_tok = corpus.references_tok(test)
    ribes = "ribes" in corpus.scores
    scored = score_translations(hyps, refs, corpus.bleu_tokenize,
                                hyps_tok if ribes else None, refs_tok if ribes else None)
    scores = row.tests.setdefault(test.name, {})
    scores.update(bleu=scored.bleu, chrf=scored.chrf)
    row.bleu_signature, row.chrf_signature = scored.signatures["bleu"], scored.signatures["chrf"]
    row.hypotheses[test.name] = hyps
    row.references_sha256[test.name] = references_sha256(refs, refs_tok)
    if ribes:
        scores["ribes"], row.ribes_signature = scored.ribes, scored.signatures["ribes"]
        row.hypotheses_tok[test.name] = hyps_tok
    if "bleu_tok" in corpus.scores:  # comparable with published tokenised BLEU
        scores["bleu_tok"] = tokenised_bleu(hyps_tok, refs_tok)
    if "agreement" in corpus.scores:
        from fairseq_syntax.evaluation.agreement import agreement_report
        from fairseq_syntax.syntax.conllu_io import read_conllu_trees

        report = agreement_report(hyps_tok, refs, read_conllu_trees(test.source_trees))
        scores.update(agreement=report.accuracy,
                      agreement_counts=f"{report.correct}/{report.total}",
                      agreement_long=(report.long_distance_accuracy
                                      if report.long_distance_total else None),
                      agreement_long_counts=(f"{report.long_distance_correct}/"
                                             f"{report.long_distance_total}"))


def tokenised_bleu(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """BLEU of already tokenised text (``tokenize="none"``), without sacreBLEU's warning
    that the text looks tokenised: here it is meant to be."""
    from sacrebleu.metrics import BLEU

    sacrelogger = logging.getLogger("sacrebleu")
    level = sacrelogger.level
    sacrelogger.setLevel(logging.ERROR)
    try:
        return BLEU(tokenize="none").corpus_score(list(hyps), [list(refs)]).score
    finally:
        sacrelogger.setLevel(level)


def score_alignments(generate_out: str, gold: str) -> dict:
    from fairseq_syntax.evaluation.alignments import score_alignment_files

    return score_alignment_files(gold, generate_out)


def step_time_ratio(method: Method, corpus: Corpus, args, save: str, log: str,
                    commands: dict) -> float:
    """CPU time of a training step of ``method`` over the backbone's, on the same batches
    (:func:`~fairseq_syntax.evaluation.step_time.measure` in its own process, one thread; the
    seconds per step also to ``step_time.json``)."""
    from fairseq_syntax.evaluation.step_time import measure, per_step

    spec = method.arch + ("" if method.criterion == "label_smoothed_cross_entropy"
                          else "+" + method.criterion)
    if method.family == "transformer":
        backbone, batches = TRANSFORMER_BACKBONE, args.step_time_batches
        model_args = transformer_model_args(method, args.transformer)
        max_tokens = args.transformer["max_tokens"]
    else:
        backbone, batches = BACKBONE, args.step_time_batches
        model_args = rnn_size_args(args.embed_dim, args.encoder_hidden, args.decoder_hidden,
                                   args.dropout)
        max_tokens = args.max_tokens
    if spec == backbone:
        return 1.0
    out = os.path.join(save, "step_time.json")
    cmd = ["fairseq-syntax-step-time", corpus.databin, "--runs", f"{backbone},{spec}",
           "--model-args", shlex.join(model_args), "--batches", str(batches),
           "--rounds", "1", "--max-tokens", str(max_tokens), "--json", out]
    commands["step_time"] = shown(cmd)  # the same measurement as a command line
    totals = run_function(measure, dict(
        databin=corpus.databin, specs=[backbone, spec], model_args=model_args,
        batches=batches, rounds=1, max_tokens=max_tokens), log, threads=1)
    seconds = per_step(totals, batches)
    write_atomically(out, json.dumps(seconds, indent=1))
    return seconds[spec]["cpu_ratio"]


def step_time_batches_of(method: Method, args) -> int:
    """Batches of the step-time measurement of ``method`` (0: not measured). fairseq-syntax-step-time
    builds runs of ``syntax_translation`` and of fairseq's own peers (for which the ratio's inverse
    is the backbone's words/s over the peer's)."""
    measured = method.task == "syntax_translation" or method.arch in FAIRSEQ_PEERS
    return args.step_time_batches if measured else 0


def induced_scores(row: Row, corpus: Corpus, ckpt: str, args, save: str, log: str,
                   commands: dict) -> None:
    """DA/UA of the trees the checkpoint induces on the test source and the branching
    baselines (:func:`~fairseq_syntax.evaluation.induced_trees.score_checkpoint` in its own
    process), to one decimal as earlier records hold them."""
    from fairseq_syntax.evaluation.induced_trees import score_checkpoint

    first = corpus.test_sets[0]
    gold, output = first.source_trees, os.path.join(save, f"induced.{first.name}.conllu")
    cmd = ["fairseq-syntax-induced-trees", corpus.databin, "--path", ckpt,
           "--gen-subset", first.subset, "--gold", gold, "--output", output, *device_args(args)]
    commands["induced_trees"] = shown(cmd)  # the same scores as a command line
    scores = run_function(score_checkpoint, dict(
        data=corpus.databin, path=ckpt, split=first.subset, gold=gold, output=output,
        cpu=not args.gpu), log, threads=tool_threads(args)).scores
    row.da, row.ua = (round(scores.model.directed_accuracy, 1),
                      round(scores.model.undirected_accuracy, 1))
    row.baselines = {name: round(value, 1) for name, value in (
        ("left DA", scores.left.directed_accuracy), ("left UA", scores.left.undirected_accuracy),
        ("right DA", scores.right.directed_accuracy),
        ("right UA", scores.right.undirected_accuracy))}
