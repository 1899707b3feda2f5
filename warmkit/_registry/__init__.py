"""_registry: see docs/architecture.md."""
