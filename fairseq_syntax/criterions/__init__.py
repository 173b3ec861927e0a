"""Criterions of the plugin."""
from . import supervised_attention  # noqa: F401
from . import blackout  # noqa: F401
