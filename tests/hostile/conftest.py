"""The hostile tests' one fixture: each module's tallies reported once its tests ran."""

from __future__ import annotations

import pytest
from support.hostile_support import Tally


@pytest.fixture(scope="module", autouse=True)
def emitted_tallies(request):
    """After a module's tests: print every module-level Tally and append it to the reliability report
    (EAGLE3SCOPE_RELIABILITY_OUT), so a run shows what the hostile inputs did."""
    yield
    for tally in (value for value in vars(request.module).values() if isinstance(value, Tally)):
        print(f"\n{tally.summary()}")
        tally.emit()
