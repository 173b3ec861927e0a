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
import math
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch

import fairseq_syntax  # noqa: F401  (registers the task and models, allows safe checkpoint loading)
from fairseq_syntax.syntax.conllu_io import ParsedSentence, write_conllu
from fairseq_syntax.syntax.subwords import spans_of_word_lengths
from fairseq_syntax.syntax.tree_scores import (
    CorpusScores, GoldTree, extract_tree, format_table3, read_gold_trees, score_corpus,
)


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


# ---------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------


def load(path: str, data: str, split: str, use_cuda: bool):
    """(model, task) of a structured_attention_rnn or sa_transformer checkpoint, with
    ``split`` loaded."""
    from fairseq_syntax.cli import load_trained_model
    from fairseq_syntax.models.sa_transformer import SATransformerModel
    from fairseq_syntax.models.structured_attention_rnn import StructuredAttentionRNNModel

    model, cfg, task = load_trained_model(
        path, data, split, (StructuredAttentionRNNModel, SATransformerModel),
        "structured_attention_rnn or sa_transformer model (train with --arch sa_nmt_shared, "
        "sa_nmt, sa_nmt_1set, sa_nmt_hard, fa_nmt_shared, fa_nmt or sa_transformer*)", use_cuda)
    model.arch_name = getattr(cfg.model, "arch", None) or getattr(cfg.model, "_name", "?")
    return model, task


def batches(dataset, batch_size: int, use_cuda: bool):
    """Samples of consecutive sentences (fairseq's collater sorts them; ``id`` says which)."""
    from fairseq import utils

    for start in range(0, len(dataset), batch_size):
        sample = dataset.collater([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
        yield utils.move_to_cuda(sample) if use_cuda else sample


# ---------------------------------------------------------------------------------------
# trees
# ---------------------------------------------------------------------------------------


def gold_word_lengths(data: str, gold, gold_path: str
                      ) -> Optional[List[Tuple[List[int], str]]]:
    """(pieces per gold word, ``file:line`` of the tree) of every sentence, each word
    encoded alone with the data-bin's sentencepiece model, as ``fairseq-syntax-preprocess``
    encodes source words; None when the data-bin has no sentencepiece model."""
    from fairseq_syntax.data.raw_input import data_bin_sentencepiece

    sp = data_bin_sentencepiece(data)
    if sp is None:
        return None
    lengths = []
    for tree in gold:
        per_word = sp.encode(list(tree.words), out_type=str) if tree.words else []
        if any(not p for p in per_word):
            raise SystemExit(f"error: {gold_path}:{tree.line}: a gold word encodes to no "
                             f"sentencepiece piece with {data}'s sentencepiece model")
        lengths.append(([len(p) for p in per_word], f"{gold_path}:{tree.line}"))
    return lengths


def _batch_first(value):
    """A tensor of the encoder output: the RNN's own, or the one of a Transformer's
    one-element list (fairseq's ``encoder_out`` convention)."""
    return value[0] if isinstance(value, list) else value


def induce_trees(model, task, split: str, batch_size: int, use_cuda: bool,
                 word_lengths: Optional[List[Tuple[List[int], str]]] = None
                 ) -> List[Tuple[List[str], List[int]]]:
    """(words, 0-based heads) of every sentence of ``split``, in the split's order.
    ``word_lengths`` (:func:`gold_word_lengths`) groups the pieces into words;
    without it, the sentencepiece marks do (see
    :func:`~fairseq_syntax.syntax.tree_scores.extract_tree`)."""
    dataset = task.dataset(split)
    src_dict = task.source_dictionary
    pad = src_dict.pad()
    trees: List[Optional[Tuple[List[str], List[int]]]] = [None] * len(dataset)
    with torch.no_grad():
        for sample in batches(dataset, batch_size, use_cuda):
            net = sample["net_input"]
            encoder_out = model.encoder(net["src_tokens"], net["src_lengths"])
            heads = _batch_first(encoder_out["head_marginals"]).float().cpu().numpy()
            roots = _batch_first(encoder_out["root_marginals"]).float().cpu().numpy()
            tokens = net["src_tokens"].cpu()
            for row, index in enumerate(sample["id"].tolist()):
                real = tokens[row][tokens[row].ne(pad)].tolist()
                pieces = [src_dict[t] for t in real[:-1]]  # drop the final eos
                spans = None
                if word_lengths is not None and index < len(word_lengths):
                    lengths, where = word_lengths[index]
                    if sum(lengths) != len(pieces):
                        raise SystemExit(
                            f"error: sentence {index} of split '{split}' has {len(pieces)} "
                            f"source pieces but the gold words at {where} encode to "
                            f"{sum(lengths)}: is the gold file the split's source?")
                    spans = spans_of_word_lengths(lengths)
                trees[index] = extract_tree(pieces, heads[row], roots[row], spans)
    return trees  # type: ignore[return-value]


def check_against_gold(trees, gold, split: str, gold_path: str) -> int:
    """Same sentence count and word counts; return how many sentences' forms differ."""
    if len(trees) != len(gold):
        raise SystemExit(
            f"error: split '{split}' has {len(trees)} sentences but {gold_path} has "
            f"{len(gold)} trees"
        )
    differ = 0
    for index, ((words, _), tree) in enumerate(zip(trees, gold)):
        if len(words) != len(tree.words):
            raise SystemExit(
                f"error: sentence {index} of split '{split}' has {len(words)} words after "
                f"collapsing its pieces ({' '.join(words)!r}) but the gold tree at "
                f"{gold_path}:{tree.line} has {len(tree.words)} ({' '.join(tree.words)!r})"
            )
        differ += words != tree.words
    return differ


def output_path(template: str, arch: str, several: bool) -> str:
    if several and "{arch}" not in template:
        raise SystemExit("error: with several --path, --output must contain '{arch}'")
    return template.replace("{arch}", arch)


def table3_column(model) -> str:
    """The column of Table 3 (a key of
    :data:`~fairseq_syntax.syntax.tree_scores.TABLE3_COLUMNS`) that a model fills: an
    ``sa_transformer`` model the SA transformer column; a ``structured_attention_rnn`` one
    FA or SA by its self-attention (flat or structured), then ``1set`` (one annotation set),
    ``hard`` (hard heads), or ``shared`` / ``separate`` by its decoder's syntax context."""
    from fairseq_syntax.models.sa_transformer import SATransformerModel
    from fairseq_syntax.modules.structured_attention import FlatSelfAttention

    if isinstance(model, SATransformerModel):
        return "sa_transformer"
    layer = model.encoder.extensions[0]
    group = "fa" if isinstance(layer, FlatSelfAttention) else "sa"
    if layer.one_set:
        return f"{group}_1set"
    if getattr(layer, "hard", False):
        return f"{group}_hard"
    return f"{group}_{'shared' if model.decoder.attention.shared else 'separate'}"


@dataclass
class InducedTrees:
    """The trees one checkpoint induces on a split, (words, 0-based heads) in the split's
    order, and with gold trees their attachment scores and the branching baselines."""

    arch: str
    column: str  # the checkpoint's Table 3 column
    trees: List[Tuple[List[str], List[int]]]
    scores: Optional[CorpusScores] = None


def induced(model, task, split: str, batch_size: int, use_cuda: bool,
            output: Optional[str] = None, gold: Optional[List[GoldTree]] = None,
            gold_path: Optional[str] = None,
            word_lengths: Optional[List[Tuple[List[int], str]]] = None) -> InducedTrees:
    """Induce the trees of ``split`` (:func:`induce_trees`), write them to ``output`` as
    CoNLL-U and score them against ``gold`` (read from ``gold_path``)."""
    trees = induce_trees(model, task, split, batch_size, use_cuda, word_lengths)
    result = InducedTrees(model.arch_name, table3_column(model), trees)
    if output:
        write_conllu(output, [ParsedSentence(words, heads) for words, heads in trees])
        print(f"wrote {len(trees)} induced trees of '{split}' to {output}")
    if gold is not None:
        differ = check_against_gold(trees, gold, split, gold_path)
        if differ:
            print(f"warning: {differ} sentences' collapsed word forms differ from the gold "
                  "forms (same word counts; scored by position)", file=sys.stderr)
        result.scores = score_corpus([heads for _, heads in trees], gold)
    return result


def score_checkpoint(data: str, path: str, split: str = "test", gold: Optional[str] = None,
                     output: Optional[str] = None, batch_size: int = 32,
                     cpu: bool = False) -> InducedTrees:
    """What ``fairseq-syntax-induced-trees DATA --path PATH --gen-subset SPLIT --gold GOLD
    --output OUTPUT`` computes for one checkpoint: its induced trees, written to
    ``output``, scored against the gold CoNLL-U file ``gold``."""
    use_cuda = torch.cuda.is_available() and not cpu
    gold_trees = read_gold_trees(gold) if gold else None
    word_lengths = gold_word_lengths(data, gold_trees, gold) if gold_trees is not None else None
    model, task = load(path, data, split, use_cuda)
    return induced(model, task, split, batch_size, use_cuda, output, gold_trees, gold,
                   word_lengths)


# ---------------------------------------------------------------------------------------
# gate analysis
# ---------------------------------------------------------------------------------------


def gate_norms(model, task, split: str, batch_size: int, beam: int, max_len_a: float,
               max_len_b: int, use_cuda: bool) -> List[Tuple[int, str, List[str], List[float]]]:
    """Per sentence: (id, source, target pieces ending with </s>, ‖g_t‖₂ per piece)."""
    from fairseq.sequence_generator import SequenceGenerator

    from fairseq_syntax.modules.syntax_gate_attention import GATE, SyntaxGateAttentionLayer

    if not isinstance(getattr(model.decoder, "attention", None), SyntaxGateAttentionLayer):
        raise SystemExit(
            "error: this model has no syntax gate (sa_nmt_1set folds syntax into one "
            "annotation set, sa_transformer has none); the gate analysis needs "
            "sa_nmt_shared, sa_nmt, sa_nmt_hard, fa_nmt_shared or fa_nmt"
        )
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    generator = SequenceGenerator([model], tgt_dict, beam_size=beam, max_len_a=max_len_a,
                                  max_len_b=max_len_b)
    dataset = task.dataset(split)
    results: Dict[int, Tuple[int, str, List[str], List[float]]] = {}
    with torch.no_grad():
        for sample in batches(dataset, batch_size, use_cuda):
            hypos = generator.generate([model], sample)
            targets = [h[0]["tokens"] for h in hypos]
            length = max(len(t) for t in targets)
            prev = targets[0].new_full((len(targets), length), tgt_dict.pad())
            for row, target in enumerate(targets):
                prev[row, 0] = tgt_dict.eos()
                prev[row, 1:len(target)] = target[:-1]
            net = sample["net_input"]
            _, extra = model(net["src_tokens"], net["src_lengths"], prev)
            norms = extra[GATE][0].float().norm(dim=-1).cpu()  # [B, T]
            for row, index in enumerate(sample["id"].tolist()):
                target = targets[row].cpu()
                src = net["src_tokens"][row].cpu()
                source = src_dict.string(src[src.ne(src_dict.pad())], "sentencepiece")
                pieces = [tgt_dict[int(t)] for t in target]
                results[index] = (index, source, pieces, norms[row, :len(target)].tolist())
    return [results[i] for i in sorted(results)]


def write_gates(path: str, sentences) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for index, source, pieces, norms in sentences:
            out.write(f"# id = {index}\n# source = {source}\n")
            out.write(f"# hypothesis = {' '.join(pieces[:-1])}\n")
            for piece, norm in zip(pieces, norms):
                out.write(f"{piece}\t{norm:.4f}\n")
            out.write("\n")


MAX_DRAWN_PIECES = 60


def draw_gates(path: str, sentences, title: str, dpi: int = 100) -> Tuple[int, int]:
    """Figure 4 of the paper: each sentence a row of its target pieces, shaded by the gate
    norm (darker: more syntax); pieces past the first :data:`MAX_DRAWN_PIECES` of a
    sentence are left out. Returns the PNG's size in pixels."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not sentences:
        raise SystemExit("error: no sentence to draw")
    sentences = [(i, s, p[:MAX_DRAWN_PIECES], n[:MAX_DRAWN_PIECES]) for i, s, p, n in sentences]
    length = max(len(p) for _, _, p, _ in sentences)
    longest = max(len(piece) for _, _, p, _ in sentences for piece in p)
    cell_w = max(0.5, 0.09 * longest + 0.2)
    width = math.ceil((1.2 + cell_w * length + 1.0) * 4) / 4
    height = math.ceil((0.9 + 0.45 * len(sentences)) * 4) / 4
    data = np.full((len(sentences), length), np.nan)
    for row, (_, _, _, norms) in enumerate(sentences):
        data[row, :len(norms)] = norms
    masked = np.ma.masked_invalid(data)
    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_axes([0.9 / width, 0.3 / height, cell_w * length / width,
                       0.45 * len(sentences) / height])
    low, high = float(np.nanmin(data)), float(np.nanmax(data))
    image = ax.imshow(masked, cmap="Greys", vmin=low, vmax=high if high > low else low + 1e-6,
                      aspect="auto", interpolation="nearest")
    middle = (low + high) / 2
    for row, (_, _, pieces, norms) in enumerate(sentences):
        for col, (piece, norm) in enumerate(zip(pieces, norms)):
            ax.text(col, row, piece, ha="center", va="center", fontsize=7,
                    color="white" if norm > middle else "black")
    ax.set_xticks([])
    ax.set_yticks(range(len(sentences)))
    ax.set_yticklabels([f"{index}" for index, _, _, _ in sentences], fontsize=8)
    ax.set_ylabel("sentence")
    ax.set_title(title, fontsize=9)
    cax = fig.add_axes([(0.9 + cell_w * length + 0.25) / width, 0.3 / height, 0.15 / width,
                        0.45 * len(sentences) / height])
    fig.colorbar(image, cax=cax, label="‖g‖₂")
    fig.savefig(path, dpi=dpi, format="png")
    return int(width * dpi), int(height * dpi)


# ---------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------


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
