"""The local XA decision log: durable files, first decision wins, ids name their coordinator."""

from __future__ import annotations

import asyncio

from meta.xa_log import COMMIT, ROLLBACK, LocalXaLog, XaDecision, make_gtrid, owner_of


def test_gtrid_names_its_coordinator_even_with_dots() -> None:
    g = make_gtrid("dble.east-1", "65a1b2c3d4", 17)
    assert owner_of(g) == "dble.east-1"
    assert owner_of("someone-else.1") is None and owner_of("pydble.x") is None


def test_first_decision_wins_and_survives_a_new_log_object(tmp_path) -> None:
    async def go() -> None:
        log = LocalXaLog(str(tmp_path))
        g = make_gtrid("i1", "b", 1)
        assert (await log.decide(XaDecision(g, COMMIT, "i1", ["dn1", "dn2"]))).state == COMMIT
        assert (await log.decide(XaDecision(g, ROLLBACK, "i1"))).state == COMMIT   # never overwritten
        (tmp_path / "xa" / "junk.tmp123").write_bytes(b"")   # a crash before the link: no decision
        again = await LocalXaLog(str(tmp_path)).load()
        assert list(again) == [g] and again[g].nodes == ["dn1", "dn2"]
        await log.forget(g)
        await log.forget(g)   # absent is fine
        assert await LocalXaLog(str(tmp_path)).load() == {}

    asyncio.run(go())
