"""_plugin: see docs/architecture.md."""
