"""The layers of a Transformer stack that take a mechanism (``--pascal-layers``,
``--sdatt-layers``, ``--sa-layers``), built as fairseq builds its own.

fairseq's encoder and decoder build their layers bottom up through ``build_encoder_layer(cfg)``
and ``build_decoder_layer(cfg, no_encoder_attn)``, which are not told the layer's index:
:class:`ChosenLayers` counts the calls, and :func:`wrap_layer` wraps a mechanism's layer as
fairseq wraps its own (activation checkpointing, then FSDP).
"""
from typing import Iterable, List, Optional

from fairseq.distributed import fsdp_wrap
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.utils import safe_getattr


def parse_layers(cfg, name: str, stack: str) -> Optional[List[int]]:
    """The layer numbers of the comma-separated option ``cfg.name`` (``"0,2"``), or None when
    it is unset."""
    value = safe_getattr(cfg, name, None)
    if value is None:
        return None
    try:
        return [int(x) for x in str(value).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{name.replace('_', '-')} {value!r}: give comma-separated {stack} "
                         "layer numbers, e.g. 0,1,2") from None


class ChosenLayers:
    """The ``chosen`` layers (0 = the bottom one) of a ``stack`` of ``count`` layers, checked
    against the stack (``required``: at least one), and a counter of the layers built so far."""

    def __init__(self, option: str, chosen: Iterable[int], count: int, stack: str,
                 required: bool = False):
        chosen = list(chosen)
        bad = [i for i in chosen if not 0 <= i < count]
        if bad or (required and not chosen):
            hint = "; give one or more of them" if required else ""
            raise ValueError(f"{option} {bad or chosen}: the {stack} has {count} layers "
                             f"(0 .. {count - 1}){hint}")
        self.indices = frozenset(chosen)
        self.built = 0

    def next_is_chosen(self) -> bool:
        """Whether the layer fairseq builds now (the next one, bottom up) is chosen."""
        index, self.built = self.built, self.built + 1
        return index in self.indices


def wrap_layer(layer, cfg):
    """``layer`` wrapped as fairseq's ``build_encoder_layer`` and ``build_decoder_layer``
    wrap theirs."""
    if cfg.checkpoint_activations:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    return fsdp_wrap(layer, min_num_params=cfg.min_params_to_wrap
                     if not cfg.checkpoint_activations else 0)
