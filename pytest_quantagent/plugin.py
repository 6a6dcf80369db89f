"""pytest entry point (wiring only). Filled in by the pytest-surface work."""
