"""Criterion ``supervised_attention_cross_entropy``: Mi et al. (2016), "Supervised
Attentions for Neural Machine Translation" (EMNLP), sections 3.1-3.3.

Loss of a batch (sums over all sentences ``n`` and all non-padding target positions
``t``, fairseq divides the gradient by ``sample_size``: target tokens, or sentences with
``--sentence-avg``)::

    loss = Σ_n Σ_t NLL_ls(y_nt)  +  λ · Σ_n Σ_t Σ_i (A_n[t, i] - A*_n[t, i])²

``NLL_ls`` is fairseq's ``label_smoothed_nll_loss`` (plain NLL with
``--label-smoothing 0``). ``A_n[t, i]`` is the model's attention of target position ``t``
(the row that predicts target token ``t``; the last row predicts eos) over source
position ``i`` (source tokens then eos); ``i`` runs over the non-padding source
positions only. So λ weighs the squared distance of one target token's attention row
against that token's NLL; λ = 1 (the default) is the paper's equation 7.

The gold matrix ``A*`` is built from the batch's links ``(i, t)``
(``sample["alignment_links"]`` of ``--task syntax_translation``, beside ``target``, or
fairseq's own ``sample["alignments"]`` of ``--task translation --load-alignments``):

1. binary ``B[t, i] = 1`` for each link (duplicates count once);
2. ``--alignment-transform simple``: nothing more; ``smoothed``: each link spreads a
   Gaussian ``exp(-(k - i)² / 2σ²)`` over source words ``k`` with ``|k - i| <= w``
   (``--alignment-window w``, ``--alignment-sigma σ``): a 1-D convolution of ``B``
   along the source axis, restricted to source words (eos and padding get nothing; a
   link that points at eos itself stays there). Paper's example: w = 2, σ = 1 gives
   ``+1, +0.61, +0.14`` on the linked word and its right neighbours;
3. a target word (non-eos target position) whose row is still empty is aligned to the
   source eos; the target eos row is replaced by source eos with probability one
   (fairseq's own collater drops alignments that touch eos, so these rules live here);
4. every row is normalised to sum to 1.

Logged: ``loss`` (the total above per ``sample_size``, in bits like fairseq's own
criterions), ``nll_loss`` (per token, bits) and ``alignment_loss``: the mean squared
distance ``Σ_i (A[t, i] - A*[t, i])²`` of one supervised target row, in natural units
(between 0 and 2). All logging outputs are sums, so they add up across workers.

Every model whose ``extra["attn"][0]`` is ``[B, T, S]`` attention over source positions
works: the plugin's RNN architectures, its ``syntax_transformer`` family and fairseq's
``transformer_align`` (for both Transformers: the cross-attention of decoder layer
``--alignment-layer`` averaged over its first ``--alignment-heads`` heads; for
``transformer_align`` set ``--alignment-layer`` below the number of decoder layers).
Source and target may be padded on either side: positions are located from the padding
masks.

**Which weights are supervised.** ``A`` must be, like ``A*``, a distribution over the
source positions (:func:`supervised_weights`):

* local-p (``sdatt_local_p``): the window softmax *before* the Gaussian
  (``extra["attn_before_gaussian"]``); the weights that make the context are that times
  a Gaussian and sum to less than one, so no row could ever match ``A*``;
* tree2seq: the attention runs over the words and the phrases (eq. 13), and its word
  columns alone sum to less than one. Each phrase's weight is *folded* onto the words it
  covers, shared equally among them (:func:`fold_phrase_attention`): ``A[t, j] = α_t(j) +
  Σ_{phrases k ∋ j} α_t(k) / |k|``. So the supervision reaches the phrase weights too,
  and attention to a phrase counts as attention to its words, instead of renormalising
  the word columns, which would ignore the mass on phrases altogether;
* every other model: ``extra["attn"][0]``.

**Optimisation strategies** (paper section 3.3, ``--attention-strategy``):

* ``joint`` (J): every parameter trains on the loss above.
* ``alignment`` (A): the *alignment part* trains, the *output part* stays frozen; the
  loss is the full objective (the paper: "if we only optimize A, we keep the parameters
  in T unchanged"), or the alignment distance alone with ``--alignment-loss-only``.
* ``translation`` (T): the output part trains on the NLL, the alignment part stays
  frozen (its distance is still computed and logged, but has no gradient here).

The parts are split by parameter name, following section 3.3: A is "all networks
before the hidden state s_t", T "the network g(s_t, y*_{t-1})", the two-layer network
from the decoder state (which already holds the context, eq. 2) to the word
probabilities. In the Luong backbone the context enters after the LSTM, so ``s_t`` is
the LSTM state ``h_t`` plus the context ``c_t``, and g is ``softmax(W_s tanh(W_c [c_t;
h_t]))``. **Output part** T: parameters whose name starts with one of
``--output-layer-prefixes``, by default ``decoder.attention.combine`` (``W_c``, the first
layer of g in every attentional layer of the plugin; for look-ahead, the last
combination), ``decoder.fc_out`` and ``decoder.project_out`` (``W_s``, factored),
``decoder.output_projection`` (fairseq's transformer), ``decoder.additional_fc`` and
``decoder.embed_out`` (fairseq's LSTM). **Alignment part** A: everything else, i.e.
everything that produces the attention weights and ``h_t``: the encoder and its
extensions, both embeddings, ``decoder.init_*``, the decoder LSTM cells
``decoder.layers.*`` and the rest of the attentional layer ``decoder.attention.*`` (score
projection ``W_a``, position predictors, gates). One difference from the paper's
network: through input feeding ``h̃_t = tanh(W_c [c_t; h_t])`` is also an input of the
next LSTM step, so training T moves later attention weights too (the frozen A
parameters stay bit-identical). ``--output-layer-prefixes decoder.fc_out,
decoder.project_out`` keeps ``W_c`` in A instead (this criterion's choice before issue
15). A parameter that belongs to both parts (a decoder input embedding tied to the
output matrix) is frozen under both ``alignment`` and ``translation``.

Freezing happens at the first training forward: frozen parameters get
``requires_grad_(False)`` and ``grad = None``. fairseq's optimizers (Adam, SGD, ...)
skip a parameter whose gradient is ``None`` entirely — no moment update, no weight
decay — so a frozen parameter stays bit-identical even when the optimizer state holds
non-zero Adam moments for it (a restored checkpoint). Each training forward checks
this against a copy taken at freezing time and raises if a frozen parameter changed
(``--no-verify-frozen`` drops the copy). Checkpoints, ``--restore-file`` and resuming
work unchanged (freezing is redone after loading). Use ``--ddp-backend legacy_ddp``
for distributed training (it skips frozen parameters); with ``--fp16`` use
``--memory-efficient-fp16`` or ``--fp16-no-flatten-grads``: fairseq's default FP16
optimizer flattens the parameters when it is built and cannot freeze some later.

**Two-stage recipe A → T** (paper's "A → T": first A only, then T with A fixed)::

    # stage A: the alignment part trains (output layer frozen at its initial values)
    fairseq-train data-bin --user-dir "$(fairseq-syntax-user-dir)" \\
        --task syntax_translation --arch attentional_rnn \\
        --criterion supervised_attention_cross_entropy --attention-strategy alignment \\
        --optimizer adam --lr 0.001 --max-tokens 4000 --max-update 20000 \\
        --save-dir checkpoints/stage-a
    # stage T: start from stage A's model with a fresh optimizer, LR schedule, meters
    # and data iterator; only the output layer trains
    fairseq-train data-bin --user-dir "$(fairseq-syntax-user-dir)" \\
        --task syntax_translation --arch attentional_rnn \\
        --criterion supervised_attention_cross_entropy --attention-strategy translation \\
        --optimizer adam --lr 0.001 --max-tokens 4000 --max-update 20000 \\
        --finetune-from-model checkpoints/stage-a/checkpoint_best.pt \\
        --save-dir checkpoints/stage-t

``--finetune-from-model X`` equals ``--restore-file X --reset-optimizer
--reset-lr-scheduler --reset-meters --reset-dataloader`` for a fresh save dir (a
restarted stage T resumes from its own ``checkpoint_last.pt``). Keeping stage A's
optimizer state instead (``--restore-file X`` alone) is also safe: frozen parameters
are never stepped.
"""
import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from torch import Tensor

from fairseq_syntax.modules.local_attention import BEFORE_GAUSSIAN

logger = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------- gold matrix


def _span(nonpad: Tensor) -> Tuple[Tensor, Tensor]:
    """First non-padding position and length of each row of a ``[B, L]`` mask."""
    lengths = nonpad.sum(dim=1)
    first = nonpad.long().argmax(dim=1)  # the first True (0 for an all-padding row)
    return first, lengths


def link_positions(
    alignment_links: Tensor,
    src_nonpad: Tensor,
    tgt_nonpad: Tensor,
    sample_ids: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor, Tensor]:
    """Padded ``(batch, target, source)`` positions of ``[B, K, 2]`` sentence-relative
    ``(source, target)`` links (padding ``-1``).

    Sentence-relative index ``i`` is the i-th non-padding position, so left and right
    padding both work. A link beyond the sentence (eos included: source index ``n`` is
    the source eos) raises ``ValueError`` naming the sentence id.
    """
    bsz = alignment_links.size(0)
    src_first, src_len = _span(src_nonpad)
    tgt_first, tgt_len = _span(tgt_nonpad)
    src_i = alignment_links[..., 0]
    tgt_j = alignment_links[..., 1]
    valid = (src_i >= 0) & (tgt_j >= 0)
    bad = valid & ((src_i >= src_len[:, None]) | (tgt_j >= tgt_len[:, None]))
    if bad.any():
        b, k = (int(x) for x in bad.nonzero()[0])
        sid = int(sample_ids[b]) if sample_ids is not None else b
        raise ValueError(
            f"sentence {sid}: alignment link {int(src_i[b, k])}-{int(tgt_j[b, k])} is out of "
            f"range: the source has {int(src_len[b])} positions and the target "
            f"{int(tgt_len[b])} (0-based, eos included)"
        )
    batch = torch.arange(bsz, device=alignment_links.device)[:, None].expand_as(src_i)
    return batch[valid], (tgt_j + tgt_first[:, None])[valid], (src_i + src_first[:, None])[valid]


def flat_alignment_positions(
    alignments: Tensor, tgt_width: int, src_nonpad: Tensor, tgt_nonpad: Tensor
) -> Tuple[Tensor, Tensor, Tensor]:
    """Positions of fairseq's collated ``sample["alignments"]`` ``[N, 2]``: column 0 is
    the padded source position, column 1 is ``b * T + padded target position``."""
    src = alignments[:, 0].long()
    batch = torch.div(alignments[:, 1].long(), tgt_width, rounding_mode="floor")
    tgt = alignments[:, 1].long() - batch * tgt_width
    if len(src) and not bool((src_nonpad[batch, src] & tgt_nonpad[batch, tgt]).all()):
        raise ValueError("sample['alignments'] has a link on a padding position")
    return batch, tgt, src


def gaussian_kernel(window: int, sigma: float, device=None) -> Tensor:
    """``exp(-d² / 2σ²)`` for ``d = -window .. window``."""
    d = torch.arange(-window, window + 1, dtype=torch.float32, device=device)
    return torch.exp(-(d * d) / (2.0 * sigma * sigma))


def gold_attention(
    batch_idx: Tensor,
    tgt_pos: Tensor,
    src_pos: Tensor,
    src_nonpad: Tensor,
    tgt_nonpad: Tensor,
    transform: str = "simple",
    window: int = 2,
    sigma: float = 0.5,
    normalize: bool = True,
) -> Tensor:
    """The gold matrix ``A*`` ``[B, T, S]`` (float32) from padded link positions.

    Steps 1-4 of the module docstring; ``normalize=False`` skips step 4 (to inspect the
    smoothed counts). Padding rows and columns are zero.
    """
    bsz, src_width = src_nonpad.shape
    tgt_width = tgt_nonpad.size(1)
    device = src_nonpad.device
    gold = torch.zeros(bsz, tgt_width, src_width, dtype=torch.float32, device=device)
    gold[batch_idx, tgt_pos, src_pos] = 1.0
    src_first, src_len = _span(src_nonpad)
    tgt_first, tgt_len = _span(tgt_nonpad)
    src_eos = (src_first + src_len - 1).clamp(min=0)
    tgt_eos = (tgt_first + tgt_len - 1).clamp(min=0)
    rows = torch.arange(bsz, device=device)
    if transform == "smoothed":
        words = src_nonpad.clone()
        words[rows, src_eos] = False
        words = words.to(gold.dtype)[:, None, :]
        kernel = gaussian_kernel(window, sigma, device).view(1, 1, -1)
        spread = F.conv1d((gold * words).view(-1, 1, src_width), kernel, padding=window)
        gold = spread.view(bsz, tgt_width, src_width) * words + gold * (1.0 - words)
    elif transform != "simple":
        raise ValueError(f"unknown alignment transform {transform!r}")
    gold = gold * tgt_nonpad[:, :, None].to(gold.dtype) * src_nonpad[:, None, :].to(gold.dtype)
    # Target eos -> source eos with probability one; unaligned target words -> source eos.
    gold[rows, tgt_eos] = 0.0
    unaligned = tgt_nonpad & (gold.sum(dim=2) == 0)
    eos_column = torch.zeros_like(gold[:, 0, :])
    eos_column[rows, src_eos] = 1.0
    gold = torch.where(unaligned[:, :, None], eos_column[:, None, :], gold)
    if normalize:
        gold = gold / gold.sum(dim=2, keepdim=True).clamp(min=1e-12)
    return gold


def attention_distance(attn: Tensor, gold: Tensor, src_nonpad: Tensor, row_mask: Tensor) -> Tensor:
    """``Σ_rows Σ_i (A - A*)²`` over non-padding source positions and rows in ``row_mask``."""
    diff = (attn.float() - gold) ** 2
    mask = row_mask[:, :, None] & src_nonpad[:, None, :]
    return diff.masked_fill(~mask, 0.0).sum()


def fold_phrase_attention(weights: Tensor, tree: Tensor, src_nonpad: Tensor) -> Tensor:
    """Tree2seq's attention over words and phrases folded onto the source positions.

    ``weights`` ``[B, T, S + M]``: source positions first (leaf ``j`` is position ``j``,
    the source right-padded, eos not a leaf), then the ``M`` rows of ``tree [B, M, 2]``
    (internal node ``n + k`` is row ``k``, children before parents, padding rows ``-1``;
    see :mod:`fairseq_syntax.modules.tree_lstm`). Returns ``[B, T, S]``: each position's
    own weight plus, for every phrase that covers it, the phrase's weight divided by the
    number of leaves the phrase covers. A row that sums to one over words and phrases sums
    to one over the positions.
    """
    bsz, _, width = weights.shape
    src_len = src_nonpad.size(1)
    rows = tree.size(1)
    if width != src_len + rows:
        raise ValueError(
            f"the attention covers {width} positions, but the source has {src_len} and its "
            f"tree {rows} phrase rows (expected {src_len + rows})"
        )
    num_leaves = (src_nonpad.sum(1) - 1).view(-1, 1, 1)
    valid = tree[..., 0].ge(0)
    slots = torch.where(tree < num_leaves, tree, tree - num_leaves + src_len)  # buffer slots
    slots = slots.masked_fill(~valid.unsqueeze(-1), 0)
    # cover[b, slot, j] = 1 when leaf j is under the node in that slot
    cover = torch.zeros(bsz, src_len + rows, src_len, dtype=torch.float32, device=weights.device)
    cover[:, :src_len] = torch.eye(src_len, device=weights.device)
    batch = torch.arange(bsz, device=weights.device)
    for k in range(rows):  # children come before their parent
        both = cover[batch, slots[:, k, 0]] + cover[batch, slots[:, k, 1]]
        cover[:, src_len + k] = both * valid[:, k, None].to(both.dtype)
    fold = cover / cover.sum(-1, keepdim=True).clamp(min=1.0)
    return torch.bmm(weights.float(), fold).to(weights.dtype)


def _first(value):
    """``extra`` holds lists of tensors (``extra["attn"] = [tensor]``); a bare tensor works too."""
    value = value[0] if isinstance(value, (list, tuple)) and value else value
    return value if torch.is_tensor(value) else None


def supervised_weights(extra: Dict, net_input: Dict, src_nonpad: Tensor) -> Optional[Tensor]:
    """The model's attention as a distribution over source positions (``[B, T, S]``,
    see the module docstring), or None when the model returns none."""
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


# --------------------------------------------------------------------------- parameter parts


def unwrap_model(model: nn.Module) -> nn.Module:
    """The fairseq model inside distributed wrappers (their parameter names gain ``module.``)."""
    while isinstance(getattr(model, "module", None), nn.Module):
        model = model.module
    return model


def parameter_parts(
    model: nn.Module, output_prefixes: Sequence[str]
) -> Dict[str, List[Tuple[str, nn.Parameter]]]:
    """Split parameters into ``"alignment"`` and ``"output"`` parts by name.

    A parameter is in the output part when any of its names (tied parameters have
    several) starts with one of ``output_prefixes``, and in the alignment part when any
    name does not; a tied parameter can be in both.
    """
    model = unwrap_model(model)
    names: Dict[int, List[str]] = {}
    params: Dict[int, nn.Parameter] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
        params[id(p)] = p
    prefixes = tuple(p.strip() for p in output_prefixes if p.strip())

    def is_output(name: str) -> bool:
        return any(name == pre or name.startswith(pre.rstrip(".") + ".") for pre in prefixes)

    parts: Dict[str, List[Tuple[str, nn.Parameter]]] = {"alignment": [], "output": []}
    for key, p in params.items():
        flags = [is_output(n) for n in names[key]]
        if any(flags):
            parts["output"].append((names[key][flags.index(True)], p))
        if not all(flags):
            parts["alignment"].append((names[key][flags.index(False)], p))
    return parts


# --------------------------------------------------------------------------- criterion


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
        self.verify_frozen = not no_verify_frozen
        self._frozen: Optional[List[Tuple[str, nn.Parameter]]] = None
        self._frozen_copy: Optional[List[Tensor]] = None
        self._frozen_model_id: Optional[int] = None

    @classmethod
    def side_inputs(cls, cfg):
        """The side inputs the ``syntax_translation`` task loads for this criterion."""
        return {"alignments"}

    # ---- strategies

    def frozen_parameters(self, model: nn.Module) -> List[Tuple[str, nn.Parameter]]:
        """``(name, parameter)`` pairs that ``--attention-strategy`` keeps fixed."""
        if self.attention_strategy == "joint":
            return []
        parts = parameter_parts(model, self.output_layer_prefixes)
        frozen_part = "output" if self.attention_strategy == "alignment" else "alignment"
        if not parts["output"]:
            top = sorted({n.split(".")[0] + "." + n.split(".")[1] if "." in n else n
                          for n, _ in unwrap_model(model).named_parameters()})
            raise ValueError(
                f"--attention-strategy {self.attention_strategy}: no parameter name starts "
                f"with --output-layer-prefixes {','.join(self.output_layer_prefixes)}; the "
                f"model's modules are {', '.join(top)}"
            )
        frozen = parts[frozen_part]
        frozen_ids = {id(p) for _, p in frozen}
        if all(id(p) in frozen_ids for _, p in unwrap_model(model).named_parameters()):
            raise ValueError(
                f"--attention-strategy {self.attention_strategy} would freeze every parameter "
                "(check --output-layer-prefixes and tied embeddings)"
            )
        return frozen

    def _apply_strategy(self, model: nn.Module) -> None:
        if self.attention_strategy == "joint" or not model.training:
            return
        if self._frozen is None or self._frozen_model_id != id(unwrap_model(model)):
            self._frozen = self.frozen_parameters(model)
            self._frozen_model_id = id(unwrap_model(model))
            for _, p in self._frozen:
                p.requires_grad_(False)
                p.grad = None
            self._frozen_copy = (
                [p.detach().clone() for _, p in self._frozen] if self.verify_frozen else None
            )
            n_frozen = sum(p.numel() for _, p in self._frozen)
            n_all = sum(p.numel() for p in unwrap_model(model).parameters())
            logger.info(
                "attention strategy %s: %d of %d parameters frozen (%s)",
                self.attention_strategy, n_frozen, n_all,
                ", ".join(sorted({n.rsplit(".", 1)[0] for n, _ in self._frozen})),
            )
            return
        for k, (name, p) in enumerate(self._frozen):
            if p.requires_grad or p.grad is not None:
                p.requires_grad_(False)
                p.grad = None
            if self._frozen_copy is not None and not torch.equal(p.detach(), self._frozen_copy[k]):
                raise RuntimeError(
                    f"--attention-strategy {self.attention_strategy}: the frozen parameter "
                    f"{name} changed; the optimizer stepped a parameter without gradient (with "
                    "--fp16 use --memory-efficient-fp16 or --fp16-no-flatten-grads; with "
                    "distributed training use --ddp-backend legacy_ddp)"
                )

    # ---- forward

    def forward(self, model, sample, reduce=True):
        """Loss, sample size and logging outputs (all summable across workers).

        With ``reduce=False`` the per-token label-smoothed NLL is returned and no
        alignment term is added.
        """
        self._apply_strategy(model)
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
