"""Per-table local DDL locks (DBLE's metaLocks): one DDL per table per instance, failing fast."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from .errors import DdlInProgress


@dataclass
class MetaLock:
    """Who holds a table's DDL lock, with what statement, since when."""

    schema: str
    table: str
    sql: str
    owner: str                 # 'session:<id>' for a local DDL, 'instance:<name>' for a cluster peer's DDL
    instance: str
    phase: str = "LOCKED"
    since: float = field(default_factory=time.time)
    record: int = 0            # for a peer's DDL: the czxid of its cluster record (0: none known)


RELOAD_OWNER = "reload:"   # the owners of a lock held while a table is re-read after a DDL: no DDL itself


def another_instance_ddl(schema: str, table: str) -> DdlInProgress:
    """DBLE's 4006 for a table whose DDL another instance runs (its cluster lock, or our lock taken for it)."""
    return DdlInProgress(f"Found another instance doing ddl, due to table[{schema}.{table}]'s ddlLock is exists")


class MetaLocks:
    """The table locks of one instance; a plain dict because every caller runs on the event loop."""

    def __init__(self, instance: str) -> None:
        self.instance = instance
        self._locks: dict[tuple[str, str], MetaLock] = {}

    @staticmethod
    def key(schema: str, table: str) -> tuple[str, str]:
        """Tables are matched case-insensitively, like the config."""
        return schema, table.lower()

    def acquire(self, schema: str, table: str, sql: str, owner: str, instance: str | None = None) -> MetaLock:
        """Take the lock or fail at once with DBLE's 4006 message (held for another instance's DDL: the
        message that DDL's cluster lock gives)."""
        k = self.key(schema, table)
        held = self._locks.get(k)
        if held is not None:
            if held.instance != self.instance:
                raise another_instance_ddl(schema, table)
            raise DdlInProgress(f"SCHEMA[{schema}], TABLE[{table}] is doing DDL")
        lock = MetaLock(schema, table.lower(), sql, owner, instance or self.instance)
        self._locks[k] = lock
        return lock

    def release(self, schema: str, table: str, owner: str | None = None) -> bool:
        """Release a lock (only the owner's, when an owner is given); True if one was released."""
        k = self.key(schema, table)
        lock = self._locks.get(k)
        if lock is None or (owner is not None and lock.owner != owner):
            return False
        del self._locks[k]
        return True

    def release_owned_by(self, owner_prefix: str) -> list[MetaLock]:
        """Release every lock whose owner starts with the prefix (a crashed instance's, a gone session's)."""
        gone = [lk for lk in self._locks.values() if lk.owner.startswith(owner_prefix)]
        for lk in gone:
            del self._locks[self.key(lk.schema, lk.table)]
        return gone

    def get(self, schema: str, table: str) -> MetaLock | None:
        """The lock of a table, if any."""
        return self._locks.get(self.key(schema, table))

    def is_locked(self, schema: str, table: str) -> bool:
        return self.key(schema, table) in self._locks

    def all(self) -> list[MetaLock]:
        """Every lock held, oldest first."""
        return sorted(self._locks.values(), key=lambda lk: lk.since)
