"""Global sequences (DBLE's incrementColumn): INSERTs that leave a table's increment column out get values.

A sharding table may name an `increment_column`. An INSERT or REPLACE into it that leaves the column
out, or gives it NULL, DEFAULT or 0 (unless sql_mode has NO_AUTO_VALUE_ON_ZERO), as MySQL's
AUTO_INCREMENT would fill it, is rewritten with values from the table's global sequence before it is
routed: the values route the rows when the column is the sharding column, and the first one is the
statement's last-insert-id (OK packet and LAST_INSERT_ID()). Values are reserved in blocks from the
store (ZooKeeper in a cluster, zk/sequence.py; a local file otherwise, meta/sequence_file.py) and
handed out in order from the block this instance holds. A new sequence starts after the largest
value the table already holds. An explicit value above the block moves the sequence past it, as
MySQL moves its counter.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Protocol

from meta.errors import NotSupported, ProxyError, ReadOnly
from meta.sequence_file import SequenceFile, SequenceUnavailable

from proxy.plan.analysis import INSERT, literal_value
from proxy.plan.parser import Parser
from proxy.plan.sqltok import Token, tokenize

if TYPE_CHECKING:
    from proxy.runtime import Runtime, SessionPort

_HEAD = 4096   # the table name sits in the first tokens: found without tokenizing a 1 MB INSERT


class Store(Protocol):
    async def reserve(self, key: str, n: int, first: int | None) -> int | None: ...
    async def raise_to(self, key: str, value: int) -> None: ...


@dataclass
class _Block:
    """The values this instance holds for one table: [next, end)."""

    next: int = 0
    end: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(frozen=True)
class Filled:
    """An INSERT with its increment column filled in: the text to route, and its first new value."""

    sql: str
    first: int


class Sequences:
    """The global sequences of one instance: which tables have one, the blocks held, the store."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        cfg = runtime.config
        self.columns: dict[tuple[str, str], str] = {
            (s, t.name): t.increment_column for s, sc in cfg.schemas.items() for t in sc.tables.values()
            if t.increment_column}
        self.block = cfg.server.sequence_block
        self._blocks: dict[tuple[str, str], _Block] = {}
        self.store: Store
        if runtime.cluster is not None:
            from zk.sequence import ZkSequences
            cluster = runtime.cluster
            self.store = ZkSequences(lambda: cluster.zk, cluster.paths)
        else:
            self.store = SequenceFile(cfg.server.data_dir or None)

    # -- values ---------------------------------------------------------------------------------
    async def take(self, table: tuple[str, str], n: int) -> list[int]:
        """n new consecutive values of a table's sequence (a multi-row INSERT's ids follow each other, as
        MySQL's do for a plain INSERT): a block too short for them is left for a fresh one."""
        b = self._blocks.setdefault(table, _Block())
        async with b.lock:
            if b.end - b.next < n:
                want = max(self.block, n)
                lo = await self._reserve(table, want)
                b.next, b.end = lo, lo + want
            out = list(range(b.next, b.next + n))
            b.next += n
            return out

    async def observe(self, table: tuple[str, str], value: int) -> None:
        """An explicit value was inserted: values from now on are above it (as MySQL's counter moves)."""
        b = self._blocks.get(table)
        if b is not None and value < b.next:
            return   # the common case (an id re-inserted below the block): no store round trip
        b = self._blocks.setdefault(table, _Block())
        async with b.lock:
            if value < b.next:
                return
            if value + 1 < b.end:
                b.next = value + 1
                return
            await self.store.raise_to(_key(table), value + 1)
            # the block is passed: an empty one at value + 1 keeps lower explicit values on the fast path
            b.next = b.end = value + 1

    async def _reserve(self, table: tuple[str, str], n: int) -> int:
        key = _key(table)
        lo = await self.store.reserve(key, n, None)
        if lo is None:  # a new sequence: it starts above every value the table already holds
            lo = await self.store.reserve(key, n, await self._first(table))
        assert lo is not None
        return lo

    async def _first(self, table: tuple[str, str]) -> int:
        """1 + the largest value of the column on any node of the table (1 for an empty table)."""
        schema, name = table
        col = self.columns[table]
        cfg = self.runtime.config.table(schema, name)
        assert cfg is not None
        backends = self.runtime.backends
        sql = f"SELECT MAX(`{col}`) FROM `{name}`"

        async def one(node: str) -> int:
            conn = await backends.acquire(node, 0)
            try:
                sc = await conn.query(sql, backends.timeout_s)
            finally:
                backends.release(node, conn)
            raw = sc.results[0].rows[0][0] if sc.results and sc.results[0].rows else None
            if raw is None:
                return 0
            try:
                return int(Decimal(bytes(raw).decode()))
            except (ArithmeticError, ValueError):
                raise SequenceUnavailable(f"global sequence {_key(table)}: MAX({col}) on {node} is "
                                          f"{bytes(raw)[:40]!r}, not a number: is {col} an integer column?") from None

        highest = await asyncio.gather(*(one(n) for n in cfg.nodes))
        return max(1, max(highest) + 1)

    # -- statements -----------------------------------------------------------------------------
    def nothing_to_fill(self, session: SessionPort, sql: str) -> bool:
        """True when an INSERT into a sequence table gives every row its value and moves no sequence: it
        can run as it is, on the fast path (an id re-inserted below the block held, as sysbench does)."""
        toks = tokenize(sql)
        table = self._target(toks, session.schema)
        if table is None:
            return True
        while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
            toks.pop()
        zero_fills = "NO_AUTO_VALUE_ON_ZERO" not in session.vars.get("sql_mode", "").upper()
        try:
            plan = plan_fill(Parser(self.runtime.router.analyzer.resolve, toks, session.schema), sql, table,
                             self.columns[table], self.runtime.table_columns(*table), zero_fills)
        except ProxyError:
            return False   # the task answers it
        if any(e[2] for e in plan.edits):
            return False
        b = self._blocks.get(table)
        return plan.explicit is None or (b is not None and plan.explicit < b.next)

    async def fill(self, session: SessionPort, sql: str) -> Filled | None:
        """The INSERT/REPLACE with its increment column filled, or None when it has nothing to fill."""
        whole = len(sql) <= _HEAD
        head = tokenize(sql if whole else sql[:_HEAD])
        table = self._target(head, session.schema)
        if table is None:
            return None
        # who may not write the table burns no values (and learns nothing from MAX(column))
        if session.read_only:
            raise ReadOnly.of(session.user)
        if session.grants is not None:
            word = "REPLACE" if sql.lstrip()[:7].upper() == "REPLACE" else "INSERT"
            session.grants.check(((word, INSERT, table[0], table[1]),))
        col = self.columns[table]
        toks = head if whole else tokenize(sql)
        while toks and toks[-1][0] == "o" and toks[-1][1] == ";":
            toks.pop()
        zero_fills = "NO_AUTO_VALUE_ON_ZERO" not in session.vars.get("sql_mode", "").upper()
        known = self.runtime.table_columns(*table)
        plan = plan_fill(Parser(self.runtime.router.analyzer.resolve, toks, session.schema), sql, table, col,
                         known, zero_fills)
        if plan.explicit is not None:
            await self.observe(table, plan.explicit)
        if not plan.edits or not any(e[2] for e in plan.edits):
            return None
        values = iter(await self.take(table, sum(1 for e in plan.edits if e[2])))
        first = 0
        out: list[str] = []
        pos = 0
        for s, e, gen, before, after in plan.edits:
            out.append(sql[pos:s])
            if gen:
                v = next(values)
                first = first or v
                out.append(f"{before}{v}{after}")
            else:
                out.append(before)
            pos = e
        out.append(sql[pos:])
        return Filled("".join(out), first)

    def _target(self, toks: list[Token], schema: str | None) -> tuple[str, str] | None:
        """The (schema, table) an INSERT/REPLACE (its first tokens) writes when it has a sequence, else None."""
        k = 1
        while k < len(toks) and toks[k][0] == "w" and toks[k][1].upper() in (
                "LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO"):
            k += 1
        parts: list[str] = []
        while k < len(toks) and toks[k][0] in "wq":
            parts.append(toks[k][1].strip("`").replace("``", "`"))
            if k + 1 < len(toks) and toks[k + 1][1] == ".":
                k += 2
                continue
            break
        if not parts or len(parts) > 2:
            return None
        try:
            t = self.runtime.router.analyzer.resolve(parts, schema)
        except ProxyError:
            return None   # routing reports it
        key = (t.schema, t.name)
        return key if key in self.columns else None


@dataclass
class FillPlan:
    """Where an INSERT gets its values: (start, end, generated?, text before, text after) edits in
    text order, and the largest explicit value given (to move the sequence past it)."""

    edits: list[tuple[int, int, bool, str, str]]
    explicit: int | None = None


def _refuse(table: tuple[str, str], col: str, why: str) -> NotSupported:
    return NotSupported(f"INSERT into {table[0]}.{table[1]}: {why}; its increment column {col} is filled "
                        f"from a global sequence")


def plan_fill(p: Parser, sql: str, table: tuple[str, str], col: str, known: tuple[str, ...] | list[str] | None,
              zero_fills: bool) -> FillPlan:
    """Read an INSERT/REPLACE into a table with a sequence: which rows need a value and where it goes."""
    n = p.n
    k = 1
    ignore = False
    while p.at(k) in ("LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE"):
        ignore = ignore or p.at(k) == "IGNORE"
        k += 1
    if p.word(k, "INTO"):
        k += 1
    _, k = p.dotted(k)
    if p.word(k, "PARTITION") and p.at(k + 1) == "(":
        k = p.close[k + 1] + 1
    plan = FillPlan([])
    cols: list[str] | None = None
    col_open = -1
    if p.at(k) == "(" and not p.is_query(k + 1):
        col_open, c = k, p.close[k]
        cols = []
        j = k + 1
        while j < c:
            ref, j = p.colref(j, c)
            if ref is None:
                raise p.syntax(j)
            cols.append(ref[1])
            if j < c and p.at(j) == ",":
                j += 1
        k = c + 1
    if p.at(k) in ("VALUES", "VALUE"):
        if cols is not None:
            idx = cols.index(col) if col in cols else -1
        elif known:
            lowered = [c.lower() for c in known]
            if col not in lowered:
                raise _refuse(table, col, f"the table has no column {col}")
            idx = lowered.index(col)
        else:
            raise _refuse(table, col, "without a column list it needs the table's metadata, which is not loaded")
        if idx < 0:
            t = p.toks[col_open]
            plan.edits.append((t[3], t[3], False, f"`{col}`" + (", " if cols else ""), ""))
        k += 1
        rows = 0
        while True:
            if p.word(k, "ROW"):
                k += 1
            if p.at(k) != "(":
                raise p.syntax(k)
            c = p.close[k]
            rows += 1
            if idx < 0:
                t = p.toks[k]
                plan.edits.append((t[3], t[3], True, "", ", " if c > k + 1 else ""))
            else:
                _value(p, table, col, k + 1, c, idx, rows, zero_fills, plan)
            k = c + 1
            if p.at(k) == "," and p.toks[k][0] == "o":
                k += 1
                continue
            break
        generated = sum(1 for e in plan.edits if e[2])
        if generated and _has_odku(p, k):
            raise _refuse(table, col, "ON DUPLICATE KEY UPDATE with values pydble fills is not supported (the "
                          "last-insert-id of an updated row cannot be told)")
        if generated and ignore and rows > 1:
            raise _refuse(table, col, "INSERT IGNORE of several rows with values pydble fills is not supported "
                          "(the last-insert-id of the first row kept cannot be told)")
        return plan
    if p.word(k, "SET"):
        end = k + 1
        while end < n and not (p.word(end, "ON") and p.word(end + 1, "DUPLICATE")) and not p.word(end, "RETURNING"):
            end = p.close[end] + 1 if p.at(end) == "(" else end + 1
        j = k + 1
        found = False
        while j < end:
            stop = p.comma(j, end)
            ref, m = p.colref(j, stop)
            if ref is not None and ref[1] == col and p.at(m) in ("=", ":="):
                found = True
                _one(p, table, col, m + 1, stop, zero_fills, plan)
            j = stop + 1
        if not found:
            last = p.toks[end - 1]
            plan.edits.append((last[3], last[3], True, f", `{col}` = ", ""))
        if any(e[2] for e in plan.edits) and _has_odku(p, end):
            raise _refuse(table, col, "ON DUPLICATE KEY UPDATE with values pydble fills is not supported (the "
                          "last-insert-id of an updated row cannot be told)")
        return plan
    raise _refuse(table, col, "INSERT ... SELECT is not supported (the rows would need values one by one)")


def _has_odku(p: Parser, k: int) -> bool:
    while k < p.n:
        if p.word(k, "ON") and p.word(k + 1, "DUPLICATE"):
            return True
        k = p.close[k] + 1 if p.at(k) == "(" else k + 1
    return False


def _value(p: Parser, table: tuple[str, str], col: str, a: int, b: int, idx: int, row: int, zero_fills: bool,
           plan: FillPlan) -> None:
    """The increment column's value in one VALUES row [a, b)."""
    j = a
    for _ in range(idx):
        j = p.comma(j, b) + 1
        if j > b:
            raise ProxyError(f"Column count doesn't match value count at row {row}", 1136, "21S01")
    _one(p, table, col, j, p.comma(j, b), zero_fills, plan)


def _one(p: Parser, table: tuple[str, str], col: str, a: int, b: int, zero_fills: bool, plan: FillPlan) -> None:
    """Fill the value [a, b) when MySQL would generate one there; else note it as explicit."""
    if a >= b:
        raise p.syntax(a)
    toks: list[Token] = p.toks
    start, end = toks[a][2], toks[b - 1][3]
    if b == a + 1 and p.word(a, "DEFAULT"):
        plan.edits.append((start, end, True, "", ""))
        return
    ref, m = p.literal(a, b)
    if ref is None or m != b:
        raise _refuse(table, col, f"its value {sql_text(toks, a, b)} is not a literal (pydble must know "
                      f"whether MySQL would generate one)")
    v = literal_value(ref, toks)
    if isinstance(v, str):
        text = v.strip()
        if not text.lstrip("+-").isdigit():
            raise _refuse(table, col, f"its value {toks[a][1][:40]} is not a whole number")
        v = int(text)
    if isinstance(v, bytes):
        raise _refuse(table, col, "its value is a hex or bit literal")
    if v is None or (v == 0 and zero_fills):
        plan.edits.append((start, end, True, "", ""))
        return
    if isinstance(v, (int, Decimal)) and v > 0:
        iv = int(v)
        plan.explicit = iv if plan.explicit is None else max(plan.explicit, iv)


def sql_text(toks: list[Token], a: int, b: int) -> str:
    return " ".join(t[1] for t in toks[a:b])[:60]


def _key(table: tuple[str, str]) -> str:
    return f"{table[0]}.{table[1]}"


__all__ = ["Filled", "FillPlan", "Sequences", "plan_fill"]
