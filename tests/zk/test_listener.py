"""The subscriber side in process, against a real ZooKeeper: steps that reach an instance over the
peer channel and its safety pass over ZooKeeper never undo each other, and a peer step is applied
only when it matches the ZooKeeper record it names."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import pytest
from clusterkit import instance_and_other
from harness import cluster_section, free_port, proxy_config

from meta.config import parse_config
from meta.errors import DdlInProgress
from meta.locks import MetaLocks
from meta.registry import Registry
from zk.aio import Zk
from zk.cluster import Cluster
from zk.listener import GONE_GRACE_S
from zk.records import FAILED, INIT, SUCCESS, DdlRecord, HistoryEntry

TEXTS = {"dn1": {"sharding_4_t1": "CREATE TABLE `sharding_4_t1` (`id` int(11))"}}


@asynccontextmanager
async def _subscriber(zookeeper: Any, zk_root: str, backends: list[Any], refresh: Any,
                      refresh_now: Any) -> AsyncIterator[tuple[Cluster, MetaLocks, str, DdlRecord, int]]:
    """dble-2 in process (ready, no join) and dble-1's INIT record on sharding_4_t1 in ZooKeeper:
    (cluster, locks, record path, record, its czxid)."""
    config = parse_config(proxy_config(backends, free_port(), free_port(), instance="dble-2",
                                       cluster=cluster_section(zookeeper, root=zk_root)))

    async def load_all() -> None:
        pass

    locks = MetaLocks("dble-2")
    c = Cluster(config, Registry(config), locks, load_all, refresh, refresh_now)
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
        yield c, locks, path, rec, stat.czxid
    finally:
        for t in list(c._tasks):
            t.cancel()
        await asyncio.gather(*c._tasks, return_exceptions=True)
        await c.zk.stop()


@pytest.mark.parametrize("on_the_spot", [False, True], ids=["step-task", "on-the-spot"])
def test_a_pass_that_read_a_record_before_its_outcome_came_does_not_lock_the_table_again(
        zookeeper: Any, zk_root: str, backends: list[Any], on_the_spot: bool) -> None:
    """The originator removes its record while it hands the outcome to us: a safety pass that read the
    record (still INIT) just before must neither lock the table again for that finished DDL (the next
    DDL here would get 4006 `is doing DDL`) nor, once the record is gone, read the backends again.
    The same holds when the outcome is applied on the spot (peer_step_now, no task); that path
    declines, changing nothing, when the texts cannot build the table."""
    async def go() -> None:
        refreshed: list[tuple[list[tuple[str, str]], Any]] = []

        async def refresh(keys: list[tuple[str, str]], texts: Any = None) -> None:
            refreshed.append((keys, texts))

        def refresh_now(keys: list[tuple[str, str]], texts: Any) -> bool:
            if texts.get("dn1", {}).get("sharding_4_t1") is None:
                return False   # these texts do not build the table: a load would be needed
            refreshed.append((keys, texts))
            return True

        async with _subscriber(zookeeper, zk_root, backends, refresh,
                               refresh_now if on_the_spot else None) as (c, locks, path, rec, czxid):
            lsn = c.listener
            assert await lsn.on_peer_step("dble-1", path, czxid, rec, None) == (True, "")
            assert locks.is_locked("schema1", "sharding_4_t1")
            outcome = rec.with_status(SUCCESS)
            if on_the_spot:
                assert lsn.peer_step_now("dble-1", path, czxid, outcome, {"dn1": {}}) is None
                assert locks.is_locked("schema1", "sharding_4_t1") and refreshed == []
                done = lsn.peer_step_now("dble-1", path, czxid, outcome, TEXTS)
            else:
                assert lsn.peer_step_now("dble-1", path, czxid, outcome, TEXTS) is None
                done = await lsn.on_peer_step("dble-1", path, czxid, outcome, TEXTS, final=True)
            assert done == (True, "") and not locks.is_locked("schema1", "sharding_4_t1")
            await lsn.pass_once()            # the record still says INIT in ZooKeeper
            assert not locks.is_locked("schema1", "sharding_4_t1")
            await c.zk.delete(path)          # the originator's removal lands
            await lsn.pass_once()
            await asyncio.sleep(GONE_GRACE_S + 0.3)
            assert not locks.is_locked("schema1", "sharding_4_t1")
            assert refreshed == [([("schema1", "sharding_4_t1")], TEXTS)]   # the outcome's texts, no reload

    asyncio.run(go())


def test_a_peer_step_that_does_not_match_its_zookeeper_record_changes_nothing(
        zookeeper: Any, zk_root: str, backends: list[Any]) -> None:
    """A step is applied only when its sender is the record's originator and it matches the live record
    it names: path, creation zxid, content, and a status that is the record's or follows its INIT."""
    async def go() -> None:
        refreshed: list[Any] = []

        async def refresh(keys: list[tuple[str, str]], texts: Any = None) -> None:
            refreshed.append(keys)

        def refresh_now(keys: list[tuple[str, str]], texts: Any) -> bool:
            refreshed.append(keys)
            return True

        async with _subscriber(zookeeper, zk_root, backends, refresh, refresh_now) as (c, locks, path, rec, czxid):
            lsn = c.listener
            other = DdlRecord("dble-1", "schema1", "sharding_4_t1", "DROP_TABLE", "DROP TABLE sharding_4_t1", INIT,
                              rec.created_at)
            bad = [("dble-3", path, czxid, rec),                                                 # not its originator
                   ("dble-1", path, czxid + 1, rec),                                             # another creation
                   ("dble-1", c.paths.ddl_record("schema1", "sharding_2_t1"), czxid, rec),       # another table's path
                   ("dble-1", path, czxid, other)]                                               # other content
            for caller, p, zxid, r in bad:
                answer = await lsn.on_peer_step(caller, p, zxid, r, None)
                assert answer[0] is None and "refused the step" in answer[1], (caller, p, zxid, r, answer)
                assert lsn.peer_step_now(caller, p, zxid, r.with_status(SUCCESS), TEXTS) is None
                answer = await lsn.on_peer_step(caller, p, zxid, r.with_status(SUCCESS), TEXTS, final=True)
                assert answer[0] is None, answer
            assert not locks.is_locked("schema1", "sharding_4_t1") and refreshed == []
            # decided FAILED in ZooKeeper (as this instance saw it): a SUCCESS step for it is refused
            await c.zk.set(path, rec.with_status(FAILED).encode())
            await lsn.pass_once()
            refreshed.clear()
            answer = await lsn.on_peer_step("dble-1", path, czxid, rec.with_status(SUCCESS), TEXTS)
            assert answer[0] is None and "FAILED" in answer[1] and refreshed == []
            # the table's next record: the step that matches it is taken
            await c.zk.delete(path)
            await c.zk.create(path, rec.encode())
            stat = await c.zk.exists(path)
            assert stat is not None
            assert await lsn.on_peer_step("dble-1", path, stat.czxid, rec, None) == (True, "")
            assert locks.is_locked("schema1", "sharding_4_t1")

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


def test_a_catch_up_reload_waits_for_a_ddl_in_flight_here_and_holds_the_table_meanwhile(
        zookeeper: Any, zk_root: str, backends: list[Any]) -> None:
    """A ddl_history catch-up reload of a table on which this instance's own DDL is in flight is put off (a
    read half-way through that DDL, published after its refresh, would keep the half-applied structure for
    good; simulator seed 8000041602); once the DDL is over the entry is applied, and while that reload
    reads the backends the table is locked here, so no DDL starts on it meanwhile."""
    async def go() -> None:
        refreshed: list[list[tuple[str, str]]] = []
        async with instance_and_other(zookeeper, zk_root + "-busy", backends, refreshed) as (c, _):
            recorded = c.refresh
            await c.listener._catch_up()                  # the first read only notes where history is
            await c.append_history(HistoryEntry("schema1", "sharding_4_t1", "dble-1", "ALTER ...", SUCCESS, 78))
            c.locks.acquire("schema1", "sharding_4_t1", "ALTER TABLE sharding_4_t1 ADD COLUMN y INT", "session:9")
            await c.listener._catch_up()
            assert refreshed == []                        # put off: the DDL here refreshes the table itself
            assert c.listener.catch_up_backoff == 0.0     # no node missed: no backing off
            assert c.locks.release("schema1", "sharding_4_t1", "session:9")
            held_during: list[Any] = []

            async def watching(keys: list[tuple[str, str]], texts: Any = None) -> None:
                lk = c.locks.get("schema1", "sharding_4_t1")
                held_during.append(lk.owner if lk is not None else None)
                with pytest.raises(DdlInProgress):
                    c.locks.acquire("schema1", "sharding_4_t1", "ALTER ...", "session:10")
                await recorded(keys, texts)

            c.refresh = watching
            await c.listener._catch_up()
            assert refreshed == [[("schema1", "sharding_4_t1")]]
            assert held_during and held_during[0] is not None and held_during[0].startswith("reload:")
            assert c.locks.get("schema1", "sharding_4_t1") is None   # released after the reload
            await c.listener._catch_up()                  # applied: not again
            assert refreshed == [[("schema1", "sharding_4_t1")]]

    asyncio.run(go())
