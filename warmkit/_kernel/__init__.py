"""_kernel: see docs/architecture.md."""
