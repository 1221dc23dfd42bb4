"""`pydble ddl release` and `kill @@ddl_lock` (one procedure, zk/release.py) of a DDL whose originator is
gone from the cluster while its ALTER still waits on a node's metadata lock (issue 17): refused (and kept
by `pydble ddl gc`) while the ALTER runs; released once it has ended, or with --force stopped first; every
instance then equals the backends. No survivor reconciles here: the test holds reconcile.lock, as a stuck reconciler would.

The originator is frozen (SIGSTOP) past its session, not killed: MariaDB ends a statement waiting on a
metadata lock within a second of its client's connection closing, so after a kill -9 nothing is left
running on the nodes; a frozen process keeps its connections, and its ALTER, alive.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

import pymysql
import pytest
from clusterkit import SESSION_TIMEOUT_S, TABLE, backend_structure, full_meta, run_async, wait_for
from test_stale import _ddl_marked_on, _hold_on_dn1, _let_go

from cli.main import main as pydble

NAME = f"schema1.{TABLE}"


def _marker_anywhere(backends: list[Any]) -> bool:
    """A statement carrying pydble's DDL marker is still in a backend's processlist."""
    return any("pydble-ddl:" in (r[7] or "") for b in backends for r in b.query("SHOW PROCESSLIST"))


@contextmanager
def _orphan_waiting(cluster: Any, sql: str) -> Iterator[tuple[Any, Any, Any]]:
    """dble-1 runs `sql`, held on dn1 by an open transaction, then is frozen until its session expired;
    dble-2 is up but cannot reconcile (reconcile.lock is held). Yields (dble-1, dble-2, the blocker)."""
    p1, p2 = cluster.start(2)
    hold = cluster.zk()
    hold.create(f"{cluster.base()}/lock/reconcile.lock", b"stuck", ephemeral=True, makepath=True)
    blocker = _hold_on_dn1(cluster.backends[0])
    try:
        run_async(p1, sql)
        wait_for(lambda: _ddl_marked_on(cluster.backends[0]), 10, "the ALTER to wait on dn1")
        p1.pause()
        try:
            wait_for(lambda: "dble-1" not in cluster.zk_children("online"), SESSION_TIMEOUT_S + 10,
                     "dble-1's session to expire")
            yield p1, p2, blocker
        finally:
            p1.resume()
    finally:
        _let_go(blocker)
        hold.stop()
        hold.close()


def _release(capsys: Any, p: Any, *extra: str) -> tuple[int, str, str]:
    """`pydble ddl release` with an instance's config (ZooKeeper and the backends): exit code, out, err."""
    rc = pydble(["ddl", "release", NAME, "--config", str(p.config_path), *extra])
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_release_waits_until_the_orphaned_alter_has_ended(cluster: Any, capsys: Any) -> None:
    with _orphan_waiting(cluster, f"ALTER TABLE {TABLE} ADD COLUMN x INT FIRST") as (p1, p2, blocker):
        rc, out, err = _release(capsys, p2)
        assert rc == 3 and "still runs on dbGroup(s)" in err, (rc, out, err)
        with pytest.raises(pymysql.MySQLError) as e:   # the manager's release: the same procedure
            p2.manager_query(f"kill @@ddl_lock where schema='schema1' and table='{TABLE}'")
        assert e.value.args[0] == 1105 and "still runs on dbGroup(s)" in e.value.args[1], e.value.args
        rc = pydble(["ddl", "gc", "--config", str(p2.config_path)])   # gc keeps it too
        err = capsys.readouterr()
        assert rc == 3 and "its DDL still runs on dbGroup(s)" in err.out, (rc, err)
        assert cluster.zk_children("ddl"), "the record went while the ALTER still waited on dn1"

        with blocker.cursor() as cur:
            cur.execute("COMMIT")
        wait_for(lambda: not _marker_anywhere(cluster.backends), 20, "the ALTER to end on dn1")
        rc, out, err = _release(capsys, p2)
        assert rc == 0 and f"released {NAME}: record deleted (was INIT, owner dble-1)" in out, (rc, out, err)
        (truth,) = backend_structure(cluster.backends)
        assert "`x` int(11) DEFAULT NULL,\n  `id`" in truth
        wait_for(lambda: full_meta(p2)[3:] == (truth, 1, 1), 10, "dble-2 to reload the ALTERed table")
    wait_for(lambda: full_meta(p1)[3:] == (truth, 1, 1), 30, "dble-1 to equal the backends once back")


def test_forced_release_stops_the_orphaned_alter_first(cluster: Any, capsys: Any) -> None:
    with _orphan_waiting(cluster, f"ALTER TABLE {TABLE} ADD COLUMN k INT") as (p1, p2, _):
        rc, out, err = _release(capsys, p2, "--force")
        assert rc == 0 and "its DDL was stopped on dbGroup(s)" in out, (rc, out, err)
        assert not _marker_anywhere(cluster.backends), "released while the ALTER still ran"
        assert not cluster.zk_children("ddl") and not cluster.zk_children("lock/ddl_lock")
        truth = backend_structure(cluster.backends)
        assert len(truth) == 2   # dn1 stopped before the column, the other nodes with it
        wait_for(lambda: full_meta(p2)[4] == 0 and full_meta(p2)[3] in truth, 10,
                 "dble-2 to reload the table as the nodes have it")
    wait_for(lambda: full_meta(p1)[4] == 0 and full_meta(p1)[3] in truth, 30, "dble-1 to equal the backends")
