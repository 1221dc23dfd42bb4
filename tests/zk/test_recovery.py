"""Locks an instance's own session keeps after a ZooKeeper outage cut short the step that should have
released them (in process, against a real ZooKeeper): they must not block the cluster forever."""

from __future__ import annotations

import asyncio
from typing import Any

from clusterkit import instance_and_other

from zk.records import INIT, DdlRecord


def test_a_reconcile_lock_our_own_session_still_holds_is_taken_up_again(
        zookeeper: Any, zk_root: str, backends: list[Any]) -> None:
    """The elected survivor lost ZooKeeper in the middle of a reconcile: its `finally` could not
    delete reconcile.lock, and the session came back, so the ephemeral lock stays, held by us. The
    next pass must go on with it (before: NodeExists, "someone else reconciles", forever) and the
    orphaned record must end; another session's lock is still respected."""
    async def go() -> None:
        refreshed: list[Any] = []
        async with instance_and_other(zookeeper, zk_root + "-recovery", backends, refreshed) as (c, other):
            c.ready = True
            path = c.paths.ddl_record("schema1", "sharding_4_t1")
            rec = DdlRecord("dble-9", "schema1", "sharding_4_t1", "ALTER_TABLE",
                            "ALTER TABLE sharding_4_t1 ADD COLUMN x INT", INIT)
            await c.zk.create(path, rec.encode())            # its originator dble-9 is not online

            await other.create(c.paths.reconcile_lock, b"dble-3", ephemeral=True)   # someone else's
            await c.recovery.pass_once()
            assert await c.zk.exists(path) is not None and refreshed == []
            await other.delete(c.paths.reconcile_lock)

            await c.zk.create(c.paths.reconcile_lock, b"dble-2", ephemeral=True)    # our own, left over
            await c.recovery.pass_once()
            assert await c.zk.exists(path) is None, "the orphaned record was not reconciled"
            assert refreshed == [[("schema1", "sharding_4_t1")]]
            assert await c.zk.exists(c.paths.reconcile_lock) is None

    asyncio.run(go())


def test_a_sync_meta_lock_a_join_could_not_release_is_released_later(
        zookeeper: Any, zk_root: str, backends: list[Any]) -> None:
    """A join whose final delete of syncMeta.lock failed (ZooKeeper away for a moment, the session
    survived): every DDL in the cluster would be refused for as long as our session lives. The
    instance keeps trying until the lock is gone, and leaves alone one that is not ours."""
    async def go() -> None:
        async with instance_and_other(zookeeper, zk_root + "-syncmeta", backends, []) as (c, other):
            await c.zk.create(c.paths.sync_meta_lock, b"dble-2", ephemeral=True)
            await asyncio.wait_for(c._release_sync_meta_lock(c.zk), 5)
            assert await c.zk.exists(c.paths.sync_meta_lock) is None
            await other.create(c.paths.sync_meta_lock, b"dble-3", ephemeral=True)
            await asyncio.wait_for(c._release_sync_meta_lock(c.zk), 5)
            assert (await c.zk.exists(c.paths.sync_meta_lock)).ephemeralOwner == other.session_id

    asyncio.run(go())
