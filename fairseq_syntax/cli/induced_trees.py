"""``fairseq-syntax-induced-trees``: extract, write and score the source trees a
structured-attention model induces (Tran & Bisk 2018, §7 and Table 3), and analyse its
syntax gate (§6, eq. 17).

For each checkpoint (``--path``, repeatable; any ``structured_attention_rnn``
architecture: ``sa_nmt_shared``, ``sa_nmt``, ``sa_nmt_1set``, ``sa_nmt_hard``,
``fa_nmt_shared``, ``fa_nmt``; or an ``sa_transformer*`` one, whose column is
``transformer``) and each sentence of a data-bin split (``--gen-subset``):

1. run the encoder and read ``head_marginals`` / ``root_marginals`` of the source pieces
   (for FA-NMT: the flat self-attention weights, the self weight as the root; for
   ``sa_transformer``: the first tree head of its highest tree layer);
2. drop the eos position, collapse the sentencepiece pieces into words by summing the
   marginal mass of their pieces into word-level head→modifier and root scores (§7.1).
   With ``--gold`` the words are the gold words, each encoded with the data-bin's
   ``spm.model`` as ``fairseq-syntax-preprocess`` did; otherwise a word starts at a piece
   beginning with ``▁`` (a piece outside the dictionary, ``<unk>``, counts as a word);
3. decode the best single-root tree with Chu-Liu-Edmonds
   (``networkx.maximum_spanning_arborescence``; an artificial root node with exactly one
   outgoing arc, enforced by a penalty on root arcs; see
   :mod:`fairseq_syntax.syntax.tree_scores`);
4. write the trees as CoNLL-U (``--output``; with several checkpoints it must contain
   ``{arch}``, replaced by each checkpoint's architecture).

With ``--gold FILE.conllu`` (the split's gold source trees, one per sentence in order,
e.g. the synthetic corpus's ``test.en.conllu``) it prints directed/undirected attachment
accuracy without punctuation (gold UPOS ``PUNCT``) in the layout of the paper's Table 3,
next to the left-branching (L), right-branching (R) and undirected (Un) baselines; each
checkpoint fills the column of its architecture.

Gate analysis (one checkpoint with a syntax gate): ``--gate-out FILE`` translates the
split with beam search, force-decodes each hypothesis and writes, per sentence, a few
``#`` comment lines (id, source, hypothesis) and one line per target token (its
sentencepiece piece, ``</s>`` last) with the norm ``‖g_t‖₂`` of the syntax gate at the
step that predicts it, tab-separated, then a blank line. ``--gate-heatmap PNG`` draws
the first ``--heatmap-sentences`` sentences like the paper's Figure 4 (darker: more
syntax).

    fairseq-syntax-induced-trees data-bin --path checkpoints/checkpoint_last.pt \\
        --gen-subset test --output induced.conllu --gold raw/test.en.conllu \\
        --gate-out gates.tsv --gate-heatmap gates.png
"""
import argparse
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from fairseq_syntax.evaluation.gate_norms import draw_gates, gate_norms, write_gates
from fairseq_syntax.evaluation.induced_trees import gold_word_lengths, induced, load
from fairseq_syntax.syntax.tree_scores import format_table3, read_gold_trees


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fairseq-syntax-induced-trees",
        description="Extract the source dependency trees a structured-attention model "
        "(sa_nmt_shared, sa_nmt, sa_nmt_1set, sa_nmt_hard, fa_nmt_shared, fa_nmt, "
        "sa_transformer*) induces "
        "on a data-bin split, write them as CoNLL-U, score them against gold trees "
        "(directed/undirected attachment accuracy without punctuation, Table 3 of Tran & "
        "Bisk 2018) and optionally write the syntax-gate norms of the translations.",
    )
    parser.add_argument("data", metavar="DATA-BIN",
                        help="the data-bin folder (dictionaries and the split to read)")
    parser.add_argument("--path", required=True, action="append", metavar="CKPT",
                        help="checkpoint of a structured_attention_rnn or sa_transformer model; "
                        "repeat it to fill "
                        "several Table 3 columns")
    parser.add_argument("--gen-subset", default="test", metavar="SPLIT",
                        help="data-bin split to read (default: test)")
    parser.add_argument("--output", metavar="FILE",
                        help="CoNLL-U file for the induced trees; with several --path it must "
                        "contain '{arch}' (replaced by each checkpoint's architecture)")
    parser.add_argument("--gold", metavar="CONLLU",
                        help="gold CoNLL-U trees of the split (one sentence per source line, "
                        "same words) to score against")
    parser.add_argument("--label", default=None,
                        help="row label of the table (default: 'SRC (TGT)' of the task)")
    parser.add_argument("--batch-size", type=int, default=32,
                        help="sentences per batch (default: 32)")
    parser.add_argument("--gate-out", metavar="FILE", default=None,
                        help="translate the split and write each target token with its "
                        "syntax-gate norm (tab-separated, one sentence per block)")
    parser.add_argument("--gate-heatmap", metavar="PNG", default=None,
                        help="draw the gate norms of the first --heatmap-sentences sentences")
    parser.add_argument("--heatmap-sentences", type=int, default=8,
                        help="sentences in the gate heatmap (default: 8)")
    parser.add_argument("--beam", type=int, default=5,
                        help="beam size of the translations for the gate analysis (default: 5)")
    parser.add_argument("--max-len-a", type=float, default=0,
                        help="hypotheses have at most a * source length + b tokens (default: 0)")
    parser.add_argument("--max-len-b", type=int, default=200,
                        help="hypotheses have at most a * source length + b tokens (default: 200)")
    parser.add_argument("--cpu", action="store_true",
                        help="run on the CPU even if CUDA is available")
    return parser


def output_path(template: str, arch: str, several: bool) -> str:
    if several and "{arch}" not in template:
        raise SystemExit("error: with several --path, --output must contain '{arch}'")
    return template.replace("{arch}", arch)


def main(argv: Optional[Sequence[str]] = None):
    args = get_parser().parse_args(argv)
    if args.batch_size <= 0 or args.heatmap_sentences <= 0 or args.beam <= 0:
        raise SystemExit("error: --batch-size, --heatmap-sentences and --beam must be positive")
    if (args.gate_out or args.gate_heatmap) and len(args.path) != 1:
        raise SystemExit("error: the gate analysis (--gate-out, --gate-heatmap) takes one --path")
    if not (args.output or args.gold or args.gate_out or args.gate_heatmap):
        raise SystemExit("error: nothing to do: give --output, --gold, --gate-out or --gate-heatmap")
    use_cuda = torch.cuda.is_available() and not args.cpu
    gold = read_gold_trees(args.gold) if args.gold else None
    word_lengths = gold_word_lengths(args.data, gold, args.gold) if gold is not None else None
    columns: Dict[str, Tuple[float, float]] = {}
    described: List[str] = []
    scores = None
    label = args.label
    for path in args.path:
        model, task = load(path, args.data, args.gen_subset, use_cuda)
        label = label or f"{task.cfg.source_lang.upper()} ({task.cfg.target_lang.upper()})"
        out = output_path(args.output, model.arch_name, len(args.path) > 1) \
            if args.output else None
        result = induced(model, task, args.gen_subset, args.batch_size, use_cuda, out, gold,
                         args.gold, word_lengths)
        column = result.column
        if gold is not None:
            if column in columns:
                raise SystemExit(f"error: two checkpoints fill the Table 3 column {column}")
            scores = result.scores
            columns[column] = (scores.model.directed_accuracy, scores.model.undirected_accuracy)
            described.append(f"  {column:<12} {model.arch_name:<14} DA/UA "
                             f"{columns[column][0]:.1f}/{columns[column][1]:.1f}  {path}")
        if args.gate_out or args.gate_heatmap:
            sentences = gate_norms(model, task, args.gen_subset, args.batch_size, args.beam,
                                   args.max_len_a, args.max_len_b, use_cuda)
            if args.gate_out:
                write_gates(args.gate_out, sentences)
                print(f"wrote the syntax-gate norms of {len(sentences)} translations to "
                      f"{args.gate_out}")
            if args.gate_heatmap:
                shown = sentences[:args.heatmap_sentences]
                title = (f"syntax gate norm per target token ({model.arch_name}, "
                         f"{args.gen_subset}, beam {args.beam})")
                w, h = draw_gates(args.gate_heatmap, shown, title)
                print(f"wrote {args.gate_heatmap}: {len(shown)} sentences, {w} x {h} pixels")
    if gold is not None:
        total = scores.model.total
        punct = sum(len(t.heads) for t in gold) - total
        print(f"\nInduced trees of '{args.gen_subset}' against {args.gold}: {len(gold)} "
              f"sentences, {total} words scored ({punct} punctuation tokens excluded).")
        print("Directed/undirected attachment accuracy (DA/UA, %, without punctuation); "
              "baselines: left-branching (L, DA), right-branching (R, DA), undirected (Un, UA "
              "of the adjacent-word chain):\n")
        print(format_table3(label, columns, scores.baselines()))
        print("\ncolumns:")
        for line in described:
            print(line)
        print(f"  baselines    left-branching DA/UA {scores.left.directed_accuracy:.1f}/"
              f"{scores.left.undirected_accuracy:.1f}, right-branching DA/UA "
              f"{scores.right.directed_accuracy:.1f}/{scores.right.undirected_accuracy:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
