"""Compatibility: plain JDBC with MariaDB Connector/J (Debian libmariadb-java) through the proxy.

A small Java program (compiled with javac here) checks what Connector/J derives from the status
flags (getAutoCommit, commit only when IN_TRANS), transactions over several nodes, server-side
prepared statements (useServerPrepStmts: the binary protocol) and both URL schemes the jar accepts.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, proxy_config, require_connector_j

NODES = ["dn1", "dn2", "dn3", "dn4"]
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}

JAVA = r'''
import java.math.BigDecimal;
import java.sql.*;

public class JdbcCheck {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
        System.out.println("ok " + what);
    }

    static int count(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            rs.next();
            return rs.getInt(1);
        }
    }

    public static void main(String[] a) throws Exception {
        String hostPort = a[0];
        String base = "//" + hostPort + "/schema1";
        try (Connection c = DriverManager.getConnection("jdbc:mysql:" + base, "test", "111111");
             Connection other = DriverManager.getConnection("jdbc:mariadb:" + base, "test", "111111")) {
            check(c.getAutoCommit(), "autocommit reported on by the AUTOCOMMIT flag");
            try (Statement s = c.createStatement()) {
                s.execute("DROP TABLE IF EXISTS jdbc_t");
                s.execute("CREATE TABLE jdbc_t (id INT PRIMARY KEY, name VARCHAR(30), amount DECIMAL(10,2), "
                        + "at DATETIME)");
            }
            c.setAutoCommit(false);
            check(!c.getAutoCommit(), "autocommit off");
            try (PreparedStatement ps = c.prepareStatement("INSERT INTO jdbc_t (id, name) VALUES (?, ?)")) {
                for (int i = 1; i <= 8; i++) {
                    ps.setInt(1, i);
                    ps.setString(2, "n" + i);
                    ps.addBatch();
                }
                ps.executeBatch();
            }
            check(count(other, "SELECT COUNT(*) FROM jdbc_t") == 0, "uncommitted rows invisible to others");
            c.commit();
            check(count(other, "SELECT COUNT(*) FROM jdbc_t") == 8, "commit reached every node");
            try (Statement s = c.createStatement()) {
                s.executeUpdate("DELETE FROM jdbc_t WHERE id IN (1, 2)");
            }
            c.rollback();
            check(count(other, "SELECT COUNT(*) FROM jdbc_t") == 8, "rollback undid the delete on its nodes");
            c.setAutoCommit(true);
            check(c.getAutoCommit(), "autocommit back on");
        }

        String sp = "jdbc:mysql:" + base + "?useServerPrepStmts=true&cachePrepStmts=false";
        try (Connection c = DriverManager.getConnection(sp, "test", "111111")) {
            try (PreparedStatement ps = c.prepareStatement(
                    "INSERT INTO jdbc_t (id, name, amount, at) VALUES (?, ?, ?, ?)")) {
                for (int i = 100; i < 110; i++) {
                    ps.setInt(1, i);
                    if (i % 3 == 0) ps.setNull(2, Types.VARCHAR); else ps.setString(2, "it's \\ " + i);
                    ps.setBigDecimal(3, new BigDecimal(i + ".25"));
                    ps.setTimestamp(4, Timestamp.valueOf("2024-05-06 07:08:09"));
                    ps.addBatch();
                }
                int[] r = ps.executeBatch();
                check(r.length == 10, "server-side prepared batch");
            }
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT id, name, amount, at FROM jdbc_t WHERE id = ?")) {
                ps.setInt(1, 104);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "binary row found by its sharding key");
                    check(rs.getInt(1) == 104, "int column");
                    check("it's \\ 104".equals(rs.getString(2)), "string column with quote and backslash");
                    check(new BigDecimal("104.25").equals(rs.getBigDecimal(3)), "decimal column");
                    check(Timestamp.valueOf("2024-05-06 07:08:09").equals(rs.getTimestamp(4)), "datetime column");
                    check(!rs.next(), "one row");
                }
                ps.setInt(1, 105);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next() && rs.getInt(1) == 105, "re-executed with remembered types");
                }
            }
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT COUNT(*), SUM(amount) FROM jdbc_t WHERE id BETWEEN ? AND ?")) {
                ps.setInt(1, 100);
                ps.setInt(2, 109);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    check(rs.getLong(1) == 10, "scattered prepared count");
                    check(new BigDecimal("1047.50").equals(rs.getBigDecimal(2)), "scattered prepared sum");
                }
            }
            ResultSetMetaData md = c.prepareStatement("SELECT id, amount FROM jdbc_t WHERE id = ?").getMetaData();
            check(md.getColumnCount() == 2 && md.getPrecision(2) == 10 && md.getScale(2) == 2,
                  "PREPARE column definitions (precision and scale)");
        }
        System.out.println("ALL OK");
    }
}
'''


META_JAVA = r"""
import java.sql.*;
import java.util.*;

public class JdbcMeta {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
        System.out.println("ok " + what);
    }

    static List<String> col(ResultSet rs, String name) throws SQLException {
        List<String> out = new ArrayList<>();
        while (rs.next()) out.add(rs.getString(name));
        rs.close();
        return out;
    }

    static String one(Connection c, String sql) throws SQLException {
        try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
            return rs.next() ? rs.getString(1) : null;
        }
    }

    static void update(Connection c, String table, int id, int newId, boolean insert) throws SQLException {
        try (Statement s = c.createStatement(ResultSet.TYPE_FORWARD_ONLY, ResultSet.CONCUR_UPDATABLE);
             ResultSet rs = s.executeQuery("SELECT id, name FROM " + table + " WHERE id = " + id)) {
            check(rs.getMetaData().getCatalogName(1).equals("schema1"), table + ": result columns name schema1");
            check(rs.getConcurrency() == ResultSet.CONCUR_UPDATABLE, table + ": result set is updatable");
            check(rs.next(), table + ": row found");
            if (!insert) {
                rs.updateString("name", "changed");
                rs.updateRow();
            } else {
                rs.moveToInsertRow();
                rs.updateInt("id", newId);
                rs.updateString("name", "inserted");
                rs.insertRow();  // Connector/J 2.7 sends INSERT ... RETURNING to MariaDB 10.5+
            }
        }
        if (!insert) {
            check("changed".equals(one(c, "SELECT name FROM " + table + " WHERE id = " + id)), table + ": updateRow");
        } else {
            check("inserted".equals(one(c, "SELECT name FROM " + table + " WHERE id = " + newId)),
                  table + ": insertRow");
        }
    }

    public static void main(String[] a) throws Exception {
        try (Connection c = DriverManager.getConnection("jdbc:mariadb://" + a[0] + "/schema1", "test", "111111")) {
            if (a.length > 1) {  // insertRow on the tables the first run made
                update(c, "jdbc_u", 3, 10, true);      // sharding table: the row goes to its node
                update(c, "jm_parent", 1, 2, true);    // single-node table
                System.out.println("ALL OK");
                return;
            }
            try (Statement s = c.createStatement()) {
                s.execute("DROP TABLE IF EXISTS jm_child");
                s.execute("DROP TABLE IF EXISTS jm_parent");
                s.execute("DROP TABLE IF EXISTS jdbc_u");
                s.execute("CREATE TABLE jdbc_u (id INT PRIMARY KEY, name VARCHAR(30))");
                s.execute("CREATE TABLE jm_parent (id INT PRIMARY KEY, name VARCHAR(30))");
                s.execute("CREATE TABLE jm_child (id INT PRIMARY KEY, pid INT, KEY k_pid (pid), "
                        + "CONSTRAINT fk_jm FOREIGN KEY (pid) REFERENCES jm_parent (id))");
                s.execute("INSERT INTO jdbc_u VALUES (1, 'a'), (2, 'b'), (3, 'c'), (4, 'd')");
                s.execute("INSERT INTO jm_parent VALUES (1, 'p')");
            }
            DatabaseMetaData md = c.getMetaData();
            List<String> cats = col(md.getCatalogs(), "TABLE_CAT");
            check(cats.equals(Arrays.asList("schema1", "schema2")), "getCatalogs: the logical schemas " + cats);
            List<String> tables = col(md.getTables("schema1", null, "%", new String[] {"TABLE"}), "TABLE_NAME");
            check(tables.containsAll(Arrays.asList("jdbc_u", "jm_parent", "jm_child")), "getTables " + tables);
            check(new HashSet<>(tables).size() == tables.size(), "getTables: each sharding table once");
            check(col(md.getTables("schema1", null, "jdbc_u", null), "TABLE_CAT").equals(Arrays.asList("schema1")),
                  "getTables: TABLE_CAT is the logical schema");
            List<String> cols = col(md.getColumns("schema1", null, "jdbc_u", "%"), "COLUMN_NAME");
            check(cols.equals(Arrays.asList("id", "name")), "getColumns " + cols);
            check(col(md.getPrimaryKeys("schema1", null, "jdbc_u"), "COLUMN_NAME").equals(Arrays.asList("id")),
                  "getPrimaryKeys");
            List<String> idx = col(md.getIndexInfo("schema1", null, "jm_child", false, false), "INDEX_NAME");
            check(idx.contains("PRIMARY") && idx.contains("k_pid"), "getIndexInfo " + idx);
            try (ResultSet rs = md.getImportedKeys("schema1", null, "jm_child")) {
                check(rs.next(), "getImportedKeys finds the foreign key");
                check("schema1".equals(rs.getString("PKTABLE_CAT")) && "jm_parent".equals(rs.getString("PKTABLE_NAME"))
                      && "id".equals(rs.getString("PKCOLUMN_NAME")) && "pid".equals(rs.getString("FKCOLUMN_NAME"))
                      && "schema1".equals(rs.getString("FKTABLE_CAT")), "getImportedKeys columns");
                check(!rs.next(), "one imported key");
            }
            update(c, "jdbc_u", 3, 10, false);      // sharding table
            update(c, "jm_parent", 1, 2, false);    // single-node table (the schema's default node)
        }
        System.out.println("ALL OK");
    }
}
"""


@pytest.fixture(scope="module")
def java_check(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The compiled program and the class path to run it with."""
    jar = require_connector_j("java", "javac")
    d = tmp_path_factory.mktemp("jdbc")
    (d / "JdbcCheck.java").write_text(JAVA)
    (d / "JdbcMeta.java").write_text(META_JAVA)
    subprocess.run(["javac", "-d", str(d), str(d / "JdbcCheck.java"), str(d / "JdbcMeta.java")], check=True,
                   capture_output=True, timeout=120)
    return f"{d}:{jar}", d


@pytest.fixture(scope="module")
def jdbc_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-jdbc"))
    cfg["schemas"]["schema1"]["tables"]["jdbc_t"] = {"type": "sharding", "nodes": NODES, "function": "hash-four",
                                                     "column": "id"}
    cfg["schemas"]["schema1"]["tables"]["jdbc_u"] = {"type": "sharding", "nodes": NODES, "function": "hash-four",
                                                     "column": "id"}
    p = ProxyProcess(cfg, name="proxy-jdbc", release_ports=True)
    try:
        p.start()
        yield p
    finally:
        p.cleanup()


def test_connector_j_plain_jdbc(java_check: tuple[str, Path], jdbc_proxy: ProxyProcess,
                                backends: list[Any]) -> None:
    cp, _ = java_check
    res = subprocess.run(["java", "-cp", cp, "JdbcCheck", f"127.0.0.1:{jdbc_proxy.port}"],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0 and "ALL OK" in res.stdout, res.stdout + res.stderr[-4000:]
    total = 0
    for node, (i, db) in NODE_DB.items():
        ids = [r[0] for r in backends[i].query("SELECT id FROM jdbc_t", db)]
        assert all(x % 4 == NODES.index(node) for x in ids)
        total += len(ids)
    assert total == 18


def _run_java(cp: str, *args: str) -> None:
    res = subprocess.run(["java", "-cp", cp, *args], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0 and "ALL OK" in res.stdout, res.stdout + res.stderr[-4000:]


def test_connector_j_metadata_and_updatable_result_sets(java_check: tuple[str, Path], jdbc_proxy: ProxyProcess,
                                                        backends: list[Any]) -> None:
    """DatabaseMetaData sees the logical schemas; an updatable ResultSet's updateRow writes through pydble."""
    _run_java(java_check[0], "JdbcMeta", f"127.0.0.1:{jdbc_proxy.port}")
    i, db = NODE_DB[NODES[3 % 4]]
    assert backends[i].query("SELECT name FROM jdbc_u WHERE id = 3", db) == [("changed",)]


def test_connector_j_updatable_result_set_insert_row(java_check: tuple[str, Path], jdbc_proxy: ProxyProcess,
                                                     backends: list[Any]) -> None:
    """insertRow: the new row lands on its node (the driver writes it with INSERT ... RETURNING)."""
    _run_java(java_check[0], "JdbcMeta", f"127.0.0.1:{jdbc_proxy.port}")
    _run_java(java_check[0], "JdbcMeta", f"127.0.0.1:{jdbc_proxy.port}", "insert")
    for node, (i, db) in NODE_DB.items():
        rows = backends[i].query("SELECT id FROM jdbc_u WHERE id = 10", db)
        assert rows == ([(10,)] if NODES.index(node) == 10 % 4 else [])
