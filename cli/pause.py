"""Test pauses for `pydble serve`: with PYDBLE_TEST_PAUSE=<phase> the originator stops at that phase of
every DDL (for PYDBLE_TEST_PAUSE_S seconds, default 600) so a test can kill -9 or SIGSTOP the process
there. The hook only pauses: the path taken is production's (zk/originator.py names the phases;
`peer_final_step`, zk/peers.py: a subscriber handles each final step it receives that much later)."""

from __future__ import annotations

import asyncio
import os
from typing import Awaitable, Callable

import structlog

PAUSE_ENV = "PYDBLE_TEST_PAUSE"
PAUSE_SECONDS_ENV = "PYDBLE_TEST_PAUSE_S"

log = structlog.get_logger("pydble.test_pause")


def pause_hook_from_env(env: dict | None = None) -> Callable[[str], Awaitable[None]] | None:
    """The pause hook the environment asks for, None when it asks for none."""
    env = os.environ if env is None else env
    phase = env.get(PAUSE_ENV)
    if not phase:
        return None
    seconds = float(env.get(PAUSE_SECONDS_ENV, "600"))

    async def pause(at: str) -> None:
        if at == phase:
            log.warning("paused for test", phase=at, pid=os.getpid(), seconds=seconds)
            await asyncio.sleep(seconds)
            log.warning("pause over", phase=at)
    return pause


__all__ = ["PAUSE_ENV", "PAUSE_SECONDS_ENV", "pause_hook_from_env"]
