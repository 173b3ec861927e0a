"""Beam search with a target-length prior (Eriguchi et al. 2016, eqs. 16-17).

``score(x, y) = Σ_j log p(y_j | y_<j, x) + w · log p(len(y) | len(x))``: fairseq's
:class:`~fairseq.sequence_generator.SequenceGenerator` computes a finished hypothesis'
score in ``finalize_hypos`` (sum of token log-probs, including eos, divided by
``(len + 1) ** lenpen`` unless ``--unnormalized``); the subclasses here add
``w · log p(len(y) | len(x))`` to that score right after, for the hypotheses the call
finished. Lengths are in subword tokens without eos, as in the statistics
(:mod:`fairseq_syntax.data.length_prior`): ``len(x)`` counts the source tokens other than
eos and padding, ``len(y)`` is the decoding step at which eos was chosen.

Interplay with length normalisation: the prior is added *after* fairseq's normalisation,
so its weight does not shrink with the hypothesis length. The paper's score (eq. 16:
unnormalised sum plus the prior, ``w = 1``) is ``--length-prior --unnormalized``; with
fairseq's default normalisation the prior is added to the average log-probability per
token, where it weighs relatively more (lower ``--length-prior-weight`` then).

The prior re-ranks the hypotheses that the beam finishes; it does not change which
hypotheses the beam search keeps while they are unfinished (their length is not yet
known), as in the paper, where the penalty is part of a candidate's final score.
``positional_scores`` stay the model's token log-probabilities; each hypothesis also
gets ``length_prior`` (the unweighted ``log p``).
"""
from typing import Dict, List

import torch
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
from torch import Tensor

from fairseq_syntax.data.length_prior import LengthPrior


class LengthPriorMixin:
    """Adds ``weight · log p(len(y) | len(x))`` to the score of every finished hypothesis."""

    def __init__(self, *args, length_prior: LengthPrior, length_prior_weight: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.length_prior = length_prior
        self.length_prior_weight = float(length_prior_weight)
        self._source_lengths: List[int] = []

    def _remember_source_lengths(self, sample):
        src = sample["net_input"]["src_tokens"]
        self._source_lengths = (src.ne(self.eos) & src.ne(self.pad)).sum(1).tolist()

    @torch.no_grad()
    def generate(self, models, sample: Dict[str, Dict[str, Tensor]], **kwargs):
        self._remember_source_lengths(sample)
        return super().generate(models, sample, **kwargs)

    def _generate(self, sample, *args, **kwargs):
        self._remember_source_lengths(sample)
        return super()._generate(sample, *args, **kwargs)

    def finalize_hypos(self, step: int, bbsz_idx, eos_scores, tokens, scores, finalized,
                       finished, beam_size: int, attn, src_lengths, max_len: int):
        before = [len(hypos) for hypos in finalized]
        newly_finished = super().finalize_hypos(
            step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size,
            attn, src_lengths, max_len,
        )
        # ``finalized`` is indexed by the sentence's place in the original batch; the
        # hypotheses this call appended all end at this step (len(y) = step, eos excluded)
        for sent, hypos in enumerate(finalized):
            for hypo in hypos[before[sent]:]:
                log_p = self.length_prior.log_prob(self._source_lengths[sent], step)
                hypo["length_prior"] = torch.tensor(log_p)
                hypo["score"] = hypo["score"] + self.length_prior_weight * log_p
        return newly_finished


class LengthPriorSequenceGenerator(LengthPriorMixin, SequenceGenerator):
    """fairseq's beam search plus the length prior."""


class LengthPriorSequenceGeneratorWithAlignment(LengthPriorMixin, SequenceGeneratorWithAlignment):
    """fairseq's beam search with ``--print-alignment`` plus the length prior."""


def length_prior_generator_class(args, prior: LengthPrior, weight: float):
    """``(seq_gen_cls, extra_gen_cls_kwargs)`` for ``FairseqTask.build_generator``."""
    kwargs = {"length_prior": prior, "length_prior_weight": weight}
    if getattr(args, "print_alignment", False):
        kwargs["print_alignment"] = args.print_alignment
        return LengthPriorSequenceGeneratorWithAlignment, kwargs
    return LengthPriorSequenceGenerator, kwargs
