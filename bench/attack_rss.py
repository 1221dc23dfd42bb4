"""The proxy's resident memory under exhaustion attacks (issue 16, Done means 6).

Attacks, each against a fresh pydble over a private MariaDB (started with the test harness):
1. `unauth`: N unauthenticated connections each announce and send a 64 MB+ packet instead of a
   handshake response (before: 1.23 GB resident for 16 connections).
2. `stalled`: N logged-in clients each send a COM_QUERY one byte short of max_allowed_packet and stop
   (before: 376 MB held for more than 70 s).
3. `query`: one logged-in client sends one big INSERT (one long literal, then many small rows); the
   proxy's peak RSS growth over the statement's size (the first of the run, so VmHWM shows it).

Prints the proxy's RSS (VmRSS and VmHWM from /proc) before, during and after each attack.

    .venv/bin/python bench/attack_rss.py [--clients 16] [--stalled 20] [--packet-timeout 5]
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
for _p in (REPO_ROOT, REPO_ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from harness.ports import recv_packet  # noqa: E402 - after the path set-up

MB = 1 << 20


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A /proc/<pid>/status memory field in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak(pid: int) -> None:
    """Start VmHWM again from the current RSS (Linux: clear_refs 5), so one query's peak shows."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass


def send_big(s: socket.socket, total: int, seq: int, chunk: int = 1 << 20, first: bytes = b"") -> int:
    """Send `total` payload bytes framed as MySQL packets (16 MB pieces); bytes sent before refusal."""
    sent = 0
    payload_left = total
    try:
        while payload_left > 0:
            n = min(payload_left, 0xFFFFFF)
            s.sendall(struct.pack("<I", n | (seq << 24)))
            seq = (seq + 1) & 0xFF
            body_left = n
            while body_left > 0:
                k = min(chunk, body_left)
                piece = first[:k] if first and sent == 0 else b"\0" * k
                s.sendall(piece)
                sent += k
                body_left -= k
            payload_left -= n
    except OSError:
        pass
    return sent


def unauth_attack(host: str, port: int, conns: int, size: int) -> list[int]:
    """conns sockets each greeted, then each sends a `size` packet instead of a login; bytes each got out."""
    socks = []
    for _ in range(conns):
        s = socket.create_connection((host, port), timeout=10)
        recv_packet(s)
        socks.append(s)
    out = []
    for s in socks:
        s.settimeout(5)
        out.append(send_big(s, size, 1))
    for s in socks:
        s.close()
    return out


def login(host: str, port: int, user: str, password: str, db: str):
    """A PyMySQL connection whose raw socket the caller then writes to."""
    import pymysql
    return pymysql.connect(host=host, port=port, user=user, password=password, database=db, autocommit=True)


def stall_attack(host: str, port: int, clients: int, size: int, user: str, password: str, db: str) -> list:
    """clients logged in, each sends a COM_QUERY of `size` bytes but the last one: returns the sockets."""
    conns = [login(host, port, user, password, db) for _ in range(clients)]
    for c in conns:
        sock = c._sock  # noqa: SLF001 - raw bytes on purpose
        head = struct.pack("<I", min(size, 0xFFFFFF))
        sock.sendall(head + b"\x03" + b"S" * (min(size, 0xFFFFFF) - 2))  # one byte short
    return conns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=16, help="unauthenticated attackers")
    ap.add_argument("--size-mb", type=int, default=65, help="packet each unauthenticated attacker sends")
    ap.add_argument("--stalled", type=int, default=20, help="logged-in clients stalled one byte short")
    ap.add_argument("--packet-timeout", type=float, default=5.0, help="[server] packet_timeout_s for the run")
    ap.add_argument("--query-mb", type=int, default=8, help="size of the one big INSERT")
    ap.add_argument("--rows-kb", type=int, default=1024, help="size of the multi-row INSERT")
    ap.add_argument("--old", action="store_true", help="run against code without the new [server] settings")
    args = ap.parse_args()

    from harness import MariaDBServer, ProxyProcess, free_port, proxy_config

    dbs = [MariaDBServer("bench-attack-1"), MariaDBServer("bench-attack-2")]
    for db in dbs:
        db.start()
    try:
        for db in dbs:
            db.create_databases("db1", "db2", "db3")
        cfg = proxy_config(dbs, free_port(), free_port())
        if not args.old:
            cfg["server"].update(packet_timeout_s=args.packet_timeout, max_allowed_packet=16 * MB)  # the default
        else:
            cfg["server"].pop("max_allowed_packet", None)   # a proxy from before these settings
        px = ProxyProcess(cfg, name="bench-attack-proxy")
        px.start()
        try:
            pid = px.pid
            assert pid is not None
            host, port = px.host, px.port
            idle = rss_mb(pid)
            print(f"proxy pid {pid}: idle RSS {idle:.1f} MB")

            c = login(host, port, "test", "111111", "schema1")
            with c.cursor() as cur:
                cur.execute("CREATE TABLE IF NOT EXISTS big_t (id INT PRIMARY KEY, v LONGTEXT)")
                cur.execute("CREATE TABLE IF NOT EXISTS sharding_2_t1 (id INT PRIMARY KEY, v VARCHAR(20))")
            n = args.query_mb * MB
            rows = ",".join(f"({i},'r{i}')" for i in range(args.rows_kb * 1024 // 12))
            for label, sql in ((f"one {args.query_mb} MB string literal", "REPLACE INTO big_t VALUES (1, '" + "x" * n + "')"),
                               (f"a {len(rows) >> 10} KB multi-row INSERT (sharding table)",
                                "REPLACE INTO sharding_2_t1 (id, v) VALUES " + rows)):
                with c.cursor() as cur:
                    cur.execute("SELECT 1")
                    reset_peak(pid)
                    base = rss_mb(pid)
                    cur.execute(sql)
                grew = max(rss_mb(pid, "VmHWM") - base, 0.0)
                print(f"query: {label}: peak RSS growth {grew:.1f} MB = {grew * MB / len(sql):.1f}x the statement")
            c.close()
            t0 = time.monotonic()
            sent = unauth_attack(host, port, args.clients, args.size_mb * MB)
            print(f"unauth: {args.clients} connections x {args.size_mb} MB announced; the proxy took "
                  f"{max(sent) / MB:.1f} MB at most from one before refusing ({time.monotonic() - t0:.1f} s); "
                  f"RSS now {rss_mb(pid):.1f} MB, peak {rss_mb(pid, 'VmHWM'):.1f} MB")

            size = cfg["server"].get("max_allowed_packet", 16 * MB)
            conns = stall_attack(host, port, args.stalled, size, "test", "111111", "schema1")
            time.sleep(1.0)
            print(f"stalled: {args.stalled} clients one byte short of {size / MB:.0f} MB: RSS {rss_mb(pid):.1f} MB, "
                  f"peak {rss_mb(pid, 'VmHWM'):.1f} MB")
            t0 = time.monotonic()
            deadline = t0 + args.packet_timeout * 3 + 10
            while time.monotonic() < deadline:
                if rss_mb(pid) < idle + 16:
                    break
                time.sleep(0.5)
            print(f"stalled: after {time.monotonic() - t0:.1f} s (packet_timeout_s {args.packet_timeout}): "
                  f"RSS {rss_mb(pid):.1f} MB")
            for c in conns:
                try:
                    c._sock.shutdown(socket.SHUT_RDWR)  # noqa: SLF001 - PyMySQL's reader holds the descriptor
                    c._sock.close()  # noqa: SLF001
                except OSError:
                    pass

        finally:
            px.cleanup()
    finally:
        for db in dbs:
            db.cleanup()


if __name__ == "__main__":
    main()
