"""Parameter initialisation of the backbone and of every mechanism built on it."""
import torch.nn as nn


def init_uniform_(model: nn.Module, bound: float = 0.1) -> nn.Module:
    """Draw every parameter from U(-bound, bound) and zero the padding rows of embeddings.

    This is fairseq's ``lstm`` initialisation (``fairseq/models/lstm.py``: ``Embedding``,
    ``LSTM``, ``LSTMCell``, ``Linear``), after Sutskever et al. (2014) and Luong et al.
    (2015, section 4.1), applied to the whole model so that a mechanism's own parameters
    start on the same scale as the backbone's. A module whose paper prescribes its biases
    (the Tree-LSTM's forget gates) restores them in its ``init_biases_()``.
    """
    for parameter in model.parameters():
        nn.init.uniform_(parameter, -bound, bound)
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
        if hasattr(module, "init_biases_"):
            module.init_biases_()
    return model
