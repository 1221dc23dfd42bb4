"""DBLE-compatible sharding functions: hash slots, Java string hash, ranges, NULL and bad values."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meta.config import FunctionConfig, TableConfig, parse_config
from meta.errors import NotSupported
from meta.sharding import (BadShardingValue, HashFunction, NoValidNode, RangeFunction, StringHashFunction,
                           java_string_hash, make_function, node_for, parse_slice)


def hash_fn(counts: tuple[int, ...], lengths: tuple[int, ...]) -> HashFunction:
    fn = make_function(FunctionConfig("h", "hash", counts, lengths))
    assert isinstance(fn, HashFunction)
    return fn


def string_fn(counts: tuple[int, ...], lengths: tuple[int, ...], slice_: str) -> StringHashFunction:
    fn = make_function(FunctionConfig("s", "stringhash", counts, lengths, slice_))
    assert isinstance(fn, StringHashFunction)
    return fn


RANGES = ((0, 1000, 0), (1000, 2000, 1), (2000, 3000, 2))


def range_fn(default: int | None = None) -> RangeFunction:
    fn = make_function(FunctionConfig("r", "range", ranges=RANGES, default_partition=default))
    assert isinstance(fn, RangeFunction)
    return fn


def java_long_hash_reference(s: str) -> int:
    """The same hash by its closed form sum(c_i * 31^(n-1-i)), reduced to a signed 64-bit long."""
    raw = s.encode("utf-16-be")
    units = [int.from_bytes(raw[i:i + 2], "big") for i in range(0, len(raw), 2)]
    total = sum(c * 31 ** (len(units) - 1 - i) for i, c in enumerate(units)) % (1 << 64)
    return total - (1 << 64) if total >= 1 << 63 else total


# --- hash (DBLE Hash / PartitionByLong) --------------------------------------------------------------

def test_hash_four_nodes_is_id_mod_4() -> None:
    fn = hash_fn((4,), (1,))
    assert [fn.partition(i) for i in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert fn.partitions == 4


@pytest.mark.parametrize("value,expected", [
    (0, 0), (511, 0), (512, 1), (1023, 1), (1024, 0), (1535, 0), (1536, 1),
    (-1, 1),      # slot 1023: Java -1 % 1024 = -1, shifted up by 1024
    (-512, 1),    # slot 512
    (-513, 0),    # slot 511
])
def test_hash_1024_slots_split_in_two(value: int, expected: int) -> None:
    assert hash_fn((2,), (512,)).partition(value) == expected


@pytest.mark.parametrize("value,expected", [(0, 0), (255, 0), (256, 1), (511, 1), (512, 2), (1023, 2), (1024, 0)])
def test_hash_mixed_segments_take_slots_in_order(value: int, expected: int) -> None:
    assert hash_fn((2, 1), (256, 512)).partition(value) == expected


@pytest.mark.parametrize("value,expected", [(-1, 3), (-4, 0), (-5, 3), (-6, 2), (-7, 1)])
def test_hash_negative_values_like_java(value: int, expected: int) -> None:
    assert hash_fn((4,), (1,)).partition(value) == expected


@pytest.mark.parametrize("value,expected", [(-1, 2), (-3, 0), (-4, 2), (5, 2)])
def test_hash_non_power_of_two_total(value: int, expected: int) -> None:
    assert hash_fn((3,), (1,)).partition(value) == expected


@pytest.mark.parametrize("value,expected", [
    (None, 0), ("17", 1), ("+5", 1), ("-5", 3), (Decimal("8.0"), 0), (Decimal("-2"), 2), (True, 1),
    (b"\x05", 1), (b"\x01\x00", 0), (2 ** 70 + 3, 3), (7.0, 3), ("18446744073709551615", 3),
    (Decimal("1E+3"), 0), (b"\xff" * 8, 3),
])
def test_hash_value_forms(value: object, expected: int) -> None:
    assert hash_fn((4,), (1,)).partition(value) == expected


@pytest.mark.parametrize("value", ["abc", " 5", "5.5", "", Decimal("8.5"), Decimal("NaN"), 1.5, float("inf"),
                                   "1" * 5000, Decimal("1e999999999"), Decimal("1e20"), b"\xff" * 9, 1e300])
def test_hash_rejects_non_integer_values_with_dble_message(value: object) -> None:
    with pytest.raises(BadShardingValue) as err:
        hash_fn((4,), (1,)).partition(value)
    assert err.value.code == 1235
    assert "Please eliminate any quote and non number within it." in err.value.message


def test_hash_range_narrows_only_short_ranges() -> None:
    fn = hash_fn((4,), (1,))
    assert fn.partitions_for_range(1, 2) == [1, 2]
    assert fn.partitions_for_range(3, 4) == [0, 3]
    assert fn.partitions_for_range(5, 5) == [1]
    assert fn.partitions_for_range(1, 4) is None      # covers every slot
    assert fn.partitions_for_range(1, None) is None
    assert fn.partitions_for_range("a", 3) is None
    assert fn.partitions_for_range(5, 1) == []
    assert hash_fn((2,), (512,)).partitions_for_range(500, 520) == [0, 1]


@given(st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1))
def test_hash_matches_java_semantics_for_any_long(v: int) -> None:
    java_mod = v - int(v / 1024) * 1024 if v >= 0 else -((-v) % 1024)   # Java's truncating %
    slot = java_mod + 1024 if java_mod < 0 else java_mod
    assert hash_fn((2,), (512,)).partition(v) == slot // 512


# --- stringhash (DBLE StringHash / PartitionByString) ----------------------------------------------

def test_java_string_hash_known_values() -> None:
    assert java_string_hash("abc") == 96354          # the same as Java's "abc".hashCode()
    assert java_string_hash("hello") == 99162322     # and "hello".hashCode()
    assert java_string_hash("") == 0
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00   # UTF-16 surrogate pair, as Java sees it


def test_java_string_hash_wraps_like_a_java_long() -> None:
    for s in ["a" * 20, "The quick brown fox jumps over the lazy dog", "zzzzzzzzzzzzzzzzzzzzzzzzzzzz", "é" * 30]:
        assert java_string_hash(s) == java_long_hash_reference(s)
    assert any(java_string_hash(s) < 0 for s in ["a" * 20, "zzzzzzzzzzzzzzzzzzzzzzzzzzzz", "yyyyyyyyyyyyyyy"])


@pytest.mark.parametrize("slice_,value,expected", [
    ("0:0", "abc", 2),       # whole string: 96354 % 4
    ("0:-1", "abc", 1),      # "ab": 3105 % 4
    ("0:0", "hello", 2),     # 99162322 % 4
    ("-2:0", "hello", 3),    # "lo": 108*31+111 = 3459
    ("0:2", "hello", 1),     # "he": 104*31+101 = 3325
    ("1:-1", "hello", 1),    # "ell": 100517
    ("0:0", 123, 2),         # numbers hash their text "123": 48690
    ("0:0", None, 0),
    ("0:0", b"abc", 2),
    ("0:0", "\U0001F600", 3),  # 1772899 % 4
    ("5:9", "abc", 0),       # a slice beyond the string hashes nothing: 0
])
def test_stringhash_partitions(slice_: str, value: object, expected: int) -> None:
    assert string_fn((4,), (1,), slice_).partition(value) == expected


def test_stringhash_slots_and_negative_hashes() -> None:
    fn = string_fn((2,), (512,), "0:0")
    assert fn.partition("abc") == 0              # 96354 % 1024 = 98
    s = "y" * 15
    h = java_long_hash_reference(s)
    assert h < 0
    assert fn.partition(s) == (h % 1024) // 512  # floor mod == Java's % then + length
    assert fn.partitions_for_range("a", "b") is None


def test_parse_slice_dble_forms() -> None:
    assert parse_slice("2") == (0, 2)
    assert parse_slice("-2") == (-2, 0)
    assert parse_slice("1:") == (1, 0)
    assert parse_slice(":-1") == (0, -1)
    assert parse_slice(":") == (0, 0)
    assert parse_slice("0:-1") == (0, -1)


# --- range ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [(0, 0), (999, 0), (1000, 1), (1999, 1), (2000, 2), (2999, 2), ("1500", 1)])
def test_range_half_open_edges(value: object, expected: int) -> None:
    assert range_fn().partition(value) == expected


@pytest.mark.parametrize("value", [-1, 3000, 5000, None])
def test_range_outside_without_default_has_no_node(value: object) -> None:
    with pytest.raises(NoValidNode) as err:
        range_fn().partition(value)
    assert err.value.code == 1235
    assert "can't find any valid shardingNode" in err.value.message


def test_range_default_partition_takes_the_rest() -> None:
    fn = range_fn(default=3)
    assert fn.partition(5000) == 3
    assert fn.partition(-7) == 3
    assert fn.partition(None) == 3
    assert fn.partitions == 4


def test_range_partitions_for_range() -> None:
    fn = range_fn()
    assert fn.partitions_for_range(500, 1500) == [0, 1]
    assert fn.partitions_for_range(1500, 2500) == [1, 2]
    assert fn.partitions_for_range(2500, 5000) == [2]
    assert fn.partitions_for_range(None, 10) == [0]
    assert fn.partitions_for_range(10, 5) == []
    assert fn.partitions_for_range("x", 5) is None
    assert fn.partitions_for_range(4000, 5000) == []
    with_default = range_fn(default=3)
    assert with_default.partitions_for_range(2500, 5000) == [2, 3]
    assert with_default.partitions_for_range(None, 10) == [0, 3]
    assert with_default.partitions_for_range(100, 200) == [0]
    assert with_default.partitions_for_range(4000, None) == [3]


# --- make_function / node_for ---------------------------------------------------------------------

def example_config():  # the DESIGN.md §2 example, trimmed to what routing needs
    return parse_config({
        "users": [{"name": "test", "password": "x", "schemas": ["schema1"]}],
        "manager_users": [{"name": "root", "password": "x"}],
        "db_groups": {"g1": {"host": "127.0.0.1", "port": 3306, "user": "root"}},
        "sharding_nodes": {f"dn{i}": {"db_group": "g1", "database": f"db{i}"} for i in range(1, 5)},
        "functions": {"hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]},
                      "r": {"type": "range", "ranges": [{"start": 0, "end": 1000, "node": 0},
                                                         {"start": 1000, "end": 2000, "node": 1}]}},
        "schemas": {"schema1": {"tables": {
            "sharding_4_t1": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four",
                              "column": "id"},
            "range_t": {"type": "sharding", "nodes": ["dn1", "dn2"], "function": "r", "column": "id"},
            "test": {"type": "global", "nodes": ["dn1", "dn2"]}}}},
    })


def test_make_function_is_cached_per_config() -> None:
    cfg = FunctionConfig("h", "hash", (4,), (1,))
    assert make_function(cfg) is make_function(FunctionConfig("h", "hash", (4,), (1,)))


def test_node_for_example_tables() -> None:
    cfg = example_config()
    t = cfg.table("schema1", "sharding_4_t1")
    assert t is not None
    assert [node_for(t, cfg.functions, i) for i in (1, 2, 3, 4)] == ["dn2", "dn3", "dn4", "dn1"]
    assert node_for(t, cfg.functions, None) == "dn1"
    r = cfg.table("schema1", "range_t")
    assert r is not None
    assert node_for(r, cfg.functions, 1999) == "dn2"


def test_node_for_dble_message_names_table_column_and_value() -> None:
    cfg = example_config()
    r = cfg.table("schema1", "range_t")
    assert r is not None
    with pytest.raises(NotSupported) as err:
        node_for(r, cfg.functions, 5000)
    assert err.value.code == 1235
    assert err.value.message == "can't find any valid shardingNode in table[range_t] -> column[ID] -> value[5000]"


def test_node_for_refuses_non_sharding_tables() -> None:
    cfg = example_config()
    g = cfg.table("schema1", "test")
    assert g is not None
    with pytest.raises(ValueError):
        node_for(g, cfg.functions, 1)


def test_node_index_out_of_table_nodes() -> None:
    cfg = example_config()
    t = TableConfig("schema1", "odd", "sharding", ("dn1",), "r", "id")
    with pytest.raises(NoValidNode, match="Can't find a valid shardingNode for specified node index"):
        node_for(t, cfg.functions, 1500)
