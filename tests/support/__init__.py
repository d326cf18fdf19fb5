"""Test-only reference models (importable from tests: ``pythonpath = ["tests"]``)."""
