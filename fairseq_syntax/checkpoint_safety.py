"""Let torch's safe (``weights_only``) unpickler read fairseq checkpoints.

torch >= 2.6 loads with ``weights_only=True`` by default and refuses the few
non-tensor types a fairseq checkpoint holds, so ``fairseq-generate`` fails on a
checkpoint ``fairseq-train`` just wrote. Instead of turning safety off (an environment
variable, or ``weights_only=False``), we allow exactly those types. Anything else, such
as a pickled callable, is still refused by torch's unpickler, and never runs.
"""
import argparse

import torch

FAIRSEQ_CHECKPOINT_GLOBALS = [argparse.Namespace]

torch.serialization.add_safe_globals(FAIRSEQ_CHECKPOINT_GLOBALS)
