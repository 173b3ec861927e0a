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
source. So has one whose ``p_i`` hardly moves (:func:`degenerated`)."""
from typing import Dict, List, Optional

import torch


def position_shares(model, task, split: str, max_tokens: int = 4000) -> Dict[str, float]:
    """The shares of :mod:`this module <fairseq_syntax.evaluation.positions>` for ``model``
    (in eval mode) on the loaded ``split`` of ``task``; ``{}`` for a model without a
    position predictor."""
    from fairseq_syntax.modules.local_attention import PositionPredictor
    from fairseq_syntax.modules.syntax_distance_cross_attention import HeadPositionPredictor

    calls: List[tuple] = []

    def hook(module, inputs, output):
        calls.append((id(module), output.detach().float()))

    predictors = [m for m in model.modules()
                  if isinstance(m, (PositionPredictor, HeadPositionPredictor))]
    if not predictors:
        return {}
    handles = [m.register_forward_hook(hook) for m in predictors]
    pad = task.target_dictionary.pad()
    at_eos = at_first = at_last = 0
    source_shares: List[torch.Tensor] = []  # p_i / J of every real target step
    target_shares: List[torch.Tensor] = []  # i / I of the same steps
    itr = task.get_batch_iterator(dataset=task.dataset(split), max_tokens=max_tokens,
                                  ignore_invalid_inputs=True).next_epoch_itr(shuffle=False)
    try:
        with torch.no_grad():
            for sample in itr:
                if next(model.parameters()).is_cuda:
                    from fairseq.utils import move_to_cuda

                    sample = move_to_cuda(sample)
                calls.clear()
                model(**sample["net_input"])
                real = sample["target"].ne(pad)  # [B, T]
                step_share = (torch.arange(real.size(1), device=real.device)[None, :]
                              / real.sum(1, keepdim=True))  # [B, T]: i / I
                eos = sample["net_input"]["src_lengths"].float() - 1  # J: right-padded source
                steps_seen: Dict[int, int] = {}
                for module, position in calls:
                    if position.dim() == 1:  # one RNN decoder step: [B], in step order
                        step = steps_seen.get(module, 0)
                        steps_seen[module] = step + 1
                        position, mask = position[:, None], real[:, step:step + 1]
                        target = step_share[:, step:step + 1]
                    else:  # a Transformer layer's heads: [B, K, T]
                        mask = real[:, None, :].expand_as(position)
                        target = step_share[:, None, :].expand_as(position)
                    j = eos.view(-1, *([1] * (position.dim() - 1))).expand_as(position)
                    at_eos += int((position.gt(j - 0.5) & mask).sum())
                    at_first += int((position.lt(0.5) & mask).sum())
                    at_last += int((position.gt(j - 1.5) & position.le(j - 0.5) & mask).sum())
                    source_shares.append((position / j.clamp(min=1))[mask].double().cpu())
                    target_shares.append(target[mask].double().cpu())
    finally:
        for h in handles:
            h.remove()
    source, target = torch.cat(source_shares), torch.cat(target_shares)
    steps = source.numel()
    return {"position_at_eos": 100.0 * at_eos / steps, "position_at_first": 100.0 * at_first / steps,
            "position_at_last": 100.0 * at_last / steps,
            "position_mean_relative": float(source.mean()),
            "position_sd_relative": float(source.std(unbiased=False)),
            "position_target_correlation": float(torch.corrcoef(torch.stack([source, target]))[0, 1]),
            "position_steps": steps}


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


def checkpoint_position_shares(databin: str, checkpoint: str, split: str = "test",
                               cpu: bool = True) -> Dict[str, float]:
    """:func:`position_shares` of the model in ``checkpoint`` on ``split`` of ``databin``."""
    from fairseq import checkpoint_utils

    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": databin})
    model = models[0].eval()
    if not cpu:
        model.cuda()
    task.load_dataset(split)
    return position_shares(model, task, split)
