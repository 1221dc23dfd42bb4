"""A reconciler's decisions: which records are orphans, when one may be read from the backends (only
once its DDL runs nowhere), and the conditional writes that end it. Only the actor whose transaction
deletes the record's owner znode (created with the record) ends a DDL, so two reconcilers, or a
reconciler and a returning originator, can never both end it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Iterable, Sequence

from ..paths import Paths
from ..records import FAILED, DdlRecord, HistoryEntry
from .acks import AckTally, Key
from .txn import Check, Create, Delete, Failure, SetData, Txn, failures, went_through

RUNNING_WAIT_S = 5.0    # how long one reconcile waits for an orphaned DDL to end on the backends
RUNNING_POLL_S = 0.25   # how often it looks meanwhile


class Verdict(str, Enum):
    """What to do with a record found in ddl/."""

    SKIP = "SKIP"             # a live instance owns it (or it is ours, in flight)
    RECONCILE = "RECONCILE"   # an orphan: end it from the backends


class Running(str, Enum):
    """The orphaned DDL's statements on the backends (by its marker in the processlist)."""

    ENDED = "ENDED"   # runs nowhere: the structure may be read
    WAIT = "WAIT"     # still running: look again in RUNNING_POLL_S
    KILL = "KILL"     # past ddl_timeout_s: KILL QUERY each, then look again
    LATER = "LATER"   # still running past this reconcile's bound: leave the record for a later pass


def classify(rec: DdlRecord | None, online: Iterable[str], me: str, in_flight_here: bool) -> Verdict:
    """A record whose originator is offline is an orphan; so is an unreadable one (nobody can finish it)
    and our own that we are not running (left over from an earlier DDL or reconcile of ours)."""
    if rec is None:
        return Verdict.RECONCILE
    if in_flight_here:
        return Verdict.SKIP
    if rec.instance not in set(online) or rec.instance == me:
        return Verdict.RECONCILE
    return Verdict.SKIP


def holder_alive(holder: str | None, online: Iterable[str], me: str) -> bool:
    """The table's lock is held by a live other instance: not an orphan after all."""
    return holder is not None and holder != me and holder in set(online)


def running_step(where: Sequence[str], created_at: float, now_wall: float, ddl_timeout_s: float,
                 past_bound: bool) -> Running:
    """After asking each backend for the DDL's marker: read the structure only once it runs nowhere."""
    if not where:
        return Running.ENDED
    if past_bound:
        return Running.LATER
    if ddl_timeout_s > 0 and now_wall - created_at > ddl_timeout_s:
        return Running.KILL
    return Running.WAIT


def should_kill(created_at: float, now_wall: float, ddl_timeout_s: float) -> bool:
    """Past `[server] ddl_timeout_s` since the DDL began, its statements are stopped, as its originator would."""
    return ddl_timeout_s > 0 and now_wall - created_at > ddl_timeout_s


@dataclass(frozen=True)
class Orphan:
    """One orphaned record as read: what the reconciler decides and removes."""

    key: Key
    rec: DdlRecord
    czxid: int
    version: int

    def decision(self, me: str, verdict: str) -> DdlRecord:
        """FAILED, marked reconciled_by: every subscriber reloads the table from the backends on it."""
        return self.rec.with_status(FAILED, f"originator {self.rec.instance} went away during {self.rec.status}; "
                                            f"reconciled from the backends: {verdict}", me)


def decide_txn(paths: Paths, orphan: Orphan, decision: DdlRecord) -> Txn:
    """The reconciler's decision, only while the record is that DDL's (owner znode) at the version read."""
    ops: list = []
    if orphan.rec.ddl_id:
        ops.append(Check(paths.ddl_owner(orphan.key[0], orphan.key[1], orphan.rec.ddl_id), 0))
    ops.append(SetData(paths.ddl_record(*orphan.key), decision.encode(), orphan.version))
    return Txn("reconcile-decide", tuple(ops), orphan.czxid, orphan.rec.ddl_id)


def outcome_tally(orphan: Orphan, online: Iterable[str], me: str) -> AckTally:
    """Who must ack the reconciled outcome: every other online instance but the (gone) originator."""
    return AckTally((orphan.key,), FAILED, {orphan.key: orphan.czxid},
                    frozenset(set(online) - {me, orphan.rec.instance}))


def removal_txn(paths: Paths, orphan: Orphan, version: int, children: Sequence[str], acks: Sequence[str],
                lock: Any, entry: HistoryEntry) -> Txn:
    """Record (at `version`), its children (acks, owner znode), the lock only if it was created with the
    record (same czxid: a later DDL's lock is left alone), and the history entry, in one transaction."""
    key = orphan.key
    path = paths.ddl_record(*key)
    ops: list = [Delete(paths.ddl_ack(key[0], key[1], name)) for name in acks]
    ops += [Delete(f"{path}/{child}") for child in children]
    ops.append(Delete(path, version))
    if lock is not None and getattr(lock, "czxid", None) == orphan.czxid:
        ops.append(Delete(paths.ddl_lock(*key), getattr(lock, "version", -1)))
    ops.append(Create(paths.history_entry_prefix(entry.record_czxid), entry.encode(), sequence=True))
    return Txn("reconcile-remove", tuple(ops), orphan.czxid, orphan.rec.ddl_id)


def removal_retry(results: Sequence[Any]) -> bool | None:
    """True: removed; None: acks came or went, read them and try again; False: the record is no longer
    the one reconciled (changed or gone): leave it."""
    if went_through(results):
        return True
    failed = failures(results)
    if any(f is Failure.BAD_VERSION for f in failed):
        return False
    return None


__all__ = ["Orphan", "Running", "Verdict", "RUNNING_POLL_S", "RUNNING_WAIT_S", "classify", "decide_txn",
           "holder_alive", "outcome_tally", "removal_retry", "removal_txn", "running_step", "should_kill"]
