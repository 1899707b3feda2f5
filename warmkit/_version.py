"""The version of warmkit (one place; ``pyproject.toml`` reads it from here)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
