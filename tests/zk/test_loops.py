"""The retry helper of the cluster loops: bounded, stoppable, and a ZooKeeper error is one failed try."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import ConnectionLoss

from zk.loops import retry


def test_retry_goes_on_through_zookeeper_errors_until_an_attempt_succeeds():
    tries = []

    async def attempt() -> bool:
        tries.append(1)
        if len(tries) == 1:
            raise ConnectionLoss("down")
        return len(tries) == 3

    assert asyncio.run(retry(attempt, 0.0, lambda: False, timeout=5))
    assert len(tries) == 3


def test_retry_ends_when_stopped_or_out_of_time():
    async def never() -> bool:
        return False

    assert not asyncio.run(retry(never, 0.01, lambda: False, timeout=0.05))
    assert not asyncio.run(retry(never, 0.01, lambda: True))
