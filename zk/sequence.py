"""Global sequences in a cluster: blocks of values handed out from one znode per table.

The znode holds the next value no instance has reserved. An instance reserves [v, v + n) by setting
it to v + n with the version it read: of two instances reading the same v, one set fails
(BadVersion) and that one reads again, so no value is ever handed out twice. A crashed instance's
unused block is simply skipped; a set whose answer was lost (ConnectionLoss) is retried from a fresh
read, so at worst its block is skipped too.
"""

from __future__ import annotations

import asyncio
import random
from typing import Callable

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError

from meta.sequence_file import SequenceUnavailable

from .aio import Zk, ZkTimeout
from .paths import Paths

MAX_TRIES = 50   # version conflicts in a row before the INSERT fails (each retry waits a little longer)
RESERVE_TIMEOUT_S = 10.0   # a reservation that has not succeeded by then fails the INSERT


class ZkSequences:
    """The cluster store of global sequences (same calls as meta.sequence_file.SequenceFile)."""

    def __init__(self, zk_of: Callable[[], Zk | None], paths: Paths) -> None:
        self.zk_of = zk_of   # the cluster's current session (it is replaced after an expiry)
        self.paths = paths

    def _zk(self, key: str) -> Zk:
        zk = self.zk_of()
        if zk is None:
            raise SequenceUnavailable(f"global sequence {key}: ZooKeeper is not connected")
        return zk

    async def reserve(self, key: str, n: int, first: int | None) -> int | None:
        """Reserve [lo, lo + n) cluster-wide and return lo; None when the znode does not exist yet and
        no `first` is given."""
        path = self.paths.sequence(key)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RESERVE_TIMEOUT_S
        try:
            for attempt in range(MAX_TRIES):
                if loop.time() > deadline:
                    break
                zk = self._zk(key)
                got = await zk.get_or_none(path)
                if got is None:
                    if first is None:
                        return None
                    try:
                        await zk.create(path, str(first + n).encode(), makepath=True)
                        return first
                    except NodeExistsError:
                        continue
                lo = _value(key, got[0])
                try:
                    await zk.set(path, str(lo + n).encode(), version=got[1].version)
                    return lo
                except BadVersionError:
                    await asyncio.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        except (ZkTimeout, KazooException) as e:
            raise SequenceUnavailable(f"global sequence {key}: ZooKeeper: {type(e).__name__} {e}".rstrip()) from None
        raise SequenceUnavailable(f"global sequence {key}: no block reserved in {RESERVE_TIMEOUT_S:.0f} s "
                                  f"({attempt + 1} attempts lost to other instances); try again")

    async def raise_to(self, key: str, value: int) -> None:
        """Make the next free value at least `value` (an explicit id was inserted); nothing if it has no state."""
        path = self.paths.sequence(key)
        try:
            for _ in range(MAX_TRIES):
                got = await self._zk(key).get_or_none(path)
                if got is None or _value(key, got[0]) >= value:
                    return
                try:
                    await self._zk(key).set(path, str(value).encode(), version=got[1].version)
                    return
                except BadVersionError:
                    continue
        except (ZkTimeout, KazooException) as e:
            raise SequenceUnavailable(f"global sequence {key}: ZooKeeper: {type(e).__name__} {e}".rstrip()) from None


def _value(key: str, data: bytes) -> int:
    try:
        return int(data.decode().strip())
    except ValueError:
        raise SequenceUnavailable(f"global sequence {key}: its znode holds {data[:40]!r}, not a number") from None


__all__ = ["ZkSequences"]
