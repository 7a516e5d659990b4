"""The kernel cpulist parser/formatter used by every topology reader."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tf_autopar.topology import format_cpulist, parse_cpulist


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)),
        ("0", (0,)),
        ("0-1\n", (0, 1)),
        ("", ()),
        ("\n", ()),
        ("5,1,3", (1, 3, 5)),
        ("0-3,2-5", (0, 1, 2, 3, 4, 5)),  # overlaps merge
        ("0-8:2", (0, 2, 4, 6, 8)),  # kernel stride syntax
        (" 4-5 , 36-37 ", (4, 5, 36, 37)),
    ],
)
def test_parse(text, expected):
    assert parse_cpulist(text) == expected


@pytest.mark.parametrize(
    "text, fragment",
    [("0-3,x", "'x'"), ("3-1", "backwards"), ("a-b", "'a'"), ("-1", "''"), ("0-4:0", "zero stride"), ("1.5", "'1.5'")],
)
def test_parse_rejects_garbage_naming_the_piece(text, fragment):
    with pytest.raises(ValueError) as err:
        parse_cpulist(text)
    assert fragment in str(err.value)
    assert repr(text.strip()) in str(err.value)


@pytest.mark.parametrize(
    "cpus, text", [([0, 1, 2, 3, 8, 10, 11], "0-3,8,10-11"), ([], ""), ([7], "7"), ([3, 1, 2], "1-3")]
)
def test_format(cpus, text):
    assert format_cpulist(cpus) == text


@given(st.sets(st.integers(min_value=0, max_value=1023), max_size=200))
def test_roundtrip(cpus):
    assert parse_cpulist(format_cpulist(cpus)) == tuple(sorted(cpus))
