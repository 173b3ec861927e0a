"""fairseq-syntax: syntax- and alignment-aware attention for NMT, as a fairseq plugin.

``--user-dir`` imports this package; importing it registers the task, the models and
the criterions, and lets torch's safe checkpoint loader read fairseq checkpoints.
"""
from . import checkpoint_safety  # noqa: F401  (must come before any checkpoint is read)
from . import help_options  # noqa: F401  (--help lists task and model options)
from . import criterions, models, tasks  # noqa: F401
