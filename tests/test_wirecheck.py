"""The wire checker itself: it accepts well-formed conversations and finds each kind of violation.

Byte streams written from the protocol documentation are fed to the sans-I/O checker; the last test
checks that the proxies of the integration tests really are behind a checking relay.
"""

from __future__ import annotations

import struct

import pytest

from harness.wirecheck import WireChecker, take_violations

CAPS = (1 << 9) | (1 << 15) | (1 << 16) | (1 << 17) | (1 << 19)   # PROTOCOL_41 ... PLUGIN_AUTH, no DEPRECATE_EOF


def pkt(seq: int, payload: bytes) -> bytes:
    return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload


def ok(status: int = 2) -> bytes:
    return b"\x00\x00\x00" + struct.pack("<HH", status, 0)


def eof(status: int = 2) -> bytes:
    return b"\xfe" + struct.pack("<HH", 0, status)


def err(code: int, state: bytes = b"HY000", msg: bytes = b"boom") -> bytes:
    return b"\xff" + struct.pack("<H", code) + b"#" + state + msg


def coldef(name: bytes = b"a") -> bytes:
    s = b"".join(bytes([len(v)]) + v for v in (b"def", b"s", b"t", b"t", name, name))
    return s + b"\x0c" + struct.pack("<HIBHB", 45, 10, 253, 0, 0) + b"\x00\x00"


def logged_in() -> WireChecker:
    c = WireChecker("unit")
    greeting = b"\x0a" + b"10.11.0-MariaDB\x00" + struct.pack("<I", 1) + b"12345678\x00" + b"\xff\xf7" + b"\x2d" \
        + struct.pack("<H", 2) + b"\x00" * 13
    c.server(pkt(0, greeting))
    c.client(pkt(1, struct.pack("<IIB", CAPS, 1 << 24, 45) + b"\x00" * 23 + b"test\x00\x00"))
    c.server(pkt(2, ok()))
    return c


def query(c: WireChecker, sql: str, *answer: bytes) -> list[str]:
    c.client(pkt(0, b"\x03" + sql.encode()))
    for seq, p in enumerate(answer, 1):
        c.server(pkt(seq, p))
    return c.violations


@pytest.fixture(autouse=True)
def _forget_unit_violations():
    yield
    take_violations()   # what these tests inject must not fail them through the conftest check


def test_a_well_formed_conversation_has_no_violation() -> None:
    c = logged_in()
    assert query(c, "SELECT a FROM t", b"\x01", coldef(), eof(), b"\x011", b"\x012", eof()) == []
    assert query(c, "BEGIN", ok(3)) == []
    assert query(c, "UPDATE t SET a = 1; SELECT 1", ok(3 | 8), b"\x01", coldef(), eof(3), b"\x011", eof(3)) == []
    assert query(c, "COMMIT", ok(2)) == []
    assert query(c, "INSERT INTO t VALUES (1)", err(1062, b"23000", b"Duplicate entry")) == []
    assert c.packets == 17   # with the greeting and the login OK


@pytest.mark.parametrize("answer, found", [
    ((err(2013, b"HY000", b"Lost connection"),), "client-library code 2013"),
    ((ok(), ok()), "packet no command asked for"),
    ((b"\x01", coldef(), b"\xfe\x00\x00", b"\x011", eof()), "EOF packet must be 0xFE and 5 bytes"),
    ((b"\x01", b"\x03def\x00", eof(), eof()), "length-encoded integer"),
    ((b"\xff\x28\x04boom",), "SQLSTATE"),
    ((b"\x00\x00\x00\x02",), "OK packet too short"),
    ((ok(3),), "IN_TRANS set in autocommit mode"),
    ((ok(0),), "AUTOCOMMIT turned off"),
])
def test_each_kind_of_violation_is_found(answer: tuple[bytes, ...], found: str) -> None:
    c = logged_in()
    violations = query(c, "SELECT a FROM t", *answer)
    assert violations and found in violations[0], violations


def test_a_wrong_sequence_id_is_found() -> None:
    c = logged_in()
    c.client(pkt(0, b"\x03SELECT 1"))
    c.server(pkt(2, ok()))
    assert "sequence id 2, expected 1" in c.violations[0]


def test_more_results_without_a_next_result_is_found() -> None:
    c = logged_in()
    query(c, "UPDATE t SET a = 1", ok(2 | 8))
    query(c, "SELECT 1", ok())   # the client's next answer read as the first one's continuation
    assert c.violations and "sequence id" in c.violations[0]


def test_in_trans_cleared_by_a_plain_update_is_found() -> None:
    c = logged_in()
    query(c, "BEGIN", ok(3))
    assert query(c, "UPDATE t SET a = 2", ok(2)) and "IN_TRANS cleared" in c.violations[0]


def test_prepare_and_binary_execute() -> None:
    c = logged_in()
    c.client(pkt(0, b"\x16SELECT a FROM t WHERE id = ?"))
    for seq, p in enumerate((b"\x00" + struct.pack("<IHHBH", 7, 1, 1, 0, 0), coldef(b"?"), eof(), coldef(),
                             eof()), 1):
        c.server(pkt(seq, p))
    c.client(pkt(0, b"\x17" + struct.pack("<IBI", 7, 0, 1)))
    for seq, p in enumerate((b"\x01", coldef(), eof(), b"\x00\x00\x011", eof()), 1):
        c.server(pkt(seq, p))
    assert c.violations == []
    c.client(pkt(0, b"\x17" + struct.pack("<IBI", 7, 0, 1)))
    for seq, p in enumerate((b"\x01", coldef(), eof(), b"\x011", eof()), 1):   # a text row in a binary result
        c.server(pkt(seq, p))
    assert "binary row" in c.violations[0]


def test_the_integration_proxies_are_behind_the_checker(proxy) -> None:
    assert proxy.port != proxy.proxy_port
    assert proxy.query("SELECT 1") == [(1,)]


def test_pipelined_commands_are_answered_in_order() -> None:
    c = logged_in()
    c.client(pkt(0, b"\x03SELECT 1") + pkt(0, b"\x19\x01\x00\x00\x00") + pkt(0, b"\x03DO 1"))  # STMT_CLOSE: no answer
    c.server(pkt(1, b"\x01") + pkt(2, coldef()) + pkt(3, eof()) + pkt(4, b"\x011") + pkt(5, eof()) + pkt(1, ok()))
    assert c.violations == [] and not c.answers
