"""Criterion ``blackout``: BlackOut sampled softmax (Ji et al. 2016), used by Eriguchi et al. (2016).

In training, for every target position with decoder output ``h`` (the input of the output
layer) and target word ``t``, BlackOut scores the target and a set ``S`` of ``K`` negative
samples with a *weighted* softmax (Ji et al. 2016, eqs. 3-4)::

    p̃(i) = w_i exp(z_i) / (w_t exp(z_t) + Σ_{j ∈ S, j ≠ t} w_j exp(z_j)),   z_i = θ_iᵀ h + b_i,
    w_i = 1 / q(i),   q(i) ∝ count(i)^α

and maximises the discriminative objective ``log p̃(t) + Σ_{j ∈ S, j ≠ t} log(1 - p̃(j))``;
the loss is its negative, summed over the target positions. The samples are drawn once
per batch (shared by all its positions; Ji et al. share them across a mini-batch too),
with replacement, from the unigram distribution of the training targets raised to the
power α (``--blackout-alpha``, 0.4 as in both papers); a sample equal to a position's
target is left out of that position's sum. Only the ``K`` sampled rows (plus the targets'
rows) of the output layer are computed.

Unigram counts: the target dictionary's counts, which ``fairseq-preprocess`` (run by
``fairseq-syntax-preprocess`` on ``--trainpref`` only) counts on the training targets; a
dictionary file does not store the special symbols, so eos is given the number of
training sentences (the sum of ``length_counts`` in the data-bin's manifest; without a
manifest, the largest word count, with a warning), and pad and bos get 0 (never sampled).
With ``--joined-dictionary`` the counts include the source side.

Validation (``model.eval()``, e.g. fairseq-train's validation) and decoding use the exact
softmax: the validation ``loss`` is the exact cross-entropy. In training, ``loss`` is the
BlackOut objective and ``nll_loss`` its first term ``-log p̃(t)`` (an estimate of the
cross-entropy, not the exact value); both are sums, so logging outputs can be summed
across workers.

Models: the criterion needs the decoder's features before the output layer. It runs
``model.encoder(**net_input)`` and ``model.decoder.extract_features(prev_output_tokens,
encoder_out)``, then ``decoder.pre_output`` and the sampled rows of ``decoder.fc_out``
(:class:`~fairseq_syntax.modules.rnn_decoder.RNNDecoder` provides both).
"""
import logging
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from omegaconf import II
from torch import Tensor

logger = logging.getLogger(__name__)


@dataclass
class BlackOutConfig(FairseqDataclass):
    blackout_samples: int = field(
        default=500,
        metadata={"help": "K, the number of negative samples drawn (with replacement) per "
                  "batch and shared by all its target positions (Eriguchi et al. use 500-2500 "
                  "for vocabularies of 30k-90k words)"},
    )
    blackout_alpha: float = field(
        default=0.4,
        metadata={"help": "α: negative samples come from the training unigram distribution "
                  "raised to the power α (0 = uniform over seen words, 1 = unigram; the "
                  "papers use 0.4)"},
    )
    sentence_avg: bool = II("optimization.sentence_avg")


def unigram_counts(dictionary, num_sentences=None) -> Tensor:
    """Training counts of the target symbols, specials fixed (see the module docstring)."""
    counts = torch.tensor(dictionary.count, dtype=torch.float64)
    counts[dictionary.pad()] = 0
    counts[dictionary.bos()] = 0
    if num_sentences is None:
        words = counts[dictionary.nspecial:]
        num_sentences = float(words.max()) if words.numel() else 1.0
        logger.warning(
            "BlackOut: no syntax_manifest.json with length_counts in the data-bin; eos is "
            f"given the largest word count ({num_sentences:g}) as its unigram count"
        )
    counts[dictionary.eos()] = num_sentences
    return counts


def _training_sentences(task):
    cfg = getattr(task, "cfg", None)
    data = getattr(cfg, "data", None) if cfg is not None else None
    if not data:
        return None
    from fairseq_syntax.generation.length_prior import load_length_counts

    try:
        counts = load_length_counts(data.split(":")[0])
    except (FileNotFoundError, KeyError):
        return None
    return sum(sum(row.values()) for row in counts.values())


def log1mexp(x: Tensor) -> Tensor:
    """``log(1 - exp(x))`` for ``x <= 0``, accurately on the whole range (Mächler 2012)."""
    x = x.clamp(max=-1e-7)
    return torch.where(x > -math.log(2), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


@register_criterion("blackout", dataclass=BlackOutConfig)
class BlackOutCriterion(FairseqCriterion):
    """BlackOut (Ji, Vishwanathan, Satish, Anderson and Dubey, ICLR 2016): a weighted
    softmax over the target and K negative samples from the unigram^α distribution, as
    used by Eriguchi et al. (2016) to train tree-to-sequence NMT; exact softmax in
    validation."""

    def __init__(self, task, sentence_avg: bool, blackout_samples: int = 500, blackout_alpha: float = 0.4):
        super().__init__(task)
        if blackout_samples < 1:
            raise ValueError(f"--blackout-samples must be >= 1, got {blackout_samples}")
        if not 0.0 <= blackout_alpha <= 1.0:
            raise ValueError(f"--blackout-alpha must be in [0, 1], got {blackout_alpha}")
        self.sentence_avg = sentence_avg
        self.num_samples = blackout_samples
        self.alpha = blackout_alpha
        counts = unigram_counts(task.target_dictionary, _training_sentences(task))
        seen = counts > 0
        proposal = torch.where(seen, counts.clamp(min=1e-30).pow(blackout_alpha), torch.zeros_like(counts))
        proposal = proposal / proposal.sum()
        # a word never seen in training is never sampled; should it be a target, its
        # weight is that of the rarest seen word
        log_q = torch.log(proposal.clamp(min=float(proposal[seen].min())))
        self.register_buffer("proposal", proposal.float(), persistent=False)
        self.register_buffer("log_proposal", log_q.float(), persistent=False)

    def draw_negatives(self, device=None) -> Tensor:
        """K word indices drawn with replacement from the proposal ``q ∝ count^α``."""
        return torch.multinomial(self.proposal, self.num_samples, replacement=True).to(device)

    def output_inputs(self, model, net_input) -> Tensor:
        """The decoder's features as they enter ``fc_out`` (``[B, T, d]``)."""
        decoder = model.decoder
        encoder_input = {k: v for k, v in net_input.items() if k != "prev_output_tokens"}
        encoder_out = model.encoder(**encoder_input)
        features, _ = decoder.extract_features(net_input["prev_output_tokens"], encoder_out=encoder_out)
        return decoder.pre_output(features)

    def blackout_loss(self, model, sample, negatives: Tensor):
        """(loss, -Σ log p̃(t)) of the batch for the given negative samples ``[K]``."""
        target = model.get_targets(sample, None)
        real = target.ne(self.padding_idx)
        x = self.output_inputs(model, sample["net_input"])[real]  # [N, d]
        t = target[real]
        fc = model.decoder.fc_out
        bias_t = fc.bias[t] if fc.bias is not None else 0.0
        bias_s = fc.bias[negatives] if fc.bias is not None else 0.0
        log_q = self.log_proposal.to(x.dtype)
        target_score = (x * fc.weight[t]).sum(-1) + bias_t - log_q[t]
        sample_scores = x @ fc.weight[negatives].t() + bias_s - log_q[negatives]
        sample_scores = sample_scores.masked_fill(negatives.unsqueeze(0) == t.unsqueeze(1), float("-inf"))
        log_p = torch.log_softmax(torch.cat([target_score.unsqueeze(1), sample_scores], dim=1).float(), dim=1)
        nll = -log_p[:, 0]
        negative_term = -log1mexp(log_p[:, 1:]).masked_fill(torch.isinf(sample_scores), 0.0)
        return (nll + negative_term.sum(1)).sum(), nll.sum()

    def exact_loss(self, model, sample):
        net_output = model(**sample["net_input"])
        lprobs = model.get_normalized_probs(net_output, log_probs=True)
        target = model.get_targets(sample, net_output)
        nll = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), target.view(-1),
                         ignore_index=self.padding_idx, reduction="sum")
        return nll, nll

    def forward(self, model, sample, reduce=True):
        if model.training:
            negatives = self.draw_negatives(sample["target"].device)
            loss, nll = self.blackout_loss(model, sample, negatives)
        else:
            loss, nll = self.exact_loss(model, sample)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs) -> None:
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        nll_sum = sum(log.get("nll_loss", 0) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss_sum / sample_size / math.log(2), sample_size, round=3)
        metrics.log_scalar("nll_loss", nll_sum / ntokens / math.log(2), ntokens, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["nll_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
