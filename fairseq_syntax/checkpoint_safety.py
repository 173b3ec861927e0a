"""Let torch's safe (``weights_only``) unpickler read fairseq checkpoints, and keep it on.

torch >= 2.6 refuses the few non-tensor types a fairseq checkpoint holds; rather than turning
safety off, exactly those types are allowed (anything else is still refused).

``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (which some other tools ask users to set) would switch
the safe unpickler off for every ``torch.load`` that does not pass ``weights_only`` itself, as
fairseq's checkpoint loader does not: a checkpoint could then run code. Once the plugin is
imported, such a call passes ``weights_only=True``, so the variable has no effect on it (a
warning says so once); a pickled callable is refused by torch's ``UnpicklingError``, which
names the offending global. A caller that passes ``weights_only=False`` itself still gets it.
"""
import argparse
import functools
import logging
import os

import torch

logger = logging.getLogger(__name__)

FAIRSEQ_CHECKPOINT_GLOBALS = [argparse.Namespace]
OPT_OUT = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"

torch.serialization.add_safe_globals(FAIRSEQ_CHECKPOINT_GLOBALS)

_torch_load = getattr(torch.load, "unsafe_original", torch.load)
_warned = False


def _opted_out() -> bool:
    """Whether the environment asks torch to drop ``weights_only`` (torch's own test)."""
    return os.getenv(OPT_OUT, "0").lower() in ("1", "y", "yes", "true")


@functools.wraps(_torch_load)
def safe_load(f, *args, **kwargs):
    """``torch.load``, with ``weights_only=True`` where the caller gave neither it nor a
    ``pickle_module``, whatever :data:`OPT_OUT` says."""
    global _warned
    if (kwargs.get("weights_only") is None and kwargs.get("pickle_module") is None
            and len(args) < 2):
        if _opted_out() and not _warned:
            logger.warning(
                "%s is set, but fairseq-syntax still loads checkpoints with torch's safe "
                "unpickler (weights_only=True): a checkpoint holding code is refused",
                OPT_OUT)
            _warned = True
        kwargs["weights_only"] = True
    return _torch_load(f, *args, **kwargs)


safe_load.unsafe_original = _torch_load
torch.load = safe_load
