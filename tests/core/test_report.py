"""The report's JSON: each entry line is exactly what ``json.dumps`` makes of its ``to_dict()``."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from warmkit._warmup.report import STATUSES, ReportEntry, WarmupReport, _entry_lines

texts = st.one_of(st.none(), st.text())
keys = st.one_of(
    st.integers(), st.text(), st.tuples(st.integers(), st.floats(), st.text()), st.none()
)
entries = st.builds(
    ReportEntry,
    kernel=st.text(),
    backend=texts,
    key=keys,
    status=st.sampled_from(STATUSES),
    seconds=st.one_of(
        st.floats(allow_nan=False), st.integers(min_value=0, max_value=10**6), st.just(float("inf"))
    ),
    error=texts,
    tuning=texts,
    kind=st.sampled_from(("declared", "recorded")),
)


@given(st.lists(entries, max_size=6))
def test_each_entry_line_is_json_dumps_of_its_dict(items):
    items += items[:2]  # repeated fields come from the per-value memo
    expected = ["    " + json.dumps(e.to_dict()) for e in items]
    assert list(_entry_lines(tuple(items))) == expected


@given(st.lists(entries, max_size=5))
def test_to_json_parses_back_to_to_dict_and_counts_match(items):
    report = WarmupReport(enabled=True, entries=tuple(items), seconds=1.5, jobs=2)
    assert json.loads(report.to_json()) == report.to_dict()
    for status in STATUSES:
        assert report.count(status) == sum(1 for e in items if e.status == status)
    assert report.totals()["keys"] == len(items)


def test_report_statuses_are_one_literal_with_every_value_the_table_shows():
    import typing

    from warmkit import ReportStatus

    assert typing.get_args(ReportStatus) == STATUSES_IN_TABLE
    report = WarmupReport(
        enabled=True,
        entries=tuple(ReportEntry("k", "b", i, s) for i, s in enumerate(STATUSES_IN_TABLE)),
        seconds=0.0,
    )
    header = report.table().splitlines()[0].split()
    assert header[3:-1] == list(STATUSES_IN_TABLE)  # kernel, backend, keys, <statuses>, seconds
    assert [e["status"] for e in report.to_dict()["entries"]] == list(STATUSES_IN_TABLE)


STATUSES_IN_TABLE = ("compiled", "cached", "waited", "fetched", "failed", "skipped")
