"""Package layout (issue 16): the network modules never import the data layer, and the
plugin never imports the preprocessing package (preprocessing imports the plugin)."""
import ast
import pathlib

import fairseq_syntax

PACKAGE = pathlib.Path(fairseq_syntax.__file__).parent


def _imported_modules(path: pathlib.Path, package: str):
    """Absolute names of the modules ``path`` imports (relative imports resolved)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1] if node.level else []
            yield ".".join(base + ([node.module] if node.module else []))


def test_no_module_under_modules_imports_data():
    offenders = {
        f"{path.name}: {name}"
        for path in sorted((PACKAGE / "modules").glob("*.py"))
        for name in _imported_modules(path, "fairseq_syntax.modules")
        if name == "fairseq_syntax.data" or name.startswith("fairseq_syntax.data.")
    }
    assert offenders == set()


def test_relative_imports_are_resolved():
    source = PACKAGE / "data" / "raw_input.py"
    assert "fairseq_syntax.data.side_files" in set(_imported_modules(source, "fairseq_syntax.data"))


def test_no_module_of_the_plugin_imports_preprocessing():
    offenders = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in _imported_modules(
            path, ".".join(("fairseq_syntax",) + path.relative_to(PACKAGE).parent.parts))
        if name.split(".")[0] == "fairseq_syntax_preprocess"
    }
    assert offenders == set()
