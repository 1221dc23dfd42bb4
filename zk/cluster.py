"""One instance in the cluster: its session, fencing, re-join after a lost session, and the views
the manager shows. The concerns live beside it: membership and join (membership.py), acks
(acks.py), ddl_history (history.py), recovery (recovery.py), the loop helpers (loops.py), record
reads (reads.py); the protocol's decisions are the core's (ddlcore/).

An instance is *ready* for DDL only while its ZooKeeper session is connected and it has joined with
that session: taken syncMeta.lock, let in-flight DDL finish (or reconciled orphans), loaded
metadata, registered online/{instance} and started its listeners. Reads and DML never wait for
any of this.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from typing import Awaitable, Callable, Mapping

import structlog
from kazoo.exceptions import AuthFailedError
from kazoo.protocol.states import KazooState

from meta.config import Config, StartRefused
from meta.errors import DdlInProgress
from meta.locks import MetaLocks
from meta.registry import Registry

from .acks import AckBook
from .aio import Zk, ZkTimeout
from .ddlcore.acks import AckOutcome
from .ddlcore.txn import went_through
from .history import HistoryLog
from .loops import SAFETY_POLL_S, ZK_ERRORS, PassLoop, Waker, drop_tasks, retry
from .membership import Membership
from .paths import Paths, parse_table_node
from .peers import PeerLinks, PeerServer
from .reads import read
from .port import REMOVE_ATTEMPTS
from .release import Released, release_ddl
from .records import DdlLockInfo, DdlRecord, OnlineInfo

log = structlog.get_logger("pydble.cluster")

PauseHook = Callable[[str], Awaitable[None]]


class Cluster(Membership, AckBook, HistoryLog):
    """This instance's view of and role in the cluster."""

    def __init__(self, config: Config, registry: Registry, locks: MetaLocks,
                 load_all: Callable[[], Awaitable[None]],
                 refresh: Callable[..., Awaitable[None]],   # refresh(keys, texts=None)
                 refresh_now: Callable[[list[tuple[str, str]], Mapping], bool] | None = None,
                 ddl_running: Callable[..., Awaitable[list[str]]] | None = None,
                 connect: Callable[..., Zk] = Zk,
                 peer_links: Callable[[Cluster], PeerLinks] = PeerLinks,
                 peer_server: Callable[..., PeerServer] = PeerServer) -> None:
        """`connect`, `peer_links` and `peer_server` are the ports to ZooKeeper and the peers: the real
        client and sockets here, the deterministic simulator's models in tests/sim."""
        assert config.cluster is not None
        self._connect = connect
        self._peer_server_port = peer_server
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
        self.pause: PauseHook | None = None   # tests only (cli/pause.py): pauses at a named DDL phase
        self.log = log.bind(instance=self.instance)
        from .listener import DdlListener
        from .recovery import Recovery
        self.listener = DdlListener(self)
        self.recovery = Recovery(self)
        self.peers = peer_links(self)
        self.peer_server: PeerServer | None = None
        self._online_view: tuple[Zk, frozenset[str]] | None = None   # see online_now()
        self._online_watch = self._online_changed   # one callable, so re-arming never piles up watchers

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Connect and join; if ZooKeeper is down, load metadata alone and join once it is back."""
        loop = asyncio.get_running_loop()
        await self._start_peer_server()
        self.zk = self._connect(self.cc.zk, self.cc.session_timeout_s, loop, self.cc.auth)
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
        server = self._peer_server_port(self.instance, self.cc.cluster_id, key, self.listener.on_peer_step,
                            lambda: self.registry.version, self.listener.peer_step_now, self.pause)
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
        async def connect() -> bool:
            if not await self._fresh_client():
                return False
            await self._rejoin()
            self._spawn(self._publish_meta_version())
            return True
        await retry(connect, 1.0, lambda: self._stopping or self.refused is not None, what="connect")

    async def _fresh_client(self) -> bool:
        """Replace the kazoo client with a new one (new session); True once it is connected."""
        old = self.zk
        zk = self._connect(self.cc.zk, self.cc.session_timeout_s, asyncio.get_running_loop(), self.cc.auth)
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

    async def paused(self, phase: str) -> None:
        """A named phase of a DDL: the test hook, if one is set, may pause here (and only pause)."""
        if self.pause is not None:
            await self.pause(phase)

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

    # -- views ----------------------------------------------------------------------------------
    async def ddl_rows(self) -> list[tuple[str, str, str, str, str, float]]:
        """Every DDL in flight in the cluster: (schema, table, sql, instance, phase, since)."""
        zk = self.zk
        if zk is None or not zk.connected:
            return []
        rows = []
        for name in await zk.children(self.paths.ddl_locks):
            parts = parse_table_node(name)
            if parts is None:
                continue
            lock = await read(zk, self.paths.ddl_lock(*parts), DdlLockInfo)
            if lock is None or lock.value is None:
                continue
            rec = await read(zk, self.paths.ddl_record(*parts), DdlRecord)
            phase = "LOCKED" if rec is None else rec.value.status if rec.value is not None else "UNKNOWN"
            rows.append((parts[0], parts[1], lock.value.sql, lock.value.instance, phase, lock.value.since))
        # a record whose lock went with its originator's session: the DDL may still run on the nodes
        # until a survivor has reconciled it, and the table stays locked meanwhile
        locked = {(r[0], r[1]) for r in rows}
        for name in await zk.children(self.paths.ddl):
            parts = parse_table_node(name)
            if parts is None or parts in locked:
                continue
            got = await read(zk, self.paths.ddl_record(*parts), DdlRecord)
            if got is None or got.value is None:
                continue
            r = got.value
            rows.append((parts[0], parts[1], r.sql, r.instance, f"{r.status} (orphaned)", r.created_at))
        return rows

    async def instance_rows(self) -> list[tuple[str, str, int, str]]:
        """`show @@cluster`: name, address, meta version, session state of each online instance."""
        zk = self.zk
        if zk is None or not zk.connected:
            srv = self.config.server
            return [(self.instance, f"{srv.bind}:{srv.port}", self.registry.version, self.session_state)]
        rows = []
        for name in sorted(await zk.children(self.paths.online)):
            got = await read(zk, self.paths.online_instance(name), OnlineInfo)
            if got is None or got.value is None:
                continue
            info = got.value
            state = self.session_state if name == self.instance else "ONLINE"
            version = self.registry.version if name == self.instance else info.meta_version
            rows.append((name, f"{info.host}:{info.port}", version, state))
        return rows

    async def release_table(self, schema: str, table: str, force: bool = False) -> Released:
        """Operator release (kill @@ddl_lock): zk/release.py, the one procedure `pydble ddl release` runs
        too (refused while an owner is online or the DDL still runs on a node, unless `force`)."""
        zk = self.zk
        if zk is None or not zk.connected:
            raise DdlInProgress("ZooKeeper is unreachable: cannot release the cluster lock")
        running = (lambda marker, kill: self.ddl_running(marker, kill=kill)) if self.ddl_running else None
        done = await release_ddl(zk, self.paths, (schema, table), running, force, "kill @@ddl_lock")
        if done.history:
            self.spawn_quietly(self.prune_history(done.history))
        return done


__all__ = ["AckOutcome", "Cluster", "PassLoop", "REMOVE_ATTEMPTS", "SAFETY_POLL_S", "Waker", "ZK_ERRORS",
           "drop_tasks", "went_through"]
