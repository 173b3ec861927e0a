"""Parameter initialisation of the backbone and of every mechanism built on it."""
import torch.nn as nn


def init_uniform_(model: nn.Module, bound: float = 0.1) -> nn.Module:
    """Every parameter from U(-bound, bound), embedding padding rows zeroed.

    fairseq's ``lstm`` initialisation (Sutskever et al. 2014; Luong et al. 2015 §4.1) over the whole
    model, so mechanisms start on the backbone's scale; the Tree-LSTM restores its forget-gate biases.
    """
    for parameter in model.parameters():
        nn.init.uniform_(parameter, -bound, bound)
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
        if hasattr(module, "init_biases_"):
            module.init_biases_()
    return model
