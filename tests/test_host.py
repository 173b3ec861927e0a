"""The CPU facts a run record keeps (fairseq_syntax/evaluation/host.py), against
/proc/cpuinfo read here and PyTorch's own dispatch."""
import re

import pytest
import torch

from fairseq_syntax.evaluation import host
from fairseq_syntax.experiment import tables


def test_cpu_kernels_name_the_family_model_and_torchs_kernels():
    facts = host.cpu_kernels()
    assert facts["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    family = re.search(r"^cpu family\s*:\s*(\S+)", text, re.M)
    model = re.search(r"^model\s*:\s*(\S+)", text, re.M)
    name = re.search(r"^model name\s*:\s*(.+?)\s*$", text, re.M)
    assert facts["cpu_family_model"] == (f"{family.group(1)}/{model.group(1)}"
                                         if family and model else None)
    if name:
        assert host.cpu_model() == name.group(1)


def test_host_label_shows_kernels_where_a_record_has_them():
    assert tables.host_label({"cpu": "AMD EPYC", "cpu_family_model": "25/1",
                              "torch_cpu_capability": "AVX2", "device": "cpu"}
                             ) == "AMD EPYC [25/1, AVX2] (cpu)"
    assert tables.host_label({"cpu": "Intel(R) Xeon(R) Processor", "device": "cpu"}
                             ) == "Intel(R) Xeon(R) Processor (cpu)"
    assert tables.host_label({}) == "? (?)"
