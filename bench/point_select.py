"""Point-select QPS through pydble against direct MariaDB, in the same run (issue 2 item 8, issue 20 item 1).

sysbench 1.0 `oltp_point_select` (`SELECT c FROM sbtest1 WHERE id=N`) in each PS mode (`disable`: plain
COM_QUERY; `auto`: COM_STMT_EXECUTE) and thread count asked for, alternating direct and proxy runs so
both see the same machine. Through the proxy, sbtest1 is a sharding table (hash on id over dn1..dn4,
four databases of one MariaDB server); direct, it is one unsharded table of the same server. Prints
each run's QPS, the CPU every process used per query, and per cell the best and median ratio
proxy/direct beside the proxy's own CPU per query (user + sys from /proc of the proxy process(es) ÷
the queries sysbench counted; targets >= 0.5 and <= 20 µs on a 2-core machine).

    python3 bench/point_select.py [--time 10] [--rounds 3] [--threads 8,32] [--ps-mode disable,auto]
                                  [--table-size 10000] [--workers 1] [--mysql-port 3306] [--profile out.txt]
                                  [--baseline /path/to/other/checkout] [--baseline-workers N] [--serve]

Without --mysql-port it starts a private MariaDB server with the test harness (temporary datadir,
free port) and removes it at the end; with --mysql-port it uses that server on 127.0.0.1 as root
(empty password unless --mysql-password) and drops its benchmark databases at the end.
--workers N runs N proxy processes on the same port (SO_REUSEPORT; the kernel spreads connections); with
--serve they are one `pydble serve --workers N` (a parent and its N workers; a private ZooKeeper when N > 1,
since more than one worker needs [cluster]; every target then gets the same [cluster] section).
--baseline DIR also runs the proxy of another checkout (e.g. `git worktree add /tmp/base main`) as target
"base" in every round, so a change is measured against its parent in the same invocation (A/B).
--profile FILE records the proxy with py-spy during one extra proxy run and writes a flat profile.
--relay-floor also runs target "socat": sysbench to the direct database through `socat` (C, a process per
connection, each byte read and written once per direction), the floor of any relay on this box; its CPU per
query (the reaped children's included) is what one read and one write per direction cost here.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
for p in (REPO_ROOT, REPO_ROOT / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import pymysql  # noqa: E402

from harness import MariaDBServer, ProxyProcess, ZooKeeperServer, free_port, port_accepts  # noqa: E402
from harness.ports import port_is_bindable  # noqa: E402

SHARDS = ("sb_dn1", "sb_dn2", "sb_dn3", "sb_dn4")
DIRECT_DB = "sb_direct"
TARGET = 0.5
TARGET_US = 20.0   # the proxy's own CPU per query (issue 20 item 1)
_QPS_RE = re.compile(r"queries:\s+(\d+)\s+\(([\d.]+) per sec\.\)")
_ERR_RE = re.compile(r"ignored errors:\s+(\d+)")


@dataclass
class Run:
    """One sysbench run and the CPU each process used meanwhile."""

    target: str
    qps: float
    errors: int
    seconds: float
    cpu: dict[str, float]                        # cores (CPU seconds per second)
    per_query: dict[str, tuple[float, float]]    # (user, sys) microseconds per query
    calls: dict[str, tuple[float, float]] = None  # type: ignore[assignment]  # (read, write) system calls per query


def read_write_calls(pid: int) -> tuple[int, int]:
    """The read and write system calls a process made so far (/proc/<pid>/io syscr, syscw)."""
    try:
        fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except OSError:
        return 0, 0
    return int(fields["syscr"]), int(fields["syscw"])


def user_sys(pid: int, children: bool = False) -> tuple[float, float]:
    """utime, stime of a process in seconds (children: with those of its children it has reaped)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tck = os.sysconf("SC_CLK_TCK")
    u, s = int(fields[11]), int(fields[12])
    if children:
        u, s = u + int(fields[13]), s + int(fields[14])
    return u / tck, s / tck


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process."""
    return sum(user_sys(pid))


def children_of(pid: int) -> set[int]:
    """The child processes of pid (a `serve --workers N` parent's workers)."""
    try:
        return {int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except OSError:
        return set()


def wait_accepting(ports: Sequence[int], what: str, seconds: float) -> None:
    """Until every port accepts a connection; exit with a message after seconds."""
    deadline = time.monotonic() + seconds
    while not all(port_accepts(p) for p in ports):
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not listen in {seconds:g} s")
        time.sleep(0.1)


def loadavg() -> str:
    """The 1/5/15-minute load averages, as `uptime` shows them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


class Bench:
    """The servers, the data and the runs."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.server: MariaDBServer | None = None
        self.proxies: dict[str, list[ProxyProcess]] = {}   # target ("proxy", "base") -> its workers
        self.proxy_ports: dict[str, int] = {}
        self.port = args.mysql_port
        self.mysqld_pid: int | None = None
        self.zk: ZooKeeperServer | None = None   # --serve with more than one worker
        self.socat: subprocess.Popen[bytes] | None = None   # --relay-floor
        self.socat_port = 0

    # -- set-up ----------------------------------------------------------------------------------
    def start(self) -> None:
        """Start (or find) MariaDB, load the data, start the proxy worker(s)."""
        if self.port is None:
            self.server = MariaDBServer("bench-point-select")
            self.server.start()
            self.port = self.server.port
            self.mysqld_pid = self.server.pid
        else:
            self.mysqld_pid = self._find_mysqld(self.port)
        self._prepare()
        if self.args.serve and max(self.args.workers, self.args.baseline_workers) > 1:
            self.zk = ZooKeeperServer("bench-zookeeper")
            self.zk.start()
        self._start_proxies("proxy", REPO_ROOT, self.args.workers)
        if self.args.baseline:
            self._start_proxies("base", Path(self.args.baseline).resolve(),
                                self.args.baseline_workers or self.args.workers)
        if self.args.relay_floor:
            self.socat_port = free_port()
            self.socat = subprocess.Popen(["socat", f"TCP-LISTEN:{self.socat_port},bind=127.0.0.1,fork,reuseaddr",
                                           f"TCP:127.0.0.1:{self.port}"])
            wait_accepting([self.socat_port], "socat", 10)

    def _find_mysqld(self, port: int) -> int | None:
        """The pid of the mariadbd listening on port (for its CPU figures), if we may see it."""
        out = subprocess.run(["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True).stdout
        m = re.search(r"pid=(\d+)", out)
        return int(m.group(1)) if m else None

    def _connect(self, db: str | None = None) -> Any:
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password=self.args.mysql_password,
                               database=db, autocommit=True)

    def _prepare(self) -> None:
        """sbtest1 in the direct database by sysbench itself, then split by id mod 4 into the shards."""
        conn = self._connect()
        with conn.cursor() as cur:
            for db in (DIRECT_DB, *SHARDS):
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
                cur.execute(f"CREATE DATABASE `{db}`")
        subprocess.run(["sysbench", "oltp_point_select", *self._common(), *self._direct(), "prepare"],
                       check=True, capture_output=True, text=True)
        with conn.cursor() as cur:
            cur.execute(f"SHOW CREATE TABLE `{DIRECT_DB}`.sbtest1")
            ddl = cur.fetchone()[1]
            for i, db in enumerate(SHARDS):
                cur.execute(f"USE `{db}`")
                cur.execute(ddl)
                cur.execute(f"INSERT INTO `{db}`.sbtest1 SELECT * FROM `{DIRECT_DB}`.sbtest1 WHERE id % 4 = {i}")
        conn.close()

    def _config(self, port: int, manager_port: int, instance: str) -> dict[str, Any]:
        return {
            "server": {"instance": instance, "bind": "127.0.0.1", "port": port, "manager_port": manager_port},
            "users": [{"name": "sbtest", "password": "sbtest", "schemas": ["sbtest"]}],
            "manager_users": [{"name": "root", "password": "111111"}],
            "db_groups": {"g1": {"host": "127.0.0.1", "port": self.port, "user": "root",
                                 "password": self.args.mysql_password, "max_con": 64}},
            "sharding_nodes": {f"dn{i + 1}": {"db_group": "g1", "database": db} for i, db in enumerate(SHARDS)},
            "functions": {"hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]}},
            "schemas": {"sbtest": {"tables": {"sbtest1": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"],
                                                          "function": "hash-four", "column": "id"}}}},
        }

    def _start_proxies(self, target: str, root: Path, workers: int) -> None:
        """The proxy worker(s) of one target, running the code of the checkout at root."""
        port = free_port()
        argv = None
        if root != REPO_ROOT:   # another checkout (--baseline): its own cli package, first on the path
            argv = [sys.executable, "-c", f"import runpy, sys; sys.path.insert(0, {str(root)!r}); "
                    "runpy.run_module('cli', run_name='__main__')", "serve", "--config", "{config}"]
        procs = self.proxies.setdefault(target, [])
        if self.args.serve:   # one `pydble serve --workers N`: a parent and its workers
            manager = free_port()
            while not all(port_is_bindable(manager + i) for i in range(1, workers)):
                manager = free_port()
            cfg = self._config(port, manager, f"bench-{target}")
            if self.zk is not None:
                cfg["cluster"] = {"zk": self.zk.hosts, "root": f"/bench-{target}", "session_timeout_s": 10}
            base = argv or [sys.executable, "-m", "cli", "serve", "--config", "{config}"]
            p = ProxyProcess(cfg, name=f"bench-{target}", argv=[*base, "--workers", str(workers)])
            p.start()
            procs.append(p)
            wait_accepting([manager + i for i in range(workers)], f"the workers of {target}", 60)
            self.proxy_ports[target] = port
            return
        for w in range(workers):
            cfg = self._config(port, free_port(), f"bench-{target}-{w}")
            if workers > 1:   # the workers share the client port
                cfg["server"]["reuse_port"] = True
            p = ProxyProcess(cfg, name=f"bench-{target}-{w}", argv=argv)
            p.start()
            procs.append(p)
        self.proxy_ports[target] = port

    def stop(self) -> None:
        """Stop the proxies and the private server, or drop the databases on a shared one."""
        for p in (p for ps in self.proxies.values() for p in ps):
            p.cleanup()
        if self.socat is not None:
            self.socat.terminate()
            self.socat.wait(10)
        if self.zk is not None:
            self.zk.cleanup()
        if self.server is not None:
            self.server.cleanup()
        elif self.port is not None and not self.args.keep:
            conn = self._connect()
            with conn.cursor() as cur:
                for db in (DIRECT_DB, *SHARDS):
                    cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            conn.close()

    # -- runs ------------------------------------------------------------------------------------
    def _common(self) -> list[str]:
        a = self.args
        return ["--db-driver=mysql", "--mysql-host=127.0.0.1", "--tables=1", f"--table-size={a.table_size}",
                "--rand-type=uniform"]

    def _direct(self) -> list[str]:
        return [f"--mysql-port={self.port}", "--mysql-user=root", f"--mysql-password={self.args.mysql_password}",
                f"--mysql-db={DIRECT_DB}"]

    def _via(self, target: str) -> list[str]:
        """sysbench's connection options for a target: straight to MariaDB, through socat, or a proxy."""
        if target == "direct":
            return self._direct()
        if target == "socat":   # the direct database, through the relay
            return [f"--mysql-port={self.socat_port}", *self._direct()[1:]]
        return [f"--mysql-port={self.proxy_ports[target]}", "--mysql-user=sbtest", "--mysql-password=sbtest",
                "--mysql-db=sbtest"]

    def _pids(self, target: str) -> dict[str, int]:
        if target == "socat":
            return {"socat": self.socat.pid, **({"mariadb": self.mysqld_pid} if self.mysqld_pid else {})}  # type: ignore[union-attr]
        pids = {f"proxy{i}": p.pid for i, p in enumerate(self.proxies.get(target, [])) if p.pid}
        if self.args.serve:   # the parent's workers (read per run: a restarted worker has a new pid)
            for parent in list(pids.values()):
                for i, child in enumerate(sorted(children_of(parent))):
                    pids[f"proxy-w{i}"] = child
        if self.mysqld_pid:
            pids["mariadb"] = self.mysqld_pid
        return pids

    def run(self, target: str, seconds: float, threads: int, ps_mode: str) -> Run:
        """One sysbench run against 'direct' or 'proxy'."""
        conn = self._via(target)
        pids = self._pids(target)
        before = {k: user_sys(v, k == "socat") for k, v in pids.items()}
        calls_before = {k: read_write_calls(v) for k, v in pids.items() if k.startswith("proxy")}
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        out = subprocess.run(["sysbench", "oltp_point_select", *self._common(), *conn, f"--db-ps-mode={ps_mode}",
                              f"--threads={threads}", f"--time={seconds:g}", "--report-interval=0",
                              "run"], capture_output=True, text=True)
        elapsed = time.monotonic() - started
        if out.returncode != 0:
            raise SystemExit(f"sysbench against {target} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        if target == "socat":
            time.sleep(0.5)   # its children end with their connections and are reaped
        after = {k: user_sys(v, k == "socat") for k, v in pids.items()}
        calls_after = {k: read_write_calls(pids[k]) for k in calls_before}
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = {k: (sum(after[k]) - sum(before[k])) / elapsed for k in pids}
        m = _QPS_RE.search(out.stdout)
        assert m is not None, out.stdout[-2000:]
        qps = float(m.group(2))
        n = max(float(m.group(1)), 1.0)   # the queries served (CPU is counted over the whole invocation)
        per_query = {k: ((after[k][0] - before[k][0]) / n * 1e6, (after[k][1] - before[k][1]) / n * 1e6)
                     for k in pids}
        per_query["sysbench"] = ((children_after.ru_utime - children.ru_utime) / n * 1e6,
                                 (children_after.ru_stime - children.ru_stime) / n * 1e6)
        calls = {k: ((calls_after[k][0] - calls_before[k][0]) / n, (calls_after[k][1] - calls_before[k][1]) / n)
                 for k in calls_before}
        m = _ERR_RE.search(out.stdout)
        return Run(target, qps, int(m.group(1)) if m else 0, elapsed, cpu, per_query, calls)

    def _profiled_pid(self) -> int | None:
        """The proxy process py-spy records: the first worker of a `serve --workers N` parent."""
        pid = self.proxies["proxy"][0].pid
        kids = sorted(children_of(pid)) if self.args.serve and pid else []
        return kids[0] if kids else pid

    def profile(self, path: str) -> None:
        """py-spy over one proxy run: a flat profile of where the proxy's time goes."""
        if shutil.which("py-spy") is None:
            print("py-spy not found; no profile")
            return
        raw = Path(path).with_suffix(".raw")
        mode = ["--native"] if self.args.native else ["--nonblocking"]  # py-spy cannot do both
        spy = subprocess.Popen(["py-spy", "record", "-f", "raw", "-o", str(raw), "-r", "400", *mode,
                                "-p", str(self._profiled_pid())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)
        try:
            self.run("proxy", self.args.time, self.args.threads[0], self.args.ps_mode[0])
        finally:
            spy.send_signal(2)
            spy.wait(30)
        Path(path).write_text(flat_profile(raw.read_text()))
        print(f"profile written to {path} (raw stacks in {raw})")


def flat_profile(raw: str, top: int = 40) -> str:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) stacks."""
    total = 0
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        count = int(n)
        total += count
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for f in set(frames):
            incl[f] = incl.get(f, 0) + count
    lines = [f"{total} samples", "", "self%  incl%  function"]
    for f, c in sorted(own.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{100 * c / total:5.1f}  {100 * incl[f] / total:5.1f}  {f}")
    lines += ["", "by inclusive share:", "incl%  function"]
    for f, c in sorted(incl.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{100 * c / total:5.1f}  {f}")
    return "\n".join(lines) + "\n"


@dataclass
class Cell:
    """The outcome of one PS mode, thread count and target (the proxy, or the --baseline checkout's)."""

    ps_mode: str
    threads: int
    target: str
    ratio_best: float
    ratio_median: float
    proxy_us: float      # the proxy process(es)' user + sys per query, median over rounds
    direct_qps: float
    proxy_qps: float
    load: str


def report(runs: Sequence[Run], args: argparse.Namespace, threads: int, ps_mode: str,
           targets: Sequence[str]) -> list[Cell]:
    """Print every run of one PS mode and thread count and its ratios; one summary per proxy target."""
    print(f"\n--- ps-mode {ps_mode}, {threads} threads ---")
    print(f"{'round':>5} {'target':<7} {'qps':>10} {'errors':>6}  cpu (cores), proxy read+write calls per query")
    rounds: list[dict[str, Run]] = []
    for i in range(0, len(runs), len(targets)):
        by = {r.target: r for r in runs[i:i + len(targets)]}
        rounds.append(by)
        for t in targets:
            r = by[t]
            cpu = "  ".join(f"{k} {v:.2f}" for k, v in sorted(r.cpu.items()))
            cpu += "".join(f"  {k} {rd:.2f}+{wr:.2f} calls" for k, (rd, wr) in sorted((r.calls or {}).items()))
            print(f"{i // len(targets) + 1:>5} {r.target:<7} {r.qps:>10.0f} {r.errors:>6}  {cpu}")
    print("\nCPU microseconds per query, user + sys (median over rounds):")
    for t in targets:
        runs_of = [by[t] for by in rounds]
        parts = []
        total = 0.0
        for k in sorted({k for r in runs_of for k in r.per_query}):
            u = statistics.median(r.per_query.get(k, (0.0, 0.0))[0] for r in runs_of)
            s_ = statistics.median(r.per_query.get(k, (0.0, 0.0))[1] for r in runs_of)
            if u + s_ >= 0.05:
                parts.append(f"{k} {u:.1f}+{s_:.1f}")
                total += u + s_
        print(f"  {t:<6} {'  '.join(parts)}  = {total:.1f}")
    direct = [by["direct"].qps for by in rounds]
    print(f"\ndirect qps: best {max(direct):.0f}, median {statistics.median(direct):.0f}")
    cells = []
    for t in targets[1:]:
        ratios = [by[t].qps / by["direct"].qps for by in rounds]
        own = [sum(sum(v) for k, v in by[t].per_query.items() if k.startswith(("proxy", "socat"))) for by in rounds]
        qps = [by[t].qps for by in rounds]
        c = Cell(ps_mode, threads, t, max(ratios), statistics.median(ratios), statistics.median(own),
                 statistics.median(direct), statistics.median(qps), loadavg())
        cells.append(c)
        print(f"{t} qps: best {max(qps):.0f}, median {c.proxy_qps:.0f}; ratio per round "
              f"{', '.join(f'{r:.3f}' for r in ratios)}; proxy CPU µs/query per round "
              f"{', '.join(f'{u:.1f}' for u in own)}")
        print(f"{t} ratio best {c.ratio_best:.3f}, median {c.ratio_median:.3f} (target >= {TARGET}), "
              f"proxy CPU {c.proxy_us:.1f} µs/query (target <= {TARGET_US:g})")
    print(f"threads {threads}, ps-mode {ps_mode}, {args.time:g} s per run, table {args.table_size} rows, "
          f"{args.workers} proxy worker(s){' (serve --workers)' if args.serve else ''}, load average now {loadavg()}")
    return cells


def summary(cells: Sequence[Cell]) -> None:
    """One line per cell: the ratio beside the proxy's own CPU per query."""
    print("\nps-mode  threads  target  direct qps  proxy qps  ratio median (best)  proxy µs/query  load avg")
    for c in cells:
        print(f"{c.ps_mode:<8} {c.threads:>7}  {c.target:<6} {c.direct_qps:>11.0f} {c.proxy_qps:>10.0f}  "
              f"{c.ratio_median:>6.3f} ({c.ratio_best:.3f})      {c.proxy_us:>10.1f}      {c.load}")


def _csv(kind: type) -> Any:
    return lambda text: [kind(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", type=float, default=10.0, help="seconds per sysbench run")
    ap.add_argument("--rounds", type=int, default=3, help="direct+proxy pairs, order alternating")
    ap.add_argument("--threads", type=_csv(int), default=[8, 32], help="comma-separated thread counts")
    ap.add_argument("--ps-mode", type=_csv(str), default=["disable", "auto"],
                    help="comma-separated sysbench --db-ps-mode values (disable: COM_QUERY, auto: COM_STMT_EXECUTE)")
    ap.add_argument("--table-size", type=int, default=10000)
    ap.add_argument("--baseline", metavar="DIR", help="also run the proxy of another checkout (A/B in one invocation)")
    ap.add_argument("--baseline-workers", type=int, default=0,
                    help="workers of the --baseline target (default --workers): `--baseline . --baseline-workers 2`")
    ap.add_argument("--workers", type=int, default=1, help="proxy processes sharing the port (SO_REUSEPORT)")
    ap.add_argument("--serve", action="store_true",
                    help="run each target's workers as one `pydble serve --workers N` instead of N processes")
    ap.add_argument("--mysql-port", type=int, help="use this MariaDB on 127.0.0.1 instead of a private one")
    ap.add_argument("--mysql-password", default="")
    ap.add_argument("--keep", action="store_true", help="keep the benchmark databases on --mysql-port")
    ap.add_argument("--profile", metavar="FILE", help="also record the proxy with py-spy into FILE")
    ap.add_argument("--native", action="store_true", help="with --profile: include C frames (uvloop, CPython)")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds of unmeasured runs first")
    ap.add_argument("--relay-floor", action="store_true",
                    help="also run target socat: the same sysbench through a C byte relay to the direct database")
    args = ap.parse_args(argv)
    if shutil.which("sysbench") is None:
        print("sysbench is not installed (apt-get install sysbench)", file=sys.stderr)
        return 2
    b = Bench(args)
    try:
        b.start()
        print(f"load average before: {loadavg()}")
        cells: list[Cell] = []
        targets = ["direct", "proxy", *(["base"] if args.baseline else []), *(["socat"] if args.relay_floor else [])]
        for ps_mode in args.ps_mode:
            for threads in args.threads:
                if args.warmup:
                    for target in targets:
                        b.run(target, args.warmup, threads, ps_mode)
                runs: list[Run] = []
                for i in range(args.rounds):
                    order = targets[i % len(targets):] + targets[:i % len(targets)]  # each leads in turn
                    for target in order:
                        r = b.run(target, args.time, threads, ps_mode)
                        print(f"  {ps_mode:<7} {threads:>3} {target:<6} {r.qps:>8.0f} qps", flush=True)
                        runs.append(r)
                cells += report(runs, args, threads, ps_mode, targets)
        summary(cells)
        if args.profile:
            b.profile(args.profile)
    finally:
        b.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
