"""The CPU a measurement ran on: its model name, its family and model numbers, and the
kernels PyTorch dispatches to on it. A model name such as "AMD EPYC" covers generations
whose kernels round differently: the quickstart printed other digits on an EPYC of family
25 model 1 with AVX2 kernels than on 2026-11-28's EPYC (README, "Quickstart")."""
import platform
from typing import Dict, Optional


def _cpuinfo(field: str) -> Optional[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep and name.strip() == field:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_model() -> Optional[str]:
    """The model name of /proc/cpuinfo (else the platform's processor; None: unknown)."""
    return _cpuinfo("model name") or platform.processor() or None


def cpu_kernels() -> Dict[str, Optional[str]]:
    """``cpu_family_model`` ("25/1": /proc/cpuinfo's ``cpu family``/``model``) and
    ``torch_cpu_capability`` (the instruction set PyTorch's kernels use here, e.g. AVX2,
    AVX512: ``torch.backends.cpu.get_cpu_capability()``)."""
    import torch

    family, model = _cpuinfo("cpu family"), _cpuinfo("model")
    return {"cpu_family_model": f"{family}/{model}" if family and model else None,
            "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
