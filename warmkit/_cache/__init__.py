"""_cache: see docs/architecture.md."""
