"""``fairseq-syntax-score-agreement``: main-verb agreement accuracy of a system output on the
synthetic corpus (and on its long-distance sentences, and BLEU); with ``--baseline``, the
system's difference from another system on the same sentences, by sacreBLEU's paired
bootstrap (:func:`~fairseq_syntax.evaluation.significance.paired_deltas`)."""
import argparse
from typing import List, Optional

from fairseq_syntax.data.synthetic_corpus import detokenize
from fairseq_syntax.evaluation.agreement import agreement_counts, agreement_report
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.text_io import read_text_lines


def main(argv: Optional[List[str]] = None) -> int:
    """``fairseq-syntax-score-agreement``: main-verb agreement accuracy of a system output."""
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-score-agreement",
        description="Share of hypotheses whose main (last) verb has the same number as "
        "the reference's main verb, in the synthetic vf language.",
    )
    parser.add_argument("--hyp", required=True, metavar="FILE",
                        help="system output, one vf sentence per line")
    parser.add_argument("--ref", required=True, metavar="FILE",
                        help="reference vf sentences, one per line (e.g. test.vf)")
    parser.add_argument("--src-conllu", metavar="FILE",
                        help="gold source trees (e.g. test.en.conllu); also prints the "
                        "accuracy on long-distance sentences (>= 2 attractors: nouns before the "
                        "main verb with the other number than the subject head noun)")
    parser.add_argument("--bleu", action="store_true",
                        help="also print sacreBLEU of the detokenised hypotheses against the "
                        "detokenised references, with its signature")
    parser.add_argument("--baseline", metavar="FILE",
                        help="another system's output on the same sentences (e.g. the "
                        "backbone's): also print --hyp's difference from it in agreement (and "
                        "BLEU with --bleu), with its 95 %% interval and p by sacreBLEU's paired "
                        "bootstrap resampling (PairedTest, 1,000 resamples)")
    args = parser.parse_args(argv)
    try:  # an empty hypothesis is a line too
        hyps, refs = (read_text_lines(path, allow_empty=True) for path in (args.hyp, args.ref))
        baseline = read_text_lines(args.baseline, allow_empty=True) if args.baseline else None
    except SyntaxInputError as err:
        parser.error(str(err))
    for path, lines in ((args.hyp, hyps), (args.baseline, baseline)):
        if lines is not None and len(lines) != len(refs):
            parser.error(f"line counts differ: {path} has {len(lines)} lines, "
                         f"{args.ref} has {len(refs)}")
    trees = None
    if args.src_conllu:
        from fairseq_syntax.syntax.conllu_io import read_conllu_trees

        try:
            trees = read_conllu_trees(args.src_conllu)
        except (OSError, SyntaxInputError) as err:
            parser.error(str(err))
        if len(trees) != len(refs):
            parser.error(f"{args.src_conllu} has {len(trees)} sentences, "
                         f"{args.ref} has {len(refs)} lines")
    try:
        correct, total = agreement_counts(hyps, refs)
    except ValueError as err:
        parser.error(f"{args.ref}: {err}")
    accuracy = 100.0 * correct / total if total else 0.0
    print(f"agreement accuracy: {accuracy:.2f} ({correct}/{total})")
    if trees is not None:
        report = agreement_report(hyps, refs, trees)
        print(f"long-distance agreement accuracy: {report.long_distance_accuracy:.2f} "
              f"({report.long_distance_correct}/{report.long_distance_total})")
    # (label, sacreBLEU metric, system, baseline, references) of each paired test
    paired = [("agreement", "agreement", hyps, baseline, refs)]
    if args.bleu:
        from sacrebleu.metrics import BLEU

        text = [[detokenize(s) for s in lines] if lines is not None else None
                for lines in (hyps, baseline, refs)]
        bleu = BLEU()
        score = bleu.corpus_score(text[0], [text[2]])
        print(f"BLEU (detokenised): {score.score:.2f} ({bleu.get_signature()})")
        paired.append(("BLEU (detokenised)", "bleu", *text))
    if baseline is not None:
        _print_paired_deltas(args.baseline, paired)
    return 0


def _print_paired_deltas(baseline_path: str, paired) -> None:
    """--hyp minus --baseline: Δ [95 % interval] and p of each score, paired bootstrap."""
    import logging

    from fairseq_syntax.evaluation.significance import N_SAMPLES, interval, paired_deltas

    logging.getLogger("sacrebleu").setLevel(logging.WARNING)  # its per-step INFO lines
    print(f"paired bootstrap against {baseline_path} ({N_SAMPLES} resamples):")
    for label, metric, system, base, references in paired:
        d = paired_deltas(metric, base, {"system": system}, references)["system"]
        print(f"  delta {label}: {interval(d.delta, d.low, d.high)} p = {d.p:.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
