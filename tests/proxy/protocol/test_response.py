"""Byte-level tests of ResponseScanner (proxy/wire/response.py).

The fixtures were read off the wire from MariaDB 10.11.19 with a raw-socket client (handshake by
build_handshake_response), once without and once with CLIENT_DEPRECATE_EOF ("_EOF" / "_DEOF"),
against `pydble_codec_capture.t (id INT UNSIGNED AUTO_INCREMENT PRIMARY KEY, name VARCHAR(300)
utf8mb4, score DECIMAL(10,2)) AUTO_INCREMENT=1000` holding (1000,'alice',1.50), (1001,'',NULL),
(1002,NULL,-2.25) and (2000, REPEAT('x',300), 0). The 300-byte values are written as b"x" * 300.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import constants as C
from proxy.wire.messages import (
    ColumnDef,
    ErrInfo,
    OkInfo,
    ResultSet,
    encode_resultset,
    encode_text_row,
    eof_packet,
    err_packet,
    ok_packet,
)
from proxy.wire.packets import ProtocolError, frame, packets_seq_after
from proxy.wire.response import ResponseScanner


def _h(s: str) -> bytes:
    return bytes.fromhex(s)


# -- captured responses ----------------------------------------------------------------------------

# INSERT INTO t (name, score) VALUES ('alice', 1.50), ('', NULL), (NULL, -2.25)
INSERT_EOF = (
    _h("""
        30 00 00 01 00 03 fc e8 03 02 00 00 00 26 52 65 63 6f 72 64 73 3a 20 33 20 20 44 75 70 6c 69 63
        61 74 65 73 3a 20 30 20 20 57 61 72 6e 69 6e 67 73 3a 20 30
    """)
)

# SELECT id, name, score FROM t ORDER BY id
SELECT_EOF = (
    _h("""
        01 00 00 01 03
        30 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        36 00 00 04 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 05 73 63 6f 72 65 05 73 63 6f 72 65 0c 3f 00 0c 00 00 00 f6 00 00 02 00 00
        05 00 00 05 fe 00 00 22 00
        10 00 00 06 04 31 30 30 30 05 61 6c 69 63 65 04 31 2e 35 30
        07 00 00 07 04 31 30 30 31 00 fb
        0c 00 00 08 04 31 30 30 32 fb 05 2d 32 2e 32 35
    """)
    + _h("39 01 00 09 04 32 30 30 30 fc 2c 01") + b"x" * 300 + _h("04 30 2e 30 30")
    + _h("""
        05 00 00 0a fe 00 00 22 00
    """)
)

# SELECT name, id FROM t WHERE id = 2000  (the row starts with 0xFC)
SELECT_LONG_FIRST_EOF = (
    _h("""
        01 00 00 01 02
        34 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        30 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        05 00 00 04 fe 00 00 02 00
    """)
    + _h("34 01 00 05 fc 2c 01") + b"x" * 300 + _h("04 32 30 30 30")
    + _h("""
        05 00 00 06 fe 00 00 02 00
    """)
)

# SELECT id, name FROM t WHERE 1=0
EMPTY_EOF = (
    _h("""
        01 00 00 01 02
        30 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        05 00 00 04 fe 00 00 02 00
        05 00 00 05 fe 00 00 02 00
    """)
)

# SELECT * FROM no_such_table
ERR_EOF = (
    _h("""
        41 00 00 01 ff 7a 04 23 34 32 53 30 32 54 61 62 6c 65 20 27 70 79 64 62 6c 65 5f 63 6f 64 65 63
        5f 63 61 70 74 75 72 65 2e 6e 6f 5f 73 75 63 68 5f 74 61 62 6c 65 27 20 64 6f 65 73 6e 27 74 20
        65 78 69 73 74
    """)
)

# SELECT 1 AS a; SELECT 'x' AS b, NULL AS c; UPDATE t SET score = score WHERE id = 0;
# SELECT id FROM t WHERE 1=0
MULTI_EOF = (
    _h("""
        01 00 00 01 01
        17 00 00 02 03 64 65 66 00 00 00 01 61 00 0c 3f 00 01 00 00 00 03 81 00 00 00 00
        05 00 00 03 fe 00 00 0a 00
        02 00 00 04 01 31
        05 00 00 05 fe 00 00 0a 00
        01 00 00 06 02
        17 00 00 07 03 64 65 66 00 00 00 01 62 00 0c 2d 00 04 00 00 00 fd 01 00 27 00 00
        17 00 00 08 03 64 65 66 00 00 00 01 63 00 0c 3f 00 00 00 00 00 06 80 00 00 00 00
        05 00 00 09 fe 00 00 0a 00
        03 00 00 0a 01 78 fb
        05 00 00 0b fe 00 00 0a 00
        30 00 00 0c 00 00 00 0a 00 00 00 28 52 6f 77 73 20 6d 61 74 63 68 65 64 3a 20 30 20 20 43 68 61
        6e 67 65 64 3a 20 30 20 20 57 61 72 6e 69 6e 67 73 3a 20 30
        01 00 00 0d 01
        30 00 00 0e 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        05 00 00 0f fe 00 00 02 00
        05 00 00 10 fe 00 00 02 00
    """)
)

# SELECT 1; SELECT * FROM no_such_table; SELECT 2
MULTI_ERR_EOF = (
    _h("""
        01 00 00 01 01
        17 00 00 02 03 64 65 66 00 00 00 01 31 00 0c 3f 00 01 00 00 00 03 81 00 00 00 00
        05 00 00 03 fe 00 00 0a 00
        02 00 00 04 01 31
        05 00 00 05 fe 00 00 0a 00
        41 00 00 06 ff 7a 04 23 34 32 53 30 32 54 61 62 6c 65 20 27 70 79 64 62 6c 65 5f 63 6f 64 65 63
        5f 63 61 70 74 75 72 65 2e 6e 6f 5f 73 75 63 68 5f 74 61 62 6c 65 27 20 64 6f 65 73 6e 27 74 20
        65 78 69 73 74
    """)
)

# COM_FIELD_LIST t
FIELD_LIST_EOF = (
    _h("""
        32 00 00 01 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00 01 30
        35 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00 fb
        37 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 05 73 63 6f 72 65 05 73 63 6f 72 65 0c 3f 00 0c 00 00 00 f6 00 00 02 00 00 fb
        05 00 00 04 fe 00 00 02 00
    """)
)

# COM_FIELD_LIST no_such_table
FIELD_LIST_ERR_EOF = (
    _h("""
        41 00 00 01 ff 7a 04 23 34 32 53 30 32 54 61 62 6c 65 20 27 70 79 64 62 6c 65 5f 63 6f 64 65 63
        5f 63 61 70 74 75 72 65 2e 6e 6f 5f 73 75 63 68 5f 74 61 62 6c 65 27 20 64 6f 65 73 6e 27 74 20
        65 78 69 73 74
    """)
)

# BEGIN
BEGIN_EOF = (
    _h("""
        07 00 00 01 00 00 00 03 00 00 00
    """)
)

# SELECT COUNT(*) FROM t  (inside the transaction)
SELECT_IN_TRANS_EOF = (
    _h("""
        01 00 00 01 01
        1e 00 00 02 03 64 65 66 00 00 00 08 43 4f 55 4e 54 28 2a 29 00 0c 3f 00 15 00 00 00 08 81 00 00
        00 00
        05 00 00 03 fe 00 00 23 00
        02 00 00 04 01 34
        05 00 00 05 fe 00 00 23 00
    """)
)

# ROLLBACK
ROLLBACK_EOF = (
    _h("""
        07 00 00 01 00 00 00 02 00 00 00
    """)
)

# COM_STMT_PREPARE SELECT id, name FROM t WHERE id > ? AND name <> ?
PREPARE_EOF = (
    _h("""
        0c 00 00 01 00 01 00 00 00 02 00 02 00 00 00 00
        17 00 00 02 03 64 65 66 00 00 00 01 3f 00 0c 3f 00 00 00 00 00 06 80 00 00 00 00
        17 00 00 03 03 64 65 66 00 00 00 01 3f 00 0c 3f 00 00 00 00 00 06 80 00 00 00 00
        05 00 00 04 fe 00 00 02 00
        30 00 00 05 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 06 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        05 00 00 07 fe 00 00 02 00
    """)
)

# COM_STMT_EXECUTE of it with (0, 'zz'): binary rows
EXECUTE_EOF = (
    _h("""
        01 00 00 01 02
        30 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        05 00 00 04 fe 00 00 02 00
        0c 00 00 05 00 00 e8 03 00 00 05 61 6c 69 63 65
        07 00 00 06 00 00 e9 03 00 00 00
    """)
    + _h("35 01 00 07 00 00 d0 07 00 00 fc 2c 01") + b"x" * 300
    + _h("""
        05 00 00 08 fe 00 00 02 00
    """)
)

# ---- the same with CLIENT_DEPRECATE_EOF ----

INSERT_DEOF = (
    _h("""
        30 00 00 01 00 03 fc e8 03 02 00 00 00 26 52 65 63 6f 72 64 73 3a 20 33 20 20 44 75 70 6c 69 63
        61 74 65 73 3a 20 30 20 20 57 61 72 6e 69 6e 67 73 3a 20 30
    """)
)

SELECT_DEOF = (
    _h("""
        01 00 00 01 03
        30 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        36 00 00 04 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 05 73 63 6f 72 65 05 73 63 6f 72 65 0c 3f 00 0c 00 00 00 f6 00 00 02 00 00
        10 00 00 05 04 31 30 30 30 05 61 6c 69 63 65 04 31 2e 35 30
        07 00 00 06 04 31 30 30 31 00 fb
        0c 00 00 07 04 31 30 30 32 fb 05 2d 32 2e 32 35
    """)
    + _h("39 01 00 08 04 32 30 30 30 fc 2c 01") + b"x" * 300 + _h("04 30 2e 30 30")
    + _h("""
        07 00 00 09 fe 00 00 22 00 00 00
    """)
)

SELECT_LONG_FIRST_DEOF = (
    _h("""
        01 00 00 01 02
        34 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        30 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
    """)
    + _h("34 01 00 04 fc 2c 01") + b"x" * 300 + _h("04 32 30 30 30")
    + _h("""
        07 00 00 05 fe 00 00 02 00 00 00
    """)
)

EMPTY_DEOF = (
    _h("""
        01 00 00 01 02
        30 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        07 00 00 04 fe 00 00 02 00 00 00
    """)
)

ERR_DEOF = (
    _h("""
        41 00 00 01 ff 7a 04 23 34 32 53 30 32 54 61 62 6c 65 20 27 70 79 64 62 6c 65 5f 63 6f 64 65 63
        5f 63 61 70 74 75 72 65 2e 6e 6f 5f 73 75 63 68 5f 74 61 62 6c 65 27 20 64 6f 65 73 6e 27 74 20
        65 78 69 73 74
    """)
)

MULTI_DEOF = (
    _h("""
        01 00 00 01 01
        17 00 00 02 03 64 65 66 00 00 00 01 61 00 0c 3f 00 01 00 00 00 03 81 00 00 00 00
        02 00 00 03 01 31
        07 00 00 04 fe 00 00 0a 00 00 00
        01 00 00 05 02
        17 00 00 06 03 64 65 66 00 00 00 01 62 00 0c 2d 00 04 00 00 00 fd 01 00 27 00 00
        17 00 00 07 03 64 65 66 00 00 00 01 63 00 0c 3f 00 00 00 00 00 06 80 00 00 00 00
        03 00 00 08 01 78 fb
        07 00 00 09 fe 00 00 0a 00 00 00
        30 00 00 0a 00 00 00 0a 00 00 00 28 52 6f 77 73 20 6d 61 74 63 68 65 64 3a 20 30 20 20 43 68 61
        6e 67 65 64 3a 20 30 20 20 57 61 72 6e 69 6e 67 73 3a 20 30
        01 00 00 0b 01
        30 00 00 0c 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        07 00 00 0d fe 00 00 02 00 00 00
    """)
)

MULTI_ERR_DEOF = (
    _h("""
        01 00 00 01 01
        17 00 00 02 03 64 65 66 00 00 00 01 31 00 0c 3f 00 01 00 00 00 03 81 00 00 00 00
        02 00 00 03 01 31
        07 00 00 04 fe 00 00 0a 00 00 00
        41 00 00 05 ff 7a 04 23 34 32 53 30 32 54 61 62 6c 65 20 27 70 79 64 62 6c 65 5f 63 6f 64 65 63
        5f 63 61 70 74 75 72 65 2e 6e 6f 5f 73 75 63 68 5f 74 61 62 6c 65 27 20 64 6f 65 73 6e 27 74 20
        65 78 69 73 74
    """)
)

FIELD_LIST_DEOF = (
    _h("""
        32 00 00 01 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00 01 30
        35 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00 fb
        37 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 05 73 63 6f 72 65 05 73 63 6f 72 65 0c 3f 00 0c 00 00 00 f6 00 00 02 00 00 fb
        07 00 00 04 fe 00 00 02 00 00 00
    """)
)

FIELD_LIST_ERR_DEOF = (
    _h("""
        41 00 00 01 ff 7a 04 23 34 32 53 30 32 54 61 62 6c 65 20 27 70 79 64 62 6c 65 5f 63 6f 64 65 63
        5f 63 61 70 74 75 72 65 2e 6e 6f 5f 73 75 63 68 5f 74 61 62 6c 65 27 20 64 6f 65 73 6e 27 74 20
        65 78 69 73 74
    """)
)

BEGIN_DEOF = (
    _h("""
        07 00 00 01 00 00 00 03 00 00 00
    """)
)

SELECT_IN_TRANS_DEOF = (
    _h("""
        01 00 00 01 01
        1e 00 00 02 03 64 65 66 00 00 00 08 43 4f 55 4e 54 28 2a 29 00 0c 3f 00 15 00 00 00 08 81 00 00
        00 00
        02 00 00 03 01 34
        07 00 00 04 fe 00 00 23 00 00 00
    """)
)

ROLLBACK_DEOF = (
    _h("""
        07 00 00 01 00 00 00 02 00 00 00
    """)
)

PREPARE_DEOF = (
    _h("""
        0c 00 00 01 00 01 00 00 00 02 00 02 00 00 00 00
        17 00 00 02 03 64 65 66 00 00 00 01 3f 00 0c 3f 00 00 00 00 00 06 80 00 00 00 00
        17 00 00 03 03 64 65 66 00 00 00 01 3f 00 0c 3f 00 00 00 00 00 06 80 00 00 00 00
        30 00 00 04 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 05 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
    """)
)

EXECUTE_DEOF = (
    _h("""
        01 00 00 01 02
        30 00 00 02 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 02 69 64 02 69 64 0c 3f 00 0a 00 00 00 03 23 42 00 00 00
        34 00 00 03 03 64 65 66 14 70 79 64 62 6c 65 5f 63 6f 64 65 63 5f 63 61 70 74 75 72 65 01 74 01
        74 04 6e 61 6d 65 04 6e 61 6d 65 0c 2d 00 b0 04 00 00 fd 00 00 00 00 00
        0c 00 00 04 00 00 e8 03 00 00 05 61 6c 69 63 65
        07 00 00 05 00 00 e9 03 00 00 00
    """)
    + _h("35 01 00 06 00 00 d0 07 00 00 fc 2c 01") + b"x" * 300
    + _h("""
        07 00 00 07 fe 00 00 02 00 00 00
    """)
)

# The binary result set example of the MySQL documentation: one VAR_STRING column, row "foobar"
DOC_BINARY_RESULTSET = _h("""
    01 00 00 01 01
    1a 00 00 02 03 64 65 66 00 00 00 04 63 6f 6c 31 00 0c 08 00 06 00 00 00 fd 00 00 1f 00 00
    05 00 00 03 fe 00 00 02 00
    09 00 00 04 00 00 06 66 6f 6f 62 61 72
    05 00 00 05 fe 00 00 02 00
""")


# -- helpers ---------------------------------------------------------------------------------------

def _packet_ends(data: bytes) -> list[int]:
    """Offsets just after each physical packet of data."""
    ends = []
    pos = 0
    while pos + 4 <= len(data):
        end = pos + 4 + int.from_bytes(data[pos:pos + 3], "little")
        if end > len(data):
            break
        ends.append(end)
        pos = end
    return ends


def _state(sc: ResponseScanner) -> tuple:
    return (sc.done, sc.status, sc.error, sc.ok, sc.packets, sc.prepare_ok, sc.results)


def _scan_whole(data: bytes, deof: bool, kind: str = "query", collect: bool = False) -> ResponseScanner:
    sc = ResponseScanner(deof, kind=kind, collect=collect)
    assert sc.scan(data) == len(data)
    assert sc.done
    return sc


NO_ROWS: list = []
SELECT_ROWS = [[b"1000", b"alice", b"1.50"], [b"1001", b"", None], [b"1002", None, b"-2.25"],
               [b"2000", b"x" * 300, b"0.00"]]
UPDATE_OK = OkInfo(0, 0, C.STATUS_AUTOCOMMIT | C.STATUS_MORE_RESULTS, 0,
                   b"(Rows matched: 0  Changed: 0  Warnings: 0")
INSERT_OK = OkInfo(3, 1000, C.STATUS_AUTOCOMMIT, 0, b"&Records: 3  Duplicates: 0  Warnings: 0")
NO_TABLE = ErrInfo(1146, "42S02", "Table 'pydble_codec_capture.no_such_table' doesn't exist")
AC = C.STATUS_AUTOCOMMIT

# name: (fixture without DEPRECATE_EOF, fixture with it, kind, final status, error, ok,
#        physical packets without/with DEPRECATE_EOF, collected results as [(column names, rows)] or
#        OkInfo for an OK result)
CASES = {
    "insert": (INSERT_EOF, INSERT_DEOF, "query", AC, None, INSERT_OK, (1, 1), [INSERT_OK]),
    "select": (SELECT_EOF, SELECT_DEOF, "query", 0x22, None, None, (10, 9),
               [(["id", "name", "score"], SELECT_ROWS)]),
    "select_long_first": (SELECT_LONG_FIRST_EOF, SELECT_LONG_FIRST_DEOF, "query", AC, None, None, (6, 5),
                          [(["name", "id"], [[b"x" * 300, b"2000"]])]),
    "empty": (EMPTY_EOF, EMPTY_DEOF, "query", AC, None, None, (5, 4), [(["id", "name"], NO_ROWS)]),
    "err": (ERR_EOF, ERR_DEOF, "query", 0, NO_TABLE, None, (1, 1), []),
    "multi": (MULTI_EOF, MULTI_DEOF, "query", AC, None, UPDATE_OK, (16, 13),
              [(["a"], [[b"1"]]), (["b", "c"], [[b"x", None]]), UPDATE_OK, (["id"], NO_ROWS)]),
    "multi_err": (MULTI_ERR_EOF, MULTI_ERR_DEOF, "query", AC, NO_TABLE, None, (6, 5), [(["1"], [[b"1"]])]),
    "field_list": (FIELD_LIST_EOF, FIELD_LIST_DEOF, "field_list", AC, None, None, (4, 4),
                   [(["id", "name", "score"], [])]),   # collected: the column definitions, no rows
    "field_list_err": (FIELD_LIST_ERR_EOF, FIELD_LIST_ERR_DEOF, "field_list", 0, NO_TABLE, None, (1, 1), []),
    "begin": (BEGIN_EOF, BEGIN_DEOF, "query", C.STATUS_IN_TRANS | AC, None,
              OkInfo(0, 0, C.STATUS_IN_TRANS | AC), (1, 1), [OkInfo(0, 0, C.STATUS_IN_TRANS | AC)]),
    "select_in_trans": (SELECT_IN_TRANS_EOF, SELECT_IN_TRANS_DEOF, "query", 0x23, None, None, (5, 4),
                        [(["COUNT(*)"], [[b"4"]])]),
    "rollback": (ROLLBACK_EOF, ROLLBACK_DEOF, "query", AC, None, OkInfo(0, 0, AC), (1, 1), [OkInfo(0, 0, AC)]),
    "prepare": (PREPARE_EOF, PREPARE_DEOF, "prepare", 0, None, None, (7, 5), []),
}
PARAMS = [(name, deof) for name in CASES for deof in (False, True)]
IDS = [f"{name}-{'deprecate_eof' if deof else 'eof'}" for name, deof in PARAMS]


def _fixture(name: str, deof: bool) -> bytes:
    return CASES[name][1 if deof else 0]


def _check_results(sc: ResponseScanner, expected: list) -> None:
    assert len(sc.results) == len(expected)
    for rs, exp in zip(sc.results, expected):
        if isinstance(exp, OkInfo):
            assert rs.columns == [] and rs.rows == [] and rs.ok == exp
        else:
            names, rows = exp
            assert [c.name for c in rs.columns] == names
            assert rs.rows == rows
            assert rs.ok is None


def test_fixtures_hold_whole_packets_with_consecutive_sequence_ids() -> None:
    for name, deof in PARAMS:
        data = _fixture(name, deof)
        ends = _packet_ends(data)
        assert ends and ends[-1] == len(data), name
        seqs = [data[start + 3] for start in [0] + ends[:-1]]
        assert seqs == list(range(1, len(seqs) + 1)), name


@pytest.mark.parametrize("name,deof", PARAMS, ids=IDS)
def test_scan_captured_response(name: str, deof: bool) -> None:
    data = _fixture(name, deof)
    _, _, kind, status, error, ok, packets, _ = CASES[name]
    sc = _scan_whole(data, deof, kind)
    assert sc.status == status
    assert sc.error == error
    assert sc.ok == ok
    assert sc.packets == packets[deof]
    assert sc.results == []  # nothing kept without collect


@pytest.mark.parametrize("name,deof", PARAMS, ids=IDS)
def test_collect_captured_response(name: str, deof: bool) -> None:
    data = _fixture(name, deof)
    _, _, kind, status, error, ok, _, expected = CASES[name]
    sc = _scan_whole(data, deof, kind, collect=True)
    assert (sc.status, sc.error, sc.ok) == (status, error, ok)
    _check_results(sc, expected)


def test_collected_column_definitions_are_complete() -> None:
    sc = _scan_whole(SELECT_DEOF, True, collect=True)
    id_col, name_col, score_col = sc.results[0].columns
    assert (id_col.type, id_col.charset, id_col.schema, id_col.table) == (C.T_LONG, 63, "pydble_codec_capture", "t")
    assert (name_col.type, name_col.charset, name_col.length) == (C.T_VAR_STRING, 45, 1200)
    assert (score_col.type, score_col.decimals) == (C.T_NEWDECIMAL, 2)
    # the raw bytes are the server's, so a merged result can re-send them unchanged
    assert name_col.encode() == SELECT_DEOF[_packet_ends(SELECT_DEOF)[1] + 4:_packet_ends(SELECT_DEOF)[2]]


@pytest.mark.parametrize("deof", [False, True])
def test_prepare_ok_is_kept(deof: bool) -> None:
    sc = _scan_whole(_fixture("prepare", deof), deof, "prepare")
    assert sc.prepare_ok == _h("00 01 00 00 00 02 00 02 00 00 00 00")


@pytest.mark.parametrize("deof", [False, True])
def test_execute_binary_rows(deof: bool) -> None:
    data = EXECUTE_DEOF if deof else EXECUTE_EOF
    sc = _scan_whole(data, deof, "execute", collect=True)
    assert sc.status == AC and sc.error is None
    assert sc.packets == (7 if deof else 8)
    rs, = sc.results
    assert [c.name for c in rs.columns] == ["id", "name"]
    assert rs.rows == [[_h("00 00 e8 03 00 00 05 61 6c 69 63 65")],
                       [_h("00 00 e9 03 00 00 00")],
                       [_h("00 00 d0 07 00 00 fc 2c 01") + b"x" * 300]]


def test_execute_documentation_example() -> None:
    sc = _scan_whole(DOC_BINARY_RESULTSET, False, "execute", collect=True)
    assert sc.status == AC and sc.packets == 5
    assert sc.results[0].columns[0].name == "col1"
    assert sc.results[0].rows == [[_h("00 00 06 66 6f 6f 62 61 72")]]


# -- split points ----------------------------------------------------------------------------------

ALL_FIXTURES = PARAMS + [("execute", False), ("execute", True)]
ALL_IDS = IDS + ["execute-eof", "execute-deprecate_eof"]


def _kind(name: str) -> str:
    return "execute" if name == "execute" else CASES[name][2]


def _data(name: str, deof: bool) -> bytes:
    if name == "execute":
        return EXECUTE_DEOF if deof else EXECUTE_EOF
    return _fixture(name, deof)


@pytest.mark.parametrize("collect", [False, True])
@pytest.mark.parametrize("name,deof", ALL_FIXTURES, ids=ALL_IDS)
def test_split_at_every_offset(name: str, deof: bool, collect: bool) -> None:
    data = _data(name, deof)
    kind = _kind(name)
    ends = [0] + _packet_ends(data)
    whole = _scan_whole(data, deof, kind, collect)
    for k in range(len(data) + 1):
        sc = ResponseScanner(deof, kind=kind, collect=collect)
        first = sc.scan(data[:k])
        assert first == max(e for e in ends if e <= k), k
        assert sc.done == (first == len(data))
        assert sc.scan(data, first) == len(data)
        assert _state(sc) == _state(whole), k


@pytest.mark.parametrize("name,deof", ALL_FIXTURES, ids=ALL_IDS)
def test_byte_at_a_time_with_a_trimmed_buffer(name: str, deof: bool) -> None:
    """The caller keeps a buffer, appends what arrives and drops what the scanner consumed."""
    data = _data(name, deof)
    kind = _kind(name)
    ends = set(_packet_ends(data))
    sc = ResponseScanner(deof, kind=kind, collect=True)
    buf = bytearray()
    consumed = 0
    for i in range(len(data)):
        buf += data[i:i + 1]
        n = sc.scan(buf)
        if n:
            consumed += n
            assert consumed in ends and n == len(buf), i
            del buf[:n]
        assert sc.done == (i == len(data) - 1)
    assert consumed == len(data) and not buf
    assert _state(sc) == _state(_scan_whole(data, deof, kind, True))


@pytest.mark.parametrize("name,deof", ALL_FIXTURES, ids=ALL_IDS)
def test_growing_buffer_with_start_offset(name: str, deof: bool) -> None:
    data = _data(name, deof)
    kind = _kind(name)
    prefix = b"\xaa" * 7  # bytes of an earlier response, already relayed
    stream = prefix + data
    sc = ResponseScanner(deof, kind=kind)
    pos = len(prefix)
    for k in range(len(prefix), len(stream) + 1):
        pos = sc.scan(memoryview(stream)[:k], pos)
        assert pos - len(prefix) in [0] + _packet_ends(data)
    assert pos == len(stream) and sc.done


@pytest.mark.parametrize("name,deof", ALL_FIXTURES, ids=ALL_IDS)
def test_scanner_stops_at_the_end_of_its_response(name: str, deof: bool) -> None:
    data = _data(name, deof)
    kind = _kind(name)
    nxt = ROLLBACK_EOF + SELECT_EOF
    sc = ResponseScanner(deof, kind=kind)
    assert sc.scan(data + nxt) == len(data)
    assert sc.done
    assert sc.scan(data + nxt, len(data)) == len(data)  # done: consumes nothing more
    sc2 = ResponseScanner(deof)
    assert sc2.scan(data + nxt, len(data)) == len(data) + len(ROLLBACK_EOF)


@pytest.mark.parametrize("deof", [False, True])
def test_pipelined_responses_in_one_buffer(deof: bool) -> None:
    stream = b"".join(_fixture(n, deof) for n in ("begin", "select", "multi", "err", "rollback"))
    pos = 0
    seen = []
    while pos < len(stream):
        sc = ResponseScanner(deof, collect=True)
        pos = sc.scan(stream, pos)
        assert sc.done
        seen.append((sc.status, sc.error is not None, len(sc.results)))
    assert seen == [(3, False, 1), (0x22, False, 1), (AC, False, 4), (0, True, 0), (AC, False, 1)]


# -- status flags ----------------------------------------------------------------------------------

def test_in_trans_flag_follows_the_server() -> None:
    for deof in (False, True):
        assert _scan_whole(_fixture("begin", deof), deof).status & C.STATUS_IN_TRANS
        assert _scan_whole(_fixture("select_in_trans", deof), deof).status & C.STATUS_IN_TRANS
        assert not _scan_whole(_fixture("rollback", deof), deof).status & C.STATUS_IN_TRANS


def test_more_results_is_cleared_at_the_end() -> None:
    for name in ("multi", "multi_err"):
        for deof in (False, True):
            assert not _scan_whole(_fixture(name, deof), deof).status & C.STATUS_MORE_RESULTS


@pytest.mark.parametrize("deof", [False, True])
def test_status_while_more_results_pending(deof: bool) -> None:
    data = _fixture("multi", deof)
    sc = ResponseScanner(deof)
    ends = _packet_ends(data)
    # after the first result's terminator the scanner waits for the next result
    first_end = ends[4] if not deof else ends[3]
    assert sc.scan(data[:first_end]) == first_end
    assert not sc.done and sc.status == AC | C.STATUS_MORE_RESULTS


# -- rows that start with special bytes and rows over 16 MB -----------------------------------------

def _resultset(deof: bool, rows_payloads: list[bytes], ncols: int = 2, status: int = AC) -> bytes:
    seq = 1
    out = [frame(seq, bytes((ncols,)))]
    for i in range(ncols):
        seq += 1
        out.append(frame(seq, ColumnDef(f"c{i}").encode()))
    if not deof:
        seq += 1
        out.append(frame(seq, eof_packet(0, status)))
    seq += 1
    for p in rows_payloads:
        out.append(frame(seq, p))
        seq = packets_seq_after(seq, len(p))
    out.append(frame(seq, ok_packet(status=status, header=0xFE) if deof else eof_packet(0, status)))
    return b"".join(out)


def _interesting_cuts(data: bytes) -> list[int]:
    cuts = set()
    for e in [0] + _packet_ends(data):
        for d in (-1, 0, 1, 3, 4, 5):  # inside the previous packet, at and inside the next header
            if 0 <= e + d <= len(data):
                cuts.add(e + d)
    return sorted(cuts)


def _check_big(data: bytes, deof: bool, rows: list[list[bytes | None]], physical: int) -> None:
    for collect in (False, True):
        whole = _scan_whole(data, deof, collect=collect)
        assert whole.status == AC and whole.error is None and whole.packets == physical
        if collect:
            assert whole.results[0].rows == rows
        view = memoryview(data)
        for k in _interesting_cuts(data):
            sc = ResponseScanner(deof, collect=collect)
            first = sc.scan(view[:k])
            assert first == max(e for e in [0] + _packet_ends(data) if e <= k)
            assert sc.scan(data, first) == len(data)
            assert _state(sc) == _state(whole)


@pytest.mark.parametrize("deof", [False, True])
def test_row_starting_with_0xfe_over_16mb(deof: bool) -> None:
    big = b"\xfe" * (C.MAX_PACKET + 5)  # first value needs an 8-byte length: the row starts with 0xFE
    row = encode_text_row([big, b"1"])
    assert row[0] == 0xFE
    data = _resultset(deof, [row, encode_text_row([b"2", None])])
    # count, 2 columns, [EOF], 2 + 1 row packets, terminator
    _check_big(data, deof, [[big, b"1"], [b"2", None]], 7 if deof else 8)


@pytest.mark.parametrize("deof", [False, True])
def test_row_of_exactly_16mb_is_followed_by_an_empty_packet(deof: bool) -> None:
    value = b"v" * (C.MAX_PACKET - 4 - 1)  # fd + 3-byte length + value + 1 byte for a NULL
    row = encode_text_row([value, None])
    assert len(row) == C.MAX_PACKET and row[0] == 0xFD
    data = _resultset(deof, [row])
    assert _h("00 00 00") in data  # the empty continuation packet
    _check_big(data, deof, [[value, None]], 6 if deof else 7)


@pytest.mark.parametrize("deof", [False, True])
def test_row_over_32mb_with_a_small_first_value(deof: bool) -> None:
    big = b"\xff" * (2 * C.MAX_PACKET + 3)
    data = _resultset(deof, [encode_text_row([b"", big])])
    _check_big(data, deof, [[b"", big]], 7 if deof else 8)


@pytest.mark.parametrize("deof", [False, True])
def test_rows_starting_with_0xfc_and_0xfd(deof: bool) -> None:
    rows = [[b"a" * 251, b"x"], [b"b" * 0x10000, None], [b"c" * 250, b""]]
    data = _resultset(deof, [encode_text_row(r) for r in rows])
    assert data.count(_h("fc fb 00")) == 1 and data.count(_h("fd 00 00 01")) == 1
    sc = _scan_whole(data, deof, collect=True)
    assert sc.results[0].rows == rows


def test_0xfe_packet_of_9_bytes_is_a_row_without_deprecate_eof() -> None:
    # classic EOF is recognised by its length (< 9); a longer 0xFE packet is a row
    head = _resultset(False, [])
    head = head[:_packet_ends(head)[-2]]  # count, 2 columns, EOF
    sc = ResponseScanner(False)
    data = head + frame(5, _h("fe 00 00 00 00 00 00 00 00"))
    assert sc.scan(data) == len(data) and not sc.done
    data += frame(6, eof_packet(0, AC))
    assert sc.scan(data, len(data) - 9) == len(data) and sc.done and sc.status == AC


def test_long_ok_terminator_with_deprecate_eof() -> None:
    # under DEPRECATE_EOF the terminator is an OK packet with header 0xFE, and it may carry info
    data = _resultset(True, [encode_text_row([b"1", b"2"])])
    end = _packet_ends(data)[-2]
    data = data[:end] + frame(data[end + 3], ok_packet(status=AC | C.STATUS_IN_TRANS, warnings=2, header=0xFE,
                                                      info=b"a long info text, not a row"))
    sc = _scan_whole(data, True, collect=True)
    assert sc.status == AC | C.STATUS_IN_TRANS
    assert sc.results[0].rows == [[b"1", b"2"]]


# -- ERR in the middle -----------------------------------------------------------------------------

@pytest.mark.parametrize("deof", [False, True])
def test_err_instead_of_the_row_terminator(deof: bool) -> None:
    data = _resultset(deof, [encode_text_row([b"1", b"2"])])
    last = _packet_ends(data)[-2]
    seq = data[last + 3]
    data = data[:last] + frame(seq, err_packet(1317, "70100", "Query execution was interrupted"))
    sc = _scan_whole(data, deof, collect=True)
    assert sc.error == ErrInfo(1317, "70100", "Query execution was interrupted")
    assert sc.results == []  # an interrupted result is not kept


# -- malformed responses ---------------------------------------------------------------------------

def test_local_infile_request_is_refused() -> None:
    with pytest.raises(ProtocolError):
        ResponseScanner(False).scan(frame(1, b"\xfb/tmp/data.csv"))


def test_zero_column_count_is_refused() -> None:
    with pytest.raises(ProtocolError):
        ResponseScanner(False).scan(frame(1, _h("fc 00 00")))


def test_empty_first_packet_is_refused() -> None:
    with pytest.raises(ProtocolError):
        ResponseScanner(False).scan(frame(1, b""))


def test_deprecate_eof_mismatch_is_detected() -> None:
    # a DEPRECATE_EOF response read as a classic one: the first row comes where the EOF should be
    with pytest.raises(ProtocolError):
        ResponseScanner(False).scan(SELECT_DEOF)
    # a classic response read as DEPRECATE_EOF: the metadata EOF is too short for an OK packet
    with pytest.raises(ProtocolError):
        ResponseScanner(True).scan(SELECT_EOF)


def test_truncated_column_definition_when_collecting() -> None:
    data = frame(1, b"\x01") + frame(2, b"\x03def\x00")
    with pytest.raises(ProtocolError):
        ResponseScanner(True, collect=True).scan(data)


# -- COM_STMT_PREPARE shapes ----------------------------------------------------------------------

def _prepare_ok(ncols: int, nparams: int) -> bytes:
    return b"\x00" + (5).to_bytes(4, "little") + ncols.to_bytes(2, "little") + nparams.to_bytes(2, "little") \
        + b"\x00" + b"\x00\x00"


@pytest.mark.parametrize("deof", [False, True])
@pytest.mark.parametrize("ncols,nparams", [(0, 0), (0, 2), (3, 0), (2, 1)])
def test_prepare_shapes(deof: bool, ncols: int, nparams: int) -> None:
    seq = 1
    out = [frame(seq, _prepare_ok(ncols, nparams))]
    for block in (nparams, ncols):
        if not block:
            continue
        for _ in range(block):
            seq += 1
            out.append(frame(seq, ColumnDef("?").encode()))
        if not deof:
            seq += 1
            out.append(frame(seq, eof_packet(0, AC)))
    data = b"".join(out)
    sc = _scan_whole(data, deof, "prepare")
    assert sc.prepare_ok == _prepare_ok(ncols, nparams) and sc.packets == len(out)
    # and it stops there when the next response follows at once
    sc = ResponseScanner(deof, kind="prepare")
    assert sc.scan(data + ROLLBACK_EOF) == len(data)


def test_prepare_error() -> None:
    err = frame(1, err_packet(1064, "42000", "You have an error in your SQL syntax"))
    sc = _scan_whole(err, True, "prepare")
    assert sc.error and sc.error.code == 1064 and sc.prepare_ok is None


def test_prepare_ok_too_short() -> None:
    with pytest.raises(ProtocolError):
        ResponseScanner(True, kind="prepare").scan(frame(1, b"\x00\x01\x00\x00\x00"))


# -- properties ------------------------------------------------------------------------------------

_value = st.one_of(st.none(), st.binary(max_size=300))


@st.composite
def _results(draw: st.DrawFn) -> list[ResultSet]:
    out = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            ok = OkInfo(draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40)), 0, draw(st.integers(0, 5)))
            out.append(ResultSet([], [], ok))
        else:
            ncols = draw(st.integers(1, 4))
            cols = [ColumnDef(f"c{i}", draw(st.sampled_from([C.T_VAR_STRING, C.T_LONG, C.T_BLOB])))
                    for i in range(ncols)]
            rows = draw(st.lists(st.lists(_value, min_size=ncols, max_size=ncols), max_size=6))
            out.append(ResultSet(cols, rows))
    return out


def _encode_results(results: list[ResultSet], deof: bool, final_status: int) -> bytes:
    """Frame several results as one multi-result response; each result starts at seq 1 here."""
    out = []
    seq = 1
    for i, rs in enumerate(results):
        status = final_status | (C.STATUS_MORE_RESULTS if i < len(results) - 1 else 0)
        if rs.ok is not None:
            o = rs.ok
            out.append(frame(seq, ok_packet(o.affected_rows, o.last_insert_id, status, o.warnings)))
            seq += 1
        else:
            data, seq = encode_resultset(rs, seq, status, deof)
            out.append(data)
    return b"".join(out)


@settings(max_examples=200, deadline=None)
@given(_results(), st.booleans(), st.sampled_from([0, AC, AC | C.STATUS_IN_TRANS]), st.data())
def test_random_results_scan_and_collect(results: list[ResultSet], deof: bool, status: int,
                                         data: st.DataObject) -> None:
    stream = _encode_results(results, deof, status)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    ends = set(_packet_ends(stream)) | {0}
    sc = ResponseScanner(deof, collect=True)
    pos = 0
    for c in cuts + [len(stream)]:
        pos = sc.scan(stream[:c], pos)
        assert pos in ends and pos <= c
    assert pos == len(stream) and sc.done
    assert sc.status == status
    assert len(sc.results) == len(results)
    for got, exp in zip(sc.results, results):
        if exp.ok is not None:
            assert got.ok is not None
            assert (got.ok.affected_rows, got.ok.last_insert_id, got.ok.warnings) == \
                (exp.ok.affected_rows, exp.ok.last_insert_id, exp.ok.warnings)
        else:
            assert [(c.name, c.type) for c in got.columns] == [(c.name, c.type) for c in exp.columns]
            assert got.rows == exp.rows


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=120), st.booleans(), st.sampled_from(["query", "execute", "field_list", "prepare"]),
       st.booleans())
def test_scanner_on_random_bytes_raises_only_protocol_error(buf: bytes, deof: bool, kind: str,
                                                            collect: bool) -> None:
    sc = ResponseScanner(deof, kind=kind, collect=collect)
    try:
        n = sc.scan(buf)
    except ProtocolError:
        return
    assert 0 <= n <= len(buf)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=8), st.booleans(),
       st.sampled_from(["query", "execute", "field_list", "prepare"]), st.booleans())
def test_scanner_on_random_packets_raises_only_protocol_error(payloads: list[bytes], deof: bool, kind: str,
                                                              collect: bool) -> None:
    # well-framed packets with random contents get past the framing into every state
    stream = b"".join(frame(i + 1, p) for i, p in enumerate(payloads))
    sc = ResponseScanner(deof, kind=kind, collect=collect)
    try:
        n = sc.scan(stream)
    except ProtocolError:
        return
    assert n in set(_packet_ends(stream)) | {0}
