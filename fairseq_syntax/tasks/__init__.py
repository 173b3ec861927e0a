"""Tasks of the plugin (imported by ``fairseq_syntax/__init__.py`` for registration)."""
from . import syntax_translation  # noqa: F401
