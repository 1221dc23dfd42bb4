"""Physical database names back to logical schema names in what backends answer.

A backend names the physical database (`db1`) in the schema field of every column definition and in
error messages (`Table 'db1.t' doesn't exist`). A client must only ever see the logical schema it
asked for: Connector/J's updatable ResultSet writes back to the schema a column definition names, and
a physical name is none of the client's business. One `GroupNames` per dbGroup maps
(physical database, table) to the logical schema, from the configuration; the response scanner
asks it about column definitions and ERR packets only, so rows are relayed as bytes untouched.
"""

from __future__ import annotations

import re
import struct

from meta.config import Config

from proxy.wire.packets import ProtocolError, lenenc_str, read_lenenc_int, splice

_CACHE_MAX = 4096
_HEAD_CACHED = 1024   # headers up to this size are cached whole (a few MB at most)
_MISSING = b"-"


class GroupNames:
    """(physical database, table) → logical schema for one dbGroup."""

    def __init__(self, by_table: dict[tuple[str, str], str], by_db: dict[str, str]) -> None:
        self.by_table = by_table   # (database, lower-case table) → schema that configures it there
        self.by_db = by_db         # database → the schema to name when the table does not tell
        self._cache: dict[tuple[bytes, bytes], bytes | None] = {}
        self._coldefs: dict[bytes, bytes | None] = {}   # column definition payload → renamed (None: as is)
        self._heads: dict[bytes, bytes | None] = {}     # framed result header → renamed (None: as is)
        dbs = sorted({db for db, _ in by_table} | set(by_db), key=len, reverse=True)
        # `db1`.`t` or db1.t (as in 'db1.t' and 'db1.t.c'), the database not part of a longer name
        self._err_re = (re.compile(r"(?<![\w$`])(`?)(" + "|".join(re.escape(d) for d in dbs)
                                   + r")\1\.(`?)([\w$]+)") if dbs else None)

    def schema_of(self, database: str, table: str) -> str | None:
        """The logical schema a physical table belongs to, or None when the config does not say."""
        s = self.by_table.get((database, table.lower()))
        return s if s is not None else self.by_db.get(database)

    def _logical(self, database: bytes, table: bytes) -> bytes | None:
        key = (database, table)
        try:
            return self._cache[key]
        except KeyError:
            pass
        s = self.schema_of(database.decode("utf-8", "replace"), table.decode("utf-8", "replace"))
        out = s.encode() if s is not None and s.encode() != database else None
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[key] = out
        return out

    def coldef(self, p: bytes) -> bytes | None:
        """A column definition payload naming the logical schema, or None when it needs no change."""
        try:
            return self._coldefs[p]
        except KeyError:
            pass
        out = self._rename_coldef(p)
        if len(self._coldefs) >= _CACHE_MAX:
            self._coldefs.clear()
        self._coldefs[p] = out
        return out

    def _rename_coldef(self, p: bytes) -> bytes | None:
        try:
            n, pos = read_lenenc_int(p, 0)        # catalog
            start = pos + (n or 0)
            n, pos = read_lenenc_int(p, start)    # schema
            if not n:
                return None
            db = p[pos:pos + n]
            tpos = pos + n
            n, pos = read_lenenc_int(p, tpos)     # table (alias)
            n, pos = read_lenenc_int(p, pos + (n or 0))  # org_table
            org = p[pos:pos + (n or 0)]
        except (IndexError, TypeError, ProtocolError):
            return None  # malformed: relayed as it came, the scanner and the client judge it
        new = self._logical(db, org)
        if new is None:
            return None
        return p[:start] + lenenc_str(new) + p[tpos:]

    def err(self, p: bytes) -> bytes | None:
        """An ERR payload whose message names logical schemas, or None when it needs no change."""
        if len(p) < 3:
            return None
        head = 9 if len(p) >= 9 and p[3] == 0x23 else 3
        msg = p[head:].decode("utf-8", "replace")
        new = self.text(msg)
        return None if new == msg else p[:head] + new.encode("utf-8")

    def text(self, msg: str) -> str:
        """A server message (error or warning) with `db1.t` / `` `db1`.`t` `` naming the logical schema."""
        if self._err_re is None:
            return msg

        def sub(m: re.Match[str]) -> str:
            s = self.schema_of(m.group(2), m.group(4))
            return m.group(0) if s is None else f"{m.group(1)}{s}{m.group(1)}.{m.group(3)}{m.group(4)}"

        return self._err_re.sub(sub, msg)

    def answer(self, data: bytes) -> bytes:
        """A whole framed text result (as whole_text_answer accepted it) with its column definitions
        renamed; the rows are copied as they are. The header (column count and definitions) of a
        statement repeats from one execution to the next, so its renamed form is cached whole."""
        ncols = data[4]
        if ncols == 0 or ncols >= 0xFB:
            return data
        pos = 4 + (data[0] | data[1] << 8 | data[2] << 16)
        for _ in range(ncols):
            pos += 4 + (data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16)
        head = data[:pos]
        new = self._heads.get(head, _MISSING)
        if new is _MISSING:
            new = self._rename_head(head, ncols)
            if len(head) <= _HEAD_CACHED:
                if len(self._heads) >= _CACHE_MAX:
                    self._heads.clear()
                self._heads[head] = new
        return data if new is None else new + data[pos:]

    def _rename_head(self, head: bytes, ncols: int) -> bytes | None:
        pos = 4 + (head[0] | head[1] << 8 | head[2] << 16)
        spans: list[tuple[int, int, bytes]] = []
        for _ in range(ncols):
            end = pos + 4 + (head[pos] | head[pos + 1] << 8 | head[pos + 2] << 16)
            q = self.coldef(head[pos + 4:end])
            if q is not None:
                spans.append((pos, end, struct.pack("<I", len(q))[:3] + head[pos + 3:pos + 4] + q))
            pos = end
        return splice(head, spans) if spans else None


def group_names(config: Config) -> dict[str, GroupNames]:
    """One GroupNames per dbGroup of the configuration.

    A configured table names its schema on each of its nodes; a schema's default node names it for
    any other table; a physical database used by one schema only names that schema for anything."""
    by_table: dict[str, dict[tuple[str, str], str]] = {g: {} for g in config.db_groups}
    users: dict[tuple[str, str], set[str]] = {}
    defaults: dict[tuple[str, str], str] = {}
    for sname, sc in config.schemas.items():
        for tname, t in sc.tables.items():
            for node in t.nodes:
                sn = config.sharding_nodes[node]
                by_table[sn.db_group].setdefault((sn.database, tname.lower()), sname)
                users.setdefault((sn.db_group, sn.database), set()).add(sname)
        if sc.default_node:
            sn = config.sharding_nodes[sc.default_node]
            defaults.setdefault((sn.db_group, sn.database), sname)
            users.setdefault((sn.db_group, sn.database), set()).add(sname)
    by_db: dict[str, dict[str, str]] = {g: {} for g in config.db_groups}
    for (group, db), schemas in users.items():
        if (group, db) in defaults:
            by_db[group][db] = defaults[(group, db)]
        elif len(schemas) == 1:
            by_db[group][db] = next(iter(schemas))
    return {g: GroupNames(by_table[g], by_db[g]) for g in config.db_groups}


__all__ = ["GroupNames", "group_names"]
