"""What both ports do with a client connection: the login exchange and the statements of one COM_QUERY.

The client session (proxy/session/session.py) and the manager session (proxy/manager/manager.py) compose these; neither
is built on the other.
"""

from __future__ import annotations

import os
import ssl
import struct
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from meta.errors import ProxyError

from proxy.wire import constants as C
from proxy.wire.handshake import build_auth_switch, build_greeting, is_ssl_request, parse_handshake_response
from proxy.wire.packets import ProtocolError, frame
from proxy.wire.reply import Reply
from proxy.plan.sqltok import split_statements

_SALT_CHARS = bytes(range(33, 127)).replace(b"$", b"")


def make_salt() -> bytes:
    """20 printable random bytes (no NUL, no '$'), as MySQL servers send."""
    return bytes(_SALT_CHARS[b % len(_SALT_CHARS)] for b in os.urandom(20))


class Client(Protocol):
    """The connection a login runs on (proxy.session.session.ClientProtocol)."""

    def write(self, data: bytes) -> None: ...
    async def next_packet(self, timeout: float | None = None) -> tuple[int, bytes] | None: ...
    async def start_tls(self, ctx: ssl.SSLContext, timeout: float) -> bool: ...


@dataclass(frozen=True)
class Login:
    """A client that proved its password: what the session keeps of the exchange."""

    salt: bytes           # COM_CHANGE_USER answers to it
    capabilities: int     # the client's, as far as the server has them
    charset: int          # the collation id the client named
    seq: int              # the sequence id the session's OK goes out with


async def native_auth(client: Client, salt: bytes, plugin: str | None, auth: bytes, seq: int, caps: int,
                      timeout: float) -> tuple[int, bytes] | None:
    """The client's mysql_native_password answer to `salt`: as sent, or after an auth switch when it
    answered with another plugin; (next sequence id, answer), None if it left."""
    if plugin and plugin != C.NATIVE_PASSWORD and caps & C.PLUGIN_AUTH:
        client.write(frame(seq, build_auth_switch(C.NATIVE_PASSWORD, salt)))
        pkt = await client.next_packet(timeout=timeout)
        if pkt is None:
            return None
        seq, auth = pkt
        seq += 1
    return seq, auth


async def login(client: Client, conn_id: int, version: str, tls: ssl.SSLContext | None, timeout: float,
                authenticate: Callable[[str, bytes, bytes, str | None], None], log: Any) -> Login | None:
    """Greet, take TLS when asked, read the handshake response, check the password with `authenticate`
    (which raises the ProxyError to answer); None when the client left or was refused (answered)."""
    salt = make_salt()
    caps = C.SERVER_CAPABILITIES | (C.SSL if tls is not None else 0)
    client.write(frame(0, build_greeting(conn_id, version, salt, caps, status=C.STATUS_AUTOCOMMIT)))
    pkt = await client.next_packet(timeout=timeout)
    if pkt is not None and tls is not None and is_ssl_request(pkt[1]):
        if not await client.start_tls(tls, timeout):
            return None
        pkt = await client.next_packet(timeout=timeout)
    if pkt is None:
        return None
    seq, payload = pkt
    try:
        resp = parse_handshake_response(payload)
    except ProtocolError as e:
        client.write(frame(seq + 1, b"\xff" + struct.pack("<H", 1043) + b"#08S01" + f"Bad handshake: {e}".encode()))
        return None
    switched = await native_auth(client, salt, resp.auth_plugin, resp.auth_response, seq + 1, resp.capabilities,
                                 timeout)
    if switched is None:
        return None
    seq, auth = switched
    capabilities = resp.capabilities & C.SERVER_CAPABILITIES
    try:
        authenticate(resp.user, auth, salt, resp.database)
    except ProxyError as e:
        r = Reply(bool(capabilities & C.DEPRECATE_EOF))
        r.seq = seq
        r.proxy_error(e)
        client.write(r.bytes())
        log.info("login refused", user=resp.user, code=e.code)
        return None
    return Login(salt, capabilities, resp.charset, seq)


async def run_statements(client: Client, sql: str, r: Reply, multi: bool,
                         statement: Callable[[str, Reply, bool, bool], Awaitable[bool]],
                         ending: Callable[[], bool] | None = None) -> None:
    """COM_QUERY: one statement relayed as is where `statement` can, several (the client asked for
    multi-statements) answered in order, up to the first error or the one after which `ending()` says the
    session closes (COMMIT RELEASE: MariaDB runs nothing after it)."""
    stmts = [sql]
    if multi and ";" in sql:
        stmts = split_statements(sql) or [sql]
    if len(stmts) == 1:
        try:
            relayed = await statement(stmts[0], r, False, True)
        except ProxyError as e:
            r.proxy_error(e)
            relayed = False
        if not relayed:
            client.write(r.bytes())
        return
    for i, stmt in enumerate(stmts):
        more = i < len(stmts) - 1
        before = len(r.out)
        try:
            await statement(stmt, r, more, False)
        except ProxyError as e:
            del r.out[before:]
            r.proxy_error(e)
            break
        if (r.out and r.out[-1][4:5] == b"\xff") or (ending is not None and ending()):
            break
    client.write(r.bytes())
