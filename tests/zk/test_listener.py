"""The subscriber side in process, against a real ZooKeeper: steps that reach an instance over the
peer channel and its safety pass over ZooKeeper never undo each other."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from clusterkit import instance_and_other
from harness import cluster_section, free_port, proxy_config

from meta.config import parse_config
from meta.locks import MetaLocks
from meta.registry import Registry
from zk.aio import Zk
from zk.cluster import Cluster
from zk.listener import GONE_GRACE_S
from zk.records import INIT, SUCCESS, DdlRecord, HistoryEntry


@pytest.mark.parametrize("on_the_spot", [False, True], ids=["step-task", "on-the-spot"])
def test_a_pass_that_read_a_record_before_its_outcome_came_does_not_lock_the_table_again(
        zookeeper: Any, zk_root: str, backends: list[Any], on_the_spot: bool) -> None:
    """The originator removes its record while it hands the outcome to us: a safety pass that read the
    record (still INIT) just before must neither lock the table again for that finished DDL (the next
    DDL here would get 4006 `is doing DDL`) nor, once the record is gone, read the backends again.
    The same holds when the outcome is applied on the spot (peer_step_now, no task); that path
    declines, changing nothing, when the texts cannot build the table."""
    raw = proxy_config(backends, free_port(), free_port(), instance="dble-2",
                       cluster=cluster_section(zookeeper, root=zk_root))
    config = parse_config(raw)

    async def go() -> None:
        refreshed: list[tuple[list[tuple[str, str]], Any]] = []

        async def refresh(keys: list[tuple[str, str]], texts: Any = None) -> None:
            refreshed.append((keys, texts))

        def refresh_now(keys: list[tuple[str, str]], texts: Any) -> bool:
            if texts.get("dn1", {}).get("sharding_4_t1") is None:
                return False   # these texts do not build the table: a load would be needed
            refreshed.append((keys, texts))
            return True

        async def load_all() -> None:
            pass

        locks = MetaLocks("dble-2")
        c = Cluster(config, Registry(config), locks, load_all, refresh, refresh_now if on_the_spot else None)
        c.zk = Zk(zookeeper.hosts, 10, asyncio.get_running_loop())
        await c.zk.start(10)
        c.ready = True
        try:
            path = c.paths.ddl_record("schema1", "sharding_4_t1")
            await c.zk.ensure_path(c.paths.ddl)
            rec = DdlRecord("dble-1", "schema1", "sharding_4_t1", "ALTER_TABLE", "ALTER TABLE sharding_4_t1 "
                            "ADD COLUMN x INT", INIT)
            await c.zk.create(path, rec.encode())
            stat = await c.zk.exists(path)
            assert stat is not None
            texts = {"dn1": {"sharding_4_t1": "CREATE TABLE `sharding_4_t1` (`id` int(11))"}}
            assert await c.listener.on_peer_step(path, stat.czxid, rec, None) == (True, "")
            assert locks.is_locked("schema1", "sharding_4_t1")
            if on_the_spot:
                assert c.listener.peer_step_now(path, stat.czxid, rec.with_status(SUCCESS), {"dn1": {}}) is None
                assert locks.is_locked("schema1", "sharding_4_t1") and refreshed == []
                done = c.listener.peer_step_now(path, stat.czxid, rec.with_status(SUCCESS), texts)
            else:
                assert c.listener.peer_step_now(path, stat.czxid, rec.with_status(SUCCESS), texts) is None
                done = await c.listener.on_peer_step(path, stat.czxid, rec.with_status(SUCCESS), texts, final=True)
            assert done == (True, "") and not locks.is_locked("schema1", "sharding_4_t1")
            await c.listener.pass_once()            # the record still says INIT in ZooKeeper
            assert not locks.is_locked("schema1", "sharding_4_t1")
            await c.zk.delete(path)                 # the originator's removal lands
            await c.listener.pass_once()
            await asyncio.sleep(GONE_GRACE_S + 0.3)
            assert not locks.is_locked("schema1", "sharding_4_t1")
            assert refreshed == [([("schema1", "sharding_4_t1")], texts)]   # the outcome's texts, no reload
        finally:
            for t in list(c._tasks):
                t.cancel()
            await asyncio.gather(*c._tasks, return_exceptions=True)
            await c.zk.stop()

    asyncio.run(go())


def test_a_history_entry_is_seen_only_once_applied(zookeeper: Any, zk_root: str, backends: list[Any]) -> None:
    """Catching up on ddl_history: when the refresh of an entry fails (backends away for a moment),
    the entry is read again at the next pass instead of being marked seen and forgotten."""
    async def go() -> None:
        refreshed: list[list[tuple[str, str]]] = []
        async with instance_and_other(zookeeper, zk_root + "-history", backends, refreshed) as (c, _):
            recorded = c.refresh

            async def failing(keys: list[tuple[str, str]], texts: Any = None) -> None:
                raise RuntimeError("backends away for a moment")

            await c.listener._catch_up()                  # the first read only notes where history is
            await c.append_history(HistoryEntry("schema1", "sharding_4_t1", "dble-1", "ALTER ...", SUCCESS, 77))
            c.refresh = failing
            with pytest.raises(RuntimeError):
                await c.listener._catch_up()
            c.refresh = recorded
            await c.listener._catch_up()
            assert refreshed == [[("schema1", "sharding_4_t1")]]
            await c.listener._catch_up()                  # applied: not again
            assert refreshed == [[("schema1", "sharding_4_t1")]]

    asyncio.run(go())
