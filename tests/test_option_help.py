"""Every command-line option the project ships says what it does in ``--help``."""
import ast
import pathlib

from conftest import REPO

SOURCES = ("fairseq_syntax", "preprocess", "examples")


def _parsers_without_help(tree: ast.AST):
    """Names bound in ``tree`` to ``ArgumentParser(..., add_help=False)``: internal
    parsers (parse_known_args helpers) that never print a help text."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and any(k.arg == "add_help" and isinstance(k.value, ast.Constant)
                        and k.value.value is False for k in node.value.keywords)):
            yield from (target.id for target in node.targets if isinstance(target, ast.Name))


def options_without_help(path: pathlib.Path):
    """``file:line option`` of each ``add_argument`` call in ``path`` without ``help=``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    internal = set(_parsers_without_help(tree))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
                and not (isinstance(node.func.value, ast.Name) and node.func.value.id in internal)
                and "help" not in {k.arg for k in node.keywords}):
            name = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else "?"
            yield f"{path}:{node.lineno} {name}"


def test_the_scan_finds_an_option_without_help(tmp_path):
    script = tmp_path / "probe.py"
    source = ("import argparse\n"
              "def main():\n"
              "    p = argparse.ArgumentParser()\n"
              "    p.add_argument('--said', help='x')\n"
              "    p.add_argument('--silent')\n"
              "    q = argparse.ArgumentParser(add_help=False)\n"
              "    q.add_argument('--internal')\n")
    script.write_text(source)
    assert list(options_without_help(script)) == [f"{script}:5 --silent"]


def test_every_option_has_help():
    files = sorted(path for root in SOURCES for path in (pathlib.Path(REPO) / root).rglob("*.py"))
    assert len(files) > 50
    assert [where for path in files for where in options_without_help(path)] == []
