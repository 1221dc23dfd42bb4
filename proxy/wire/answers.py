"""Where a small text answer ends, read from packet headers alone: the point select's relay check.

A backend's answers to pipelined point reads arrive several to one read; this finds each whole answer's
end and final status in one tight loop, so each is relayed as one slice with no packet-by-packet scan
(the general ResponseScanner decides everything else). A Cython build of this loop was measured and
dropped (bench/RESULTS.md, issue 20 item 1: ~1.5 µs per answer, within the noise end to end).
"""

from __future__ import annotations

_MORE = 0x0008   # SERVER_MORE_RESULTS_EXISTS (proxy.wire.constants.STATUS_MORE_RESULTS)


def after_lenencs(data: bytes, pos: int, count: int, n: int) -> int:
    """The offset after count length-encoded integers starting at pos (past n when they run past it)."""
    for _ in range(count):
        if pos >= n:
            return n + 9
        b = data[pos]
        pos += 1 if b < 0xFB else 3 if b == 0xFC else 4 if b == 0xFD else 9
    return pos


def text_answer_end(data: bytes, pos: int, stop: int, deprecate_eof: bool) -> int:
    """When data[pos:] starts with one whole answer that ends a COM_QUERY (one OK, or one text result set;
    a COM_STMT_EXECUTE's binary one too, as only the rows' first bytes are read, and a binary row's is always
    0x00) ending at or before stop: its end << 32 | warning count << 16 | final status flags; else -1 (an
    ERR, a partial answer, more results, anything unusual: the general scanner decides)."""
    n = len(data)
    if stop < n:
        n = stop
    if n - pos < 5:
        return -1
    length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
    end = pos + 4 + length
    if length == 0 or end > n:
        return -1
    first = data[pos + 4]
    if first == 0:  # OK
        if length < 7:
            return -1
        at = after_lenencs(data, pos + 5, 2, n)
        if at + 4 > end:
            return -1
        status = data[at] | data[at + 1] << 8
        return -1 if status & _MORE else end << 32 | (data[at + 2] | data[at + 3] << 8) << 16 | status
    if first >= 0xFB:  # ERR, LOCAL INFILE, or a column count past 250: the scanner's business
        return -1
    pos = end
    for _ in range(first if deprecate_eof else first + 1):  # column definitions (and their EOF)
        if pos + 4 > n:
            return -1
        pos += 4 + (data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16)
    while pos + 4 < n:  # rows, then the EOF (or OK with 0xFE) that ends them
        length = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        end = pos + 4 + length
        if length >= 0xFFFFFF or end > n:
            return -1
        b = data[pos + 4]
        if b == 0xFE and (length < 9 or deprecate_eof):
            if deprecate_eof:
                at = after_lenencs(data, pos + 5, 2, n)
                if at + 4 > end:
                    return -1
                status = data[at] | data[at + 1] << 8
                warnings = data[at + 2] | data[at + 3] << 8
            else:
                if length < 5:
                    return -1
                status = data[pos + 7] | data[pos + 8] << 8
                warnings = data[pos + 5] | data[pos + 6] << 8
            return -1 if status & _MORE else end << 32 | warnings << 16 | status
        if b == 0xFF:
            return -1
        pos = end
    return -1

