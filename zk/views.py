"""Views in a cluster: the records in ZooKeeper, the change protocol, and the follower that keeps every
instance's catalog current.

    /{root}/{cluster_id}/view                         PERSISTENT  its version is the catalog's revision
    /{root}/{cluster_id}/view/{schema}.{view}         PERSISTENT  the view's record (meta/views.py ViewDef)
    /{root}/{cluster_id}/lock/view_lock/{schema}.{view}  EPHEMERAL  held while one instance changes the view
    /{root}/{cluster_id}/view_ack/{instance}          EPHEMERAL   the revision that instance has applied

A change is one transaction (the record written or deleted, and the folder's version bumped with a
version check, so changes are totally ordered); the originator then waits, like a DDL, until every
instance online has acknowledged that revision (bounded by ack_timeout_s, dropping instances that go
offline), so a view answers on every instance the moment its creator has said OK. Followers re-read
the whole folder whenever its version moves (a watch, and at least every SAFETY_POLL_S)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

import structlog
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from meta.errors import DdlInProgress, TableExists
from meta.views import BadView, ViewDef

from .cluster import SAFETY_POLL_S, ZK_ERRORS, PassLoop, Waker, went_through
from .paths import table_node

if TYPE_CHECKING:
    from .cluster import Cluster

log = structlog.get_logger("pydble.zk.views")

CHANGE_ATTEMPTS = 20   # transactions tried while other views' changes move the revision meanwhile


class ViewSync(PassLoop):
    """This instance's side of the cluster's views: follow them, and change them."""

    name = "views"

    def __init__(self, cluster: Cluster, apply: Callable[[list[ViewDef]], None]) -> None:
        super().__init__(cluster)
        self.apply = apply          # installs a full set of views in the proxy's catalog
        base = cluster.paths.base
        self.folder = f"{base}/view"
        self.locks = f"{cluster.paths.lock}/view_lock"
        self.acks = f"{base}/view_ack"
        self.revision = -1          # the folder version applied here
        self._acked: tuple[int, int] | None = None   # (session, revision) our ack says

    def record(self, schema: str, name: str) -> str:
        return f"{self.folder}/{table_node(schema, name)}"

    # -- following ------------------------------------------------------------------------------
    async def load(self) -> None:
        """Read every view now (at start, before the client port opens) and acknowledge it."""
        zk = self.cluster.zk
        assert zk is not None
        for path in (self.folder, self.locks, self.acks):
            await zk.ensure_path(path)
        await self.pass_once()

    async def pass_once(self) -> None:
        zk = self.cluster.zk
        assert zk is not None
        stat = await zk.exists(self.folder, watch=self.wake)
        if stat is None:
            await zk.ensure_path(self.folder)
            return
        if stat.version != self.revision:
            views: list[ViewDef] = []
            for child in await zk.children(self.folder):
                got = await zk.get_or_none(f"{self.folder}/{child}")
                if got is None:
                    continue
                try:
                    views.append(ViewDef.decode(got[0]))
                except BadView as e:
                    log.warning("skipping a damaged view record", view=child, error=str(e))
            again = await zk.exists(self.folder)
            if again is None or again.version != stat.version:
                self.wake()   # changed while we read: read again
                return
            self.apply(views)
            self.revision = stat.version
        await self._ack()

    async def refresh(self) -> None:
        """Read the views again now (a change under the view's lock starts from the cluster's truth)."""
        try:
            await self.pass_once()
        except ZK_ERRORS as e:
            raise DdlInProgress(f"ZooKeeper did not answer ({e}): the view is not changed, please retry") from None

    async def _ack(self) -> None:
        """online-style ephemeral ack of the revision applied (re-made after a new session)."""
        zk = self.cluster.zk
        assert zk is not None
        sid = zk.session_id or 0
        if self._acked == (sid, self.revision):
            return
        path = f"{self.acks}/{self.cluster.instance}"
        data = str(self.revision).encode()
        got = await zk.get_or_none(path)
        if got is not None and got[1].ephemeralOwner != sid:
            try:
                await zk.delete(path, got[1].version)   # an earlier session's: ours to replace
            except (NoNodeError, BadVersionError):
                pass
            got = None
        if got is None:
            try:
                await zk.create(path, data, ephemeral=True)
            except NodeExistsError:
                await zk.set(path, data)
        else:
            await zk.set(path, data)
        self._acked = (sid, self.revision)

    # -- changing -------------------------------------------------------------------------------
    async def lock(self, schema: str, name: str, sql: str) -> str:
        """Take the view's cluster lock (fail fast, like a DDL's); returns the lock's path."""
        try:
            return await self._lock(schema, name, sql)
        except ZK_ERRORS as e:
            raise DdlInProgress(f"ZooKeeper did not answer ({e}): the view is not changed, please retry") from None

    async def _lock(self, schema: str, name: str, sql: str) -> str:
        c = self.cluster
        c.check_ddl_allowed()
        zk = c.zk
        assert zk is not None
        if await zk.exists(c.paths.sync_meta_lock) is not None:
            raise DdlInProgress("Found another instance initializing metadata. Please try later")
        path = f"{self.locks}/{table_node(schema, name)}"
        try:
            await zk.create(path, f"{c.instance}\n{sql[:200]}".encode(), ephemeral=True)
        except NodeExistsError:
            raise DdlInProgress(f"other session/dble instance is operating view {schema}.{name}, "
                                f"try it later") from None
        return path

    async def unlock(self, path: str) -> None:
        zk = self.cluster.zk
        if zk is None:
            return
        try:
            await zk.delete(path)
        except ZK_ERRORS as e:   # the lock is ephemeral: it goes with our session at worst
            log.warning("could not release a view lock", path=path, error=str(e))

    async def change(self, schema: str, name: str, view: ViewDef | None, must_create: bool) -> int:
        """Write (or delete, view None) a view's record with the folder's version bumped in one
        transaction; the new revision. TableExists when must_create and it is there already."""
        try:
            return await self._change(schema, name, view, must_create)
        except ZK_ERRORS as e:
            raise DdlInProgress(f"ZooKeeper did not answer ({e}) while view {schema}.{name} was written; check "
                                f"it with SHOW CREATE VIEW and retry") from None

    async def _change(self, schema: str, name: str, view: ViewDef | None, must_create: bool) -> int:
        zk = self.cluster.zk
        assert zk is not None
        path = self.record(schema, name)
        for _ in range(CHANGE_ATTEMPTS):
            folder = await zk.exists(self.folder)
            if folder is None:
                await zk.ensure_path(self.folder)
                continue
            there = await zk.exists(path)
            if must_create and there is not None:
                raise TableExists(f"Table '{name}' already exists")
            if view is None and there is None:
                return folder.version

            def build(tx: object) -> None:
                if view is None:
                    tx.delete(path)   # type: ignore[attr-defined]
                elif there is None:
                    tx.create(path, view.encode())   # type: ignore[attr-defined]
                else:
                    tx.set_data(path, view.encode())   # type: ignore[attr-defined]
                tx.set_data(self.folder, b"", folder.version)   # type: ignore[attr-defined]

            results = await zk.commit(build)
            if went_through(results):
                return folder.version + 1
        raise DdlInProgress(f"the view catalog kept changing while {schema}.{name} was written; try again")

    async def wait_acks(self, revision: int, timeout: float) -> list[str]:
        """Wait until every other online instance has applied revision (bounded); the laggards."""
        try:
            return await self._wait_acks(revision, timeout)
        except ZK_ERRORS as e:
            return [f"(ZooKeeper did not answer: {e})"]

    async def _wait_acks(self, revision: int, timeout: float) -> list[str]:
        c = self.cluster
        zk = c.zk
        assert zk is not None
        wake = Waker()
        deadline = time.monotonic() + timeout
        while True:
            online = await c.online(watch=wake)
            pending = []
            for inst in sorted(online - {c.instance}):
                got = await zk.get_or_none(f"{self.acks}/{inst}", watch=wake)
                try:
                    done = got is not None and int(got[0] or b"-1") >= revision
                except ValueError:
                    done = False
                if not done:
                    pending.append(inst)
            if not pending:
                return []
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return pending
            await wake.wait(min(remaining, SAFETY_POLL_S))
