"""The TOML configuration: records for every section, and validation that names the bad key."""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

TABLE_TYPES = ("sharding", "global", "single")
# the server's own schemas: pydble answers or refuses them itself, so no logical schema may take the name
SYSTEM_SCHEMAS = frozenset({"information_schema", "mysql", "performance_schema", "sys"})
FUNCTION_TYPES = ("hash", "stringhash", "range")


class ConfigError(Exception):
    """A configuration problem, always reported as one line naming the key."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


class StartRefused(Exception):
    """This instance must not run with this config now (its name is taken in the cluster, ZooKeeper
    refused its credentials): like a ConfigError, one line for the operator and a non-zero exit."""


@dataclass(frozen=True)
class ServerConfig:
    instance: str = "pydble-1"
    bind: str = "127.0.0.1"
    port: int = 8066
    manager_port: int = 9066
    version: str | None = None
    max_connections: int = 4096
    backend_timeout_s: float = 30.0
    ddl_timeout_s: float = 0.0  # a DDL whose client left is stopped on its nodes after this long; 0: never
    data_dir: str = ""          # DDL history etc.; default: <config file's folder>/data/<instance>
    metrics_port: int = 0       # Prometheus endpoint; 0: off
    merge_memory_mb: int = 256  # rows one query may hold while merging several nodes' results
    client_buffer_kb: int = 256  # bytes queued for a slow client before backends stop being read
    ssl_cert: str | None = None  # TLS on the client port: PEM certificate chain and key (both or neither)
    ssl_key: str | None = None
    max_allowed_packet: int = 16 << 20  # larger client packets are refused (1153) before they are buffered
    packet_timeout_s: float = 30.0      # a started packet that stops arriving for this long closes the client
    sequence_block: int = 1000          # global sequence values reserved at a time (ZooKeeper or the local file)
    reuse_port: bool = False            # SO_REUSEPORT: several processes share the client port (the kernel spreads)


@dataclass(frozen=True)
class ClusterConfig:
    zk: str
    root: str = "/dble"
    cluster_id: str = "cluster-1"
    session_timeout_s: float = 10.0
    ack_timeout_s: float = 30.0
    auth: str | None = field(default=None, repr=False)   # "user:password": digest ACLs on every znode
    peer_port: int = 0    # direct DDL channel between instances: 0 any free port (advertised in ZooKeeper), -1 off
    peer_secret: str | None = field(default=None, repr=False)   # authenticates the peer channel (or `auth` does)

    def peer_key(self) -> bytes | None:
        """The peer channel's HMAC key, from `peer_secret` or else `auth` (never stored in a znode);
        None: the channel stays off, since anyone who can read ZooKeeper could use it."""
        if self.peer_port < 0:
            return None
        secret = self.peer_secret if self.peer_secret is not None else self.auth
        if secret is None:
            return None
        return hmac.new(secret.encode(), b"pydble peer channel\0" + self.cluster_id.encode(), hashlib.sha256).digest()


@dataclass(frozen=True)
class UserConfig:
    name: str
    password: str = field(repr=False)
    schemas: tuple[str, ...] = ()
    read_only: bool = False
    max_con: int = 0
    # DBLE's dml bits per "schema" or "schema.table": which of INSERT, UPDATE, SELECT, DELETE are allowed
    privileges: dict[str, str] = field(default_factory=dict)
    admin: bool = False   # sees and kills every client session (SHOW PROCESSLIST, KILL), as MySQL's PROCESS/SUPER

    def dml(self, schema: str, table: str | None) -> str:
        """The user's dml bits on a table (a table entry overrides its schema's); "0000" off its schemas."""
        if schema not in self.schemas:
            return "0000"
        p = self.privileges
        if table is not None:
            bits = p.get(f"{schema}.{table.lower()}")
            if bits is not None:
                return bits
        return p.get(schema, "1111")


@dataclass(frozen=True)
class ManagerUserConfig:
    name: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class DbGroupConfig:
    name: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    max_con: int = 64
    connect_timeout_s: float = 5.0


@dataclass(frozen=True)
class ShardingNodeConfig:
    name: str
    db_group: str
    database: str


@dataclass(frozen=True)
class FunctionConfig:
    name: str
    type: str
    partition_count: tuple[int, ...] = ()
    partition_length: tuple[int, ...] = ()
    hash_slice: str = "0:-1"
    ranges: tuple[tuple[int, int, int], ...] = ()
    default_partition: int | None = None


@dataclass(frozen=True)
class TableConfig:
    schema: str
    name: str
    type: str
    nodes: tuple[str, ...]
    function: str | None = None
    column: str | None = None
    increment_column: str | None = None   # DBLE incrementColumn: filled from a global sequence when left out


@dataclass(frozen=True)
class SchemaConfig:
    name: str
    default_node: str | None = None
    tables: dict[str, TableConfig] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    server: ServerConfig
    cluster: ClusterConfig | None
    users: dict[str, UserConfig]
    manager_users: dict[str, ManagerUserConfig]
    db_groups: dict[str, DbGroupConfig]
    sharding_nodes: dict[str, ShardingNodeConfig]
    functions: dict[str, FunctionConfig]
    schemas: dict[str, SchemaConfig]

    def table(self, schema: str, name: str) -> TableConfig | None:
        """The configured table, matched case-insensitively like DBLE's lower_case_table_names=1."""
        sc = self.schemas.get(schema)
        return sc.tables.get(name.lower()) if sc else None

    def all_global(self, tables: Iterable[tuple[str, str]]) -> bool:
        """Every (schema, table) is a global table (a copy on each of its nodes), and there is one: a write
        or DDL on them counts one copy's rows."""
        found = False
        for schema, name in tables:
            t = self.table(schema, name)
            if t is None or t.type != "global":
                return False
            found = True
        return found

    def default_home(self, schema: str, name: str) -> str | None:
        """The default node an unconfigured `name` of `schema` lives on; None when the schema has none, or when
        another schema configures a table of that name in the default node's physical database: it is that
        schema's table, never a default-node table of this one."""
        node = self.schemas[schema].default_node
        return None if node is None or name.lower() in self._claimed.get(schema, ()) else node

    @cached_property
    def _claimed(self) -> dict[str, frozenset[str]]:
        def where(node: str) -> tuple[str, int, str]:
            sn = self.sharding_nodes[node]
            g = self.db_groups[sn.db_group]
            return g.host.lower(), g.port, sn.database
        out: dict[str, frozenset[str]] = {}
        for s, sc in self.schemas.items():
            if sc.default_node is not None:
                home = where(sc.default_node)
                out[s] = frozenset(t for o, osc in self.schemas.items() if o != s for t, tc in osc.tables.items()
                                   if t not in sc.tables and any(where(n) == home for n in tc.nodes))
        return out

    def home_node(self, schema: str | None) -> str | None:
        """Where statements that touch no table go: the schema's default node, else its first node,
        else any node (None only when there is no shardingNode at all)."""
        if schema is not None and schema in self.schemas:
            if self.schemas[schema].default_node:
                return self.schemas[schema].default_node
            nodes = self.all_nodes_of_schema(schema)
            if nodes:
                return nodes[0]
        return next(iter(self.sharding_nodes), None)

    def all_nodes_of_schemas(self, schemas: Iterable[str]) -> tuple[str, ...]:
        """Every shardingNode of these schemas (a user's): where a session's statements may go."""
        return tuple(dict.fromkeys(n for s in schemas if s in self.schemas for n in self.all_nodes_of_schema(s)))

    def all_nodes_of_schema(self, schema: str) -> tuple[str, ...]:
        """Every shardingNode a schema's tables (and default node) live on, in config order."""
        sc = self.schemas[schema]
        seen: dict[str, None] = {}
        for t in sc.tables.values():
            for n in t.nodes:
                seen[n] = None
        if sc.default_node:
            seen[sc.default_node] = None
        return tuple(seen)


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML config file."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError("config", f"file {path} not found") from None
    except OSError as e:
        raise ConfigError("config", f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError("config", f"{path} is not UTF-8 text (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("config", f"not valid TOML: {e}") from None
    cfg = parse_config(raw)
    if not cfg.server.data_dir:
        folder = Path(path).resolve().parent / "data" / cfg.server.instance
        cfg = replace(cfg, server=replace(cfg.server, data_dir=str(folder)))
    return cfg


def usable_data_dir(server: ServerConfig) -> str | None:
    """The data_dir (DDL history, XA decisions, sequences, views), created and known writable at start
    rather than at the first DDL or XA commit that needs it; None without one."""
    if not server.data_dir:
        return None
    folder = Path(server.data_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError("server.data_dir", f"cannot use {folder}: {e.strerror or e}") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError("server.data_dir", f"cannot use {folder}: not writable")
    return str(folder)


def tls_context(server: ServerConfig) -> ssl.SSLContext | None:
    """The TLS context of the client port (None without ssl_cert/ssl_key); a file that cannot be
    loaded is a ConfigError naming the key, found at start-up rather than at the first TLS client."""
    if server.ssl_cert is None or server.ssl_key is None:
        return None
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    for key, path in (("ssl_cert", server.ssl_cert), ("ssl_key", server.ssl_key)):
        if not Path(path).is_file():
            raise ConfigError(f"server.{key}", f"{path} is not a file" if Path(path).exists() else f"file {path} not found")
    try:
        ctx.load_cert_chain(server.ssl_cert, server.ssl_key)
    except (ssl.SSLError, OSError) as e:
        raise ConfigError("server.ssl_cert", f"cannot load the certificate and key: {e}") from None
    return ctx


def _take(section: dict[str, Any], key: str, allowed: set[str]) -> None:
    for k in section:
        if k not in allowed:
            raise ConfigError(f"{key}.{k}", "unknown key")


def _typed(value: Any, key: str, typ: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and typ in (int, float, (int, float)):
        raise ConfigError(key, f"must be {what}")
    if not isinstance(value, typ):
        raise ConfigError(key, f"must be {what}")
    return value


def _get(section: dict[str, Any], prefix: str, key: str, typ: Any, what: str, default: Any = ...) -> Any:
    if key not in section:
        if default is ...:
            raise ConfigError(f"{prefix}.{key}", "is required")
        return default
    return _typed(section[key], f"{prefix}.{key}", typ, what)


def _positive(value: float, key: str, what: str = "a positive number of seconds") -> float:
    """A timeout or bound that must be above zero (NaN, which compares false to everything, is refused too)."""
    if not value > 0:
        raise ConfigError(key, f"must be {what}")
    return value


def _name(section: dict[str, Any], prefix: str, key: str, what: str, default: Any = ...) -> Any:
    """A string naming something (a host, a database, a column): an empty one names nothing."""
    v = _get(section, prefix, key, str, what, default)
    if v is not None and not v.strip():
        raise ConfigError(f"{prefix}.{key}", "must not be empty")
    return v


def _section(raw: dict[str, Any], key: str, what: str) -> dict[str, Any]:
    """A top-level section of named tables ([key.NAME]); another shape is refused before it is walked."""
    return _typed(raw.get(key, {}), key, dict, what)


def parse_slice(text: str) -> tuple[int, int]:
    """DBLE's hashSlice syntax: "2" -> (0,2), "-2" -> (-2,0), "1:" -> (1,0), ":-1" -> (0,-1)."""
    if ":" not in text:
        i = int(text.strip())
        return (0, i) if i >= 0 else (i, 0)
    left, right = text.split(":", 1)
    return (int(left) if left.strip() else 0, int(right) if right.strip() else 0)


def _port(section: dict[str, Any], prefix: str, key: str, default: Any = ...) -> int:
    p = _get(section, prefix, key, int, "a port number", default)
    if not 0 < p < 65536:
        raise ConfigError(f"{prefix}.{key}", f"port {p} out of range 1-65535")
    return p


def _int_list(section: dict[str, Any], prefix: str, key: str) -> tuple[int, ...]:
    v = _get(section, prefix, key, list, "a list of integers", [])
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        raise ConfigError(f"{prefix}.{key}", "must be a list of positive integers")
    return tuple(v)


def parse_config(raw: dict[str, Any]) -> Config:
    """Turn the parsed TOML into validated records; raise ConfigError naming the first bad key."""
    _take(raw, "config", {"server", "cluster", "users", "manager_users", "db_groups",
                          "sharding_nodes", "functions", "schemas"})
    server = _parse_server(raw.get("server", {}))
    cluster = _parse_cluster(raw["cluster"]) if "cluster" in raw else None
    db_groups = _parse_db_groups(_section(raw, "db_groups", "a table of dbGroups ([db_groups.NAME])"))
    nodes = _parse_nodes(_section(raw, "sharding_nodes", "a table of shardingNodes ([sharding_nodes])"), db_groups)
    functions = _parse_functions(_section(raw, "functions", "a table of functions ([functions.NAME])"))
    schemas = _parse_schemas(_section(raw, "schemas", "a table of schemas ([schemas.NAME])"), nodes, functions)
    users = _parse_users(raw.get("users", []), schemas)
    managers = _parse_manager_users(raw.get("manager_users", []))
    if not users:
        raise ConfigError("users", "at least one client user is required")
    if not managers:
        raise ConfigError("manager_users", "at least one manager user is required")
    return Config(server, cluster, users, managers, db_groups, nodes, functions, schemas)


def _parse_server(s: dict[str, Any]) -> ServerConfig:
    p = "server"
    _typed(s, p, dict, "a table")
    _take(s, p, {"instance", "bind", "port", "manager_port", "version", "max_connections",
                 "backend_timeout_s", "ddl_timeout_s", "data_dir", "metrics_port", "merge_memory_mb", "client_buffer_kb",
                 "ssl_cert", "ssl_key", "max_allowed_packet", "packet_timeout_s", "sequence_block",
                 "reuse_port"})
    d = ServerConfig()
    cfg = ServerConfig(
        instance=_get(s, p, "instance", str, "a string", d.instance),
        bind=_name(s, p, "bind", "an address (0.0.0.0 for every one)", d.bind),
        port=_port(s, p, "port", d.port),
        manager_port=_port(s, p, "manager_port", d.manager_port),
        version=_name(s, p, "version", "a version string", None),
        max_connections=_get(s, p, "max_connections", int, "an integer", d.max_connections),
        backend_timeout_s=float(_get(s, p, "backend_timeout_s", (int, float), "a number",
                                     d.backend_timeout_s)),
        ddl_timeout_s=float(_get(s, p, "ddl_timeout_s", (int, float), "a number of seconds", d.ddl_timeout_s)),
        data_dir=_get(s, p, "data_dir", str, "a folder path", ""),
        metrics_port=_port(s, p, "metrics_port", 0) if s.get("metrics_port") else 0,
        merge_memory_mb=_get(s, p, "merge_memory_mb", int, "an integer (MB)", d.merge_memory_mb),
        client_buffer_kb=_get(s, p, "client_buffer_kb", int, "an integer (KB)", d.client_buffer_kb),
        ssl_cert=_get(s, p, "ssl_cert", str, "a file path", None) or None,
        ssl_key=_get(s, p, "ssl_key", str, "a file path", None) or None,
        max_allowed_packet=_get(s, p, "max_allowed_packet", int, "an integer (bytes)", d.max_allowed_packet),
        packet_timeout_s=float(_get(s, p, "packet_timeout_s", (int, float), "a number", d.packet_timeout_s)),
        sequence_block=_get(s, p, "sequence_block", int, "an integer", d.sequence_block),
        reuse_port=_get(s, p, "reuse_port", bool, "true or false", d.reuse_port),
    )
    if cfg.max_connections < 1:
        raise ConfigError("server.max_connections", "must be at least 1")
    _positive(cfg.backend_timeout_s, "server.backend_timeout_s")
    if not 1 <= cfg.sequence_block <= 1_000_000:
        raise ConfigError("server.sequence_block", "must be between 1 and 1000000 values")
    if (cfg.ssl_cert is None) != (cfg.ssl_key is None):
        missing = "ssl_key" if cfg.ssl_key is None else "ssl_cert"
        raise ConfigError(f"server.{missing}", "ssl_cert and ssl_key go together (both or neither)")
    if not 1024 <= cfg.max_allowed_packet <= 1 << 30:
        raise ConfigError("server.max_allowed_packet", "must be between 1024 and 1073741824 bytes")
    _positive(cfg.packet_timeout_s, "server.packet_timeout_s")
    if not cfg.ddl_timeout_s >= 0:
        raise ConfigError("server.ddl_timeout_s", "must be >= 0 (0: a DDL is never given up)")
    if cfg.merge_memory_mb < 1 or cfg.client_buffer_kb < 16:
        raise ConfigError("server.merge_memory_mb", "merge_memory_mb must be >= 1 and client_buffer_kb >= 16")
    if cfg.metrics_port and cfg.metrics_port in (cfg.port, cfg.manager_port):
        raise ConfigError("server.metrics_port", f"duplicate port {cfg.metrics_port}")
    if cfg.port == cfg.manager_port:
        raise ConfigError("server.manager_port", f"duplicate port {cfg.port}: same as server.port")
    if not cfg.instance or "/" in cfg.instance:
        raise ConfigError("server.instance", "must be a non-empty name without '/'")
    return cfg


def _parse_cluster(s: dict[str, Any]) -> ClusterConfig:
    p = "cluster"
    _typed(s, p, dict, "a table")
    _take(s, p, {"zk", "root", "cluster_id", "session_timeout_s", "ack_timeout_s", "auth", "peer_port",
                   "peer_secret"})
    root = _get(s, p, "root", str, "a string", "/dble")
    if not root.startswith("/") or root.endswith("/") and root != "/":
        raise ConfigError("cluster.root", "must start with '/' and not end with '/'")
    if "//" in root:
        raise ConfigError("cluster.root", "must not have an empty path segment ('//')")
    cluster_id = _name(s, p, "cluster_id", "a string", "cluster-1")
    if "/" in cluster_id:
        raise ConfigError("cluster.cluster_id", "must be one znode name, without '/'")
    cfg = ClusterConfig(
        zk=_name(s, p, "zk", "a host:port list"),
        root=root,
        cluster_id=cluster_id,
        session_timeout_s=float(_get(s, p, "session_timeout_s", (int, float), "a number", 10)),
        ack_timeout_s=float(_get(s, p, "ack_timeout_s", (int, float), "a number", 30)),
        auth=_get(s, p, "auth", str, "a string 'user:password'", None),
        peer_port=_get(s, p, "peer_port", int, "a port number, 0 (any free port) or -1 (off)", 0),
        peer_secret=_get(s, p, "peer_secret", str, "a string", None),
    )
    if cfg.peer_secret is not None and len(cfg.peer_secret) < 16:
        raise ConfigError("cluster.peer_secret", "must be at least 16 characters (the same on every instance)")
    if not -1 <= cfg.peer_port <= 65535:
        raise ConfigError("cluster.peer_port", "must be a port number, 0 (any free port) or -1 (off)")
    if cfg.auth is not None and (":" not in cfg.auth or cfg.auth.startswith(":")):
        raise ConfigError("cluster.auth", "must be 'user:password' (the ZooKeeper digest identity)")
    _positive(cfg.session_timeout_s, "cluster.session_timeout_s")
    _positive(cfg.ack_timeout_s, "cluster.ack_timeout_s")
    return cfg


def _parse_db_groups(groups: dict[str, Any]) -> dict[str, DbGroupConfig]:
    out: dict[str, DbGroupConfig] = {}
    seen: dict[tuple[str, int], str] = {}
    for name, g in groups.items():
        p = f"db_groups.{name}"
        _typed(g, p, dict, "a table")
        _take(g, p, {"host", "port", "user", "password", "max_con", "connect_timeout_s"})
        cfg = DbGroupConfig(
            name=name,
            host=_name(g, p, "host", "a host name"),
            port=_port(g, p, "port", 3306),
            user=_get(g, p, "user", str, "a string"),
            password=_get(g, p, "password", str, "a string", ""),
            max_con=_get(g, p, "max_con", int, "an integer", 64),
            connect_timeout_s=float(_get(g, p, "connect_timeout_s", (int, float), "a number", 5)),
        )
        if cfg.max_con < 1:
            raise ConfigError(f"{p}.max_con", "must be at least 1")
        _positive(cfg.connect_timeout_s, f"{p}.connect_timeout_s")
        addr = (cfg.host, cfg.port)
        if addr in seen:
            raise ConfigError(f"{p}.port",
                              f"duplicate instance {cfg.host}:{cfg.port}, also db_groups.{seen[addr]}")
        seen[addr] = name
        out[name] = cfg
    if not out:
        raise ConfigError("db_groups", "at least one db_group is required")
    return out


def _parse_nodes(nodes: dict[str, Any], groups: dict[str, DbGroupConfig]) -> dict[str, ShardingNodeConfig]:
    out: dict[str, ShardingNodeConfig] = {}
    seen: dict[tuple[str, str], str] = {}
    for name, n in nodes.items():
        p = f"sharding_nodes.{name}"
        _typed(n, p, dict, "a table")
        _take(n, p, {"db_group", "database"})
        cfg = ShardingNodeConfig(name, _get(n, p, "db_group", str, "a string"),
                                 _name(n, p, "database", "a database name"))
        if cfg.db_group not in groups:
            raise ConfigError(f"{p}.db_group", f"unknown db_group '{cfg.db_group}'")
        key = (cfg.db_group, cfg.database)
        if key in seen:
            raise ConfigError(f"{p}.database", f"duplicate of sharding_nodes.{seen[key]}")
        seen[key] = name
        out[name] = cfg
    return out


# the keys each function type reads; another type's key is a mistake, not silently ignored
FUNCTION_KEYS = {"hash": {"partition_count", "partition_length"},
                 "stringhash": {"partition_count", "partition_length", "hash_slice"},
                 "range": {"ranges", "default_partition"}}


def _parse_functions(funcs: dict[str, Any]) -> dict[str, FunctionConfig]:
    out: dict[str, FunctionConfig] = {}
    for name, f in funcs.items():
        p = f"functions.{name}"
        _typed(f, p, dict, "a table")
        _take(f, p, {"type", "partition_count", "partition_length", "hash_slice", "ranges",
                     "default_partition"})
        typ = _get(f, p, "type", str, "a string")
        if typ not in FUNCTION_TYPES:
            raise ConfigError(f"{p}.type", f"unknown function type '{typ}' (one of {', '.join(FUNCTION_TYPES)})")
        for k in f:
            if k != "type" and k not in FUNCTION_KEYS[typ]:
                raise ConfigError(f"{p}.{k}", f"a {typ} function takes no {k} "
                                              f"(it reads {', '.join(sorted(FUNCTION_KEYS[typ]))})")
        counts = _int_list(f, p, "partition_count")
        lengths = _int_list(f, p, "partition_length")
        ranges: list[tuple[int, int, int]] = []
        if typ in ("hash", "stringhash"):
            if not counts or len(counts) != len(lengths):
                raise ConfigError(f"{p}.partition_length",
                                  "partition_count and partition_length must be non-empty lists of equal length")
            total = sum(c * l for c, l in zip(counts, lengths))
            if total > 2880:
                raise ConfigError(f"{p}.partition_length", f"sum(count*length) = {total} exceeds 2880")
        else:
            for i, r in enumerate(_get(f, p, "ranges", list, "a list of {start, end, node}")):
                rp = f"{p}.ranges[{i}]"
                _typed(r, rp, dict, "a table {start, end, node}")
                _take(r, rp, {"start", "end", "node"})
                lo, hi = _get(r, rp, "start", int, "an integer"), _get(r, rp, "end", int, "an integer")
                if hi <= lo:
                    raise ConfigError(f"{rp}.end", "must be greater than start")
                node = _get(r, rp, "node", int, "a node index")
                if node < 0:
                    raise ConfigError(f"{rp}.node", "must be >= 0 (an index into the table's nodes)")
                for j, (a, b, _n) in enumerate(ranges):
                    if lo < b and a < hi:
                        raise ConfigError(rp, f"[{lo}, {hi}) overlaps ranges[{j}] [{a}, {b})")
                ranges.append((lo, hi, node))
            if not ranges:
                raise ConfigError(f"{p}.ranges", "a range function needs at least one range")
        hs = _get(f, p, "hash_slice", str, "a string like '0:-1'", "0:-1")
        try:
            parse_slice(hs)
        except ValueError:
            raise ConfigError(f"{p}.hash_slice", f"'{hs}' is not a DBLE hash slice ('start:end', 'n', 'start:' "
                                                 "or ':end')") from None
        default = _get(f, p, "default_partition", int, "an integer", None)
        if default is not None and default < 0:
            raise ConfigError(f"{p}.default_partition", "must be >= 0 (an index into the table's nodes)")
        out[name] = FunctionConfig(name, typ, counts, lengths, hs, tuple(ranges), default)
    return out


def function_partitions(f: FunctionConfig) -> int:
    """How many partitions (and so table nodes) a function maps values onto."""
    if f.type == "range":
        return max(r[2] for r in f.ranges) + 1
    return sum(f.partition_count)


def _parse_schemas(schemas: dict[str, Any], nodes: dict[str, ShardingNodeConfig],
                   funcs: dict[str, FunctionConfig]) -> dict[str, SchemaConfig]:
    out: dict[str, SchemaConfig] = {}
    for sname, s in schemas.items():
        p = f"schemas.{sname}"
        _typed(s, p, dict, "a table")
        if sname.lower() in SYSTEM_SCHEMAS:
            raise ConfigError(p, f"'{sname}' is a reserved schema name (the server's own)")
        if "." in sname or not sname.strip():
            raise ConfigError(p, "a schema name must be non-empty, without '.'")
        _take(s, p, {"default_node", "tables"})
        default = _get(s, p, "default_node", str, "a shardingNode name", None)
        if default is not None and default not in nodes:
            raise ConfigError(f"{p}.default_node", f"unknown shardingNode '{default}'")
        tables: dict[str, TableConfig] = {}
        for tname, t in _get(s, p, "tables", dict, "a table of tables", {}).items():
            if "." in tname or not tname.strip():
                raise ConfigError(f"{p}.tables.{tname}", "a table name must be non-empty, without '.'")
            if tname.lower() in tables:
                raise ConfigError(f"{p}.tables.{tname}", f"duplicate of table '{tname.lower()}' "
                                                         "(table names are case-insensitive)")
            tables[tname.lower()] = _parse_table(sname, tname, t, nodes, funcs)
        out[sname] = SchemaConfig(sname, default, tables)
    if not out:
        raise ConfigError("schemas", "at least one schema is required")
    return out


def _parse_table(sname: str, tname: str, t: Any, nodes: dict[str, ShardingNodeConfig],
                 funcs: dict[str, FunctionConfig]) -> TableConfig:
    p = f"schemas.{sname}.tables.{tname}"
    _typed(t, p, dict, "a table")
    _take(t, p, {"type", "nodes", "function", "column", "increment_column"})
    typ = _get(t, p, "type", str, "a string")
    if typ not in TABLE_TYPES:
        raise ConfigError(f"{p}.type", f"unknown table type '{typ}' (one of {', '.join(TABLE_TYPES)})")
    tnodes = _get(t, p, "nodes", list, "a list of shardingNode names")
    if not tnodes:
        raise ConfigError(f"{p}.nodes", "must name at least one shardingNode")
    for n in tnodes:
        if n not in nodes:
            raise ConfigError(f"{p}.nodes", f"unknown shardingNode '{n}'")
    if len(set(tnodes)) != len(tnodes):
        raise ConfigError(f"{p}.nodes", "lists a shardingNode twice")
    func = _get(t, p, "function", str, "a function name", None)
    col = _name(t, p, "column", "a column name", None)
    if typ == "sharding":
        if func is None:
            raise ConfigError(f"{p}.function", "is required for a sharding table")
        if func not in funcs:
            raise ConfigError(f"{p}.function", f"unknown function '{func}'")
        if col is None:
            raise ConfigError(f"{p}.column", "is required for a sharding table")
        parts = function_partitions(funcs[func])
        if parts != len(tnodes):
            raise ConfigError(f"{p}.nodes",
                              f"function '{func}' has {parts} partitions but the table has {len(tnodes)} nodes")
    elif func is not None or col is not None:
        raise ConfigError(f"{p}.function", f"a {typ} table takes no function or column")
    if typ == "single" and len(tnodes) != 1:
        raise ConfigError(f"{p}.nodes", "a single table lives on exactly one shardingNode")
    inc = _get(t, p, "increment_column", str, "a column name", None)
    if inc is not None:
        if typ != "sharding":
            raise ConfigError(f"{p}.increment_column", f"only a sharding table takes an increment_column, not a {typ} table")
        if not inc.strip() or inc != inc.strip() or "`" in inc or "." in inc:
            raise ConfigError(f"{p}.increment_column", f"'{inc}' is not a column name")
    return TableConfig(sname, tname.lower(), typ, tuple(tnodes), func, col.lower() if col else None,
                       inc.lower() if inc else None)


def _parse_users(users: Any, schemas: dict[str, SchemaConfig]) -> dict[str, UserConfig]:
    _typed(users, "users", list, "an array of tables ([[users]])")
    out: dict[str, UserConfig] = {}
    for i, u in enumerate(users):
        p = f"users[{i}]"
        _typed(u, p, dict, "a table")
        _take(u, p, {"name", "password", "schemas", "read_only", "max_con", "privileges", "admin"})
        name = _name(u, p, "name", "a user name")
        p = f"users.{name}"
        if name in out:
            raise ConfigError(p, "duplicate user")
        sch = _get(u, p, "schemas", list, "a list of schema names", [])
        for s in sch:
            if s not in schemas:
                raise ConfigError(f"{p}.schemas", f"unknown schema '{s}'")
        max_con = _get(u, p, "max_con", int, "an integer", 0)
        if max_con < 0:
            raise ConfigError(f"{p}.max_con", "must be >= 0 (0: no cap)")
        out[name] = UserConfig(name, _get(u, p, "password", str, "a string", ""), tuple(sch),
                               _get(u, p, "read_only", bool, "true or false", False), max_con,
                               _parse_privileges(_get(u, p, "privileges", dict, "a table", {}), f"{p}.privileges",
                                                 tuple(sch), schemas),
                               _get(u, p, "admin", bool, "true or false", False))
    return out


def _parse_privileges(raw: dict[str, Any], p: str, granted: tuple[str, ...],
                      schemas: dict[str, SchemaConfig]) -> dict[str, str]:
    """DBLE's dml bits: keys "schema" or "schema.table" of the user's schemas, values four 0/1 digits."""
    out: dict[str, str] = {}
    for key, bits in raw.items():
        if not isinstance(bits, str) or len(bits) != 4 or set(bits) - {"0", "1"}:
            raise ConfigError(f"{p}.{key}", 'must be four 0/1 digits for INSERT, UPDATE, SELECT, DELETE, e.g. "0010"')
        schema, _, table = key.partition(".")
        if schema not in schemas:
            raise ConfigError(f"{p}.{key}", f"unknown schema '{schema}'")
        if schema not in granted:
            raise ConfigError(f"{p}.{key}", f"schema '{schema}' is not in the user's schemas")
        if "." in table or (_ and not table):
            raise ConfigError(f"{p}.{key}", "must be a schema or schema.table")
        out[f"{schema}.{table.lower()}" if table else schema] = bits
    return out


def _parse_manager_users(users: Any) -> dict[str, ManagerUserConfig]:
    _typed(users, "manager_users", list, "an array of tables ([[manager_users]])")
    out: dict[str, ManagerUserConfig] = {}
    for i, u in enumerate(users):
        p = f"manager_users[{i}]"
        _typed(u, p, dict, "a table")
        _take(u, p, {"name", "password"})
        name = _name(u, p, "name", "a user name")
        if name in out:
            raise ConfigError(f"manager_users.{name}", "duplicate manager user")
        out[name] = ManagerUserConfig(name, _get(u, p, "password", str, "a string", ""))
    return out
