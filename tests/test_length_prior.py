"""Length-prior beam search (Eriguchi et al. 2016, eqs. 16-17) and its smoothing."""
import json
import math
import re

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from conftest import generate_args, run_cli, train_args
from model_utils import build_model, random_batch

from fairseq_syntax.generation.length_prior import LengthPrior, load_length_counts
from fairseq_syntax.generation.length_prior_generator import LengthPriorSequenceGenerator

COUNTS = {4: {3: 2, 5: 6}, 2: {2: 1}}


def gaussian(m, mu, sigma, top=400):
    """Discretised Gaussian on m = 0, 1, 2, ... by brute force."""
    norm = sum(math.exp(-((k - mu) ** 2) / (2 * sigma ** 2)) for k in range(top))
    return math.exp(-((m - mu) ** 2) / (2 * sigma ** 2)) / norm


def test_smoothed_values_by_hand():
    prior = LengthPrior(COUNTS, smoothing=1.0)
    # ratios m/n: 3/4 (twice), 5/4 (six times), 2/2 (once)
    rho = (2 * 0.75 + 6 * 1.25 + 1.0) / 9  # = 10/9
    s = math.sqrt((2 * 0.75 ** 2 + 6 * 1.25 ** 2 + 1.0) / 9 - rho ** 2)
    assert prior.ratio_mean == pytest.approx(10 / 9)
    assert prior.ratio_std == pytest.approx(s)
    g = lambda m, n: gaussian(m, rho * n, max(s * n, 1.0))  # noqa: E731
    # seen pair: (c + k g) / (c(n) + k)
    assert prior.log_prob(4, 5) == pytest.approx(math.log((6 + g(5, 4)) / 9), abs=1e-9)
    assert prior.log_prob(4, 3) == pytest.approx(math.log((2 + g(3, 4)) / 9), abs=1e-9)
    # unseen target length of a seen source length
    assert prior.log_prob(4, 4) == pytest.approx(math.log(g(4, 4) / 9), abs=1e-9)
    # unseen source length: the backoff itself (sigma = s * 7 > 1 here)
    assert s * 7 > 1
    assert prior.log_prob(7, 8) == pytest.approx(math.log(g(8, 7)), abs=1e-9)
    # far in the tail: finite, no underflow
    assert math.isfinite(prior.log_prob(4, 300)) and prior.log_prob(4, 300) < -1000
    for n in (2, 4, 7, 30):
        assert sum(math.exp(prior.log_prob(n, m)) for m in range(200)) == pytest.approx(1.0, abs=1e-9)
    with pytest.raises(ValueError):
        LengthPrior(COUNTS, smoothing=0.0)


def fixed_distribution_model(probs):
    """A real model whose output layer returns the same distribution at every step."""
    model = build_model("attentional_rnn")
    vocab = len(model.decoder.dictionary)
    logits = torch.full((vocab,), math.log(1e-9))
    for token, p in probs.items():
        logits[token] = math.log(p)
    model.decoder.output_layer = lambda features: logits.expand(*features.shape[:2], vocab).clone()
    model.fixed_log_probs = torch.log_softmax(logits.double(), dim=-1).tolist()
    return model


def source_lengths(src, tgt_dict):
    return (src.ne(tgt_dict.eos()) & src.ne(tgt_dict.pad())).sum(1).tolist()


def reference_beam(log_probs, eos, pad, beam, max_len, log_prior, weight=1.0, min_len=1):
    """fairseq's beam search written out for a context-free model, with eq. 16 on the eos
    candidates: at step t, ending after t tokens scores ``cum + log p(eos) + w log_prior(t)``.
    The best 2 * beam candidates; the eos ones among the first ``beam`` finish; the first
    ``beam`` others go on; stop once ``beam`` have finished or at ``max_len``.
    Returns the finished hypotheses as (score, length), best first."""
    live, finished = [((), 0.0)], []
    for t in range(max_len + 1):
        cands = []
        for tokens, score in live:
            for token, lp in enumerate(log_probs):
                if token == pad or (token == eos and t < min_len) or (token != eos and t >= max_len):
                    continue
                bonus = weight * log_prior(t) if token == eos else 0.0
                cands.append((score + lp + bonus, token == eos, tokens + (token,)))
        cands = sorted(cands, key=lambda c: -c[0])[:2 * beam]
        for score, ends, tokens in cands[:beam]:
            if ends and len(finished) < beam:
                finished.append((score, t))
        if len(finished) == beam or t == max_len:
            break
        live = [(tokens, score) for score, ends, tokens in cands if not ends][:beam]
    return sorted(finished, key=lambda f: -f[0])


def decode(generator_cls, model, src, lengths, **options):
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}}
    return generator_cls([model], model.decoder.dictionary, **options).generate([model], sample)


def test_the_prior_decides_which_hypotheses_finish():
    """Worked example: eos is the likeliest token, so the plain beam ends both its
    hypotheses after one token and stops; re-ranking those could only pick a length-1
    output. The prior (all training targets of this source length have 4 tokens) makes
    ending after 1, 2 or 3 tokens lose to going on, and the beam ends at length 4."""
    eos = 2
    model = fixed_distribution_model({4: 0.25, 5: 0.15, eos: 0.6})
    tgt_dict = model.decoder.dictionary
    src, lengths, _ = random_batch(model, bsz=1)
    n = source_lengths(src, tgt_dict)[0]
    prior = LengthPrior({n: {4: 1000}})
    options = dict(beam_size=2, max_len_b=10, normalize_scores=False)
    plain = decode(SequenceGenerator, model, src, lengths, **options)[0]
    assert [len(h["tokens"]) - 1 for h in plain] == [1, 1]  # [4, eos] and [5, eos]
    with_prior = decode(LengthPriorSequenceGenerator, model, src, lengths, length_prior=prior, **options)[0]
    assert [len(h["tokens"]) - 1 for h in with_prior] == [4, 4]
    best = with_prior[0]
    assert best["tokens"].tolist() == [4, 4, 4, 4, eos]
    # eq. 16 by hand: 4 log 0.25 + log 0.6 + log p(4 | n)
    log_p4 = prior.log_prob(n, 4)
    assert best["score"].item() == pytest.approx(4 * math.log(0.25) + math.log(0.6) + log_p4, abs=1e-5)
    assert best["length_prior"].item() == pytest.approx(log_p4)


def test_fairseq_beam_with_the_prior_on_eos_candidates_equals_the_reference():
    """Random context-free models and length tables, a batch whose sentences finish at
    different steps: finished scores and lengths equal :func:`reference_beam`; each score is
    the model's token log-probabilities plus the prior (eq. 16)."""
    eos, pad = 2, 1
    g = torch.Generator().manual_seed(0)
    changed = pruned = 0
    for trial in range(6):
        weights = torch.rand(5, generator=g) + 0.05
        weights[-1] += 1.0  # eos likely enough that the plain beam ends early
        probs = dict(zip([4, 5, 6, 7, eos], (weights / weights.sum()).tolist()))
        model = fixed_distribution_model(probs)
        tgt_dict = model.decoder.dictionary
        src, lengths, _ = random_batch(model, bsz=3, seed=trial)
        ns = source_lengths(src, tgt_dict)
        assert len(set(ns)) == 3
        counts = {n: {int(m): int(c) for m, c in zip(torch.randint(1, 9, (2,), generator=g),
                                                     torch.randint(1, 50, (2,), generator=g))}
                  for n in ns}
        prior = LengthPrior(counts)
        beam, weight = 2 + trial % 3, [1.0, 0.5, 2.0][trial % 3]
        options = dict(beam_size=beam, max_len_b=9, normalize_scores=False)
        hypos = decode(LengthPriorSequenceGenerator, model, src, lengths, length_prior=prior,
                       length_prior_weight=weight, **options)
        for sent, n in enumerate(ns):
            expected = reference_beam(model.fixed_log_probs, eos, pad, beam, 9,
                                      lambda t: prior.log_prob(n, t), weight)
            got = [(h["score"].item(), len(h["tokens"]) - 1) for h in hypos[sent]]
            assert [m for _, m in got] == [m for _, m in expected], (trial, sent)
            assert [s for s, _ in got] == pytest.approx([s for s, _ in expected], abs=1e-4)
            plain = reference_beam(model.fixed_log_probs, eos, pad, beam, 9, lambda t: 0.0, 0.0)
            changed += [m for _, m in plain] != [m for _, m in expected]
            for hypo in hypos[sent]:
                m = len(hypo["tokens"]) - 1
                model_lp = [model.fixed_log_probs[t] for t in hypo["tokens"].tolist()]
                assert hypo["positional_scores"].tolist() == pytest.approx(model_lp, abs=1e-5)
                assert hypo["length_prior"].item() == pytest.approx(prior.log_prob(n, m))
                assert hypo["score"].item() == pytest.approx(sum(model_lp) + weight * prior.log_prob(n, m),
                                                             abs=1e-4)
        # sentences left the batch at different steps (LengthPriorBeamSearch.prune_sentences)
        pruned += len({max(len(h["tokens"]) for h in sent_hypos) for sent_hypos in hypos}) > 1
    assert changed >= 12 and pruned >= 3, (changed, pruned)


def test_contradictory_options_are_refused():
    from fairseq.search import Sampling

    model = fixed_distribution_model({4: 0.5, 2: 0.5})
    tgt_dict = model.decoder.dictionary
    prior = LengthPrior(COUNTS)
    with pytest.raises(ValueError, match="normalize_scores=False"):
        LengthPriorSequenceGenerator([model], tgt_dict, length_prior=prior, normalize_scores=True)
    with pytest.raises(ValueError, match="--lenpen 0.6 with --length-prior"):
        LengthPriorSequenceGenerator([model], tgt_dict, length_prior=prior, len_penalty=0.6)
    with pytest.raises(ValueError, match="not Sampling"):
        LengthPriorSequenceGenerator([model], tgt_dict, length_prior=prior,
                                     search_strategy=Sampling(tgt_dict, sampling_topk=3))


# ----------------------------------------------------------------------- command line

@pytest.fixture(scope="module")
def backbone_blackout_checkpoint(synthetic_databin, tmp_path_factory):
    save = tmp_path_factory.mktemp("backbone_blackout")
    log = run_cli(train_args(synthetic_databin, save, arch="attentional_rnn", updates=3, extra=[
        "--criterion", "blackout", "--blackout-samples", "20", "--blackout-alpha", "0.4",
    ]))
    text = log.stdout + log.stderr
    assert re.search(r"train_inner .*loss=[0-9.]+, nll_loss=[0-9.]+", text), text[-2000:]
    assert re.search(r"valid on 'valid' subset \| loss ([0-9.]+) \| nll_loss \1 ", text)  # exact softmax
    return save / "checkpoint_last.pt"


def hypotheses(stdout):
    src = {int(i): s.split() for i, s in re.findall(r"^S-(\d+)\t(.*)$", stdout, re.M)}
    hyp = {int(i): (float(score), h.split()) for i, score, h in re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", stdout, re.M)}
    return src, hyp


def test_generate_adds_the_data_bin_prior(synthetic_databin, backbone_blackout_checkpoint):
    base = generate_args(synthetic_databin, backbone_blackout_checkpoint, extra=["--max-len-b", "25"])
    src, plain = hypotheses(run_cli(base + ["--unnormalized"]).stdout)
    out = run_cli(base + ["--length-prior"]).stdout  # implies --unnormalized
    _, prior_hyps = hypotheses(out)
    token_scores = {int(i): [float(x) for x in p.split()] for i, p in re.findall(r"^P-(\d+)\t(.*)$", out, re.M)}
    assert plain.keys() == prior_hyps.keys() == token_scores.keys() == src.keys() and len(src) > 30
    prior = LengthPrior(load_length_counts(str(synthetic_databin)))
    manifest = json.loads((synthetic_databin / "syntax_manifest.json").read_text())
    assert manifest["length_counts"]  # the statistics the prior is made of
    for i in src:
        # eq. 16, printed in base 2: the unnormalised sum of the token log-probabilities
        # (P- line, eos included, 4 decimals each) plus log p(len(y) | len(x))
        m = len(prior_hyps[i][1])
        assert len(token_scores[i]) == m + 1
        log_p = prior.log_prob(len(src[i]), m)
        assert prior_hyps[i][0] == pytest.approx(sum(token_scores[i]) + log_p / math.log(2), abs=3e-3)
    same = [i for i in src if plain[i][1] == prior_hyps[i][1]]
    assert same
    for i in same:
        log_p = prior.log_prob(len(src[i]), len(plain[i][1]))
        assert prior_hyps[i][0] == pytest.approx(plain[i][0] + log_p / math.log(2), abs=1e-3)
    refused = run_cli(base + ["--length-prior", "--lenpen", "0.6"], check=False)
    assert refused.returncode != 0
    assert "--lenpen 0.6 with --length-prior" in refused.stderr, refused.stderr[-2000:]
