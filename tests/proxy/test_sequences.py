"""Global sequences in single-instance mode: a sharding table's increment_column filled from a local file.

An INSERT that leaves the column out (or gives NULL, 0, DEFAULT) gets the next values, routed by
them when the column is the sharding column, reported as the OK packet's last-insert-id and by
LAST_INSERT_ID() (the first value of a multi-row INSERT, whose values follow each other, as MySQL's).
Blocks are small here (sequence_block = 5) so statements outgrow them; a restart goes on above every
value handed out.
"""

from __future__ import annotations

import copy
import re
import subprocess
from typing import Any, Callable

import pymysql
import pytest

from harness import ProxyProcess, free_port, proxy_config, require_tool
from ps_wire import PsClient, p_null, p_str

NODES = ("dn1", "dn2", "dn3", "dn4")
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}


def seq_config(backends: list[Any], instance: str = "pydble-seq") -> dict[str, Any]:
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance=instance))
    cfg["server"]["sequence_block"] = 5
    tables = cfg["schemas"]["schema1"]["tables"]
    tables["seq_t"] = {"type": "sharding", "nodes": list(NODES), "function": "hash-four", "column": "id",
                       "increment_column": "id"}
    tables["seq_o"] = {"type": "sharding", "nodes": list(NODES), "function": "hash-four", "column": "k",
                       "increment_column": "id"}
    cfg["users"].append({"name": "ro", "password": "ro", "schemas": ["schema1"], "read_only": True})
    cfg["users"].append({"name": "sel", "password": "sel", "schemas": ["schema1"],
                         "privileges": {"schema1.seq_t": "0010"}})
    return cfg


def insert(cur: Any, sql: str) -> int:
    """Run an INSERT; the last-insert-id of its OK packet."""
    cur.execute(sql)
    return cur.lastrowid


def on_nodes(backends: list[Any], sql: str) -> dict[str, list[tuple[Any, ...]]]:
    return {n: backends[NODE_DB[n][0]].query(sql, NODE_DB[n][1]) for n in NODES}


def test_inserts_get_sequence_values(fresh_proxy: Callable[..., ProxyProcess], backends: list[Any]) -> None:
    p = fresh_proxy(seq_config(backends))
    conn = p.connect()
    with conn.cursor() as cur:
        for t in ("seq_t", "seq_o"):
            cur.execute(f"DROP TABLE IF EXISTS {t}")
        cur.execute("CREATE TABLE seq_t (id BIGINT PRIMARY KEY, name VARCHAR(20))")
        cur.execute("CREATE TABLE seq_o (id BIGINT PRIMARY KEY, k INT)")
        # who may not write the table burns no value: the first INSERT allowed still gets 1
        for user, code in (("ro", 1290), ("sel", 1142)):
            other = p.connect(user=user, password=user)
            with other.cursor() as oc, pytest.raises(pymysql.MySQLError) as e:
                oc.execute("INSERT INTO seq_t (name) VALUES ('no')")
            assert e.value.args[0] == code, e.value.args
            other.close()
        assert insert(cur, "INSERT INTO seq_t (name) VALUES ('a')") == 1
        assert insert(cur, "INSERT INTO seq_t (name) VALUES ('b'), ('c'), ('d')") == 2   # the first, as MySQL
        cur.execute("SELECT LAST_INSERT_ID()")
        assert cur.fetchall() == ((2,),)
        assert insert(cur, "INSERT INTO seq_t (id, name) VALUES (NULL, 'e'), (0, 'f')") == 6  # consecutive: 5 is skipped
        assert insert(cur, "INSERT INTO seq_t SET name = 'g'") == 8
        assert insert(cur, "INSERT INTO seq_t VALUES (DEFAULT, 'h')") == 9
        assert insert(cur, "REPLACE INTO seq_t (name) VALUES ('i')") == 10
        # an explicit value is kept and the sequence moves past it, as MySQL's counter does
        insert(cur, "INSERT INTO seq_t (id, name) VALUES (100, 'x')")
        assert insert(cur, "INSERT INTO seq_t (name) VALUES ('y')") == 101
        cur.execute("PREPARE s FROM 'INSERT INTO seq_t (name) VALUES (?)'")
        assert insert(cur, "EXECUTE s USING 'p'") == 102
        cur.execute("SELECT @@identity")
        assert cur.fetchall() == ((102,),)
        # through the binary protocol (a driver's server-side prepared INSERT), NULL bound for the id
        with PsClient(p.port) as c:
            st = c.prepare("INSERT INTO seq_t (id, name) VALUES (?, ?)")
            assert c.execute(st.stmt_id, [p_null(), p_str("bin")]).kind == "ok"
            last = c.query("SELECT LAST_INSERT_ID()").rows[0]
            assert last[1:1 + last[0]] == b"103"
            c.query("DELETE FROM seq_t WHERE id = 103")
        # every row sits on the node its id hashes to
        for node, rows in on_nodes(backends, "SELECT id FROM seq_t").items():
            assert rows and all(NODES[r[0] % 4] == node for r in rows), (node, rows)
        cur.execute("SELECT id, name FROM seq_t ORDER BY id")
        assert [r[0] for r in cur.fetchall()] == [1, 2, 3, 4, 6, 7, 8, 9, 10, 100, 101, 102]
        # what pydble cannot fill exactly is refused, never guessed
        for bad in ("INSERT INTO seq_t (id, name) VALUES (1 + 1, 'z')",
                    "INSERT INTO seq_t (name) SELECT name FROM seq_t",
                    "INSERT INTO seq_t (name) VALUES ('z') ON DUPLICATE KEY UPDATE name = 'w'"):
            with pytest.raises(pymysql.MySQLError) as e:
                cur.execute(bad)
            assert e.value.args[0] == 1235, (bad, e.value.args)
        # a new sequence starts above what the table holds; the column need not be the sharding column
        insert(cur, "INSERT INTO seq_o (id, k) VALUES (50, 1)")
        assert insert(cur, "INSERT INTO seq_o (k) VALUES (2), (3), (4), (5), (6), (7)") == 51
        cur.execute("SELECT id, k FROM seq_o ORDER BY id")
        assert cur.fetchall() == ((50, 1), (51, 2), (52, 3), (53, 4), (54, 5), (55, 6), (56, 7))
    conn.close()

    # after a crash (kill -9) values go on above every value handed out (the rest of the last block is skipped)
    p.kill()
    p.start()
    conn = p.connect()
    with conn.cursor() as cur:
        got = insert(cur, "INSERT INTO seq_t (name) VALUES ('after restart')")
        assert got > 102
        assert insert(cur, "INSERT INTO seq_o (k) VALUES (8)") > 56
        cur.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM seq_t")
        assert cur.fetchall() == ((13, 13),)
        cur.execute("DROP TABLE seq_t")
        cur.execute("DROP TABLE seq_o")
    conn.close()


def test_bad_increment_column_config_is_one_line(backends: list[Any]) -> None:
    from meta.config import ConfigError, parse_config

    for table, value, problem in (("test", "id", "only a sharding table takes an increment_column, not a global table"),
                                  ("seq_t", 5, "must be a column name"),
                                  ("seq_t", "a.b", "'a.b' is not a column name")):
        cfg = seq_config(backends, instance="pydble-seqbad")
        cfg["schemas"]["schema1"]["tables"][table]["increment_column"] = value
        with pytest.raises(ConfigError) as e:
            parse_config(cfg)
        assert str(e.value) == f"schemas.schema1.tables.{table}.increment_column: {problem}"
    cfg = seq_config(backends, instance="pydble-seqbad")
    cfg["server"]["sequence_block"] = 0
    with pytest.raises(ConfigError, match="server.sequence_block: must be between 1 and 1000000"):
        parse_config(cfg)


SB_SIZE = 2000


def _sysbench(port: int, command: str, *extra: str) -> str:
    """sysbench oltp_read_write with its AUTO_INCREMENT id (no --auto_inc=off): prepare inserts without id."""
    argv = ["sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-host=127.0.0.1", f"--mysql-port={port}",
            "--mysql-user=test", "--mysql-password=111111", "--mysql-db=schema1", "--tables=1",
            f"--table-size={SB_SIZE}", "--rand-type=uniform", *extra, command]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"{' '.join(argv)} exited {res.returncode}:\n{out[-3000:]}"
    assert "FATAL" not in out and "ALERT" not in out, out[-3000:]
    return out


def test_sysbench_prepare_and_run_with_auto_increment(fresh_proxy: Callable[..., ProxyProcess],
                                                      backends: list[Any]) -> None:
    require_tool("sysbench", "sysbench is not installed (apt sysbench)")
    cfg = seq_config(backends, instance="pydble-seqsb")
    cfg["server"]["sequence_block"] = 1000
    cfg["schemas"]["schema1"]["tables"]["sbtest1"] = {"type": "sharding", "nodes": list(NODES),
                                                      "function": "hash-four", "column": "id",
                                                      "increment_column": "id"}
    p = fresh_proxy(cfg)
    p.query("DROP TABLE IF EXISTS sbtest1")
    _sysbench(p.port, "prepare")
    # the rows got ids 1..SB_SIZE from the sequence, each on the node its id hashes to
    assert p.query("SELECT COUNT(*), COUNT(DISTINCT id), MIN(id), MAX(id) FROM sbtest1")[0] == (
        SB_SIZE, SB_SIZE, 1, SB_SIZE)
    for node in NODES:
        idx, db = NODE_DB[node]
        assert backends[idx].query("SELECT COUNT(*) FROM sbtest1 WHERE id MOD 4 <> %s", db,
                                   (NODES.index(node),)) == [(0,)]
    for mode in ("disable", "auto"):
        out = _sysbench(p.port, "run", f"--db-ps-mode={mode}", "--threads=2", "--time=2",
                        "--mysql-ignore-errors=none")
        m = re.search(r"ignored errors:\s+(\d+)", out)
        assert m is not None and m.group(1) == "0", out[-2000:]
    assert p.query("SELECT COUNT(*), COUNT(DISTINCT id) FROM sbtest1")[0] == (SB_SIZE, SB_SIZE)
    p.query("DROP TABLE sbtest1")
