"""The architectures an evaluation compares: the plugin's registered ones (the RNN and
Transformer families), their backbones and fairseq's own peers, and the ``--task``/``--arch``
options of a run of each."""
from typing import List

BACKBONE = "attentional_rnn"
TRANSFORMER_BACKBONE = "syntax_transformer"
# fairseq's own architectures that are the backbones' peers (``--task translation``)
FAIRSEQ_LSTM, FAIRSEQ_TRANSFORMER = "lstm", "transformer"
FAIRSEQ_PEERS = (FAIRSEQ_LSTM, FAIRSEQ_TRANSFORMER)


def task_arch_args(arch: str, embed_dim, task: str = "syntax_translation") -> list:
    """``--task`` and ``--arch`` of a run of ``arch``; fairseq's own peers under ``--task
    translation``, the lstm as the backbone's peer: bidirectional encoder, output projection
    to the embedding size (the backbone's defaults)."""
    if arch == FAIRSEQ_LSTM:
        return ["--task", "translation", "--arch", FAIRSEQ_LSTM, "--encoder-bidirectional",
                "--decoder-out-embed-dim", str(embed_dim)]
    return ["--task", "translation" if arch in FAIRSEQ_PEERS else task, "--arch", arch]


def plugin_architectures() -> List[str]:
    """Registered architectures of the plugin, one per name (a model's own name is
    skipped when it also has named architectures)."""
    import fairseq_syntax.plugin  # noqa: F401
    from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    archs = [a for a, cls in ARCH_MODEL_REGISTRY.items() if cls.__module__.startswith("fairseq_syntax")]
    named = {ARCH_MODEL_REGISTRY[a] for a in archs if a not in MODEL_REGISTRY}
    archs = [a for a in archs if a not in MODEL_REGISTRY or MODEL_REGISTRY[a] not in named]
    return sorted(archs, key=lambda a: (a != BACKBONE, a))


def rnn_architectures() -> List[str]:
    """The architectures built on the RNN backbone (they take its size options), backbone
    first; the Transformer family has its own sizes."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_syntax.models.attentional_rnn import AttentionalRNNModel

    return [a for a in plugin_architectures()
            if issubclass(ARCH_MODEL_REGISTRY[a], AttentionalRNNModel)]


def transformer_architectures() -> List[str]:
    """The architectures of the Transformer family (models built on ``syntax_transformer``),
    one per mechanism, backbone first: an architecture whose name is another one's of the
    same model plus a suffix (``_tiny``, ``_iwslt_de_en``) is that one's size preset and is
    left out (a caller gives the sizes)."""
    import fairseq_syntax.plugin  # noqa: F401
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_syntax.models.syntax_transformer import SyntaxTransformerModel

    archs = [a for a, cls in ARCH_MODEL_REGISTRY.items()
             if cls.__module__.startswith("fairseq_syntax") and issubclass(cls, SyntaxTransformerModel)]
    presets = {a for a in archs for b in archs
               if a.startswith(b + "_") and ARCH_MODEL_REGISTRY[a] is ARCH_MODEL_REGISTRY[b]}
    return sorted((a for a in archs if a not in presets),
                  key=lambda a: (a != "syntax_transformer", a))
