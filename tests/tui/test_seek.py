"""The ``g`` prompt's seek parser: what a user types is untrusted, so every string gives a step or a
finite time from the start, 0 or more, or a ValueError that says what is understood; never a crash,
never a NaN, an infinity or a negative position handed to the replay."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eagle3scope.tui.seek import parse_seek

#: Numbers as people and Python write them, the awkward ones included ("nan", "inf", "-0", "1e400").
NUMBERS = st.one_of(st.integers().map(str), st.floats().map(repr), st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "1_000"]))
#: Strings shaped like seek targets (a number with a unit, a clock, ``step N``) and any text at all.
TARGETS = st.one_of(
    st.text(),
    st.builds(lambda n, unit: n + unit, NUMBERS, st.sampled_from(["", "s", "ms", "m", "h", " S", ":30", ":"])),
    st.builds(lambda a, b: f"{a}:{b}", NUMBERS, NUMBERS),
    st.builds(lambda n, sep: f"step{sep}{n}", NUMBERS, st.sampled_from([" ", "=", ":", ""])),
)


def test_steps_and_times_as_the_prompt_explains_them():
    assert parse_seek("1234") == ("step", 1234)
    assert parse_seek("step 12") == ("step", 12)
    assert parse_seek(" Step=7 ") == ("step", 7)
    assert parse_seek("12.5s") == ("time", 12.5)
    assert parse_seek("250ms") == ("time", 0.25)
    assert parse_seek("2m") == ("time", 120.0)
    assert parse_seek("1h") == ("time", 3600.0)
    assert parse_seek("1:30") == ("time", 90.0)
    assert parse_seek("1:00:05") == ("time", 3605.0)


@pytest.mark.parametrize("target", ["soon", "nans", "infs", "-5s", "step -5", "1e400s", "-1:30", "nan:00", "1:", "²"])
def test_what_is_no_position_in_a_replay_is_refused_with_the_text_quoted(target):
    with pytest.raises(ValueError, match="^cannot seek to ") as err:
        parse_seek(target)
    assert repr(target) in str(err.value)


def test_an_empty_answer_says_so():
    with pytest.raises(ValueError, match="empty seek target"):
        parse_seek("  \t")


@given(TARGETS)
def test_every_string_parses_to_a_real_position_or_gets_a_clear_error(target):
    try:
        kind, value = parse_seek(target)
    except ValueError as exc:
        message = str(exc)
        assert message == "empty seek target" or message.startswith(f"cannot seek to {target!r}: ")
        return
    assert kind in ("step", "time")
    assert math.isfinite(value) and value >= 0
    if kind == "step":
        assert isinstance(value, int)


@given(st.integers(min_value=0, max_value=10**12))
def test_a_step_number_reads_back_as_itself(n):
    assert parse_seek(str(n)) == ("step", n)
    assert parse_seek(f"step {n}") == ("step", n)


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_a_time_reads_back_as_itself_in_every_unit(seconds):
    assert parse_seek(f"{seconds!r}s") == ("time", seconds)
    assert parse_seek(f"{seconds / 60!r}m")[1] == pytest.approx(seconds)
    assert parse_seek(f"{seconds * 1000!r}ms")[1] == pytest.approx(seconds)
