"""Criterion ``supervised_attention_cross_entropy``: Mi et al. (2016), "Supervised Attentions
for Neural Machine Translation", eqs. 6-7, §3.1-3.3::

    loss = Σ_n Σ_t NLL_ls(y_nt)  +  λ · Σ_n Σ_t Σ_i (A_n[t, i] - A*_n[t, i])²

``A`` is the model's attention over the source positions (:func:`supervised_weights`), ``A*`` the
gold matrix (:mod:`~fairseq_syntax.criterions.gold_alignment`); the parts that train follow
``--attention-strategy`` (:mod:`~fairseq_syntax.criterions.attention_strategy`).
``docs/design.md`` §7 explains the choices and the two-stage A → T recipe.
"""
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from torch import Tensor

from fairseq_syntax.criterions.attention_strategy import AttentionStrategy, unwrap_model
from fairseq_syntax.criterions.gold_alignment import (
    flat_alignment_positions,
    gold_attention,
    link_positions,
)
from fairseq_syntax.modules.local_attention import BEFORE_GAUSSIAN
from fairseq_syntax.modules.phrase_folding import fold_phrase_attention

TRANSFORMS = ChoiceEnum(["simple", "smoothed"])
STRATEGIES = ChoiceEnum(["joint", "alignment", "translation"])
DEFAULT_OUTPUT_PREFIXES = (
    "decoder.attention.combine,decoder.fc_out,decoder.project_out,decoder.output_projection,"
    "decoder.additional_fc,decoder.embed_out"
)


@dataclass
class SupervisedAttentionConfig(LabelSmoothedCrossEntropyCriterionConfig):
    alignment_lambda: float = field(
        default=1.0,
        metadata={"help": "λ: weight of the summed squared attention distance against the "
                  "summed (label-smoothed) NLL; both are sums over target tokens (paper: 1)"},
    )
    alignment_transform: TRANSFORMS = field(
        default="simple",
        metadata={"help": "gold matrix: 'simple' (row-normalised links) or 'smoothed' (each "
                  "link spreads a Gaussian over --alignment-window source words, then rows "
                  "are normalised)"},
    )
    alignment_window: int = field(
        default=2,
        metadata={"help": "smoothed transform: the Gaussian covers source words within this "
                  "distance of the link"},
    )
    alignment_sigma: float = field(
        default=0.5,
        metadata={"help": "smoothed transform: standard deviation of the Gaussian, in source "
                  "positions (paper's experiments: 0.5; its worked example: 1)"},
    )
    attention_strategy: STRATEGIES = field(
        default="joint",
        metadata={"help": "which parameters train: 'joint' (all), 'alignment' (all but the "
                  "output layer, see --output-layer-prefixes), 'translation' (the output "
                  "layer only); the frozen part is never changed by the optimizer"},
    )
    alignment_loss_only: bool = field(
        default=False,
        metadata={"help": "with --attention-strategy alignment: train on λ · distance alone, "
                  "without the NLL term"},
    )
    output_layer_prefixes: str = field(
        default=DEFAULT_OUTPUT_PREFIXES,
        metadata={"help": "comma-separated parameter-name prefixes of the output part (the "
                  "paper's T network g: by default W_c of the attentional layer and the output "
                  "layer); every other parameter is the alignment part"},
    )
    ignore_unaligned_sentences: bool = field(
        default=False,
        metadata={"help": "give no alignment loss to a sentence without any link (default, "
                  "as in the paper: all its target words are aligned to source eos)"},
    )
    no_verify_frozen: bool = field(
        default=False,
        metadata={"help": "do not keep a copy of the frozen parameters to check at every "
                  "training step that they are unchanged"},
    )


def attention_distance(attn: Tensor, gold: Tensor, src_nonpad: Tensor, row_mask: Tensor) -> Tensor:
    """``Σ_rows Σ_i (A - A*)²`` over non-padding source positions and rows in ``row_mask``."""
    diff = (attn.float() - gold) ** 2
    mask = row_mask[:, :, None] & src_nonpad[:, None, :]
    return diff.masked_fill(~mask, 0.0).sum()


def _first(value):
    """``extra`` holds lists of tensors (``extra["attn"] = [tensor]``); a bare tensor works too."""
    value = value[0] if isinstance(value, (list, tuple)) and value else value
    return value if torch.is_tensor(value) else None


def supervised_weights(extra: Dict, net_input: Dict, src_nonpad: Tensor) -> Optional[Tensor]:
    """The model's attention as a distribution over source positions (``[B, T, S]``,
    see docs/design.md §7), or None when the model returns none."""
    before = _first(extra.get(BEFORE_GAUSSIAN))
    if before is not None:
        return before
    memory = _first(extra.get("memory_attn"))
    if memory is not None:
        if net_input.get("src_tree") is None:
            raise ValueError(
                "the model attends over more than the source positions (extra['memory_attn']) "
                "but the batch has no source trees (net_input['src_tree']) to fold the extra "
                "rows onto the words: use --task syntax_translation with tree side-files"
            )
        return fold_phrase_attention(memory, net_input["src_tree"], src_nonpad)
    return _first(extra.get("attn"))


@register_criterion("supervised_attention_cross_entropy", dataclass=SupervisedAttentionConfig)
class SupervisedAttentionCrossEntropy(LabelSmoothedCrossEntropyCriterion):
    """(Label-smoothed) cross-entropy plus λ · squared distance between the model's
    attention and gold alignments (Mi et al. 2016); see the module docstring."""

    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing=0.0,
        ignore_prefix_size=0,
        report_accuracy=False,
        alignment_lambda=1.0,
        alignment_transform="simple",
        alignment_window=2,
        alignment_sigma=0.5,
        attention_strategy="joint",
        alignment_loss_only=False,
        output_layer_prefixes=DEFAULT_OUTPUT_PREFIXES,
        ignore_unaligned_sentences=False,
        no_verify_frozen=False,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        if alignment_lambda < 0:
            raise ValueError(f"--alignment-lambda must be >= 0, got {alignment_lambda}")
        if alignment_window < 0 or alignment_sigma <= 0:
            raise ValueError(
                f"--alignment-window must be >= 0 and --alignment-sigma > 0, got "
                f"{alignment_window} and {alignment_sigma}"
            )
        if alignment_loss_only and attention_strategy != "alignment":
            raise ValueError("--alignment-loss-only needs --attention-strategy alignment")
        self.alignment_lambda = alignment_lambda
        self.alignment_transform = str(alignment_transform)
        self.alignment_window = alignment_window
        self.alignment_sigma = alignment_sigma
        self.attention_strategy = str(attention_strategy)
        self.alignment_loss_only = alignment_loss_only
        self.output_layer_prefixes = [p for p in str(output_layer_prefixes).split(",") if p.strip()]
        self.ignore_unaligned_sentences = ignore_unaligned_sentences
        self.strategy = AttentionStrategy(self.attention_strategy, self.output_layer_prefixes,
                                          verify=not no_verify_frozen)

    @classmethod
    def side_inputs(cls, cfg):
        """The side inputs the ``syntax_translation`` task loads for this criterion."""
        return {"alignments"}

    def forward(self, model, sample, reduce=True):
        """Loss, sample size and logging outputs (all summable across workers).

        With ``reduce=False`` the per-token label-smoothed NLL is returned and no
        alignment term is added.
        """
        self.strategy.apply(model)
        net_output = model(**sample["net_input"])
        nll_part, nll_loss = self.compute_loss(model, net_output, sample, reduce=reduce)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "nll_loss": nll_loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if not reduce:
            logging_output["loss"] = nll_part.data
            return nll_part, sample_size, logging_output

        distance, rows = self.compute_alignment_distance(model, net_output, sample)
        if distance is None:
            loss = nll_part
        elif self.attention_strategy == "translation":
            loss = nll_part  # the distance has no gradient w.r.t. the output part
        elif self.attention_strategy == "alignment" and self.alignment_loss_only:
            loss = self.alignment_lambda * distance
        else:
            loss = nll_part + self.alignment_lambda * distance
        logging_output["loss"] = loss.data
        logging_output["alignment_loss"] = distance.data if distance is not None else 0.0
        logging_output["alignment_rows"] = rows
        if self.report_accuracy:
            n_correct, total = self.compute_accuracy(model, net_output, sample)
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = utils.item(total.data)
        return loss, sample_size, logging_output

    def compute_alignment_distance(self, model, net_output, sample):
        """``(Σ squared distance, number of supervised target rows)``, or ``(None, 0)``
        when the batch carries no alignments outside training."""
        net_input = sample["net_input"]
        src_tokens = net_input["src_tokens"]
        target = sample["target"]
        src_nonpad = src_tokens.ne(self.padding_idx)
        tgt_nonpad = target.ne(self.padding_idx)
        if sample.get("alignment_links") is not None:
            positions = link_positions(
                sample["alignment_links"], src_nonpad, tgt_nonpad, sample.get("id")
            )
        elif sample.get("alignments") is not None:
            positions = flat_alignment_positions(
                sample["alignments"], target.size(1), src_nonpad, tgt_nonpad
            )
        else:
            if model.training:
                raise ValueError(
                    "supervised_attention_cross_entropy: the batch carries no alignments; "
                    "use --task syntax_translation on a data-bin made with --align-suffix, or "
                    "fairseq's --task translation with --load-alignments"
                )
            return None, 0
        extra = net_output[1] if len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        attn = supervised_weights(extra, net_input, src_nonpad)
        if attn is None:
            raise ValueError(
                f"{type(unwrap_model(model)).__name__} returns no attention in extra['attn'][0] "
                "in this mode; supervised attention needs [B, T, S] attention over source "
                "positions (the plugin's architectures; transformer_align with "
                "--alignment-layer below --decoder-layers)"
            )
        expected = (target.size(0), target.size(1), src_tokens.size(1))
        if tuple(attn.shape) != expected:
            raise ValueError(
                f"extra['attn'][0] has shape {tuple(attn.shape)}, expected [B, T, S] = "
                f"{list(expected)} (batch, target length, source length)"
            )
        batch_idx, tgt_pos, src_pos = positions
        gold = gold_attention(
            batch_idx, tgt_pos, src_pos, src_nonpad, tgt_nonpad, self.alignment_transform,
            self.alignment_window, self.alignment_sigma,
        )
        row_mask = tgt_nonpad
        if self.ignore_prefix_size > 0:
            row_mask = row_mask.clone()
            row_mask[:, : self.ignore_prefix_size] = False
        if self.ignore_unaligned_sentences:
            has_links = torch.zeros(target.size(0), dtype=torch.bool, device=target.device)
            has_links[batch_idx] = True
            row_mask = row_mask & has_links[:, None]
        attn_in = attn.detach() if self.attention_strategy == "translation" else attn
        distance = attention_distance(attn_in, gold, src_nonpad, row_mask)
        return distance, int(row_mask.sum())

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        super().reduce_metrics(logging_outputs)
        rows = utils.item(sum(log.get("alignment_rows", 0) for log in logging_outputs))
        if rows > 0:
            distance = utils.item(sum(log.get("alignment_loss", 0) for log in logging_outputs))
            # Mean squared distance of one target token's attention row (natural units).
            metrics.log_scalar("alignment_loss", distance / rows, rows, round=4)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
