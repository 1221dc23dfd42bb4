"""An operator's release of a table's DDL record and lock: one procedure for `kill @@ddl_lock` (manager
port) and `pydble ddl release` (no instance needed), so both refuse and stop alike.

Refused while an instance that may still act on the DDL is online, and while the DDL's marker is still
in a backend's processlist (an ALTER waiting on a metadata lock there would otherwise complete after the
table was released and reloaded: every instance would serve the old structure for good). With `force`,
the DDL is stopped first (KILL QUERY on every connection carrying its marker), waited for (bounded)
until it runs nowhere, and only then released, with a ddl_history entry so every instance reloads the
table from the backends (DESIGN.md §6: stop, wait, reload, release).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from . import zklog
from .aio import Zk
from .ddlcore.acks import Key
from .ddlcore.release import release_refusal, release_txn
from .ddlcore.txn import went_through
from .paths import Paths
from .reads import Read, read
from .records import FAILED, DdlLockInfo, DdlRecord, HistoryEntry

RELEASE_WAIT_S = 30.0   # how long a forced release waits for a stopped DDL to end on the backends
RELEASE_POLL_S = 0.25

# running(marker, kill): the dbGroups whose processlist still shows the marker (or cannot be asked);
# kill: KILL QUERY each statement found first (proxy/ddl/ddl_marker.py)
Running = Callable[[str, bool], Awaitable[list[str]]]


class ReleaseRefused(Exception):
    """Nothing was released; the message says why and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass
class Released:
    """What a release found and did."""

    owner: str = ""
    phase: str = ""                 # INIT / SUCCESS / FAILED of the record, LOCKED for a lock alone
    record_deleted: bool = False
    lock_deleted: bool = False
    live: list[str] = field(default_factory=list)      # online owners it was forced past
    stopped: list[str] = field(default_factory=list)   # dbGroups where its DDL was stopped (KILL QUERY)
    history: str = ""               # the ddl_history entry written ("" without a record)

    @property
    def nothing(self) -> bool:
        return not (self.record_deleted or self.lock_deleted)


def _owners(rec: Read | None, lock: Read | None) -> set[str]:
    """Every instance that may still act on the DDL (originator, reconciler, lock holder)."""
    out = set()
    if rec is not None and rec.value is not None:
        out |= {rec.value.instance, rec.value.reconciled_by}
    if lock is not None and lock.value is not None:
        out.add(lock.value.instance)
    return out - {""}


async def _stop(running: Running, marker: str, where: list[str], wait_s: float) -> None:
    """KILL QUERY the DDL's statements until none is left (bounded): ReleaseRefused if it outlives the bound."""
    deadline = time.monotonic() + wait_s
    while where:
        if time.monotonic() > deadline:
            raise ReleaseRefused(f"its DDL still runs on dbGroup(s) {', '.join(where)} {wait_s:g}s after KILL "
                                 f"QUERY (or they cannot be asked); nothing was released, try again")
        await running(marker, True)
        await asyncio.sleep(RELEASE_POLL_S)
        where = await running(marker, False)


async def release_ddl(zk: Zk, paths: Paths, key: Key, running: Running | None, force: bool, by: str,
                      force_word: str = "`force`", wait_s: float = RELEASE_WAIT_S) -> Released:
    """Release the table's record and lock exactly as read (one conditional transaction with a ddl_history
    entry); ReleaseRefused while an owner is online or the DDL still runs on a node, unless `force`, which
    stops the DDL and waits until it has ended first. `running` None: the backends cannot be asked (then a
    DDL with a marker is never released). `by` names the command in the history entry."""
    schema, table = key
    name = f"{schema}.{table}"
    rec = await read(zk, paths.ddl_record(*key), DdlRecord)
    lock = await read(zk, paths.ddl_lock(*key), DdlLockInfo)
    out = Released()
    if rec is None and lock is None:
        return out
    value = rec.value if rec is not None else None
    out.owner = (value.instance if value is not None else
                 lock.value.instance if lock is not None and lock.value is not None else "?")
    out.phase = "LOCKED" if rec is None else value.status if value is not None else "UNKNOWN"
    out.live = sorted(_owners(rec, lock) & set(await zk.children(paths.online)))
    if out.live and not force:
        raise ReleaseRefused(f"refusing to release {name}: its DDL ({out.phase}) belongs to online instance(s) "
                             f"{', '.join(out.live)}; wait for it, or add {force_word} (its DDL is then "
                             f"stopped on the backends and every instance reloads the table)")
    marker = value.marker if value is not None and value.ddl_id else ""
    if marker:
        if running is None:
            raise ReleaseRefused(f"refusing to release {name}: cannot tell whether its DDL still runs on the "
                                 f"backends; pass --config FILE so they can be asked")
        where = await running(marker, False)
        if where:
            why = release_refusal(value, where, force)
            if why is not None:
                raise ReleaseRefused(f"refusing to release {name}: {why.replace('`force`', force_word)}")
            await _stop(running, marker, where, wait_s)
            out.stopped = where
            again = await read(zk, paths.ddl_record(*key), DdlRecord)
            if again is None or again.stat.czxid != rec.stat.czxid:   # its owner ended it meanwhile
                return out
            rec, lock = again, await read(zk, paths.ddl_lock(*key), DdlLockInfo)
            value = rec.value
    children = await zk.children(paths.ddl_record(*key)) if rec is not None else []
    acks = await zk.children(paths.ddl_acks(*key)) if "instance" in children else []
    entry = None
    if rec is not None:
        entry = HistoryEntry(schema, table, value.instance if value is not None else "?",
                             value.sql if value is not None else "", FAILED, rec.stat.czxid,
                             message=f"released by an operator ({by}): reload from the backends")
        await zk.ensure_path(paths.history)   # a cluster no instance ever joined (the CLI) has none
    txn = release_txn(paths, key, value, rec.stat if rec is not None else None, children, acks,
                      lock.stat if lock is not None else None, entry)
    results = await zklog.commit(zk, txn)
    if not went_through(results):
        raise ReleaseRefused(f"the DDL of {name} changed while it was being released; nothing was released, "
                             f"look again")
    out.record_deleted, out.lock_deleted = rec is not None, lock is not None
    if entry is not None:
        out.history = results[-1] if lock is None else results[-2]
    return out


__all__ = ["RELEASE_WAIT_S", "ReleaseRefused", "Released", "Running", "release_ddl"]
