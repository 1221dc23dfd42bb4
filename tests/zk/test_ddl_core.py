"""The DDL protocol core without sockets: each step's decision, over a small in-memory ZooKeeper log
(multi-op transactions with version checks, ephemeral nodes, creation zxids). Stale actors fail every
write that decides, acks or cleans up; late acks and duplicated events change nothing."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError, RolledBackError

from zk.ddlcore import (AckTally, Check, Cleanup, Create, Delete, EndMode, Fence, GoneAction, InitResult, OriginatorCore,
                        Phase, Removal, SetData, Step, SubscriberCore, Txn, ack_counts, went_through)
from zk.ddlcore import reconciler as rc
from zk.ddlcore.release import release_refusal, release_txn
from zk.paths import Paths, parse_table_node
from zk.records import FAILED, INIT, MARKER_PREFIX, SUCCESS, Ack, DdlRecord, HistoryEntry

PATHS = Paths("/dble", "c1")
KEY = ("s1", "t1")


@dataclass
class Stat:
    czxid: int
    version: int
    ephemeralOwner: int


class Log:
    """ZooKeeper's data tree as far as the protocol uses it: atomic multi-ops, versions, czxids."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, Stat]] = {}
        self.zxid = 100
        self.seq = 0

    def _children(self, path: str) -> list[str]:
        return [p for p in self.nodes if p.rsplit("/", 1)[0] == path]

    def commit(self, txn: Txn, session: int) -> list:
        """All or nothing; the failing op gets its error, the others RolledBackError."""
        nodes = dict(self.nodes)
        self.zxid += 1
        results: list = []
        for op in txn.ops:
            got = nodes.get(op.path)
            if isinstance(op, Create):
                path = op.path
                if op.sequence:
                    self.seq += 1
                    path = f"{op.path}{self.seq:010d}"
                if path in nodes:
                    results.append(NodeExistsError())
                    break
                nodes[path] = (op.data, Stat(self.zxid, 0, session if op.ephemeral else 0))
                results.append(path)
            elif isinstance(op, Delete):
                if got is None:
                    results.append(NoNodeError())
                    break
                if op.version not in (-1, got[1].version):
                    results.append(BadVersionError())
                    break
                if any(p.rsplit("/", 1)[0] == op.path for p in nodes):
                    results.append(NotEmptyError())
                    break
                del nodes[op.path]
                results.append(True)
            elif isinstance(op, Check):
                if got is None:
                    results.append(NoNodeError())
                    break
                if op.version not in (-1, got[1].version):
                    results.append(BadVersionError())
                    break
                results.append(True)
            elif isinstance(op, SetData):
                if got is None:
                    results.append(NoNodeError())
                    break
                if op.version not in (-1, got[1].version):
                    results.append(BadVersionError())
                    break
                st = Stat(got[1].czxid, got[1].version + 1, got[1].ephemeralOwner)
                nodes[op.path] = (op.data, st)
                results.append(st)
        if len(results) == len(txn.ops) and went_through(results):
            self.nodes = nodes
            return results
        return [r if isinstance(r, Exception) else RolledBackError() for r in results] + \
               [RolledBackError()] * (len(txn.ops) - len(results))

    def expire(self, session: int) -> None:
        """A session ends: its ephemeral nodes go."""
        self.nodes = {p: v for p, v in self.nodes.items() if v[1].ephemeralOwner != session}

    def stat(self, path: str) -> Stat | None:
        got = self.nodes.get(path)
        return got[1] if got else None

    def record(self, key=KEY) -> DdlRecord | None:
        got = self.nodes.get(PATHS.ddl_record(*key))
        return DdlRecord.decode(got[0]) if got else None

    def history(self) -> list[HistoryEntry]:
        return [HistoryEntry.decode(d) for p, (d, _) in sorted(self.nodes.items()) if p.startswith(PATHS.history + "/")]

    def operator_release(self, key=KEY) -> None:
        """kill @@ddl_lock force: the record (recursively) and the lock go."""
        rec = PATHS.ddl_record(*key)
        self.nodes = {p: v for p, v in self.nodes.items() if not (p == rec or p.startswith(rec + "/"))}
        self.nodes.pop(PATHS.ddl_lock(*key), None)


def fresh_log() -> Log:
    log = Log()
    for path in (PATHS.base, PATHS.lock, PATHS.ddl_locks, PATHS.ddl, PATHS.history, PATHS.online):
        log.nodes[path] = (b"", Stat(1, 0, 0))
    return log


def originator(name="i1", sql="ALTER TABLE t1 ADD c INT", marker="a1", keys=(KEY,)) -> OriginatorCore:
    return OriginatorCore(PATHS, name, list(keys), sql, "ALTER", f"{MARKER_PREFIX}{marker}", created_at=1000.0)


def lock_all(core: OriginatorCore, log: Log, session: int, now: float = 0.0) -> list[InitResult]:
    out = []
    while (key := core.next_to_lock()) is not None:
        out.append(core.on_init(key, log.commit(core.init_txn(key, session, now), session)))
    return out


def locks_read(core: OriginatorCore, log: Log) -> dict:
    return {key: log.stat(PATHS.ddl_lock(*key)) for key in core.keys}


def acks_of(log: Log, key=KEY) -> list[str]:
    return [p.rsplit("/", 1)[1] for p in log._children(PATHS.ddl_acks(*key))]


def subscriber_ack(log: Log, name: str, session: int, rec: DdlRecord, czxid: int) -> list:
    """A subscriber's ack as the listener writes it: conditional on the record's owner znode."""
    path = PATHS.ddl_ack(rec.schema, rec.table, name)
    data = Ack(rec.status, True, "", 0, czxid).encode()
    owner = Check(PATHS.ddl_owner(rec.schema, rec.table, rec.ddl_id), 0)
    op = Create(path, data, ephemeral=True) if path not in log.nodes else SetData(path, data)
    return log.commit(Txn("ack", (owner, op), czxid, rec.ddl_id), session)


# -- originator -----------------------------------------------------------------------------------------

def test_a_ddl_runs_decides_and_removes_everything_it_wrote():
    log = fresh_log()
    core = originator()
    assert lock_all(core, log, session=1) == [InitResult.LOCKED]
    assert core.phase is Phase.INIT and core.czxids[KEY] == log.stat(PATHS.ddl_record(*KEY)).czxid
    assert log.stat(PATHS.ddl_lock(*KEY)).czxid == core.czxids[KEY]   # lock and record: one identity
    assert core.may_run(1, locks_read(core, log))
    core.start_running()
    tally = core.init_tally({"i1", "i2"})
    assert tally.expected == {"i2"}
    subscriber_ack(log, "i2", 2, log.record(), core.czxids[KEY])
    tally.on_ack(KEY, "i2", Ack.decode(log.nodes[PATHS.ddl_ack(*KEY, "i2")][0]))
    assert tally.complete({"i1", "i2"})
    core.on_init_acks(tally.outcome())
    assert core.end_mode(True, tally.outcome()) is EndMode.CLASSIC   # i2 acked through ZooKeeper only
    assert core.on_decided(KEY, SUCCESS, "", log.commit(core.decide_txn(KEY, SUCCESS), 1))
    assert core.phase is Phase.DECIDED and log.record().status == SUCCESS
    txn = core.removal_txn(KEY, acks_of(log))
    assert core.on_removed(KEY, log.commit(txn, 1)) is Removal.DONE
    assert core.phase is Phase.DONE
    left = [p for p in log.nodes if p.startswith((PATHS.ddl + "/", PATHS.ddl_locks + "/"))]
    assert left == []
    [entry] = log.history()
    assert (entry.status, entry.record_czxid) == (SUCCESS, core.czxids[KEY])


def test_a_held_table_or_a_joining_instance_refuses_the_ddl_before_anything_runs():
    log = fresh_log()
    first = originator()
    lock_all(first, log, 1)
    second = originator("i2", marker="b2")
    assert lock_all(second, log, 2) == [InitResult.TABLE_BUSY]
    assert second.phase is Phase.REFUSED and not second.may_run(2, locks_read(second, log))
    log.nodes[PATHS.sync_meta_lock] = (b"i3", Stat(5, 0, 3))
    third = originator("i3", marker="c3", keys=[("s1", "t2")])
    assert lock_all(third, log, 3) == [InitResult.SYNC_META_HELD]


def test_an_originator_whose_lock_was_released_and_retaken_cannot_decide_ack_or_clean_up():
    """kill @@ddl_lock force while i1's DDL runs, then i2's DDL on the table: i1 (stale) fails every
    write, and i2's record is untouched."""
    log = fresh_log()
    stale = originator("i1", marker="a1")
    lock_all(stale, log, 1)
    assert stale.may_run(1, locks_read(stale, log))
    stale.start_running()
    log.operator_release()
    fresh = originator("i2", marker="b2")
    assert lock_all(fresh, log, 2) == [InitResult.LOCKED]
    before = dict(log.nodes)
    # deciding: the owner znode is the new DDL's (the lock check alone, version 0, would pass)
    assert not stale.on_decided(KEY, SUCCESS, "", log.commit(stale.decide_txn(KEY, SUCCESS), 1))
    assert stale.phase is Phase.LOST
    # removal and cleanup: refused by phase, and by the lock's identity
    assert stale.cleanup(KEY, log.stat(PATHS.ddl_lock(*KEY)), 1) is Cleanup.LEAVE
    assert log.nodes == before and log.record().instance == "i2"
    # the same stale removal written anyway (a driver that ignores the phase) fails on the owner znode
    stale.phase = Phase.DECIDED
    assert not went_through(log.commit(stale.removal_txn(KEY, acks_of(log)), 1))
    assert log.nodes == before


def test_an_originator_frozen_past_its_session_may_not_run_the_ddl():
    log = fresh_log()
    core = originator()
    lock_all(core, log, session=1, now=10.0)
    assert core.lease_holds(1, 10.2, session_timeout_s=6)   # INIT heard 0.2 s ago on this session
    assert not core.lease_holds(1, 12.0, session_timeout_s=6)
    log.expire(1)
    other = originator("i2", marker="b2")
    lock_all(other, log, 2)   # the record is still there: the table stays refused to others
    assert other.phase is Phase.REFUSED
    assert not core.may_run(7, locks_read(core, log))   # a new session: the lock is gone
    assert core.phase is Phase.LOST


def test_a_fencing_answer_too_old_to_prove_the_lock_is_read_again():
    """The locks read as ours, but the answer sat (paused process) past a third of the session timeout:
    the session may have expired since, so it proves nothing."""
    log = fresh_log()
    core = originator()
    lock_all(core, log, 1, now=0.0)
    locks = locks_read(core, log)
    assert core.fence(1, locks, read_sent_at=50.0, now=50.1, session_timeout_s=6) is Fence.RUN
    assert core.fence(1, locks, read_sent_at=50.0, now=52.5, session_timeout_s=6) is Fence.READ_AGAIN
    assert core.phase is Phase.INIT
    log.expire(1)
    assert core.fence(1, locks_read(core, log), 60.0, 60.0, 6) is Fence.LOST and core.phase is Phase.LOST


def test_an_originator_whose_record_an_operator_removed_releases_only_its_own_lock():
    log = fresh_log()
    core = originator()
    lock_all(core, log, 1)
    rec = PATHS.ddl_record(*KEY)
    log.nodes = {p: v for p, v in log.nodes.items() if not (p == rec or p.startswith(rec + "/"))}
    assert not core.on_decided(KEY, FAILED, "", log.commit(core.decide_txn(KEY, FAILED), 1))
    lock = log.stat(PATHS.ddl_lock(*KEY))
    assert core.cleanup(KEY, lock, 1, owner_exists=False) is Cleanup.DELETE_LOCK
    assert core.on_lock_released(KEY, log.commit(core.lock_release_txn(KEY, lock), 1))
    assert log.stat(PATHS.ddl_lock(*KEY)) is None and core.locked == []


def running_with_peer_acked(log):
    """An originator running its DDL whose one peer (i2) acked INIT over the peer channel."""
    core = originator()
    lock_all(core, log, 1)
    core.may_run(1, locks_read(core, log))
    core.start_running()
    tally = core.init_tally({"i1", "i2"})
    tally.on_peer_answer(KEY, "i2", True, "")
    core.on_init_acks(tally.outcome())
    return core, tally


def test_the_fast_end_decides_and_removes_in_one_transaction_and_retries_on_new_acks():
    log = fresh_log()
    core, tally = running_with_peer_acked(log)
    assert core.end_mode(True, tally.outcome()) is EndMode.FAST
    assert core.end_mode(False, tally.outcome()) is EndMode.CLASSIC   # peer channel off here
    subscriber_ack(log, "i2", 2, log.record(), core.czxids[KEY])     # a late ZooKeeper ack meanwhile
    txn = core.removal_txn(KEY, [core.instance], SUCCESS, version=core.versions[KEY])
    assert core.on_removed(KEY, log.commit(txn, 1), acks_now=acks_of(log), status=SUCCESS) is Removal.RETRY
    txn = core.removal_txn(KEY, acks_of(log), SUCCESS, version=core.versions[KEY])
    assert core.on_removed(KEY, log.commit(txn, 1), status=SUCCESS) is Removal.DONE
    assert core.phase is Phase.DONE and log.history()[0].status == SUCCESS


def test_an_ending_originator_decides_failed_first_when_it_never_ran():
    log = fresh_log()
    core = originator()
    lock_all(core, log, 1)
    assert core.cleanup(KEY, log.stat(PATHS.ddl_lock(*KEY)), 1) is Cleanup.DECIDE_FAILED_THEN_REMOVE
    assert core.cleanup(KEY, log.stat(PATHS.ddl_lock(*KEY)), 9) is Cleanup.LEAVE   # another session
    assert core.on_decided(KEY, FAILED, "gave up", log.commit(core.decide_txn(KEY, FAILED, "gave up"), 1))
    assert core.cleanup(KEY, log.stat(PATHS.ddl_lock(*KEY)), 1) is Cleanup.REMOVE


def test_two_tables_lock_in_order_and_a_busy_second_table_refuses():
    log = fresh_log()
    other = originator("i2", marker="b2", keys=[("s1", "t2")])
    lock_all(other, log, 2)
    core = originator(keys=[KEY, ("s1", "t2")])
    assert lock_all(core, log, 1) == [InitResult.LOCKED, InitResult.TABLE_BUSY]
    assert core.locked == [KEY]   # what it must clean up
    assert core.cleanup(KEY, log.stat(PATHS.ddl_lock(*KEY)), 1) is Cleanup.DECIDE_FAILED_THEN_REMOVE


# -- acks -------------------------------------------------------------------------------------------------

def test_a_late_ack_for_the_previous_record_does_not_count():
    assert ack_counts(Ack(INIT, record=7), INIT, 7)
    assert not ack_counts(Ack(INIT, record=6), INIT, 7)     # the table's previous DDL
    assert not ack_counts(Ack(INIT, record=0), INIT, 7)     # an ack with no identity
    assert not ack_counts(Ack(SUCCESS, record=7), INIT, 7)  # another status
    tally = AckTally((KEY,), SUCCESS, {KEY: 7}, frozenset({"i2", "i3"}))
    assert not tally.on_ack(KEY, "i2", Ack(SUCCESS, record=6))
    assert tally.waiting({"i1", "i2", "i3"}) == {"i2", "i3"}
    assert tally.on_ack(KEY, "i2", Ack(SUCCESS, record=7))
    assert not tally.on_ack(KEY, "i2", Ack(SUCCESS, record=7))   # counted once
    assert not tally.on_ack(KEY, "i9", Ack(SUCCESS, record=7))   # not expected (joined later)
    assert tally.waiting({"i1", "i2"}) == frozenset()            # i3 went offline: not waited for
    assert tally.outcome({"i1", "i2", "i3"}).laggards == ("i3",)


def test_a_late_ack_write_for_the_previous_record_is_refused_by_zookeeper():
    """A subscriber acking record A after A ended and B began on the table: its write fails."""
    log = fresh_log()
    a = originator("i1", marker="a1")
    lock_all(a, log, 1)
    rec_a, czxid_a = log.record(), a.czxids[KEY]
    a.may_run(1, locks_read(a, log))
    a.start_running()
    a.on_decided(KEY, FAILED, "", log.commit(a.decide_txn(KEY, FAILED), 1))
    a.on_removed(KEY, log.commit(a.removal_txn(KEY, acks_of(log)), 1))
    b = originator("i1", marker="b1")
    lock_all(b, log, 1)
    assert not went_through(subscriber_ack(log, "i2", 2, rec_a, czxid_a))
    assert acks_of(log) == ["i1"]


def test_refusals_and_peer_answers_are_reported():
    tally = AckTally((KEY,), INIT, {KEY: 7}, frozenset({"i2", "i3"}))
    assert not tally.on_peer_answer(KEY, "i2", None, "not ready")   # ask ZooKeeper instead
    assert tally.on_peer_answer(KEY, "i2", False, "locked here")
    assert tally.on_ack(KEY, "i3", Ack(INIT, ok=True, record=7))
    out = tally.outcome()
    assert out.refusals == (("i2", "locked here"),) and out.by_peer == {"i2"}


# -- subscriber ----------------------------------------------------------------------------------------------

def test_a_duplicated_watch_event_is_harmless():
    sub = SubscriberCore(PATHS, "i2")
    rec = DdlRecord("i1", "s1", "t1", "ALTER", "ALTER ...", INIT, marker=f"{MARKER_PREFIX}a1")
    key = (PATHS.ddl_record(*KEY), 7)
    assert sub.step_for(key, rec) is Step.LOCK
    sub.on_handled(key, INIT, True, "")
    assert sub.step_for(key, rec) is None                  # the same event again
    assert sub.seen_answer(key, rec) == (True, "")
    done = rec.with_status(SUCCESS)
    assert sub.step_for(key, done) is Step.REFRESH
    sub.on_handled(key, SUCCESS, True, "")
    assert sub.step_for(key, done) is None
    assert sub.step_for(key, rec) is None                  # a late INIT after its outcome
    assert sub.step_for((key[0], 8), rec) is Step.LOCK     # the table's next DDL is new


def test_own_records_are_left_to_the_originator_unless_reconciled():
    sub = SubscriberCore(PATHS, "i1")
    rec = DdlRecord("i1", "s1", "t1", "ALTER", "x", INIT)
    assert sub.step_for(("p", 1), rec) is None
    assert sub.step_for(("p", 1), rec.with_status(FAILED, "", "i2")) is Step.REFRESH


def test_a_vanished_record_is_released_or_settled_and_a_peer_outcome_wins_the_race():
    sub = SubscriberCore(PATHS, "i2")
    k1, k2 = (PATHS.ddl_record("s1", "t1"), 7), (PATHS.ddl_record("s1", "t2"), 9)
    sub.on_handled(k1, SUCCESS, True, "")
    sub.on_handled(k2, INIT, True, "")
    gone = {g.key: g.action for g in sub.on_pass(known=[k1, k2], seen=[])}
    assert gone == {k1: GoneAction.RELEASE, k2: GoneAction.SETTLE}
    assert sub.on_pass(known=[k1, k2], seen=[]) == []    # the same pass again: nothing more
    assert sub.settle(9)                                 # reload due; only a reload that worked marks it
    sub.mark_finished(9, k2[0])
    assert not sub.settle(9)


def test_an_outcome_whose_reload_failed_is_applied_again():
    """A subscriber whose reload after SUCCESS failed (a node unreachable) answered ok=false: the
    record's end asks for a reload, and its ddl_history entry still applies until one worked."""
    sub = SubscriberCore(PATHS, "i2")
    key = (PATHS.ddl_record(*KEY), 7)
    rec = DdlRecord("i1", "s1", "t1", "ALTER", "x", SUCCESS)
    sub.history_todo([])
    assert sub.step_for(key, rec) is Step.REFRESH
    sub.on_handled(key, SUCCESS, False, "refresh failed: dn1 unreachable")
    assert sub.step_for(key, rec) is None          # not retried while the record is there
    assert sub.needs_apply("h-7-0000000001")
    [gone] = sub.on_pass(known=[key], seen=[])
    assert gone.action is GoneAction.SETTLE and sub.settle(7)
    assert sub.history_todo(["h-7-0000000001"]) == ["h-7-0000000001"] and sub.needs_apply("h-7-0000000001")


def test_outcome_refusals_reach_the_client_as_a_warning():
    core = originator()
    core.on_outcome_acks(AckTally((KEY,), SUCCESS, {KEY: 7}, frozenset({"i2"}), refusals=[("i2", "dn1 down")]).outcome())
    assert core.unapplied == [("i2", "dn1 down")] and not core.laggards


def test_history_is_marked_seen_only_once_applied():
    sub = SubscriberCore(PATHS, "i2")
    assert sub.history_todo(["h-5-0000000001"]) == []   # first read after a join: position only
    names = ["h-5-0000000001", "h-7-0000000002", "h-0-0000000003"]
    todo = sub.history_todo(names)
    assert todo == ["h-7-0000000002", "h-0-0000000003"]
    assert sub.needs_apply("h-7-0000000002")
    # the reload of h-7 failed: nothing marked, the next pass offers it again
    assert sub.history_todo(names) == todo
    entry = HistoryEntry("s1", "t1", "i1", "x", SUCCESS, 7)
    assert sub.entry_applies(entry)
    sub.on_history_applied("h-7-0000000002", entry)
    assert sub.history_todo(names) == ["h-0-0000000003"]
    assert not sub.needs_apply("h-7-0000000002")
    sub.on_history_applied("h-0-0000000003", HistoryEntry("s1", "t1", "i1", "x", FAILED, 0))
    assert sub.history_todo(names) == [] and 0 not in sub.finished   # czxid 0 is never "applied"


def test_history_written_after_the_join_read_it_still_applies():
    """A join reads ddl_history just before it loads metadata: an entry written after that (a DDL still in
    flight when the join's drain gave up waiting, ended after the load read its table; simulator seed
    13000014570 before the fix) is applied, not skipped as the position of the first catch-up read."""
    sub = SubscriberCore(PATHS, "i2")
    sub.restart(["h-5-0000000001"])
    names = ["h-5-0000000001", "h-14-0000000002"]
    assert sub.history_todo(names) == ["h-14-0000000002"] and sub.needs_apply("h-14-0000000002")
    sub.restart([])   # an empty history before the load: every entry after it applies
    assert sub.history_todo(names) == names
    sub.restart()     # no names: the first read only takes the position
    assert sub.history_todo(names) == []


def test_history_entry_naming_this_instance_applies_unless_run_here():
    """An entry naming our instance is skipped only when this process ran (or applied) its record: one of
    an earlier incarnation, reconciled by a survivor after our join read the table while the ALTER still
    ran on a node, is applied (simulator seeds 62000003446 and 62000011133 before the fix)."""
    sub = SubscriberCore(PATHS, "i1")
    assert sub.entry_applies(HistoryEntry("s1", "t1", "i1", "x", FAILED, 21))   # a predecessor's, reconciled
    assert sub.entry_applies(HistoryEntry("s1", "t1", "i1", "x", FAILED, 0))    # a lost decision's reload
    sub.mark_finished(30, PATHS.ddl_record("s1", "t1"))   # the listener's ran_here: our originator removed record 30 itself
    assert not sub.entry_applies(HistoryEntry("s1", "t1", "i1", "x", SUCCESS, 30))


def test_a_peer_step_is_checked_against_the_live_record():
    sub = SubscriberCore(PATHS, "i2")
    rec = DdlRecord("i1", "s1", "t1", "ALTER", "x", INIT, 5.0, marker=f"{MARKER_PREFIX}a1")
    path = PATHS.ddl_record(*KEY)
    assert sub.peer_mismatch("i1", path, rec.with_status(SUCCESS), rec) is None
    assert "originator" in sub.peer_mismatch("i3", path, rec, rec)
    assert "no such record" in sub.peer_mismatch("i1", path, rec, None)
    other = DdlRecord("i1", "s1", "t1", "ALTER", "y", INIT, 6.0, marker=f"{MARKER_PREFIX}b1")
    assert "differs" in sub.peer_mismatch("i1", path, rec, other)
    assert not sub.takes_peer_steps(rec, ready=False)
    assert sub.ack_due((path, 7), INIT, 7) is False
    sub.on_handled((path, 7), INIT, True, "")
    assert sub.ack_due((path, 7), INIT, 7) and not sub.ack_due((path, 7), INIT, 8)


def test_a_final_step_whose_record_is_gone_is_checked_against_the_deciding_removals_history_entry():
    """Issue 17: a subscriber whose watch saw the fast end's removal before the final step came over the peer
    channel applies the step from the ddl_history entry that removal wrote (not "no such record", which made
    it a laggard the client's OK did not wait for); an entry the step does not match is not its decision."""
    log = fresh_log()
    core, tally = running_with_peer_acked(log)
    [(step, czxid)] = core.outcome_steps(SUCCESS, "").values()
    path = PATHS.ddl_record(*KEY)
    key = (path, czxid)
    assert core.on_removed(KEY, log.commit(core.removal_txn(KEY, [core.instance], SUCCESS, version=core.versions[KEY]),
                                           1), status=SUCCESS) is Removal.DONE
    names = [p.rsplit("/", 1)[1] for p in log._children(PATHS.history)]
    sub = SubscriberCore(PATHS, "i2")
    name = sub.late_final(key, step, ["h-3-0000000001", *names])
    assert name in names
    [entry] = log.history()
    assert sub.late_final_mismatch("i1", key, step, entry) is None
    assert "originator" in sub.late_final_mismatch("i3", key, step, entry)
    assert sub.late_final((path, czxid + 1), step, names) is None                 # no entry of that record
    assert sub.late_final(key, step.with_status(INIT), names) is None             # not a final step
    assert "not SUCCESS" in sub.late_final_mismatch("i1", key, step, dataclasses.replace(
        entry, status=FAILED, message="reconciled"))                              # another actor's decision
    assert "differs" in sub.late_final_mismatch("i1", key, step, dataclasses.replace(entry, sql="y"))
    assert sub.late_final_answer(key) is None     # still to apply; then settled or applied: answered ok
    sub.mark_finished(czxid, path)
    assert sub.late_final_answer(key) == (True, "") and not sub.needs_apply(name)


def test_a_final_step_older_than_the_tables_newest_outcome_changes_nothing():
    """Issue 17 (session 14's long run): a restarted instance got its predecessor's final step over the peer
    channel after the table's next DDL's outcome; applying that step's older texts served the structure from
    before the next DDL for good. A step of a record older than the newest outcome applied for its table is
    answered as done, whichever way it comes (live record, gone record, a pass)."""
    sub = SubscriberCore(PATHS, "i2")
    path = PATHS.ddl_record(*KEY)
    old = DdlRecord("i1", "s1", "t1", "ALTER", "add c4", SUCCESS, 5.0, marker=f"{MARKER_PREFIX}a1")
    new = DdlRecord("i3", "s1", "t1", "ALTER", "add c2", SUCCESS, 6.0, marker=f"{MARKER_PREFIX}b1")
    assert sub.seen_answer((path, 10), old) is None and sub.late_final_answer((path, 10)) is None
    sub.on_handled((path, 20), SUCCESS, True, "")                   # the next DDL's outcome, applied here
    assert sub.superseded((path, 10)) and not sub.superseded((path, 20)) and not sub.superseded((path, 30))
    assert sub.seen_answer((path, 10), old) == (True, "")          # a late step of the older record
    assert sub.late_final_answer((path, 10)) == (True, "")
    assert sub.step_for((path, 10), old) is None and sub.step_for((path, 30), new) is Step.REFRESH
    other = PATHS.ddl_record("s1", "t2")
    assert not sub.superseded((other, 10))                          # only the same table's records
    sub.on_handled((path, 20), FAILED, False, "reload failed")      # not applied: marks nothing newer
    sub2 = SubscriberCore(PATHS, "i2")
    sub2.on_handled((path, 20), FAILED, False, "reload failed")
    assert not sub2.superseded((path, 10))
    sub2.on_history_applied("h-20-0000000001", HistoryEntry("s1", "t1", "i3", "x", SUCCESS, 20))   # catch-up
    assert sub2.superseded((path, 10))
    sub3 = SubscriberCore(PATHS, "i1")
    sub3.mark_finished(20, path)                                    # ran here (the listener's ran_here)
    assert sub3.superseded((path, 10))
    # a restarted process: its join read the history (h-10, then the next DDL's h-20) and loaded the table
    # after both; its predecessor's final step of record 10 comes late, named by h-10: nothing to apply
    joined = SubscriberCore(PATHS, "i2")
    joined.restart(["h-20-0000000002", "h-10-0000000001"])
    assert joined.late_final_answer((path, 10), "h-10-0000000001") == (True, "")
    assert joined.late_final_answer((path, 30), "h-30-0000000003") is None   # decided after the join's read
    assert joined.history_todo(["h-10-0000000001", "h-20-0000000002", "h-30-0000000003"]) == ["h-30-0000000003"]


# -- reconciler --------------------------------------------------------------------------------------------

def test_only_orphans_are_reconciled():
    rec = DdlRecord("i1", "s1", "t1", "ALTER", "x", INIT)
    assert rc.classify(rec, {"i1", "i2"}, "i2", False) is rc.Verdict.SKIP
    assert rc.classify(rec, {"i2"}, "i2", False) is rc.Verdict.RECONCILE
    assert rc.classify(None, {"i1", "i2"}, "i2", False) is rc.Verdict.RECONCILE   # unreadable
    mine = DdlRecord("i2", "s1", "t1", "ALTER", "x", INIT)
    assert rc.classify(mine, {"i2"}, "i2", True) is rc.Verdict.SKIP       # in flight here
    assert rc.classify(mine, {"i2"}, "i2", False) is rc.Verdict.RECONCILE  # left over
    assert rc.holder_alive("i3", {"i2", "i3"}, "i2") and not rc.holder_alive("i1", {"i2"}, "i2")


def test_the_structure_is_read_only_once_the_ddl_runs_nowhere():
    assert rc.running_step([], 0, 100, 0, False) is rc.Running.ENDED
    assert rc.running_step(["dbGroup1"], 0, 100, 0, False) is rc.Running.WAIT
    assert rc.running_step(["dbGroup1"], 0, 100, 30, False) is rc.Running.KILL
    assert rc.running_step(["dbGroup1"], 0, 100, 0, True) is rc.Running.LATER


def test_a_reconciler_ends_an_orphan_once_and_never_the_next_ddl():
    log = fresh_log()
    a = originator("i1", marker="a1")
    lock_all(a, log, 1)
    log.expire(1)   # i1 died: its lock went, its record stays
    path = PATHS.ddl_record(*KEY)
    data, stat = log.nodes[path]
    orphan = rc.Orphan(KEY, DdlRecord.decode(data), stat.czxid, stat.version)
    decision = orphan.decision("i2", "equal on every node")
    # a second reconciler that read the same version loses the race
    r1 = log.commit(rc.decide_txn(PATHS, orphan, decision), 2)
    assert went_through(r1)
    assert not went_through(log.commit(rc.decide_txn(PATHS, orphan, decision), 3))
    tally = rc.outcome_tally(orphan, {"i2", "i3"}, "i2")
    assert tally.expected == {"i3"}
    children = [p.rsplit("/", 1)[1] for p in log._children(path)]
    entry = HistoryEntry(*KEY, "i1", orphan.rec.sql, FAILED, orphan.czxid)
    txn = rc.removal_txn(PATHS, orphan, r1[-1].version, children, acks_of(log), None, entry)
    assert rc.removal_retry(log.commit(txn, 2)) is True
    assert log.record() is None and log.history()[0].record_czxid == orphan.czxid
    # a stale reconciler's removal of the same orphan after the next DDL began: refused
    b = originator("i3", marker="b3")
    lock_all(b, log, 3)
    assert rc.removal_retry(log.commit(txn, 4)) is not True
    assert log.record().instance == "i3"


def test_a_reconciler_leaves_a_later_ddls_lock_alone():
    lock = Stat(czxid=50, version=0, ephemeralOwner=3)
    orphan = rc.Orphan(KEY, DdlRecord("i1", "s1", "t1", "ALTER", "x"), 40, 0)
    entry = HistoryEntry(*KEY, "i1", "x", FAILED, 40)
    txn = rc.removal_txn(PATHS, orphan, 1, [], [], lock, entry)
    assert PATHS.ddl_lock(*KEY) not in [op.path for op in txn.ops]
    same = Stat(czxid=40, version=0, ephemeralOwner=3)
    assert PATHS.ddl_lock(*KEY) in [op.path for op in rc.removal_txn(PATHS, orphan, 1, [], [], same, entry).ops]


def test_the_core_imports_no_io():
    import subprocess
    import sys
    code = ("import sys, zk.ddlcore; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('asyncio', 'socket', 'kazoo', 'structlog')]; print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_parse_table_node_round_trip_used_by_gone():
    assert parse_table_node(PATHS.ddl_record(*KEY).rsplit("/", 1)[-1]) == KEY


# -- operator release -----------------------------------------------------------------------------------

def _judged(log: Log, key=KEY):
    """What kill @@ddl_lock reads before it releases: record (stat, children, acks) and lock stat."""
    path = PATHS.ddl_record(*key)
    got = log.nodes.get(path)
    rec = DdlRecord.decode(got[0]) if got else None
    children = [p.rsplit("/", 1)[1] for p in log._children(path)]
    return rec, (got[1] if got else None), children, acks_of(log, key), log.stat(PATHS.ddl_lock(*key))


def test_an_operator_release_removes_exactly_what_it_judged():
    log = fresh_log()
    a = originator("i1", marker="a1")
    lock_all(a, log, 1)
    rec, stat, children, acks, lock = _judged(log)
    entry = HistoryEntry(*KEY, "i1", rec.sql, FAILED, stat.czxid)
    assert went_through(log.commit(release_txn(PATHS, KEY, rec, stat, children, acks, lock, entry), 9))
    assert log.record() is None and log.stat(PATHS.ddl_lock(*KEY)) is None
    assert log.history()[0].record_czxid == stat.czxid
    # the stale originator can touch nothing now, and a new DDL starts
    assert not a.on_decided(KEY, SUCCESS, "", log.commit(a.decide_txn(KEY, SUCCESS), 1))
    assert lock_all(originator("i2", marker="b2"), log, 2) == [InitResult.LOCKED]


def test_an_operator_release_leaves_a_ddl_that_took_the_table_meanwhile_alone():
    log = fresh_log()
    a = originator("i1", marker="a1")
    lock_all(a, log, 1)
    rec, stat, children, acks, lock = _judged(log)
    log.expire(1)                                   # i1 dies; its record stays, then is reconciled ...
    log.operator_release()
    b = originator("i2", marker="b2")
    lock_all(b, log, 2)                             # ... and the next DDL takes the table
    entry = HistoryEntry(*KEY, "i1", rec.sql, FAILED, stat.czxid)
    before = dict(log.nodes)
    assert not went_through(log.commit(release_txn(PATHS, KEY, rec, stat, children, acks, lock, entry), 9))
    assert log.nodes == before
    # a lock seen without a record: not deleted once a record (a new DDL) appeared
    log2 = fresh_log()
    log2.nodes[PATHS.ddl_lock(*KEY)] = (b"{}", Stat(7, 0, 5))
    seen = log2.stat(PATHS.ddl_lock(*KEY))
    del log2.nodes[PATHS.ddl_lock(*KEY)]
    lock_all(originator("i3", marker="c3"), log2, 3)
    assert not went_through(log2.commit(release_txn(PATHS, KEY, None, None, [], [], seen, None), 9))
    assert log2.record().instance == "i3"


def test_a_release_without_force_waits_while_the_ddl_still_runs_on_a_node():
    rec = DdlRecord("i1", "s1", "t1", "ALTER", "x", INIT, marker=f"{MARKER_PREFIX}a1")
    assert "dbGroup1" in release_refusal(rec, ["dbGroup1"], force=False)
    assert release_refusal(rec, ["dbGroup1"], force=True) is None
    assert release_refusal(rec, [], force=False) is None
