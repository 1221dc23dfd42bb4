"""Byte-level tests of the connection phase (proxy/wire/handshake.py).

Real bytes: a HandshakeV10 captured from MariaDB 10.11.19, and the HandshakeResponse41 that
PyMySQL 1.2.4 and the `mysql` CLI (MariaDB 10.11 / libmariadb 3.3.20) sent back to
`build_greeting(7, "10.11.19-MariaDB", b"ABCDEFGHIJKLMNOPQRST")` with password 111111. The live
tests at the end repeat that capture against a tiny asyncio server.
"""

from __future__ import annotations

import asyncio
import hashlib
import struct

import pytest
from harness import require_tool
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import constants as C
from proxy.wire.handshake import (
    HandshakeResponse,
    ServerGreeting,
    build_auth_switch,
    build_greeting,
    build_handshake_response,
    is_ssl_request,
    native_password_hash,
    parse_change_user,
    parse_auth_switch,
    parse_greeting,
    parse_handshake_response,
    parse_stored_password,
    scramble_native_password,
    verify_native_password,
)
from proxy.wire.messages import err_packet
from proxy.wire.packets import ProtocolError, frame


def _h(s: str) -> bytes:
    return bytes.fromhex(s)


SALT = b"ABCDEFGHIJKLMNOPQRST"
PASSWORD_111111_HASH = "*FD571203974BA9AFE270FE62151AE967ECA5E0AA"  # MySQL's PASSWORD('111111')

# -- greeting --------------------------------------------------------------------------------------

# MariaDB 10.11.19's HandshakeV10 (payload; the header was 64 00 00 00)
MARIADB_GREETING = _h("""
    0a 35 2e 35 2e 35 2d 31 30 2e 31 31 2e 31 39 2d 4d 61 72 69 61 44 42 2d 30 2b 64 65 62 31 32 75 31 00
    2d 00 00 00
    35 63 76 45 34 75 71 57
    00
    fe f7
    2d
    02 00
    ff 81
    15
    00 00 00 00 00 00 1d 00 00 00
    42 22 24 2c 52 36 59 3c 5f 49 32 5d 00
    6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00
""")

# The HandshakeV10 example of the MySQL documentation: 5.5.2-m2, no PLUGIN_AUTH (upper caps 00 00)
DOC_GREETING = _h("""
    36 00 00 00 0a 35 2e 35 2e 32 2d 6d 32 00 52 00
    00 00 22 3d 4e 50 29 75 39 56 00 ff ff 08 02 00
    00 00 00 00 00 00 00 00 00 00 00 00 00 29 64 40
    52 5c 55 78 7a 7c 21 29 4b 00
""")


def test_build_greeting_bytes() -> None:
    g = build_greeting(7, "10.11.19-MariaDB", SALT, capabilities=0x013FA70F, charset=45, status=0x0002)
    assert g == _h("""
        0a
        31 30 2e 31 31 2e 31 39 2d 4d 61 72 69 61 44 42 00
        07 00 00 00
        41 42 43 44 45 46 47 48
        00
        0f a7
        2d
        02 00
        3f 01
        15
        00 00 00 00 00 00 00 00 00 00
        49 4a 4b 4c 4d 4e 4f 50 51 52 53 54 00
        6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00
    """)


def test_build_greeting_defaults_and_wide_connection_id() -> None:
    g = parse_greeting(build_greeting(0x1_0000_0005, "5.7.21-pydble", SALT))
    assert g == ServerGreeting("5.7.21-pydble", 5, SALT, C.SERVER_CAPABILITIES,
                               C.CHARSET_UTF8MB4_GENERAL_CI, C.STATUS_AUTOCOMMIT, C.NATIVE_PASSWORD)


@pytest.mark.parametrize("caps", [C.SERVER_CAPABILITIES, C.SERVER_CAPABILITIES & ~C.DEPRECATE_EOF, 0xFFFFFFFF])
@pytest.mark.parametrize("status", [0, C.STATUS_AUTOCOMMIT, C.STATUS_IN_TRANS | C.STATUS_AUTOCOMMIT])
def test_greeting_round_trip(caps: int, status: int) -> None:
    salt = bytes(range(0x21, 0x21 + 20))
    g = parse_greeting(build_greeting(123456, "10.6.5-MariaDB-log", salt, caps, C.CHARSET_LATIN1, status))
    assert g == ServerGreeting("10.6.5-MariaDB-log", 123456, salt, caps, C.CHARSET_LATIN1, status,
                               C.NATIVE_PASSWORD)


def test_parse_mariadb_greeting() -> None:
    g = parse_greeting(MARIADB_GREETING)
    assert g.version == "5.5.5-10.11.19-MariaDB-0+deb12u1"
    assert g.connection_id == 0x2D
    assert g.salt == b'5cvE4uqWB"$,R6Y<_I2]' and len(g.salt) == 20
    assert g.capabilities == 0x81FFF7FE
    assert not g.capabilities & C.LONG_PASSWORD  # MariaDB clears CLIENT_MYSQL
    assert g.capabilities & C.DEPRECATE_EOF and g.capabilities & C.PLUGIN_AUTH
    assert g.charset == C.CHARSET_UTF8MB4_GENERAL_CI
    assert g.status == C.STATUS_AUTOCOMMIT
    assert g.auth_plugin == C.NATIVE_PASSWORD


def test_parse_documentation_greeting() -> None:
    assert DOC_GREETING[:4] == _h("36 00 00 00") and len(DOC_GREETING) == 4 + 0x36
    g = parse_greeting(DOC_GREETING[4:])
    assert g == ServerGreeting("5.5.2-m2", 82, b'"=NP)u9V)d@R\\Uxz|!)K', 0xFFFF, 8, 2, C.NATIVE_PASSWORD)


def test_parse_greeting_without_plugin_name_terminator() -> None:
    # some servers end the plugin name at the end of the packet instead of with a NUL
    g = parse_greeting(MARIADB_GREETING[:-1])
    assert g.auth_plugin == C.NATIVE_PASSWORD


def test_parse_greeting_old_short_form() -> None:
    # protocol 10 without the optional part (nothing after the lower capability bytes)
    p = _h("0a 34 2e 31 00 01 00 00 00 61 62 63 64 65 66 67 68 00 00 82")
    g = parse_greeting(p)
    assert g.version == "4.1" and g.connection_id == 1 and g.salt == b"abcdefgh"
    assert g.capabilities == 0x8200 and g.charset == 0 and g.status == 0


def test_parse_greeting_refusals() -> None:
    with pytest.raises(ProtocolError):
        parse_greeting(b"")
    with pytest.raises(ProtocolError, match="refused"):
        parse_greeting(err_packet(1130, "HY000", "Host is not allowed to connect"))
    with pytest.raises(ProtocolError, match="protocol version 9"):
        parse_greeting(b"\x09" + MARIADB_GREETING[1:])


@pytest.mark.parametrize("greeting", [MARIADB_GREETING, DOC_GREETING[4:], build_greeting(1, "8.0", SALT)])
def test_parse_greeting_every_prefix_raises_only_protocol_error(greeting: bytes) -> None:
    for cut in range(len(greeting)):
        try:
            parse_greeting(greeting[:cut])
        except ProtocolError:
            pass


def test_parse_greeting_non_utf8_plugin_name() -> None:
    bad = MARIADB_GREETING[:-22] + b"\xff\xfe\x00"
    try:
        g = parse_greeting(bad)
    except ProtocolError:
        return
    assert g.auth_plugin != C.NATIVE_PASSWORD


# -- handshake response ----------------------------------------------------------------------------

# The HandshakeResponse41 example of the MySQL documentation (user "pam", database "test")
DOC_RESPONSE = _h("""
    54 00 00 01 8d a6 0f 00 00 00 00 01 08 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    00 00 00 00 70 61 6d 00 14 ab 09 ee f6 bc b1 32 3e 61 14 38 65 c0 99 1d 95 7d 75 d4 47 74 65 73
    74 00 6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00
""")

# The HandshakeResponse320 example of the MySQL documentation: a pre-4.1 client
DOC_RESPONSE_320 = _h("11 00 00 01 85 24 00 00 00 6f 6c 64 00 47 44 53 43 51 59 52 5f")

# PyMySQL 1.2.4: pymysql.connect(user="test", password="111111", database="db1")
PYMYSQL_RESPONSE = _h("""
    0d a2 3a 00 ff ff ff 00 2d 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    74 65 73 74 00
    14 95 ec 18 e3 16 a5 9b 3b 2b 98 b4 93 f9 cf de e2 69 15 1f dc
    64 62 31 00
    6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00
    36 0c 5f 63 6c 69 65 6e 74 5f 6e 61 6d 65 07 70 79 6d 79 73 71 6c 0f 5f 63 6c 69 65 6e 74 5f 76
    65 72 73 69 6f 6e 05 31 2e 32 2e 34 04 5f 70 69 64 05 31 37 33 30 35
""")

# mysql -utest -p111111 db1 (MariaDB client 10.11.19)
MYSQL_CLI_RESPONSE = _h("""
    8d a2 bf 00 00 00 10 00 21 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    74 65 73 74 00
    14 95 ec 18 e3 16 a5 9b 3b 2b 98 b4 93 f9 cf de e2 69 15 1f dc
    64 62 31 00
    6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00
    7f 03 5f 6f 73 05 4c 69 6e 75 78 0c 5f 63 6c 69 65 6e 74 5f 6e 61 6d 65 0a 6c 69 62 6d 61 72 69
    61 64 62 04 5f 70 69 64 05 31 37 33 35 31 0f 5f 63 6c 69 65 6e 74 5f 76 65 72 73 69 6f 6e 06 33
    2e 33 2e 32 30 09 5f 70 6c 61 74 66 6f 72 6d 06 78 38 36 5f 36 34 0c 70 72 6f 67 72 61 6d 5f 6e
    61 6d 65 05 6d 79 73 71 6c 0c 5f 73 65 72 76 65 72 5f 68 6f 73 74 09 31 32 37 2e 30 2e 30 2e 31
""")

# mysql -uroot (no password, no database)
MYSQL_CLI_ROOT_RESPONSE = _h("""
    85 a2 bf 00 00 00 10 00 21 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
    72 6f 6f 74 00
    00
    6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00
    7f 03 5f 6f 73 05 4c 69 6e 75 78 0c 5f 63 6c 69 65 6e 74 5f 6e 61 6d 65 0a 6c 69 62 6d 61 72 69
    61 64 62 04 5f 70 69 64 05 31 37 33 35 33 0f 5f 63 6c 69 65 6e 74 5f 76 65 72 73 69 6f 6e 06 33
    2e 33 2e 32 30 09 5f 70 6c 61 74 66 6f 72 6d 06 78 38 36 5f 36 34 0c 70 72 6f 67 72 61 6d 5f 6e
    61 6d 65 05 6d 79 73 71 6c 0c 5f 73 65 72 76 65 72 5f 68 6f 73 74 09 31 32 37 2e 30 2e 30 2e 31
""")

SCRAMBLE_111111_ABCD = _h("95 ec 18 e3 16 a5 9b 3b 2b 98 b4 93 f9 cf de e2 69 15 1f dc")

LIBMARIADB_ATTRS = {"_os": "Linux", "_client_name": "libmariadb", "_client_version": "3.3.20",
                    "_platform": "x86_64", "program_name": "mysql", "_server_host": "127.0.0.1"}


def test_parse_documentation_response() -> None:
    assert DOC_RESPONSE[:4] == _h("54 00 00 01") and len(DOC_RESPONSE) == 4 + 0x54
    r = parse_handshake_response(DOC_RESPONSE[4:])
    assert r.capabilities == 0x000FA68D
    assert r.max_packet == 16 << 20
    assert r.charset == C.CHARSET_LATIN1
    assert r.user == "pam"
    assert r.auth_response == _h("ab 09 ee f6 bc b1 32 3e 61 14 38 65 c0 99 1d 95 7d 75 d4 47")
    assert r.database == "test"
    assert r.auth_plugin == C.NATIVE_PASSWORD
    assert r.attrs == {}


def test_parse_pymysql_response() -> None:
    r = parse_handshake_response(PYMYSQL_RESPONSE)
    assert r.capabilities == 0x003AA20D
    assert r.capabilities & C.CONNECT_WITH_DB and r.capabilities & C.CONNECT_ATTRS
    assert r.capabilities & C.PLUGIN_AUTH_LENENC_CLIENT_DATA
    assert not r.capabilities & C.DEPRECATE_EOF
    assert r.max_packet == 0x00FFFFFF
    assert r.charset == C.CHARSET_UTF8MB4_GENERAL_CI
    assert r.user == "test"
    assert r.auth_response == SCRAMBLE_111111_ABCD
    assert r.database == "db1"
    assert r.auth_plugin == C.NATIVE_PASSWORD
    assert r.attrs == {"_client_name": "pymysql", "_client_version": "1.2.4", "_pid": "17305"}


def test_parse_mysql_cli_response() -> None:
    r = parse_handshake_response(MYSQL_CLI_RESPONSE)
    assert r.capabilities == 0x00BFA28D
    assert r.capabilities & C.PLUGIN_AUTH_LENENC_CLIENT_DATA
    assert r.max_packet == 1 << 20
    assert r.charset == C.CHARSET_UTF8_GENERAL_CI
    assert r.user == "test"
    assert r.auth_response == SCRAMBLE_111111_ABCD
    assert r.database == "db1"
    assert r.auth_plugin == C.NATIVE_PASSWORD
    assert r.attrs == {**LIBMARIADB_ATTRS, "_pid": "17351"}


def test_parse_mysql_cli_response_without_password_or_database() -> None:
    r = parse_handshake_response(MYSQL_CLI_ROOT_RESPONSE)
    assert not r.capabilities & C.CONNECT_WITH_DB
    assert r.user == "root" and r.auth_response == b"" and r.database is None
    assert r.auth_plugin == C.NATIVE_PASSWORD
    assert r.attrs == {**LIBMARIADB_ATTRS, "_pid": "17353"}


@pytest.mark.parametrize("payload", [PYMYSQL_RESPONSE, MYSQL_CLI_RESPONSE])
def test_real_clients_scramble_verifies(payload: bytes) -> None:
    r = parse_handshake_response(payload)
    assert verify_native_password(r.auth_response, SALT, parse_stored_password("111111"))
    assert verify_native_password(r.auth_response, SALT, parse_stored_password(PASSWORD_111111_HASH))
    assert not verify_native_password(r.auth_response, SALT, parse_stored_password("111112"))
    assert not verify_native_password(r.auth_response, SALT[::-1], parse_stored_password("111111"))
    assert not verify_native_password(r.auth_response, SALT, None)


def test_build_handshake_response_bytes() -> None:
    assert build_handshake_response(0, "root", b"", None) == _h("""
        00 82 28 00 00 00 00 40 2d 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
        72 6f 6f 74 00
        00
        6d 79 73 71 6c 5f 6e 61 74 69 76 65 5f 70 61 73 73 77 6f 72 64 00
    """)


def test_build_handshake_response_with_database() -> None:
    p = build_handshake_response(C.DEPRECATE_EOF | C.FOUND_ROWS, "u", SCRAMBLE_111111_ABCD, "db1",
                                 charset=C.CHARSET_LATIN1, max_packet=16 << 20)
    assert p == (_h("0a 82 28 01 00 00 00 01 08") + b"\x00" * 23 + b"u\x00" + b"\x14" + SCRAMBLE_111111_ABCD
                 + b"db1\x00" + b"mysql_native_password\x00")


def test_build_handshake_response_strips_what_pydble_does_not_do() -> None:
    unwanted = C.CONNECT_ATTRS | C.SSL | C.COMPRESS | C.LOCAL_FILES | C.SESSION_TRACK | C.CONNECT_WITH_DB
    r = parse_handshake_response(build_handshake_response(0xFFFFFFFF, "u", b"", None))
    assert not r.capabilities & unwanted
    assert r.capabilities & C.PROTOCOL_41 and r.capabilities & C.DEPRECATE_EOF


@pytest.mark.parametrize("database", [None, "db1", "schema_ü"])
@pytest.mark.parametrize("auth", [b"", SCRAMBLE_111111_ABCD, bytes(range(251)) + b"\xff" * 9])
def test_handshake_response_round_trip(database: str | None, auth: bytes) -> None:
    caps = C.FOUND_ROWS | C.DEPRECATE_EOF | C.MULTI_STATEMENTS | C.MULTI_RESULTS | C.TRANSACTIONS
    r = parse_handshake_response(build_handshake_response(caps, "user_é", auth, database, 33, 1 << 24))
    assert r == HandshakeResponse(
        r.capabilities, 1 << 24, 33, "user_é", auth, database, C.NATIVE_PASSWORD, {})
    assert r.capabilities & caps == caps
    assert bool(r.capabilities & C.CONNECT_WITH_DB) == bool(database)


def _hdr(caps: int) -> bytes:
    return (caps).to_bytes(4, "little") + (1 << 24).to_bytes(4, "little") + b"\x21" + b"\x00" * 23


P41 = C.PROTOCOL_41


@pytest.mark.parametrize("payload", [
    b"",
    PYMYSQL_RESPONSE[:31],
    DOC_RESPONSE_320[4:],                                                 # pre-4.1 client, too short
    _hdr(C.LONG_PASSWORD | C.SECURE_CONNECTION) + b"root\x00\x00",        # no PROTOCOL_41
    _hdr(P41 | C.SSL),                                                    # an SSLRequest
    _hdr(P41) + b"root",                                                  # user without NUL
    _hdr(P41),                                                            # no user at all
    _hdr(P41 | C.PLUGIN_AUTH_LENENC_CLIENT_DATA) + b"root\x00\x14" + b"x" * 19,
    _hdr(P41 | C.PLUGIN_AUTH_LENENC_CLIENT_DATA) + b"root\x00",
    _hdr(P41 | C.PLUGIN_AUTH_LENENC_CLIENT_DATA) + b"root\x00\xfc\x01",
    _hdr(P41 | C.PLUGIN_AUTH_LENENC_CLIENT_DATA) + b"root\x00\xff",
    _hdr(P41 | C.SECURE_CONNECTION) + b"root\x00",
    _hdr(P41 | C.SECURE_CONNECTION) + b"root\x00\x14" + b"x" * 19,
    _hdr(P41) + b"root\x00secret-without-nul",
    _hdr(P41 | C.SECURE_CONNECTION | C.PLUGIN_AUTH | C.CONNECT_ATTRS) + b"root\x00\x00p\x00\x10\x01a\x01b",
    _hdr(P41 | C.SECURE_CONNECTION | C.CONNECT_ATTRS) + b"root\x00\x00\x05\x09abc",
    _hdr(P41 | C.SECURE_CONNECTION | C.CONNECT_ATTRS) + b"root\x00\x00\xfd\x01",
    _hdr(P41 | C.SECURE_CONNECTION) + b"\xff\xferoot\x00\x00",            # user not UTF-8
])
def test_malformed_handshake_responses(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_handshake_response(payload)


def test_response_320_padded_is_refused_for_protocol() -> None:
    padded = DOC_RESPONSE_320[4:] + b"\x00" * 20
    with pytest.raises(ProtocolError, match="4.1"):
        parse_handshake_response(padded)


@pytest.mark.parametrize("payload", [PYMYSQL_RESPONSE, MYSQL_CLI_RESPONSE, MYSQL_CLI_ROOT_RESPONSE,
                                     DOC_RESPONSE[4:]])
def test_handshake_response_every_prefix_raises_only_protocol_error(payload: bytes) -> None:
    full = parse_handshake_response(payload)
    for cut in range(len(payload)):
        try:
            r = parse_handshake_response(payload[:cut])
        except ProtocolError:
            continue
        assert r.capabilities == full.capabilities and r.user == full.user


def test_handshake_response_without_optional_parts() -> None:
    caps = P41 | C.SECURE_CONNECTION | C.CONNECT_WITH_DB | C.PLUGIN_AUTH | C.CONNECT_ATTRS
    r = parse_handshake_response(_hdr(caps) + b"bob\x00\x00")
    assert (r.user, r.auth_response, r.database, r.auth_plugin, r.attrs) == ("bob", b"", None, None, {})


def test_handshake_response_old_nul_terminated_auth() -> None:
    r = parse_handshake_response(_hdr(P41 | C.CONNECT_WITH_DB) + b"bob\x00abc\x00db\x00")
    assert (r.user, r.auth_response, r.database) == ("bob", b"abc", "db")


def test_handshake_response_other_plugin() -> None:
    caps = P41 | C.PLUGIN_AUTH_LENENC_CLIENT_DATA | C.PLUGIN_AUTH
    r = parse_handshake_response(_hdr(caps) + b"bob\x00\x20" + b"s" * 32 + b"caching_sha2_password\x00")
    assert r.auth_plugin == "caching_sha2_password" and r.auth_response == b"s" * 32


# -- mysql_native_password -------------------------------------------------------------------------

def _scramble_by_definition(password: bytes, salt: bytes) -> bytes:
    stage1 = hashlib.sha1(password).digest()
    mix = hashlib.sha1(salt + hashlib.sha1(stage1).digest()).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


@pytest.mark.parametrize("salt,expected", [
    (SALT, SCRAMBLE_111111_ABCD),  # what PyMySQL and libmariadb computed
    (bytes(range(1, 21)), _h("f1 a8 f4 91 ce 97 8e ad 2f ab 93 ab 60 0a a9 8e 3c e5 03 c7")),
])
def test_scramble_known_vectors(salt: bytes, expected: bytes) -> None:
    assert _scramble_by_definition(b"111111", salt) == expected
    assert scramble_native_password("111111", salt) == expected
    assert scramble_native_password(b"111111", salt) == expected
    assert verify_native_password(expected, salt, native_password_hash("111111"))


def test_scramble_uses_only_20_salt_bytes() -> None:
    # a greeting's salt sometimes arrives with its NUL terminator
    assert scramble_native_password("111111", SALT + b"\x00") == SCRAMBLE_111111_ABCD


def test_scramble_empty_password() -> None:
    assert scramble_native_password("", SALT) == b""
    assert scramble_native_password(b"", SALT) == b""
    assert verify_native_password(b"", SALT, None)
    assert not verify_native_password(SCRAMBLE_111111_ABCD, SALT, None)
    assert not verify_native_password(b"", SALT, native_password_hash("111111"))


def test_verify_rejects_wrong_lengths() -> None:
    stage2 = native_password_hash("111111")
    assert not verify_native_password(SCRAMBLE_111111_ABCD[:19], SALT, stage2)
    assert not verify_native_password(SCRAMBLE_111111_ABCD + b"\x00", SALT, stage2)
    flipped = bytes([SCRAMBLE_111111_ABCD[0] ^ 1]) + SCRAMBLE_111111_ABCD[1:]
    assert not verify_native_password(flipped, SALT, stage2)


def test_native_password_hash_matches_mysql_password_function() -> None:
    assert "*" + native_password_hash("111111").hex().upper() == PASSWORD_111111_HASH
    assert native_password_hash(b"111111") == native_password_hash("111111")
    # utf-8 for non-ASCII passwords
    assert native_password_hash("pässword") == hashlib.sha1(hashlib.sha1("pässword".encode()).digest()).digest()


def test_parse_stored_password() -> None:
    stage2 = bytes.fromhex(PASSWORD_111111_HASH[1:])
    assert parse_stored_password(PASSWORD_111111_HASH) == stage2
    assert parse_stored_password(PASSWORD_111111_HASH.lower()) == stage2
    assert parse_stored_password("111111") == stage2
    assert parse_stored_password("") is None


@pytest.mark.parametrize("value", [
    "*" + "G" * 40,                        # '*' + 40 characters that are not hex: a clear password
    "*" + PASSWORD_111111_HASH[1:-1],      # 39 hex digits
    PASSWORD_111111_HASH + "0",            # 41 hex digits
    "#" + PASSWORD_111111_HASH[1:],        # no star
    PASSWORD_111111_HASH[1:],              # bare hex
])
def test_parse_stored_password_other_values_are_clear_text(value: str) -> None:
    assert parse_stored_password(value) == native_password_hash(value)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=40), st.binary(min_size=20, max_size=20))
def test_scramble_verify_property(password: bytes, salt: bytes) -> None:
    resp = scramble_native_password(password, salt)
    assert resp == _scramble_by_definition(password, salt)
    assert verify_native_password(resp, salt, native_password_hash(password))
    assert not verify_native_password(resp, salt, native_password_hash(password + b"x"))


# -- auth switch -----------------------------------------------------------------------------------

def test_build_auth_switch_bytes() -> None:
    assert build_auth_switch(C.NATIVE_PASSWORD, SALT) == (
        b"\xfe" + b"mysql_native_password\x00" + SALT + b"\x00")


def test_auth_switch_round_trip() -> None:
    assert parse_auth_switch(build_auth_switch(C.NATIVE_PASSWORD, SALT)) == (C.NATIVE_PASSWORD, SALT)
    assert parse_auth_switch(b"\xfemysql_old_password\x00") == ("mysql_old_password", b"")


def test_parse_auth_switch_malformed() -> None:
    for bad in (b"", b"\xfe", b"\xfemysql_native_password"):
        with pytest.raises(ProtocolError):
            parse_auth_switch(bad)


def test_parse_auth_switch_non_utf8_plugin() -> None:
    try:
        plugin, _ = parse_auth_switch(b"\xfe\xff\xfe\x00salt\x00")
    except ProtocolError:
        return
    assert plugin != C.NATIVE_PASSWORD


# -- random bytes ----------------------------------------------------------------------------------

@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=120))
def test_parsers_on_random_bytes_raise_only_protocol_error(buf: bytes) -> None:
    for fn in (parse_greeting, parse_handshake_response, parse_auth_switch):
        try:
            fn(buf)
        except ProtocolError:
            pass


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=9, max_size=120), st.sampled_from([0, 0xFFFFFFFF, C.SERVER_CAPABILITIES,
                                                           0x00BFA28D, 0x003AA20D]))
def test_handshake_response_random_tail_raises_only_protocol_error(tail: bytes, caps: int) -> None:
    # a valid fixed part followed by garbage reaches the variable-length fields
    payload = _hdr((caps | P41) & ~C.SSL) + tail
    try:
        parse_handshake_response(payload)
    except ProtocolError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80), st.integers(0, 0xFFFF))
def test_greeting_random_tail_raises_only_protocol_error(tail: bytes, caps_lo: int) -> None:
    head = b"\x0a5.7\x00" + b"\x01\x00\x00\x00" + b"abcdefgh" + b"\x00" + caps_lo.to_bytes(2, "little")
    try:
        parse_greeting(head + tail)
    except ProtocolError:
        pass


# -- live capture: real clients against build_greeting ----------------------------------------------

async def _capture(client) -> bytes:
    """Serve one build_greeting, record the client's HandshakeResponse41, refuse the login."""
    got: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(frame(0, build_greeting(7, "10.11.19-MariaDB", SALT)))
            await writer.drain()
            hdr = await reader.readexactly(4)
            payload = await reader.readexactly(int.from_bytes(hdr[:3], "little"))
            if not got.done():
                got.set_result(payload)
            writer.write(frame(hdr[3] + 1, err_packet(1045, "28000", "Access denied (test capture)")))
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await asyncio.wait_for(client(port), 30)
        return await asyncio.wait_for(got, 5)
    finally:
        server.close()
        await server.wait_closed()


def test_live_pymysql_handshake_response() -> None:
    import pymysql

    async def client(port: int) -> None:
        def connect() -> None:
            with pytest.raises(pymysql.err.OperationalError) as e:
                pymysql.connect(host="127.0.0.1", port=port, user="test", password="111111", database="db1",
                                connect_timeout=10)
            assert e.value.args[0] == 1045
        await asyncio.to_thread(connect)

    r = parse_handshake_response(asyncio.run(_capture(client)))
    assert r.user == "test" and r.database == "db1" and r.auth_plugin == C.NATIVE_PASSWORD
    assert r.auth_response == SCRAMBLE_111111_ABCD
    assert verify_native_password(r.auth_response, SALT, parse_stored_password(PASSWORD_111111_HASH))
    assert r.attrs.get("_client_name") == "pymysql"


def test_live_mysql_cli_handshake_response() -> None:
    require_tool("mysql", "the mysql CLI is not installed (apt mariadb-client)")
    async def client(port: int) -> None:
        proc = await asyncio.create_subprocess_exec(
            "mysql", "--no-defaults", "-h127.0.0.1", f"-P{port}", "-utest", "-p111111", "db1", "-e", "select 1",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await proc.communicate()
        assert proc.returncode != 0 and b"1045" in err

    r = parse_handshake_response(asyncio.run(_capture(client)))
    assert r.user == "test" and r.database == "db1" and r.auth_plugin == C.NATIVE_PASSWORD
    assert r.capabilities & C.PLUGIN_AUTH_LENENC_CLIENT_DATA
    assert r.auth_response == SCRAMBLE_111111_ABCD
    assert verify_native_password(r.auth_response, SALT, parse_stored_password("111111"))
    assert r.attrs.get("program_name") == "mysql"


def test_an_ssl_request_is_the_32_byte_head_with_client_ssl() -> None:
    assert is_ssl_request(_hdr(P41 | C.SSL))
    assert not is_ssl_request(_hdr(P41))                      # no CLIENT_SSL
    assert not is_ssl_request(_hdr(C.SSL))                    # pre-4.1
    assert not is_ssl_request(_hdr(P41 | C.SSL) + b"root\x00\x00")  # a whole response, sent over TLS
    greeting = parse_greeting(build_greeting(1, "5.7", b"s" * 20, C.SERVER_CAPABILITIES | C.SSL))
    assert greeting.capabilities & C.SSL


def test_parse_change_user_as_drivers_send_it() -> None:
    auth = scramble_native_password("pw", b"s" * 20)
    caps = P41 | C.SECURE_CONNECTION | C.PLUGIN_AUTH | C.CONNECT_ATTRS
    payload = (b"\x11other\x00" + bytes((len(auth),)) + auth + b"schema2\x00" + struct.pack("<H", 224)
               + b"mysql_native_password\x00" + b"\x04\x01a\x01b")
    cu = parse_change_user(payload, caps)
    assert (cu.user, cu.auth_response, cu.database, cu.charset, cu.auth_plugin) == (
        "other", auth, "schema2", 224, C.NATIVE_PASSWORD)
    bare = parse_change_user(b"\x11u\x00\x00\x00", P41 | C.SECURE_CONNECTION)  # no password, no schema
    assert (bare.user, bare.auth_response, bare.database, bare.charset, bare.auth_plugin) == (
        "u", b"", None, None, None)
    with pytest.raises(ProtocolError):
        parse_change_user(b"\x11u\x00\x14short", P41 | C.SECURE_CONNECTION)
