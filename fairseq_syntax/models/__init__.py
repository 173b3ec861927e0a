"""Models: the attentional RNN backbone and each paper's model built on it."""
from . import attentional_rnn  # noqa: F401
