"""Beam search with a target-length prior (Eriguchi et al. 2016, eqs. 16-17).

``score(x, y) = Σ_j log p(y_j | y_<j, x) + w · log p(len(y) | len(x))`` (eq. 16, paper's ``w = 1``).
The prior is part of the search, not a re-ranking: a candidate ending at step ``t`` gets
``w · log p(t | len(x))`` before fairseq's top-k (fairseq's ``Search.step`` hook), so an eos at an
unlikely length need not enter the beam.  Scores are unnormalised as in eq. 16 (the generator
refuses ``normalize_scores`` and ``len_penalty != 1``; ``--length-prior`` implies
``--unnormalized``).  Lengths exclude eos and padding.  ``positional_scores`` stay the model's
(the prior is taken off the eos position): ``score = sum(positional_scores) + w · length_prior``.
"""
from typing import Dict, List

import torch
from fairseq.search import BeamSearch
from fairseq.sequence_generator import SequenceGenerator, SequenceGeneratorWithAlignment
from torch import Tensor

from .length_prior import LengthPrior


class LengthPriorBeamSearch(BeamSearch):
    """fairseq's :class:`~fairseq.search.BeamSearch` adding ``weight · log p(step | len(x))`` to eos
    candidates before the top-k; :meth:`prune_sentences` follows finished sentences out of the batch.
    """

    def __init__(self, tgt_dict, length_prior: LengthPrior, weight: float = 1.0):
        super().__init__(tgt_dict)
        self.length_prior = length_prior
        self.weight = float(weight)
        self.source_lengths = torch.zeros(0, dtype=torch.long)

    def start(self, source_lengths: Tensor):
        """The source lengths (no eos, no padding) of the batch about to be decoded."""
        self.source_lengths = source_lengths.detach().long().cpu()

    def prune_sentences(self, batch_idxs: Tensor):
        super().prune_sentences(batch_idxs)
        self.source_lengths = self.source_lengths[batch_idxs.cpu()]

    def log_prior(self, step: int) -> Tensor:
        """``log p(step | len(x))`` for each sentence still in the batch."""
        return torch.tensor([self.length_prior.log_prob(n, step) for n in self.source_lengths.tolist()])

    def step(self, step: int, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None,
             candidate_multiple: int = 2):
        bsz = lprobs.size(0)
        if bsz != self.source_lengths.numel():
            raise RuntimeError(
                f"LengthPriorBeamSearch has {self.source_lengths.numel()} source lengths for a "
                f"batch of {bsz}: call start(source_lengths) before each batch"
            )
        lprobs = lprobs.clone()  # the generator's buffer stays the model's log-probabilities
        lprobs[:, :, self.eos] += self.weight * self.log_prior(step).to(lprobs).unsqueeze(1)
        return super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs,
                            candidate_multiple)


class LengthPriorMixin:
    """A SequenceGenerator whose beam search is :class:`LengthPriorBeamSearch`; only fairseq's plain
    beam search (``search_strategy`` None or a :class:`~fairseq.search.BeamSearch`) can take the prior.
    """

    def __init__(self, models, tgt_dict, *, length_prior: LengthPrior, length_prior_weight: float = 1.0,
                 normalize_scores: bool = False, len_penalty: float = 1.0, search_strategy=None, **kwargs):
        if normalize_scores:
            raise ValueError(
                "the length prior scores hypotheses by unnormalised sums (Eriguchi et al. 2016, "
                "eq. 16): pass normalize_scores=False (--length-prior implies --unnormalized)"
            )
        if len_penalty != 1:
            raise ValueError(
                f"--lenpen {len_penalty} with --length-prior: the length prior's scores are "
                "unnormalised (eq. 16), where fairseq's --lenpen has no effect; drop --lenpen, "
                "or decode without --length-prior"
            )
        if search_strategy is not None and type(search_strategy) is not BeamSearch:
            raise ValueError(
                f"--length-prior adds the prior inside fairseq's plain beam search, not "
                f"{type(search_strategy).__name__}: drop --sampling, --diverse-beam-groups, "
                "--match-source-len, --diversity-rate and --constraints, or --length-prior"
            )
        search = LengthPriorBeamSearch(tgt_dict, length_prior, length_prior_weight)
        super().__init__(models, tgt_dict, normalize_scores=False, len_penalty=1.0,
                         search_strategy=search, **kwargs)
        self.length_prior = length_prior
        self.length_prior_weight = float(length_prior_weight)
        self._source_lengths: List[int] = []

    def _start(self, sample):
        src = sample["net_input"]["src_tokens"]
        lengths = (src.ne(self.eos) & src.ne(self.pad)).sum(1)
        self._source_lengths = lengths.tolist()  # by the sentence's place in the batch
        self.search.start(lengths)

    @torch.no_grad()
    def generate(self, models, sample: Dict[str, Dict[str, Tensor]], **kwargs):
        # SequenceGeneratorWithAlignment.generate calls SequenceGenerator._generate directly
        self._start(sample)
        return super().generate(models, sample, **kwargs)

    def _generate(self, sample, *args, **kwargs):
        self._start(sample)
        return super()._generate(sample, *args, **kwargs)

    def finalize_hypos(self, step: int, bbsz_idx, eos_scores, tokens, scores, finalized,
                       finished, beam_size: int, attn, src_lengths, max_len: int):
        """fairseq's, plus ``length_prior`` on new hypotheses and the prior taken off their eos position."""
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
                hypo["positional_scores"][-1] -= self.length_prior_weight * log_p
        return newly_finished


class LengthPriorSequenceGenerator(LengthPriorMixin, SequenceGenerator):
    """fairseq's beam search with the length prior on its eos candidates."""


class LengthPriorSequenceGeneratorWithAlignment(LengthPriorMixin, SequenceGeneratorWithAlignment):
    """The same with ``--print-alignment``."""


def length_prior_generator_class(args, prior: LengthPrior, weight: float):
    """``(seq_gen_cls, extra_gen_cls_kwargs)`` for ``FairseqTask.build_generator``."""
    kwargs = {"length_prior": prior, "length_prior_weight": weight}
    if getattr(args, "print_alignment", False):
        kwargs["print_alignment"] = args.print_alignment
        return LengthPriorSequenceGeneratorWithAlignment, kwargs
    return LengthPriorSequenceGenerator, kwargs
