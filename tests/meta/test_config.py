"""The configuration file: the DESIGN.md §2 example is accepted verbatim (and with each commented line
uncommented); a bad file is refused at start with one line naming the key, exit 2, no traceback and no
password, as an operator meets it through `pydble serve --config`."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from meta.config import ConfigError, load_config, parse_config

REPO_ROOT = Path(__file__).resolve().parents[2]

# DESIGN.md §2, verbatim.
DESIGN_EXAMPLE = '''\
[server]
instance = "dble-1"            # unique name of this instance in the cluster
bind = "127.0.0.1"
port = 8066                    # client port
manager_port = 9066            # admin port
# version = "5.7.21-pydble"    # default: the first backend's version string
# max_allowed_packet = 16777216  # larger client packets are refused before they are buffered
# ssl_cert = "conf/server-cert.pem"   # TLS on the client port (both or neither)
# ssl_key = "conf/server-key.pem"

[cluster]                      # absent: single-instance mode, local locks only, no ZooKeeper
zk = "127.0.0.1:2181"
root = "/dble"
cluster_id = "cluster-1"
session_timeout_s = 10
ack_timeout_s = 30

[[users]]
name = "test"
password = "111111"
schemas = ["schema1", "schema2"]
# read_only = false
# privileges = { schema1 = "1111", "schema2.sing" = "0010" }
#   DBLE's dml bits per schema or schema.table (INSERT, UPDATE, SELECT, DELETE); a table entry
#   overrides its schema's; absent: all four on the listed schemas

[[manager_users]]
name = "root"
password = "111111"

[db_groups.ha_group1]
host = "127.0.0.1"
port = 3306
user = "root"
password = ""
max_con = 64

[db_groups.ha_group2]
host = "127.0.0.1"
port = 3307
user = "root"
password = ""

[sharding_nodes]
dn1 = { db_group = "ha_group1", database = "db1" }
dn2 = { db_group = "ha_group2", database = "db1" }
dn3 = { db_group = "ha_group1", database = "db2" }
dn4 = { db_group = "ha_group2", database = "db2" }
dn5 = { db_group = "ha_group1", database = "db3" }

[functions.hash-two]
type = "hash"                  # DBLE Hash: slot = value mod sum(count*length); slots split in order
partition_count = [2]
partition_length = [1]

[functions.hash-four]
type = "hash"
partition_count = [4]
partition_length = [1]

[schemas.schema1]
default_node = "dn5"           # unconfigured tables live here (DBLE "nosharding" tables)

[schemas.schema1.tables.test]
type = "global"
nodes = ["dn1", "dn2", "dn3", "dn4"]

[schemas.schema1.tables.sharding_2_t1]
type = "sharding"
nodes = ["dn1", "dn2"]
function = "hash-two"
column = "id"

[schemas.schema1.tables.sharding_4_t1]
type = "sharding"
nodes = ["dn1", "dn2", "dn3", "dn4"]
function = "hash-four"
column = "id"
# increment_column = "id"     # DBLE incrementColumn: a global sequence fills it when an INSERT leaves it out

[schemas.schema2.tables.sing]
type = "single"
nodes = ["dn1"]
'''

COMMENTED = ("# version", "# max_allowed_packet", "# ssl_", "# read_only", "# privileges", "# increment_column")


def _uncomment(prefix: str) -> str:
    return "\n".join(line[2:] if line.startswith(prefix) else line for line in DESIGN_EXAMPLE.splitlines())


@pytest.mark.parametrize("prefix", (None, *COMMENTED))
def test_the_design_example_is_accepted_verbatim_and_with_each_commented_line(prefix: str | None,
                                                                               tmp_path: Path) -> None:
    path = tmp_path / "pydble.toml"
    path.write_text(DESIGN_EXAMPLE if prefix is None else _uncomment(prefix))
    cfg = load_config(path)
    assert cfg.cluster is not None and cfg.table("schema1", "sharding_4_t1").function == "hash-four"


def _raw() -> dict:
    return tomllib.loads(DESIGN_EXAMPLE)


def _set(path: str, value: object):
    """A mutation of the example: path is dotted, `[i]` indexes an array of tables."""
    def mutate(raw: dict) -> None:
        keys = path.split(".")
        d = raw
        for k in keys[:-1]:
            if k.endswith("]"):
                name, i = k[:-1].split("[")
                d = d[name][int(i)]
            else:
                d = d.setdefault(k, {})
        d[keys[-1]] = value
    return mutate


def _range(**f: object):
    return _set("functions.by-range", {"type": "range", **f})


BAD = {
    # a section of the wrong shape is a one-line error, not a traceback
    "sharding_nodes as an array": (_set("sharding_nodes", [{"db_group": "ha_group1"}]), "sharding_nodes", "must be a table"),
    "db_groups as an array": (_set("db_groups", [1]), "db_groups", "must be a table"),
    "functions as a string": (_set("functions", "hash"), "functions", "must be a table"),
    "schemas as an array": (_set("schemas", []), "schemas", "must be a table"),
    # numbers that make no sense
    "max_connections negative": (_set("server.max_connections", -5), "server.max_connections", "at least 1"),
    "backend_timeout_s negative": (_set("server.backend_timeout_s", -1), "server.backend_timeout_s", "positive"),
    "backend_timeout_s nan": (_set("server.backend_timeout_s", float("nan")), "server.backend_timeout_s", "positive"),
    "packet_timeout_s nan": (_set("server.packet_timeout_s", float("nan")), "server.packet_timeout_s", "positive"),
    "connect_timeout_s zero": (_set("db_groups.ha_group1.connect_timeout_s", 0), "db_groups.ha_group1.connect_timeout_s",
                               "positive"),
    "user max_con negative": (_set("users[0].max_con", -1), "users.test.max_con", ">= 0"),
    "ack_timeout_s nan": (_set("cluster.ack_timeout_s", float("nan")), "cluster.ack_timeout_s", "positive"),
    # empty names
    "db_group host empty": (_set("db_groups.ha_group2.host", ""), "db_groups.ha_group2.host", "empty"),
    "node database empty": (_set("sharding_nodes.dn5.database", ""), "sharding_nodes.dn5.database", "empty"),
    "sharding column empty": (_set("schemas.schema1.tables.sharding_2_t1.column", ""),
                              "schemas.schema1.tables.sharding_2_t1.column", "empty"),
    "user name empty": (_set("users[0].name", ""), "users[0].name", "empty"),
    # two tables of one name (table names are case-insensitive)
    "table twice by case": (_set("schemas.schema1.tables.TEST", {"type": "single", "nodes": ["dn1"]}),
                            "schemas.schema1.tables.TEST", "duplicate"),
    # range functions
    "range overlapping": (_range(ranges=[{"start": 0, "end": 1000, "node": 0}, {"start": 500, "end": 2000, "node": 1}]),
                          "functions.by-range.ranges[1]", "overlaps"),
    "range negative node": (_range(ranges=[{"start": 0, "end": 10, "node": -1}]),
                            "functions.by-range.ranges[0].node", ">= 0"),
    "range negative default": (_range(ranges=[{"start": 0, "end": 10, "node": 0}], default_partition=-1),
                               "functions.by-range.default_partition", ">= 0"),
    "range with partition_count": (_range(ranges=[{"start": 0, "end": 10, "node": 0}], partition_count=[2]),
                                   "functions.by-range.partition_count", "range function"),
    # hash functions: keys of another type are a mistake, not silently ignored
    "hash with ranges": (_set("functions.hash-two.ranges", [{"start": 0, "end": 1, "node": 0}]),
                         "functions.hash-two.ranges", "hash function"),
    "hash with hash_slice": (_set("functions.hash-two.hash_slice", "0:2"), "functions.hash-two.hash_slice",
                             "hash function"),
    # names that break paths or collide with what pydble answers itself
    "cluster_id with a slash": (_set("cluster.cluster_id", "a/b"), "cluster.cluster_id", "'/'"),
    "cluster_id empty": (_set("cluster.cluster_id", ""), "cluster.cluster_id", "empty"),
    "zk empty": (_set("cluster.zk", ""), "cluster.zk", "empty"),
    "root with an empty segment": (_set("cluster.root", "//a"), "cluster.root", "empty"),
    "manager user name empty": (_set("manager_users[0].name", ""), "manager_users[0].name", "empty"),
    "bind empty": (_set("server.bind", ""), "server.bind", "empty"),
    "version empty": (_set("server.version", ""), "server.version", "empty"),
    "schema named mysql": (_set("schemas.mysql", {"default_node": "dn1"}), "schemas.mysql", "reserved"),
    "schema named INFORMATION_SCHEMA": (_set("schemas.INFORMATION_SCHEMA", {"default_node": "dn1"}),
                                        "schemas.INFORMATION_SCHEMA", "reserved"),
    "schema name with a dot": (lambda raw: raw["schemas"].update({"a.b": {"default_node": "dn1"}}),
                               "schemas.a.b", "'.'"),
    "table name with a dot": (lambda raw: raw["schemas"]["schema2"]["tables"].update(
        {"a.b": {"type": "single", "nodes": ["dn1"]}}), "schemas.schema2.tables.a.b", "'.'"),
    "stringhash bad slice": (_set("functions.by-name", {"type": "stringhash", "partition_count": [2],
                                                        "partition_length": [1], "hash_slice": "a:b"}),
                             "functions.by-name.hash_slice", "'a:b'"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_config_is_refused_naming_the_key(case: str) -> None:
    mutate, key, problem = BAD[case]
    raw = _raw()
    mutate(raw)
    with pytest.raises(ConfigError) as e:
        parse_config(raw)
    assert e.value.key == key and problem in e.value.problem, str(e.value)


@pytest.mark.parametrize("hash_slice", ("2", "-2", "1:", ":-1", "0:-1", "0:2"))
def test_every_dble_hash_slice_form_is_accepted(hash_slice: str) -> None:
    raw = _raw()
    _set("functions.by-name", {"type": "stringhash", "partition_count": [2], "partition_length": [1],
                               "hash_slice": hash_slice})(raw)
    assert parse_config(raw).functions["by-name"].hash_slice == hash_slice


def _serve(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    """`pydble serve --config` on this text, as an operator starts it (bounded: a bad file ends it at once)."""
    path = tmp_path / "pydble.toml"
    path.write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run([sys.executable, "-m", "cli", "serve", "--config", str(path)], capture_output=True,
                          text=True, timeout=30, env=env, cwd=REPO_ROOT)


@pytest.mark.parametrize("edit", (
    ('[sharding_nodes]', '[[sharding_nodes]]'),                      # was a traceback
    ('default_node = "dn5"', 'defualt_node = "dn5"'),               # a typo
    ('port = 8066 ', 'port = "x" '),
    ('[server]', '[server'),                                         # TOML syntax
))
def test_serve_refuses_a_bad_file_with_one_line_and_exit_2(edit: tuple[str, str], tmp_path: Path) -> None:
    secret = "S3cretPassw0rd"
    text = DESIGN_EXAMPLE.replace('password = "111111"', f'password = "{secret}"').replace(*edit)
    r = _serve(tmp_path, text)
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and r.stderr.count("\n") == 1 and r.stderr.startswith("pydble: config error: "), r.stderr
    assert secret not in r.stderr


@pytest.mark.parametrize("what", ("a folder", "not utf-8"))
def test_a_config_path_that_cannot_be_read_as_text_is_one_line(what: str, tmp_path: Path) -> None:
    path = tmp_path / "conf"
    if what == "a folder":
        path.mkdir()
    else:
        path.write_bytes(DESIGN_EXAMPLE.encode().replace(b'"dble-1"', b'"dble-\xff"'))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.key == "config" and str(path) in e.value.problem, str(e.value)


def test_an_ssl_path_that_is_a_folder_says_so(tmp_path: Path) -> None:
    from meta.config import tls_context

    raw = _raw()
    raw["server"].update(ssl_cert=str(tmp_path), ssl_key=str(tmp_path))
    with pytest.raises(ConfigError) as e:
        tls_context(parse_config(raw).server)
    assert e.value.key == "server.ssl_cert" and e.value.problem == f"{tmp_path} is not a file", str(e.value)


def test_serve_refuses_a_data_dir_it_cannot_write_at_start(tmp_path: Path) -> None:
    """Found at start, not at the first DDL's history or XA decision (root may write anywhere: a file
    standing where a folder must be is what no one can use)."""
    (tmp_path / "afile").write_text("")
    text = DESIGN_EXAMPLE.replace("[cluster]", f'data_dir = "{tmp_path / "afile" / "data"}"\n\n[cluster]', 1)
    r = _serve(tmp_path, text)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("pydble: config error: server.data_dir: cannot use ") and r.stderr.count("\n") == 1, \
        r.stderr
