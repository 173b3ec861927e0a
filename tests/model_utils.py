"""Helpers to build plugin models in-process and compare decoding modes."""
import argparse

import torch
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY, ARCH_CONFIG_REGISTRY

import fairseq_syntax  # noqa: F401  (registers the plugin)


def tiny_dictionary(size: int = 20) -> Dictionary:
    d = Dictionary()
    for i in range(size):
        d.add_symbol(f"w{i}")
    return d


class FakeTask:
    def __init__(self, src_dict, tgt_dict):
        self.source_dictionary = src_dict
        self.target_dictionary = tgt_dict


def build_model(arch: str, src_dict=None, tgt_dict=None, **overrides):
    """Build ``arch`` with its registered defaults plus ``overrides`` (in eval mode)."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf  # noqa: F401

    src_dict = src_dict or tiny_dictionary()
    tgt_dict = tgt_dict or tiny_dictionary(24)
    model_cls = ARCH_MODEL_REGISTRY[arch]
    args = argparse.Namespace(**overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    if getattr(model_cls, "__dataclass", None) is None:  # argparse models (Transformers)
        model = model_cls.build_model(args, FakeTask(src_dict, tgt_dict))
        return model.eval()
    cfg = model_cls.__dataclass()
    for key, value in vars(args).items():
        if hasattr(cfg, key):
            setattr(cfg, key, value)
    model = model_cls.build_model(cfg, FakeTask(src_dict, tgt_dict))
    return model.eval()


def random_batch(model, bsz=3, src_len=7, tgt_len=6, seed=0):
    """Right-padded random source/target with varying lengths."""
    g = torch.Generator().manual_seed(seed)
    src_dict, tgt_dict = model.encoder.dictionary, model.decoder.dictionary
    lengths = torch.tensor([src_len - (i % 3) for i in range(bsz)])
    src = torch.full((bsz, src_len), src_dict.pad())
    for i, n in enumerate(lengths.tolist()):
        src[i, : n - 1] = torch.randint(src_dict.nspecial, len(src_dict), (n - 1,), generator=g)
        src[i, n - 1] = src_dict.eos()
    prev = torch.randint(tgt_dict.nspecial, len(tgt_dict), (bsz, tgt_len), generator=g)
    prev[:, 0] = tgt_dict.eos()
    return src, lengths, prev


def incremental_log_probs(model, encoder_out, prev, reorder=None, reorder_at=None):
    """Decode ``prev`` one token at a time with an incremental state; optionally reorder the
    beam (``reorder``, a permutation) before step ``reorder_at``."""
    state = {}
    steps = []
    for t in range(prev.size(1)):
        if reorder is not None and t == reorder_at:
            model.decoder.reorder_incremental_state_scripting(state, reorder)
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, reorder)
            prev = prev.index_select(0, reorder)
            steps = [s.index_select(0, reorder) for s in steps]
        logits, extra = model.decoder(prev[:, : t + 1], encoder_out=encoder_out, incremental_state=state)
        steps.append(torch.log_softmax(logits[:, -1], dim=-1))
    return torch.stack(steps, dim=1)
