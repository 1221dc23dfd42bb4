"""Membership of one instance in the cluster: join, fencing, re-join after a lost session.

An instance is *ready* for DDL only while its ZooKeeper session is connected and it has joined with
that session: taken syncMeta.lock, let in-flight DDL finish (or reconciled orphans), loaded
metadata, registered online/{instance} and started its listeners. Reads and DML never wait for
any of this.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

import structlog
from kazoo.exceptions import (AuthFailedError, BadVersionError, KazooException, NodeExistsError, NoAuthError,
                              NoNodeError)
from kazoo.protocol.states import KazooState

from meta.config import Config, StartRefused
from meta.errors import DdlInProgress
from meta.locks import MetaLocks
from meta.registry import MetaChange, Registry

from .aio import Zk, ZkTimeout
from .paths import Paths, history_order, history_seq, parse_table_node
from .peers import PeerLinks, PeerServer
from .records import FAILED, INIT, Ack, BadRecord, DdlLockInfo, DdlRecord, HistoryEntry, OnlineInfo

log = structlog.get_logger("pydble.cluster")

ZK_ERRORS = (KazooException, ZkTimeout)
SAFETY_POLL_S = 2.0   # level-triggered loops re-read state at least this often, watches or not
PEER_GRACE_S = 0.2    # how long acks are awaited on the peer channel alone before ZooKeeper is read too
PEER_RETRY_S = 0.1    # a final step that found no usable link is sent again this much later
HISTORY_MAX = 1000    # finished DDLs kept in ddl_history for instances that must catch up
HISTORY_PRUNE_EVERY = 100
LOST_DECISION_RETRY_S = 300.0   # how long an originator that lost its decision tries to reach the others
REMOVE_ATTEMPTS = 5   # removal transactions tried while acks come and go meanwhile


@dataclass(frozen=True)
class AckOutcome:
    """What a wait for acknowledgements found."""

    laggards: tuple[str, ...] = ()            # online instances that did not ack in time
    refusals: tuple[tuple[str, str], ...] = ()  # (instance, message) that acked ok=false
    by_peer: frozenset[str] = frozenset()     # instances that acked every record over the peer channel


def went_through(results: list) -> bool:
    """A transaction's results say it was applied (a failed one has an exception per operation)."""
    return not any(isinstance(r, Exception) for r in results)


def drop_tasks(tasks: dict) -> None:
    """Cancel peer asks still running; a finished one's failure (a broken link) is expected, not news."""
    for task in tasks.values():
        if not task.done():
            task.cancel()
        elif not task.cancelled():
            task.exception()


class Waker:
    """An asyncio event that ZooKeeper watches set; loops wait on it with a bound."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def __call__(self, _event: object = None) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> bool:
        """Wait for a watch to fire, at most timeout seconds; then re-arm. True if one fired."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
            fired = True
        except asyncio.TimeoutError:
            fired = False
        self._event.clear()
        return fired


class PassLoop:
    """A level-triggered follower: pass_once() runs whenever a watch fires, and at least every
    SAFETY_POLL_S, so a missed or coalesced event (or a SIGSTOP) can never lose a step."""

    name = "loop"
    settle_s = 0.0   # after a watch fires, wait this long so a burst of events costs one pass

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.wake = Waker()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start the loop (or just wake it if it runs); called at every join."""
        if self._task is None or self._task.done():
            self._task = self.cluster._spawn(self._loop())
        self.wake()

    async def _loop(self) -> None:
        c = self.cluster
        while not c._stopping:
            try:
                if c.zk is not None and c.zk.connected:
                    await self.pass_once()
            except ZK_ERRORS as e:
                log.debug(f"{self.name} pass failed, will retry", instance=c.instance, error=str(e))
            except Exception:  # noqa: BLE001 - the loop must survive anything
                log.exception(f"{self.name} pass crashed, will retry", instance=c.instance)
            if await self.wake.wait(SAFETY_POLL_S) and self.settle_s:
                await asyncio.sleep(self.settle_s)

    async def pass_once(self) -> None:
        """Read the state and act on what changed."""
        raise NotImplementedError


class Cluster:
    """This instance's view of and role in the cluster."""

    def __init__(self, config: Config, registry: Registry, locks: MetaLocks,
                 load_all: Callable[[], Awaitable[None]],
                 refresh: Callable[..., Awaitable[None]],   # refresh(keys, texts=None)
                 refresh_now: Callable[[list[tuple[str, str]], Mapping], bool] | None = None,
                 ddl_running: Callable[..., Awaitable[list[str]]] | None = None) -> None:
        assert config.cluster is not None
        self.config = config
        self.cc = config.cluster
        self.instance = config.server.instance
        self.paths = Paths(self.cc.root, self.cc.cluster_id)
        self.registry = registry
        self.locks = locks
        self.load_all = load_all
        self.refresh = refresh
        self.refresh_now = refresh_now   # refresh from texts without waiting; False: refresh must load
        # ddl_running(marker, kill=False): the dbGroups where a DDL with that marker still runs
        self.ddl_running = ddl_running
        self.zk: Zk | None = None
        self.ready = False
        self.session_state = "NOT_CONNECTED"
        self.started_at = time.time()
        self.incarnation = secrets.token_hex(8)   # this process, as told apart from a twin or predecessor
        self.peer_key = self.cc.peer_key()        # None: the peer channel is off
        self.active_ddls: set[str] = set()          # record paths this instance is originating now
        self._tasks: set[asyncio.Task] = set()
        self._join_task: asyncio.Task | None = None
        self._lost = False   # the session expired since we last joined: re-join when connected again
        self._watchdog_task: asyncio.Task | None = None
        self._join_lock = asyncio.Lock()   # held while a join runs (state changes must not start another)
        self._started = False   # start() has finished: from now on a not-ready instance re-joins
        self._stopping = False
        self.refused: str | None = None   # why this instance can take no part in the cluster (until restarted)
        self._meta_dirty = asyncio.Event()
        self.log = log.bind(instance=self.instance)
        from .listener import DdlListener
        from .recovery import Recovery
        self.listener = DdlListener(self)
        self.recovery = Recovery(self)
        self.peers = PeerLinks(self)
        self.peer_server: PeerServer | None = None
        self._online_view: tuple[Zk, frozenset[str]] | None = None   # see online_now()
        self._online_watch = self._online_changed   # one callable, so re-arming never piles up watchers

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect and join; if ZooKeeper is down, load metadata alone and join once it is back."""
        loop = asyncio.get_running_loop()
        await self._start_peer_server()
        self.zk = Zk(self.cc.zk, self.cc.session_timeout_s, loop, self.cc.auth)
        self.zk.on_state(self._on_state)
        self.registry.add_listener(self._on_meta_change)
        try:
            await self.zk.start(timeout=self.cc.session_timeout_s)
        except AuthFailedError as e:
            await self.stop()
            raise StartRefused(f"{e}: check [cluster] auth") from None
        except ZkTimeout as e:
            self.log.error("zookeeper unreachable at start; serving without DDL until it is back", error=str(e))
            self.session_state = "NOT_CONNECTED"
            await self.load_all()
            self._started = True
            self._spawn(self._connect_later())
            return
        self.session_state = "CONNECTED"
        try:
            await self.join(initial=True)
        except StartRefused:
            await self.stop()
            raise
        self._started = True
        self._spawn(self._publish_meta_version())

    async def _start_peer_server(self) -> None:
        """Listen for peers' DDL steps (zk/peers.py) unless `[cluster] peer_port = -1` or no key."""
        key = self.peer_key
        if key is None:
            if self.cc.peer_port >= 0:
                self.log.warning("peer channel off: DDL steps go through ZooKeeper only (slower); set "
                                 "[cluster] peer_secret (the same on every instance) or auth for the fast path")
            return
        server = PeerServer(self.instance, self.cc.cluster_id, key, self.listener.on_peer_step,
                            lambda: self.registry.version, self.listener.peer_step_now)
        try:
            port = await server.start(self.config.server.bind, self.cc.peer_port)
        except OSError as e:
            self.log.error("peer channel not started; DDL acks go through ZooKeeper only",
                           port=self.cc.peer_port, error=str(e))
            return
        self.peer_server = server
        self.log.info("peer channel listening", peer_port=port)

    async def _connect_later(self) -> None:
        """Keep trying to reach ZooKeeper with fresh clients; join when it answers."""
        while not self._stopping and self.refused is None:
            if await self._fresh_client():
                await self._rejoin()
                self._spawn(self._publish_meta_version())
                return
            await asyncio.sleep(1.0)

    async def _fresh_client(self) -> bool:
        """Replace the kazoo client with a new one (new session); True once it is connected."""
        old = self.zk
        zk = Zk(self.cc.zk, self.cc.session_timeout_s, asyncio.get_running_loop(), self.cc.auth)
        zk.on_state(self._on_state)
        self.zk = zk
        if old is not None:
            self._spawn(self._close_quietly(old))
        try:
            await zk.start(timeout=self.cc.session_timeout_s)
        except ZkTimeout:
            return False
        except AuthFailedError as e:
            self._refuse(f"{e}: check [cluster] auth")
            return False
        self.session_state = "CONNECTED"
        return True

    @staticmethod
    async def _close_quietly(zk: Zk) -> None:
        try:
            await asyncio.wait_for(zk.stop(), 10)
        except (asyncio.TimeoutError, *ZK_ERRORS):
            pass

    async def _watchdog(self) -> None:
        """After a lost session, kazoo should reconnect by itself; if it has not (bounded), start over."""
        grace = max(5.0, 2 * self.cc.session_timeout_s)
        while not self._stopping and not self.ready and self.refused is None:
            await asyncio.sleep(grace)
            if self._stopping or self.ready or self.refused is not None or (self.zk is not None and self.zk.connected):
                continue
            self.log.warning("zookeeper client did not reconnect; starting a new one", waited_s=grace)
            if await self._fresh_client():
                await self._rejoin()

    async def stop(self) -> None:
        """Leave the cluster: stop loops, close the session (ephemeral nodes vanish at once)."""
        self._stopping = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.listener.later.flush()
        self.peers.close()
        if self.peer_server is not None:
            await self.peer_server.stop()
        if self.zk is not None:
            try:
                await asyncio.wait_for(self.zk.stop(), 10)
            except (asyncio.TimeoutError, *ZK_ERRORS):
                pass

    def spawn_quietly(self, coro: Awaitable) -> None:
        """Background ZooKeeper housekeeping (owned by this instance, stopped with it) whose failure
        is only worth a debug line: the next run does the same work."""
        async def run() -> None:
            try:
                await coro
            except ZK_ERRORS as e:
                self.log.debug("background zookeeper work failed", error=str(e))
        self._spawn(run())

    def _spawn(self, coro: Awaitable) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- connection state and fencing -----------------------------------------------------------
    def _on_state(self, state: str) -> None:
        prev = self.session_state
        self.session_state = state
        self._online_view = None   # watches may be lost with the connection
        if state == KazooState.LOST:
            if self.ready:
                self.log.warning("zookeeper session lost: DDL refused until this instance re-joins")
            self.ready = False
            self._lost = True
            if self.zk is not None and self.zk.auth_failed is not None:
                self._refuse(f"{self.zk.auth_failed}: check [cluster] auth")
                return   # no reconnect loop: the same credentials would be refused again
            if self._watchdog_task is None or self._watchdog_task.done():
                self._watchdog_task = self._spawn(self._watchdog())
        elif state == KazooState.SUSPENDED:
            self.log.warning("zookeeper connection suspended: DDL refused until it is back")
        elif state == KazooState.CONNECTED and prev != KazooState.CONNECTED:
            idle = not self._join_lock.locked() and (self._join_task is None or self._join_task.done())
            if (self._lost or (not self.ready and self._started)) and not self._stopping and idle:
                # a new session, or the same one back after a join that failed during the outage
                self._lost = False
                self.log.info("zookeeper connected again: re-joining")
                self._join_task = self._spawn(self._rejoin())
            elif prev == KazooState.SUSPENDED:
                self.log.info("zookeeper connection back, same session")

    async def _rejoin(self) -> None:
        """After a lost session: join again (retried), reloading metadata from the backends."""
        while not self._stopping and not self.ready and self.zk is not None and self.zk.connected:
            try:
                await self.join(initial=False)
            except StartRefused as e:
                self._refuse(str(e))
                return
            except Exception as e:  # noqa: BLE001 - retried; the instance keeps serving meanwhile
                self.log.warning("re-join failed, retrying", error=str(e))
                await asyncio.sleep(1.0)

    def _refuse(self, why: str) -> None:
        """This instance cannot take part in the cluster (a twin holds its name, ZooKeeper refuses its
        credentials): stop trying, refuse DDL, keep serving reads and DML."""
        if self.refused is None:
            self.log.error("this instance cannot take part in the cluster: DDL refused until it is restarted",
                           reason=why)
        self.refused = why

    def check_ddl_allowed(self) -> None:
        """Refuse DDL unless the session is connected and this instance has joined with it."""
        if self.refused is not None:
            raise DdlInProgress(f"this instance cannot take part in the cluster ({self.refused}); DDL is "
                                f"refused until it is restarted")
        zk = self.zk
        if zk is None or not zk.connected:
            raise DdlInProgress(f"ZooKeeper is unreachable (session {self.session_state}): this instance "
                                f"refuses DDL until it is back in the cluster")
        if not self.ready:
            raise DdlInProgress("this instance is re-joining the cluster after losing its ZooKeeper session; "
                                "DDL is refused until it has reloaded metadata, please retry")

    # -- join -----------------------------------------------------------------------------------
    async def join(self, initial: bool) -> None:
        """syncMeta.lock → drain or reconcile in-flight DDL → load metadata → online → listeners."""
        async with self._join_lock:  # one join at a time, whoever asked for it
            if not initial and self.ready:
                return  # another join finished while this one waited
            try:
                await self._join(initial)
            except NoAuthError:
                who = (f"the configured [cluster] auth (digest user '{self.cc.auth.partition(':')[0]}') is not "
                       f"the identity its nodes were created with" if self.cc.auth else
                       "its nodes are protected by digest ACLs and no [cluster] auth is configured")
                raise StartRefused(f"ZooKeeper refused access to {self.paths.base}: {who}") from None

    async def _join(self, initial: bool) -> None:
        zk = self.zk
        assert zk is not None
        jlog = self.log.bind(phase="join")
        for path in (self.paths.online, self.paths.ddl_locks, self.paths.ddl, self.paths.history):
            await zk.ensure_path(path)
        await self._claim_name()
        await self._remove_own_stale_nodes()
        await self._take_sync_meta_lock()
        try:
            await self.recovery.drain_in_flight(jlog)
            await self.load_all()
            await self._register_online()
            self.listener.start()
            self.recovery.start()
        finally:
            try:
                await zk.delete(self.paths.sync_meta_lock)
            except ZK_ERRORS:
                # our session may outlive the outage that made this fail, and every DDL in the
                # cluster is refused while syncMeta.lock is held: keep trying
                self._spawn(self._release_sync_meta_lock(zk))
        self.ready = True
        jlog.info("joined the cluster", initial=initial, session=hex(zk.session_id or 0))

    async def _claim_name(self) -> None:
        """Make sure no other live process is online under our instance name.

        online/{instance} held by another session is either an earlier session of this very process
        (same incarnation: ours to remove), a predecessor that died without closing its session (its
        node goes when that session expires, within about session_timeout_s), or a live twin, whose
        session never expires: we wait for the node to go, and refuse to join if it outlives any
        session of ours could (StartRefused). A live twin is never displaced."""
        zk = self.zk
        assert zk is not None
        path = self.paths.online_instance(self.instance)
        wake = Waker()
        deadline: float | None = None
        while True:
            got = await zk.get_or_none(path, watch=wake)
            if got is None or got[1].ephemeralOwner == zk.session_id:
                return
            try:
                info: OnlineInfo | None = OnlineInfo.decode(got[0])
            except BadRecord:
                info = None
            if info is not None and info.incarnation == self.incarnation:
                self.log.warning("removing online node of this process's previous session")
                try:
                    await zk.delete(path, got[1].version)
                except (NoNodeError, BadVersionError):
                    pass
                continue
            holder = f"pid {info.pid} on {info.host}" if info is not None else "unknown process"
            now = time.monotonic()
            if deadline is None:
                deadline = now + 2 * self.cc.session_timeout_s + 2
                self.log.warning("instance name held by another session: waiting for it to expire "
                                 "(a previous run of this instance) or refusing to join (a live twin)", holder=holder)
            if now >= deadline:
                raise StartRefused(f"another live process ({holder}) is registered as instance '{self.instance}'; "
                                   f"every instance needs its own [server] instance name")
            await wake.wait(min(deadline - now, SAFETY_POLL_S))

    async def _remove_own_stale_nodes(self) -> None:
        """DDL locks of an earlier session of this instance (it has no online node any more)."""
        zk = self.zk
        assert zk is not None
        sid = zk.session_id
        for name in await zk.children(self.paths.ddl_locks):
            path = f"{self.paths.ddl_locks}/{name}"
            got = await zk.get_or_none(path)
            if got is None:
                continue
            try:
                info = DdlLockInfo.decode(got[0])
            except BadRecord:
                continue
            if info.instance == self.instance and got[1].ephemeralOwner != sid:
                self.log.warning("removing ddl lock of this instance's previous session", table=name)
                await zk.delete(path)

    async def _take_sync_meta_lock(self) -> None:
        """Hold syncMeta.lock while loading; wait (bounded) while another instance holds it."""
        zk = self.zk
        assert zk is not None
        deadline = time.monotonic() + max(60.0, 6 * self.cc.session_timeout_s)
        wake = Waker()
        while True:
            try:
                await zk.create(self.paths.sync_meta_lock, self.instance.encode(), ephemeral=True)
                return
            except NodeExistsError:
                pass
            if time.monotonic() > deadline:
                raise DdlInProgress("syncMeta.lock stayed held by another instance; join postponed")
            stat = await zk.exists(self.paths.sync_meta_lock, watch=wake)
            if stat is not None and stat.ephemeralOwner == zk.session_id:
                return  # left by an earlier join of ours that failed before releasing it: still ours
            if stat is not None:
                await wake.wait(SAFETY_POLL_S)

    async def _release_sync_meta_lock(self, zk: Zk) -> None:
        """Delete a syncMeta.lock a join could not release, while it is still our session's."""
        while not self._stopping and zk is self.zk:
            await asyncio.sleep(1.0)
            try:
                stat = await zk.exists(self.paths.sync_meta_lock)
                if stat is None or stat.ephemeralOwner != zk.session_id or self._join_lock.locked():
                    return   # gone, another instance's, or a new join of ours owns it now
                await zk.delete(self.paths.sync_meta_lock, stat.version)
                self.log.info("syncMeta.lock released after a failed attempt")
                return
            except (NoNodeError, BadVersionError):
                return
            except ZK_ERRORS:
                continue

    async def _register_online(self) -> None:
        zk = self.zk
        assert zk is not None
        info = self._online_info()
        path = self.paths.online_instance(self.instance)
        while True:
            try:
                await zk.create(path, info.encode(), ephemeral=True)
                return
            except NodeExistsError:
                pass
            got = await zk.get_or_none(path)
            if got is not None and got[1].ephemeralOwner == zk.session_id:
                await zk.set(path, info.encode())
                return
            await self._claim_name()   # a twin that joined while we loaded: wait for it to go, or refuse

    def _online_info(self) -> OnlineInfo:
        """What online/{instance} says: addresses, meta version, and how to reach our peer channel."""
        srv = self.config.server
        ps = self.peer_server
        return OnlineInfo(srv.bind, srv.port, srv.manager_port, self.started_at, self.registry.version,
                          os.getpid(), ps.port if ps else 0, self.incarnation)

    def _on_meta_change(self, _change: MetaChange) -> None:
        self._meta_dirty.set()

    async def _publish_meta_version(self) -> None:
        """Keep online/{instance}'s meta_version current (coalescing bursts of changes)."""
        while not self._stopping:
            await self._meta_dirty.wait()
            self._meta_dirty.clear()
            await asyncio.sleep(0.2)
            if not self.ready or self.zk is None:
                continue
            info = self._online_info()
            try:
                await self.zk.set(self.paths.online_instance(self.instance), info.encode())
            except (NoNodeError, *ZK_ERRORS):
                pass

    # -- shared reads -----------------------------------------------------------------------------
    async def online(self, watch: Callable | None = None) -> set[str]:
        """Names of the instances online now."""
        assert self.zk is not None
        return set(await self.zk.children(self.paths.online, watch=watch))

    async def online_now(self) -> set[str]:
        """The instances online now, without a round trip when nothing changed since the last read.

        The view is kept with a watch and dropped the moment the watch fires. ZooKeeper sends a
        watch event before the answer to any later request, and zk/aio.py hands both to the loop
        in that order, so after an answer the view is as new as that answer: an instance that came
        online before our INIT write has dropped the view before we look at it."""
        zk = self.zk
        assert zk is not None
        view = self._online_view
        if view is not None and view[0] is zk and zk.connected:
            return set(view[1])
        names = frozenset(await zk.children(self.paths.online, watch=self._online_watch))
        if zk is self.zk and zk.connected:
            self._online_view = (zk, names)
        return set(names)

    def _online_changed(self, _event: object = None) -> None:
        self._online_view = None

    def ask_peers(self, keys: list[tuple[str, str]], records: dict[tuple[str, str], tuple[DdlRecord, int]],
                  instances: set[str], texts: dict | None = None,
                  final: bool = False) -> dict[tuple[tuple[str, str], str], asyncio.Future]:
        """Send a step of our DDL straight to each instance (zk/peers.py); each future gives its ack.
        `final`: the record is removed without waiting for ZooKeeper acks, so the peer writes none."""
        tasks: dict[tuple[tuple[str, str], str], asyncio.Future] = {}
        if self.peer_server is None:
            return tasks   # the channel is off on this instance: ZooKeeper acks only
        loop = asyncio.get_running_loop()
        for key in keys:
            rec, czxid = records[key]
            step = self.peers.step(self.paths.ddl_record(*key), czxid, rec.encode().decode(), texts, final)
            for inst in instances:
                # written right away on an open link; otherwise a task opens one first
                sent = self.peers.send_now(inst, step)
                tasks[(key, inst)] = sent if sent is not None else loop.create_task(self.peers.ask(inst, step))
        return tasks

    async def deliver(self, records: dict[tuple[str, str], tuple[DdlRecord, int]], texts: dict | None,
                      tasks: dict[tuple[tuple[str, str], str], asyncio.Future], timeout: float) -> AckOutcome:
        """Wait (bounded) for the answers to a final step sent with ask_peers(final=True), over the peer
        channel alone: a link that breaks is opened again and the step re-sent; an instance that goes
        offline is no longer waited for. Instances that never answered in time come back as laggards."""
        deadline = time.monotonic() + timeout
        tasks = dict(tasks)
        refusals: list[tuple[str, str]] = []
        online = {inst for _, inst in tasks}
        try:
            while tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                done, _ = await asyncio.wait(tasks.values(), timeout=min(remaining, SAFETY_POLL_S),
                                             return_when=asyncio.FIRST_COMPLETED)
                try:
                    online = await self.online_now()
                except ZK_ERRORS:
                    pass   # the decision is ZooKeeper's business; here only who is still worth waiting for
                retry: set[tuple[tuple[str, str], str]] = set()
                for (key, inst), task in list(tasks.items()):
                    if inst not in online:
                        del tasks[(key, inst)]
                        task.cancel()
                    elif task in done:
                        del tasks[(key, inst)]
                        answer = None if task.cancelled() or task.exception() is not None else task.result()
                        if answer is None or answer[0] is None:
                            retry.add((key, inst))   # broken link, or not ready for peer steps right now
                        elif not answer[0]:
                            refusals.append((inst, answer[1]))
                if retry:
                    await asyncio.sleep(min(PEER_RETRY_S, max(0.0, deadline - time.monotonic())))
                    for key, inst in retry:
                        tasks.update(self.ask_peers([key], records, {inst}, texts, final=True))
            return AckOutcome(tuple(sorted({inst for _, inst in tasks})), tuple(refusals))
        finally:
            drop_tasks(tasks)

    async def wait_acks(self, keys: list[tuple[str, str]], status: str, expected: set[str],
                        timeout: float, peer: dict[tuple[tuple[str, str], str], asyncio.Future] | None = None,
                        records: Mapping[tuple[str, str], int] | None = None) -> AckOutcome:
        """Wait until every expected instance still online has acked status on every record (bounded).

        An answer on the peer channel counts as an ack; ZooKeeper is read only for instances that
        have not answered there within PEER_GRACE_S (or at once when their channel failed). A ZooKeeper
        ack counts only for the record it names (`records`: the czxid of each key's record), never for
        an earlier DDL's on the same table."""
        peer = dict(peer or {})
        try:
            return await self._wait_acks(keys, status, expected, timeout, peer, records or {})
        finally:
            drop_tasks(peer)

    async def _wait_acks(self, keys: list[tuple[str, str]], status: str, expected: set[str],
                         timeout: float, peer: dict[tuple[tuple[str, str], str], asyncio.Future],
                         records: Mapping[tuple[str, str], int]) -> AckOutcome:
        zk = self.zk
        assert zk is not None
        deadline = time.monotonic() + timeout
        wake = Waker()
        acked: dict[tuple[str, str], set[str]] = {key: set() for key in keys}  # counted once, kept
        by_peer: dict[tuple[str, str], set[str]] = {key: set() for key in keys}
        refusals: list[tuple[str, str]] = []

        def result(laggards: tuple[str, ...] = ()) -> AckOutcome:
            over_peer = set.intersection(*by_peer.values()) if by_peer else set()
            return AckOutcome(laggards, tuple(refusals), frozenset(over_peer))

        def absorb() -> None:
            for (key, inst), task in list(peer.items()):
                if not task.done():
                    continue
                del peer[(key, inst)]
                if task.cancelled() or task.exception() is not None:
                    continue
                ok, message = task.result()
                if ok is not None and inst not in acked[key]:
                    acked[key].add(inst)
                    by_peer[key].add(inst)
                    if not ok:
                        refusals.append((inst, message))

        if peer:
            wanted = [t for (_, inst), t in peer.items() if inst in expected]
            if wanted:
                await asyncio.wait(wanted, timeout=min(PEER_GRACE_S, timeout))
            absorb()
            if all(expected <= acked[key] for key in keys):
                return result()
            for task in peer.values():
                task.add_done_callback(wake)
        while True:
            absorb()
            # one round of reads at a time, each round in parallel: online + ack folders, then new acks
            open_keys = [key for key in keys if expected - acked[key]]
            online, *folders = await asyncio.gather(
                self.online(watch=wake), *(zk.children(self.paths.ddl_acks(*key), watch=wake) for key in open_keys))
            waiting = expected & online
            absorb()
            to_read = [(key, inst) for key, names in zip(open_keys, folders)
                       for inst in names if inst in waiting and inst not in acked[key]]
            got_all = await asyncio.gather(
                *(zk.get_or_none(self.paths.ddl_ack(*key, inst), watch=wake) for key, inst in to_read))
            for (key, inst), got in zip(to_read, got_all):
                if got is None:
                    continue
                try:
                    ack = Ack.decode(got[0])
                except BadRecord:
                    continue
                if ack.status == status and ack.record == records.get(key, ack.record) and inst not in acked[key]:
                    acked[key].add(inst)
                    if not ack.ok:
                        refusals.append((inst, ack.message))
            pending = set().union(*(waiting - acked[key] for key in keys))
            if not pending:
                return result()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return result(tuple(sorted(pending)))
            await wake.wait(min(remaining, SAFETY_POLL_S))

    def own_ack(self, schema: str, table: str, status: str, ok: bool = True, message: str = "",
                record: int = 0) -> tuple[str, bytes]:
        """Path and data of this instance's ack of a record's (czxid `record`) status (also written
        inside transactions)."""
        return (self.paths.ddl_ack(schema, table, self.instance),
                Ack(status, ok, message, self.registry.version, record).encode())

    async def ack(self, rec: DdlRecord, record: int, ok: bool = True, message: str = "") -> None:
        """Write (or update) this instance's ack of a record's (czxid `record`) status, only while the
        record is that DDL's (its owner znode is there); NoNodeError when it is not."""
        zk = self.zk
        assert zk is not None
        path, data = self.own_ack(rec.schema, rec.table, rec.status, ok, message, record)
        owner = self.paths.ddl_owner(rec.schema, rec.table, rec.ddl_id) if rec.ddl_id else None

        def write(create: bool) -> Callable[[Any], None]:
            def build(tx: Any) -> None:
                if owner is not None:
                    tx.check(owner, 0)
                if create:
                    tx.create(path, data, ephemeral=True)
                else:
                    tx.set_data(path, data)
            return build

        # our INIT ack is new; a later step updates it (the other way round when that fails)
        for create in ((True, False) if rec.status == INIT else (False, True)):
            results = await zk.commit(write(create))
            if went_through(results):
                return
            if owner is not None and isinstance(results[0], NoNodeError):
                raise NoNodeError(f"{owner}: the record is gone or another DDL's")
        raise NoNodeError(f"{path}: could not write the ack")

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
        async def run() -> None:
            deadline = time.monotonic() + LOST_DECISION_RETRY_S
            while not self._stopping and time.monotonic() < deadline:
                if self.ready and self.zk is not None and self.zk.connected:
                    try:
                        for schema, table in keys:
                            await self.append_history(HistoryEntry(
                                schema, table, self.instance, sql, FAILED, 0,
                                message="the originator lost its decision: reload from the backends"))
                        self.log.info("asked every instance to reload after a lost decision",
                                      tables=[f"{s}.{t}" for s, t in keys])
                        return
                    except ZK_ERRORS as e:
                        self.log.debug("could not append the reload entry yet", error=str(e))
                await asyncio.sleep(1.0)
            self.log.warning("could not ask the other instances to reload after a lost decision; "
                             "run `reload @@metadata` on them", tables=[f"{s}.{t}" for s, t in keys])
        self._spawn(run())

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

    async def ddl_rows(self) -> list[tuple[str, str, str, str, str, float]]:
        """Every DDL in flight in the cluster: (schema, table, sql, instance, phase, since)."""
        zk = self.zk
        if zk is None or not zk.connected:
            return []
        rows = []
        for name in await zk.children(self.paths.ddl_locks):
            parts = parse_table_node(name)
            got = await zk.get_or_none(f"{self.paths.ddl_locks}/{name}")
            if parts is None or got is None:
                continue
            try:
                info = DdlLockInfo.decode(got[0])
            except BadRecord:
                continue
            phase = "LOCKED"
            rec = await zk.get_or_none(self.paths.ddl_record(*parts))
            if rec is not None:
                try:
                    phase = DdlRecord.decode(rec[0]).status
                except BadRecord:
                    phase = "UNKNOWN"
            rows.append((parts[0], parts[1], info.sql, info.instance, phase, info.since))
        # a record whose lock went with its originator's session: the DDL may still run on the nodes
        # until a survivor has reconciled it, and the table stays locked meanwhile
        locked = {(r[0], r[1]) for r in rows}
        for name in await zk.children(self.paths.ddl):
            parts = parse_table_node(name)
            if parts is None or parts in locked:
                continue
            got = await zk.get_or_none(self.paths.ddl_record(*parts))
            if got is None:
                continue
            try:
                rec = DdlRecord.decode(got[0])
            except BadRecord:
                continue
            rows.append((parts[0], parts[1], rec.sql, rec.instance, f"{rec.status} (orphaned)", rec.created_at))
        return rows

    async def instance_rows(self) -> list[tuple[str, str, int, str]]:
        """`show @@cluster`: name, address, meta version, session state of each online instance."""
        zk = self.zk
        if zk is None or not zk.connected:
            srv = self.config.server
            return [(self.instance, f"{srv.bind}:{srv.port}", self.registry.version, self.session_state)]
        rows = []
        for name in sorted(await zk.children(self.paths.online)):
            got = await zk.get_or_none(self.paths.online_instance(name))
            if got is None:
                continue
            try:
                info = OnlineInfo.decode(got[0])
            except BadRecord:
                continue
            state = self.session_state if name == self.instance else "ONLINE"
            version = self.registry.version if name == self.instance else info.meta_version
            rows.append((name, f"{info.host}:{info.port}", version, state))
        return rows

    async def release_table(self, schema: str, table: str) -> None:
        """Operator release (kill @@ddl_lock): the cluster lock and record of a table."""
        zk = self.zk
        if zk is None or not zk.connected:
            raise DdlInProgress("ZooKeeper is unreachable: cannot release the cluster lock")
        await zk.delete(self.paths.ddl_record(schema, table), recursive=True)
        await zk.delete(self.paths.ddl_lock(schema, table))
