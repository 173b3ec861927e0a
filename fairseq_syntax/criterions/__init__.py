"""Criterions of the plugin."""
from . import blackout  # noqa: F401
