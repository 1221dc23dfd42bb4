"""SHOW ... WHERE and SHOW OPEN TABLES over the logical schemas, answered as one MariaDB would.

The proxy builds the logical rows of a SHOW itself (names mapped, shards summed); a WHERE on them is then
MariaDB's to judge: the rows go to a backend as literals in a derived table named and typed like the
SHOW's columns, and the backend's own expression rules pick the rows that stay (same collations,
same comparisons, same errors for an unknown column).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from meta.errors import BackendError, NotSupported

from proxy.plan.local import like_match, substitute_database
from proxy.wire import constants as C
from proxy.wire.messages import ColumnDef, ResultSet
from proxy.plan.sqltok import tokenize
from proxy.exec.user_locks import calls as user_lock_calls, refuse_assignment

if TYPE_CHECKING:
    from proxy.runtime import SessionPort

_ROW = "`#pydble_row`"
_NUMBER = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_NUMERIC = C.INTEGER_TYPES | C.DECIMAL_TYPES | {C.T_FLOAT, C.T_DOUBLE}
_TIMES = {C.T_DATETIME: "DATETIME", C.T_TIMESTAMP: "DATETIME", C.T_DATE: "DATE", C.T_NEWDATE: "DATE",
          C.T_TIME: "TIME"}

_SHOW_OPEN = re.compile(
    r"^\s*SHOW\s+OPEN\s+TABLES(?:\s+(?:FROM|IN)\s+`?(?P<db>[\w$]+)`?)?(?:\s+LIKE\s+'(?P<like>[^']*)'"
    r"|\s+WHERE\s+(?P<where>.+?))?\s*;?\s*$", re.I | re.S)


def _literal(col: ColumnDef, value: bytes | None) -> str:
    """One value of a SHOW row as SQL that the backend types as the SHOW's column is typed."""
    if value is None:
        return "NULL"
    raw = bytes(value)
    if col.type in _NUMERIC and _NUMBER.fullmatch(raw):
        return raw.decode()
    cast = _TIMES.get(col.type)
    text = f"_utf8mb4 X'{raw.hex()}'"
    if cast is not None:
        return f"CAST({text} AS {cast})"
    return f"{text} COLLATE utf8mb4_general_ci"   # SHOW's columns compare case-insensitively


def _check(where: str) -> None:
    """A WHERE that reads tables or takes locks would not run on the logical schemas: refused."""
    if any(t[0] == "w" and t[1].upper() == "SELECT" for t in tokenize(where)) or user_lock_calls(where):
        raise NotSupported("SHOW ... WHERE with a subquery or a user-lock function is not supported by pydble")


def filter_sql(rs: ResultSet, where: str) -> str:
    """The statement whose answer is the positions of the rows the WHERE keeps."""
    _check(where)
    names = [_ROW] + ["`" + c.name.replace("`", "``") + "`" for c in rs.columns]
    if rs.rows:
        selects = []
        for i, row in enumerate(rs.rows):
            values = [str(i)] + [_literal(c, v) for c, v in zip(rs.columns, row)]
            if i == 0:
                values = [f"{v} AS {n}" for v, n in zip(values, names)]
            selects.append("SELECT " + ", ".join(values))
        derived = " UNION ALL ".join(selects)
    else:
        derived = "SELECT " + ", ".join(f"NULL AS {n}" for n in names) + " LIMIT 0"
    return f"SELECT {_ROW} FROM ({derived}) AS `#pydble_show` WHERE {where}"


async def where_filter(session: SessionPort, rs: ResultSet, where: str) -> ResultSet:
    """The rows of a SHOW that its WHERE keeps, judged by a backend (in the session's sql_mode)."""
    ex = session.executor
    node = next(iter(ex.pinned), None) or next(iter(ex.locked), None) or session.runtime.any_node(session.schema)
    sql = substitute_database(filter_sql(rs, where), session.schema, session.conn_id, f"{session.user}@{session.peer}")
    # the WHERE runs on a node as any statement would: checked as one (host files, mysql/sys, other schemas'
    # tables, stored functions), and nothing of it may stay on the shared connection
    session.runtime.router.route(sql, session.schema, session.grants)
    refuse_assignment(sql)
    sc = (await ex._run_on([(node, sql)]))[0]
    if sc.error is not None:
        raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
    keep = {int(bytes(r[0])) for r in sc.results[0].rows}
    return ResultSet(rs.columns, [row for i, row in enumerate(rs.rows) if i in keep])


def parse_show_open_tables(sql: str) -> tuple[str | None, str | None, str | None] | None:
    """(schema, LIKE pattern, WHERE text) of SHOW OPEN TABLES [FROM db] [LIKE | WHERE], else None."""
    m = _SHOW_OPEN.match(sql)
    return (m.group("db"), m.group("like"), m.group("where")) if m else None


async def open_tables(session: SessionPort, schemas: list[str], like: str | None) -> ResultSet:
    """SHOW OPEN TABLES: each logical table open on any of its nodes, once, In_use summed over them."""
    server = session.runtime
    homes: dict[tuple[str, str], tuple[str, ...]] = {}
    for schema in schemas:
        for t in await server.tables_of(schema):
            if (like is None or like_match(like, t)) and session.sees(schema, t):
                homes[(schema, t)] = server.nodes_of_table(schema, t)
    nodes = sorted({n for ns in homes.values() for n in ns}) or [server.any_node(schemas[0] if schemas else None)]
    scanners = await session.executor._run_on(
        [(n, f"SHOW OPEN TABLES FROM `{server.backends.database_of(n)}`") for n in nodes])
    for sc in scanners:
        if sc.error is not None:
            raise BackendError(sc.error.message, sc.error.code, sc.error.sqlstate)
    open_on = {n: {bytes(r[1] or b"").decode().lower(): r for r in sc.results[0].rows}
               for n, sc in zip(nodes, scanners)}
    rows: list[list[bytes | None]] = []
    for (schema, t), ns in sorted(homes.items()):
        found = [open_on[n][t] for n in ns if t in open_on.get(n, {})]
        if found:
            rows.append([schema.encode(), t.encode(), str(sum(int(r[2] or 0) for r in found)).encode(),
                         str(max(int(r[3] or 0) for r in found)).encode()])
    return ResultSet(scanners[0].results[0].columns, rows)
