"""A real ZooKeeper for cluster tests, from the Debian ``zookeeper`` package jars: one standalone server,
or an ensemble of three (``ZooKeeperEnsemble``) whose members can be killed one at a time."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
from pathlib import Path
from typing import Any

from .ports import HOST, free_port, release_port, tcp_connections, wait_port_free
from .process import HarnessError, ManagedProcess, tail

log = logging.getLogger("harness")

START_TIMEOUT = 30.0
JAVA_DIRS = ("/usr/share/java", "/usr/share/zookeeper/lib", "/usr/share/zookeeper")

# zookeeper.jar's manifest Class-Path names its own dependencies (jute, netty, jline, metrics,
# snappy, commons, jackson, jetty, slf4j-api); these are listed too in case a manifest lacks them.
_CORE_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "netty-common.jar",
              "netty-buffer.jar", "netty-transport.jar", "netty-handler.jar",
              "netty-transport-native-epoll.jar", "netty-codec.jar", "netty-resolver.jar",
              "metrics-core.jar", "snappy-java.jar", "commons-cli.jar", "commons-io.jar",
              "jline.jar")
# A logging binding: log4j 1.2 through slf4j (quiet, to a file), else the no-op binding.
_LOG4J_JARS = ("slf4j-log4j12.jar", "log4j-1.2.jar")
_NOP_JARS = ("slf4j-nop.jar",)


def _find_jar(name: str) -> str | None:
    for d in JAVA_DIRS:
        p = Path(d) / name
        if p.exists():
            return str(p)
    return None


def zookeeper_classpath() -> tuple[str, bool]:
    """Classpath for ZooKeeperServerMain and whether log4j is on it; $PYDBLE_ZK_CLASSPATH wins."""
    env = os.environ.get("PYDBLE_ZK_CLASSPATH")
    if env:
        return env, "log4j" in env
    main = _find_jar("zookeeper.jar")
    if main is None:
        raise HarnessError("zookeeper.jar not found in /usr/share/java (apt-get install zookeeper)")
    jars = [j for j in (_find_jar(n) for n in _CORE_JARS) if j]
    log_jars = [_find_jar(n) for n in _LOG4J_JARS]
    has_log4j = all(log_jars)
    if has_log4j:
        jars += [j for j in log_jars if j]
    else:
        jars += [j for j in (_find_jar(n) for n in _NOP_JARS) if j]
    return ":".join(dict.fromkeys(jars)), has_log4j


def kazoo_client(hosts: str, timeout: float = 10.0, **kw: Any) -> Any:
    """A started KazooClient on `hosts` (retrying its connection for ever); the caller stops and closes it."""
    from kazoo.client import KazooClient

    kw.setdefault("connection_retry", {"max_tries": -1, "delay": 0.1, "max_delay": 1})
    c = KazooClient(hosts=hosts, timeout=kw.pop("session_timeout", 10.0), **kw)
    try:
        c.start(timeout=timeout)
    except Exception:
        c.stop()
        c.close()
        raise
    return c


def java_path() -> str:
    """The java binary: $JAVA_HOME/bin/java, java on PATH, or /usr/bin/java."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return os.path.join(home, "bin", "java")
    p = shutil.which("java") or ("/usr/bin/java" if os.path.exists("/usr/bin/java") else None)
    if not p:
        raise HarnessError("java not found (apt-get install default-jre-headless)")
    return p


class ZooKeeperServer(ManagedProcess):
    """A ZooKeeper on a free 127.0.0.1 port with a private, persistent data dir: standalone, or
    member `myid` of an ensemble when `peers` (myid -> (peer port, election port)) is given."""

    stop_signal = signal.SIGTERM
    stop_timeout = 15.0

    def __init__(self, name: str = "zookeeper", port: int | None = None, tick_ms: int = 500,
                 min_session_timeout_ms: int = 1000, max_session_timeout_ms: int = 60000,
                 myid: int = 0, peers: dict[int, tuple[int, int]] | None = None) -> None:
        super().__init__(name)
        self.myid = myid
        self.peers = peers or {}
        self._own_port = port is None
        self._port = port if port is not None else free_port()
        self.tick_ms = tick_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.datadir = self.workdir / "data"
        self.config_path = self.workdir / "zoo.cfg"
        self.log4j_path = self.workdir / "log4j.properties"
        self.server_log = self.workdir / "zookeeper-server.log"

    @property
    def host(self) -> str:
        """Always 127.0.0.1."""
        return HOST

    @property
    def port(self) -> int:
        """The client port."""
        return self._port

    @property
    def hosts(self) -> str:
        """Connection string for kazoo / the proxy's [cluster] zk key."""
        return f"{HOST}:{self._port}"

    def _write_config(self) -> None:
        self.datadir.mkdir(exist_ok=True)
        self.config_path.write_text("\n".join([
            f"tickTime={self.tick_ms}",
            f"dataDir={self.datadir}",
            f"clientPort={self._port}",
            f"clientPortAddress={HOST}",
            f"minSessionTimeout={self.min_session_timeout_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            "forceSync=no",
            "autopurge.purgeInterval=0",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons",
            *self._quorum_lines(),
            "",
        ]))
        if self.peers:
            (self.datadir / "myid").write_text(f"{self.myid}\n")
        self.log4j_path.write_text("\n".join([
            "log4j.rootLogger=WARN, F",
            "log4j.appender.F=org.apache.log4j.FileAppender",
            f"log4j.appender.F.File={self.server_log}",
            "log4j.appender.F.Append=true",
            "log4j.appender.F.layout=org.apache.log4j.PatternLayout",
            "log4j.appender.F.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n",
            "",
        ]))

    def _quorum_lines(self) -> list[str]:
        """An ensemble member's share of zoo.cfg: the peer list (none when standalone)."""
        if not self.peers:
            return []
        return ["initLimit=10", "syncLimit=4", "cnxTimeout=1000", "standaloneEnabled=false",
                "reconfigEnabled=false",
                *(f"server.{n}={HOST}:{peer}:{election}" for n, (peer, election) in sorted(self.peers.items()))]

    @property
    def mode(self) -> str:
        """"leader", "follower" or "standalone" (its `srvr` answer); "" when it does not answer."""
        try:
            out = self._four_letter(b"srvr").decode(errors="replace")
        except OSError:
            return ""
        for line in out.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return ""

    def _argv(self) -> list[str]:
        cp, _ = zookeeper_classpath()
        return [java_path(), "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Xss512k", "-Djava.net.preferIPv4Stack=true",
                "-Dzookeeper.admin.enableServer=false", "-Dzookeeper.jmx.log4j.disable=true",
                f"-Dlog4j.configuration=file:{self.log4j_path}",
                f"-Dzookeeper.log.dir={self.workdir}",
                "-cp", cp, self._main_class(), str(self.config_path)]

    def _main_class(self) -> str:
        if self.peers:
            return "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        return "org.apache.zookeeper.server.ZooKeeperServerMain"

    def spawn(self) -> None:
        """Launch the JVM without waiting for it."""
        self._write_config()
        self._spawn(self._argv(), cwd=self.workdir)

    def _four_letter(self, cmd: bytes = b"ruok", timeout: float = 1.0) -> bytes:
        with socket.create_connection((HOST, self._port), timeout=timeout) as s:
            s.sendall(cmd)
            chunks = []
            while True:
                b = s.recv(4096)
                if not b:
                    break
                chunks.append(b)
        return b"".join(chunks)

    def mntr(self) -> dict[str, float]:
        """ZooKeeper's own numeric counters (its `mntr` four-letter word)."""
        out: dict[str, float] = {}
        for line in self._four_letter(b"mntr", timeout=5).decode().splitlines():
            key, _, value = line.partition("\t")
            try:
                out[key] = float(value)
            except ValueError:
                pass
        return out

    def _ping(self) -> bool:
        if self._four_letter(b"ruok") != b"imok":
            return False
        # "ruok" only says the process is up; a real session proves it serves requests.
        client = self.client(timeout=5, session_timeout=5)
        try:
            client.get("/")
        finally:
            client.stop()
            client.close()
        return True

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait (bounded) until a kazoo client can open a session."""
        self._wait_ready(self._ping, timeout, "accepting ZooKeeper sessions",
                         logs=(self.server_log, self.log_path))

    def start(self, timeout: float = START_TIMEOUT) -> "ZooKeeperServer":
        """Start the server (data dir kept from earlier runs) and wait until it serves."""
        for attempt in range(3):
            self.spawn()
            try:
                self.wait_ready(timeout)
                return self
            except HarnessError:
                if attempt < 2 and self._own_port and "Address already in use" in (
                        self.log_tail(60) + tail(self.server_log, 60)):
                    release_port(self._port)
                    self._port = free_port()
                    continue
                raise
        raise AssertionError("unreachable")

    def restart(self, timeout: float = START_TIMEOUT) -> "ZooKeeperServer":
        """Stop, then start again on the same port with the same data dir."""
        self.stop()
        wait_port_free(self._port, timeout=10)
        return self.start(timeout)

    def client(self, timeout: float = 10.0, **kw: Any) -> Any:
        """A started KazooClient connected to this server; the caller stops and closes it.

        kazoo's start() may take up to the session timeout (``session_timeout``, default 10 s)
        to give up on an unresponsive server, whatever ``timeout`` says.
        """
        return kazoo_client(self.hosts, timeout, **kw)

    def read(self, path: str) -> bytes:
        """A node's data as an anonymous client reads it (what anyone who can reach ZooKeeper sees)."""
        c = self.client()
        try:
            return c.get(path)[0]
        finally:
            c.stop()
            c.close()

    def server_log_text(self) -> str:
        """ZooKeeper's own (WARN and above) log."""
        try:
            return self.server_log.read_text(errors="replace")
        except OSError:
            return ""

    def _on_cleanup(self) -> None:
        if self._own_port:
            release_port(self._port)


class ZooKeeperEnsemble:
    """Three ZooKeeper servers forming one ensemble on loopback ports; `hosts` names all of them."""

    def __init__(self, name: str = "zk-ensemble", size: int = 3, **kw: Any) -> None:
        self._ports = [free_port() for _ in range(size * 2)]
        peers = {n + 1: (self._ports[2 * n], self._ports[2 * n + 1]) for n in range(size)}
        self.servers = [ZooKeeperServer(f"{name}-{n}", myid=n, peers=peers, **kw) for n in peers]

    @property
    def hosts(self) -> str:
        """Connection string naming every member."""
        return ",".join(s.hosts for s in self.servers)

    def start(self, timeout: float = START_TIMEOUT) -> "ZooKeeperEnsemble":
        """Start every member at once (a quorum needs two of them), then wait until each serves."""
        for s in self.servers:
            s.spawn()
        for s in self.servers:
            s.wait_ready(timeout)
        return self

    def serving(self, port: int) -> ZooKeeperServer:
        """The member whose client port is `port`."""
        for s in self.servers:
            if s.port == port:
                return s
        raise HarnessError(f"no member of the ensemble listens on {port}")

    def connected_to(self, pid: int) -> ZooKeeperServer:
        """The member process `pid` holds an established client connection to (read from /proc)."""
        ports = {s.port for s in self.servers}
        for _, remote, established in tcp_connections(pid):
            if established and remote in ports:
                return self.serving(remote)
        raise HarnessError(f"process {pid} has no connection to a member of the ensemble")

    def client(self, timeout: float = 10.0, **kw: Any) -> Any:
        """A started KazooClient on the whole ensemble; the caller stops and closes it."""
        return kazoo_client(self.hosts, timeout, **kw)

    def cleanup(self) -> None:
        """Stop every member and remove their directories."""
        try:
            for s in self.servers:
                s.cleanup()
        finally:
            for p in self._ports:
                release_port(p)
