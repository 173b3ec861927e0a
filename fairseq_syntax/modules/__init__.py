"""Attention variants and encoder extensions, each a small module."""
