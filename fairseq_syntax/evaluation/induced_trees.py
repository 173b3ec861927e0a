"""The trees a structured-attention checkpoint (``sa_nmt*``, ``fa_nmt*``,
``sa_transformer``) induces on a split, and their attachment scores against gold trees."""
import sys
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch

import fairseq_syntax.plugin  # noqa: F401  (registers the task and models, allows safe checkpoint loading)
from fairseq_syntax.syntax.conllu_io import ParsedSentence, write_conllu
from fairseq_syntax.syntax.subwords import spans_of_word_lengths
from fairseq_syntax.syntax.tree_scores import (
    CorpusScores, GoldTree, extract_tree, read_gold_trees, score_corpus,
)


def load(path: str, data: str, split: str, use_cuda: bool):
    """(model, task) of a structured_attention_rnn or sa_transformer checkpoint, with
    ``split`` loaded."""
    from .checkpoints import load_trained_model
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
