"""COM_CHANGE_USER byte by byte: the auth switch, the sequence ids, the reset, the refusal.

(tests/test_compat_node.py drives it with mysql2's `changeUser`; here the packets are written by hand.)
"""

from __future__ import annotations

import struct
from typing import Any

from harness import free_port, proxy_config
from wire import BASE_CAPS, RawClient, scramble, start_proxy

COM_CHANGE_USER = 0x11
CLIENT_PLUGIN_AUTH = 1 << 19


def _change_user(user: str, auth: bytes, db: str, plugin: str, collation: int = 45) -> bytes:
    return (bytes((COM_CHANGE_USER,)) + user.encode() + b"\x00" + bytes((len(auth),)) + auth + db.encode() + b"\x00"
            + struct.pack("<H", collation) + plugin.encode() + b"\x00")


def _rows(c: RawClient, sql: str) -> list[list[bytes | None]]:
    c.query(sql)
    return c.read_result().sets[0][1]


def test_change_user_through_an_auth_switch_resets_the_session(backends: list[Any]) -> None:
    cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-cu")
    cfg["users"] = [{"name": "test", "password": "111111", "schemas": ["schema1", "schema2"], "max_con": 1},
                    {"name": "other", "password": "222222", "schemas": ["schema2"], "max_con": 1}]
    p = start_proxy(cfg, "proxy-cu")
    try:
        with RawClient(p.port) as c:
            assert c.login(caps=BASE_CAPS | CLIENT_PLUGIN_AUTH).kind == "ok"
            c.query("SET @v = 'kept?'")
            assert c.read_packet().kind == "ok"
            # a client answering with another plugin is switched to mysql_native_password (seq 1, 2, 3)
            c.command(_change_user("other", b"", "schema2", "caching_sha2_password", collation=224))
            switch = c.read_packet()
            assert switch.seq == 1 and switch.payload.startswith(b"\xfemysql_native_password\x00")
            salt = switch.payload[len(b"\xfemysql_native_password\x00"):].rstrip(b"\x00")
            c.send_packet(2, scramble("222222", salt))
            ok = c.read_packet()
            assert (ok.seq, ok.kind) == (3, "ok")
            assert _rows(c, "SELECT USER(), DATABASE()") == [[b"other@127.0.0.1", b"schema2"]]
            assert _rows(c, "SELECT @v, @@collation_connection") == [[None, b"utf8mb4_unicode_ci"]]
            # back to a user whose max_con is 1: this connection's own login does not count twice
            c.command(_change_user("test", scramble("111111", c.greeting.salt[:20]), "schema1",
                                   "mysql_native_password"))
            ok = c.read_packet()
            assert (ok.seq, ok.kind) == (1, "ok"), ok.payload
            assert _rows(c, "SELECT USER(), DATABASE()") == [[b"test@127.0.0.1", b"schema1"]]
            # a schema the user may not use: 1044, and the connection closes
            c.command(_change_user("other", scramble("222222", c.greeting.salt[:20]), "schema1",
                                   "mysql_native_password"))
            err = c.read_packet()
            assert err.err_code == 1044 and "to database 'schema1'" in err.err_message
            assert c.closed_by_server()
        # the refused session left nothing behind: each max_con=1 user has exactly one login again
        for user, password, db in (("test", "111111", "schema1"), ("other", "222222", "schema2")):
            with RawClient(p.port) as c, RawClient(p.port) as c2:
                assert c.login(user, password, db).kind == "ok"
                assert c2.login(user, password, db).err_code == 1203
    finally:
        p.cleanup()
