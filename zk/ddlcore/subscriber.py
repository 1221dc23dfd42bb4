"""A subscriber's decisions (the listener of every other instance): which step of which record to
handle, what a duplicated or late event changes (nothing), what a vanished record asks for, which
ddl_history entries to apply, and when an entry counts as seen (only once applied)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Iterable, Sequence

from ..paths import Paths, history_czxid, history_order, history_seq, parse_table_node
from ..records import FAILED, INIT, SUCCESS, Ack, DdlRecord, HistoryEntry
from .txn import Check, Create, SetData, Txn

RecordKey = tuple[str, int]   # (record path, czxid): one DDL's record, never the table's next one
FINISHED_KEPT = 10_000


class Step(str, Enum):
    """What a subscriber does for one status of a record."""

    LOCK = "LOCK"        # INIT: take the table's local lock for the originator, ack
    REFRESH = "REFRESH"  # SUCCESS/FAILED: reload the table (texts, or the backends), release, ack


class GoneAction(str, Enum):
    """A record vanished from ZooKeeper."""

    RELEASE = "RELEASE"   # its outcome was applied here: release that record's local lock, nothing else
    SETTLE = "SETTLE"     # its outcome was not applied here (never seen, or its reload failed): wait a
                          # grace for the peer channel, then reload from the backends


@dataclass(frozen=True)
class Gone:
    key: RecordKey
    schema: str
    table: str
    action: GoneAction


@dataclass
class SubscriberCore:
    """What one instance has handled of the others' DDLs."""

    paths: Paths
    instance: str
    handled: dict[RecordKey, str] = field(default_factory=dict)              # last status handled
    results: dict[RecordKey, tuple[bool, str]] = field(default_factory=dict)  # what we acked for it
    finished: dict[int, None] = field(default_factory=dict)                   # czxids whose outcome we applied
    newest: dict[str, int] = field(default_factory=dict)   # record path -> czxid of its newest outcome applied here
    history_seen: int | None = None     # sequence of the newest ddl_history entry applied (None: not read)
    joined_seq: int = -1                # sequence of the newest ddl_history entry the last join's load reflects

    # -- records --------------------------------------------------------------------------------------
    def step_for(self, key: RecordKey, rec: DdlRecord) -> Step | None:
        """The step to take for a record as read (a pass or a watch), None when there is none: our own
        DDL (its originator handles it), a status already handled (a duplicated event), or an INIT
        arriving after its outcome (late)."""
        if (rec.instance == self.instance and not rec.reconciled_by) or self.superseded(key):
            return None
        last = self.handled.get(key)
        if rec.status == last:
            return None
        if rec.status == INIT:
            if last in (SUCCESS, FAILED) or key[1] in self.finished:
                return None
            return Step.LOCK
        return Step.REFRESH

    def on_handled(self, key: RecordKey, status: str, ok: bool, message: str) -> None:
        """A step was handled (and its ack is due). An outcome counts as applied only when ok: one whose
        reload failed is applied again from the backends when the record goes (or from ddl_history)."""
        self.handled[key] = status
        self.results[key] = (ok, message)
        if status in (SUCCESS, FAILED) and ok:
            self.mark_finished(key[1], key[0])

    def superseded(self, key: RecordKey) -> bool:
        """A step of a record older than one of the same table whose outcome is applied here already (the
        peer channel delayed it past the table's next DDL): its texts are older than what we serve, so it
        changes nothing; applying them would put the old structure back for good."""
        return key[1] < self.newest.get(key[0], 0)

    def seen_answer(self, key: RecordKey, rec: DdlRecord) -> tuple[bool, str] | None:
        """The answer to a step already handled (repeated, or late after its outcome); None: a new one."""
        last = self.handled.get(key)
        if last == rec.status:
            return self.results.get(key, (True, ""))
        if self.superseded(key) or last in (SUCCESS, FAILED) or (key[1] in self.finished and rec.status == INIT):
            return True, ""
        return None

    def peer_mismatch(self, caller: str, path: str, rec: DdlRecord, live: DdlRecord | None) -> str | None:
        """Why a step received over the peer channel must not be applied (None: it comes from its
        originator and matches the live record it names, whose status is the step's or the INIT before)."""
        why = self.sender_mismatch(caller, path, rec)
        if why is not None:
            return why
        if live is None:
            return "ZooKeeper has no such record (path and creation zxid)"
        if replace(live, status=rec.status, message=rec.message) != rec:
            return "it differs from the record in ZooKeeper"
        if live.status not in (INIT, rec.status):
            return f"the record is {live.status} in ZooKeeper, not {rec.status}"
        return None

    def sender_mismatch(self, caller: str, path: str, rec: DdlRecord) -> str | None:
        """Why a peer step cannot be its record's originator's (None: it can)."""
        if caller != rec.instance:
            return f"sent by {caller!r}, not by the record's originator {rec.instance!r}"
        if path != self.paths.ddl_record(rec.schema, rec.table):
            return "its path does not name its record's table"
        return None

    def takes_peer_steps(self, rec: DdlRecord, ready: bool) -> bool:
        """Another instance's own DDL (a reconciled record's outcome comes through ZooKeeper), while we
        are in the cluster."""
        return ready and rec.instance != self.instance and not rec.reconciled_by

    def ack_due(self, key: RecordKey, status: str, czxid_now: int | None) -> bool:
        """A delayed ZooKeeper ack is still to be written: the step is still the newest handled and the
        path still holds that very record (not the table's next DDL's)."""
        return self.handled.get(key) == status and czxid_now == key[1]

    def on_pass(self, known: Iterable[RecordKey], seen: Iterable[RecordKey]) -> list[Gone]:
        """After a full read of ddl/: what the records handled before but no longer there ask for.
        `known`: the keys handled when the pass began (steps the peer channel brought during it are
        not judged by it)."""
        seen = set(seen)
        out = []
        for key in known:
            if key in seen or key not in self.handled:
                continue
            last = self.handled.pop(key)
            ok, _ = self.results.pop(key, (True, ""))
            parts = parse_table_node(key[0].rsplit("/", 1)[-1])
            if parts is None:
                continue
            if last in (SUCCESS, FAILED) and ok:
                self.mark_finished(key[1], key[0])
                out.append(Gone(key, parts[0], parts[1], GoneAction.RELEASE))
            else:
                out.append(Gone(key, parts[0], parts[1], GoneAction.SETTLE))
        return out

    def settle(self, czxid: int) -> bool:
        """The grace for a vanished record is over: True if it must be reloaded from the backends now
        (its outcome was not applied meanwhile). The driver marks it finished (mark_finished) only once
        that reload worked; until then ddl_history's entry for it still applies."""
        return czxid not in self.finished

    def mark_finished(self, czxid: int, path: str) -> None:
        """The outcome of the record with that czxid (at `path`: its table's) is applied here (or it ran here)."""
        if not czxid:
            return   # 0 names no record (a history entry that asks everyone to reload): never "applied"
        self.finished[czxid] = None
        while len(self.finished) > FINISHED_KEPT:
            del self.finished[next(iter(self.finished))]
        if czxid > self.newest.get(path, 0):
            self.newest.pop(path, None)   # re-inserted last: the oldest tables' marks go first
            self.newest[path] = czxid
            while len(self.newest) > FINISHED_KEPT:
                del self.newest[next(iter(self.newest))]

    def late_final(self, key: RecordKey, rec: DdlRecord, names: Sequence[str]) -> str | None:
        """A final step (SUCCESS/FAILED) names a record already gone from ZooKeeper: the ddl_history entry
        to check it against, the newest naming that record (its czxid). The originator's deciding
        removal creates that entry in the same transaction, so once the record is gone because of that
        decision the entry is there. None: no entry names it (the record went another way, or the entry
        was pruned): the step is refused as before."""
        if rec.status not in (SUCCESS, FAILED) or not key[1]:
            return None
        named = [n for n in history_order(list(names)) if history_czxid(n) == key[1]]
        return named[-1] if named else None

    def late_final_mismatch(self, caller: str, key: RecordKey, rec: DdlRecord, entry: HistoryEntry) -> str | None:
        """Why a final step must not be applied from the ddl_history entry of its removed record (None:
        that entry is the very decision the step carries: same record, table, originator, statement,
        status and message; a reconciler's or an operator's entry says otherwise)."""
        why = self.sender_mismatch(caller, key[0], rec)
        if why is not None:
            return why
        if entry.record_czxid != key[1]:
            return "the ddl_history entry names another record"
        if (entry.schema, entry.table, entry.instance, entry.sql) != (rec.schema, rec.table, rec.instance, rec.sql):
            return "it differs from the ddl_history entry of its record"
        if (entry.status, entry.message) != (rec.status, rec.message):
            return f"its record was removed as {entry.status} ({entry.message or 'no message'}), not {rec.status}"
        return None

    def late_final_answer(self, key: RecordKey, name: str = "") -> tuple[bool, str] | None:
        """The answer to a final step whose record is gone, when its outcome is applied here already (the
        vanished record's settle, or catch-up, got there first; or its ddl_history entry `name` was written
        before our join loaded the table: a restarted process gets its predecessor's step late, perhaps
        after the table's next DDL, whose structure the load read); None: still to apply."""
        done = (key[1] in self.finished or self.superseded(key)
                or (name != "" and history_seq(name) <= self.joined_seq))
        return (True, "") if done else None

    # -- ddl_history --------------------------------------------------------------------------------------
    def restart(self, names: Sequence[str] | None = None) -> None:
        """A join has just reloaded everything: history before it needs no applying. `names`: the
        ddl_history children read just before that load began; entries after them (a DDL still in flight
        at the join may end after the load read its table) still apply. None: the position is taken at
        the first read."""
        ordered = history_order(list(names)) if names is not None else None
        self.history_seen = None if ordered is None else (history_seq(ordered[-1]) if ordered else -1)
        self.joined_seq = self.history_seen if self.history_seen is not None else -1

    def history_todo(self, names: Sequence[str]) -> list[str]:
        """The ddl_history entries to look at, oldest first. At the first read after a (re)join only the
        position is taken (the join loaded everything); entries whose record we applied are skipped."""
        ordered = history_order(list(names))
        if self.history_seen is None:
            self.history_seen = history_seq(ordered[-1]) if ordered else -1
            return []
        return [n for n in ordered if history_seq(n) > self.history_seen]

    def needs_apply(self, name: str) -> bool:
        """An entry whose record's outcome we have not applied (nor ran) yet."""
        return history_czxid(name) not in self.finished

    def entry_applies(self, entry: HistoryEntry) -> bool:
        """A read entry still to apply: its record's outcome not applied here meanwhile. An entry naming
        this instance is no exception: the DDLs this process decided itself are marked finished when
        their removal went through (the listener's ran_here), but one of an earlier incarnation of this
        name, or one taken from us (a reconciler, an operator's release, a lost decision's reload) was
        never applied here, and our join may have read its table while it still ran on a node."""
        return entry.record_czxid not in self.finished

    def on_history_applied(self, name: str, entry: HistoryEntry | None = None) -> None:
        """An entry is seen only once applied (or found not to apply): a failed reload is tried again."""
        seq = history_seq(name)
        if self.history_seen is None or seq > self.history_seen:
            self.history_seen = seq
        if entry is not None:
            self.entry_applied(entry)

    def entry_applied(self, entry: HistoryEntry) -> None:
        """The DDL of a ddl_history entry is applied here (its table reloaded after it)."""
        self.mark_finished(entry.record_czxid, self.paths.ddl_record(entry.schema, entry.table))


def ack_txns(paths: Paths, instance: str, rec: DdlRecord, czxid: int, ok: bool = True, message: str = "",
             meta_version: int = 0) -> list[Txn]:
    """A subscriber's ack of a record's status, naming the record (its czxid) and written only while the
    record is that DDL's (its owner znode is there). Two forms, tried in order until one goes through: the
    INIT ack is new (create, then set), a later one updates it (set, then create). If the first op
    (the owner check) fails with NoNode in both, the record is gone or another DDL's: nothing to ack."""
    path = paths.ddl_ack(rec.schema, rec.table, instance)
    data = Ack(rec.status, ok, message, meta_version, czxid).encode()
    owner = (Check(paths.ddl_owner(rec.schema, rec.table, rec.ddl_id), 0),) if rec.ddl_id else ()
    create = Txn("ack", owner + (Create(path, data, ephemeral=True),), czxid, rec.ddl_id)
    update = Txn("ack", owner + (SetData(path, data),), czxid, rec.ddl_id)
    return [create, update] if rec.status == INIT else [update, create]


def may_release(lock_owner: str, lock_record: int, czxid: int, owner: str | None = None) -> bool:
    """A local lock held for a peer's DDL is released for record `czxid` only if it is that record's
    (or names none), and, with `owner`, that instance's: by now it may be the next DDL's."""
    return (lock_record in (0, czxid)
            and (lock_owner == owner if owner is not None else lock_owner.startswith("instance:")))


__all__ = ["Gone", "GoneAction", "RecordKey", "Step", "SubscriberCore", "ack_txns", "may_release"]
