"""The optimisation strategies of supervised attention (Mi et al. 2016, §3.3): which part of
the model trains.

``joint`` trains every parameter; ``alignment`` freezes the output part (the paper's T, the
network ``g(s_t, y_{t-1})``), ``translation`` the alignment part (A, everything before ``s_t``).
The parts are split by parameter name (``--output-layer-prefixes``); ``docs/design.md`` §7
gives the split and why freezing keeps a parameter bit-identical.
"""
import logging
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from torch import Tensor

logger = logging.getLogger(__name__)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The fairseq model inside distributed wrappers (their parameter names gain ``module.``)."""
    while isinstance(getattr(model, "module", None), nn.Module):
        model = model.module
    return model


def parameter_parts(
    model: nn.Module, output_prefixes: Sequence[str]
) -> Dict[str, List[Tuple[str, nn.Parameter]]]:
    """Split parameters into ``"alignment"`` and ``"output"`` parts by name.

    A parameter is in the output part when any of its names (tied parameters have
    several) starts with one of ``output_prefixes``, and in the alignment part when any
    name does not; a tied parameter can be in both.
    """
    model = unwrap_model(model)
    names: Dict[int, List[str]] = {}
    params: Dict[int, nn.Parameter] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
        params[id(p)] = p
    prefixes = tuple(p.strip() for p in output_prefixes if p.strip())

    def is_output(name: str) -> bool:
        return any(name == pre or name.startswith(pre.rstrip(".") + ".") for pre in prefixes)

    parts: Dict[str, List[Tuple[str, nn.Parameter]]] = {"alignment": [], "output": []}
    for key, p in params.items():
        flags = [is_output(n) for n in names[key]]
        if any(flags):
            parts["output"].append((names[key][flags.index(True)], p))
        if not all(flags):
            parts["alignment"].append((names[key][flags.index(False)], p))
    return parts


class AttentionStrategy:
    """``--attention-strategy`` ``name`` over the output part named by ``output_prefixes``:
    :meth:`apply` freezes the other part at the first training forward (``requires_grad``
    off, ``grad = None``: fairseq's optimizers then skip it) and, with ``verify``, checks at
    every later one that no frozen parameter changed."""

    def __init__(self, name: str, output_prefixes: Sequence[str], verify: bool = True):
        self.name = name
        self.output_prefixes = output_prefixes
        self.verify = verify
        self._frozen: Optional[List[Tuple[str, nn.Parameter]]] = None
        self._frozen_copy: Optional[List[Tensor]] = None
        self._frozen_model_id: Optional[int] = None

    def frozen_parameters(self, model: nn.Module) -> List[Tuple[str, nn.Parameter]]:
        """``(name, parameter)`` pairs that the strategy keeps fixed."""
        if self.name == "joint":
            return []
        parts = parameter_parts(model, self.output_prefixes)
        frozen_part = "output" if self.name == "alignment" else "alignment"
        if not parts["output"]:
            top = sorted({n.split(".")[0] + "." + n.split(".")[1] if "." in n else n
                          for n, _ in unwrap_model(model).named_parameters()})
            raise ValueError(
                f"--attention-strategy {self.name}: no parameter name starts "
                f"with --output-layer-prefixes {','.join(self.output_prefixes)}; the "
                f"model's modules are {', '.join(top)}"
            )
        frozen = parts[frozen_part]
        frozen_ids = {id(p) for _, p in frozen}
        if all(id(p) in frozen_ids for _, p in unwrap_model(model).named_parameters()):
            raise ValueError(
                f"--attention-strategy {self.name} would freeze every parameter "
                "(check --output-layer-prefixes and tied embeddings)"
            )
        return frozen

    def apply(self, model: nn.Module) -> None:
        """Freeze the frozen part of ``model`` (in training), or check it is unchanged."""
        if self.name == "joint" or not model.training:
            return
        if self._frozen is None or self._frozen_model_id != id(unwrap_model(model)):
            self._frozen = self.frozen_parameters(model)
            self._frozen_model_id = id(unwrap_model(model))
            for _, p in self._frozen:
                p.requires_grad_(False)
                p.grad = None
            self._frozen_copy = (
                [p.detach().clone() for _, p in self._frozen] if self.verify else None
            )
            n_frozen = sum(p.numel() for _, p in self._frozen)
            n_all = sum(p.numel() for p in unwrap_model(model).parameters())
            logger.info(
                "attention strategy %s: %d of %d parameters frozen (%s)",
                self.name, n_frozen, n_all,
                ", ".join(sorted({n.rsplit(".", 1)[0] for n, _ in self._frozen})),
            )
            return
        for k, (name, p) in enumerate(self._frozen):
            if p.requires_grad or p.grad is not None:
                p.requires_grad_(False)
                p.grad = None
            if self._frozen_copy is not None and not torch.equal(p.detach(), self._frozen_copy[k]):
                raise RuntimeError(
                    f"--attention-strategy {self.name}: the frozen parameter "
                    f"{name} changed; the optimizer stepped a parameter without gradient (with "
                    "--fp16 use --memory-efficient-fp16 or --fp16-no-flatten-grads; with "
                    "distributed training use --ddp-backend legacy_ddp)"
                )
