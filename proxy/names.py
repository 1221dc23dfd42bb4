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

from .protocol.packets import lenenc_str, read_lenenc_int

_CACHE_MAX = 4096


class GroupNames:
    """(physical database, table) → logical schema for one dbGroup."""

    def __init__(self, by_table: dict[tuple[str, str], str], by_db: dict[str, str]) -> None:
        self.by_table = by_table   # (database, lower-case table) → schema that configures it there
        self.by_db = by_db         # database → the schema to name when the table does not tell
        self._cache: dict[tuple[bytes, bytes], bytes | None] = {}
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
        except (IndexError, TypeError):
            return None
        new = self._logical(db, org)
        if new is None:
            return None
        return p[:start] + lenenc_str(new) + p[tpos:]

    def err(self, p: bytes) -> bytes | None:
        """An ERR payload whose message names logical schemas, or None when it needs no change."""
        if self._err_re is None or len(p) < 3:
            return None
        head = 9 if len(p) >= 9 and p[3] == 0x23 else 3
        msg = p[head:].decode("utf-8", "replace")

        def sub(m: re.Match[str]) -> str:
            s = self.schema_of(m.group(2), m.group(4))
            return m.group(0) if s is None else f"{m.group(1)}{s}{m.group(1)}.{m.group(3)}{m.group(4)}"

        new = self._err_re.sub(sub, msg)
        return None if new == msg else p[:head] + new.encode("utf-8")

    def answer(self, data: bytes, deprecate_eof: bool) -> bytes:
        """A whole framed text result (as whole_text_answer accepted it) with its column definitions
        renamed; the rows are copied as they are."""
        ncols = data[4]
        if data[4] == 0 or ncols >= 0xFB:
            return data
        pos = 4 + (data[0] | data[1] << 8 | data[2] << 16)
        parts: list[bytes] = []
        last = 0
        for _ in range(ncols):
            length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
            end = pos + 4 + length
            q = self.coldef(data[pos + 4:end])
            if q is not None:
                parts.append(data[last:pos])
                parts.append(struct.pack("<I", len(q))[:3] + data[pos + 3:pos + 4] + q)
                last = end
            pos = end
        if not parts:
            return data
        parts.append(data[last:])
        return b"".join(parts)


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
