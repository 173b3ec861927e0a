"""fairseq-syntax-benchmark's table: every ratio is to the backbone's row."""
from types import SimpleNamespace

from fairseq_syntax.cli.benchmark import Row, markdown


def test_table_ratios_are_to_the_backbone():
    rows = [Row("attentional_rnn", 1000.0, 500.0, 20.0, 400.0), Row("tree2seq", 600.0, 550.0, 10.0, 300.0),
            Row("broken", error="fairseq-train failed, see x.log")]
    args = SimpleNamespace(updates=4, max_tokens=100, embed_dim=8, encoder_hidden=8, decoder_hidden=16)
    table = markdown(rows, {"plain": 2.0, "syntax": 5.0}, args)
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in table.splitlines() if line.startswith("| ") and "---" not in line}
    assert cells["attentional_rnn"] == ["1000", "1.00", "500", "1.00", "20.0", "1.00", "400", "1.00"]
    assert cells["tree2seq"] == ["600", "0.60", "550", "1.10", "10.0", "0.50", "300", "0.75"]
    assert cells["broken"][0] == "fairseq-train failed, see x.log"
    assert cells["syntax (heads, distances, trees, alignments)"] == ["5.00", "2.50"]
