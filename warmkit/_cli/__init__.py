"""_cli: see docs/architecture.md."""
