"""Length-prior beam search (Eriguchi et al. 2016, eqs. 16-17) and its smoothing."""
import json
import math
import re

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

from conftest import generate_args, run_cli, train_args
from model_utils import build_model, random_batch

from fairseq_syntax.data.length_prior import LengthPrior, load_length_counts
from fairseq_syntax.modules.length_prior_generator import LengthPriorSequenceGenerator

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
    return model


def test_prior_is_added_to_finished_hypotheses_and_changes_the_choice():
    eos = 2
    model = fixed_distribution_model({4: 0.5, 5: 0.3, eos: 0.2})
    tgt_dict = model.decoder.dictionary
    src, lengths, _ = random_batch(model, bsz=1)
    sample = {"net_input": {"src_tokens": src, "src_lengths": lengths}}
    src_lens = (src.ne(eos) & src.ne(tgt_dict.pad())).sum(1).tolist()
    options = dict(beam_size=5, max_len_b=12, normalize_scores=False)
    plain = SequenceGenerator([model], tgt_dict, **options).generate([model], sample)
    for sent, hypos in enumerate(plain):
        lengths_found = sorted({len(h["tokens"]) - 1 for h in hypos})
        assert len(lengths_found) > 1, lengths_found  # the beam finished hypotheses of several lengths
        best = len(hypos[0]["tokens"]) - 1
        # the runner-up of another length (here the beam finishes lengths 1 and 2 and then
        # the max-length ones)
        wanted = next(len(h["tokens"]) - 1 for h in hypos if len(h["tokens"]) - 1 != best)
        counts = {src_lens[sent]: {wanted: 1000, best: 1}}
        prior = LengthPrior(counts)
        generator = LengthPriorSequenceGenerator([model], tgt_dict, length_prior=prior, **options)
        with_prior = generator.generate([model], {"net_input": {"src_tokens": src[sent:sent + 1],
                                                               "src_lengths": lengths[sent:sent + 1]}})[0]
        assert len(with_prior[0]["tokens"]) - 1 == wanted
        by_tokens = {tuple(h["tokens"].tolist()): h for h in hypos}
        for hypo in with_prior:
            m = len(hypo["tokens"]) - 1
            before = by_tokens[tuple(hypo["tokens"].tolist())]
            log_p = prior.log_prob(src_lens[sent], m)
            assert hypo["length_prior"].item() == pytest.approx(log_p)
            assert hypo["score"].item() == pytest.approx(before["score"].item() + log_p, abs=1e-5)
            assert torch.allclose(hypo["positional_scores"], before["positional_scores"])
        weighted = LengthPriorSequenceGenerator([model], tgt_dict, length_prior=prior,
                                                length_prior_weight=0.0, **options)
        unchanged = weighted.generate([model], {"net_input": {"src_tokens": src[sent:sent + 1],
                                                             "src_lengths": lengths[sent:sent + 1]}})[0]
        assert len(unchanged[0]["tokens"]) - 1 == best


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
    base = generate_args(synthetic_databin, backbone_blackout_checkpoint, extra=["--unnormalized", "--max-len-b", "25"])
    src, plain = hypotheses(run_cli(base).stdout)
    _, prior_hyps = hypotheses(run_cli(base + ["--length-prior"]).stdout)
    assert plain.keys() == prior_hyps.keys() == src.keys() and len(src) > 30
    prior = LengthPrior(load_length_counts(str(synthetic_databin)))
    manifest = json.loads((synthetic_databin / "syntax_manifest.json").read_text())
    assert manifest["length_counts"]  # the statistics the prior is made of
    same = [i for i in src if plain[i][1] == prior_hyps[i][1]]
    assert same
    for i in same:
        log_p = prior.log_prob(len(src[i]), len(plain[i][1]))
        # fairseq-generate prints scores in base 2
        assert prior_hyps[i][0] == pytest.approx(plain[i][0] + log_p / math.log(2), abs=1e-3)
    for i in src:  # the prior never makes the chosen hypothesis worse under the new score
        m_plain, m_prior = len(plain[i][1]), len(prior_hyps[i][1])
        new_of_plain = plain[i][0] + prior.log_prob(len(src[i]), m_plain) / math.log(2)
        assert prior_hyps[i][0] >= new_of_plain - 1e-3 or m_plain == m_prior
