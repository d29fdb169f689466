"""Every stored recording reads to the ``check --json`` the code gave before frames were decoded
into typed records (``tests/data/check_json/*.json``, taken from that code; the recordings are made
by ``make_corpus.py`` beside them). A reader that drops, renames or re-derives a field differently
changes some figure here."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.cli import invoke

DATA = Path(__file__).resolve().parents[1] / "data"
EXPECTED = sorted((DATA / "check_json").glob("*.json"))
#: a dropped frame's message names the record and the kind; the validator's wording after it is free
_DETAIL = re.compile(r"(record \d+ skipped: invalid \w+ frame): .*")


def _recording(expected: Path) -> Path:
    stored = expected.with_suffix(".e3s")
    return stored if stored.exists() else DATA / stored.name


def _normalized(report: dict) -> dict:
    report["read_errors"] = [_DETAIL.sub(r"\1", e) for e in report["read_errors"]]
    return report


def test_the_corpus_covers_every_stored_recording():
    assert {_recording(p).name for p in EXPECTED} >= {p.name for p in DATA.glob("*.e3s")}
    assert len(EXPECTED) >= 6


@pytest.mark.parametrize("expected", EXPECTED, ids=lambda p: p.stem)
def test_check_json_is_unchanged(expected: Path, tmp_path):
    copy = tmp_path / "r.e3s"
    copy.write_bytes(_recording(expected).read_bytes())
    result = invoke("check", copy, "--json")
    assert _normalized(json.loads(result.output)) == _normalized(json.loads(expected.read_text()))
