"""The simulator's models behave like the real parts they stand for (ZooKeeper, MariaDB, the clock)."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from .aioloop import SimLoop
from .backend import Backend, BackendError, Ddl, apply
from .world import World
from .zkmodel import ZkClient, ZkServer


def _client(w: World, zk: ZkServer, timeout: float = 1.0, lost: list | None = None) -> ZkClient:
    return ZkClient(w, zk, timeout, lambda fn: fn(), lambda: lost.append(w.now) if lost is not None else None)


def test_multi_is_all_or_nothing_with_kazoo_results() -> None:
    w = World(1)
    zk = ZkServer(w)
    zk.ensure_path("/a")
    c = _client(w, zk)
    out: list = []

    def build_ok(tx):
        tx.create("/a/x", b"1")
        tx.create("/a/y", b"2", ephemeral=True)
        tx.set_data("/a/x", b"3", 0)
    c.commit(build_ok, out.append)
    w.run(1)
    assert out[0][0] == "/a/x" and out[0][2].version == 1 and zk.nodes["/a/y"].ephemeral_owner == c.sid
    assert zk.nodes["/a/x"].czxid == zk.nodes["/a/y"].czxid   # one transaction, one zxid

    def build_bad(tx):
        tx.delete("/a/y")
        tx.set_data("/a/x", b"4", 0)    # version is 1 now
        tx.create("/a/z", b"")
    c.commit(build_bad, out.append)
    w.run(2)
    r = out[1]
    assert isinstance(r[0], RolledBackError) and isinstance(r[1], BadVersionError) and isinstance(r[2], RuntimeInconsistency)
    assert "/a/y" in zk.nodes and "/a/z" not in zk.nodes

    c.single(("create", "/a/x", b"", False, False), out.append)
    c.single(("delete", "/a/nope", -1), out.append)
    w.run(3)
    assert isinstance(out[2], NodeExistsError) and isinstance(out[3], NoNodeError)


def test_session_expiry_removes_ephemerals_and_fires_watches_once() -> None:
    w = World(2)
    zk = ZkServer(w)
    zk.ensure_path("/on")
    lost: list = []
    a = _client(w, zk, timeout=1.0, lost=lost)
    b = _client(w, zk)
    a.single(("create", "/on/a", b"", True, False), None)
    fired: list = []
    w.run(0.1)
    b.children("/on", lambda r: fired.append(("read", r)), watch=lambda p, k: fired.append(("watch", p, k)))
    w.run(0.2)
    a.go_silent()
    w.run(0.9)
    assert "/on/a" in zk.nodes and not lost
    w.run(1.5)
    assert "/on/a" not in zk.nodes and lost
    assert fired == [("read", ["a"]), ("watch", "/on", "CHILD")]
    b.single(("create", "/on/b", b"", True, False), None)
    w.run(2)
    assert len(fired) == 2   # one-shot: not re-armed
    # an expired client's requests fail, a resumed-too-late client stays expired
    a.speak()
    got: list = []
    a.get("/on", got.append)
    w.run(3)
    assert got and got[0].__class__.__name__ == "SessionExpiredError"


def test_sequential_names_grow() -> None:
    w = World(3)
    zk = ZkServer(w)
    zk.ensure_path("/h")
    c = _client(w, zk)
    out: list = []
    for _ in range(3):
        c.single(("create", "/h/e-", b"", False, True), out.append)
    w.run(1)
    assert out == sorted(out) and len(set(out)) == 3


def test_alter_waits_for_the_metadata_lock_and_kill_query_stops_it() -> None:
    w = World(4)
    be = Backend(w, "dn1", {"t": ("id",)})
    be.hold_mdl("t", 5.0)
    got: list = []
    sent = be.alter("i1", "t", Ddl("add", "x"), "pydble-ddl:1", got.append)
    w.run(4.0)
    assert not got and [q.state for q in be.processlist.values()] == ["mdl"]
    be.kill_query(sent.conn)
    w.run(4.5)
    assert isinstance(got[0], BackendError) and got[0].code == 1317 and be.tables["t"] == ("id",)
    be.alter("i1", "t", Ddl("add", "x"), "m2", got.append)
    w.run(10)
    assert got[1] is None and be.tables["t"] == ("id", "x")


def test_each_ddl_applies_or_fails_as_mariadb_does() -> None:
    """Columns in order then indexes; a DROP of something absent, a duplicate and a DDL on a missing table
    fail with MariaDB's codes; a failure on one node after success on another leaves them different."""
    s = apply("t", ("id",), Ddl("add", "a"))
    s = apply("t", s, Ddl("add_index", "k_a", "a"))
    assert s == ("id", "a", "KEY k_a(a)") and apply("t", s, Ddl("add", "b")) == ("id", "a", "b", "KEY k_a(a)")
    assert apply("t", s, Ddl("drop", "a")) == ("id",)          # its one-column index goes with it
    assert apply("t", s, Ddl("drop_index", "k_a")) == ("id", "a")
    codes = [apply("t", s, d).code for d in (Ddl("add", "a"), Ddl("drop", "zz"), Ddl("add_index", "k_a", "id"),
                                             Ddl("add_index", "k_z", "zz"), Ddl("drop_index", "k_z"), Ddl("create"))]
    assert codes == [1060, 1091, 1061, 1072, 1091, 1050]
    assert apply("t", ("id",), Ddl("drop", "id")).code == 1090
    assert apply("t", s, Ddl("drop_table")) is None and apply("t", None, Ddl("create")) == ("id",)
    assert apply("t", None, Ddl("drop_table")).code == 1051 and apply("t", None, Ddl("add", "a")).code == 1146
    w = World(6)
    a, b = Backend(w, "dn1", {"t": ("id",)}), Backend(w, "dn2", {"t": ("id", "x")})
    got: list = []
    for be in (a, b):
        be.alter("i1", "t", Ddl("add", "x", slow_on="dn2"), "m", got.append)
    w.run(1.0)
    assert len(got) == 1 and a.tables["t"] == ("id", "x")      # dn2 copies the table for seconds more
    w.run(10.0)
    assert got[1].code == 1060 and a.history["t"] == [("id",), ("id", "x")] and b.history["t"] == [("id", "x")]


def test_silence_delays_answers_and_coroutines_run_on_the_virtual_clock() -> None:
    w = World(5)
    be = Backend(w, "dn1", {"t": ("id",)})
    be.silence(3.0)
    loop = SimLoop(w, "p")
    w.loops = [loop]
    log: list = []

    async def reader() -> None:
        fut = loop.create_future()
        be.read("t", lambda v: loop.call_soon(fut.set_result, v))
        cols = await fut
        log.append((round(w.now), cols))
        await asyncio.sleep(2.5)   # asyncio's own timers run on the virtual clock too
        log.append(round(w.now, 1))
    loop.spawn(reader())
    w.run(10)
    assert log == [(3, ("id",)), 5.5]


def test_same_seed_same_schedule() -> None:
    def run(seed: int) -> list:
        w = World(seed)
        w.trace = []
        zk = ZkServer(w)
        zk.ensure_path("/x")
        c = _client(w, zk)
        for i in range(20):
            w.at(w.rng.random(), c.single, ("create", f"/x/n{i}", b"", True, False), lambda r: w.log(str(r)))
        w.at(0.5, c.go_silent)
        w.run(5)
        return w.trace
    assert run(7) == run(7)
    assert run(7) != run(8)
