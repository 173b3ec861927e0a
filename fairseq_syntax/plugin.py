"""The plugin as fairseq sees it: importing this module registers the task, the models and
the criterions, lets torch's safe checkpoint loader read fairseq checkpoints, makes a
``--help`` command line list the chosen task's, model's and criterion's options, and stops
fairseq's batch-prefetch threads at exit (``docs/design.md`` §8).
"""
from . import checkpoint_safety  # noqa: F401  (must come before any checkpoint is read)
from . import help_options  # noqa: F401  (with --help: lists task and model options)
from . import prefetch_threads  # noqa: F401  (fairseq-train exits cleanly after --max-update)
from . import criterions, models, tasks  # noqa: F401
