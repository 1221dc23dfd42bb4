"""A client's DDL on a simulated instance: proxy/ddl/ddl.py's DdlRunner._locked around production's
zk/originator.py ClusterDdl, which runs unchanged (INIT, fencing, the INIT acks overlapping the run,
the fast or classic end, cleanup, the reload everywhere after a lost decision).

What is mirrored here is only proxy/ddl/ddl.py's own part, which speaks MySQL to the nodes: the local lock,
every node reachable first, the DDL (with its marker) on every node without a time limit, announce()
once it is sent, the outcome published while this instance refreshes from what the nodes read back,
and reload_later when that refresh missed a node. The operator's `kill @@ddl_lock` is proxy/runtime.py's
holder check in front of production's Cluster.release_table.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from meta.errors import ProxyError, RefreshIncomplete
from zk.originator import ClusterDdl, LostDecision
from zk.records import MARKER_PREFIX

from .instance import to_text

if TYPE_CHECKING:
    from .backend import Ddl
    from .instance import Instance


@dataclass
class Answer:
    """What the client hears."""

    ok: bool
    message: str = ""
    laggards: tuple[str, ...] = ()
    core: Any = None
    texts: dict | None = None
    refused: bool = False          # nothing ran
    extra: dict = field(default_factory=dict)
    after_at: dict | None = None   # node -> the index of the structure read back in its history of the table


async def run_ddl(inst: Instance, table: str, ddl: Ddl, ddl_no: int) -> Answer:
    """DdlRunner.run/_locked for one DDL of the workload on `table`."""
    c = inst.c
    cl = inst.cluster
    schema = c.schema
    sql = ddl.sql(table)
    owner = f"session:{ddl_no}"
    try:
        inst.locks_.acquire(schema, table, sql, owner)
    except ProxyError as e:
        return Answer(False, e.message, refused=True)
    key = (schema, table)
    cd: ClusterDdl | None = None
    try:
        why = await inst.reach()
        if why is not None:
            return Answer(False, f"DDL refused: {why}", refused=True)
        marker = f"{MARKER_PREFIX}{ddl_no:08d}x{inst.world.rng.getrandbits(32):08x}"
        cd = ClusterDdl(cl, [key], sql, ddl.ddl_type, marker)
        # the core class is the variant's (a reverted fix is a broken subclass, test-side)
        cd.core = c.variant.originator_core(cl.paths, cl.instance, [key], sql, ddl.ddl_type, marker,
                                            created_at=inst.world.now)
        async with cd:
            await cd.ensure_held()
            c.checker.on_send(inst, cd.core, key)
            nodes = sorted(c.backends)
            sent = {}
            futs = []
            for n in nodes:
                fut = inst.loop.create_future()
                sent[n] = c.backends[n].alter(inst.tag, table, ddl, marker, _settle(inst, fut))
                futs.append(fut)
            cd.announce()
            values = await asyncio.gather(*futs)
            failed = [(n, v) for n, v in zip(nodes, values) if isinstance(v, BaseException)]
            success = not failed
            message = "; ".join(f"{n}: {v}" for n, v in failed)
            texts = {n: {table: to_text(sent[n].after)} for n, v in zip(nodes, values)
                     if not isinstance(v, BaseException)}

            async def publish() -> None:
                cd.details = {"nodes": nodes}
                await cd.complete(success, message, texts=texts)
            task = inst.loop.create_task(publish())
            await asyncio.sleep(0)
            try:
                await inst.refresh([key], texts)
            except RefreshIncomplete:
                if c.variant.originator_reloads_later:
                    inst.reload_later([table])
            finally:
                await task
            lag = tuple(sorted(cd.laggards | {name for name, _ in cd.core.unapplied}))
            expect = {n: sent[n].after for n in nodes} if success else None
            return Answer(success, message, lag, cd.core, {table: expect} if expect is not None else None,
                          after_at={n: sent[n].after_at for n in nodes})
    except LostDecision as e:
        return Answer(False, f"lost decision: {e.message}", core=cd.core if cd else None,
                      extra={"lost": True, "ran": bool(cd and cd.ran)}, refused=not (cd and cd.ran))
    except ProxyError as e:
        return Answer(False, e.message, core=cd.core if cd else None, refused=not (cd and cd.ran))
    finally:
        inst.locks_.release(schema, table, owner)


def _settle(inst: Instance, fut: asyncio.Future) -> Any:
    inc = inst.incarnation

    def answer(v: Any) -> None:
        def settle() -> None:
            if not fut.done():
                fut.set_result(v)
        inst.deliver(settle, inc)
    return answer


async def kill_ddl_lock(inst: Instance, table: str, force: bool) -> str:
    """proxy/runtime.py kill_ddl_lock: refused while the DDL's holder is online unless `force`, then
    production's Cluster.release_table (which refuses while the DDL's marker still runs on a node)."""
    cl = inst.cluster
    schema = inst.c.schema
    if not force:
        holders = set()
        lk = inst.locks_.get(schema, table)
        if lk is not None:
            holders.add(lk.instance)
        holders |= {row[3] for row in await cl.ddl_rows() if (row[0], row[1]) == (schema, table)}
        live = holders & (await cl.online() | {inst.name})
        if live:
            return f"refused: holder {sorted(live)} online"
    await cl.release_table(schema, table, force)
    inst.locks_.release(schema, table)
    return "released"


__all__ = ["Answer", "kill_ddl_lock", "run_ddl"]
