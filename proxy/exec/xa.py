"""`SET xa = on`: a transaction over several shardingNodes commits two-phase over MySQL/MariaDB XA.

Each node's connection begins its branch with XA START when it joins the transaction (the first
statement of the transaction on that node). COMMIT then runs XA END + XA PREPARE on every node, records
the COMMIT decision durably (ZooKeeper in a cluster, an fsynced file under data_dir otherwise), and
only then XA COMMITs each branch and forgets the decision. A transaction on one node commits in one
phase. Whoever finds prepared branches of a coordinator that is gone (this instance at its start, or
in a cluster a surviving instance) commits them where a decision says COMMIT and rolls them back
otherwise: no operator is needed.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Awaitable, Callable

import structlog

from meta.errors import BackendError, BackendUnavailable, NotSupported, ProxyError
from meta.xa_log import COMMIT, ROLLBACK, LocalXaLog, XaDecision, XaLog, make_gtrid, owner_of

from proxy.backends.backend import BackendConnection, open_connection

if TYPE_CHECKING:
    from meta.config import Config
    from proxy.backends.pool import Backends
    from zk.cluster import Cluster

log = structlog.get_logger("pydble.xa")

XID_MAX = 64              # bytes of a gtrid and of a bqual (MySQL's limit)
RETRY_S = 2.0             # a pass while decisions of ours wait for their XA COMMITs
IDLE_PASS_S = 30.0        # a pass when nothing is known to wait (a branch whose answer was lost)
START_PASS_TIMEOUT_S = 60.0   # the recovery pass at start is bounded; the loop goes on after it
TOMBSTONE_KEEP_S = 600.0  # a rollback decision outlives its branches this long (a late coordinator reads it)
ER_XAER_NOTA, ER_XAER_RMFAIL = 1397, 1399
INSTANCE_MAX = XID_MAX - len("pydble.") - 24   # room for the start id and the counter


class XaRolledBack(ProxyError):
    """The XA transaction could not be prepared everywhere and was rolled back on every node."""

    code, sqlstate = 1402, "XA100"


class XaActive(ProxyError):
    """A statement that commits implicitly, refused while an XA transaction is open (as MySQL does)."""

    code, sqlstate = ER_XAER_RMFAIL, "XAE07"


def xid_sql(gtrid: str, bqual: str | bytes) -> str:
    """The xid as hex literals: any instance or node name is safe in the statement."""
    b = bqual if isinstance(bqual, bytes) else bqual.encode()
    return f"X'{gtrid.encode().hex()}',X'{b.hex()}'"


def switch_value(sql: str) -> bool:
    """The value of `SET xa = on|off|1|0|true|false` (the Assignment's replay statement)."""
    raw = sql.split("=", 1)[1].strip() if "=" in sql else ""
    v = raw.strip("'\"").lower()
    if v in ("1", "on", "true"):
        return True
    if v in ("0", "off", "false"):
        return False
    raise ProxyError(f"Variable 'xa' can't be set to the value of '{raw}'", 1231, "42000")


def refuse_implicit_commit(branches: XaBranches, what: str) -> None:
    """DDL, LOCK TABLES...: they would commit the XA transaction implicitly; MySQL refuses them inside one."""
    if branches.gtrid is not None:
        raise XaActive(f"XAER_RMFAIL: The command cannot be executed when global transaction is in the ACTIVE "
                       f"state ({what} commits implicitly; COMMIT or ROLLBACK the transaction first)")


class XaBranches:
    """One session's open XA transaction: its gtrid and the nodes that started a branch of it."""

    def __init__(self, coordinator: XaCoordinator) -> None:
        self.coordinator = coordinator
        self.gtrid: str | None = None
        self.nodes: set[str] = set()

    def start_sql(self, node: str) -> str:
        """XA START for a node joining the transaction (a new gtrid at the transaction's first node)."""
        if self.gtrid is None:
            self.gtrid = self.coordinator.new_gtrid()
        self.nodes.add(node)
        return f"XA START {xid_sql(self.gtrid, node)}"

    def not_joined(self, node: str) -> None:
        """The node's XA START did not go through (its connection failed): it holds no branch."""
        self.nodes.discard(node)
        if not self.nodes:
            self.gtrid = None

    async def finish(self, pinned: dict[str, BackendConnection], sql: str) -> list[BaseException]:
        """COMMIT (two-phase over several nodes) or ROLLBACK the branches; the connections go back.
        Rollback failures are returned (their connections are closed, which ends unprepared branches)."""
        gtrid, self.gtrid, self.nodes = self.gtrid, None, set()
        c = self.coordinator
        if gtrid is None or not pinned:
            return []
        if sql != "COMMIT":
            return await c.rollback(gtrid, pinned)
        # the commit goes on when the client leaves meanwhile (its task is cancelled): the coordinator owns it
        await asyncio.shield(c.spawn(c.commit(gtrid, pinned)))
        return []


@dataclass
class Branch:
    """A prepared branch an XA RECOVER showed."""

    group: str
    bqual: bytes


@dataclass
class InDoubt:
    """A global transaction of pydble's with prepared branches or a decision still recorded."""

    gtrid: str
    instance: str
    decision: str                  # commit | rollback | none
    branches: list[Branch] = field(default_factory=list)
    decided_at: float | None = None


class XaCoordinator:
    """The instance's XA side: gtrids, the decision log, commits, and recovery of what crashes left."""

    def __init__(self, config: Config, backends: Backends, cluster: Cluster | None) -> None:
        self.config = config
        self.backends = backends
        self.cluster = cluster   # None: single-instance mode
        self.instance = config.server.instance
        self.boot = f"{int(time.time()):x}{secrets.token_hex(3)}"   # a new one at every start
        self._n = 0
        self.log: XaLog = LocalXaLog(config.server.data_dir or None)
        self.inflight: set[str] = set()   # gtrids this process is preparing or committing now
        self._tasks: set[asyncio.Task] = set()
        self._loop: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._pending = False            # decisions of ours wait for XA COMMITs: pass again soon
        self._stopping = False
        self.passes = 0
        self.pause: Callable[[str], Awaitable[None]] | None = None   # a test hook: it may only pause

    async def paused(self, phase: str) -> None:
        """A named step of a commit: the test hook, if one is set, may pause here (and only pause)."""
        if self.pause is not None:
            await self.pause(phase)

    def use_cluster(self) -> None:
        """In a cluster the decisions live in ZooKeeper, where survivors read them."""
        from zk.xa_log import ZkXaLog
        assert self.cluster is not None
        self.log = ZkXaLog(self.cluster)

    def usable(self) -> str | None:
        """Why `SET xa = on` cannot work here (None when it can)."""
        if len(self.instance.encode()) > INSTANCE_MAX:
            return f"the instance name is longer than {INSTANCE_MAX} bytes, too long for an XA transaction id"
        long = [n for n in self.config.sharding_nodes if len(n.encode()) > XID_MAX]
        if long:
            return f"shardingNode name {long[0]} is longer than {XID_MAX} bytes, too long for an XA branch id"
        return None

    def new_gtrid(self) -> str:
        self._n += 1
        return make_gtrid(self.instance, self.boot, self._n)

    def spawn(self, coro) -> asyncio.Task:  # noqa: ANN001 - a coroutine
        """A task this coordinator owns (stop() waits for it)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:   # its session may have left: log it here
            log.info("XA commit ended with an error", error=str(task.exception()))

    # -- ending a transaction -------------------------------------------------------------------
    async def rollback(self, gtrid: str, pinned: dict[str, BackendConnection]) -> list[BaseException]:
        """XA END + XA ROLLBACK on every branch at once."""
        errors: list[BaseException] = []

        async def one(node: str, conn: BackendConnection) -> None:
            try:
                await self._rollback_branch(gtrid, node, conn, ended=False)
            except BaseException as e:  # noqa: BLE001 - reported by the caller
                errors.append(e)
            finally:
                self.backends.release(node, conn)

        await asyncio.gather(*(one(n, c) for n, c in pinned.items()))
        return errors

    async def _rollback_branch(self, gtrid: str, node: str, conn: BackendConnection, ended: bool) -> None:
        """Roll one branch back; a connection that cannot is closed (an unprepared branch ends with it,
        a prepared one is left to recovery, which finds no COMMIT decision and rolls it back)."""
        if conn.broken:
            return
        timeout = self.backends.timeout_s
        x = xid_sql(gtrid, node)
        try:
            if not ended:
                try:
                    await conn.query(f"XA END {x}", timeout)
                except BackendError as e:
                    if e.code != ER_XAER_RMFAIL:   # 1399: already ended by a deadlock (ROLLBACK ONLY)
                        raise
            await conn.query(f"XA ROLLBACK {x}", timeout)
        except BaseException:
            conn.close()
            raise

    async def commit(self, gtrid: str, pinned: dict[str, BackendConnection]) -> None:
        """One phase on one node; else prepare all, record the decision, commit all, forget it."""
        nodes = sorted(pinned)
        timeout = self.backends.timeout_s
        held = dict(pinned)   # connections not yet given back

        def give_back(node: str, close: bool = False) -> None:
            conn = held.pop(node, None)
            if conn is not None:
                if close:
                    conn.close()
                self.backends.release(node, conn)

        try:
            if len(nodes) == 1:
                node = nodes[0]
                x = xid_sql(gtrid, node)
                try:
                    await held[node].query(f"XA END {x};XA COMMIT {x} ONE PHASE", timeout)
                except BaseException:
                    give_back(node, close=True)   # whatever is left of the branch ends with the connection
                    raise
                return
            self.inflight.add(gtrid)
            try:
                await self._prepare(gtrid, nodes, held, give_back)
                await self.paused("xa_after_prepare")
                await self._decide(gtrid, nodes, held, give_back)
                await self.paused("xa_after_decision")
                failed = await self._commit_branches(gtrid, nodes, held, give_back)
            finally:
                self.inflight.discard(gtrid)
            if failed:
                self._pending = True
                self._wake.set()
                node, e = failed[0]
                raise BackendUnavailable(f"COMMIT is decided but XA COMMIT failed on shardingNode[{node}] ({e}); "
                                         f"pydble commits it in the background until it succeeds")
            self.spawn(self._forget(gtrid))   # the client's OK does not wait for the clean-up
        finally:
            for node in list(held):
                give_back(node)

    async def _forget(self, gtrid: str) -> None:
        try:
            await self.log.forget(gtrid)
        except Exception as e:  # noqa: BLE001 - the recovery pass removes it later
            log.warning("could not remove a finished XA decision; recovery will", gtrid=gtrid, error=str(e))
            self._pending = True

    async def _prepare(self, gtrid: str, nodes: list[str], held: dict[str, BackendConnection], give_back) -> None:  # noqa: ANN001
        """XA END + XA PREPARE on every node at once; any failure rolls the whole transaction back."""
        timeout = self.backends.timeout_s
        results = await asyncio.gather(
            *(held[n].query(f"XA END {xid_sql(gtrid, n)};XA PREPARE {xid_sql(gtrid, n)}", timeout) for n in nodes),
            return_exceptions=True)
        failed = [(n, r) for n, r in zip(nodes, results) if isinstance(r, BaseException)]
        if not failed:
            return
        for n, _ in failed:
            give_back(n, close=True)   # an unprepared branch ends with its connection
        await self._rollback_prepared(gtrid, held, give_back)
        node, e = failed[0]
        msg = e.message if isinstance(e, ProxyError) else str(e) or type(e).__name__
        raise XaRolledBack(f"XA_RBROLLBACK: XA PREPARE failed on shardingNode[{node}] ({msg}); the transaction "
                           f"was rolled back on every shardingNode")

    async def _rollback_prepared(self, gtrid: str, held: dict[str, BackendConnection], give_back) -> None:  # noqa: ANN001
        async def one(node: str) -> None:
            try:
                await self._rollback_branch(gtrid, node, held[node], ended=True)
            except BaseException as e:  # noqa: BLE001 - the connection is closed; recovery ends the branch
                log.warning("XA ROLLBACK of a prepared branch failed; recovery rolls it back", gtrid=gtrid,
                            node=node, error=str(e))
                self._pending = True
            finally:
                give_back(node)

        await asyncio.gather(*(one(n) for n in list(held)))

    async def _decide(self, gtrid: str, nodes: list[str], held: dict[str, BackendConnection], give_back) -> None:  # noqa: ANN001
        """Record COMMIT durably; when that fails, roll back if the decision is surely absent."""
        try:
            d = await self.log.decide(XaDecision(gtrid, COMMIT, self.instance, nodes))
        except Exception as e:  # noqa: BLE001 - ZooKeeper or the disk refused: the outcome decides below
            why = str(e) or type(e).__name__
            try:
                await self.log.withdraw(gtrid)   # no COMMIT decision for sure now: rolling back is safe
            except Exception:  # noqa: BLE001 - unknown: the branches stay prepared for recovery
                for n in list(held):
                    give_back(n, close=True)
                self._pending = True
                self._wake.set()
                raise BackendUnavailable(f"COMMIT outcome unknown: the XA decision could not be recorded in "
                                         f"{self.log.where} ({why}); pydble finishes or rolls back the prepared "
                                         f"branches as soon as the log is reachable") from None
            await self._rollback_prepared(gtrid, held, give_back)
            raise XaRolledBack(f"XA_RBROLLBACK: the commit decision could not be recorded in {self.log.where} "
                               f"({why}); the transaction was rolled back on every shardingNode") from None
        if d.state != COMMIT:   # a survivor took us for dead and rolled the branches back first
            await self._rollback_prepared(gtrid, held, give_back)
            raise XaRolledBack("XA_RBROLLBACK: the transaction was rolled back by the recovery of another "
                               "instance (this one was taken for dead)")

    async def _commit_branches(self, gtrid: str, nodes: list[str], held: dict[str, BackendConnection],
                               give_back) -> list[tuple[str, BaseException]]:  # noqa: ANN001
        """XA COMMIT the first branch, then the others at once; the failures (their connections closed)."""
        timeout = self.backends.timeout_s
        failed: list[tuple[str, BaseException]] = []

        async def one(node: str) -> None:
            try:
                await held[node].query(f"XA COMMIT {xid_sql(gtrid, node)}", timeout)
                give_back(node)
            except BaseException as e:  # noqa: BLE001 - the decision stays; recovery commits it
                failed.append((node, e))
                give_back(node, close=True)

        await one(nodes[0])
        await self.paused("xa_after_first_commit")
        await asyncio.gather(*(one(n) for n in nodes[1:]))
        return failed

    # -- recovery -------------------------------------------------------------------------------
    async def start(self) -> None:
        """Finish what a crash left (bounded), then keep watching in the background."""
        if self.cluster is not None:
            self.use_cluster()
        try:
            await asyncio.wait_for(self.recover(), START_PASS_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the loop tries again; serving starts anyway
            log.warning("XA recovery at start did not finish; retrying in the background", error=str(e) or
                        type(e).__name__)
            self._pending = True
        self._loop = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
        if self._tasks:   # commits in flight end (bounded by the backend timeout) rather than be cut
            await asyncio.wait(list(self._tasks), timeout=self.backends.timeout_s)

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                await asyncio.wait_for(self._wake.wait(), RETRY_S if self._pending else IDLE_PASS_S)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.recover()
                failures = 0
            except Exception as e:  # noqa: BLE001 - next pass
                failures += 1
                (log.info if failures == 1 else log.debug)("XA recovery pass failed; retrying",
                                                          error=str(e) or type(e).__name__)
                self._pending = True

    def _online_watch(self, _event: object = None) -> None:
        self._wake.set()   # an instance left: its transactions may be ours to finish

    async def _offline_check(self):  # noqa: ANN202
        """A predicate on coordinator names: may this instance finish that coordinator's transactions?"""
        cluster = self.cluster
        if cluster is None:
            return lambda owner: owner == self.instance
        if cluster.zk is None or not cluster.zk.connected:
            raise ConnectionError("ZooKeeper is not connected: the XA decisions cannot be read")
        online = await cluster.online(watch=self._online_watch)
        if self.instance not in online:
            # not (yet, or no longer) registered: another instance may be finishing ours; only our own
            # current transactions are certainly ours, and those are in flight
            return lambda owner: False
        return lambda owner: owner == self.instance or owner not in online

    async def scan(self) -> tuple[dict[str, list[Branch]], list[str]]:
        """XA RECOVER on every dbGroup at once: pydble's prepared branches by gtrid, and the groups not
        reachable (a dead server costs its connect timeout, not one per group)."""
        prepared: dict[str, list[Branch]] = {}
        unreachable: list[str] = []

        async def one(name: str) -> None:
            try:
                conn = await open_connection(self.config.db_groups[name], 0, None)
            except ProxyError as e:
                log.info("XA recovery cannot reach a dbGroup", db_group=name, error=e.message)
                unreachable.append(name)
                return
            try:
                sc = await conn.query("XA RECOVER", self.backends.timeout_s)
            except ProxyError as e:
                log.warning("XA RECOVER failed (the backend user needs XA_RECOVER_ADMIN on MariaDB 10.5+)",
                            db_group=name, error=e.message)
                unreachable.append(name)
                return
            finally:
                conn.close()
            for row in sc.results[0].rows if sc.results else []:
                fmt, glen, blen, data = int(row[0]), int(row[1]), int(row[2]), bytes(row[3] or b"")
                gtrid = data[:glen].decode("utf-8", "replace")
                if fmt != 1 or owner_of(gtrid) is None:
                    continue
                prepared.setdefault(gtrid, []).append(Branch(name, data[glen:glen + blen]))

        await asyncio.gather(*(one(n) for n in self.config.db_groups))
        return prepared, sorted(unreachable)

    async def recover(self) -> None:
        """One pass: commit the prepared branches of a COMMIT decision, roll back those without one, and
        forget decisions with no branch left, for every coordinator this instance may stand in for."""
        self.passes += 1
        mine = await self._offline_check()
        decisions = await self.log.load()
        prepared, unreachable = await self.scan()
        pending = False
        todo: dict[str, list[tuple[Branch, str]]] = {}
        for gtrid, branches in prepared.items():
            owner = owner_of(gtrid)
            if gtrid in self.inflight or owner is None or not mine(owner):
                continue
            d = decisions.get(gtrid)
            if d is None and self.cluster is not None:
                # claim the outcome first: a coordinator we took for dead then reads it instead of committing
                d = await self.log.decide(XaDecision(gtrid, ROLLBACK, owner, sorted({b.bqual.decode("utf-8", "replace")
                                                                                     for b in branches})))
                decisions[gtrid] = d
            state = d.state if d is not None else ROLLBACK
            for b in branches:
                todo.setdefault(b.group, []).append((b, f"XA {'COMMIT' if state == COMMIT else 'ROLLBACK'} "
                                                        f"{xid_sql(gtrid, b.bqual)}"))
            log.warning("finishing an in-doubt XA transaction", gtrid=gtrid, coordinator=owner,
                        outcome=state, branches=len(branches))
        for group, work in todo.items():
            if not await self._run_on_group(group, work):
                pending = True
        if todo:
            prepared, more = await self.scan()   # what is still there after this pass's work
            unreachable = sorted(set(unreachable) | set(more))
        for gtrid, d in decisions.items():
            owner = owner_of(gtrid) or d.instance
            if gtrid in self.inflight or not mine(owner):
                continue
            if gtrid in prepared or unreachable:
                pending = True
                continue
            if d.state == ROLLBACK and time.time() - d.at < TOMBSTONE_KEEP_S:
                continue
            await self.log.forget(gtrid)
            if d.state == COMMIT:
                log.info("XA transaction finished by recovery", gtrid=gtrid)
        self._pending = pending

    async def _run_on_group(self, group: str, work: list[tuple[Branch, str]]) -> bool:
        """Run XA COMMIT/ROLLBACKs on one dbGroup; False if any did not go through (tried next pass).
        XAER_NOTA means the branch is gone, or still attached to a live connection: the next scan tells."""
        try:
            conn = await open_connection(self.config.db_groups[group], 0, None)
        except ProxyError as e:
            log.info("XA recovery cannot reach a dbGroup", db_group=group, error=e.message)
            return False
        ok = True
        try:
            for _, sql in work:
                try:
                    await conn.query(sql, self.backends.timeout_s)
                except BackendError as e:
                    if e.code != ER_XAER_NOTA:
                        log.warning("XA recovery statement failed", db_group=group, sql=sql, error=e.message)
                        ok = False
        except ProxyError as e:
            log.warning("XA recovery lost its connection", db_group=group, error=e.message)
            ok = False
        finally:
            conn.close()
        return ok

    async def in_doubt(self) -> list[InDoubt]:
        """What `show @@xa` lists: every pydble global transaction with prepared branches or a decision."""
        decisions = await self.log.load()
        prepared, _ = await self.scan()
        out: dict[str, InDoubt] = {}
        for gtrid, branches in prepared.items():
            d = decisions.get(gtrid)
            out[gtrid] = InDoubt(gtrid, owner_of(gtrid) or "?", d.state if d else "none", branches,
                                 d.at if d else None)
        for gtrid, d in decisions.items():
            if gtrid not in out:
                out[gtrid] = InDoubt(gtrid, d.instance, d.state, [], d.at)
        return sorted(out.values(), key=lambda x: x.gtrid)


def in_doubt_rows(items: list[InDoubt], inflight: set[str] | frozenset[str] = frozenset()) -> list[list[object]]:
    """Rows of `show @@xa` / `pydble xa list`."""
    return [[x.gtrid, x.instance, x.decision, "in flight" if x.gtrid in inflight else "in doubt",
             ",".join(f"{b.group}:{b.bqual.decode('utf-8', 'replace')}" for b in x.branches),
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(x.decided_at)) if x.decided_at else None]
            for x in items]


XA_COLUMNS = ["XID", "INSTANCE", "DECISION", "STATUS", "BRANCHES", "DECIDED_AT"]

__all__ = ["XaBranches", "XaCoordinator", "XaActive", "XaRolledBack", "switch_value", "xa_switch", "refuse_implicit_commit"]


def xa_switch(session, sql: str) -> bool:  # noqa: ANN001 - proxy.session.session.Session (imports flow one way)
    """The session's new `xa` value from `SET xa = ...`: refused inside a transaction (DBLE hangs there,
    dble#385) and where XA ids cannot be built."""
    on = switch_value(sql)
    if on == session.xa:
        return on
    ex = session.executor
    if ex.pinned or ex.xa.gtrid is not None:
        raise ProxyError("SET xa cannot be changed while a transaction is in progress; COMMIT or ROLLBACK first",
                         1568, "25001")
    if on:
        why = session.runtime.xa.usable()
        if why is not None:
            raise NotSupported(f"SET xa = on is not supported by this pydble: {why}")
    return on
