"""``fairseq_syntax.help_options``: ``--help`` lists the chosen task's and model's options,
and a command line without ``--help`` runs fairseq's own parser untouched.
``tests/test_cli_pipeline.py::test_train_help_lists_syntax_options`` runs the real
``fairseq-train --help``."""
import os
import subprocess
import sys

import pytest
from fairseq import options

from fairseq_syntax import help_options

# Whether importing the plugin with the command line ``sys.argv[1:]`` replaced fairseq's parser.
SCRIPT = """
import sys
sys.argv[1:] = {argv!r}
from fairseq import options
original = options.parse_args_and_arch
import fairseq_syntax
print(options.parse_args_and_arch is not original)
"""

HELP = ["--task", "syntax_translation", "--arch", "attentional_rnn", "--help"]


def _replaced_after_import(argv) -> bool:
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(argv=argv)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.strip() == "True"


def test_the_parser_is_replaced_only_when_the_command_line_asks_for_help():
    assert not _replaced_after_import(["data-bin", "--task", "syntax_translation"])
    assert _replaced_after_import(HELP)


@pytest.mark.parametrize("parse, listed", [(help_options.parse_args_and_arch, True),
                                           (help_options._original_parse_args_and_arch, False)])
def test_help_lists_the_task_and_model_options_only_through_the_wrapper(parse, listed, capsys):
    with pytest.raises(SystemExit):
        parse(options.get_training_parser(), HELP)
    out = capsys.readouterr().out
    assert ("--load-heads" in out and "--encoder-hidden-size" in out) == listed
