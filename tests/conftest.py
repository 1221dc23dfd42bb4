"""Shared fixtures: real MariaDB backends, ZooKeeper and pydble proxies, started once per session.

Session servers (``backends``, ``zookeeper``, ``proxy``) are shared by every test; after each test
anything a test paused, stopped or killed among them is resumed or restarted, so one fault test
cannot break the rest of the run. Tests that want to kill or reconfigure a server of their own use
the ``fresh_*`` factories, whose servers are cleaned up when the test ends.
"""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
if str(TESTS_DIR) not in sys.path:
    sys.path.append(str(TESTS_DIR))

from harness import (  # noqa: E402
    MariaDBServer,
    ProxyProcess,
    ZooKeeperServer,
    backend_rows as _backend_rows,
    cli_available,
    free_port,
    missing,
    proxy_config,
    start_all,
)
from harness.wirecheck import take_violations  # noqa: E402

log = logging.getLogger("harness")

SHARD_DATABASES = ("db1", "db2", "db3")
CLI_MISSING = "cli/__main__.py is missing: `python -m cli serve` does not exist yet"

# Session servers by fixture name, for the after-test health check.
_shared: dict[str, Any] = {}


@pytest.fixture(scope="session")
def backends() -> Iterator[list[MariaDBServer]]:
    """Two private MariaDB servers (ha_group1, ha_group2) with db1, db2, db3 on each."""
    servers = [MariaDBServer("backend1"), MariaDBServer("backend2")]
    try:
        start_all(servers)
        for s in servers:
            s.create_databases(*SHARD_DATABASES)
        _shared["backends"] = servers
        yield servers
    finally:
        _shared.pop("backends", None)
        for s in servers:
            s.cleanup()


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """A standalone ZooKeeper, started only when a test asks for it."""
    zk = ZooKeeperServer("zookeeper")
    try:
        zk.start()
        _shared["zookeeper"] = zk
        yield zk
    finally:
        _shared.pop("zookeeper", None)
        zk.cleanup()


@pytest.fixture(scope="session")
def proxy(backends: list[MariaDBServer]) -> Iterator[ProxyProcess]:
    """One pydble instance (single-instance mode) over the two backends, for the whole session."""
    if not cli_available():
        missing(CLI_MISSING)
    p = ProxyProcess(proxy_config(backends, free_port(), free_port(), instance="pydble-1"),
                     name="proxy", release_ports=True, wire_check=True)
    try:
        p.start()
        _shared["proxy"] = p
        yield p
    finally:
        _shared.pop("proxy", None)
        p.cleanup()


def _heal(server: Any) -> None:
    """Resume a paused server and restart a stopped or killed one."""
    if server.paused:
        server.resume()
    if not server.running:
        log.warning("restarting shared %s after a test stopped it", server.name)
        server.start()


@pytest.fixture(autouse=True)
def _shared_servers_stay_healthy() -> Iterator[None]:
    """After every test, bring back any session server the test paused, stopped or killed."""
    yield
    for name in ("backends", "zookeeper", "proxy"):
        value = _shared.get(name)
        for server in value if isinstance(value, list) else [value] if value else []:
            try:
                _heal(server)
            except Exception:
                _shared.pop(name, None)  # report once, not after every later test
                raise


@pytest.fixture(autouse=True)
def _wire_is_well_formed() -> Iterator[None]:
    """Fail the test if the wire checker in front of a proxy saw a malformed server packet meanwhile."""
    take_violations()
    yield
    found = take_violations()
    if found:
        pytest.fail(f"{len(found)} wire violation(s) by the proxy:\n" + "\n".join(found[:20]), pytrace=False)


@pytest.fixture
def fresh_proxy(backends: list[MariaDBServer]) -> Iterator[Callable[..., ProxyProcess]]:
    """Factory for private proxy instances (killed and cleaned up after the test).

    ``make(config=None, *, instance=None, cluster=None, env=None, start=True, backends=None,
    argv=None, timeout=30)``: without ``config`` it builds proxy_config() on free ports over the
    session backends (or the given ones); ``cluster`` is a [cluster] dict or a ZooKeeperServer.
    """
    made: list[ProxyProcess] = []
    session_backends = backends

    def make(config: Mapping[str, Any] | None = None, *, instance: str | None = None,
             cluster: Any = None, env: Mapping[str, str] | None = None, start: bool = True,
             backends: Sequence[MariaDBServer] | None = None, argv: Sequence[str] | None = None,
             name: str | None = None, timeout: float = 30.0) -> ProxyProcess:
        if argv is None and not cli_available():
            missing(CLI_MISSING)
        own_ports = config is None
        if config is None:
            config = proxy_config(list(backends or session_backends), free_port(), free_port(),
                                  instance=instance or f"pydble-{len(made) + 2}", cluster=cluster)
        p = ProxyProcess(config, name=name, env=env, argv=argv, release_ports=own_ports, wire_check=True)
        made.append(p)
        if start:
            p.start(timeout)
        return p

    try:
        yield make
    finally:
        for p in reversed(made):
            p.cleanup()


@pytest.fixture
def fresh_mariadb() -> Iterator[Callable[..., MariaDBServer]]:
    """Factory for private MariaDB servers (``make(name='mariadb', start=True, databases=())``)."""
    made: list[MariaDBServer] = []

    def make(name: str = "mariadb", *, start: bool = True,
             databases: Sequence[str] = ()) -> MariaDBServer:
        s = MariaDBServer(name)
        made.append(s)
        if start:
            s.start()
            if databases:
                s.create_databases(*databases)
        return s

    try:
        yield make
    finally:
        for s in reversed(made):
            s.cleanup()


@pytest.fixture
def fresh_backends(fresh_mariadb: Callable[..., MariaDBServer]) -> list[MariaDBServer]:
    """Two private MariaDB servers for this test only, started together, with db1..db3."""
    servers = [fresh_mariadb("fbackend1", start=False), fresh_mariadb("fbackend2", start=False)]
    start_all(servers)
    for s in servers:
        s.create_databases(*SHARD_DATABASES)
    return servers


@pytest.fixture
def fresh_zookeeper() -> Iterator[Callable[..., ZooKeeperServer]]:
    """Factory for private ZooKeeper servers (``make(start=True)``), e.g. to kill one."""
    made: list[ZooKeeperServer] = []

    def make(name: str = "zookeeper", *, start: bool = True) -> ZooKeeperServer:
        zk = ZooKeeperServer(name)
        made.append(zk)
        if start:
            zk.start()
        return zk

    try:
        yield make
    finally:
        for zk in reversed(made):
            zk.cleanup()


@pytest.fixture
def zk_root() -> str:
    """A cluster root path unique to this test, so tests sharing a ZooKeeper do not collide."""
    return f"/pydble-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def backend_rows() -> Callable[..., list[tuple[Any, ...]]]:
    """``backend_rows(server, database, sql, args=None)``: rows read directly from a backend."""
    return _backend_rows
