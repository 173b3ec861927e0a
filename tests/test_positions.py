"""Where the position predictors put p_i (evaluation/positions.py): the batched shares equal
a sentence-by-sentence count (with the alignments' statistics on a split that has them),
SDAtt's p_i never reaches eos, however saturated, and the loss's pull on p_i equals central
differences of the loss."""
import statistics

import pytest
import torch
from fairseq.data import data_utils

from conftest import run_cli, train_args
from fairseq_syntax.evaluation.checkpoints import load_trained_model
from fairseq_syntax.evaluation.positions import (ALIGNMENT_KEYS, checkpoint_position_shares,
                                                  load_split, position_gradients,
                                                  position_shares)
from fairseq_syntax.modules.local_attention import PositionPredictor


@pytest.fixture(scope="module")
def sdatt_checkpoint(synthetic_databin, tmp_path_factory):
    save = tmp_path_factory.mktemp("sdatt_positions")
    run_cli(train_args(synthetic_databin, save, arch="sdatt_double_syntax", updates=2))
    return str(save / "checkpoint_last.pt")


@pytest.fixture(scope="module")
def sdatt_model(sdatt_checkpoint, synthetic_databin):
    model, _, task = load_trained_model(sdatt_checkpoint, str(synthetic_databin), "test")
    return model, task


def one_by_one(model, task):
    """(steps at eos, at the first word, at the last word, steps, p_i / J and i / I of every
    step): each
    test sentence alone, every target step of it, p_i read off the predictor."""
    predictor = next(m for m in model.modules() if isinstance(m, PositionPredictor))
    seen = []
    handle = predictor.register_forward_hook(lambda m, i, o: seen.append(float(o[0])))
    dataset, at_eos, at_first, at_last, steps = task.dataset("test"), 0, 0, 0, 0
    relative, steps_at = [], []
    try:
        with torch.no_grad():
            for i in range(len(dataset)):
                sample = dataset.collater([dataset[i]])
                seen.clear()
                model(**sample["net_input"])
                j = int(sample["net_input"]["src_lengths"][0]) - 1
                length = sample["target"].size(1)
                for i, p in enumerate(seen[:length]):
                    at_eos += p > j - 0.5
                    at_first += p < 0.5
                    at_last += j - 1.5 < p <= j - 0.5
                    steps += 1
                    relative.append(p / j)
                    steps_at.append(i / length)
    finally:
        handle.remove()
    return at_eos, at_first, at_last, steps, relative, steps_at


def test_shares_equal_a_sentence_by_sentence_count(sdatt_model):
    model, task = sdatt_model
    shares = position_shares(model, task, "test", max_tokens=300)
    at_eos, at_first, at_last, steps, relative, steps_at = one_by_one(model, task)
    assert shares["position_steps"] == steps == sum(len(task.dataset("test")[i]["target"])
                                                    for i in range(len(task.dataset("test"))))
    assert shares["position_at_eos"] == pytest.approx(100.0 * at_eos / steps)
    assert shares["position_at_first"] == pytest.approx(100.0 * at_first / steps)
    assert shares["position_at_last"] == pytest.approx(100.0 * at_last / steps)
    assert shares["position_mean_relative"] == pytest.approx(statistics.fmean(relative))
    assert shares["position_sd_relative"] == pytest.approx(statistics.pstdev(relative), abs=1e-6)
    assert shares["position_target_correlation"] == pytest.approx(
        statistics.correlation(relative, steps_at), abs=1e-6)


def test_alignment_statistics_equal_a_sentence_by_sentence_count(sdatt_checkpoint, sdatt_model,
                                                                 synthetic_databin):
    """On a split with alignments: the correlation of p_i / J with a_i / J (a_i the mean source
    position linked to the step's target token), and a_i / J's sd and correlation with i / I,
    over the linked steps, against each test sentence's own links."""
    shares = checkpoint_position_shares(str(synthetic_databin), sdatt_checkpoint, "test")
    model, task = sdatt_model
    *_, relative, steps_at = one_by_one(model, task)
    links_file = data_utils.load_indexed_dataset(str(synthetic_databin / "test.align.en-vf"), None)
    dataset, aligned = task.dataset("test"), []
    for n in range(len(dataset)):
        links = links_file[n].view(-1, 2).tolist()
        for i in range(len(dataset[n]["target"])):
            sources = [s for s, t in links if t == i]
            j = len(dataset[n]["source"]) - 1
            aligned.append(statistics.fmean(sources) / j if sources else None)
    pairs = [(p, a, t) for p, a, t in zip(relative, aligned, steps_at) if a is not None]
    p, a, t = zip(*pairs)
    assert 0 < len(pairs) < len(relative) == shares["position_steps"]
    assert shares["aligned_steps"] == len(pairs)
    assert shares["position_alignment_correlation"] == pytest.approx(statistics.correlation(p, a),
                                                                     abs=1e-6)
    assert shares["alignment_sd_relative"] == pytest.approx(statistics.pstdev(a), abs=1e-9)
    assert shares["alignment_target_correlation"] == pytest.approx(statistics.correlation(a, t),
                                                                   abs=1e-9)
    assert shares["position_sd_relative"] == pytest.approx(statistics.pstdev(relative), abs=1e-6)


def test_the_harness_takes_the_alignment_statistics_from_the_valid_set(sdatt_checkpoint,
                                                                       synthetic_databin):
    """The harness's record (``aligned_split="valid"``): the test set's shares, and the
    alignment statistics of a pass on the valid set."""
    data = str(synthetic_databin)
    test = checkpoint_position_shares(data, sdatt_checkpoint, "test")
    valid = checkpoint_position_shares(data, sdatt_checkpoint, "valid")
    both = checkpoint_position_shares(data, sdatt_checkpoint, "test", aligned_split="valid")
    assert valid["aligned_steps"] != test["aligned_steps"]
    assert both == {**test, **{key: valid[key] for key in ALIGNMENT_KEYS}}


def test_a_saturated_sdatt_predictor_stops_at_the_last_word(sdatt_model, monkeypatch):
    """p_i = (J - 1)·sigmoid(·): with the sigmoid at 1 every step sits on the last word, none
    at eos (with J·sigmoid(·) all of them were at eos, which SDAtt sees alone)."""
    model, task = sdatt_model
    predictor = next(m for m in model.modules() if isinstance(m, PositionPredictor))
    monkeypatch.setattr(predictor, "forward", lambda hidden, last: last.to(hidden.dtype))
    shares = position_shares(model, task, "test")
    assert shares["position_at_eos"] == 0.0
    assert shares["position_at_last"] == 100.0
    dataset = task.dataset("test")
    lengths = [(len(dataset[i]["source"]), len(dataset[i]["target"])) for i in range(len(dataset))]
    expected = sum(t * (s - 2) / (s - 1) for s, t in lengths) / sum(t for _, t in lengths)
    assert shares["position_mean_relative"] == pytest.approx(expected)  # (J - 1) / J


def nll_with_shifts(model, dataset, n, pad, shifts):
    """Summed target NLL of sentence ``n``, one copy per row of ``shifts`` ``[copies,
    steps]``: row k adds ``shifts[k, i]`` to the predictor's output at target step i."""
    predictor = next(m for m in model.modules() if isinstance(m, PositionPredictor))
    sample = dataset.collater([dataset[n]] * len(shifts))
    count = [0]

    def hook(module, inputs, output):
        count[0] += 1
        return output + shifts[:, count[0] - 1] if count[0] <= shifts.size(1) else output

    handle = predictor.register_forward_hook(hook)
    try:
        with torch.no_grad():
            lprobs = torch.log_softmax(model(**sample["net_input"])[0].double(), dim=-1)
    finally:
        handle.remove()
    target = sample["target"]
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return nll.masked_fill(target.eq(pad), 0).sum(dim=1)


@pytest.fixture(scope="module")
def trained_sdatt_checkpoint(synthetic_databin, tmp_path_factory):
    """SDAtt after 60 updates with the papers' logit scale 1: p_i spread, the loss sensitive."""
    save = tmp_path_factory.mktemp("sdatt_gradients")
    run_cli(train_args(synthetic_databin, save, arch="sdatt_double_syntax", updates=60,
                       extra=("--position-logit-scale", "1")))
    return str(save / "checkpoint_last.pt")


def test_gradient_statistics_equal_central_differences_of_the_loss(trained_sdatt_checkpoint,
                                                                    synthetic_databin):
    """g_i = -dNLL/dp_i of each linked valid step, by central differences of the loss with p_i
    moved by ±ε (later steps see the moved p_i through the decoder's state, as the gradient
    does), in float64 with one batch of shifted copies per sentence, gives
    position_gradients' shares and correlation; ε = min(0.01, 0.4 · the distance to the
    nearest integer) keeps p_i between the same rows."""
    model, _, task = load_trained_model(trained_sdatt_checkpoint, str(synthetic_databin))
    model.double()
    load_split(task, str(synthetic_databin), "valid")
    dataset, pad = task.dataset("valid"), task.target_dictionary.pad()
    links = data_utils.load_indexed_dataset(str(synthetic_databin / "valid.align.en-vf"), None)
    predictor = next(m for m in model.modules() if isinstance(m, PositionPredictor))
    got = position_gradients(model, task, "valid", max_tokens=300)
    pulls, offsets = [], []
    for n in range(len(dataset)):
        sample = dataset.collater([dataset[n]])
        positions = []
        handle = predictor.register_forward_hook(lambda m, i, o: positions.append(float(o[0])))
        with torch.no_grad():
            model(**sample["net_input"])
        handle.remove()
        pairs = links[n].view(-1, 2).tolist()
        linked = [(i, [s for s, t in pairs if t == i]) for i in range(len(dataset[n]["target"]))]
        linked = [(i, sources) for i, sources in linked if sources]
        if not linked:
            continue
        # one batch per sentence: copy 2k moves step i_k's p_i by +eps_k, copy 2k+1 by -eps_k
        shifts = torch.zeros(2 * len(linked), len(positions), dtype=torch.float64)
        eps = [min(1e-2, 0.4 * abs(positions[i] - round(positions[i]))) for i, _ in linked]
        for k, (i, sources) in enumerate(linked):
            shifts[2 * k, i], shifts[2 * k + 1, i] = eps[k], -eps[k]
            offsets.append(statistics.fmean(sources) - positions[i])
        nll = nll_with_shifts(model, dataset, n, pad, shifts)
        pulls += [-float(nll[2 * k] - nll[2 * k + 1]) / (2 * eps[k]) for k in range(len(linked))]
    assert got["position_gradient_steps"] == len(pulls) > 100
    moving = [(g, o) for g, o in zip(pulls, offsets) if abs(g) > 1e-9]
    assert 0 < len(moving) < len(pulls)
    assert got["position_gradient_zero"] == pytest.approx(100.0 * (1 - len(moving) / len(pulls)))
    towards = sum((g > 0) == (o > 0) for g, o in moving)
    assert got["position_gradient_towards"] == pytest.approx(100.0 * towards / len(moving))
    assert got["position_gradient_correlation"] == pytest.approx(
        statistics.correlation(pulls, offsets), abs=1e-3)

