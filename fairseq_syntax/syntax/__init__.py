"""Torch-free syntax utilities: dependency trees, binarisation, projection, file formats, scores."""
from .errors import SyntaxInputError  # noqa: F401
