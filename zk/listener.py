"""The subscriber side of cluster DDL: lock on INIT, refresh on SUCCESS/FAILED, always ack.

Steps arrive two ways. The originator sends each one straight over the peer channel
(`on_peer_step`, zk/peers.py): we apply it, reply, then write our ZooKeeper ack. And the loop here
is level-triggered: every pass reads the whole ddl/ folder and acts on what changed since the last
pass, so a missed or coalesced watch event, a broken channel or a pause under SIGSTOP cannot lose
a step. Whichever way comes first handles a step; the other finds it handled.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING

import structlog
from kazoo.exceptions import NoNodeError

from meta.errors import DdlInProgress, ProxyError
from meta.later import Later
from meta.locks import RELOAD_OWNER

from .ddlcore.subscriber import GoneAction, SubscriberCore, may_release
from .loops import PassLoop, clock
from .paths import parse_table_node
from .reads import read
from .records import FAILED, INIT, SUCCESS, DdlRecord, HistoryEntry

if TYPE_CHECKING:
    from .port import ClusterPort

log = structlog.get_logger("pydble.cluster.listener")

LOCAL_LOCK_WAIT_S = 3.0   # how long INIT waits for a local DDL on the same table to give up
CATCH_UP_EVERY_S = 1.0    # ddl_history is read at most this often, unless a record vanished unseen
CATCH_UP_BACKOFF_MAX_S = 30.0   # an entry whose refresh keeps missing a node: retried at most this far apart
SETTLE_S = 0.1            # with the peer channel on, watch events are coalesced this long (safety net only)
ACK_AFTER_REPLY_S = 0.05  # a step answered on the peer channel is acked in ZooKeeper this much later
GONE_GRACE_S = 0.5        # a record removed before we saw its outcome: how long the outcome may still be
                          # on its way over the peer channel before we read the backends ourselves


class TableBusy(Exception):
    """A catch-up reload put off: a DDL on the table is in flight on this instance."""


class DdlListener(PassLoop):
    """Follows other instances' DDL records and keeps this instance in step."""

    name = "ddl listener"

    def __init__(self, cluster: ClusterPort) -> None:
        super().__init__(cluster)
        self.core = SubscriberCore(cluster.paths, cluster.instance)   # what was handled: the decisions
        self.caught_up_at = 0.0                         # monotonic time of the last ddl_history read
        self.catch_up_due = False                       # read ddl_history at the next pass
        self.catch_up_backoff = 0.0                     # > 0: a catch-up refresh missed a node; wait this long
        self.zk_records: dict[tuple[str, int], DdlRecord] = {}  # others' records as read from ZooKeeper: what
                                                                # a peer step is checked against
        self._record_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._acks: set[asyncio.Task] = set()
        self.later = Later()   # "ddl finished here" lines, written once the originator has its answer
        if cluster.peer_key is not None:
            self.settle_s = SETTLE_S

    def record_lock(self, path: str) -> asyncio.Lock:
        """One step of a record at a time, whichever way it arrived."""
        lock = self._record_locks.get(path)
        if lock is None:
            lock = self._record_locks[path] = asyncio.Lock()
        return lock
    def start(self, history: list[str] | None = None) -> None:
        """Start (or restart after a re-join) the follow loop; `history`: ddl_history's children read
        just before the join loaded metadata (later entries are applied)."""
        self.core.restart(history)  # a join has just reloaded everything
        self.catch_up_backoff = 0.0
        super().start()

    async def pass_once(self) -> None:
        """Read every record and handle what is new (what is new is the core's decision)."""
        c = self.cluster
        core = self.core
        zk = c.zk
        assert zk is not None
        seen: set[tuple[str, int]] = set()
        known = set(core.handled)  # a step the peer channel brings during this pass is not judged by it
        paths = [c.paths.ddl_record(*parts) for parts in map(parse_table_node, await zk.children(
            c.paths.ddl, watch=self.wake)) if parts is not None]
        records = await asyncio.gather(*(read(zk, path, DdlRecord, watch=self.wake) for path in paths))
        for path, got in zip(paths, records):
            if got is None:
                continue
            if got.value is None:
                log.warning("unreadable ddl record", path=path, error=got.error)
                continue
            rec, key = got.value, (path, got.stat.czxid)
            seen.add(key)
            if rec.instance != c.instance or rec.reconciled_by:
                self.zk_records[key] = rec
            if core.step_for(key, rec) is None:
                continue
            async with self.record_lock(path):
                if core.step_for(key, rec) is None:
                    continue  # the peer channel brought it, or its outcome, while we read the record
                ok, message = await self.handle(rec, core.handled.get(key), czxid=key[1])
                core.on_handled(key, rec.status, ok, message)
                await self._ack(rec, key[1], ok, message)
        for gone in core.on_pass(known, seen):
            self.zk_records.pop(gone.key, None)
            if gone.action is GoneAction.RELEASE:
                self._release(gone.schema, gone.table, gone.key[1])
            else:
                # its outcome may still be on its way: an originator removes its record while it hands
                # the outcome to us over the peer channel
                c._spawn(self._settle_gone(gone.key[0], gone.key[1]))
        # DDLs that began and ended while we were deaf leave no record, only a history entry; reading
        # the history on every pass would add a ZooKeeper call to each step of every DDL
        since = clock() - self.caught_up_at
        if ((core.history_seen is None or self.catch_up_due or since >= CATCH_UP_EVERY_S)
                and since >= self.catch_up_backoff):
            self.caught_up_at = clock()
            self.catch_up_due = False
            await self._catch_up()

    async def on_peer_step(self, caller: str, path: str, czxid: int, rec: DdlRecord, texts: dict | None,
                           final: bool = False) -> tuple[bool | None, str]:
        """A step sent by its originator over the peer channel: apply it, answer, then ack in ZooKeeper
        (unless `final`: the originator removes the record without waiting for ZooKeeper acks).

        ok None tells the originator to wait for our ZooKeeper ack instead (we are not in the cluster
        right now, or the step is not one we may take from a peer: not from its originator, or not
        what the ZooKeeper record it names says)."""
        c = self.cluster
        core = self.core
        if not core.takes_peer_steps(rec, c.ready):
            return None, f"{c.instance} is not ready for peer steps"
        key = (path, czxid)
        live = await self._record_for(key)
        if live is None and final:
            late = await self._late_final(caller, key, rec, texts)
            if late is not None:
                return late
        why = core.peer_mismatch(caller, path, rec, live)
        if why is not None:
            log.warning("peer step refused", instance=c.instance, caller=caller, path=path, czxid=czxid, reason=why)
            return None, f"{c.instance} refused the step: {why}"
        assert live is not None   # a missing record is a mismatch
        self.zk_records.setdefault(key, live)   # the final step is checked against it on the spot
        async with self.record_lock(path):
            seen = core.seen_answer(key, rec)
            if seen is not None:
                return seen
            ok, message = await self.handle(rec, core.handled.get(key), texts, czxid)
            core.on_handled(key, rec.status, ok, message)
        if final:
            return ok, message
        task = asyncio.get_running_loop().create_task(self._ack_after_reply(key, rec, ok, message))
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)
        return ok, message

    def peer_step_now(self, caller: str, path: str, czxid: int, rec: DdlRecord,
                      texts: dict | None) -> tuple[bool, str] | None:
        """A final step (SUCCESS/FAILED over the peer channel) answered on the spot, with no task and no
        loop turn while the originator waits: when its texts build the table here and no other step of
        the record is being handled. None sends it down on_peer_step."""
        c = self.cluster
        core = self.core
        held = self._record_locks.get(path)
        key = (path, czxid)
        if (texts is None or c.refresh_now is None or not core.takes_peer_steps(rec, c.ready)
                or rec.status not in (SUCCESS, FAILED) or (held is not None and held.locked())
                or core.peer_mismatch(caller, path, rec, self.zk_records.get(key)) is not None):
            return None   # on_peer_step reads ZooKeeper when we have not seen the record, and says why not
        seen = core.seen_answer(key, rec)
        if seen is not None:
            return seen
        if not c.refresh_now([(rec.schema, rec.table)], texts):
            return None
        self._outcome_applied(rec, czxid, "peer")
        core.on_handled(key, rec.status, True, "")
        return True, ""

    async def _late_final(self, caller: str, key: tuple[str, int], rec: DdlRecord,
                          texts: dict | None) -> tuple[bool, str] | None:
        """A final step whose record is already gone from ZooKeeper (the deciding removal went on the wire
        before the step; our watch may have seen it first): applied (once) from the ddl_history entry that
        removal created, so that we answer only once the table is reloaded and its lock free here.
        Refusing it instead made us a laggard the client's OK did not wait for (issue 17: then 4006 here).
        None: no entry of that decision (the record went another way), or the table is another DDL's
        here now; ddl_history and the vanished record's settle apply it then."""
        c = self.cluster
        core = self.core
        zk = c.zk
        if zk is None:
            return None
        name = core.late_final(key, rec, await zk.children(c.paths.history))
        got = await read(zk, f"{c.paths.history}/{name}", HistoryEntry) if name is not None else None
        if got is None or got.value is None:
            return None
        why = core.late_final_mismatch(caller, key, rec, got.value)
        if why is not None:
            log.warning("late final step refused", instance=c.instance, caller=caller, path=key[0],
                        czxid=key[1], reason=why)
            return None
        async with self.record_lock(key[0]):   # one application of the entry: not settle, catch-up and us
            done = core.late_final_answer(key, name)
            if done is not None:
                return done
            message = ""
            try:
                await self._refresh_unless_busy(rec.schema, rec.table, key[1], f"instance:{rec.instance}", texts)
            except TableBusy:
                return None   # another DDL on the table runs here: ddl_history applies this one after it
            except Exception as e:  # noqa: BLE001 - reported in the answer; ddl_history's entry applies it again
                message = f"refresh failed: {e}"
                log.warning("refresh after a ddl failed", instance=c.instance, table=f"{rec.schema}.{rec.table}",
                            error=str(e))
            self._outcome_applied(rec, key[1], "peer, record already gone")
            core.on_handled(key, rec.status, not message, message)   # the next pass finds the record gone
        return not message, message

    async def _record_for(self, key: tuple[str, int]) -> DdlRecord | None:
        """The record (path, czxid) as ZooKeeper has it: seen by a pass, or read now."""
        rec = self.zk_records.get(key)
        zk = self.cluster.zk
        if rec is not None or zk is None:
            return rec
        got = await read(zk, key[0], DdlRecord)
        if got is None or got.stat.czxid != key[1]:
            return None
        return got.value

    async def _ack_after_reply(self, key: tuple[str, int], rec: DdlRecord, ok: bool, message: str) -> None:
        """Our ZooKeeper ack of a step answered on the peer channel, for operators and for an originator
        that did not hear the reply. It waits a little so that it does not compete with the DDL's own
        ZooKeeper writes: a quick DDL is over (record gone) before it would land, and only the newest
        step of a record is acked."""
        await asyncio.sleep(ACK_AFTER_REPLY_S)
        async with self.record_lock(key[0]):
            if self.core.handled.get(key) != rec.status:
                return  # a later step superseded it, or the record is gone
            zk = self.cluster.zk
            try:
                # the same path may already hold the table's next DDL: never ack that one by mistake
                stat = await zk.exists(key[0]) if zk is not None else None
                if not self.core.ack_due(key, rec.status, stat.czxid if stat is not None else None):
                    return
                await self._ack(rec, key[1], ok, message)
            except Exception as e:  # noqa: BLE001 - the originator already has our answer
                log.debug("zookeeper ack after a peer step failed", instance=self.cluster.instance,
                          table=f"{rec.schema}.{rec.table}", error=str(e))

    def ran_here(self, czxid: int, path: str) -> None:
        """This instance originated (and finished) the record with that czxid: nothing to catch up on."""
        self.core.mark_finished(czxid, path)

    async def _catch_up(self) -> None:
        """Refresh tables whose DDL finished while we were deaf (paused, lagging): ddl_history tells.
        An entry counts as seen only once applied: a refresh that failed is tried again next pass."""
        c = self.cluster
        core = self.core
        zk = c.zk
        assert zk is not None
        stuck = False   # an entry could not be applied (a node missed): the mark stays before it
        missed = False  # ... because a node did not answer (not because a DDL on the table is in flight)
        for name in core.history_todo(await zk.children(c.paths.history)):
            try:
                entry = await self._catch_up_entry(name) if core.needs_apply(name) else None
            except TableBusy:
                stuck = True   # that DDL's own outcome refreshes the table; the entry is read again next pass
                continue
            except ProxyError as e:   # RefreshIncomplete: a node did not answer
                log.warning("catching up on a ddl: refresh incomplete, trying again later", instance=c.instance,
                            entry=name, error=e.message)
                stuck = missed = True
                continue
            if not stuck:
                core.on_history_applied(name, entry)
            elif entry is not None:
                # applied, but later than an entry still to apply
                core.entry_applied(entry)
        # a node that stays down: back off (doubling) rather than re-reading every second
        self.catch_up_backoff = min(max(2 * self.catch_up_backoff, 2 * CATCH_UP_EVERY_S),
                                    CATCH_UP_BACKOFF_MAX_S) if missed else 0.0

    async def _catch_up_entry(self, name: str) -> HistoryEntry | None:
        """Apply one ddl_history entry this instance has not applied (nor ran): refresh its table."""
        c = self.cluster
        zk = c.zk
        assert zk is not None
        got = await read(zk, f"{c.paths.history}/{name}", HistoryEntry)
        if got is None or got.value is None:
            return None
        entry = got.value
        # under the record's lock: a late final step of that record (_late_final) applies the same entry
        async with self.record_lock(c.paths.ddl_record(entry.schema, entry.table)):
            if not self.core.entry_applies(entry):
                return None
            log.info("catching up on a ddl finished while this instance lagged", instance=c.instance,
                     table=f"{entry.schema}.{entry.table}", originator=entry.instance)
            try:
                await self._refresh_unless_busy(entry.schema, entry.table, entry.record_czxid,
                                                f"instance:{entry.instance}")
            finally:
                # the DDL is over either way: its lock goes; a refresh that missed a node is tried again
                self._release(entry.schema, entry.table, entry.record_czxid, f"instance:{entry.instance}")
        return entry

    async def _refresh_unless_busy(self, schema: str, table: str, czxid: int, owner: str | None = None,
                                   texts: dict | None = None) -> None:
        """Reload a table for a DDL that is over (record czxid), holding the table's local lock so that no
        DDL starts on it meanwhile: a read taken half-way through a DDL here and published after that
        DDL's own refresh would keep the half-applied structure. TableBusy (nothing read) while another
        DDL on the table is in flight here: its own outcome refreshes the table. `texts`: as for refresh."""
        c = self.cluster
        held = c.locks.get(schema, table)
        if held is not None:
            if not may_release(held.owner, held.record, czxid, owner):
                raise TableBusy(f"{schema}.{table}")
            await c.refresh([(schema, table)], texts)   # under that very record's lock
            return
        mine = f"{RELOAD_OWNER}{czxid}"
        c.locks.acquire(schema, table, "reload after a ddl finished elsewhere", mine).phase = "REFRESHING"
        try:
            await c.refresh([(schema, table)], texts)
        finally:
            c.locks.release(schema, table, mine)

    async def handle(self, rec: DdlRecord, last: str | None, texts: dict | None = None,
                     czxid: int = 0) -> tuple[bool, str]:
        """One step of someone else's DDL; returns the ack to give. On SUCCESS/FAILED `texts` (from the
        peer channel: the CREATE texts the originator read back from the nodes) spare us the backends."""
        c = self.cluster
        schema, table = rec.schema, rec.table
        rlog = log.bind(instance=c.instance, table=f"{schema}.{table}", originator=rec.instance, phase=rec.status)
        owner = f"instance:{rec.instance}"
        if rec.status == INIT:
            ok, message = await self._lock(schema, table, rec.sql, owner, rec.instance, czxid)
            if ok:
                rlog.debug("ddl INIT: table locked")
            else:
                rlog.warning("ddl INIT: could not lock", message=message)
            return ok, message
        message = ""
        if rec.status in (SUCCESS, FAILED):
            try:
                await c.refresh([(schema, table)], texts)   # texts None: from the backends
            except Exception as e:  # noqa: BLE001 - reported in the ack
                message = f"refresh failed: {e}"
                rlog.warning("refresh after ddl failed", error=str(e))
            self._outcome_applied(rec, czxid, "peer" if texts is not None else "zookeeper")
        return not message, message

    def _outcome_applied(self, rec: DdlRecord, czxid: int, via: str) -> None:
        """After the refresh for a SUCCESS/FAILED: release the record's local lock, and say so a moment
        after the answer (meta/later.py): the originator is waiting for that answer."""
        self._release(rec.schema, rec.table, czxid, f"instance:{rec.instance}")
        if rec.reconciled_by:
            self.cluster.locks.release_owned_by(f"instance:{rec.instance}")
        self.later.call(lambda: log.info(
            "ddl finished here: metadata refreshed, table unlocked", instance=self.cluster.instance,
            table=f"{rec.schema}.{rec.table}", originator=rec.instance, phase=rec.status,
            reconciled_by=rec.reconciled_by or None, via=via))

    async def _lock(self, schema: str, table: str, sql: str, owner: str, instance: str,
                    czxid: int = 0) -> tuple[bool, str]:
        """Take the local lock for a peer's DDL (record czxid), waiting briefly for a local DDL that is
        about to fail."""
        locks = self.cluster.locks
        held = locks.get(schema, table)
        if held is not None and held.owner == owner:
            held.record = czxid   # that instance's newer DDL on the table: the lock is this record's now
            return True, ""
        deadline = asyncio.get_running_loop().time() + LOCAL_LOCK_WAIT_S
        while True:
            try:
                lk = locks.acquire(schema, table, sql, owner, instance)
                lk.phase = INIT
                lk.record = czxid
                return True, ""
            except DdlInProgress as e:
                if asyncio.get_running_loop().time() > deadline:
                    return False, f"{self.cluster.instance}: {e.message}"
            await asyncio.sleep(0.05)

    async def _ack(self, rec: DdlRecord, czxid: int, ok: bool, message: str) -> None:
        """Our ack of the record with that czxid (conditional on it still being that DDL's record)."""
        try:
            await self.cluster.ack(rec, czxid, ok, message)
        except NoNodeError:
            pass  # the record is already gone (or another DDL's now): nothing to acknowledge

    def _release(self, schema: str, table: str, czxid: int, owner: str | None = None) -> None:
        """Release the local lock a peer's DDL record (czxid) holds here (that instance's, when `owner`
        is given), and no other: by now the table may be locked again for that instance's next DDL."""
        lk = self.cluster.locks.get(schema, table)
        if lk is not None and may_release(lk.owner, lk.record, czxid, owner):
            self.cluster.locks.release(schema, table, lk.owner)

    async def _settle_gone(self, path: str, czxid: int) -> None:
        """A record vanished before we saw its outcome (paused, lagging, or the outcome is still on the
        peer channel): unless the outcome arrives within GONE_GRACE_S, read the table from the backends."""
        await asyncio.sleep(GONE_GRACE_S)
        parts = parse_table_node(path.rsplit("/", 1)[-1])
        if parts is None:
            return
        async with self.record_lock(path):
            self._release(*parts, czxid)   # only a lock of that very record
            if not self.core.settle(czxid):
                return
            log.info("ddl record gone before its outcome was applied here: refreshing",
                     instance=self.cluster.instance, table=f"{parts[0]}.{parts[1]}")
            try:
                await self._refresh_unless_busy(parts[0], parts[1], czxid)
                self.core.mark_finished(czxid, path)
            except TableBusy:
                pass   # a DDL on the table runs here now: ddl_history's entry applies this one after it
            except Exception as e:  # noqa: BLE001 - ddl_history's entry applies it again
                log.warning("refresh of a finished ddl failed; catching up from ddl_history",
                            instance=self.cluster.instance, table=f"{parts[0]}.{parts[1]}", error=str(e))
        self.catch_up_due = True   # a DDL we half missed: others may have ended unseen too
        self.wake()
