"""The simulation's checker: the protocol's promises, asserted after every step and at quiescence.

1. Never two DDLs executing (waiting on a metadata lock or altering) on one table at once.
2. When a client hears OK, every instance online since before the DDL (but the laggards it was told
   about) serves the new structure.
3. After quiescence every instance's structure equals the backends' (but for a table an operator
   released with `force` from a live holder: pydble then tells the operator to check it), and no lock,
   record or running statement is left.
4. Nothing is decided, acked or cleaned up by an actor for a DDL that is not the one it acts on (its
   lock or record released and taken again), nor decided by an originator on a session that no longer
   holds the table's lock; and no originator sends its DDL to the nodes once it has lost that lock
   (fencing).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zk.ddlcore import Txn
from zk.paths import OWNER_PREFIX

if TYPE_CHECKING:
    from .backend import Query
    from .cluster import SimCluster
    from .instance import Instance
    from .ddlpath import Answer


class Violation(BaseException):
    """A promise of the protocol broken in this schedule (a BaseException: no `except Exception` of a
    simulated actor may swallow it)."""


DECIDING = {"decide", "remove", "ack", "reconcile-decide", "reconcile-remove", "release-lock"}
ORIGINATOR = {"decide", "remove", "release-lock"}


def _since(have: tuple | None, history: list, after_at: int) -> bool:
    """Memory shows the DDL's outcome on a node when it is the structure the originator read back there
    (the node's history at `after_at`) or one the node went through since (a later DDL's)."""
    return have in history[after_at:]


class Checker:
    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster
        self.running: dict[str, dict[str, int]] = {}   # table -> marker -> statements in processlists
        self.forced: set[str] = set()                  # markers whose lock an operator force-released
        self.forced_tables: set[str] = set()           # tables an operator released from a live holder (force)
        self.oks = 0
        self.checked_oks = 0

    def fail(self, what: str) -> None:
        w = self.c.world
        v = Violation(f"seed {w.seed} t={w.now:.3f}: {what}")
        if w.violation is None:
            w.violation = v   # raised by the World even when a task (which keeps exceptions) raised it here
        raise v

    # -- 1: one DDL per table ------------------------------------------------------------------------------
    def on_backend_start(self, q: Query) -> None:
        markers = self.running.setdefault(q.table, {})
        others = [m for m, n in markers.items() if n > 0 and m != q.marker]
        if others and q.marker not in self.forced and not all(m in self.forced for m in others):
            self.fail(f"two DDLs on table {q.table} at once: {q.marker} starts while {others} still run(s)")
        markers[q.marker] = markers.get(q.marker, 0) + 1

    def on_backend_end(self, q: Query, applied: bool) -> None:
        markers = self.running.get(q.table, {})
        markers[q.marker] = markers.get(q.marker, 1) - 1
        if markers[q.marker] <= 0:
            del markers[q.marker]

    def on_forced_release(self, table: str, marker: str) -> None:
        """An operator forced the lock away (kill @@ddl_lock ... force): that DDL, still running or about
        to, is outside promise 1 (the operator was warned); the others are not."""
        self.forced.update(self.running.get(table, {}))
        self.forced_tables.add(table)
        if marker:
            self.forced.add(marker)

    # -- 4: no stale actor ---------------------------------------------------------------------------------
    def audit(self, sid: int, ops: list[tuple], tag: Any) -> None:
        if not isinstance(tag, Txn) or tag.what not in DECIDING:
            return
        zk = self.c.zk
        paths = self.c.paths
        tables = set()
        for op in ops:
            t = self._table_of(op[1])
            if t is not None:
                tables.add(t)
        for t in tables:
            rec_path = paths.ddl_record(self.c.schema, t)
            node = zk.nodes.get(rec_path)
            if node is not None:
                owners = [n[len(OWNER_PREFIX):] for n in node.children if n.startswith(OWNER_PREFIX)]
                if owners and tag.ddl_id not in owners:
                    self.fail(f"stale {tag.what}: a write meant for DDL {tag.ddl_id or '?'} touched table {t}, "
                              f"whose record is DDL {owners[0]}'s")
                if node.czxid != tag.czxid and tag.czxid:
                    self.fail(f"stale {tag.what}: a write meant for record czxid {tag.czxid} touched table {t}'s "
                              f"record czxid {node.czxid}")
            if tag.what in ORIGINATOR:
                lock = zk.nodes.get(paths.ddl_lock(self.c.schema, t))
                if lock is None or lock.ephemeral_owner != sid or lock.czxid != tag.czxid:
                    self.fail(f"{tag.what} of table {t} by a session ({sid:#x}) that does not hold the DDL's lock")

    def _table_of(self, path: str) -> str | None:
        paths = self.c.paths
        for base in (paths.ddl + "/", paths.ddl_locks + "/"):
            if path.startswith(base):
                name = path[len(base):].split("/", 1)[0]
                return name.split(".", 1)[1] if "." in name else None
        return None

    # -- 2: OK means applied everywhere -----------------------------------------------------------------------
    def on_answer(self, inst: Instance, table: str, answer: Answer) -> None:
        if not answer.ok or answer.core is None:
            return
        self.oks += 1
        core = answer.core
        key = (self.c.schema, table)
        czxid = core.czxids.get(key, 0)
        now_backends = {n: be.tables.get(table) for n, be in sorted(self.c.backends.items())}
        expect = answer.texts.get(table) if answer.texts else None
        at = answer.after_at or {}
        for other in self.c.instances.values():
            if other is inst or other.name in answer.laggards or other.state == "down":
                continue
            online = self.c.zk.nodes.get(self.c.paths.online_instance(other.name))
            if online is None or online.czxid > czxid or other.session is None or online.ephemeral_owner != other.session:
                continue   # not online, online only since the DDL began, or a dead predecessor's node
            have = other.memory.get(table)
            if have is None or not all(n in have and _since(have[n], self.c.backends[n].history[table], at[n])
                                       for n in now_backends):
                self.fail(f"client heard OK for {core.sql} (from {inst.name}) but {other.name}, online and not "
                          f"reported lagging, serves {have} (expected {expect}; the backends have {now_backends})")
        self.checked_oks += 1

    # -- 3: quiescence ------------------------------------------------------------------------------------------
    def at_quiescence(self) -> None:
        c = self.c
        for inst in c.instances.values():
            if inst.state != "running" or not inst.ready:
                self.fail(f"{inst.name} is not back in the cluster at quiescence ({inst.state}, ready={inst.ready})")
        for name, be in sorted(c.backends.items()):
            if be.processlist:
                self.fail(f"statements still running on {name} at quiescence: {list(be.processlist.values())}")
        for t in c.tables:
            truth = {n: be.tables.get(t) for n, be in sorted(c.backends.items())}
            for inst in c.instances.values():
                # `kill @@ddl_lock ... force` tells the operator to check the table: memory may be stale
                if inst.memory.get(t) != truth and t not in self.forced_tables:
                    self.fail(f"{inst.name} serves {t} as {inst.memory.get(t)} but the backends have {truth}")
            for inst in c.instances.values():
                if t in inst.locks:
                    self.fail(f"{inst.name} still holds a local lock on {t}: {inst.locks[t]}")
        left = [p for p in c.zk.tree(c.paths.ddl) if p != c.paths.ddl]
        left += [p for p in c.zk.tree(c.paths.ddl_locks) if p != c.paths.ddl_locks]
        for p in (c.paths.sync_meta_lock, c.paths.reconcile_lock):
            if p in c.zk.nodes:
                left.append(p)
        if left:
            self.fail(f"znodes left at quiescence: {left}")

    def on_init(self, inst: Instance, core: Any) -> None:
        pass

    def on_send(self, inst: Instance, core: Any, key: tuple[str, str]) -> None:
        """The originator sends the DDL to the nodes now: it must hold the lock of its INIT (fencing)."""
        if core.marker in self.forced:
            return
        lock = self.c.zk.nodes.get(self.c.paths.ddl_lock(*key))
        if lock is None or lock.czxid != core.czxids.get(key) or not self.c.zk.alive(lock.ephemeral_owner):
            self.fail(f"{inst.name} sends {core.sql} to the nodes without holding its lock (its session "
                      f"expired or the lock is another DDL's): fencing failed")

    def on_decided(self, inst: Instance, core: Any, key: tuple[str, str]) -> None:
        pass

    def on_reconciled(self, inst: Instance, key: tuple[str, str], czxid: int) -> None:
        pass

    def on_crash(self, inst: Instance) -> None:
        pass


__all__ = ["Checker", "Violation"]
