"""manifest: see docs/architecture.md."""
