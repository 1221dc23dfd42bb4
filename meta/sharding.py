"""Sharding functions with DBLE's semantics: which partition (index into a table's nodes) a value lives on.

Facts carried over from DBLE (Hash/PartitionByLong, StringHash/PartitionByString, NumberRange):
- Hash: total = sum(count[i] * length[i]) slots; slot = value mod total, where a negative remainder is
  shifted up by total (Java `%` then `+ total`, the same as Python's floor modulo); the first count[0]
  partitions take length[0] consecutive slots each, then count[1] partitions take length[1], and so on.
- StringHash: h = 31*h + char over the UTF-16 code units of the hash slice, in a 64-bit two's-complement
  Java long; the slice "start:end" reads a negative start as len+start and an end <= 0 as len+end.
- NULL goes to partition 0 for the hash functions (DBLE 2.20+), and to the default partition (or nowhere)
  for ranges.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

from meta.config import FunctionConfig, TableConfig, parse_slice
from meta.errors import NotSupported

_MASK64 = (1 << 64) - 1
_SIGN64 = 1 << 63
_LONG_RE = re.compile(r"[+-]?[0-9]{1,20}\Z")   # past 20 digits no MySQL integer column can match


class BadShardingValue(NotSupported):
    """A value that cannot be read as the number a numeric sharding function needs."""


class NoValidNode(NotSupported):
    """A value that no partition of the function accepts (outside every range, no default)."""

    def __init__(self, message: str, value: Any = None) -> None:
        super().__init__(message)
        self.value = value


def _show(value: Any) -> str:
    """Render a value the way DBLE prints it in messages."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return str(value)


def to_long(value: Any) -> int:
    """Read a sharding value as an integer like DBLE's Long.parseLong, or raise BadShardingValue."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if _LONG_RE.match(value):
            return int(value)
    elif isinstance(value, bytes):
        # A hex/bit literal (x'..', 0x..) in a numeric context is an unsigned big-endian number.
        if len(value) <= 8:
            return int.from_bytes(value, "big")
    elif isinstance(value, (Decimal, float)):
        try:
            if isinstance(value, float):
                if value.is_integer() and abs(value) < 2.0 ** 64:
                    return int(value)
            elif value.is_finite() and value.adjusted() < 20 and value == value.to_integral_value():
                return int(value)
        except (InvalidOperation, ValueError, OverflowError):
            pass
    raise BadShardingValue(
        f"columnValue:{_show(value)} Please eliminate any quote and non number within it.")


def java_string_hash(s: str, start: int = 0, end: int | None = None) -> int:
    """h = 31*h + c over UTF-16 code units [start, end), as a signed 64-bit Java long."""
    if s.isascii():
        units: Any = s.encode("ascii")
    else:
        b = s.encode("utf-16-be", "surrogatepass")
        units = [(b[i] << 8) | b[i + 1] for i in range(0, len(b), 2)]
    n = len(units)
    end = n if end is None or end > n else end
    h = 0
    for i in range(max(start, 0), end):
        h = (h * 31 + units[i]) & _MASK64
    return h - (1 << 64) if h & _SIGN64 else h


def _utf16_len(s: str) -> int:
    """Java's String.length(): characters outside the BMP count twice."""
    return len(s) if s.isascii() else len(s.encode("utf-16-le", "surrogatepass")) // 2


class ShardingFunction:
    """Maps a SQL literal to the index of the partition (table node) that holds it."""

    config: FunctionConfig
    partitions: int

    def partition(self, value: Any) -> int:  # pragma: no cover - abstract
        """The partition of one value; raise a NotSupported subclass when there is none."""
        raise NotImplementedError

    def partitions_for_range(self, lo: Any, hi: Any) -> list[int] | None:
        """Partitions holding values in [lo, hi] (inclusive; None bound = unbounded); None = all."""
        return None


class _SlotFunction(ShardingFunction):
    """Shared slot layout of Hash and StringHash: total slots split in order among partitions."""

    def __init__(self, cfg: FunctionConfig) -> None:
        if not cfg.partition_count or len(cfg.partition_count) != len(cfg.partition_length):
            raise ValueError(f"function {cfg.name}: partition_count and partition_length must pair up")
        self.config = cfg
        segment: list[int] = []
        part = 0
        for count, length in zip(cfg.partition_count, cfg.partition_length):
            for _ in range(count):
                segment.extend([part] * length)
                part += 1
        self.partitions = part
        self.total = len(segment)
        self._segment = tuple(segment)

    def slot_partition(self, key: int) -> int:
        """The partition of an integer key (Python's % is Java's % shifted up for negatives)."""
        return self._segment[key % self.total]


class HashFunction(_SlotFunction):
    """DBLE Hash (PartitionByLong): integer value mod the slot total."""

    def partition(self, value: Any) -> int:
        if value is None:
            return 0
        if type(value) is int:
            return self._segment[value % self.total]
        return self._segment[to_long(value) % self.total]

    def partitions_for_range(self, lo: Any, hi: Any) -> list[int] | None:
        if lo is None or hi is None:
            return None
        try:
            a, b = to_long(lo), to_long(hi)
        except BadShardingValue:
            return None
        if b < a:
            return []
        if b - a + 1 >= self.total:
            return None
        return sorted({self._segment[v % self.total] for v in range(a, b + 1)})


class StringHashFunction(_SlotFunction):
    """DBLE StringHash (PartitionByString): Java-long string hash of a slice, then slots."""

    def __init__(self, cfg: FunctionConfig) -> None:
        super().__init__(cfg)
        self.slice_start, self.slice_end = parse_slice(cfg.hash_slice)

    def string_hash(self, s: str) -> int:
        """The hash of the configured slice of s, exactly as DBLE computes it."""
        n = _utf16_len(s)
        start = self.slice_start if self.slice_start >= 0 else n + self.slice_start
        end = self.slice_end if self.slice_end > 0 else n + self.slice_end
        return java_string_hash(s, start, end)

    def partition(self, value: Any) -> int:
        if value is None:
            return 0
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif isinstance(value, bool):
            value = str(int(value))
        elif not isinstance(value, str):
            value = str(value)
        return self._segment[self.string_hash(value) % self.total]


class RangeFunction(ShardingFunction):
    """A number-range function: half-open [start, end) ranges mapped to partitions, plus a default."""

    def __init__(self, cfg: FunctionConfig) -> None:
        if not cfg.ranges:
            raise ValueError(f"function {cfg.name}: a range function needs at least one range")
        self.config = cfg
        self.ranges = tuple(sorted(cfg.ranges))
        self.default = cfg.default_partition
        top = max(r[2] for r in self.ranges)
        self.partitions = max(top, self.default if self.default is not None else -1) + 1

    def _no_node(self, value: Any) -> NoValidNode:
        return NoValidNode(f"can't find any valid shardingNode for value[{_show(value)}] "
                           f"of function {self.config.name}", value)

    def partition(self, value: Any) -> int:
        if value is None:
            if self.default is None:
                raise self._no_node(value)
            return self.default
        v = to_long(value)
        for start, end, part in self.ranges:
            if start <= v < end:
                return part
        if self.default is None:
            raise self._no_node(value)
        return self.default

    def partitions_for_range(self, lo: Any, hi: Any) -> list[int] | None:
        try:
            a = None if lo is None else to_long(lo)
            b = None if hi is None else to_long(hi)
        except BadShardingValue:
            return None
        if a is not None and b is not None and b < a:
            return []
        found: set[int] = set()
        covered_to = a  # everything below covered_to (exclusive) is known to be inside a range
        gap = False
        for start, end, part in self.ranges:
            if (b is not None and start > b) or (a is not None and end - 1 < a):
                continue
            found.add(part)
            if covered_to is None or start > covered_to:
                gap = True
            covered_to = end if covered_to is None else max(covered_to, end)
        if covered_to is None or b is None or covered_to <= b:
            gap = True
        if gap and self.default is not None:
            found.add(self.default)
        return sorted(found)


_TYPES = {"hash": HashFunction, "stringhash": StringHashFunction, "range": RangeFunction}


@lru_cache(maxsize=256)
def make_function(cfg: FunctionConfig) -> ShardingFunction:
    """Build (once per config record) the sharding function a [functions.X] section describes."""
    try:
        return _TYPES[cfg.type](cfg)
    except KeyError:
        raise ValueError(f"function {cfg.name}: unknown type '{cfg.type}'") from None


def node_index(table: TableConfig, fn: ShardingFunction, value: Any) -> int:
    """The partition of value for table, with DBLE's messages naming the table and column."""
    column = (table.column or "").upper()
    try:
        idx = fn.partition(value)
    except NoValidNode:
        raise NoValidNode(f"can't find any valid shardingNode in table[{table.name}] -> "
                          f"column[{column}] -> value[{_show(value)}]", value) from None
    if not 0 <= idx < len(table.nodes):
        raise NoValidNode(f"Can't find a valid shardingNode for specified node index in table[{table.name}]"
                          f" -> column[{column}] -> value[{_show(value)}],Index : {idx}", value)
    return idx


def node_for(table: TableConfig, functions: dict[str, FunctionConfig], value: Any) -> str:
    """The shardingNode of a sharding table that holds the row whose sharding column is value."""
    if table.type != "sharding" or table.function is None:
        raise ValueError(f"table {table.schema}.{table.name} is a {table.type} table, not a sharding table")
    return table.nodes[node_index(table, make_function(functions[table.function]), value)]
