"""stores: see docs/architecture.md."""
