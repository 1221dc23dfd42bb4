"""Compatibility: mysql-connector-python (C extension and pure Python) and mycli's completion, each run
through pydble and against one MariaDB, with the same answers.

mysql-connector-python runs as its own process (tests/clients/connector_session.py): one session of
DDL, batched INSERT, commit, rollback, prepared cursor, dictionary cursor, a duplicate key and
autocommit, compared observation by observation. mycli's completion refresher (the functions mycli
runs in the background after connecting: databases, tables and columns, indexes, enum values,
foreign keys, functions, procedures, character sets, collations) fills a real SQLCompleter.
"""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, missing, proxy_config, require_module

NODES = ["dn1", "dn2", "dn3", "dn4"]
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
SESSION = Path(__file__).resolve().parent / "clients" / "connector_session.py"
NO_CEXT = 3   # the session's exit code when the C extension cannot be loaded
REF_DB = "compat_clients_ref"   # the same tables straight on one MariaDB
MYCLI_DDL = ("CREATE TABLE compat_mycli (id INT PRIMARY KEY, customer_name VARCHAR(40) NOT NULL, "
             "size ENUM('small','large') NOT NULL DEFAULT 'small', placed DATETIME, KEY k_placed (placed))")


@pytest.fixture(scope="module")
def clients_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    """A proxy with this module's sharding tables, and the reference database on backend 1."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-clients"))
    for t in ("compat_connector", "compat_mycli"):
        cfg["schemas"]["schema1"]["tables"][t] = {"type": "sharding", "nodes": NODES, "function": "hash-four",
                                                  "column": "id"}
    backends[0].query(f"DROP DATABASE IF EXISTS {REF_DB}")
    backends[0].query(f"CREATE DATABASE {REF_DB}")
    p = ProxyProcess(cfg, name="proxy-clients", release_ports=True)
    try:
        p.start()
        yield p
    finally:
        p.cleanup()
        backends[0].query(f"DROP DATABASE IF EXISTS {REF_DB}")


def _connector_session(mode: str, port: int, user: str, password: str, database: str) -> list[list[str]]:
    res = subprocess.run([sys.executable, str(SESSION), mode, str(port), user, password, database,
                          "compat_connector"], capture_output=True, text=True, timeout=120)
    if res.returncode == NO_CEXT:
        missing(res.stderr.strip())
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


@pytest.mark.parametrize("mode", ["cext", "pure"])
def test_mysql_connector_python_session_as_on_one_mariadb(clients_proxy: ProxyProcess, backends: list[Any],
                                                           mode: str) -> None:
    connector = require_module("mysql.connector", "mysql-connector-python is not installed (pip install "
                                                  "'pydble[test]')")
    via_proxy = _connector_session(mode, clients_proxy.port, "test", "111111", "schema1")
    direct = _connector_session(mode, backends[0].port, "root", "", REF_DB)
    assert via_proxy == direct
    seen = dict(via_proxy)
    assert seen["connection"].startswith("('CMySQLConnection'" if mode == "cext" else "('MySQLConnection'"), seen
    assert seen["duplicate"] == "(1062, '23000')" and seen["rolled back"] == "[(0,)]"
    # and every row is on the node the sharding function names
    final = [r for (r,) in ast.literal_eval(seen["final ids"])]
    for node, (i, db) in NODE_DB.items():
        ids = sorted(r[0] for r in backends[i].query("SELECT id FROM compat_connector", db))
        assert ids == [x for x in final if x % 4 == NODES.index(node)], (node, connector.__version__)


def _mycli_completer(port: int, user: str, password: str, database: str) -> tuple[Any, dict[str, list[Any]]]:
    """What mycli's completion refresher builds after connecting (every refresher, in mycli's order),
    and the character sets and collations it read (SQLCompleter keeps those in class-wide lists)."""
    from mycli.packages.completion.completion_refresher import CompletionRefresher
    from mycli.packages.completion.sql_completer import SQLCompleter
    from mycli.packages.execution.sql_execute import SQLExecute

    executor = SQLExecute(database, user, password, "127.0.0.1", port, None, "utf8mb4", False, None)
    completer = SQLCompleter()
    try:
        for refresh in CompletionRefresher.refreshers.values():
            refresh(completer, executor)
        lists = {"character_sets": sorted(executor.character_sets()), "collations": sorted(executor.collations())}
    finally:
        executor.close()
    return completer, lists


def _suggest(completer: Any, text: str) -> set[str]:
    from prompt_toolkit.document import Document

    return {c.text for c in completer.get_completions(Document(text, len(text)), None)}


def test_mycli_completion_as_on_one_mariadb(clients_proxy: ProxyProcess, backends: list[Any]) -> None:
    require_module("mycli", "mycli is not installed (pip install 'pydble[test]')")
    clients_proxy.query("DROP TABLE IF EXISTS compat_mycli")
    clients_proxy.query(MYCLI_DDL)
    clients_proxy.query("INSERT INTO compat_mycli (id, customer_name) VALUES (1, 'a'), (2, 'b')")
    backends[0].query(MYCLI_DDL, REF_DB)
    mine, my_lists = _mycli_completer(clients_proxy.port, "test", "111111", "schema1")
    ref, ref_lists = _mycli_completer(backends[0].port, "root", "", REF_DB)
    meta, ref_meta = mine.dbmetadata, ref.dbmetadata
    for kind in ("tables", "indexed_columns", "enum_values"):
        assert meta[kind]["schema1"].get("compat_mycli") == ref_meta[kind][REF_DB]["compat_mycli"], kind
    assert meta["tables"]["schema1"]["compat_mycli"][-4:] == ["id", "customer_name", "size", "placed"]
    assert meta["enum_values"]["schema1"]["compat_mycli"] == {"size": ["small", "large"]}
    for kind in ("functions", "procedures"):   # none here, none there
        assert meta[kind].get("schema1") == ref_meta[kind].get(REF_DB), kind
    # foreign keys: other tests' tables share schema1, so compare this test's tables only
    ours = [r for r in meta["foreign_keys"].get("schema1", {}).get("relations", []) if r[0].startswith("compat_")]
    assert ours == [r for r in ref_meta["foreign_keys"].get(REF_DB, {}).get("relations", [])
                    if r[0].startswith("compat_")]
    assert {"schema1", "schema2"} <= set(mine.databases) and not {"db1", "db2", "mysql"} & set(mine.databases)
    assert my_lists == ref_lists and any(r[0] == "utf8mb4" for r in my_lists["character_sets"])
    # what a user sees when pressing tab
    assert "compat_mycli" in _suggest(mine, "SELECT * FROM compat_my")
    assert "customer_name" in _suggest(mine, "SELECT cust")
    assert _suggest(mine, "SELECT * FROM compat_mycli WHERE cust") >= {"customer_name"}
