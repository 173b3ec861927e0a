"""Criterions of the plugin."""
