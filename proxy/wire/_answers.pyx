# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled text_answer_end (proxy/wire/answers.py has the pure-Python one and says what it does).

Built by `make compiled` (scripts/build_compiled.py); the same tests run both."""

cdef Py_ssize_t _after_lenencs(const unsigned char* d, Py_ssize_t pos, int count, Py_ssize_t n):
    cdef unsigned char b
    cdef int i
    for i in range(count):
        if pos >= n:
            return n + 9   # past the end: the caller's bound check refuses it
        b = d[pos]
        if b < 0xFB:
            pos += 1
        elif b == 0xFC:
            pos += 3
        elif b == 0xFD:
            pos += 4
        else:
            pos += 9
    return pos


def text_answer_end(bytes data, Py_ssize_t pos, Py_ssize_t stop, bint deprecate_eof):
    """Where the whole answer at data[pos:] ends, with its warnings and status (answers.py), else -1."""
    cdef const unsigned char* d = data
    cdef Py_ssize_t n = len(data)
    cdef Py_ssize_t length, end, at, i, cols
    cdef unsigned int status, warnings
    cdef unsigned char first, b
    if pos < 0:
        return -1
    if stop < n:
        n = stop
    if n - pos < 5:
        return -1
    length = d[pos] | d[pos + 1] << 8 | d[pos + 2] << 16
    end = pos + 4 + length
    if length == 0 or end > n:
        return -1
    first = d[pos + 4]
    if first == 0:
        if length < 7:
            return -1
        at = _after_lenencs(d, pos + 5, 2, n)
        if at + 4 > end:
            return -1
        status = d[at] | d[at + 1] << 8
        if status & 0x0008:
            return -1
        warnings = d[at + 2] | d[at + 3] << 8
        return (<long long>end) << 32 | (<long long>warnings) << 16 | status
    if first >= 0xFB:
        return -1
    pos = end
    cols = first if deprecate_eof else first + 1
    for i in range(cols):
        if pos + 4 > n:
            return -1
        pos += 4 + (d[pos] | d[pos + 1] << 8 | d[pos + 2] << 16)
    while pos + 4 < n:
        length = d[pos] | d[pos + 1] << 8 | d[pos + 2] << 16
        end = pos + 4 + length
        if length >= 0xFFFFFF or end > n:
            return -1
        b = d[pos + 4]
        if b == 0xFE and (length < 9 or deprecate_eof):
            if deprecate_eof:
                at = _after_lenencs(d, pos + 5, 2, n)
                if at + 4 > end:
                    return -1
                status = d[at] | d[at + 1] << 8
                warnings = d[at + 2] | d[at + 3] << 8
            else:
                if length < 5:
                    return -1
                status = d[pos + 7] | d[pos + 8] << 8
                warnings = d[pos + 5] | d[pos + 6] << 8
            if status & 0x0008:
                return -1
            return (<long long>end) << 32 | (<long long>warnings) << 16 | status
        if b == 0xFF:
            return -1
        pos = end
    return -1
