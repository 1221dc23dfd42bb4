"""A pydble proxy run as a separate process (``python -m cli serve``) from a config dict."""

from __future__ import annotations

import datetime as _dt
import math
import os
import re
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from .mariadb import rows_then_close
from .ports import HOST, release_port, wait_port_free
from .process import HarnessError, ManagedProcess
from .wirecheck import WireRelay

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0

# -- a tiny TOML writer ---------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"',
            "\\": "\\\\"}


def _toml_key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"TOML keys must be strings, not {type(key).__name__}: {key!r}")
    return key if _BARE_KEY.match(key) else _toml_str(key)


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        items = [f"{_toml_key(k)} = {_toml_value(x)}" for k, x in v.items() if x is not None]
        return "{ " + ", ".join(items) + " }" if items else "{}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML: {v!r}")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(isinstance(x, Mapping) for x in v)


def _emit_table(d: Mapping[str, Any], path: list[str], out: list[str]) -> None:
    """Scalars of this table first, then its sub-tables, then its arrays of tables."""
    for k, v in d.items():
        if v is None or isinstance(v, Mapping) or _is_table_array(v):
            continue
        out.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, v in d.items():
        if isinstance(v, Mapping):
            sub = path + [_toml_key(k)]
            has_values = any(not (x is None or isinstance(x, Mapping) or _is_table_array(x))
                             for x in v.values())
            if has_values or not any(x is not None for x in v.values()):
                out.append("")  # a header only where needed: [a.b.c] implies [a] and [a.b]
                out.append(f"[{'.'.join(sub)}]")
            _emit_table(v, sub, out)
    for k, v in d.items():
        if _is_table_array(v):
            sub = path + [_toml_key(k)]
            for item in v:
                out.append("")
                out.append(f"[[{'.'.join(sub)}]]")
                _emit_table(item, sub, out)


def to_toml(data: Mapping[str, Any]) -> str:
    """Serialise a dict as TOML: scalars, lists, tables, arrays of tables; None is left out."""
    out: list[str] = []
    _emit_table(data, [], out)
    return "\n".join(out).lstrip("\n") + "\n"


# -- the DESIGN.md section 2 configuration ------------------------------------------------------

PEER_SECRET = "pydble-test-peer-secret"


def cluster_section(zk: Any, root: str = "/dble", cluster_id: str = "cluster-1",
                    session_timeout_s: float = 10, ack_timeout_s: float = 30) -> dict[str, Any]:
    """A [cluster] table for a ZooKeeperServer (or a "host:port" string), with a peer_secret so the
    instances use the peer channel (drop the key to test the ZooKeeper-only path)."""
    hosts = zk if isinstance(zk, str) else zk.hosts
    return {"zk": hosts, "root": root, "cluster_id": cluster_id,
            "session_timeout_s": session_timeout_s, "ack_timeout_s": ack_timeout_s, "peer_secret": PEER_SECRET}


def proxy_config(backends: Sequence[Any], port: int, manager_port: int,
                 instance: str = "pydble-1", cluster: Any = None) -> dict[str, Any]:
    """The DESIGN.md section 2 example with ha_group1/ha_group2 on backends[0]/backends[1].

    ``cluster`` is None (single-instance mode), a ready [cluster] dict, or a ZooKeeperServer /
    "host:port" string turned into one with cluster_section().
    """
    if len(backends) < 2:
        raise ValueError("proxy_config needs two backends (ha_group1, ha_group2)")
    b1, b2 = backends[0], backends[1]
    cfg: dict[str, Any] = {
        # 64 MB packets (the default is 16 MiB): the big-packet tests send rows and statements over 16 MB
        "server": {"instance": instance, "bind": HOST, "port": port, "manager_port": manager_port,
                   "max_allowed_packet": 64 << 20},
    }
    if cluster is not None:
        cfg["cluster"] = dict(cluster) if isinstance(cluster, Mapping) else cluster_section(cluster)
    cfg.update({
        "users": [{"name": "test", "password": "111111", "schemas": ["schema1", "schema2"]}],
        "manager_users": [{"name": "root", "password": "111111"}],
        "db_groups": {
            "ha_group1": {"host": b1.host, "port": b1.port, "user": "root", "password": "",
                          "max_con": 64},
            "ha_group2": {"host": b2.host, "port": b2.port, "user": "root", "password": ""},
        },
        "sharding_nodes": {
            "dn1": {"db_group": "ha_group1", "database": "db1"},
            "dn2": {"db_group": "ha_group2", "database": "db1"},
            "dn3": {"db_group": "ha_group1", "database": "db2"},
            "dn4": {"db_group": "ha_group2", "database": "db2"},
            "dn5": {"db_group": "ha_group1", "database": "db3"},
        },
        "functions": {
            "hash-two": {"type": "hash", "partition_count": [2], "partition_length": [1]},
            "hash-four": {"type": "hash", "partition_count": [4], "partition_length": [1]},
        },
        "schemas": {
            "schema1": {
                "default_node": "dn5",
                "tables": {
                    "test": {"type": "global", "nodes": ["dn1", "dn2", "dn3", "dn4"]},
                    "sharding_2_t1": {"type": "sharding", "nodes": ["dn1", "dn2"],
                                      "function": "hash-two", "column": "id"},
                    "sharding_4_t1": {"type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"],
                                      "function": "hash-four", "column": "id"},
                },
            },
            "schema2": {"tables": {"sing": {"type": "single", "nodes": ["dn1"]}}},
        },
    })
    return cfg


# -- the proxy process ----------------------------------------------------------------------

def cli_available() -> bool:
    """True once the ``cli`` package can be run with ``python -m cli``."""
    return (REPO_ROOT / "cli" / "__main__.py").exists()


class ProxyProcess(ManagedProcess):
    """``python -m cli serve --config FILE`` in its own process group, logging to a file."""

    stop_signal = signal.SIGTERM
    stop_timeout = 15.0

    def __init__(self, config: Mapping[str, Any], name: str | None = None,
                 env: Mapping[str, str] | None = None, argv: Sequence[str] | None = None,
                 release_ports: bool = False, wire_check: bool = False) -> None:
        server = config.get("server", {})
        super().__init__(name or str(server.get("instance", "proxy")))
        self.config: dict[str, Any] = dict(config)
        self._port = int(server.get("port", 8066))
        self._manager_port = int(server.get("manager_port", 9066))
        self.extra_env = dict(env or {})
        self.config_path = self.workdir / "pydble.toml"
        self._argv_override = list(argv) if argv is not None else None
        self._release_ports = release_ports
        # wire_check: clients reach the proxy through a checking relay (harness.wirecheck)
        self._wire_check = wire_check
        self._relay: WireRelay | None = None

    @property
    def host(self) -> str:
        """Always 127.0.0.1."""
        return HOST

    @property
    def port(self) -> int:
        """The client (MySQL) port clients use: the wire checker's relay in front of it when checking."""
        return self._relay.port if self._relay is not None else self._port

    @property
    def proxy_port(self) -> int:
        """The proxy's own client port (the [server] port of its config)."""
        return self._port

    @property
    def manager_port(self) -> int:
        """The manager (admin) port."""
        return self._manager_port

    @property
    def instance(self) -> str:
        """The [server] instance name."""
        return str(self.config.get("server", {}).get("instance", self.name))

    def argv(self) -> list[str]:
        """The command line: ``python -m cli serve --config FILE`` unless overridden."""
        if self._argv_override is not None:
            return [a.replace("{config}", str(self.config_path)) for a in self._argv_override]
        return [sys.executable, "-m", "cli", "serve", "--config", str(self.config_path)]

    def env(self) -> dict[str, str]:
        """The child's environment: ours, PYTHONPATH = repo root, unbuffered, plus extras."""
        e = dict(os.environ)
        e["PYTHONPATH"] = str(REPO_ROOT)
        e["PYTHONUNBUFFERED"] = "1"
        e.update(self.extra_env)
        return e

    def write_config(self) -> Path:
        """Write the config dict as TOML to the work directory."""
        self.config_path.write_text(to_toml(self.config))
        return self.config_path

    def spawn(self) -> None:
        """Write the config and launch the process without waiting for it."""
        self.write_config()
        self._spawn(self.argv(), env=self.env(), cwd=REPO_ROOT)

    def _greeting(self) -> bool:
        with socket.create_connection((HOST, self._port), timeout=1) as s:
            s.settimeout(2)
            return len(s.recv(1)) == 1

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait (bounded) until the client port accepts and sends a greeting's first byte."""
        self._wait_ready(self._greeting, timeout, "sending a MySQL greeting")

    def start(self, timeout: float = START_TIMEOUT) -> "ProxyProcess":
        """Start the proxy and wait until its client port greets."""
        self.spawn()
        self.wait_ready(timeout)
        if self._wire_check and self._relay is None:
            self._relay = WireRelay(self._port, self.name)
        return self

    def restart(self, timeout: float = START_TIMEOUT) -> "ProxyProcess":
        """Stop (SIGTERM, bounded, then SIGKILL) and start again with the same config."""
        self.stop()
        wait_port_free(self._port, timeout=10)
        wait_port_free(self._manager_port, timeout=10)
        return self.start(timeout)

    def log_text(self) -> str:
        """Everything the proxy wrote to stdout/stderr so far (all runs)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def connect(self, user: str = "test", password: str = "111111",
                database: str | None = "schema1", **kw: Any) -> Any:
        """A PyMySQL connection to the client port (autocommit on unless overridden)."""
        import pymysql

        params: dict[str, Any] = dict(host=HOST, port=self._port, user=user, password=password,
                                      database=database, autocommit=True, charset="utf8mb4",
                                      connect_timeout=10, read_timeout=120, write_timeout=120)
        params.update(kw)
        return pymysql.connect(**params)

    def manager(self, user: str = "root", password: str = "111111", **kw: Any) -> Any:
        """A PyMySQL connection to the manager port."""
        import pymysql

        params: dict[str, Any] = dict(host=HOST, port=self._manager_port, user=user,
                                      password=password, autocommit=True, charset="utf8mb4",
                                      connect_timeout=10, read_timeout=120, write_timeout=120)
        params.update(kw)
        return pymysql.connect(**params)

    def query(self, sql: str, database: str | None = "schema1",
              args: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement through the proxy on a short-lived connection; return the rows."""
        return rows_then_close(self.connect(database=database), sql, args)

    def manager_query(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one manager command on a short-lived manager connection; return the rows."""
        return rows_then_close(self.manager(), sql)

    def _on_cleanup(self) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if self._release_ports:
            release_port(self._port)
            release_port(self._manager_port)


__all__ = ["PEER_SECRET", "ProxyProcess", "proxy_config", "cluster_section", "to_toml", "cli_available",
           "REPO_ROOT", "HarnessError"]
