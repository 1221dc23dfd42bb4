"""Errors that reach MySQL clients: each type carries its MySQL code and SQLSTATE.

They are raised where the problem is known (router, metadata, cluster) and turned into
ERR packets in one place, the session.
"""

from __future__ import annotations

# Client-library error codes (libmysqlclient / libmariadb / PyMySQL: 2013 "Lost connection", ...).
# A server never sends them: libmariadb reads one in an ERR packet as "2027 Received malformed
# packet" and drops the message, so they never reach the wire (see wire_error).
CLIENT_ERROR_MIN = 2000
CLIENT_ERROR_MAX = 2999
ER_UNKNOWN_ERROR = 1105


def wire_error(code: int, sqlstate: str) -> tuple[int, str]:
    """The code and SQLSTATE an ERR packet may carry: client-range codes become 1105/HY000."""
    if CLIENT_ERROR_MIN <= code <= CLIENT_ERROR_MAX or not 0 < code <= 0xFFFF:
        return ER_UNKNOWN_ERROR, "HY000"
    return code, sqlstate


class ProxyError(Exception):
    """Base of every error a client should see as an ERR packet."""

    code = 1105
    sqlstate = "HY000"

    def __init__(self, message: str, code: int | None = None, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if sqlstate is not None:
            self.sqlstate = sqlstate


class AccessDenied(ProxyError):
    code, sqlstate = 1045, "28000"


class DbAccessDenied(ProxyError):
    code, sqlstate = 1044, "42000"


class TableAccessDenied(ProxyError):
    """ER_TABLEACCESS_DENIED_ERROR: `SELECT command denied to user 'u'@'h' for table 't'`."""

    code, sqlstate = 1142, "42000"


class UnknownDatabase(ProxyError):
    code, sqlstate = 1049, "42000"


class NoDatabaseSelected(ProxyError):
    code, sqlstate = 1046, "3D000"


class NotSupported(ProxyError):
    """A statement the proxy cannot run correctly across shards (ER_NOT_SUPPORTED_YET)."""

    code, sqlstate = 1235, "42000"


class ParseError(ProxyError):
    code, sqlstate = 1064, "42000"


def syntax_error(sql: str, at: int | None = None) -> ParseError:
    """1064 worded as MariaDB words it, so clients and GUI tools that show or locate it read the same: the
    statement as written from where reading failed (None: its end; 80 characters at most, a cut marked '...')
    and its line."""
    if at is None:
        at = len(sql.rstrip().rstrip(";").rstrip())
    near = sql[at:]
    if len(near) > 80:
        near = near[:77] + "..."
    return ParseError("You have an error in your SQL syntax; check the manual that corresponds to your MariaDB "
                      f"server version for the right syntax to use near '{near}' at line {sql.count(chr(10), 0, at) + 1}")


class NoSuchTable(ProxyError):
    code, sqlstate = 1146, "42S02"


class TableExists(ProxyError):
    code, sqlstate = 1050, "42S01"


class MetaLost(ProxyError):
    code, sqlstate = 3009, "HY000"


class DdlInProgress(ProxyError):
    """Another DDL holds the table's lock here or in the cluster (DBLE's 4006)."""

    code, sqlstate = 4006, "HY000"


class BackendUnavailable(ProxyError):
    """A shardingNode's backend cannot be reached, timed out or lost its connection.

    A server code (1105, as DBLE answers), never the client library's 2003/2013: the message names
    the shardingNode or dbGroup."""

    code, sqlstate = ER_UNKNOWN_ERROR, "HY000"


class RefreshIncomplete(BackendUnavailable):
    """A refresh published what it could read, but some nodes did not answer: their part of the
    tables is the old structure (consistency UNKNOWN), so the refresh is not applied yet."""

    def __init__(self, message: str, nodes: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.nodes = dict(nodes or {})


class ReadOnly(ProxyError):
    code, sqlstate = 1290, "HY000"

    @classmethod
    def of(cls, user: str) -> "ReadOnly":
        """The refusal of a write or DDL by a `read_only = true` user."""
        return cls(f"User '{user}' is read only")


class SpecificAccessDenied(ProxyError):
    """ER_SPECIFIC_ACCESS_DENIED_ERROR: what MariaDB answers a user without SUPER (or the privilege named)."""

    code, sqlstate = 1227, "42000"


class TooManyConnections(ProxyError):
    code, sqlstate = 1040, "08004"


class PacketTooLarge(ProxyError):
    code, sqlstate = 1153, "08S01"


class UnknownCommand(ProxyError):
    code, sqlstate = 1047, "08S01"


class TransactionInProgress(ProxyError):
    """ER_CANT_CHANGE_TX_CHARACTERISTICS: SET TRANSACTION (for the next transaction) inside one."""

    code, sqlstate = 1568, "25001"

    def __init__(self) -> None:
        super().__init__("Transaction characteristics can't be changed while a transaction is in progress")


class UnknownColumn(ProxyError):
    """ER_BAD_FIELD_ERROR: a column reference nothing in the statement's scope answers to."""

    code, sqlstate = 1054, "42S22"

    def __init__(self, name: str, clause: str) -> None:
        super().__init__(f"Unknown column '{name}' in '{clause}'")


class QueryInterrupted(ProxyError):
    """ER_QUERY_INTERRUPTED: a KILL QUERY stopped the statement (the KILL QUERY of one's own id too)."""

    code, sqlstate = 1317, "70100"

    def __init__(self) -> None:
        super().__init__("Query execution was interrupted")


class ConnectionKilled(ProxyError):
    """ER_CONNECTION_KILLED: what MariaDB answers a KILL of one's own connection before it closes it."""

    code, sqlstate = 1927, "70100"

    def __init__(self) -> None:
        super().__init__("Connection was killed")


class BackendError(ProxyError):
    """An ERR packet from a backend, passed through with its own code and state."""
