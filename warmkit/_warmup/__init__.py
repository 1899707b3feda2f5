"""_warmup: see docs/architecture.md."""
