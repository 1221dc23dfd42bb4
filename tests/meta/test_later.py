"""meta/later.py: a DDL's info lines run a moment after its answer, and none is lost at stop."""

from __future__ import annotations

import asyncio

from meta.later import DELAY_S, Later


def test_a_call_runs_after_the_delay_not_at_once() -> None:
    async def go() -> None:
        later, ran = Later(), []
        later.call(lambda: ran.append("a"))
        later.call(lambda: ran.append("b"))
        await asyncio.sleep(0)
        assert ran == [] and len(later) == 2
        await asyncio.sleep(DELAY_S * 3)
        assert ran == ["a", "b"] and len(later) == 0
    asyncio.run(go())


def test_flush_runs_what_is_pending_once() -> None:
    async def go() -> None:
        later, ran = Later(), []
        later.call(lambda: ran.append("a"))
        later.flush()
        assert ran == ["a"] and len(later) == 0
        await asyncio.sleep(DELAY_S * 3)
        assert ran == ["a"]          # the timer was cancelled: not run twice
        later.flush()
        assert ran == ["a"]
    asyncio.run(go())
