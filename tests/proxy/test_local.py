"""Statements the proxy answers itself, read from tokens: SET in version comments, SHOW TABLE STATUS rows,
CREATE DATABASE IF NOT EXISTS."""

from __future__ import annotations

from typing import Iterator

import pytest

from meta.errors import ParseError
from proxy.plan import local, sqltok
from proxy.wire.constants import T_LONGLONG, T_VAR_STRING
from proxy.wire.messages import ColumnDef


@pytest.fixture(autouse=True)
def mariadb_10_11() -> Iterator[None]:
    sqltok.set_server_version("5.5.5-10.11.19-MariaDB-0+deb12u1")
    yield
    sqltok.set_server_version("5.7.21-pydble")


@pytest.mark.parametrize("sql, keys, replay", [
    ("/*!40100 SET @@SQL_MODE='' */", ["sql_mode"], ["SET SESSION sql_mode = ''"]),
    ("/*!40101 SET NAMES utf8mb4 */", ["names"], ["SET NAMES utf8mb4"]),
    ("/*!40103 SET TIME_ZONE='+00:00' */", ["time_zone"], ["SET SESSION time_zone = '+00:00'"]),
    ("/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */",
     ["@old_unique_checks", "unique_checks"],
     ["SET @OLD_UNIQUE_CHECKS = @@UNIQUE_CHECKS", "SET SESSION unique_checks = 0"]),
    ("/*!40101 SET character_set_client = @saved_cs_client */;", ["character_set_client"],
     ["SET SESSION character_set_client = @saved_cs_client"]),
    ("/*M!100616 SET @OLD_NOTE_VERBOSITY=@@NOTE_VERBOSITY, NOTE_VERBOSITY=0 */",
     ["@old_note_verbosity", "note_verbosity"],
     ["SET @OLD_NOTE_VERBOSITY = @@NOTE_VERBOSITY", "SET SESSION note_verbosity = 0"]),
    ("SET FOREIGN_KEY_CHECKS=0 /*!99999 , SQL_NOTES=0 */", ["foreign_key_checks"],
     ["SET SESSION foreign_key_checks = 0"]),
])
def test_set_statements_of_dumps(sql: str, keys: list[str], replay: list[str]) -> None:
    changes = local.parse_set(sql)
    assert [a.key for a in changes] == keys and [a.sql for a in changes] == replay


def test_a_set_newer_than_the_server_is_a_comment_not_a_set() -> None:
    with pytest.raises(ParseError, match="not a SET statement"):
        local.parse_set("/*!99999 SET x = 1 */")


def test_table_status_sums_a_table_over_its_nodes() -> None:
    cols = [ColumnDef(n, T_VAR_STRING if n in ("Name", "Engine") else T_LONGLONG, 45, 64)
            for n in ("Name", "Engine", "Rows", "Avg_row_length", "Data_length", "Index_length", "Data_free",
                      "Auto_increment")]
    rs = local.table_status_result(cols, {
        "t": [[b"t", b"InnoDB", b"3", b"5461", b"16384", b"0", b"0", b"7"],
              [b"t", b"InnoDB", b"1", b"16384", b"16384", b"16384", b"0", b"9"]],
        "g": [[b"g", b"InnoDB", b"2", b"8192", b"16384", b"0", b"0", None]],
    })
    assert rs.rows == [[b"g", b"InnoDB", b"2", b"8192", b"16384", b"0", b"0", None],
                       [b"t", b"InnoDB", b"4", b"8192", b"32768", b"16384", b"0", b"9"]]


@pytest.mark.parametrize("sql, name", [
    ("CREATE DATABASE /*!32312 IF NOT EXISTS*/ `schema1` /*!40100 DEFAULT CHARACTER SET utf8mb4 */", "schema1"),
    ("create schema if not exists s2", "s2"),
    ("CREATE DATABASE schema1", None),
    ("CREATE DATABASE /*!99999 IF NOT EXISTS*/ schema1", None),
])
def test_create_database_if_not_exists(sql: str, name: str | None) -> None:
    assert local.create_database_if_not_exists(sql) == name
