"""A DDL's own refresh that missed a node is read again in the background, backing off, until every
node answers; a table a DDL holds is left to that DDL; stop() ends the retries."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import proxy.ddl.ddl as ddl
from meta.errors import RefreshIncomplete
from proxy.ddl.ddl import DdlRunner

KEY = ("schema1", "t1")


def _runner(monkeypatch, failures: int) -> tuple[DdlRunner, list[list[tuple[str, str]]], list[float]]:
    """A runner whose loads miss dn2 `failures` times, then answer; records the loads and the sleeps."""
    runner = DdlRunner(SimpleNamespace(config=SimpleNamespace(server=SimpleNamespace(instance="dble-1"))))
    loads: list[list[tuple[str, str]]] = []
    sleeps: list[float] = []

    async def publish_locally(keys, result):   # noqa: ANN001 - the load's outcome, no backend here
        loads.append(list(keys))
        if len(loads) <= failures:
            raise RefreshIncomplete("metadata refresh incomplete: dn2: timed out", {"dn2": "timed out"})

    real_sleep = asyncio.sleep

    async def sleep(s: float) -> None:
        sleeps.append(s)
        await real_sleep(0)

    monkeypatch.setattr(runner, "_publish_locally", publish_locally)
    monkeypatch.setattr(ddl.asyncio, "sleep", sleep)
    return runner, loads, sleeps


def test_partial_refresh_is_retried_backing_off_until_complete(monkeypatch) -> None:
    async def go() -> None:
        runner, loads, sleeps = _runner(monkeypatch, failures=7)
        runner.reload_later([KEY])
        assert runner._reload_task is not None
        await asyncio.wait_for(runner._reload_task, 5)
        assert loads == [[KEY]] * 8 and not runner.reloads
        assert sleeps == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]   # doubling, capped
    asyncio.run(go())


def test_a_table_a_ddl_holds_is_left_to_it_and_stop_ends_the_retries(monkeypatch) -> None:
    async def go() -> None:
        runner, loads, _ = _runner(monkeypatch, failures=0)
        runner.locks.acquire(*KEY, "ALTER TABLE t1 ADD x INT", "session:1")
        runner.reload_later([KEY])
        for _ in range(20):
            await asyncio.sleep(0)
        assert loads == [] and runner.reloads == {KEY: None}
        await runner.stop()
        await asyncio.sleep(0)
        assert runner._reload_task is not None and runner._reload_task.cancelled()
    asyncio.run(go())
