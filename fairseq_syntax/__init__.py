"""fairseq-syntax: syntax- and alignment-aware attention for NMT, as a fairseq plugin.

Importing this package imports :mod:`.plugin`, which registers the task, the models and the
criterions with fairseq (what ``--user-dir`` needs), except in the plugin's own console
scripts (``fairseq-syntax-*``) before fairseq is imported: ``fairseq-syntax-user-dir``,
``fairseq-syntax-tokenize --help`` or a preprocess that stops at a bad line then start in
a fraction of a second instead of paying fairseq's import (about 7 s on 2 cores). The
plugin's code that builds models or reads checkpoints imports :mod:`.plugin` itself.
"""
import os
import sys

if "fairseq" in sys.modules or not os.path.basename(
        (getattr(sys, "argv", None) or [""])[0]).startswith("fairseq-syntax-"):
    from . import plugin  # noqa: F401
