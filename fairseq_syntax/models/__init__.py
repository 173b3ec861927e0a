"""Models: the attentional RNN and Transformer backbones and each paper's model built on them."""
from . import attentional_rnn  # noqa: F401
from . import syntax_directed_rnn  # noqa: F401
from . import look_ahead_rnn  # noqa: F401
from . import tree_to_sequence_rnn  # noqa: F401
from . import structured_attention_rnn  # noqa: F401
from . import syntax_transformer  # noqa: F401
from . import pascal_transformer  # noqa: F401
from . import sdatt_transformer  # noqa: F401
from . import sa_transformer  # noqa: F401
from . import tree2seq_transformer  # noqa: F401
