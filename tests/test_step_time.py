"""fairseq-syntax-step-time: same batches for every run, ratios to the first run."""
from conftest import TINY_MODEL

from fairseq_syntax.cli.step_time import markdown
from fairseq_syntax.evaluation.step_time import measure


def test_ratios_are_to_the_first_run():
    table = markdown({"a": {"cpu": 2.0, "wall": 4.0}, "b+blackout": {"cpu": 3.0, "wall": 5.0}}, steps=2)
    rows = [line.split("|")[1:-1] for line in table.splitlines()[2:]]
    assert [c.strip() for c in rows[0]] == ["a", "1.000", "1.00", "2.000", "1.00"]
    assert [c.strip() for c in rows[1]] == ["b+blackout", "1.500", "1.50", "2.500", "1.25"]


def test_every_run_is_timed_on_the_same_batches(synthetic_databin):
    totals = measure(str(synthetic_databin), ["attentional_rnn", "tree2seq+blackout"],
                     TINY_MODEL, batches=2, rounds=1, max_tokens=300)
    assert list(totals) == ["attentional_rnn", "tree2seq+blackout"]
    assert all(t["cpu"] > 0 and t["wall"] > 0 for t in totals.values())


def test_lstm_is_fairseqs_own_as_the_parity_benchmark_builds_it(synthetic_databin):
    from fairseq.models.lstm import LSTMModel

    from fairseq_syntax.evaluation.step_time import build_run

    task, model, _, _ = build_run(str(synthetic_databin), "lstm+label_smoothed_cross_entropy", TINY_MODEL)
    embed = int(TINY_MODEL[TINY_MODEL.index("--decoder-embed-dim") + 1])
    assert type(model) is LSTMModel and type(task).__name__ == "TranslationTask"
    assert model.encoder.bidirectional and model.decoder.additional_fc.out_features == embed
    totals = measure(str(synthetic_databin), ["lstm", "attentional_rnn"], TINY_MODEL,
                     batches=2, rounds=1, max_tokens=300)
    assert list(totals) == ["lstm", "attentional_rnn"]


def test_transformer_is_fairseqs_own_under_the_translation_task(synthetic_databin):
    from fairseq.models.transformer import TransformerModel

    from fairseq_syntax.evaluation.step_time import build_run

    sizes = ["--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--encoder-layers", "1",
             "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-layers", "1"]
    task, model, _, _ = build_run(str(synthetic_databin), "transformer", sizes)
    assert type(model) is TransformerModel and type(task).__name__ == "TranslationTask"
    assert model.encoder.embed_tokens.embedding_dim == 32 and len(model.decoder.layers) == 1
    totals = measure(str(synthetic_databin), ["syntax_transformer", "transformer"], sizes,
                     batches=2, rounds=1, max_tokens=300)
    assert list(totals) == ["syntax_transformer", "transformer"]
