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


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph():
    """The plugin's modules and, for each, the plugin's modules it imports (anywhere in the
    file, function bodies too; ``from a import b`` counts as importing ``a.b`` when that is
    a module, else ``a``)."""
    import networkx as nx

    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = ".".join((parts[: len(parts) - node.level + 1] if node.level else [])
                                + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # fairseq_syntax.a.b.func -> module
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph.add_edge(name, target)  # (a package's own __init__ runs anyway)
    return graph


def test_the_import_graph_resolves_relative_and_function_level_imports():
    graph = _import_graph()
    assert graph.has_edge("fairseq_syntax.data.raw_input", "fairseq_syntax.data.side_files")
    assert graph.has_edge("fairseq_syntax.cli.experiment", "fairseq_syntax.experiment.runs")


def test_no_two_modules_import_each_other_directly_or_through_others():
    import networkx as nx

    cycles = list(nx.simple_cycles(_import_graph()))
    assert cycles == []


def test_nothing_outside_cli_imports_cli():
    graph = _import_graph()
    offenders = sorted(f"{a} -> {b}" for a, b in graph.edges
                       if b.startswith("fairseq_syntax.cli")
                       and not a.startswith("fairseq_syntax.cli"))
    assert offenders == []


def _imported_by(command):
    """The top-level modules a console script imports (``PYTHONPROFILEIMPORTTIME``)."""
    from conftest import run_cli

    proc = run_cli(command, env={"PYTHONPROFILEIMPORTTIME": "1"})
    return {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
            if line.startswith("import time:")}


def test_console_scripts_that_need_no_model_do_not_import_fairseq():
    """``fairseq-syntax-user-dir`` (in every ``--user-dir "$(...)"``) and ``--help`` of the
    tokenizer start without fairseq's import (seconds); fairseq-train's ``--user-dir``
    import of the same package registers the plugin (the next test)."""
    for command in (["fairseq-syntax-user-dir"], ["fairseq-syntax-tokenize", "--help"]):
        modules = _imported_by(command)
        assert "fairseq_syntax" in modules and "fairseq" not in modules, command


def test_the_plugin_registers_where_fairseq_comes_first_and_in_the_plugins_loaders():
    """Imported after fairseq (what ``--user-dir`` does), the package registers its
    architectures; in a console script that imported it first, the plugin's own config
    parser (``evaluation.checkpoints.training_config``) registers them before parsing."""
    import sys

    from conftest import run_cli

    after_fairseq = ("import fairseq, fairseq_syntax; from fairseq.models import "
                     "ARCH_MODEL_REGISTRY as R; print('sdatt_double_syntax' in R)")
    console_script = (
        "import sys; sys.argv = ['fairseq-syntax-x']; import fairseq_syntax, fairseq; "
        "from fairseq.models import ARCH_MODEL_REGISTRY as R; print('sdatt_double_syntax' in R); "
        "from fairseq_syntax.evaluation.checkpoints import training_config; "
        "from fairseq_syntax.user_dir import user_dir; "
        "cfg = training_config(['unused', '--user-dir', user_dir(), '--task', "
        "'syntax_translation', '--arch', 'sdatt_double_syntax']); print(cfg.model._name)")
    assert run_cli([sys.executable, "-c", after_fairseq]).stdout.split() == ["True"]
    assert run_cli([sys.executable, "-c", console_script]).stdout.split() == [
        "False", "sdatt_double_syntax"]
