"""The manager port (9066): metadata reload and checks, DDL locks, cluster and pool views."""

from __future__ import annotations

import json
import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from meta.consistency import consistent_in_memory, differing_nodes
from meta.errors import AccessDenied, DdlInProgress, ProxyError, UnknownCommand
from meta.loader import LoadResult, load_tables
from meta.model import TableMeta
from meta.registry import format_check_time

from proxy.plan import local
from proxy.session.connection import login, run_statements
from proxy.ddl.ddl_repair import NOTHING, repair
from proxy.manager.manager_parse import (HELP, CheckFullMetadata, CheckMetadata, KillDdlLock, ReloadMetadata, RepairDdl,
                            ShowBackend, ShowCluster, ShowDdl, ShowDdlHistory, ShowHelp, ShowXa, TableFilter,
                            parse_manager)
from proxy.wire import constants as C
from proxy.wire.handshake import parse_stored_password, verify_native_password
from proxy.wire.messages import ColumnDef, ResultSet
from proxy.wire.packets import PacketTooBig, ProtocolError
from proxy.wire.reply import Reply
from proxy.plan.sqltok import first_keyword

if TYPE_CHECKING:
    from proxy.runtime import Runtime

log = structlog.get_logger("pydble.manager")


def text_result(names: list[str], rows: list[list[object]], int_columns: frozenset[int] = frozenset()) -> ResultSet:
    """A result of string columns (None as NULL); columns listed in int_columns are typed BIGINT."""
    cols = [ColumnDef(n, C.T_LONGLONG, C.CHARSET_BINARY, 21, C.BINARY_FLAG) if i in int_columns
            else ColumnDef(n, C.T_VAR_STRING, C.CHARSET_UTF8MB4_GENERAL_CI, 1024) for i, n in enumerate(names)]
    return ResultSet(cols, [[None if v is None else str(v).encode() for v in row] for row in rows])


# DBLE's six columns (DESIGN.md §4); `check full @@metadata_nodes` adds pydble's: the shardingNodes whose
# structure differs from the one most hold
CHECK_FULL_COLUMNS = ["schema", "table", "reload_time", "table_structure", "consistent_in_sharding_nodes",
                      "consistent_in_memory"]
NODES_COLUMN = "differing_sharding_nodes"
ROWS_PER_STEP = 1000  # rows built between yields, so a check of 40,000 tables does not stall queries


class ManagerSession:
    """A session on the manager port: manager users only, manager commands only. It composes the login
    and the COM_QUERY loop both ports share (proxy/session/connection.py); it is no client session."""

    ready = False   # the client port's fast path never serves it
    manager_port = True   # tracked apart from client sessions (no max_connections, no processlist)

    def __init__(self, runtime: Runtime, client: Any) -> None:
        self.runtime = runtime
        self.client = client
        self.conn_id = runtime.next_conn_id()
        self.user = ""
        self.peer = "?"
        self.capabilities = 0
        self.deprecate_eof = False
        self.log = log.bind(manager_session=self.conn_id)
        self.task: asyncio.Task | None = asyncio.get_running_loop().create_task(self.run())

    def on_client_lost(self) -> None:
        if self.task is not None and not self.task.done() and self.task is not asyncio.current_task():
            self.task.cancel()

    def status(self) -> int:
        return C.STATUS_AUTOCOMMIT

    async def run(self) -> None:
        """Login, then manager commands until COM_QUIT or the client leaves."""
        try:
            peer = self.client.transport.get_extra_info("peername") if self.client.transport else None
            self.peer = peer[0] if peer else "?"
            got = await login(self.client, self.conn_id, self.runtime.version, self.runtime.tls,
                              self.runtime.login_timeout_s, self.authenticate, self.log)
            if got is None:
                return
            self.capabilities = got.capabilities
            self.deprecate_eof = bool(self.capabilities & C.DEPRECATE_EOF)
            r = Reply(self.deprecate_eof)
            r.seq = got.seq
            r.ok(self.status())
            self.client.write(r.bytes())
            while (pkt := await self.client.next_packet()) is not None:
                if not pkt[1] or not await self.dispatch(pkt[1]):
                    break
        except asyncio.CancelledError:
            pass
        except (ProtocolError, PacketTooBig) as e:
            self.log.info("protocol error, closing", error=str(e))
        except Exception:
            self.log.exception("manager session crashed")
        finally:
            self.client.close()
            self.runtime.untrack(self)

    def authenticate(self, user: str, auth: bytes, salt: bytes, database: str | None) -> None:
        """Only [[manager_users]] may log in here; client users are refused with 1045."""
        u = self.runtime.config.manager_users.get(user)
        if u is None or not verify_native_password(auth, salt, parse_stored_password(u.password)):
            raise AccessDenied(f"Access denied for user '{user}'@'{self.peer}' "
                               f"(using password: {'YES' if auth else 'NO'})")
        self.user = user

    async def dispatch(self, payload: bytes) -> bool:
        """A command: queries, ping and quit mean what they mean; USE and a reset are acknowledged."""
        cmd = payload[0]
        r = Reply(self.deprecate_eof)
        if cmd == C.COM_QUIT:
            return False
        if cmd == C.COM_QUERY:
            sql = payload[1:].decode("utf-8", "surrogateescape")
            await run_statements(self.client, sql, r, bool(self.capabilities & C.MULTI_STATEMENTS), self.statement)
            return True
        if cmd in (C.COM_PING, C.COM_INIT_DB, C.COM_RESET_CONNECTION):
            r.ok(self.status())
        elif cmd == C.COM_SET_OPTION and len(payload) >= 3 and payload[1] in (0, 1) and payload[2] == 0:
            if payload[1] == 0:
                self.capabilities |= C.MULTI_STATEMENTS
            else:
                self.capabilities &= ~C.MULTI_STATEMENTS
            r.eof(self.status())
        else:
            r.proxy_error(UnknownCommand(f"Unknown command {cmd:#04x}"))
        self.client.write(r.bytes())
        return True

    async def statement(self, sql: str, r: Reply, more: bool, may_relay: bool) -> bool:
        """Driver chatter (SET, COMMIT, version probe) is acknowledged; the rest must be a manager command."""
        kw = first_keyword(sql)
        if kw in ("SET", "COMMIT", "ROLLBACK", "BEGIN", "USE"):
            r.ok(self.status(), more=more)
            return False
        if kw == "SELECT":
            rs = local.local_select(sql, {"database": None, "connection_id": self.conn_id, "last_insert_id": 0,
                                          "user": f"{self.user}@{self.peer}",
                                          "version_comment": "pydble sharding proxy", "warning_count": 0,
                                          "error_count": 0})
            if rs is None:
                raise ProxyError("Unsupported statement, see: show @@help", 1064, "42000")
            r.resultset(rs, self.status(), more)
            return False
        cmd = parse_manager(sql)
        out = await self.runtime.manager.run(cmd, self.user)
        if isinstance(out, ResultSet):
            r.resultset(out, self.status(), more)
        else:
            r.ok(self.status(), info=out.encode(), more=more)
        return False


class Manager:
    """What manager commands do, independent of the session that asked."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def run(self, cmd: object, user: str = "") -> ResultSet | str:
        """Execute a parsed command (for manager user `user`): a result set, or the message of an OK."""
        if isinstance(cmd, RepairDdl):
            message = await repair(self.runtime, cmd.schema, cmd.table, user)
            return text_result(["schema", "table", "action", "message"],
                               [[cmd.schema, cmd.table.lower(), "nothing" if message.startswith(NOTHING)
                                 else "repaired", message]])
        if isinstance(cmd, ReloadMetadata):
            await self.reload(cmd.filter)
            return "reload metadata success"
        if isinstance(cmd, CheckMetadata):
            return text_result(["TIMESTAMP"], [[self.runtime.registry.last_load_time_text()]])
        if isinstance(cmd, CheckFullMetadata):
            return await self.check_full(cmd)
        if isinstance(cmd, ShowDdl):
            return await self.show_ddl()
        if isinstance(cmd, KillDdlLock):
            await self.runtime.kill_ddl_lock(cmd.schema, cmd.table, cmd.force)
            return "release ddl lock success"
        if isinstance(cmd, ShowCluster):
            return text_result(["NAME", "ADDRESS", "META_VERSION", "SESSION_STATE"],
                               [list(row) for row in await self.runtime.cluster_rows()])
        if isinstance(cmd, ShowDdlHistory):
            return self.ddl_history()
        if isinstance(cmd, ShowXa):
            from proxy.exec.xa import XA_COLUMNS, in_doubt_rows
            xa = self.runtime.xa
            return text_result(XA_COLUMNS, in_doubt_rows(await xa.in_doubt(), xa.inflight))
        if isinstance(cmd, ShowBackend):
            rows = []
            for name, pool in self.runtime.backends.pools.items():
                st = pool.stats()
                rows.append([name, f"{pool.group.host}:{pool.group.port}", pool.group.max_con, st["total"],
                             st["in_use"], st["idle"], st["waiting"]])
            return text_result(["DB_GROUP", "ADDRESS", "MAX_CON", "TOTAL", "IN_USE", "IDLE", "WAITING"], rows)
        if isinstance(cmd, ShowHelp):
            return text_result(["STATEMENT", "DESCRIPTION"], [[s, d] for s, d in HELP])
        raise ProxyError("Unsupported statement, see: show @@help", 1064, "42000")

    def _keys(self, f: TableFilter) -> tuple[list[tuple[str, str]] | None, str | None]:
        cfg = self.runtime.config
        if f.tables is not None:
            for s, _ in f.tables:
                if s not in cfg.schemas:
                    raise ProxyError(f"Unknown database '{s}'", 1049, "42000")
            return [(s, t.lower()) for s, t in f.tables], None
        if f.schema is not None:
            if f.schema not in cfg.schemas:
                raise ProxyError(f"Unknown database '{f.schema}'", 1049, "42000")
            if f.table is not None:
                return [(f.schema, f.table.lower())], None
            return None, f.schema
        return None, None

    async def reload(self, f: TableFilter) -> LoadResult:
        """Reload metadata (all or some tables) while queries go on; refused while a DDL runs on them."""
        keys, schema = self._keys(f)
        busy = [lk for lk in self.runtime.ddl.locks.all()
                if (keys is None or (lk.schema, lk.table) in keys) and (schema is None or lk.schema == schema)]
        if busy:
            raise DdlInProgress("There is other session is doing DDL\n" + "\n".join(lk.sql for lk in busy))
        base = self.runtime.registry.version
        result = await load_tables(self.runtime.config, keys, schema, backend=self.runtime.meta_backend)
        self.runtime.registry.apply(result, base_version=base)  # a DDL refresh meanwhile is newer: kept
        self.runtime.metrics.meta_load_seconds.labels(result.scope.kind).observe(result.seconds)
        log.info("metadata reloaded", instance=self.runtime.config.server.instance, scope=result.scope.describe(),
                 tables=len(result.tables), seconds=round(result.seconds, 3), failed_nodes=result.failed_nodes)
        return result

    async def check_full(self, cmd: CheckFullMetadata) -> ResultSet:
        """Every table's memory next to a fresh fetch from its nodes."""
        keys, schema = self._keys(cmd.filter)
        fresh = await load_tables(self.runtime.config, keys, schema, backend=self.runtime.meta_backend)
        snap = self.runtime.registry.snapshot
        cfg = self.runtime.config
        if keys is not None and cmd.filter.table is not None:
            s, t = keys[0]
            if cfg.table(s, t) is None and (s, t) not in snap.tables and (s, t) not in fresh.tables:
                raise ProxyError(f"The table [{s}.{t}] doesn't exist", 1146, "42S02")
        wanted = set(fresh.tables)
        if keys is not None:
            wanted |= set(keys)
        else:
            wanted |= {k for k in snap.tables if schema is None or k[0] == schema}
            for sname, sc in cfg.schemas.items():  # configured tables never loaded show as 'null'
                if schema is None or sname == schema:
                    wanted.update((sname, t) for t in sc.tables)
        rows: list[list[object]] = []
        for i, key in enumerate(sorted(wanted)):
            mem: TableMeta | None = snap.tables.get(key)
            new = fresh.tables.get(key)
            row = self._row(key, mem, new)
            if self._keep(cmd, row, mem):
                rows.append(row)
            if i % ROWS_PER_STEP == ROWS_PER_STEP - 1:
                await asyncio.sleep(0)
        if cmd.nodes:
            return text_result([*CHECK_FULL_COLUMNS, NODES_COLUMN], rows, frozenset({4, 5}))
        return text_result(CHECK_FULL_COLUMNS, [row[:len(CHECK_FULL_COLUMNS)] for row in rows], frozenset({4, 5}))

    @staticmethod
    def _row(key: tuple[str, str], mem: TableMeta | None, new: TableMeta | None) -> list[object]:
        # the full comparison only for the few tables that differ (a check may cover 40,000 tables)
        differing = differing_nodes(new.verdict()) if new is not None and new.consistency.flag == 0 else ""
        if mem is None or mem.structure is None:
            return [key[0], key[1], "null", "null", 0, 0, differing]
        in_nodes = 1 if new is not None and new.consistency.flag == 1 else 0
        in_memory = 1 if new is not None and consistent_in_memory(mem, new) is True else 0
        return [key[0], key[1], format_check_time(mem.reload_time), mem.structure, in_nodes, in_memory, differing]

    @staticmethod
    def _keep(cmd: CheckFullMetadata, row: list[object], mem: TableMeta | None) -> bool:
        if cmd.consistent_in_sharding_nodes is not None and row[4] != cmd.consistent_in_sharding_nodes:
            return False
        if cmd.consistent_in_memory is not None and row[5] != cmd.consistent_in_memory:
            return False
        op = cmd.reload_time_op
        if op == "is null":
            return row[2] == "null"
        if op is not None:
            t = row[2]
            if t == "null":
                return False
            want = cmd.reload_time or ""
            return {">=": t >= want, "<=": t <= want, "=": t == want, ">": t > want, "<": t < want}[op]
        return True

    def ddl_history(self) -> ResultSet:
        """`show @@ddl_history`: this instance's persistent DDL history, newest first."""
        rows = [[e.id, format_check_time(e.started_at), e.instance, e.user, ",".join(e.tables), e.sql,
                 ",".join(e.nodes), e.outcome, e.message, e.phases_ms.get("total"),
                 json.dumps(e.phases_ms, separators=(",", ":")), e.meta_version, ",".join(e.laggards),
                 ",".join(e.succeeded_nodes), ",".join(e.failed_nodes), e.repair_of or None]
                for e in self.runtime.history.entries()]
        return text_result(["id", "started", "instance", "user", "tables", "sql", "nodes", "outcome", "message",
                            "total_ms", "phases_ms", "meta_version", "laggards", "succeeded_nodes", "failed_nodes",
                            "repair_of"], rows)

    async def show_ddl(self) -> ResultSet:
        """DDLs in flight in the whole cluster."""
        rows = [[schema, table, sql, instance, phase, format_check_time(since)]
                for schema, table, sql, instance, phase, since in await self.runtime.ddl_in_flight()]
        return text_result(["schema", "table", "sql", "instance", "phase", "since"], rows)
