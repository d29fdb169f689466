"""Fixtures of the shim's unit tests: the fresh ``shim`` fixture is in tests/conftest.py."""
