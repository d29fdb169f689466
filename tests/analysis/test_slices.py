"""The acceptance slices (eagle3scope/analysis/slices.py) against a per-request count done here: every
dimension partitions the request-steps, each label's mean is its requests' own, and labels come only
from the fixed buckets whatever a step carries."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from eagle3scope.analysis.slices import DIMENSIONS, Slices, request_labels
from eagle3scope.wire.bodies import Step, read

CONTEXT_EDGES = [(0, 127, "<128"), (128, 511, "128-511"), (512, 2047, "512-2K"), (2048, 8191, "2K-8K"),
                 (8192, 32767, "8K-32K"), (32768, 1 << 31, ">=32K")]
BATCH_EDGES = [(1, 1, "1"), (2, 4, "2-4"), (5, 8, "5-8"), (9, 16, "9-16"), (17, 32, "17-32"), (33, 64, "33-64"),
               (65, 256, "65-256"), (257, 1 << 16, ">256")]


def expected_label(edges, n) -> str:
    return next(label for lo, hi, label in edges if lo <= n <= hi)


@st.composite
def steps(draw):
    bs = draw(st.integers(1, 6))
    body = {"accepted": draw(st.lists(st.integers(0, 3), min_size=bs, max_size=bs)), "bonus": [1] * bs}
    if draw(st.booleans()):
        body["ctx_len"] = draw(st.lists(st.sampled_from([0, 127, 128, 511, 512, 2047, 2048, 8191, 8192, 32767, 32768,
                                                         (1 << 31) - 1]), min_size=bs, max_size=bs))
    if draw(st.booleans()):
        body["greedy"] = draw(st.lists(st.booleans(), min_size=bs, max_size=bs))
    if draw(st.booleans()):  # the grammar's field (a malformed one is refused with its frame: tests/wire)
        body["constrained"] = draw(st.lists(st.booleans(), min_size=bs, max_size=bs))
    return body


def step_of(body: dict) -> Step:
    """The step record of a body of ``bs`` requests (its token lists empty: the slices do not read them)."""
    bs = len(body["accepted"])
    return read("step", {"seq": 0, "bs": bs, "rids": ["r"] * bs, "draft_ids": [[]] * bs, "accepted_ids": [[]] * bs,
                         **body})


def own_label(body: dict, i: int, dim: str) -> str:
    bs = len(body["accepted"])
    if dim == "context_length":
        return expected_label(CONTEXT_EDGES, body["ctx_len"][i]) if "ctx_len" in body else "unknown"
    if dim == "batch_size":
        return expected_label(BATCH_EDGES, bs)
    key, yes, no = {"sampling": ("greedy", "greedy", "sampled"), "constraint": ("constrained", "constrained", "free")}[dim]
    flags = body.get(key)
    if not isinstance(flags, list):
        return "unknown"
    return yes if flags[i] is True else no if flags[i] is False else "unknown"


@settings(max_examples=60, deadline=None)
@given(st.lists(steps(), min_size=1, max_size=40))
def test_each_dimension_partitions_the_request_steps_by_its_own_labels(bodies):
    slices = Slices()
    for body in bodies:
        slices.add(body["accepted"], body["bonus"], request_labels(step_of(body)), None)
    summary = slices.summary(3)
    assert list(summary) == list(DIMENSIONS)
    for dim, rows in summary.items():
        mine: dict[str, list[int]] = {}
        for body in bodies:
            for i, a in enumerate(body["accepted"]):
                mine.setdefault(own_label(body, i, dim), []).append(a)
        assert [r["label"] for r in rows] == [label for label in DIMENSIONS[dim] if label in mine]
        for row in rows:
            accepted = mine[row["label"]]
            assert row["request_steps"] == len(accepted)
            assert abs(row["mean_accept_length"] - (sum(accepted) + len(accepted)) / len(accepted)) < 1e-12
            reached = sum(a >= 0 for a in accepted)
            assert row["per_position"][0] == sum(a >= 1 for a in accepted) / reached
