"""ddl_history: finished DDLs kept for instances that must catch up, and the entry that asks every
instance to reload a table after an originator lost its decision."""

from __future__ import annotations

from typing import Callable

from .loops import retry
from .paths import history_order, history_seq
from .reads import read
from .records import FAILED, HistoryEntry

HISTORY_MAX = 1000    # finished DDLs kept in ddl_history for instances that must catch up
HISTORY_PRUNE_EVERY = 100
LOST_DECISION_RETRY_S = 300.0   # how long an originator that lost its decision tries to reach the others


class HistoryLog:
    """Appending and pruning ddl_history (a part of zk.cluster.Cluster)."""

    async def append_history(self, entry: HistoryEntry) -> None:
        """Record a finished DDL in ddl_history."""
        zk = self.zk
        assert zk is not None
        path = await zk.create(self.paths.history_entry_prefix(entry.record_czxid), entry.encode(), sequence=True)
        await self.prune_history(path)

    def reload_everywhere_later(self, keys: list[tuple[str, str]], sql: str) -> None:
        """After a DDL whose outcome this instance could not publish: once it is back in the cluster
        (bounded), a ddl_history entry per table that names no record (czxid 0), so every instance,
        whatever it applied before, reloads the table from the backends."""
        async def append() -> bool:
            if not (self.ready and self.zk is not None and self.zk.connected):
                return False
            for schema, table in keys:
                await self.append_history(HistoryEntry(
                    schema, table, self.instance, sql, FAILED, 0,
                    message="the originator lost its decision: reload from the backends"))
            self.log.info("asked every instance to reload after a lost decision", tables=[f"{s}.{t}" for s, t in keys])
            return True

        async def run() -> None:
            if not await retry(append, 1.0, lambda: self._stopping, LOST_DECISION_RETRY_S, "the reload entry"):
                self.log.warning("could not ask the other instances to reload after a lost decision; "
                                 "run `reload @@metadata` on them", tables=[f"{s}.{t}" for s, t in keys])
        self._spawn(run())

    async def newest_history(self, match: Callable[[HistoryEntry], bool]) -> tuple[int, HistoryEntry] | None:
        """The newest ddl_history entry `match` accepts, with its sequence number (any instance's DDL:
        `repair @@ddl` works from every instance); None when none does."""
        zk = self.zk
        assert zk is not None
        for name in reversed(history_order(await zk.children(self.paths.history))):
            got = await read(zk, f"{self.paths.history}/{name}", HistoryEntry)
            if got is not None and got.value is not None and match(got.value):
                return history_seq(name), got.value
        return None

    async def prune_history(self, created: str) -> None:
        """Every HISTORY_PRUNE_EVERY entries, drop those beyond HISTORY_MAX (oldest first)."""
        zk = self.zk
        assert zk is not None
        seq = history_seq(created)
        if seq < 0 or seq % HISTORY_PRUNE_EVERY:
            return
        names = history_order(await zk.children(self.paths.history))
        for name in names[:max(0, len(names) - HISTORY_MAX)]:
            await zk.delete(f"{self.paths.history}/{name}")

