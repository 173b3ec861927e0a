"""fairseq-syntax-benchmark's table: every ratio is to the backbone's row."""
from fairseq_syntax.evaluation.throughput import LoadingRow, Throughput, loading_markdown, markdown


def test_table_ratios_are_to_the_backbone():
    rows = [Throughput("attentional_rnn", 1000.0, 500.0, 20.0, 400.0),
            Throughput("tree2seq", 600.0, 550.0, 10.0, 300.0),
            Throughput("broken", error="fairseq-train failed, see x.log")]
    loading = [LoadingRow("everything", True, {"collater": 2.0, "loader": 4.0},
                          {"collater": 5.0, "loader": 5.0}),
               LoadingRow("distances (SDAtt)", False, {"collater": 1.0, "loader": 2.0},
                          {"collater": 1.1, "loader": 2.1})]
    table = markdown(rows, 4, 100, 8, 8, 16) + loading_markdown(loading)
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in table.splitlines() if line.startswith("| ") and "---" not in line}
    assert cells["attentional_rnn"] == ["1000", "1.00", "500", "1.00", "20.0", "1.00", "400", "1.00"]
    assert cells["tree2seq"] == ["600", "0.60", "550", "1.10", "10.0", "0.50", "300", "0.75"]
    assert cells["broken"][0] == "fairseq-train failed, see x.log"
    assert cells["everything"] == ["with alignments", "2.00 / 5.00", "2.50", "4.00 / 5.00", "1.25"]
    assert cells["distances (SDAtt)"] == ["tokens only", "1.00 / 1.10", "1.10", "2.00 / 2.10", "1.05"]


def test_speeds_are_fairseqs_own_figures(tmp_path):
    """Training words/s: fairseq's train_wps of the last epoch in its JSON log (not the
    inner 'wps' lines); decoding: fairseq-generate's summary line, thousands with commas."""
    from fairseq_syntax.evaluation.throughput import decode_speed, last_train_wps

    log = tmp_path / "train.jsonl"
    log.write_text('{"epoch": 1, "update": 0.5, "wps": "900"}\n'
                   '{"epoch": 1, "train_loss": "6.4", "train_wps": "1234.5"}\n'
                   'end of epoch 2 (average epoch stats below)\n'
                   '{"epoch": 2, "update": 1.5, "wps": "800"}\n'
                   '{"epoch": 2, "train_loss": "5.1", "train_wps": "1500.25"}\n')
    assert last_train_wps(str(log)) == 1500.25
    text = ("2026-01-01 | INFO | fairseq_cli.generate | NOTE: hypothesis and token scores\n"
            "2026-01-01 | INFO | fairseq_cli.generate | Translated 1,014 sentences (21,617 "
            "tokens) in 3.2s (316.88 sentences/s, 6755.31 tokens/s)\n")
    assert decode_speed(text) == (316.88, 6755.31)
    assert decode_speed("no summary") == (None, None)


def test_a_row_trains_afresh_where_an_earlier_run_left_its_checkpoint(synthetic_databin, tmp_path):
    """A second benchmark in the same folder measures its own training: fairseq-train would
    otherwise resume the first one's checkpoint_last.pt (here one it cannot even read)."""
    from fairseq_syntax.evaluation.throughput import benchmark_run, last_train_wps

    save = tmp_path / "attentional_rnn"
    save.mkdir()
    (save / "checkpoint_last.pt").write_bytes(b"an earlier run's checkpoint")
    row = benchmark_run("attentional_rnn", "attentional_rnn", [], str(synthetic_databin),
                        str(tmp_path), updates=2, max_tokens=800, embed_dim=16,
                        encoder_hidden=16, decoder_hidden=32)
    assert row.error == ""
    assert row.train_wps == last_train_wps(str(tmp_path / "attentional_rnn.train.jsonl")) > 0
    assert row.decode_sps > 0 and row.peak_rss_mb > 0
