"""The CPU a measurement ran on: its model name, its family and model numbers, and the
kernels PyTorch dispatches to on it. A model name such as "AMD EPYC" covers generations
whose kernels round differently: the quickstart printed other digits on an EPYC of family
25 model 1 with AVX2 kernels than on 2026-11-28's EPYC (README, "Quickstart")."""
import platform
from typing import Dict, List, Optional


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


CPU_KEYS = ("cpu", "cpu_family_model", "torch_cpu_capability", "device")


def cpu_identity(host: dict) -> Dict[str, Optional[str]]:
    """What tells one machine's rounding from another's in a record's ``host``: the CPU's
    model name, family/model and PyTorch's kernels, and the device."""
    return {k: host.get(k) for k in CPU_KEYS}


def run_cpus(host: dict) -> List[Dict[str, Optional[str]]]:
    """The machines a run's numbers came from: those its training ran on
    (``training_cpus``, recorded since 2026-12-03: a run resumed on another machine has
    two) and the one that decoded it (the record's own ``host``)."""
    out: List[Dict[str, Optional[str]]] = []
    for cpu in [*(host.get("training_cpus") or []), cpu_identity(host)]:
        cpu = cpu_identity(cpu)
        if cpu not in out:
            out.append(cpu)
    return out


def same_cpu(a: dict, b: dict) -> Optional[bool]:
    """Whether two runs (their records' ``host``) ran on one kind of machine: False where
    some CPU name, device, family/model or kernels differ (or a run moved between
    machines), None where nothing differs but a record (older than 2026-12-01) names no
    family/model, else True. Runs trained on GPUs compare their GPUs only. The same seed
    on another CPU is another run (docs/same-cpu)."""
    cpus = run_cpus(a) + run_cpus(b)
    if all(c["device"] not in (None, "cpu") for c in cpus):  # the GPU did the arithmetic
        return len({c["device"] for c in cpus}) == 1
    known = [{k: v for k, v in c.items() if v is not None} for c in cpus]
    for key in CPU_KEYS:
        if len({c[key] for c in known if key in c}) > 1:
            return False
    if len(run_cpus(a)) > 1 or len(run_cpus(b)) > 1:  # moved, on machines not told apart
        return None
    return True if all(c.get("cpu") and c.get("cpu_family_model") for c in cpus) else None
