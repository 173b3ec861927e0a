"""Make ``--help`` list the options of the chosen task, architecture and criterion.

fairseq adds task-, model- and criterion-specific options only after a first parse of
the command line, and ``--help`` exits during that first parse, so
``fairseq-train --task syntax_translation --help`` would never show ``--load-heads``
and friends. fairseq has no hook for this, so when the command line asks for help
(:func:`help_requested`), importing the plugin wraps ``fairseq.options.parse_args_and_arch``
(:func:`install`) to add those options before it parses; any other command runs fairseq's
own parser untouched. ``docs/design.md`` §8 says why.
"""
import argparse
import sys

from fairseq import options

_original_parse_args_and_arch = options.parse_args_and_arch


def _add_chosen_options(parser: argparse.ArgumentParser, args) -> None:
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    chosen = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in ("--task", "--arch", "--criterion"):
        chosen.add_argument(name)
    known, _ = chosen.parse_known_args(args)
    if known.task in TASK_REGISTRY:
        TASK_REGISTRY[known.task].add_args(parser)
    if known.arch in ARCH_MODEL_REGISTRY:
        group = parser.add_argument_group("Model-specific configuration")
        ARCH_MODEL_REGISTRY[known.arch].add_args(group)
    if known.criterion in CRITERION_REGISTRY:
        criterion = CRITERION_REGISTRY[known.criterion]
        if hasattr(criterion, "add_args"):
            criterion.add_args(parser)


def help_requested(argv) -> bool:
    """Whether the command line ``argv`` asks for help."""
    return "-h" in argv or "--help" in argv


def parse_args_and_arch(parser, input_args=None, *args, **kwargs):
    argv = sys.argv[1:] if input_args is None else input_args
    if help_requested(argv):
        try:
            _add_chosen_options(parser, argv)
        except argparse.ArgumentError:
            pass  # an option already there: fairseq's own help still prints
    return _original_parse_args_and_arch(parser, input_args, *args, **kwargs)


def install() -> None:
    """Put :func:`parse_args_and_arch` in place of fairseq's."""
    options.parse_args_and_arch = parse_args_and_arch


if help_requested(sys.argv[1:]):
    install()
