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


AMD_25_17 = {"cpu": "AMD EPYC", "cpu_family_model": "25/17", "torch_cpu_capability": "AVX512",
             "device": "cpu"}
AMD_26_2 = dict(AMD_25_17, cpu_family_model="26/2")
INTEL = {"cpu": "Intel(R) Xeon(R) Processor", "device": "cpu"}  # a record before 2026-12-01
AMD_OLD = {"cpu": "AMD EPYC", "device": "cpu"}


@pytest.mark.parametrize("a, b, same", [
    (AMD_25_17, dict(AMD_25_17, platform="another kernel"), True),  # only CPU_KEYS count
    (AMD_25_17, AMD_26_2, False),  # one name, another family/model
    (AMD_25_17, dict(AMD_25_17, torch_cpu_capability="AVX2"), False),
    (INTEL, AMD_OLD, False),  # the names differ: known without family/model
    (AMD_OLD, AMD_25_17, None),  # nothing differs, but one record does not say
    (AMD_OLD, AMD_OLD, None),
    (dict(AMD_25_17, device="NVIDIA H200"), AMD_25_17, False),
    (dict(INTEL, device="NVIDIA H200"), dict(AMD_OLD, device="NVIDIA H200"), True),  # GPUs
    (dict(INTEL, device="NVIDIA H200"), dict(INTEL, device="NVIDIA A100"), False),
    # a run trained on 26/2, resumed and decoded on 25/17, against a run all on 25/17
    (dict(AMD_25_17, training_cpus=[AMD_26_2, AMD_25_17]), AMD_25_17, False),
    (dict(AMD_25_17, training_cpus=[AMD_25_17]), AMD_25_17, True),
    # resumed from a stamp that did not record its machine: not known
    (dict(AMD_25_17, training_cpus=[dict.fromkeys(host.CPU_KEYS), AMD_25_17]), AMD_25_17, None),
])
def test_same_cpu_tells_kinds_of_machine_apart(a, b, same):
    assert host.same_cpu(a, b) is same
    assert host.same_cpu(b, a) is same


def test_run_cpus_lists_each_machine_once_training_first():
    record_host = dict(AMD_25_17, training_cpus=[AMD_26_2, AMD_25_17], platform="x")
    assert host.run_cpus(record_host) == [AMD_26_2, AMD_25_17]
    assert host.run_cpus(INTEL) == [dict(INTEL, cpu_family_model=None,
                                         torch_cpu_capability=None)]
