"""The names of pydble's scratch views: made with their time, told apart from any other name, and stale only
once no instance can still be using them."""

from __future__ import annotations

import re

import pytest

from meta import scratch
from meta.errors import ProxyError

NOW = 1_800_000_000.0


def test_a_name_carries_its_time_and_is_pydbles():
    n = scratch.name(NOW)
    assert re.fullmatch(r"_pydble_desc_1800000000_[0-9a-f]{16}", n), n
    assert n != scratch.name(NOW)   # two at once on one node never collide
    assert len(n) <= 64   # MariaDB's longest table name
    for own in (n, n.upper(), scratch.PREFIX + "0123456789abcdef", scratch.PREFIX):
        assert scratch.is_scratch(own), own
    for other in ("pydble_desc_1", "_pydble_desc", "x_pydble_desc_1", "_pydble_v4", "v4", ""):
        assert not scratch.is_scratch(other), other


def test_stale_only_past_the_bound_and_only_with_a_time():
    assert scratch.USE_S * 2 < scratch.STALE_S   # the margin between the two is for clocks that disagree
    made = scratch.name(NOW)
    assert not scratch.stale(made, NOW)
    assert not scratch.stale(made, NOW + scratch.USE_S)            # its instance may still use it
    assert not scratch.stale(made, NOW + scratch.STALE_S)
    assert scratch.stale(made, NOW + scratch.STALE_S + 1)
    assert not scratch.stale(scratch.name(NOW + 600), NOW)          # made by an instance whose clock is ahead
    assert not scratch.stale(scratch.PREFIX + "0123456789abcdef", NOW * 2)   # before names had a time: kept
    assert not scratch.stale(scratch.PREFIX + "1_mine", NOW)        # not the format: kept
    assert not scratch.stale("v4", NOW)


def test_a_statement_naming_one_is_refused_as_mariadb_refuses_a_name():
    scratch.refuse("v4")
    with pytest.raises(ProxyError) as e:
        scratch.refuse(scratch.name(NOW))
    assert (e.value.code, e.value.sqlstate) == (1103, "42000")
    assert e.value.message.startswith("Incorrect table name '_pydble_desc_1800000000_")
