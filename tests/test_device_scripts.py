"""examples/device: the scripts of a lent GPU machine's call refuse what would waste the call
(no carried corpus, not a data-bin) before they install or download anything."""
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(script, *args, env=None):
    return subprocess.run(["bash", os.path.join(ROOT, "examples", "device", script), *args],
                          capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_call_without_the_carried_corpus_names_carry_sh(tmp_path):
    r = run("call.sh", "readiness", "kftt-nowhere", env={"OUT": str(tmp_path)})
    assert r.returncode == 2
    assert ".carry/kftt-nowhere.tar.xz must have travelled" in r.stderr
    assert "carry.sh --dest DIR" in r.stderr
    assert os.listdir(tmp_path) == []


def test_carry_refuses_a_folder_without_a_data_bin_before_downloading(tmp_path):
    (tmp_path / "data-bin").mkdir()
    r = run("carry.sh", "--dest", str(tmp_path))
    assert r.returncode == 2
    assert f"{tmp_path}/data-bin has no syntax_manifest.json" in r.stderr
    assert r.stdout == ""


def test_carry_help_names_its_options():
    r = run("carry.sh", "--help")
    assert r.returncode == 0
    assert "--ja" in r.stdout and "--dest DIR" in r.stdout
