"""The shim's version, sent in every ``hello`` (apart from the package so nothing imports it back)."""

__version__ = "0.1.0"
