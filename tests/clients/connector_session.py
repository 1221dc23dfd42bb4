"""One mysql-connector-python session, run as its own process; prints what a user's code would see.

`python connector_session.py MODE PORT USER PASSWORD DATABASE TABLE` (MODE: pure or cext) prints one JSON
list of observations, so the same session against pydble and against one MariaDB can be compared.
mysql-connector-python 26.x on Debian 12: its C extension loads only if imported before `ssl` (it ships
an OpenSSL 3.2 that the system's 3.0, once loaded, shadows), so cext mode imports it first.
"""

from __future__ import annotations

import json
import sys
from typing import Any

NO_CEXT = 3   # exit code: the C extension cannot be loaded here

if sys.argv[1] == "cext":
    try:
        import _mysql_connector  # noqa: F401  (see the module docstring)
    except ImportError as e:
        print(f"mysql-connector-python's C extension cannot be loaded: {e}", file=sys.stderr)
        sys.exit(NO_CEXT)

import mysql.connector


def main(mode: str, port: str, user: str, password: str, database: str, table: str) -> None:
    seen: list[Any] = []

    def note(what: str, value: Any) -> None:
        seen.append([what, repr(value)])

    c = mysql.connector.connect(host="127.0.0.1", port=int(port), user=user, password=password,
                                database=database, use_pure=mode == "pure", charset="utf8mb4")
    note("connection", (type(c).__name__, c.autocommit, c.in_transaction))
    cur = c.cursor()
    cur.execute(f"DROP TABLE IF EXISTS {table}")
    cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
                "amount DECIMAL(10,2), at DATETIME, note TEXT)")
    cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)",
                    [(i, f"n{i}", f"{i * 1.5:.2f}", f"2024-01-0{1 + i % 9} 03:04:05", None if i % 3 else "é'\"")
                     for i in range(12)])
    note("executemany", (cur.rowcount, c.in_transaction))
    c.commit()
    note("after commit", c.in_transaction)
    cur.execute(f"SELECT * FROM {table} ORDER BY id")
    note("rows", cur.fetchall())
    note("description", [d[:2] + d[6:7] for d in cur.description])
    cur.execute(f"SELECT COUNT(*), SUM(amount), MAX(at) FROM {table}")
    note("aggregate", cur.fetchall())
    dc = c.cursor(dictionary=True)
    dc.execute(f"SELECT id, name FROM {table} WHERE id IN (1, 5, 9) ORDER BY id DESC")
    note("dictionary", dc.fetchall())
    pc = c.cursor(prepared=True)
    pc.execute(f"SELECT id, name, amount, at FROM {table} WHERE id = %s", (7,))
    note("prepared point", pc.fetchall())
    pc.execute(f"SELECT id, amount FROM {table} WHERE id IN (%s, %s, %s) ORDER BY id", (2, 3, 11))
    note("prepared in", pc.fetchall())
    pc.execute(f"UPDATE {table} SET name = %s, amount = amount + %s WHERE id = %s", ("upd", 0.25, 4))
    note("prepared update", (pc.rowcount, c.in_transaction))
    c.commit()
    pc.execute(f"SELECT name, amount FROM {table} WHERE id = %s", (4,))
    note("committed update", pc.fetchall())
    cur.execute(f"INSERT INTO {table} (id, name) VALUES (100, 'gone'), (101, 'gone too')")
    note("in transaction", c.in_transaction)
    c.rollback()
    cur.execute(f"SELECT COUNT(*) FROM {table} WHERE id >= 100")
    note("rolled back", cur.fetchall())
    try:
        cur.execute(f"INSERT INTO {table} (id, name) VALUES (5, 'dup')")
    except mysql.connector.Error as e:
        note("duplicate", (e.errno, e.sqlstate))
    c.rollback()
    cur.execute("SELECT 1 + 1")
    note("after error", cur.fetchall())
    c.autocommit = True
    cur.execute(f"DELETE FROM {table} WHERE id IN (0, 6)")
    note("autocommit delete", (cur.rowcount, c.in_transaction))
    cur.execute(f"SELECT id FROM {table} ORDER BY id")
    note("final ids", cur.fetchall())
    c.close()
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:])
