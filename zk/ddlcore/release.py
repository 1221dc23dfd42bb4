"""An operator's release of a table's DDL (`kill @@ddl_lock`): exactly the record and lock that were
judged, in one transaction, and never while the DDL may still run on a node unless forced."""

from __future__ import annotations

from typing import Any, Sequence

from ..paths import Paths
from ..records import DdlRecord, HistoryEntry
from .acks import Key
from .txn import Create, Delete, Txn


def release_refusal(rec: DdlRecord | None, running_on: Sequence[str], force: bool) -> str | None:
    """Why a release must wait (None: go): the DDL's marker is still in a backend's processlist (it may
    still be waiting on a metadata lock there: the next DDL would run beside it)."""
    if force or rec is None or not running_on:
        return None
    return (f"its DDL still runs on dbGroup(s) {', '.join(running_on)} (or they cannot be asked); wait for it, "
            f"or add `force`")


def release_txn(paths: Paths, key: Key, rec: DdlRecord | None, rec_stat: Any, children: Sequence[str],
                acks: Sequence[str], lock_stat: Any, entry: HistoryEntry | None) -> Txn:
    """Delete what was read and nothing newer: the record's acks and children (its owner znode among
    them: the transaction fails if the record is another DDL's by now), the record at the version read
    with a ddl_history entry (every instance reloads the table), and the lock at the version read. A
    lock read without a record is deleted only while still no record exists (a new DDL creates both
    at once: creating and deleting the record path fails if one appeared)."""
    record_path = paths.ddl_record(*key)
    ops: list = []
    if rec_stat is not None:
        ops += [Delete(paths.ddl_ack(key[0], key[1], name)) for name in acks]
        ops += [Delete(f"{record_path}/{child}") for child in sorted(children, key=lambda c: c == "instance")]
        ops.append(Delete(record_path, int(rec_stat.version)))
        if entry is not None:
            ops.append(Create(paths.history_entry_prefix(entry.record_czxid), entry.encode(), sequence=True))
    if lock_stat is not None:
        if rec_stat is None:
            ops += [Create(record_path), Delete(record_path)]
        ops.append(Delete(paths.ddl_lock(*key), int(lock_stat.version)))
    czxid = int(rec_stat.czxid) if rec_stat is not None else int(getattr(lock_stat, "czxid", 0) or 0)
    return Txn("operator-release", tuple(ops), czxid, rec.ddl_id if rec is not None else "")


__all__ = ["release_refusal", "release_txn"]
