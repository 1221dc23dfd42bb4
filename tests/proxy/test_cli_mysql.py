"""The `mysql` command-line client against the proxy, as a user runs it (batch, script, interactive)."""

from __future__ import annotations

import subprocess
from typing import Iterator

import pytest
from harness import Terminal, require_tool

from wire import drop_after

require_tool("mysql", "the mysql CLI is not installed (apt mariadb-client)")


@pytest.fixture(scope="module", autouse=True)
def _drop_our_tables(proxy) -> Iterator[None]:
    """The configured tables SHOW TABLES is expected to list exist (a configured table never created is
    not listed); the shared backends are left without the tables this module made."""
    made = [(db, t) for db, t in (("schema2", "sing"), ("schema1", "sharding_2_t1"), ("schema1", "sharding_4_t1"))
            if t not in [r[0] for r in proxy.query("SHOW TABLES", database=db)]]
    for db, t in made:   # not listed, yet maybe left on some node by an earlier module: made whole here
        proxy.query(f"DROP TABLE IF EXISTS {t}", database=db)
        proxy.query(f"CREATE TABLE {t} (id INT PRIMARY KEY, name VARCHAR(20))", database=db)
    yield from drop_after(proxy, 'sharding_4_t1', 'cli_e', 'cli_tab')
    for db, t in made:
        proxy.query(f"DROP TABLE IF EXISTS {t}", database=db)


def _mysql(proxy, *args: str, stdin: str | None = None, port: int | None = None, user: str = "test",
           password: str = "111111", timeout: float = 30) -> subprocess.CompletedProcess:
    argv = ["mysql", "--no-defaults", "-h127.0.0.1", f"-P{port or proxy.port}", f"-u{user}",
            *[f"-p{password}"] * bool(password), *args]
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)


def test_batch_query_with_e(proxy) -> None:
    proxy.query("DROP TABLE IF EXISTS cli_e")
    proxy.query("CREATE TABLE cli_e (id INT PRIMARY KEY, name VARCHAR(20))")
    res = _mysql(proxy, "schema1", "-e",
                 "INSERT INTO cli_e VALUES (1,'one'),(2,'two'); SELECT id, name FROM cli_e ORDER BY id; "
                 "SELECT DATABASE(); SELECT @@version_comment")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[:3] == ["id\tname", "1\tone", "2\ttwo"]
    assert lines[3:5] == ["DATABASE()", "schema1"]
    assert lines[5] == "@@version_comment" and "pydble" in lines[6]


def test_sharded_insert_and_merged_read_from_the_cli(proxy) -> None:
    proxy.query("DROP TABLE IF EXISTS sharding_4_t1")
    proxy.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))")
    res = _mysql(proxy, "schema1", "-N", "-e",
                 "INSERT INTO sharding_4_t1 VALUES (1,'a'),(2,'b'),(3,'c'),(4,'d'),(5,'e');"
                 "SELECT COUNT(*), MAX(id) FROM sharding_4_t1;"
                 "SELECT name FROM sharding_4_t1 WHERE id = 3;"
                 "/*!pydble:shardingNode=dn2*/ SELECT id FROM sharding_4_t1 ORDER BY id")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["5\t5", "c", "1", "5"]


def test_wrong_password_and_ungranted_schema(proxy) -> None:
    res = _mysql(proxy, "schema1", "-e", "SELECT 1", password="nope")
    assert res.returncode == 1
    assert "ERROR 1045 (28000)" in res.stderr
    res = _mysql(proxy, "mysql", "-e", "SELECT 1")
    assert res.returncode == 1
    assert "ERROR 1044 (42000)" in res.stderr and "'mysql'" in res.stderr


def test_an_error_stops_the_batch(proxy) -> None:
    res = _mysql(proxy, "schema1", "-N", "-e", "SELECT 1; SELECT * FROM cli_missing_table; SELECT 2")
    assert res.returncode == 1
    assert res.stdout.splitlines() == ["1"]
    assert "ERROR 1146 (42S02)" in res.stderr


def test_script_on_stdin_with_use_and_show_tables(proxy) -> None:
    script = "\n".join([
        "SELECT DATABASE();",
        "use schema2",
        "SELECT DATABASE();",
        "SHOW TABLES;",
        "USE schema1;",
        "SHOW FULL TABLES LIKE 'sharding%';",
        "\\s",
    ]) + "\n"
    res = _mysql(proxy, "schema1", stdin=script)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "DATABASE()\nschema1\nDATABASE()\nschema2\nTables_in_schema2\nsing\n" in out
    assert "Tables_in_schema1 (sharding%)\tTable_type\nsharding_2_t1\tBASE TABLE\nsharding_4_t1\tBASE TABLE" in out
    assert "Current database:\tschema1" in out
    assert "Uptime:" in out  # \s asks COM_STATISTICS


def test_use_of_an_ungranted_schema_keeps_the_session(proxy) -> None:
    res = _mysql(proxy, "schema1", "--force", "-N", stdin="use mysql\nSELECT DATABASE();\n")
    assert "ERROR 1044" in res.stderr
    assert res.stdout.splitlines() == ["schema1"]


def test_interactive_session_with_tab_completion(proxy) -> None:
    """A real terminal: the CLI reads every table's columns (COM_FIELD_LIST) and tab-completes them."""
    proxy.query("DROP TABLE IF EXISTS cli_tab")
    proxy.query("CREATE TABLE cli_tab (cli_col_unique_name INT, other_col INT)")
    proxy.query("INSERT INTO cli_tab VALUES (41, 1)")
    with Terminal(["mysql", "--no-defaults", "-h127.0.0.1", f"-P{proxy.port}", "-utest", "-p111111",
                   "--auto-rehash", "schema1"]) as term:
        term.expect("[schema1]> ")
        term.send("SELECT cli_col_un\t")
        term.expect("ique_name")           # completed from the column list the proxy sent
        term.send(" + 1 AS v FROM cli_tab;\n")
        term.expect("42")
        term.send("use schema2\n")
        term.expect("[schema2]> ")
        term.send("show tables;\n")
        term.expect("sing")
        term.send("quit\n")
        term.expect("Bye")


def test_manager_port_from_the_cli(proxy) -> None:
    res = _mysql(proxy, "-e", "show @@help", port=proxy.manager_port, user="root")
    assert res.returncode == 0, res.stderr
    assert "reload @@metadata" in res.stdout
    res = _mysql(proxy, "-e", "show @@help", port=proxy.manager_port, user="test")
    assert res.returncode == 1 and "ERROR 1045" in res.stderr


@pytest.mark.parametrize("sql", [
    "selec 1",                                        # a typo
    "select (1",                                      # unclosed: MariaDB points at the end
    "select 1,\n2 fron\nplain",                       # the line of the error
    "SELECT * FROM sharding_4_t1 WHERE id = 1 AND name = 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' "
    "ORDER BY id LIMIT 1 2",                          # cut at 80 characters with '...'
    "SELECT id FROM sharding_4_t1 UNION SELECT id FROM sharding_2_t1 ORDER BY id LIMIT x y",
    "PREPARE s FROM 'selec 1'",
    "SELECT id FROM sharding_4_t1 WHERE id IN (1, 2",
    "SELECT id FROM sharding_4_t1\nWHERE id = 1\nORDER BY id LIMIT 1 OFFSET",
])
def test_a_syntax_error_reads_as_mariadbs(proxy, fresh_mariadb, sql: str) -> None:
    """The mysql CLI prints 1064 as the server words it: the manual of the MariaDB server version, the
    statement from where reading failed as written, and its line, which GUI tools use to mark the error."""
    plain = fresh_mariadb("syntax_ref", databases=["schema1"])
    plain.query("CREATE TABLE sharding_4_t1 (id INT PRIMARY KEY, name VARCHAR(20))", "schema1")
    plain.query("CREATE TABLE sharding_2_t1 (id INT PRIMARY KEY, name VARCHAR(20))", "schema1")
    got = _mysql(proxy, "schema1", "-e", sql)
    want = _mysql(proxy, "schema1", "-e", sql, port=plain.port, user="root", password="")
    assert got.returncode == want.returncode == 1
    assert got.stderr.splitlines()[-1] == want.stderr.splitlines()[-1]
