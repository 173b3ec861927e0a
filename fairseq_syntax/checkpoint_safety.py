"""Let torch's safe (``weights_only``) unpickler read fairseq checkpoints.

torch >= 2.6 refuses the few non-tensor types a fairseq checkpoint holds; rather than turning
safety off, exactly those types are allowed (anything else is still refused).
"""
import argparse

import torch

FAIRSEQ_CHECKPOINT_GLOBALS = [argparse.Namespace]

torch.serialization.add_safe_globals(FAIRSEQ_CHECKPOINT_GLOBALS)
