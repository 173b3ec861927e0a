"""BlackOut (Ji et al. 2016): exact identities, the proposal distribution, exact validation."""
import argparse
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fairseq.data import Dictionary, data_utils

from model_utils import build_model, random_batch, tiny_dictionary

from fairseq_syntax.criterions.blackout import BlackOutCriterion, unigram_counts


class Task:
    def __init__(self, tgt_dict, data=None):
        self.target_dictionary = tgt_dict
        self.source_dictionary = tgt_dict
        self.cfg = argparse.Namespace(data=data)


def counted_dictionary(counts):
    d = Dictionary()
    for i, c in enumerate(counts):
        d.add_symbol(f"w{i}", n=c)
    return d


def sample_of(model, seed=0, bsz=3):
    src, lengths, prev = random_batch(model, bsz=bsz, seed=seed)
    target = torch.cat([prev[:, 1:], torch.full((bsz, 1), model.decoder.dictionary.eos())], dim=1)
    target[0, -2:] = model.decoder.dictionary.pad()  # a padded target
    return {
        "net_input": {"src_tokens": src, "src_lengths": lengths, "prev_output_tokens": prev},
        "target": target,
        "ntokens": int(target.ne(model.decoder.dictionary.pad()).sum()),
    }


def full_logits(model, sample):
    logits, _ = model(**sample["net_input"])
    real = sample["target"].ne(model.decoder.dictionary.pad())
    return logits[real], sample["target"][real]


def reference_blackout(logits, targets, negatives, q):
    """Ji et al. eqs. 3-4 position by position from the full logits."""
    loss = nll = 0.0
    for z, t in zip(logits.double(), targets.tolist()):
        weight = lambda i: math.exp(z[i].item()) / q[i]  # noqa: E731
        kept = [j for j in negatives.tolist() if j != t]
        norm = weight(t) + sum(weight(j) for j in kept)
        nll -= math.log(weight(t) / norm)
        loss -= math.log(weight(t) / norm) + sum(math.log(1 - weight(j) / norm) for j in kept)
    return loss, nll


def test_uniform_proposal_over_the_whole_vocabulary_is_the_exact_softmax():
    """α = 0 makes the weights uniform; with every sampleable word drawn once, p̃(t) is the
    exact softmax over those words (all but pad and bos, which are never sampled)."""
    torch.manual_seed(0)
    model = build_model("attentional_rnn", dropout=0.0).train()
    tgt_dict = model.decoder.dictionary
    criterion = BlackOutCriterion(Task(tgt_dict), sentence_avg=False, blackout_samples=5, blackout_alpha=0.0)
    support = torch.tensor([i for i in range(len(tgt_dict)) if i not in (tgt_dict.pad(), tgt_dict.bos())])
    assert torch.allclose(criterion.proposal[support], torch.full((len(support),), 1 / len(support)))
    sample = sample_of(model)
    loss, nll = criterion.blackout_loss(model, sample, support)
    logits, targets = full_logits(model, sample)
    lprobs = torch.log_softmax(logits[:, support].double(), dim=-1)
    column = {int(w): k for k, w in enumerate(support)}
    target_lp = lprobs[torch.arange(len(targets)), [column[int(t)] for t in targets]]
    assert nll.item() == pytest.approx(-target_lp.sum().item(), rel=1e-5)
    others = torch.ones_like(lprobs, dtype=torch.bool)
    others[torch.arange(len(targets)), [column[int(t)] for t in targets]] = False
    negative = -torch.log1p(-lprobs.exp())[others].sum()
    assert loss.item() == pytest.approx((-target_lp.sum() + negative).item(), rel=1e-5)
    # the exact cross-entropy (full vocabulary) differs only by pad's and bos' share
    exact = F.cross_entropy(logits, targets, reduction="sum")
    assert nll.item() < exact.item()


def test_weighted_softmax_with_duplicates_and_the_target_among_the_samples():
    torch.manual_seed(1)
    counts = [0, 0, 0, 0] + [50, 20, 10, 5, 3, 2, 1, 1, 7, 9, 11, 13, 17, 19, 23, 29]
    tgt_dict = counted_dictionary(counts[4:])
    model = build_model("attentional_rnn", tgt_dict=tgt_dict, dropout=0.0).train()
    criterion = BlackOutCriterion(Task(tgt_dict), sentence_avg=False, blackout_samples=6, blackout_alpha=1.0)
    sample = sample_of(model, seed=3)
    logits, targets = full_logits(model, sample)
    negatives = torch.tensor([targets[0].item(), 5, 5, 9, 17, tgt_dict.eos()])
    loss, nll = criterion.blackout_loss(model, sample, negatives)
    expected_loss, expected_nll = reference_blackout(logits, targets, negatives, criterion.proposal.double().tolist())
    assert nll.item() == pytest.approx(expected_nll, rel=1e-5)
    assert loss.item() == pytest.approx(expected_loss, rel=1e-5)
    # eos has no training count without a manifest: the largest word count stands in
    assert criterion.proposal[tgt_dict.eos()].item() == pytest.approx(criterion.proposal[4].item())


def test_samples_follow_the_unigram_distribution_to_the_power_alpha():
    torch.manual_seed(123)
    counts = [400, 100, 25, 9, 1, 0]
    tgt_dict = counted_dictionary(counts)
    alpha = 0.4
    criterion = BlackOutCriterion(Task(tgt_dict), sentence_avg=False, blackout_samples=200_000, blackout_alpha=alpha)
    draws = criterion.draw_negatives()
    freq = torch.bincount(draws, minlength=len(tgt_dict)).double() / draws.numel()
    eos = 400  # the largest count stands in for eos
    raw = [0, 0, eos, 1] + counts  # bos, pad, eos, unk (dictionary count 1), words
    expected = torch.tensor([c ** alpha if c > 0 else 0.0 for c in raw], dtype=torch.double)
    expected /= expected.sum()
    assert freq[tgt_dict.pad()] == 0 and freq[tgt_dict.bos()] == 0 and freq[-1] == 0
    sd = torch.sqrt(expected * (1 - expected) / draws.numel())
    assert ((freq - expected).abs() <= 5 * sd + 1e-12).all(), (freq, expected)
    # α matters: the plain unigram distribution is far from these frequencies
    plain = torch.tensor([float(c) for c in raw], dtype=torch.double)
    plain /= plain.sum()
    assert ((freq - plain).abs() > 20 * sd).any()


def test_validation_uses_the_exact_softmax():
    model = build_model("attentional_rnn")
    criterion = BlackOutCriterion(Task(model.decoder.dictionary), sentence_avg=False, blackout_samples=3)
    sample = sample_of(model)
    logits, targets = full_logits(model, sample)
    exact = F.cross_entropy(logits, targets, reduction="sum")
    for seed in (0, 1):
        torch.manual_seed(seed)
        loss, sample_size, log = criterion(model.eval(), sample)
        assert loss.item() == pytest.approx(exact.item(), rel=1e-6)
        assert log["nll_loss"].item() == pytest.approx(exact.item(), rel=1e-6)
        assert sample_size == sample["ntokens"] == log["ntokens"]
    torch.manual_seed(0)
    train_loss, _, _ = criterion(model.train(), sample)
    assert train_loss.item() != pytest.approx(exact.item(), rel=1e-3)
    assert BlackOutCriterion.logging_outputs_can_be_summed()


def test_gradients_reach_only_the_sampled_and_target_rows():
    model = build_model("attentional_rnn", dropout=0.0).train()
    criterion = BlackOutCriterion(Task(model.decoder.dictionary), sentence_avg=False, blackout_samples=3)
    sample = sample_of(model)
    negatives = torch.tensor([7, 11, 11])
    loss, _ = criterion.blackout_loss(model, sample, negatives)
    loss.backward()
    touched = model.decoder.fc_out.weight.grad.abs().sum(1).nonzero().view(-1).tolist()
    real = sample["target"][sample["target"].ne(model.decoder.dictionary.pad())]
    assert set(touched) <= set(real.tolist()) | {7, 11}
    assert {7, 11} <= set(touched)


def test_counts_are_the_training_counts_of_the_data_bin(synthetic_databin):
    """fairseq's dict.{tgt}.txt counts the training targets (eos is not in the file: the
    criterion takes the number of training sentences from the manifest)."""
    tgt_dict = Dictionary.load(str(synthetic_databin / "dict.vf.txt"))
    train = data_utils.load_indexed_dataset(str(synthetic_databin / "train.en-vf.vf"), tgt_dict)
    counts = np.zeros(len(tgt_dict), dtype=np.int64)
    for i in range(len(train)):
        counts += np.bincount(train[i].numpy(), minlength=len(tgt_dict))
    assert np.array_equal(counts[tgt_dict.nspecial:], np.asarray(tgt_dict.count[tgt_dict.nspecial:]))
    criterion = BlackOutCriterion(Task(tgt_dict, data=str(synthetic_databin)), sentence_avg=False,
                                  blackout_samples=10, blackout_alpha=1.0)
    fixed = unigram_counts(tgt_dict, len(train))
    assert fixed[tgt_dict.eos()] == counts[tgt_dict.eos()] == len(train)
    assert torch.allclose(criterion.proposal.double(), fixed / fixed.sum())
