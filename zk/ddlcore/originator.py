"""The originator's decisions, one function per step of DESIGN.md §6, over a DDL's own identity.

    core = OriginatorCore(paths, instance, keys, sql, ddl_type, marker, created_at=time.time())
    while (key := core.next_to_lock()):  core.on_init(key, <commit core.init_txn(key, session, now)>)
    core.lease_holds(session, now, timeout) or core.may_run(session, lock_stats)   fencing
    core.start_running()                      the DDL goes to the backends; meanwhile INIT acks:
    tally = core.init_tally(online) ... core.on_init_acks(tally.outcome(...))
    core.end_mode(peer_on, init_outcome)      FAST: removal_txn(key, acks, status) decides and removes;
    core.decide_txn(key, status, msg) -> on_decided(...)     CLASSIC: decided, acked, then removed
    core.outcome_tally(status) ... core.on_outcome_acks(outcome)
    core.removal_txn(key, acks) -> on_removed(key, results, acks_now, owner_exists)
    core.cleanup(key, lock_stat, session)     what an ending originator may still touch

Every write is conditional on the DDL's identity: the owner znode created with the record (its path
carries the DDL's id) and the lock's creation zxid, so a stale originator (its lock released and taken
again by another DDL) fails every decide, ack and removal instead of touching the next DDL's record.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

from ..paths import Paths
from ..records import FAILED, INIT, SUCCESS, Ack, DdlLockInfo, DdlRecord, HistoryEntry
from .acks import AckOutcome, AckTally, Key
from .txn import Check, Create, Delete, Failure, SetData, Txn, failures, first_failure, went_through

LEASE_MAX_S = 1.0   # an answer from ZooKeeper this recent proves our session (and its locks) alive


class Phase(str, Enum):
    """Where one DDL is, seen from its originator."""

    LOCKING = "LOCKING"     # INIT transactions written one table after another
    INIT = "INIT"           # every table locked with an INIT record; fencing, then the backends
    RUNNING = "RUNNING"     # on the backends; the INIT acks come in meanwhile (they never gate the run)
    DECIDED = "DECIDED"     # SUCCESS/FAILED in ZooKeeper (classic end), its acks awaited
    DONE = "DONE"           # record, acks and lock removed with a ddl_history entry
    REFUSED = "REFUSED"     # nothing ran: a lock or syncMeta.lock was held, or ZooKeeper failed the INIT
    LOST = "LOST"           # the session or lock is gone: this originator decides nothing any more


class InitResult(str, Enum):
    """What one table's INIT transaction found."""

    LOCKED = "LOCKED"
    SYNC_META_HELD = "SYNC_META_HELD"   # an instance is loading metadata (joining)
    TABLE_BUSY = "TABLE_BUSY"           # another DDL holds the table's lock or record
    FAILED = "FAILED"                   # anything else (connection, auth): refused


class EndMode(str, Enum):
    """How the outcome is published."""

    FAST = "FAST"         # every target took INIT over the peer channel: one removal transaction decides
    CLASSIC = "CLASSIC"   # SUCCESS/FAILED written and acked in ZooKeeper, then removed


class Removal(str, Enum):
    """What a removal transaction did."""

    DONE = "DONE"           # removed, history appended
    RETRY = "RETRY"         # acks came or went meanwhile: read the ack names and send it again
    NOT_OURS = "NOT_OURS"   # the record is gone or another DDL's: touch nothing
    LOST = "LOST"           # failed and we cannot tell: the decision is lost, reconciliation ends it


class Cleanup(str, Enum):
    """What an ending originator does with one table it still holds."""

    REMOVE = "REMOVE"                     # decided: remove record, acks, lock (+ history)
    DECIDE_FAILED_THEN_REMOVE = "DECIDE_FAILED_THEN_REMOVE"   # still INIT (never ran): FAILED first
    DELETE_LOCK = "DELETE_LOCK"           # the lock is ours but the record is not (an operator removed it)
    LEAVE = "LEAVE"                       # not ours any more: a reconciler or the next DDL owns it


class Fence(str, Enum):
    """What a fencing read of the locks says about running the DDL now."""

    RUN = "RUN"                 # every lock is ours, and the read is recent enough to still prove it
    READ_AGAIN = "READ_AGAIN"   # the locks were ours, but the answer is too old to prove it (paused since?)
    LOST = "LOST"               # a lock is gone or another DDL's: the DDL must not run


class StaleActor(RuntimeError):
    """A step was asked of an originator in a phase that may not take it (a driver bug)."""


@dataclass
class OriginatorCore:
    """One DDL's life in ZooKeeper as its originator sees it: the state and the step functions."""

    paths: Paths
    instance: str
    keys: list[Key]
    sql: str
    ddl_type: str
    marker: str
    created_at: float = 0.0   # wall clock, from the driver (the core reads no clock)
    phase: Phase = Phase.LOCKING
    records: dict[Key, DdlRecord] = field(default_factory=dict)   # as last written by us
    versions: dict[Key, int] = field(default_factory=dict)        # the record's znode version we wrote
    czxids: dict[Key, int] = field(default_factory=dict)          # the record's (and lock's) creation zxid
    locked: list[Key] = field(default_factory=list)
    session: int | None = None     # the ZooKeeper session the INIT was written with
    lease_from: float = 0.0        # monotonic time the first INIT write was sent
    status: str = INIT             # the decision (SUCCESS/FAILED) once taken
    message: str = ""
    expected: frozenset[str] = frozenset()   # the other instances online right after INIT: they ack
    laggards: set[str] = field(default_factory=set)
    refusals: list[tuple[str, str]] = field(default_factory=list)          # could not lock at INIT
    unapplied: list[tuple[str, str]] = field(default_factory=list)         # could not apply the outcome
    ran: bool = False              # the DDL went to the backends

    # -- identity ---------------------------------------------------------------------------------
    @property
    def ddl_id(self) -> str:
        rec = DdlRecord(self.instance, "", "", "", "", marker=self.marker)
        return rec.ddl_id

    def record_of(self, key: Key) -> DdlRecord:
        rec = self.records.get(key)
        if rec is None:
            rec = DdlRecord(self.instance, key[0], key[1], self.ddl_type, self.sql, INIT, self.created_at,
                            marker=self.marker)
        return rec

    def owner_path(self, key: Key) -> str:
        return self.paths.ddl_owner(key[0], key[1], self.ddl_id)

    def own_ack(self, key: Key, status: str, meta_version: int = 0, ok: bool = True, message: str = "") -> tuple[str, bytes]:
        """Path and data of this instance's own ack of a status (written inside our transactions)."""
        return (self.paths.ddl_ack(key[0], key[1], self.instance),
                Ack(status, ok, message, meta_version, self.czxids.get(key, 0)).encode())

    # -- step 1: lock and INIT ----------------------------------------------------------------------
    def next_to_lock(self) -> Key | None:
        """The next table whose INIT transaction is to be written (None: all locked)."""
        if self.phase is not Phase.LOCKING:
            return None
        for key in self.keys:
            if key not in self.locked:
                return key
        return None

    def init_txn(self, key: Key, session: int | None, now: float = 0.0, meta_version: int = 0) -> Txn:
        """Lock, record, owner znode, ack folder and our own INIT ack, in one transaction that fails
        while an instance loads metadata (syncMeta.lock created and deleted in it) or the table is held.
        Its last result (our ack's stat) carries the transaction's zxid: the record's identity."""
        if self.phase is not Phase.LOCKING:
            raise StaleActor(f"init in phase {self.phase}")
        if not self.locked:
            self.session, self.lease_from = session, now
        rec = self.record_of(key)
        ack_path = self.paths.ddl_ack(key[0], key[1], self.instance)
        ack = Ack(INIT, True, "", meta_version, 0).encode()
        ops = (Create(self.paths.sync_meta_lock, b"", ephemeral=True),
               Delete(self.paths.sync_meta_lock),
               Create(self.paths.ddl_lock(*key), DdlLockInfo(self.instance, self.sql, self.created_at).encode(),
                      ephemeral=True),
               Create(self.paths.ddl_record(*key), rec.encode()),
               Create(self.owner_path(key)),
               Create(self.paths.ddl_acks(*key)),
               Create(ack_path, ack, ephemeral=True),
               SetData(ack_path, ack))
        return Txn("init", ops, 0, self.ddl_id)

    def on_init(self, key: Key, results: Sequence[Any]) -> InitResult:
        """Take in one table's INIT transaction results."""
        if went_through(results):
            self.locked.append(key)
            self.records[key] = self.record_of(key)
            self.versions[key] = 0
            self.czxids[key] = int(getattr(results[-1], "czxid", 0))
            if self.next_to_lock() is None:
                self.phase = Phase.INIT
            return InitResult.LOCKED
        self.phase = Phase.REFUSED
        first = first_failure(results)
        if first is not None and first[1] is Failure.NODE_EXISTS:
            if first[0] == 0:
                return InitResult.SYNC_META_HELD
            if first[0] in (2, 3):
                return InitResult.TABLE_BUSY
        return InitResult.FAILED

    # -- step 2: fencing before the backends ---------------------------------------------------------
    def lease_holds(self, session: int | None, now: float, session_timeout_s: float) -> bool:
        """Our INIT was heard on this session less than a third of its timeout ago (and at most
        LEASE_MAX_S): ZooKeeper cannot have expired it, so our locks stand without a read."""
        lease = min(session_timeout_s / 3, LEASE_MAX_S)
        return (self.phase is Phase.INIT and session is not None and session == self.session
                and now - self.lease_from < lease)

    def lock_is_ours(self, key: Key, lock: Any, session: int | None) -> bool:
        """A lock's stat (None: absent) is this DDL's lock: held by our INIT session and created in our
        INIT transaction (same czxid), not a later DDL's on the table."""
        return (lock is not None and session is not None and session == self.session
                and getattr(lock, "ephemeralOwner", None) == session
                and getattr(lock, "czxid", None) == self.czxids.get(key))

    def may_run(self, session: int | None, locks: Mapping[Key, Any]) -> bool:
        """Fencing: the DDL may go to the backends only while every lock read is ours; else LOST."""
        if self.phase is not Phase.INIT:
            return False
        if all(self.lock_is_ours(key, locks.get(key), session) for key in self.locked):
            return True
        self.phase = Phase.LOST
        return False

    def fence(self, session: int | None, locks: Mapping[Key, Any], read_sent_at: float, now: float,
              session_timeout_s: float) -> Fence:
        """may_run, with the read's age as a lease: an answer that says "ours" proves it only until the
        session could have expired after the read was sent (ZooKeeper expires it no earlier than its
        timeout after it last heard from us); an answer older than a third of it (at most LEASE_MAX_S),
        e.g. one that sat in the socket while this process was paused, must be read again."""
        if not self.may_run(session, locks):
            return Fence.LOST
        lease = min(session_timeout_s / 3, LEASE_MAX_S)
        return Fence.RUN if now - read_sent_at < lease else Fence.READ_AGAIN

    def refused_before_running(self) -> bool:
        """Every table locked and nothing sent to a node: a refusal now (a node unreachable, the table
        differing) is a FAILED outcome the peers hear like any other, before the client does."""
        return self.phase is Phase.INIT and not self.ran

    def start_running(self) -> None:
        """The DDL goes to the backends (INIT acks keep coming meanwhile)."""
        if self.phase is not Phase.INIT:
            raise StaleActor(f"run in phase {self.phase}")
        self.phase = Phase.RUNNING
        self.ran = True

    # -- step 3: INIT acks (they overlap the backends' execution) ---------------------------------------
    def init_steps(self) -> dict[Key, tuple[DdlRecord, int]]:
        """The INIT step of each record with its identity, as handed to the peers."""
        return {key: (self.records[key], self.czxids[key]) for key in self.locked}

    def init_tally(self, online: frozenset[str] | set[str]) -> AckTally:
        """Who must ack INIT: the instances online right after the INIT write (a joiner drains the
        record before it goes online), not us."""
        self.expected = frozenset(online) - {self.instance}
        return AckTally(tuple(self.locked), INIT, dict(self.czxids), self.expected)

    def on_init_acks(self, outcome: AckOutcome) -> None:
        """INIT laggards are not waited for again (they catch up from ddl_history); refusals are reported."""
        self.laggards |= set(outcome.laggards)
        self.refusals = list(outcome.refusals)

    def targets(self) -> frozenset[str]:
        """Who must apply the outcome: those online at INIT but not the INIT laggards."""
        return self.expected - self.laggards

    def end_mode(self, peer_on: bool, init: AckOutcome) -> EndMode:
        """FAST when every target took INIT over the peer channel (they take the outcome there too)."""
        return EndMode.FAST if peer_on and self.targets() <= init.by_peer else EndMode.CLASSIC

    def outcome_steps(self, status: str, message: str = "") -> dict[Key, tuple[DdlRecord, int]]:
        """The decided record of each table with its identity, as handed to the peers."""
        return {key: (self.records[key].with_status(status, message), self.czxids[key]) for key in self.locked}

    def outcome_tally(self, status: str) -> AckTally:
        return AckTally(tuple(self.locked), status, dict(self.czxids), self.targets())

    def on_outcome_acks(self, outcome: AckOutcome) -> None:
        """Outcome laggards and refusals (an instance whose reload failed) are the client's warning:
        they reload the table from ddl_history or the backends on their own."""
        self.laggards |= set(outcome.laggards)
        self.unapplied = list(outcome.refusals)

    # -- step 4: the decision ------------------------------------------------------------------------
    def decide_txn(self, key: Key, status: str, message: str = "", meta_version: int = 0) -> Txn:
        """SUCCESS/FAILED written only while the lock and the owner znode are this DDL's (ZooKeeper's
        check compares versions only, and any new record or lock has version 0: the owner znode's path
        carries our id), with our own ack of it in the same write."""
        if self.phase is Phase.DONE or key not in self.locked:
            raise StaleActor(f"decide {key} in phase {self.phase}")
        new = self.records[key].with_status(status, message)
        ack_path, ack = self.own_ack(key, status, meta_version)
        ops = (Check(self.paths.ddl_lock(*key), 0),
               Check(self.owner_path(key), 0),
               SetData(self.paths.ddl_record(*key), new.encode(), self.versions[key]),
               SetData(ack_path, ack))
        return Txn("decide", ops, self.czxids[key], self.ddl_id)

    def on_decided(self, key: Key, status: str, message: str, results: Sequence[Any]) -> bool:
        """Take in a decide transaction; False: the lock or record is not ours any more (LOST)."""
        if not went_through(results):
            self.phase = Phase.LOST
            return False
        self.records[key] = self.records[key].with_status(status, message)
        self.versions[key] += 1
        self.status, self.message = status, message
        if self.phase in (Phase.INIT, Phase.RUNNING) and all(self.records[k].status == status for k in self.locked):
            self.phase = Phase.DECIDED
        return True

    # -- step 5: removal (the end) --------------------------------------------------------------------
    def history_entry(self, key: Key, rec: DdlRecord, details: Mapping | None = None,
                      finished_at: float = 0.0) -> HistoryEntry:
        d = details or {}
        return HistoryEntry(key[0], key[1], self.instance, self.sql, rec.status, self.czxids.get(key, 0),
                            finished_at or self.created_at, message=rec.message, user=d.get("user", ""),
                            nodes=tuple(d.get("nodes", ())), phases_ms=d.get("phases_ms", {}),
                            meta_version=d.get("meta_version", 0), started_at=d.get("started_at", 0.0),
                            failed_nodes=tuple(d.get("failed_nodes", ())), before=d.get("before", {}),
                            repair_of=d.get("repair_of", 0))

    def removal_txn(self, key: Key, acks: Sequence[str], status: str | None = None, message: str = "",
                    version: int = -1, details: Mapping | None = None, finished_at: float = 0.0) -> Txn:
        """Acks, ack folder, owner znode, record (at `version`, -1 any), lock, and a ddl_history entry,
        in one transaction: deleting the owner znode fails unless the record is this DDL's, so only
        its holder can remove it. `status` decides it in the same write (the fast end)."""
        if self.phase is Phase.DONE or key not in self.locked:
            raise StaleActor(f"remove {key} in phase {self.phase}")
        rec = self.records[key]
        if status is not None:
            rec = rec.with_status(status, message)
        entry = self.history_entry(key, rec, details, finished_at)
        ops: list = [Delete(self.paths.ddl_ack(key[0], key[1], name)) for name in acks]
        ops += [Delete(self.paths.ddl_acks(*key)),
                Delete(self.owner_path(key)),
                Delete(self.paths.ddl_record(*key), version),
                Delete(self.paths.ddl_lock(*key)),
                Create(self.paths.history_entry_prefix(entry.record_czxid), entry.encode(), sequence=True)]
        return Txn("remove", tuple(ops), self.czxids.get(key, 0), self.ddl_id)

    def on_removed(self, key: Key, results: Sequence[Any], acks_now: Sequence[str] | None = None,
                   owner_exists: bool | None = None, status: str | None = None, message: str = "") -> Removal:
        """Take in a removal. A failure on a not-empty ack folder is retried with the ack names read
        again while our own ack is among them (then the record is still ours); a missing owner znode
        means another actor ended it (reconciled, or an operator): nothing of ours is left to touch."""
        if went_through(results):
            if status is not None:
                self.status, self.message = status, message
            self.locked.remove(key)
            self.records.pop(key, None)
            if not self.locked and self.phase in (Phase.RUNNING, Phase.DECIDED):
                self.phase = Phase.DONE
            return Removal.DONE
        failed = failures(results)
        if owner_exists is False:
            self.locked.remove(key)   # another actor ended it: nothing of it is ours to touch
            self.records.pop(key, None)
            self.lost()
            return Removal.NOT_OURS
        if failed and failed[0] is Failure.NOT_EMPTY and (acks_now is None or self.instance in acks_now):
            return Removal.RETRY   # an ack came meanwhile (our own is there: the record is still ours)
        if owner_exists is True and failed and failed[0] in (Failure.NO_NODE, Failure.NOT_EMPTY):
            return Removal.RETRY   # an ack came or went meanwhile; the record is still ours
        self.lost()
        return Removal.LOST

    # -- the end, whatever happened ---------------------------------------------------------------------
    def cleanup(self, key: Key, lock: Any, session: int | None, owner_exists: bool | None = None) -> Cleanup:
        """What an ending originator may still do with a table: only while the lock read is this DDL's
        (our session, our czxid) does it touch anything; a record still INIT is decided FAILED first;
        with the record gone (owner znode absent) only the lock is left to release."""
        if key not in self.locked or not self.lock_is_ours(key, lock, session):
            return Cleanup.LEAVE
        if owner_exists is False:
            return Cleanup.DELETE_LOCK
        if self.records[key].status == INIT:
            return Cleanup.DECIDE_FAILED_THEN_REMOVE
        return Cleanup.REMOVE

    def lock_release_txn(self, key: Key, lock: Any) -> Txn:
        """Our lock alone, at the version read (cleanup said DELETE_LOCK). ZooKeeper cannot condition a
        delete on a czxid: should the lock be replaced between the read and this write, the next DDL
        loses its lock (its decide then fails and it is reconciled), never two DDLs run at once: its
        record still blocks any other INIT."""
        return Txn("release-lock", (Delete(self.paths.ddl_lock(*key), int(getattr(lock, "version", -1))),),
                   self.czxids.get(key, 0), self.ddl_id)

    def on_lock_released(self, key: Key, results: Sequence[Any]) -> bool:
        if went_through(results) and key in self.locked:
            self.locked.remove(key)
            self.records.pop(key, None)
            return True
        return False

    def lost(self) -> None:
        """The driver learned (session gone, ZooKeeper failed us) that the decision is not ours; what it
        may still clean up, cleanup() says (only tables whose lock is provably still this DDL's)."""
        if self.phase not in (Phase.DONE, Phase.REFUSED):
            self.phase = Phase.LOST

    def decided_status(self, success: bool) -> str:
        return SUCCESS if success else FAILED


__all__ = ["Cleanup", "EndMode", "Fence", "InitResult", "LEASE_MAX_S", "OriginatorCore", "Phase", "Removal", "StaleActor"]
