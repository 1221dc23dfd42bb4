"""Tests of the test harness itself: real servers start, stop, crash, pause and come back."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pymysql
import pytest

from harness import (
    HarnessError,
    MariaDBServer,
    ProxyProcess,
    Terminal,
    ZooKeeperServer,
    backend_rows,
    cluster_section,
    free_port,
    in_ci,
    missing,
    proxy_config,
    release_port,
    to_toml,
)
from harness import process as harness_process
from harness.ports import port_accepts, port_is_bindable

TESTS_DIR = Path(__file__).resolve().parent


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # still a process: only acceptable as an unreaped zombie
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


# -- ports and TOML -----------------------------------------------------------------------------

def test_free_ports_are_distinct_bindable_and_outside_ephemeral_range() -> None:
    ports = [free_port() for _ in range(20)]
    try:
        assert len(set(ports)) == 20
        assert all(port_is_bindable(p) for p in ports)
        assert all(20000 <= p < 32000 for p in ports)
    finally:
        for p in ports:
            release_port(p)


def test_to_toml_round_trips_the_design_config() -> None:
    fake = [SimpleNamespace(host="127.0.0.1", port=p) for p in (3306, 3307)]
    cfg = proxy_config(fake, 8066, 9066, instance="dble-1",
                       cluster=cluster_section("127.0.0.1:2181", root="/dble"))
    assert tomllib.loads(to_toml(cfg)) == cfg


def test_to_toml_handles_awkward_keys_values_and_nesting() -> None:
    data = {
        "title": 'quote " backslash \\ newline \n tab \t bell \x07 unicode é',
        "float": 1.5, "neg": -3, "yes": True, "no": False, "empty_list": [], "empty": {},
        "nested_lists": [[1, 2], ["a"]],
        "weird key.with dots": {"x y": 1},
        "ranges": [{"start": 0, "end": 10, "node": 0}, {"start": 10, "end": 20, "node": 1}],
        "mixed": [1, {"inline": "table"}],
        "skipped": None,
        "outer": {"inner": {"deep": {"v": "x"}}, "arr": [{"a": 1, "sub": {"b": 2}}]},
    }
    parsed = tomllib.loads(to_toml(data))
    expected = {k: v for k, v in data.items() if k != "skipped"}
    assert parsed == expected


def test_design_config_passes_the_real_config_validation() -> None:
    import meta.config as config_mod
    fake = [SimpleNamespace(host="127.0.0.1", port=p) for p in (3306, 3307)]
    raw = tomllib.loads(to_toml(proxy_config(fake, 8066, 9066, cluster="127.0.0.1:2181")))
    cfg = config_mod.parse_config(raw)
    assert cfg.db_groups["ha_group2"].port == 3307
    assert cfg.cluster is not None and cfg.cluster.zk == "127.0.0.1:2181"
    assert set(cfg.sharding_nodes) == {"dn1", "dn2", "dn3", "dn4", "dn5"}


# -- MariaDB ------------------------------------------------------------------------------------

def test_backends_are_separate_servers_with_their_own_data(backends: list[MariaDBServer]) -> None:
    b1, b2 = backends
    assert b1.port != b2.port and b1.pid != b2.pid and b1.datadir != b2.datadir
    assert b1.host == b2.host == "127.0.0.1"
    for b in backends:
        port, datadir, max_con, log_bin = b.query(
            "SELECT @@port, @@datadir, @@max_connections, @@log_bin")[0]
        assert port == b.port
        assert os.path.realpath(datadir) == os.path.realpath(b.datadir)
        assert max_con == 2000 and log_bin == 0
        dbs = {r[0] for r in b.query("SHOW DATABASES")}
        assert {"db1", "db2", "db3"} <= dbs
    b1.query("CREATE TABLE db1.harness_only_on_b1 (id INT PRIMARY KEY)")
    try:
        b1.query("INSERT INTO harness_only_on_b1 VALUES (1), (2)", "db1")
        rows = backend_rows(b1, "db1", "SELECT id FROM harness_only_on_b1 ORDER BY id")
        assert rows == [(1,), (2,)]
        assert b2.query("SELECT COUNT(*) FROM information_schema.tables "
                        "WHERE table_schema='db1' AND table_name='harness_only_on_b1'") == [(0,)]
    finally:
        b1.query("DROP TABLE IF EXISTS db1.harness_only_on_b1")


def test_connect_gives_autocommit_root_over_tcp(backends: list[MariaDBServer]) -> None:
    conn = backends[0].connect("db2")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@autocommit, DATABASE(), CURRENT_USER()")
            assert cur.fetchone() == (1, "db2", "root@127.0.0.1")
    finally:
        conn.close()


def test_killed_server_is_gone_and_a_restarted_one_serves_again(fresh_mariadb) -> None:
    s: MariaDBServer = fresh_mariadb("crashy", databases=["d"])
    s.query("CREATE TABLE d.t (id INT PRIMARY KEY) ENGINE=InnoDB")
    s.query("INSERT INTO d.t VALUES (1), (2), (3)")
    pid, port = s.pid, s.port
    assert pid is not None
    s.kill()
    assert not s.running and _gone(pid)
    assert not port_accepts(port)
    with pytest.raises(pymysql.err.OperationalError):
        s.connect(connect_timeout=1)
    t0 = time.monotonic()
    s.start()  # InnoDB crash recovery on the same datadir and port
    assert time.monotonic() - t0 < 30
    assert s.port == port and s.pid != pid
    assert s.query("SELECT COUNT(*) FROM d.t") == [(3,)]
    s.restart()  # clean stop + start
    assert s.query("SELECT SUM(id) FROM d.t") == [(6,)]


def test_stop_is_a_clean_shutdown(fresh_mariadb) -> None:
    s: MariaDBServer = fresh_mariadb("clean")
    pid = s.pid
    assert pid is not None
    s.stop()
    assert not s.running and _gone(pid)
    assert s.returncode == 0
    assert "Shutdown complete" in s.error_log_text()
    s.stop()  # idempotent


def test_paused_server_does_not_answer_until_resumed(fresh_mariadb) -> None:
    s: MariaDBServer = fresh_mariadb("sleepy")
    s.pause()
    assert s.paused and s.running
    with pytest.raises(pymysql.err.OperationalError):
        s.connect(connect_timeout=1, read_timeout=1)
    s.resume()
    assert not s.paused
    assert s.query("SELECT 1") == [(1,)]


def test_failed_start_raises_with_the_error_log(fresh_mariadb) -> None:
    s: MariaDBServer = fresh_mariadb("broken", start=False)
    s.extra_args = ("--no-such-option-at-all",)
    with pytest.raises(HarnessError) as e:
        s.start(timeout=15)
    assert "no-such-option-at-all" in str(e.value)
    assert not s.running


# -- session servers heal after a test breaks them ------------------------------------------------

def test_heal_1_a_test_may_kill_a_shared_backend(backends: list[MariaDBServer]) -> None:
    backends[1].kill()
    assert not backends[1].running


def test_heal_2_the_shared_backend_is_back(backends: list[MariaDBServer]) -> None:
    assert backends[1].running
    assert backends[1].query("SELECT 1") == [(1,)]
    assert {"db1", "db2", "db3"} <= {r[0] for r in backends[1].query("SHOW DATABASES")}


# -- ZooKeeper ----------------------------------------------------------------------------------

def test_zookeeper_accepts_a_kazoo_client(zookeeper: ZooKeeperServer) -> None:
    assert zookeeper.hosts == f"127.0.0.1:{zookeeper.port}"
    client = zookeeper.client()
    try:
        client.ensure_path("/harness/hello")
        client.set("/harness/hello", b"world")
        assert client.get("/harness/hello")[0] == b"world"
    finally:
        client.stop()
        client.close()


def test_zookeeper_survives_restart_and_crash_with_persistent_nodes(fresh_zookeeper) -> None:
    zk: ZooKeeperServer = fresh_zookeeper("zk-restart")
    client = zk.client()
    try:
        client.create("/keep", b"v1")
        client.create("/keep/child", b"c", sequence=True)
    finally:
        client.stop()
        client.close()
    port, pid = zk.port, zk.pid
    zk.restart()
    assert zk.port == port and zk.pid != pid
    client = zk.client()
    try:
        assert client.get("/keep")[0] == b"v1"
        assert len(client.get_children("/keep")) == 1
        client.set("/keep", b"v2")
    finally:
        client.stop()
        client.close()
    pid = zk.pid
    assert pid is not None
    zk.kill()
    assert not zk.running and _gone(pid)
    zk.start()
    client = zk.client()
    try:
        assert client.get("/keep")[0] == b"v2"
    finally:
        client.stop()
        client.close()


def test_paused_zookeeper_does_not_answer_until_resumed(fresh_zookeeper) -> None:
    zk: ZooKeeperServer = fresh_zookeeper("zk-pause")
    zk.pause()
    with pytest.raises(Exception):
        zk.client(timeout=1.5, session_timeout=2)
    zk.resume()
    client = zk.client()
    try:
        assert client.exists("/") is not None
    finally:
        client.stop()
        client.close()


# -- the proxy process wrapper, checked with a stand-in server ------------------------------------

FAKE_SERVER = textwrap.dedent("""
    import signal, socket, sys, tomllib
    cfg = tomllib.load(open(sys.argv[1], "rb"))
    if cfg.get("mode") == "die":
        print("fake: giving up on purpose", flush=True)
        sys.exit(3)
    if cfg.get("mode") == "silent":
        import time; time.sleep(60)
    signal.signal(signal.SIGTERM, lambda *a: (print("fake: SIGTERM", flush=True), sys.exit(0)))
    srv = socket.create_server(("127.0.0.1", cfg["server"]["port"]))
    print("fake: listening", cfg["server"]["port"], flush=True)
    while True:
        c, _ = srv.accept()
        c.sendall(bytes([10, 0, 0, 0]))
        c.close()
""")


def _fake_proxy(tmp_path, mode: str = "ok") -> ProxyProcess:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    cfg = {"mode": mode, "server": {"instance": f"fake-{mode}", "port": free_port(),
                                    "manager_port": free_port()}}
    return ProxyProcess(cfg, argv=[sys.executable, str(script), "{config}"], release_ports=True)


def test_proxy_process_lifecycle_with_a_stand_in(tmp_path) -> None:
    p = _fake_proxy(tmp_path)
    try:
        p.start(timeout=15)
        assert "fake: listening" in p.log_text()
        assert tomllib.loads(p.config_path.read_text())["server"]["port"] == p.proxy_port
        p.pause()
        assert p.paused
        p.resume()
        pid = p.pid
        p.stop()
        assert not p.running and p.returncode == 0 and "fake: SIGTERM" in p.log_text()
        p.restart()
        assert p.running and p.pid != pid
        pid = p.pid
        assert pid is not None
        p.kill()
        assert not p.running and _gone(pid)
    finally:
        p.cleanup()
    assert not p.workdir.exists()


def test_proxy_process_that_dies_reports_its_log(tmp_path) -> None:
    p = _fake_proxy(tmp_path, "die")
    try:
        with pytest.raises(HarnessError, match="giving up on purpose"):
            p.start(timeout=15)
    finally:
        p.cleanup()


def test_proxy_process_that_never_listens_times_out(tmp_path) -> None:
    p = _fake_proxy(tmp_path, "silent")
    try:
        t0 = time.monotonic()
        with pytest.raises(HarnessError, match="not sending a MySQL greeting within"):
            p.start(timeout=2)
        assert time.monotonic() - t0 < 10
        assert not p.running
    finally:
        p.cleanup()


def test_orphans_of_a_dead_session_are_swept(tmp_path) -> None:
    d = harness_process.make_workdir("orphan")
    dead = subprocess.Popen(["true"])
    dead.wait()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(d)],
                             start_new_session=True)
    (d / "child.pid").write_text(f"{child.pid}\n")
    deadline = time.monotonic() + 10
    while str(d) not in harness_process._cmdline(child.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    # Only now hand the directory to a dead owner, atomically: a concurrent test session's sweep
    # must never see a dead owner without the child recorded.
    (d / "owner.tmp").write_text(f"{dead.pid}\n")
    os.replace(d / "owner.tmp", d / "owner.pid")
    harness_process._swept = False
    harness_process.sweep_orphans()
    assert child.wait(timeout=10) == -9
    assert not d.exists()


# -- missing components and terminals ------------------------------------------------------------

def test_ci_is_set_unless_empty_or_false(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, ci in (("true", True), ("1", True), ("yes", True), ("", False), ("0", False), ("false", False)):
        monkeypatch.setenv("CI", value)
        assert in_ci() is ci, value
    monkeypatch.delenv("CI")
    assert not in_ci()


@pytest.mark.parametrize("ci, outcome", [(None, "skipped"), ("false", "skipped"), ("true", "failed")])
def test_a_missing_component_skips_here_and_fails_under_ci(tmp_path, ci: str | None, outcome: str) -> None:
    """The same test file, run by pytest as CI runs it: every way of needing a part goes through harness."""
    (tmp_path / "test_needs.py").write_text(textwrap.dedent("""
        from harness import missing, require_connector_j, require_module, require_tool

        def test_module():
            require_module("no_such_module_pydble", "no_such_module_pydble is not installed")

        def test_tool():
            require_tool("no-such-program-pydble", "no-such-program-pydble is not installed")

        def test_jar(monkeypatch):
            monkeypatch.setenv("PYDBLE_JDBC_JAR", "/nonexistent/connector.jar")
            require_connector_j("java")

        def test_other():
            missing("the manager port")
    """))
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), str(TESTS_DIR.parent)])
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfs",
                          str(tmp_path / "test_needs.py")], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    assert f"4 {outcome}" in res.stdout, res.stdout[-3000:]
    assert "no_such_module_pydble is not installed" in res.stdout and "the manager port" in res.stdout
    assert "/nonexistent/connector.jar" in res.stdout
    assert res.returncode == (1 if outcome == "failed" else 0), res.stdout[-3000:]


def test_terminal_waits_for_text_and_types() -> None:
    with Terminal(["sh", "-c", "echo ready; read x; echo got-$x; sleep 30"]) as term:
        term.expect("ready")
        term.send("hello\n")
        assert b"got-hello" in term.expect("got-hello")


def test_terminal_fails_at_eof_instead_of_returning() -> None:
    """A program that ends without printing the text: a failure naming EOF, at once, not after the timeout."""
    started = time.monotonic()
    with Terminal(["sh", "-c", "echo bye; exit 3"]) as term:
        with pytest.raises(AssertionError) as ei:
            term.expect("never printed", timeout=20)
    assert time.monotonic() - started < 10
    assert "EOF" in str(ei.value) and "exit code 3" in str(ei.value) and "bye" in str(ei.value)


def test_terminal_fails_at_its_timeout() -> None:
    with Terminal(["sh", "-c", "echo quiet; sleep 30"]) as term:
        with pytest.raises(AssertionError) as ei:
            term.expect("never printed", timeout=1)
    assert "after 1 s" in str(ei.value) and "quiet" in str(ei.value)


# -- the real proxy -----------------------------------------------------------------------------

def test_session_proxy_greets_and_serves(proxy: ProxyProcess) -> None:
    conn = proxy.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone()[0] == 1
    finally:
        conn.close()


def test_session_proxy_manager_port(proxy: ProxyProcess) -> None:
    if not port_accepts(proxy.manager_port):
        missing("the proxy does not listen on its manager port")
    mgr = proxy.manager()
    try:
        assert mgr.open
    finally:
        mgr.close()
