"""`repair @@ddl`: re-run a half-applied DDL (it failed on some nodes after succeeding on others, e.g.
a backend died mid-ALTER) on its lagging nodes, once they are back.

Only where it is safe: the DDL is the newest one run on the table (in a cluster from ZooKeeper's
ddl_history, whichever instance ran it, so any instance repairs; alone from this instance's history:
either keeps the statement, the nodes where it failed and memory's structure before it); every node of the table is
read; a lagging node must still have exactly the structure from before the DDL, and every other node
one and the same structure (the DDL's result). Anything else is refused with the reason. The re-run
goes through DdlRunner.run_on, so it takes the table's local and cluster locks like any DDL and ends
with every instance reloading the table.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import structlog

from meta.consistency import Consistency, differing_nodes, normalize_create
from meta.errors import ProxyError, UnknownDatabase
from meta.history import DdlHistoryEntry
from meta.loader import load_tables
from zk.records import SUCCESS

if TYPE_CHECKING:
    from proxy.plan.plan import Plan
    from proxy.runtime import Runtime

log = structlog.get_logger("pydble.ddl_repair")

NOTHING = "nothing to repair"   # how an answer that changed nothing starts (the CLI's exit code 1)


class RepairRefused(ProxyError):
    """A half-applied DDL that cannot be re-run safely; the message says why and what to do."""

    code, sqlstate = 1105, "HY000"


class RepairFirst(ProxyError):
    """A DDL on a table whose nodes differ (a half-applied DDL): it would make the repair impossible.
    1105 like the other refusals of a DDL before it runs, not 4006 (the table's lock is busy: retry)."""

    code, sqlstate = 1105, "HY000"


# DDLs still allowed on a table whose nodes differ: they do not build on its structure (DROP clears the
# condition, TRUNCATE keeps each node's structure, CREATE fails or does nothing on an existing table)
FREE_ON_DIFFERING = frozenset({"DROP_TABLE", "TRUNCATE_TABLE", "CREATE_TABLE"})


async def refuse_on_differing(server: Runtime, plan: Plan) -> None:
    """RepairFirst when a table of the DDL is known to hold more than one structure across its nodes
    (what `repair @@ddl` finds work in): a later DDL there would leave the half-applied one unrepairable;
    or to be missing on some of them (it would fail there after changing the others, every time).
    Known from memory, which every instance refreshed from the backends after that DDL (a difference
    made behind pydble's back is not known until a reload, and costs no read on every DDL); where memory
    could not read a node (a partial reload still being retried), the nodes are read now."""
    if plan.ddl in FREE_ON_DIFFERING or plan.ddl is None:
        return
    for (schema, table) in plan.tables:
        meta = server.registry.get(schema, table)
        if meta is not None and meta.unknown:
            fresh = await load_tables(server.config, [(schema, table)], backend=server.meta_backend)
            meta = fresh.tables.get((schema, table))
        if meta is None or meta.unknown:
            continue   # the DDL itself reports a node that cannot answer
        v = meta.verdict()
        name = f"{schema}.{table}"
        if v.missing and v.variants:
            raise RepairFirst(f"DDL refused: {name} is missing on {','.join(v.missing)} (it exists on "
                              f"{','.join(n for x in v.variants for n in x.nodes)}), where it would fail after "
                              f"changing the others; CREATE TABLE IF NOT EXISTS completes it, DROP TABLE removes it")
        if len(v.variants) < 2:
            continue
        try:
            entry = await last_ddl(server, schema, table)
        except RepairRefused:
            entry = None   # the history is only for naming the lagging nodes here
        lag = (",".join(entry.failed_nodes) if entry is not None and entry.failed_nodes
               else ",".join(n for x in v.variants[1:] for n in x.nodes))
        raise RepairFirst(f"DDL refused: the shardingNodes of {name} differ ({lag} lag behind a half-applied DDL); "
                          f"run `repair @@ddl where schema='{schema}' and table='{table}'` (or `pydble ddl repair "
                          f"{name}`) first; DROP TABLE and TRUNCATE are allowed")


@dataclass(frozen=True)
class RepairPlan:
    """What a repair would do: re-run `entry` on `lagging`."""

    entry: DdlHistoryEntry
    lagging: tuple[str, ...]


def _repairable(outcome_ok: bool, phases_ms: dict, repair_of: int) -> bool:
    """A DDL `repair @@ddl` may re-run: not a repair, and one that reached the nodes (an `execute` phase)."""
    return not repair_of and (outcome_ok or "execute" in phases_ms)


async def last_ddl(server: Runtime, schema: str, table: str) -> DdlHistoryEntry | None:
    """The newest DDL on the table `repair @@ddl` may re-run: in a cluster from ZooKeeper's ddl_history
    (whichever instance ran it; its id is the entry's sequence there), else from this instance's own
    history (also when ZooKeeper keeps none for the table, e.g. DDLs from before the cluster)."""
    name = f"{schema}.{table}"
    cluster = server.cluster
    if cluster is not None:
        if cluster.zk is None or not cluster.zk.connected:
            raise RepairRefused(f"ZooKeeper is unreachable: the DDL history of {name} cannot be read, try again")
        got = await cluster.newest_history(lambda e: (e.schema, e.table) == (schema, table) and _repairable(
            e.status == SUCCESS, e.phases_ms, e.repair_of))
        if got is not None:
            seq, e = got
            return DdlHistoryEntry(e.instance, e.user, e.sql, "", [name], list(e.nodes),
                                   "OK" if e.status == SUCCESS else "FAILED", e.message, dict(e.phases_ms),
                                   e.meta_version, e.started_at, e.finished_at, id=seq,
                                   failed_nodes=list(e.failed_nodes), before=dict(e.before))
    for e in server.history.entries():
        if name in e.tables and _repairable(e.outcome == "OK", e.phases_ms, e.repair_of):
            return e
    return None


async def plan_repair(server: Runtime, schema: str, table: str) -> RepairPlan | str:
    """The lagging nodes of the table's last DDL, or the "nothing to repair" sentence; RepairRefused
    when the nodes are not exactly "before" (the failed ones) and "after" (the others)."""
    name = f"{schema}.{table}"
    fresh = await load_tables(server.config, [(schema, table)], backend=server.meta_backend)
    meta = fresh.tables.get((schema, table))
    if meta is None:
        raise RepairRefused(f"{name} is not found on its shardingNodes")
    if meta.unknown:
        why = "; ".join(f"{n}: {r}" for n, r in meta.unknown.items())
        raise RepairRefused(f"cannot read every shardingNode of {name} ({why}): repair once it is back")
    entry = await last_ddl(server, schema, table)
    if entry is None or not entry.failed_nodes:
        if meta.consistency is Consistency.CONSISTENT:
            return f"{NOTHING}: every node of {name} has the same structure"
        if entry is None:
            raise RepairRefused(f"{name} differs across its nodes ({differing_nodes(meta.verdict())}) but no DDL "
                                f"on it is in the DDL history: fix by hand")
        raise RepairRefused(f"{name} differs across its nodes ({differing_nodes(meta.verdict())}) but its last "
                            f"DDL (#{entry.id}) succeeded on every node: fix by hand")
    before = entry.before.get(name)
    if before is None:
        raise RepairRefused(f"the last DDL on {name} (#{entry.id}) failed on {','.join(entry.failed_nodes)} and "
                            f"succeeded nowhere else, or changed no existing table: nothing to re-run")
    shapes = {n: normalize_create(t) if (t := meta.node_sql.get(n)) is not None else None for n in meta.nodes}
    want = normalize_create(before)
    done = [n for n in entry.succeeded_nodes if n in shapes]
    after = {shapes[n] for n in done}
    if None in after or len(after) != 1:
        raise RepairRefused(f"the nodes of {name} where DDL #{entry.id} succeeded ({','.join(done)}) no longer "
                            f"have one same structure: fix by hand")
    (made,) = after
    if made == want:
        raise RepairRefused(f"the nodes of {name} where DDL #{entry.id} succeeded have the structure from before "
                            f"it again: nothing to re-run, fix by hand if needed")
    lagging = [n for n in meta.nodes if n not in done and shapes[n] == want]
    odd = [n for n in meta.nodes if n not in done and shapes[n] not in (want, made)]
    if odd:
        raise RepairRefused(f"{','.join(odd)} of {name} has neither the structure from before DDL #{entry.id} nor "
                            f"the one it made: fix by hand")
    if not lagging:
        return f"{NOTHING}: every node of {name} has the structure DDL #{entry.id} made"
    log.info("repair plan", table=name, ddl=entry.id, lagging=lagging)
    return RepairPlan(entry, tuple(lagging))


async def repair(server: Runtime, schema: str, table: str, user: str) -> str:
    """Re-run the table's half-applied DDL on its lagging nodes; the OK's message says what was done."""
    table = table.lower()
    if schema not in server.config.schemas:
        raise UnknownDatabase(f"Unknown database '{schema}'")
    rp = await plan_repair(server, schema, table)
    if isinstance(rp, str):
        return rp
    entry = rp.entry
    plan = server.router.route(entry.sql, schema)
    targets = tuple(t for t in plan.targets if t.node in rp.lagging)
    if plan.kind != "ddl" or {t.node for t in targets} != set(rp.lagging):
        raise RepairRefused(f"DDL #{entry.id} no longer routes to {','.join(rp.lagging)}: the config changed, "
                            f"fix by hand")
    log.warning("repairing a half-applied ddl", table=f"{schema}.{table}", ddl=entry.id, nodes=list(rp.lagging))

    async def unchanged() -> None:   # under the table's lock: no DDL slipped in since the plan was made
        again = await plan_repair(server, schema, table)
        if again != rp:
            raise RepairRefused(f"{schema}.{table} changed while preparing its repair: try again")

    err = await server.ddl.run_on(replace(plan, targets=targets), entry.sql, user, entry.id, unchanged)
    if err is not None:
        raise err
    return (f"repaired {schema}.{table}: DDL #{entry.id} re-run on {','.join(rp.lagging)}; "
            f"every instance reloaded the table")
