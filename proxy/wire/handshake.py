"""Connection phase: HandshakeV10, HandshakeResponse41, auth switch and mysql_native_password."""

from __future__ import annotations

import hashlib
import hmac
import struct
from dataclasses import dataclass, field

from proxy.wire import constants as C
from proxy.wire.packets import ProtocolError, lenenc_int, lenenc_str, read_lenenc_int, read_lenenc_str, read_nul_str


def native_password_hash(password: str | bytes) -> bytes:
    """SHA1(SHA1(password)): what mysql.user stores (as '*' + hex) and all the server needs."""
    pw = password.encode("utf-8") if isinstance(password, str) else password
    return hashlib.sha1(hashlib.sha1(pw).digest()).digest()


def parse_stored_password(value: str) -> bytes | None:
    """A config password as its stage-2 hash: '*' + 40 hex digits is a hash, else clear text.

    An empty password yields None (only an empty auth response matches)."""
    if len(value) == 41 and value[0] == "*":
        try:
            return bytes.fromhex(value[1:])
        except ValueError:
            pass
    return native_password_hash(value) if value else None


def scramble_native_password(password: str | bytes, salt: bytes) -> bytes:
    """The client's auth response: SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw)))."""
    pw = password.encode("utf-8") if isinstance(password, str) else password
    if not pw:
        return b""
    stage1 = hashlib.sha1(pw).digest()
    mix = hashlib.sha1(salt[:20] + hashlib.sha1(stage1).digest()).digest()
    return bytes(a ^ b for a, b in zip(stage1, mix))


def verify_native_password(response: bytes, salt: bytes, stage2: bytes | None) -> bool:
    """Check a client's auth response against the stored stage-2 hash without knowing the password."""
    if stage2 is None:
        return hmac.compare_digest(response, b"")
    if len(response) != 20:
        return False
    mix = hashlib.sha1(salt[:20] + stage2).digest()
    stage1 = bytes(a ^ b for a, b in zip(response, mix))
    return hmac.compare_digest(hashlib.sha1(stage1).digest(), stage2)  # constant time: no timing oracle


@dataclass(frozen=True)
class ServerGreeting:
    """What a server says first (HandshakeV10); used when we log in to backends."""

    version: str
    connection_id: int
    salt: bytes
    capabilities: int
    charset: int
    status: int
    auth_plugin: str


def build_greeting(connection_id: int, version: str, salt: bytes, capabilities: int = C.SERVER_CAPABILITIES,
                   charset: int = C.CHARSET_UTF8MB4_GENERAL_CI, status: int = C.STATUS_AUTOCOMMIT) -> bytes:
    """A HandshakeV10 payload offering mysql_native_password with a 20-byte salt."""
    assert len(salt) == 20
    return (b"\x0a" + version.encode() + b"\x00" + struct.pack("<I", connection_id & 0xFFFFFFFF)
            + salt[:8] + b"\x00" + struct.pack("<H", capabilities & 0xFFFF)
            + bytes((charset,)) + struct.pack("<H", status) + struct.pack("<H", capabilities >> 16)
            + bytes((21,)) + b"\x00" * 10 + salt[8:] + b"\x00" + C.NATIVE_PASSWORD.encode() + b"\x00")


def parse_greeting(payload: bytes) -> ServerGreeting:
    """Decode a HandshakeV10 payload."""
    if not payload or payload[0] == 0xFF:
        raise ProtocolError("server refused the connection")
    if payload[0] != 10:
        raise ProtocolError(f"unsupported protocol version {payload[0]}")
    version, pos = read_nul_str(payload, 1)
    if pos + 4 + 8 + 1 + 2 > len(payload):
        raise ProtocolError("truncated greeting")
    conn_id = struct.unpack_from("<I", payload, pos)[0]
    salt1 = payload[pos + 4:pos + 12]
    pos += 13
    caps = struct.unpack_from("<H", payload, pos)[0]
    pos += 2
    charset = status = 0
    plugin = C.NATIVE_PASSWORD
    salt2 = b""
    if pos < len(payload):
        if pos + 6 > len(payload):
            raise ProtocolError("truncated greeting")
        charset = payload[pos]
        status, caps_hi, auth_len = struct.unpack_from("<HHB", payload, pos + 1)
        caps |= caps_hi << 16
        pos += 1 + 2 + 2 + 1 + 10
        if caps & C.SECURE_CONNECTION:
            n = max(13, auth_len - 8)
            salt2 = payload[pos:pos + n].rstrip(b"\x00")
            pos += n
        if caps & C.PLUGIN_AUTH and pos < len(payload):
            p, _ = read_nul_str(payload + b"\x00", pos)
            plugin = p.decode("utf-8", "replace")
    return ServerGreeting(version.decode("utf-8", "replace"), conn_id, bytes(salt1 + salt2), caps, charset,
                          status, plugin)


def is_ssl_request(payload: bytes) -> bool:
    """True for an SSLRequest: the 32-byte head of a HandshakeResponse41 with CLIENT_SSL, sent in the clear
    before the TLS handshake (the whole response follows over TLS)."""
    if len(payload) != 32:
        return False
    caps = struct.unpack_from("<I", payload, 0)[0]
    return bool(caps & C.SSL and caps & C.PROTOCOL_41)


@dataclass(frozen=True)
class HandshakeResponse:
    """What a client answers to the greeting (HandshakeResponse41)."""

    capabilities: int
    max_packet: int
    charset: int
    user: str
    auth_response: bytes = field(repr=False)
    database: str | None
    auth_plugin: str | None
    attrs: dict[str, str]


def parse_handshake_response(payload: bytes) -> HandshakeResponse:
    """Decode a HandshakeResponse41; raise ProtocolError on anything malformed."""
    if len(payload) < 32:
        raise ProtocolError("truncated handshake response")
    caps, max_packet, charset = struct.unpack_from("<IIB", payload, 0)
    if not caps & C.PROTOCOL_41:
        raise ProtocolError("client does not speak protocol 4.1")
    if caps & C.SSL and len(payload) == 32:
        raise ProtocolError("SSL was not offered")
    pos = 32
    user_b, pos = read_nul_str(payload, pos)
    if caps & C.PLUGIN_AUTH_LENENC_CLIENT_DATA:
        auth, pos = read_lenenc_str(payload, pos)
        auth = auth or b""
    elif caps & C.SECURE_CONNECTION:
        auth, pos = _read_short_auth(payload, pos)
    else:
        auth, pos = read_nul_str(payload, pos)
    database = None
    if caps & C.CONNECT_WITH_DB and pos < len(payload):
        db, pos = read_nul_str(payload + b"\x00", pos)
        database = db.decode("utf-8", "replace") or None
    plugin = None
    if caps & C.PLUGIN_AUTH and pos < len(payload):
        p, pos = read_nul_str(payload + b"\x00", pos)
        plugin = p.decode("utf-8", "replace")
    attrs = _read_attrs(payload, pos) if caps & C.CONNECT_ATTRS else {}
    return HandshakeResponse(caps, max_packet, charset, _user_name(user_b), auth, database, plugin, attrs)


def _read_short_auth(payload: bytes, pos: int) -> tuple[bytes, int]:
    """An auth response preceded by its one-byte length (CLIENT_SECURE_CONNECTION)."""
    if pos >= len(payload):
        raise ProtocolError("truncated auth response")
    n = payload[pos]
    auth = bytes(payload[pos + 1:pos + 1 + n])
    if len(auth) != n:
        raise ProtocolError("truncated auth response")
    return auth, pos + 1 + n


def _user_name(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("user name is not UTF-8") from None


def _read_attrs(payload: bytes, pos: int) -> dict[str, str]:
    """Connection attributes (a length-encoded block of key/value strings) at pos, if any."""
    attrs: dict[str, str] = {}
    if pos < len(payload):
        total, pos = read_lenenc_int(payload, pos)
        end = pos + (total or 0)
        if end > len(payload):
            raise ProtocolError("truncated connection attributes")
        while pos < end:
            k, pos = read_lenenc_str(payload, pos)
            v, pos = read_lenenc_str(payload, pos)
            attrs[(k or b"").decode("utf-8", "replace")] = (v or b"").decode("utf-8", "replace")
    return attrs


@dataclass(frozen=True)
class ChangeUser:
    """A COM_CHANGE_USER request: log in again as another user on the same connection."""

    user: str
    auth_response: bytes = field(repr=False)
    database: str | None
    charset: int | None
    auth_plugin: str | None


def parse_change_user(payload: bytes, capabilities: int) -> ChangeUser:
    """Decode COM_CHANGE_USER (0x11) as the client's capabilities lay it out; ProtocolError if malformed."""
    if payload[:1] != bytes((C.COM_CHANGE_USER,)):
        raise ProtocolError("not a COM_CHANGE_USER")
    user_b, pos = read_nul_str(payload, 1)
    if capabilities & C.SECURE_CONNECTION:
        auth, pos = _read_short_auth(payload, pos)
    else:
        auth, pos = read_nul_str(payload, pos)
    db, pos = read_nul_str(payload + b"\x00", pos)
    charset = None
    if pos + 2 <= len(payload):
        charset = struct.unpack_from("<H", payload, pos)[0]
        pos += 2
    plugin = None
    if capabilities & C.PLUGIN_AUTH and pos < len(payload):
        p, pos = read_nul_str(payload + b"\x00", pos)
        plugin = p.decode("utf-8", "replace")
    if capabilities & C.CONNECT_ATTRS:
        _read_attrs(payload, pos)  # checked for shape; pydble keeps no use for them
    return ChangeUser(_user_name(user_b), auth, db.decode("utf-8", "replace") or None, charset, plugin)


def build_handshake_response(capabilities: int, user: str, auth_response: bytes, database: str | None,
                             charset: int = C.CHARSET_UTF8MB4_GENERAL_CI,
                             max_packet: int = 1 << 30, plugin: str = C.NATIVE_PASSWORD) -> bytes:
    """A HandshakeResponse41 payload, as pydble sends it to backends."""
    caps = capabilities | C.PROTOCOL_41 | C.SECURE_CONNECTION | C.PLUGIN_AUTH | C.PLUGIN_AUTH_LENENC_CLIENT_DATA
    if database:
        caps |= C.CONNECT_WITH_DB
    else:
        caps &= ~C.CONNECT_WITH_DB
    caps &= ~(C.CONNECT_ATTRS | C.SSL | C.COMPRESS | C.LOCAL_FILES | C.SESSION_TRACK)
    out = struct.pack("<IIB", caps, max_packet, charset) + b"\x00" * 23
    out += user.encode() + b"\x00" + lenenc_str(auth_response)
    if database:
        out += database.encode() + b"\x00"
    return out + plugin.encode() + b"\x00"


def build_auth_switch(plugin: str, salt: bytes) -> bytes:
    """An AuthSwitchRequest asking the client to answer with another plugin."""
    return b"\xfe" + plugin.encode() + b"\x00" + salt + b"\x00"


def parse_auth_switch(payload: bytes) -> tuple[str, bytes]:
    """Decode an AuthSwitchRequest into (plugin, salt)."""
    plugin, pos = read_nul_str(payload, 1)
    return plugin.decode("utf-8", "replace"), bytes(payload[pos:]).rstrip(b"\x00")


__all__ = [
    "ServerGreeting", "HandshakeResponse", "build_greeting", "is_ssl_request", "parse_greeting",
    "parse_handshake_response", "build_handshake_response", "build_auth_switch", "ChangeUser", "parse_change_user",
    "parse_auth_switch", "native_password_hash", "parse_stored_password", "scramble_native_password",
    "verify_native_password", "lenenc_int",
]
