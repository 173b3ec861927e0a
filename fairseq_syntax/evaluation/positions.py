"""Where a model's position predictors put ``p_i`` (Chen et al. 2017 eq. 5; Luong et al.
2015's local-p; the SDAtt Transformer's per-head predictors): over the teacher-forced
target steps of one split, the share whose ``p_i`` is nearer ``eos`` than any word
(``p_i > J - 0.5``: SDAtt then reads ``eos``'s distance row, which sees ``eos`` alone), the
shares at the first word (``p_i < 0.5``) and at the last word (``J - 1.5 < p_i <= J - 0.5``,
where a saturated SDAtt predictor stops, as its ``p_i`` ranges over the words), the mean and
standard deviation of ``p_i / J`` (a predictor that spreads over the source has a large
one), and the Pearson correlation of ``p_i / J`` with the target step's ``i / I`` (one that
follows the translation along the source has a positive one; ``I`` counts the target's
tokens, eos included). A predictor that puts most steps at ``eos`` or at one end of the
source has degenerated: its syntax-directed context is not a window that moves over the
source. So has one whose ``p_i`` hardly moves (:func:`degenerated`).

On a split with word alignments (``{split}.align.*``), over the steps whose target token has
a link: the correlation of ``p_i / J`` with ``a_i / J``, ``a_i`` the mean source position
linked to the step's token (a predictor that follows the alignments has one near 1), and
the alignments' own standard deviation of ``a_i / J`` and correlation with ``i / I``: where
a predictor that followed them would be, and how monotone the corpus is; and
(:func:`position_gradients`) whether the training loss's gradient on ``p_i`` points towards
``a_i`` at all, the only signal eq. 5's predictor learns from."""
import glob
import os
from typing import Dict, List, Optional

import torch
from torch import Tensor

from fairseq_syntax.criterions.gold_alignment import link_positions
from fairseq_syntax.evaluation.checkpoints import load_trained_model


def aligned_positions(sample, pad: int) -> Optional[Tensor]:
    """``[B, T]`` mean source position linked to each target token of ``sample`` (NaN where
    none is), or None for a sample without ``alignment_links``."""
    links = sample.get("alignment_links")
    if links is None:
        return None
    target = sample["target"]
    batch, tgt, src = link_positions(links, sample["net_input"]["src_tokens"].ne(pad),
                                     target.ne(pad), sample.get("id"))
    flat = batch * target.size(1) + tgt
    total = torch.zeros(target.numel(), dtype=torch.float64, device=target.device)
    count = torch.zeros_like(total)
    total.index_add_(0, flat, src.to(total.dtype))
    count.index_add_(0, flat, torch.ones(len(flat), dtype=total.dtype, device=total.device))
    return (total / count).view_as(target)  # 0 / 0: NaN where no link


def pearson(x: Tensor, y: Tensor) -> Optional[float]:
    """Pearson correlation of two 1-d tensors (None for fewer than two values)."""
    return float(torch.corrcoef(torch.stack([x, y]))[0, 1]) if x.numel() > 1 else None


def predictors_of(model) -> List[torch.nn.Module]:
    """The position predictors of ``model`` (RNN: one per decoder step; Transformer: per layer)."""
    from fairseq_syntax.modules.local_attention import PositionPredictor
    from fairseq_syntax.modules.syntax_distance_cross_attention import HeadPositionPredictor

    return [m for m in model.modules() if isinstance(m, (PositionPredictor, HeadPositionPredictor))]


def batches(model, task, split: str, max_tokens: int):
    """The loaded ``split`` of ``task`` in order, on the model's device."""
    itr = task.get_batch_iterator(dataset=task.dataset(split), max_tokens=max_tokens,
                                  ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    for sample in itr:
        if next(model.parameters()).is_cuda:
            from fairseq.utils import move_to_cuda

            sample = move_to_cuda(sample)
        yield sample


def step_views(calls, sample, pad: int):
    """For each recorded predictor call ``(module id, tensor, ...)`` in call order: its tensors,
    the mask of real target steps, ``i / I`` and ``a_i`` (None without alignments), all of one
    shape: an RNN decoder step's ``[B]`` as ``[B, 1]`` at that step, a Transformer layer's
    heads ``[B, K, T]``."""
    real = sample["target"].ne(pad)  # [B, T]
    step_share = (torch.arange(real.size(1), device=real.device)[None, :]
                  / real.sum(1, keepdim=True))  # [B, T]: i / I
    aligned = aligned_positions(sample, pad)
    steps_seen: Dict[int, int] = {}
    for module, *tensors in calls:
        if tensors[0].dim() == 1:  # one RNN decoder step: [B], in step order
            step = steps_seen.get(module, 0)
            steps_seen[module] = step + 1
            tensors = [t[:, None] for t in tensors]

            def view(x):
                return x[:, step:step + 1]
        else:  # a Transformer layer's heads: [B, K, T]
            def view(x):
                return x[:, None, :].expand_as(tensors[0])
        yield tensors, view(real), view(step_share), None if aligned is None else view(aligned)


def position_shares(model, task, split: str, max_tokens: int = 4000) -> Dict[str, float]:
    """The shares of :mod:`this module <fairseq_syntax.evaluation.positions>` for ``model``
    (in eval mode) on the loaded ``split`` of ``task``; ``{}`` for a model without a
    position predictor."""
    calls: List[tuple] = []

    def hook(module, inputs, output):
        calls.append((id(module), output.detach().float()))

    predictors = predictors_of(model)
    if not predictors:
        return {}
    handles = [m.register_forward_hook(hook) for m in predictors]
    pad = task.target_dictionary.pad()
    at_eos = at_first = at_last = 0
    source_shares: List[torch.Tensor] = []  # p_i / J of every real target step
    target_shares: List[torch.Tensor] = []  # i / I of the same steps
    linked: List[torch.Tensor] = []  # (p_i / J, a_i / J, i / I) of the steps with a link
    try:
        with torch.no_grad():
            for sample in batches(model, task, split, max_tokens):
                calls.clear()
                model(**sample["net_input"])
                eos = sample["net_input"]["src_lengths"].float() - 1  # J: right-padded source
                for (position,), mask, target, link in step_views(calls, sample, pad):
                    j = eos.view(-1, *([1] * (position.dim() - 1))).expand_as(position)
                    at_eos += int((position.gt(j - 0.5) & mask).sum())
                    at_first += int((position.lt(0.5) & mask).sum())
                    at_last += int((position.gt(j - 1.5) & position.le(j - 0.5) & mask).sum())
                    relative = position / j.clamp(min=1)
                    source_shares.append(relative[mask].double().cpu())
                    target_shares.append(target[mask].double().cpu())
                    if link is not None:
                        has = mask & ~link.isnan()
                        linked.append(torch.stack([relative[has].double(),
                                                   (link / j.clamp(min=1))[has].double(),
                                                   target[has].double()]).cpu())
    finally:
        for h in handles:
            h.remove()
    source, target = torch.cat(source_shares), torch.cat(target_shares)
    steps = source.numel()
    shares = {"position_at_eos": 100.0 * at_eos / steps,
              "position_at_first": 100.0 * at_first / steps,
              "position_at_last": 100.0 * at_last / steps,
              "position_mean_relative": float(source.mean()),
              "position_sd_relative": float(source.std(unbiased=False)),
              "position_target_correlation": pearson(source, target),
              "position_steps": steps}
    if linked:
        p, a, i = torch.cat(linked, dim=1)
        shares.update(position_alignment_correlation=pearson(p, a),
                      alignment_sd_relative=float(a.std(unbiased=False)),
                      alignment_target_correlation=pearson(a, i), aligned_steps=p.numel())
    return shares


def position_gradients(model, task, split: str, max_tokens: int = 4000,
                       max_sentences: Optional[int] = None) -> Dict[str, float]:
    """Whether the loss pulls ``p_i`` towards the aligned source position ``a_i``: over the
    teacher-forced steps of ``split`` whose target token has a link (the first
    ``max_sentences`` sentences, in batches), ``g_i = -∂NLL/∂p_i``, the way a gradient step
    moves ``p_i`` (NLL summed over the target tokens, in the model's dtype, dropout off), against ``a_i - p_i``.
    ``position_gradient_zero``: % of the steps with ``g_i = 0``; ``position_gradient_towards``:
    % of the others whose ``g_i`` has the sign of ``a_i - p_i``; their Pearson correlation.
    ``{}`` for a model without a predictor or a split without alignments."""
    calls: List[tuple] = []

    def hook(module, inputs, output):
        output.retain_grad()
        calls.append((id(module), output))

    predictors = predictors_of(model)
    if not predictors:
        return {}
    handles = [m.register_forward_hook(hook) for m in predictors]
    pad = task.target_dictionary.pad()
    pulls: List[torch.Tensor] = []  # g_i of the linked steps
    offsets: List[torch.Tensor] = []  # a_i - p_i of the same steps
    seen = 0
    try:
        for sample in batches(model, task, split, max_tokens):
            if max_sentences is not None and seen >= max_sentences:
                break
            seen += sample["nsentences"]
            calls.clear()
            model.zero_grad()
            lprobs = torch.log_softmax(model(**sample["net_input"])[0], dim=-1)
            target = sample["target"]
            nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(target.eq(pad), 0)
            nll.sum().backward()
            calls[:] = [(module, p.detach(), p.grad) for module, p in calls]
            for (position, grad), mask, _, link in step_views(calls, sample, pad):
                if link is None:
                    return {}
                has = mask & ~link.isnan()
                pulls.append(-grad[has].double().cpu())
                offsets.append((link - position)[has].double().cpu())
    finally:
        for h in handles:
            h.remove()
        model.zero_grad()
    pull, offset = torch.cat(pulls), torch.cat(offsets)
    moving = pull.ne(0)
    towards = torch.sign(pull[moving]).eq(torch.sign(offset[moving])).double().mean()
    return {"position_gradient_zero": 100.0 * float((~moving).double().mean()),
            "position_gradient_towards": 100.0 * float(towards),
            "position_gradient_correlation": pearson(pull, offset),
            "position_gradient_steps": pull.numel()}


MOST = 50.0  # % of steps at eos or at one end of the source: degenerated
STILL = 0.05  # sd of p_i / J below it: the window stays put (synthetic 0.11-0.32, Multi30k 0.22)


def degenerated(shares: Dict[str, float]) -> Optional[str]:
    """Why the predictor of :func:`position_shares` has degenerated, or None: most steps at eos,
    at the first or at the last word (> 50 %), or ``p_i / J`` with a standard deviation under
    0.05 (the window stays at one place of the source, e.g. its middle when the logit stays
    near 0)."""
    for key, where in (("position_at_eos", "at eos"), ("position_at_first", "at the first word"),
                       ("position_at_last", "at the last word")):
        if (shares.get(key) or 0.0) > MOST:
            return f"{shares[key]:.1f} % of steps {where}"
    sd = shares.get("position_sd_relative")
    if sd is not None and sd < STILL:
        return f"p/J stays at {shares['position_mean_relative']:.2f} (sd {sd:.2f})"
    return None


ALIGNMENT_KEYS = ("position_alignment_correlation", "alignment_sd_relative",
                  "alignment_target_correlation", "aligned_steps")
"""The statistics :func:`position_shares` adds on a split with alignments."""


def has_alignments(databin: str, split: str) -> bool:
    """Whether ``split`` of ``databin`` has fairseq's ``{split}.align.{src}-{tgt}``."""
    return bool(glob.glob(os.path.join(databin, f"{split}.align.*.idx")))


def load_split(task, databin: str, name: str) -> None:
    """Load split ``name`` of ``databin`` into ``task``, with its alignments if it has them."""
    task.cfg.load_alignments = has_alignments(databin, name)
    task.load_dataset(name)


def checkpoint_position_shares(databin: str, checkpoint: str, split: str = "test",
                               cpu: bool = True,
                               aligned_split: Optional[str] = None) -> Dict[str, float]:
    """:func:`position_shares` of the model in ``checkpoint`` on ``split`` of ``databin``
    (with the alignment statistics if the split has alignments); with ``aligned_split`` (the
    valid set, when the test set has no alignments), the :data:`ALIGNMENT_KEYS` measured
    there instead, if it has them."""
    model, _, task = load_trained_model(checkpoint, databin, use_cuda=not cpu)

    def shares_on(name: str) -> Dict[str, float]:
        load_split(task, databin, name)
        return position_shares(model, task, name)

    shares = shares_on(split)
    if aligned_split and aligned_split != split and has_alignments(databin, aligned_split):
        aligned = shares_on(aligned_split)
        shares.update((key, aligned[key]) for key in ALIGNMENT_KEYS)
    return shares


def checkpoint_position_gradients(databin: str, checkpoint: str, split: str = "valid",
                                  max_sentences: Optional[int] = None,
                                  cpu: bool = True) -> Dict[str, float]:
    """:func:`position_gradients` of the model in ``checkpoint`` on ``split`` of ``databin``."""
    model, _, task = load_trained_model(checkpoint, databin, use_cuda=not cpu)
    load_split(task, databin, split)
    return position_gradients(model, task, split, max_sentences=max_sentences)
