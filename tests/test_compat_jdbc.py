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


@pytest.fixture(scope="module")
def java_check(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """The compiled program and the class path to run it with."""
    jar = require_connector_j("java", "javac")
    d = tmp_path_factory.mktemp("jdbc")
    (d / "JdbcCheck.java").write_text(JAVA)
    subprocess.run(["javac", "-d", str(d), str(d / "JdbcCheck.java")], check=True, capture_output=True, timeout=120)
    return f"{d}:{jar}", d


@pytest.fixture(scope="module")
def jdbc_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-jdbc"))
    cfg["schemas"]["schema1"]["tables"]["jdbc_t"] = {"type": "sharding", "nodes": NODES, "function": "hash-four",
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
