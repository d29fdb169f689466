"""Fixtures of the shim's unit tests."""

from __future__ import annotations

import pytest

from eagle3scope_shim.state import STATE


@pytest.fixture
def clean_state(monkeypatch):
    monkeypatch.setattr(STATE, "disabled", set())
    monkeypatch.setattr(STATE, "seam_status", {})
    monkeypatch.setattr(STATE, "pending", [])
    monkeypatch.setattr(STATE, "publisher", None)
    monkeypatch.setattr(STATE, "fault", None)
    return STATE
