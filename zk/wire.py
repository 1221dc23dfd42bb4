"""The peer channel's framing, sans-I/O: a 4-byte big-endian length, then one JSON object.

Instances tell each other a DDL step over this channel (zk/peers.py) instead of waiting for
ZooKeeper watches; ZooKeeper stays the record of truth. Bytes in, messages out, and back.

Every connection is authenticated with a key both ends hold and no znode does (`[cluster]
peer_secret`, or `auth`): the server sends a fresh nonce (`challenge`), the caller answers with a
nonce of its own and a MAC over both (`hello`), and from then on every frame in either direction is
sealed: an HMAC-SHA256 of a per-direction counter and the body under a key of that connection, so a
frame cannot be forged, altered, replayed or moved to another connection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import struct

MAX_FRAME = 16 * 1024 * 1024   # a step carries CREATE TABLE texts; anything bigger is an attack or a bug
_LEN = struct.Struct(">I")

HELLO, STEP, REPLY, CHALLENGE = "hello", "step", "reply", "challenge"
MAC_BYTES = 32
_COUNTER = struct.Struct(">Q")


class WireError(ValueError):
    """The peer sent something that is not a frame of this protocol: drop the connection."""


def dump(msg: dict) -> bytes:
    """One message's JSON body (what a frame carries)."""
    body = json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if len(body) > MAX_FRAME - MAC_BYTES:
        raise WireError(f"message of {len(body)} bytes is over the {MAX_FRAME}-byte frame limit")
    return body


def encode(msg: dict) -> bytes:
    """One message as a frame."""
    body = dump(msg)
    return _LEN.pack(len(body)) + body


def parse(body: bytes) -> dict:
    """One frame's body as a message."""
    try:
        msg = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"frame is not JSON: {e}") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
        raise WireError("frame is not a message object with a type")
    return msg


class FrameDecoder:
    """Turns a byte stream into messages; raises WireError on anything malformed or oversized."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        """Add received bytes; return every message now complete."""
        return [parse(body) for body in self.frames(data)]

    def frames(self, data: bytes) -> list[bytes]:
        """Add received bytes; return the body of every frame now complete (sealed or not)."""
        self._buf += data
        out: list[bytes] = []
        buf = self._buf
        pos = 0
        while len(buf) - pos >= 4:
            (size,) = _LEN.unpack_from(buf, pos)
            if size > self.max_frame:
                raise WireError(f"frame of {size} bytes is over the {self.max_frame}-byte limit")
            if len(buf) - pos - 4 < size:
                break
            out.append(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
        del buf[:pos]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held."""
        return len(self._buf)


class Sealer:
    """One connection's sealed frames, one direction each way: seal() what we send, open() what we get."""

    def __init__(self, key: bytes, sending: bytes, receiving: bytes) -> None:
        self._key = key
        self._labels = (sending, receiving)
        self._counters = [0, 0]

    def _mac(self, way: int, body: bytes) -> bytes:
        n = self._counters[way]
        self._counters[way] = n + 1
        return hmac.new(self._key, self._labels[way] + _COUNTER.pack(n) + body, hashlib.sha256).digest()

    def seal(self, body: bytes) -> bytes:
        """A message's body (dump()) as a sealed frame: length, MAC, body."""
        return _LEN.pack(MAC_BYTES + len(body)) + self._mac(0, body) + body

    def open(self, frame: bytes) -> dict:
        """A sealed frame's message; WireError if its MAC is not the next one expected from the other end."""
        mac, body = frame[:MAC_BYTES], frame[MAC_BYTES:]
        if len(mac) < MAC_BYTES or not hmac.compare_digest(mac, self._mac(1, body)):
            raise WireError("frame failed authentication")
        return parse(body)


def _session_key(key: bytes, cluster_id: str, instance: str, server_nonce: str, client_nonce: str) -> bytes:
    material = "\0".join(("pydble peer session", cluster_id, instance, server_nonce, client_nonce)).encode()
    return hmac.new(key, material, hashlib.sha256).digest()


def challenge() -> dict:
    """The server's first message on a connection: a nonce the caller's hello must cover."""
    return {"t": CHALLENGE, "nonce": secrets.token_hex(16)}


def hello(key: bytes, cluster_id: str, instance: str, challenge_msg: dict) -> tuple[dict, Sealer]:
    """The caller's answer to a challenge, and the caller's Sealer for the rest of the connection."""
    nonce = secrets.token_hex(16)
    session = _session_key(key, cluster_id, instance, str(challenge_msg.get("nonce", "")), nonce)
    mac = hmac.new(session, b"hello", hashlib.sha256).hexdigest()
    return {"t": HELLO, "cluster": cluster_id, "from": instance, "nonce": nonce, "mac": mac}, \
        Sealer(session, b"caller", b"server")


def check_hello(key: bytes, cluster_id: str, challenge_msg: dict, msg: dict) -> Sealer | None:
    """The server's Sealer if `msg` is a hello that answers our challenge with our key; else None."""
    instance, nonce, mac = msg.get("from"), msg.get("nonce"), msg.get("mac")
    if (msg.get("t") != HELLO or msg.get("cluster") != cluster_id or not isinstance(instance, str)
            or not isinstance(nonce, str) or not isinstance(mac, str)):
        return None
    session = _session_key(key, cluster_id, instance, challenge_msg["nonce"], nonce)
    if not hmac.compare_digest(mac.encode(), hmac.new(session, b"hello", hashlib.sha256).hexdigest().encode()):
        return None
    return Sealer(session, b"server", b"caller")


def step(msg_id: int, path: str, czxid: int, record: str, texts: dict | None, final: bool = False) -> dict:
    """A DDL step for the receiver to apply: the record's JSON as written to ZooKeeper, and on SUCCESS or
    FAILED the CREATE texts the originator read back from the nodes (node -> table -> text|None).
    `final` (sent only when true): the originator removes the record itself, so no ZooKeeper ack is wanted."""
    msg = {"t": STEP, "id": msg_id, "path": path, "czxid": czxid, "record": record, "texts": texts}
    if final:
        msg["final"] = True
    return msg


def reply(msg_id: int, ok: bool | None, message: str = "", meta_version: int = 0) -> dict:
    """The answer to a step: ok true/false as in a ZooKeeper ack; None: not handled, use ZooKeeper."""
    return {"t": REPLY, "id": msg_id, "ok": ok, "message": message, "meta_version": meta_version}


__all__ = ["FrameDecoder", "Sealer", "WireError", "dump", "encode", "parse", "challenge", "hello", "check_hello",
           "step", "reply", "MAX_FRAME", "HELLO", "STEP", "REPLY", "CHALLENGE"]
