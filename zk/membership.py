"""Membership and join: one instance's name, its online node, syncMeta.lock and who else is online.

An instance joins with its session: it takes syncMeta.lock, lets in-flight DDL finish (or reconciles
orphans), loads metadata, registers online/{instance} and starts its listeners.
"""

from __future__ import annotations

import asyncio
import os
from typing import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoAuthError, NoNodeError

from meta.config import StartRefused
from meta.errors import DdlInProgress
from meta.registry import MetaChange

from .aio import Zk
from .loops import SAFETY_POLL_S, ZK_ERRORS, Waker, clock, retry
from .reads import read
from .records import DdlLockInfo, OnlineInfo


class Membership:
    """The join of a Cluster and its view of the online instances (a part of zk.cluster.Cluster)."""

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
        session = zk.session_id   # the join counts only if it ends on the session it began with
        jlog = self.log.bind(phase="join")
        for path in (self.paths.online, self.paths.ddl_locks, self.paths.ddl, self.paths.history):
            await zk.ensure_path(path)
        await self._claim_name()
        await self._remove_own_stale_nodes()
        await self._take_sync_meta_lock()
        try:
            await self.recovery.drain_in_flight(jlog)
            # ddl_history's position before the load: a DDL still in flight after the drain's bound may end
            # after the load read its table; its entry, written later, is then applied by the listener
            history = await zk.children(self.paths.history)
            await self.load_all()
            await self._register_online()
            self.listener.start(history)
            self.recovery.start()
        finally:
            try:
                await zk.delete(self.paths.sync_meta_lock)
            except ZK_ERRORS:
                # our session may outlive the outage that made this fail, and every DDL in the
                # cluster is refused while syncMeta.lock is held: keep trying
                self._spawn(self._release_sync_meta_lock(zk))
        if self.zk is not zk or not zk.connected or zk.session_id != session:
            # the session expired while we joined (a pause, an outage): our online node and listeners
            # went with it, so this instance is not in the cluster; join again on the new session
            self._lost = True
            jlog.warning("zookeeper session changed during the join; joining again")
            self._join_again_later()
            return
        self.ready = True
        jlog.info("joined the cluster", initial=initial, session=hex(zk.session_id or 0))

    def _join_again_later(self) -> None:
        """A re-join once the join lock is free and ZooKeeper is connected (bounded only by stop, refusal
        or success: an instance out of the cluster must keep trying)."""
        async def attempt() -> bool:
            if self.zk is not None and self.zk.connected and not self.ready:
                await self._rejoin()
            return self.ready
        pending = getattr(self, "_join_again", None)
        if pending is None or pending.done():
            self._join_again = self._spawn(retry(
                attempt, 1.0, lambda: self._stopping or self.ready or self.refused is not None, what="re-join"))

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
            got = await read(zk, path, OnlineInfo, watch=wake)
            if got is None or got.stat.ephemeralOwner == zk.session_id:
                return
            info: OnlineInfo | None = got.value
            if info is not None and info.incarnation == self.incarnation:
                self.log.warning("removing online node of this process's previous session")
                try:
                    await zk.delete(path, got.stat.version)
                except (NoNodeError, BadVersionError):
                    pass
                continue
            holder = f"pid {info.pid} on {info.host}" if info is not None else "unknown process"
            now = clock()
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
            got = await read(zk, path, DdlLockInfo)
            if got is None or got.value is None:
                continue
            if got.value.instance == self.instance and got.stat.ephemeralOwner != sid:
                self.log.warning("removing ddl lock of this instance's previous session", table=name)
                await zk.delete(path)

    async def _take_sync_meta_lock(self) -> None:
        """Hold syncMeta.lock while loading; wait (bounded) while another instance holds it."""
        zk = self.zk
        assert zk is not None
        deadline = clock() + max(60.0, 6 * self.cc.session_timeout_s)
        wake = Waker()
        while True:
            try:
                await zk.create(self.paths.sync_meta_lock, self.instance.encode(), ephemeral=True)
                return
            except NodeExistsError:
                pass
            if clock() > deadline:
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

