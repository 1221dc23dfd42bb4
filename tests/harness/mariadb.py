"""Private MariaDB servers for integration tests, each in a temp datadir on a free port.

``mariadb-install-db`` runs once per machine and server version: the resulting datadir is cached
under the temp dir (keyed on the ``mariadbd --version`` output and the install options) and copied
for every server, so a server is ready in well under a second.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Sequence

from .ports import HOST, free_port, release_port, wait_port_free
from .process import HarnessError, ManagedProcess, tail, tmp_base

log = logging.getLogger("harness")

START_TIMEOUT = 30.0

# Options shared by the template install and every server start (InnoDB sizes must agree).
COMMON_OPTIONS = (
    "--innodb-buffer-pool-size=32M",
    "--innodb-log-file-size=16M",
    "--character-set-server=utf8mb4",
    "--collation-server=utf8mb4_general_ci",
)

SERVER_OPTIONS = (
    "--skip-log-bin",
    "--skip-name-resolve",
    "--max-connections=2000",
    "--max-allowed-packet=64M",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
    "--performance-schema=OFF",
    "--skip-external-locking",
    "--table-open-cache=1000",
)


def mariadbd_path() -> str:
    """The server binary: $PYDBLE_MARIADBD, mariadbd on PATH, or /usr/sbin/mariadbd."""
    env = os.environ.get("PYDBLE_MARIADBD")
    if env:
        return env
    for cand in ("mariadbd", "mysqld"):
        p = shutil.which(cand)
        if p:
            return p
    for p in ("/usr/sbin/mariadbd", "/usr/sbin/mysqld"):
        if os.path.exists(p):
            return p
    raise HarnessError("mariadbd not found (install mariadb-server or set PYDBLE_MARIADBD)")


def install_db_path() -> str:
    """The datadir initialiser: mariadb-install-db or mysql_install_db."""
    for cand in ("mariadb-install-db", "mysql_install_db"):
        p = shutil.which(cand)
        if p:
            return p
        if os.path.exists(f"/usr/bin/{cand}"):
            return f"/usr/bin/{cand}"
    raise HarnessError("mariadb-install-db not found (install mariadb-server)")


_template_lock = threading.Lock()
_template: Path | None = None


def template_datadir() -> Path:
    """A ready, initialised datadir to copy; built once and cached per server version."""
    global _template
    with _template_lock:
        if _template is not None and (_template / "data" / "mysql").is_dir():
            return _template / "data"
        binary = mariadbd_path()
        version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.strip()
        key = hashlib.sha1("\n".join([binary, version, *COMMON_OPTIONS]).encode()).hexdigest()[:12]
        cache = tmp_base() / f"pydble-mariadb-template-{key}"
        if not (cache / "ok").exists():
            _build_template(cache)
        _template = cache
        return cache / "data"


def _build_template(cache: Path) -> None:
    """Run mariadb-install-db into a scratch dir and move it into place, under a file lock."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(str(cache) + ".lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # another session may be building the same template
        if (cache / "ok").exists():
            return
        scratch = Path(tempfile.mkdtemp(prefix=cache.name + ".build-", dir=cache.parent))
        try:
            datadir = scratch / "data"
            argv = [install_db_path(), "--no-defaults", "--user=root", f"--datadir={datadir}",
                    "--auth-root-authentication-method=normal", "--skip-test-db",
                    "--skip-name-resolve", *COMMON_OPTIONS]
            started = time.monotonic()
            res = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                 timeout=180, cwd=scratch)
            if res.returncode != 0 or not (datadir / "mysql").is_dir():
                raise HarnessError(f"mariadb-install-db failed ({res.returncode}):\n"
                                   + (res.stdout + res.stderr)[-4000:])
            log.info("built MariaDB template datadir in %.1fs", time.monotonic() - started)
            (scratch / "ok").write_text(f"{time.time()}\n")
            shutil.rmtree(cache, ignore_errors=True)
            os.rename(scratch, cache)
        finally:
            if scratch.exists():
                shutil.rmtree(scratch, ignore_errors=True)


class MariaDBServer(ManagedProcess):
    """A private mariadbd: temp datadir, free 127.0.0.1 port, root with an empty password."""

    stop_signal = signal.SIGTERM
    stop_timeout = 30.0

    def __init__(self, name: str = "mariadb", port: int | None = None,
                 extra_args: Sequence[str] = ()) -> None:
        super().__init__(name)
        self._own_port = port is None
        self._port = port if port is not None else free_port()
        self.extra_args = tuple(extra_args)
        self._datadir = self.workdir / "data"
        self.socket_path = self.workdir / "mysqld.sock"
        self.pid_path = self.workdir / "mysqld.pid"
        self.error_log = self.workdir / "error.log"
        self.tmpdir = self.workdir / "tmp"

    @property
    def host(self) -> str:
        """Always 127.0.0.1: tests talk only to the loopback address."""
        return HOST

    @property
    def port(self) -> int:
        """The TCP port the server listens on."""
        return self._port

    @property
    def datadir(self) -> Path:
        """The server's private data directory."""
        return self._datadir

    @property
    def user(self) -> str:
        """The administrative user (root, empty password)."""
        return "root"

    @property
    def password(self) -> str:
        """The root password (empty)."""
        return ""

    def _argv(self) -> list[str]:
        return [mariadbd_path(), "--no-defaults", "--user=root",
                f"--datadir={self._datadir}", f"--port={self._port}", f"--bind-address={HOST}",
                f"--socket={self.socket_path}", f"--pid-file={self.pid_path}",
                f"--log-error={self.error_log}", f"--tmpdir={self.tmpdir}",
                *COMMON_OPTIONS, *SERVER_OPTIONS, *self.extra_args]

    def spawn(self) -> None:
        """Launch mariadbd without waiting for it (see wait_ready); copies the template first."""
        if not self._datadir.exists():
            shutil.copytree(template_datadir(), self._datadir, symlinks=True)
        self.tmpdir.mkdir(exist_ok=True)
        for stale in (self.socket_path, self.pid_path, Path(str(self.socket_path) + ".lock")):
            try:
                stale.unlink()
            except OSError:
                pass
        self._spawn(self._argv(), cwd=self.workdir)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait (bounded) until root can log in over TCP; raise with the error log tail if not."""
        self._wait_ready(self._ping, timeout, "accepting connections",
                         logs=(self.error_log, self.log_path))

    def _ping(self) -> bool:
        # read_timeout matters: a stopped server completes the TCP handshake but never greets.
        conn = self.connect(connect_timeout=1, read_timeout=2, write_timeout=2)
        conn.close()
        return True

    def start(self, timeout: float = START_TIMEOUT) -> "MariaDBServer":
        """Start the server and wait until it serves; retries on a port taken meanwhile."""
        for attempt in range(3):
            self.spawn()
            try:
                self.wait_ready(timeout)
                return self
            except HarnessError:
                if attempt < 2 and self._own_port and self._port_clash():
                    log.warning("%s: port %s taken, retrying on another", self.name, self._port)
                    release_port(self._port)
                    self._port = free_port()
                    continue
                raise
        raise AssertionError("unreachable")

    def _port_clash(self) -> bool:
        t = tail(self.error_log, 20)
        return "Address already in use" in t or "already have another server running" in t

    def restart(self, timeout: float = START_TIMEOUT) -> "MariaDBServer":
        """Clean stop, then start again on the same port with the same datadir."""
        self.stop()
        wait_port_free(self._port, timeout=10)
        return self.start(timeout)

    def error_log_text(self) -> str:
        """The whole server error log."""
        try:
            return self.error_log.read_text(errors="replace")
        except OSError:
            return ""

    def _on_cleanup(self) -> None:
        if self._own_port:
            release_port(self._port)

    # -- client side ----------------------------------------------------------------------

    def connect(self, database: str | None = None, **kw: Any) -> Any:
        """A PyMySQL connection as root over TCP with autocommit on."""
        import pymysql

        params: dict[str, Any] = dict(host=HOST, port=self._port, user="root", password="",
                                      database=database, autocommit=True, charset="utf8mb4",
                                      connect_timeout=5, read_timeout=120, write_timeout=120)
        params.update(kw)
        return pymysql.connect(**params)

    def query(self, sql: str, database: str | None = None,
              args: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement on a short-lived connection and return all rows as tuples."""
        return rows_then_close(self.connect(database), sql, args)

    def execute_many(self, statements: Iterable[str], database: str | None = None) -> None:
        """Run several statements in order on one connection."""
        conn = self.connect(database)
        try:
            with conn.cursor() as cur:
                for sql in statements:
                    cur.execute(sql)
        finally:
            conn.close()

    def create_databases(self, *names: str) -> None:
        """CREATE DATABASE IF NOT EXISTS for each name."""
        self.execute_many(f"CREATE DATABASE IF NOT EXISTS `{n}`" for n in names)


def start_all(servers: Sequence[MariaDBServer], timeout: float = START_TIMEOUT) -> None:
    """Start several servers in parallel (spawn all, then wait for each); all or nothing."""
    try:
        for s in servers:
            s.spawn()
        for s in servers:
            try:
                s.wait_ready(timeout)
            except HarnessError:
                if s._own_port and s._port_clash():
                    release_port(s._port)
                    s._port = free_port()
                    s.start(timeout)
                else:
                    raise
    except BaseException:
        for s in servers:
            s.kill()
        raise


def global_status(servers: Sequence[MariaDBServer], name: str) -> int:
    """A global status counter (Com_stmt_execute, Prepared_stmt_count...) summed over servers."""
    return sum(int(s.query(f"SHOW GLOBAL STATUS LIKE '{name}'")[0][1]) for s in servers)


def backend_rows(server: MariaDBServer, database: str | None, sql: str,
                 args: Any = None) -> list[tuple[Any, ...]]:
    """Rows of a query run directly on a backend, bypassing the proxy."""
    return server.query(sql, database, args)


def rows_then_close(conn: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    """The rows of one statement on `conn` (a PyMySQL connection), which is closed after."""
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())
    finally:
        conn.close()
