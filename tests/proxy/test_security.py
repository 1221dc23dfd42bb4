"""Security: hashed passwords, read-only users, connection caps, no secrets in logs, no injection."""

from __future__ import annotations

import socket

import pymysql
import pytest
from harness import free_port, proxy_config

HASH_111111 = "*FD571203974BA9AFE270FE62151AE967ECA5E0AA"  # mysql_native_password of '111111'
BACKEND_SECRET = "backend-Pa55"


def _config(backends, **server):
    cfg = proxy_config(backends, free_port(), free_port())
    cfg["server"].update(server)
    cfg["users"] = [
        {"name": "test", "password": HASH_111111, "schemas": ["schema1", "schema2"]},
        {"name": "reader", "password": "r3ad-only-pw", "schemas": ["schema1"], "read_only": True},
        {"name": "capped", "password": "capped-pw", "schemas": ["schema1"], "max_con": 2},
    ]
    cfg["manager_users"] = [{"name": "root", "password": HASH_111111}]
    return cfg


@pytest.fixture(scope="module")
def secured(request, backends):
    """One proxy with hashed passwords, a read-only user and a capped user."""
    from harness import ProxyProcess
    p = ProxyProcess(_config(backends, max_connections=20), release_ports=True)
    p.start()
    request.addfinalizer(p.cleanup)
    p.query("CREATE TABLE IF NOT EXISTS sharding_2_t1 (id INT PRIMARY KEY, v INT)")
    return p


def test_hashed_password_in_the_config_authenticates(secured):
    assert secured.query("SELECT 1") == [(1,)]
    with pytest.raises(pymysql.err.OperationalError) as e:
        secured.connect(password="wrong")
    assert e.value.args[0] == 1045
    with pytest.raises(pymysql.err.OperationalError):
        secured.connect(password=HASH_111111)  # the hash itself is not a password
    conn = secured.manager()
    conn.close()


def test_read_only_user_reads_but_cannot_write(secured):
    secured.query("INSERT INTO sharding_2_t1 VALUES (1, 1) ON DUPLICATE KEY UPDATE v = 1")
    conn = secured.connect(user="reader", password="r3ad-only-pw")
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT v FROM sharding_2_t1 WHERE id = 1")
            assert cur.fetchall() == ((1,),)
            for sql in ("INSERT INTO sharding_2_t1 VALUES (2, 2)", "UPDATE sharding_2_t1 SET v = 5",
                        "DELETE FROM sharding_2_t1", "ALTER TABLE sharding_2_t1 ADD COLUMN x INT",
                        "DROP TABLE sharding_2_t1", "CREATE TABLE ro_new (id INT)"):
                with pytest.raises(pymysql.MySQLError) as e:
                    cur.execute(sql)
                assert e.value.args[0] == 1290, sql
                assert "read only" in e.value.args[1]
    finally:
        conn.close()
    assert secured.query("SELECT v FROM sharding_2_t1 WHERE id = 1") == [(1,)]


def test_per_user_max_con(secured):
    first = [secured.connect(user="capped", password="capped-pw") for _ in range(2)]
    try:
        with pytest.raises(pymysql.MySQLError) as e:
            secured.connect(user="capped", password="capped-pw")
        assert "Too many connections for user 'capped'" in e.value.args[1]
        assert secured.query("SELECT 1") == [(1,)]  # others are not affected
    finally:
        for c in first:
            c.close()
    secured.connect(user="capped", password="capped-pw").close()


def test_max_connections_in_total_refuses_cleanly(secured):
    held = []
    try:
        for _ in range(20):
            held.append(socket.create_connection(("127.0.0.1", secured.port), timeout=5))
            held[-1].recv(4)  # the greeting header: the session exists
        with pytest.raises(pymysql.MySQLError) as e:
            secured.connect()
        assert e.value.args[0] == 1040
    finally:
        for s in held:
            s.close()
    import time
    deadline = time.monotonic() + 10
    while True:
        try:
            assert secured.query("SELECT 1") == [(1,)]
            break
        except pymysql.MySQLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_client_users_cannot_use_the_manager_port(secured):
    with pytest.raises(pymysql.err.OperationalError) as e:
        secured.manager(user="test", password="111111")
    assert e.value.args[0] == 1045


def test_manager_and_hint_input_cannot_reach_backends_as_sql(secured, backends):
    backends[0].query("CREATE TABLE IF NOT EXISTS db3.sentinel (id INT)")
    conn = secured.manager()
    try:
        with conn.cursor() as cur:
            for cmd in ("reload @@metadata where schema='schema1' and table='x`; DROP TABLE db3.sentinel; -- '",
                        "reload @@metadata where table in ('schema1.a`;DROP TABLE db3.sentinel;#')",
                        "check full @@metadata where schema='schema1'' ; DROP TABLE db3.sentinel; --'",
                        "kill @@ddl_lock where schema='schema1' and table='t`; DROP TABLE db3.sentinel'"):
                try:
                    cur.execute(cmd)
                except pymysql.MySQLError:
                    pass
    finally:
        conn.close()
    with pytest.raises(pymysql.MySQLError):
        secured.query("/*!pydble:shardingNode=dn5; DROP TABLE sentinel*/ SELECT 1")
    for hinted in ("SHUTDOWN", "GRANT ALL ON *.* TO x", "SELECT 1; DROP TABLE sentinel"):
        with pytest.raises(pymysql.MySQLError) as e:
            secured.query(f"/*!pydble:shardingNode=dn5*/ {hinted}")
        assert e.value.args[0] in (1235, 1064), hinted
    assert backends[0].query("SHOW TABLES LIKE 'sentinel'", database="db3") == [("sentinel",)]


def test_no_password_or_hash_in_logs(backends, fresh_proxy):
    cfg = _config(backends)
    cfg["db_groups"]["ha_group1"]["password"] = BACKEND_SECRET  # wrong: the backend has none
    p = fresh_proxy(config=cfg)
    for user, pw in (("test", "wrong-guess-pw"), ("reader", "r3ad-only-pw"), ("nobody", "x")):
        try:
            p.connect(user=user, password=pw).close()
        except pymysql.MySQLError:
            pass
    with pytest.raises(pymysql.MySQLError) as e:
        p.query("SELECT * FROM sharding_2_t1")  # ha_group1 refuses pydble's login
    assert BACKEND_SECRET not in e.value.args[1]
    log = p.log_text()
    for secret in ("111111", HASH_111111, HASH_111111[1:], "r3ad-only-pw", "capped-pw", "wrong-guess-pw",
                   BACKEND_SECRET):
        assert secret not in log, secret
