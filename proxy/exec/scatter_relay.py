"""Stream a scattered read whose merge is plain concatenation, packet by packet, without decoding rows.

Spark's partition queries (`SELECT cols FROM t WHERE id >= x AND id < y`) hit every node of a hash-
sharded table, and need no ordering or grouping: the rows of all nodes, in any order. Collecting
and re-encoding them costs ~10 µs a row and blocks the event loop for as long as one answer takes to
encode (long enough for MariaDB Connector/J's 500 ms pipelined-login timeout to fire on other
sessions). Here each node's answer is relayed as it arrives: the first node to finish its column
definitions supplies the header, every node's row packets follow with only their sequence byte
rewritten, and one end-of-rows packet closes the answer once every node has finished.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

from meta.errors import BackendUnavailable, ProxyError

from proxy.backends.backend import BackendConnection, Sink
from proxy.wire.messages import eof_packet, err_packet, ok_packet, parse_ok
from proxy.wire.packets import com_query, frame, read_lenenc_int

if TYPE_CHECKING:
    from proxy.runtime import ExecContext
    from proxy.plan.plan import Plan

_FIRST, _DEFS, _DEFS_EOF, _ROWS, _DONE = range(5)


class _Node:
    """One node's answer as it streams in: its state and its own header until the header is settled."""

    __slots__ = ("relay", "state", "left", "cont", "cont_forward", "header", "warnings")

    def __init__(self, relay: ConcatRelay) -> None:
        self.relay = relay
        self.state = _FIRST
        self.left = 0
        self.cont = False
        self.cont_forward = False
        self.header: list[bytes] = []
        self.warnings = 0

    def write(self, data: bytes) -> None:
        self.relay.feed(self, data)


class ConcatRelay:
    """Sans-I/O core: node bytes in (complete physical packets), client bytes out through a sink."""

    def __init__(self, out: Sink, deprecate_eof: bool, limit: int | None, status: Callable[[], int]) -> None:
        self.out = out
        self.deprecate_eof = deprecate_eof
        self.limit = limit
        self.status = status
        self.seq = 1
        self.rows = 0
        self.header_sent = False
        self.ncols = 0
        self.error: bytes | None = None
        self.error_sent = False
        self.wrote = False

    def node(self) -> _Node:
        """A sink for one node's answer."""
        return _Node(self)

    def _send(self, data: bytes | bytearray) -> None:
        if data:
            self.out.write(bytes(data))
            self.wrote = True

    def _fail(self, payload: bytes) -> None:
        if self.error is None:
            self.error = payload
        if self.header_sent and not self.error_sent:
            self._send(frame(self.seq, self.error))  # rows already went out: the ERR ends the answer
            self.error_sent = True

    def feed(self, node: _Node, data: bytes) -> None:
        """Consume packets of one node's answer, forwarding what the client must see."""
        out = bytearray()
        pos = 0
        n = len(data)
        if node.state == _ROWS and not node.cont and self._forwarding():
            pos = self._plain_rows(data, out)
        while pos + 4 <= n:
            length = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
            end = pos + 4 + length
            if node.cont:  # the rest of a row over 16 MB
                node.cont = length == 0xFFFFFF
                if node.cont_forward and self._forwarding():
                    out += data[pos:pos + 3]
                    out.append(self.seq)
                    self.seq = (self.seq + 1) & 0xFF
                    out += data[pos + 4:end]
                pos = end
                continue
            st = node.state
            if st == _ROWS:
                first = data[pos + 4] if length else 0
                if first == 0xFE and length < 0xFFFFFF and (self.deprecate_eof or length < 9):
                    node.warnings = _eof_warnings(bytes(data[pos + 4:end]), self.deprecate_eof)
                    node.state = _DONE
                elif first == 0xFF and length < 0xFFFFFF:
                    self._send(out)
                    out = bytearray()
                    self._fail(bytes(data[pos + 4:end]))
                    node.state = _DONE
                else:
                    node.cont = length == 0xFFFFFF
                    forward = self._forwarding() and (self.limit is None or self.rows < self.limit)
                    node.cont_forward = forward and node.cont  # a skipped row's pieces are skipped too
                    if forward:
                        out += data[pos:pos + 3]
                        out.append(self.seq)
                        self.seq = (self.seq + 1) & 0xFF
                        out += data[pos + 4:end]
                        self.rows += 1
            else:
                self._header_packet(node, bytes(data[pos + 4:end]))
            pos = end
        self._send(out)

    def _plain_rows(self, data: bytes, out: bytearray) -> int:
        """The hot loop: relay the leading run of ordinary row packets, only their sequence bytes rewritten,
        as one copy; return where the first packet needing `feed`'s full handling starts."""
        room = -1 if self.limit is None else self.limit - self.rows
        if room == 0:
            return 0
        buf = bytearray(data)
        n = len(buf)
        pos = 0
        seq = self.seq
        rows = 0
        while pos + 4 <= n and rows != room:
            length = buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16)
            if length >= 0xFFFFFF or length == 0 or buf[pos + 4] >= 0xFE:
                break   # a row over 16 MB, an end-of-rows or an ERR (or a row starting 0xFE, rare)
            buf[pos + 3] = seq
            seq = (seq + 1) & 0xFF
            rows += 1
            pos += 4 + length
        if pos:
            out += buf if pos == n else memoryview(buf)[:pos]
            self.seq = seq
            self.rows += rows
        return pos

    def _forwarding(self) -> bool:
        return self.header_sent and self.error is None

    def _header_packet(self, node: _Node, p: bytes) -> None:
        st = node.state
        if st == _FIRST:
            if p[:1] == b"\xff":
                self._fail(p)
                node.state = _DONE
                return
            if p[:1] == b"\x00":  # no result set (cannot happen for a SELECT): nothing to relay
                node.state = _DONE
                return
            node.left = read_lenenc_int(p, 0)[0] or 0
            node.header = [p]
            node.state = _DEFS
        elif st == _DEFS:
            node.header.append(p)
            node.left -= 1
            if node.left == 0:
                if self.deprecate_eof:
                    node.state = _ROWS
                    self._settle_header(node)
                else:
                    node.state = _DEFS_EOF
        elif st == _DEFS_EOF:
            node.state = _ROWS
            self._settle_header(node)

    def _settle_header(self, node: _Node) -> None:
        """The first complete header goes to the client; the others must have as many columns."""
        ncols = len(node.header) - 1
        header, node.header = node.header, []
        if self.header_sent:
            if ncols != self.ncols:
                self._fail(err_packet(1105, "HY000", "the shardingNodes returned different numbers of columns "
                                                     "for the same SELECT"))
            return
        if self.error is not None:
            return
        self.ncols = ncols
        out = []
        for p in header:
            out.append(frame(self.seq, p))
            self.seq += 1
        if not self.deprecate_eof:
            out.append(frame(self.seq, eof_packet(0, self.status())))
            self.seq += 1
        self.header_sent = True
        self._send(b"".join(out))

    def finish(self, warnings: int) -> None:
        """Every node is done: close the answer (end-of-rows, or the error nobody has seen yet)."""
        if self.error is not None:
            if not self.error_sent:
                self._send(frame(self.seq if self.header_sent else 1, self.error))
                self.error_sent = True
            return
        status = self.status()
        if not self.header_sent:
            self._send(frame(1, ok_packet(0, 0, status, warnings)))
            return
        if self.deprecate_eof:
            self._send(frame(self.seq, ok_packet(0, 0, status, min(warnings, 0xFFFF), header=0xFE)))
        else:
            self._send(frame(self.seq, eof_packet(min(warnings, 0xFFFF), status)))


def _eof_warnings(p: bytes, deprecate_eof: bool) -> int:
    if not deprecate_eof:
        return p[1] | (p[2] << 8) if len(p) >= 5 else 0
    try:
        return parse_ok(p).warnings
    except Exception:  # noqa: BLE001 - a malformed end packet only loses its warning count
        return 0


def streamable(plan: Plan) -> bool:
    """A read over several nodes whose merge is plain concatenation (LIMIT allowed, no OFFSET)."""
    m = plan.merge
    return plan.kind == "select" and m is not None and m.concat_only and len(plan.targets) > 1


async def relay_concat(ex: ExecContext, plan: Plan) -> bool:
    """Run a concat-only scattered SELECT on its nodes and stream the union to the client; True."""

    s = ex.session
    targets = [(t.node, t.sql) for t in plan.targets]
    acquired = await ex._get_all([node for node, _ in targets])
    failure = next((a for a in acquired if isinstance(a, BaseException)), None)
    if failure is not None:
        for (node, _), a in zip(targets, acquired):
            if isinstance(a, BackendConnection):
                ex._done_with(node, a)
        raise failure
    conns: list[BackendConnection] = acquired  # type: ignore[assignment]
    sink: Sink = ex.relay_sink or s.client
    relay = ConcatRelay(sink, s.deprecate_eof, plan.merge.limit if plan.merge else None, s.status)
    nodes = [relay.node() for _ in conns]
    paused = s.client.write_paused
    for c in conns:
        ex.streaming.add(c)
        if paused:
            c.pause_reading()
    timeout = ex.runtime.backends.timeout_s
    try:
        results = await asyncio.gather(*(c.run(com_query(sql), timeout, sink=nd)
                                         for c, nd, (_, sql) in zip(conns, nodes, targets)),
                                       return_exceptions=True)
        await ex.keep_warnings(list(zip(conns, results)))
    finally:
        for c in conns:
            ex.streaming.discard(c)
        for (node, _), c in zip(targets, conns):
            ex._done_with(node, c)
    ex.last_node = targets[-1][0]
    for res in results:
        if isinstance(res, BaseException):
            if relay.wrote:
                s.client.close()  # half an answer went out; the client must not trust it
            if isinstance(res, ProxyError):
                raise res
            raise BackendUnavailable(f"scattered read failed: {res}")
    relay.finish(sum(nd.warnings for nd in nodes))
    return True


__all__ = ["ConcatRelay", "relay_concat", "streamable"]
