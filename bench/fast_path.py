"""The proxy's own CPU per point select on its data-callback path, plain and prepared, in process (issue 20 item 1).

A proxy runs in this process against a private MariaDB (sbtest1 sharded over four databases, as in
bench/point_select.py). A real client logs in, prepares `SELECT c FROM sbtest1 WHERE id=?` and runs it
once each way; the backend's real answers are recorded. Then, with both sockets swapped for stubs (the
client's writes counted, the backend's swallowed), each query is the client's packet handed to the
client connection's data callback, one loop turn (the pipelined backend write), the recorded answer
handed to the backend connection's data callback: everything the proxy's Python does per query, no
system call. Prints process CPU µs per query, best of --reps runs of --queries each, per mode.

    python3 bench/fast_path.py [--queries 20000] [--reps 7] [--mysql-port 3306]

With --baseline DIR, the same is measured for another checkout's proxy in a child process run in turn
with this one (A/B in one invocation).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]

SHARDS = ("fp_dn1", "fp_dn2", "fp_dn3", "fp_dn4")
SQL = "SELECT c FROM sbtest1 WHERE id=?"
KEY = 4711


class _Sink:
    """A transport that takes writes and counts their bytes."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes) -> None:
        self.bytes += len(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def _prepare_data(port: int) -> None:
    import pymysql
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True)
    with conn.cursor() as cur:
        for i, db in enumerate(SHARDS):
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
            cur.execute(f"CREATE TABLE `{db}`.sbtest1 (id INT NOT NULL PRIMARY KEY, k INT NOT NULL DEFAULT 0, "
                        "c CHAR(120) NOT NULL DEFAULT '', pad CHAR(60) NOT NULL DEFAULT '')")
            rows = [(n, n, f"{n:011d}-" * 10) for n in range(i, 10000, 4)]
            cur.executemany(f"INSERT INTO `{db}`.sbtest1 (id, k, c) VALUES (%s, %s, %s)", rows)
    conn.close()


def _config(mysql_port: int, port: int, manager_port: int) -> dict[str, Any]:
    return {
        "server": {"instance": "bench-fast-path", "bind": "127.0.0.1", "port": port, "manager_port": manager_port},
        "users": [{"name": "sbtest", "password": "sbtest", "schemas": ["sbtest"]}],
        "manager_users": [{"name": "root", "password": "111111"}],
        "db_groups": {"g1": {"host": "127.0.0.1", "port": mysql_port, "user": "root", "password": "", "max_con": 64}},
        "sharding_nodes": {f"dn{i + 1}": {"db_group": "g1", "database": db} for i, db in enumerate(SHARDS)},
        "functions": {"hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]}},
        "schemas": {"sbtest": {"tables": {"sbtest1": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"],
                                                      "function": "hash-four", "column": "id"}}}},
    }


async def measure(mysql_port: int, queries: int, reps: int, deprecate_eof: bool, modes: list[str]
                  ) -> dict[str, float]:
    """µs of process CPU per query, best run, for 'plain' and 'prepared' (this process's proxy code)."""
    sys.path += [str(REPO_ROOT / "tests"), str(REPO_ROOT / "tests" / "proxy")]   # after the code measured
    from harness import free_port
    from meta.config import parse_config
    from proxy.backends.backend import BackendConnection
    from proxy.server import ProxyServer
    from ps_wire import PsClient, p_long

    server = ProxyServer(parse_config(_config(mysql_port, free_port(), free_port())))
    await server.start()
    rt = server.runtime
    port = rt.config.server.port
    recorded: list[tuple[BackendConnection, bytes]] = []
    real = BackendConnection._relay_whole   # (data_received itself is bound by the transport already)

    def record(self: BackendConnection, data: bytes, scanner: Any) -> int:
        recorded.append((self, bytes(data)))
        return real(self, data, scanner)

    client = await asyncio.to_thread(PsClient, port, "sbtest", "sbtest", "sbtest", deprecate_eof)
    stmt = await asyncio.to_thread(client.prepare, SQL)
    await asyncio.to_thread(client.execute, stmt.stmt_id, [p_long(KEY)], True)   # binds the types
    text = b"\x03" + SQL.replace("?", str(KEY)).encode()
    plain = struct.pack("<I", len(text)) + text
    execute = client.execute_packet(stmt.stmt_id, [p_long(KEY)], False)
    execute = struct.pack("<I", len(execute)) + execute
    packets = {"plain": plain, "prepared": execute}
    answers: dict[str, tuple[BackendConnection, bytes]] = {}
    BackendConnection._relay_whole = record   # type: ignore[method-assign]
    try:
        for mode, packet in packets.items():
            recorded.clear()
            await asyncio.to_thread(client.sock.sendall, packet)
            got = await asyncio.to_thread(client.answer)
            assert got.kind == "rows" and len(got.rows) == 1, (mode, got.kind, got.err_message)
            assert len(recorded) == 1, f"{mode}: the answer came in {len(recorded)} reads"
            answers[mode] = recorded[0]
    finally:
        BackendConnection._relay_whole = real   # type: ignore[method-assign]
    session = next(iter(rt.sessions))
    proto = session.client
    client_transport, proto.transport = proto.transport, _Sink()
    backends = {conn for conn, _ in answers.values()}
    saved = {conn: conn.transport for conn in backends}
    for conn in backends:
        conn.transport = _Sink()
    out: dict[str, float] = {}
    try:
        for mode, packet in packets.items():
            conn, answer = answers[mode]
            feed, relay = proto.data_received, conn.data_received
            best = float("inf")
            if mode not in modes:
                continue
            for _ in range(reps):
                t = time.process_time()
                for _ in range(queries):
                    feed(packet)
                    await asyncio.sleep(0)   # the loop turn that writes the pipelined command
                    relay(answer)
                best = min(best, (time.process_time() - t) / queries * 1e6)
            assert not proto.busy, f"{mode}: a query did not end"
            out[mode] = best
    finally:
        for conn, transport in saved.items():
            conn.transport = transport
        proto.transport = client_transport
    client.sock.close()
    await server.stop()
    return out


def _child(args: argparse.Namespace) -> None:
    """One measurement of the proxy code first on sys.path (the parent puts the target's checkout there)."""
    import structlog
    import logging
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    print(json.dumps(asyncio.run(measure(args.mysql_port, args.queries, args.reps, args.deprecate_eof,
                                     args.modes.split(",")))))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3, help="children per target, taking turns")
    ap.add_argument("--mysql-port", type=int, help="use this MariaDB on 127.0.0.1 (root, no password)")
    ap.add_argument("--baseline", metavar="DIR", help="also measure another checkout (A/B in one invocation)")
    ap.add_argument("--deprecate-eof", action="store_true", help="the client asks for CLIENT_DEPRECATE_EOF")
    ap.add_argument("--modes", default="plain,prepared", help="comma-separated: plain (COM_QUERY), prepared")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    sys.path.append(str(REPO_ROOT / "tests"))
    from harness import MariaDBServer
    server = None
    if args.mysql_port is None:
        server = MariaDBServer("bench-fast-path")
        server.start()
        args.mysql_port = server.port
    try:
        _prepare_data(args.mysql_port)
        targets = {"this": REPO_ROOT, **({"base": Path(args.baseline).resolve()} if args.baseline else {})}
        results: dict[str, list[dict[str, float]]] = {t: [] for t in targets}
        for i in range(args.rounds):
            for name in (list(targets)[i % len(targets):] + list(targets)[:i % len(targets)]):
                script = targets[name] / "bench" / "fast_path.py"
                if not script.exists():
                    script = Path(__file__).resolve()   # an older checkout: this script, that code
                cmd = [sys.executable, "-c", f"import runpy, sys; sys.path.insert(0, {str(targets[name])!r}); "
                       f"sys.argv = ['fast_path.py'] + sys.argv[1:]; runpy.run_path({str(script)!r}, "
                       "run_name='__main__')", "--child", "--mysql-port", str(args.mysql_port),
                       "--queries", str(args.queries), "--reps", str(args.reps), "--modes", args.modes,
                       *(["--deprecate-eof"] if args.deprecate_eof else [])]
                out = subprocess.run(cmd, capture_output=True, text=True, cwd=targets[name])
                if out.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                results[name].append(r)
                print(f"  round {i + 1} {name:<5} " + "  ".join(f"{m} {v:6.2f} µs" for m, v in r.items()), flush=True)
        print("\nbest over rounds, µs of proxy CPU per query (no system calls):")
        for name, rs in results.items():
            print(f"  {name:<5} " + "  ".join(f"{m} {min(r[m] for r in rs):6.2f}" for m in rs[0]))
        if args.baseline:
            print("this / base: " + "  ".join(
                f"{m} {min(r[m] for r in results['this']) / min(r[m] for r in results['base']):.2f}"
                for m in results["this"][0]))
    finally:
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
