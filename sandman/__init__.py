"""Sandman's public surface: the ``sandman`` CLI (and, with issue 6, the trainer SDK)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
