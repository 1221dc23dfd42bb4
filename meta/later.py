"""Work that follows a DDL but must stay out of its critical path: its info log lines.

On a box where the originator, the other instances and ZooKeeper share a few cores, rendering and
writing one log line costs ~0.1 ms of CPU; written the moment a DDL answers (or a peer replies),
that CPU is taken from whoever is still finishing the DDL, and from the next DDL of a migration
that runs its ALTERs back to back. So those lines are written DELAY_S later (bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
from typing import Callable

DELAY_S = 0.02


class Later:
    """Callbacks run DELAY_S from now on the running loop; flush() runs the pending ones at once (the
    owner calls it when it stops, so no line is lost)."""

    def __init__(self) -> None:
        self._pending: dict[asyncio.TimerHandle, Callable[[], None]] = {}

    def call(self, fn: Callable[[], None]) -> None:
        """Run fn DELAY_S from now (or at flush)."""
        handle: asyncio.TimerHandle | None = None

        def run() -> None:
            self._pending.pop(handle, None)  # type: ignore[arg-type]
            fn()

        handle = asyncio.get_running_loop().call_later(DELAY_S, run)
        self._pending[handle] = fn

    def flush(self) -> None:
        """Run every pending callback now."""
        pending, self._pending = self._pending, {}
        for handle, fn in pending.items():
            handle.cancel()
            fn()

    def __len__(self) -> int:
        return len(self._pending)


__all__ = ["DELAY_S", "Later"]
