"""The Spark pipeline (jobs/pipeline.py) end to end through a proxy, and its pieces without Spark."""

from __future__ import annotations

import copy
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, proxy_config, require_connector_j, require_module
from harness.proxy import REPO_ROOT

pyspark = require_module("pyspark", "PySpark is not installed (pip install 'pydble[spark]')")

from jobs.pipeline import (Options, PipelineError, StageResult, create_table_sql, expected_per_node,  # noqa: E402
                           run, table_text)
from jobs.spark import spark_session  # noqa: E402
from meta.config import load_config  # noqa: E402

NODES = ["dn1", "dn2", "dn3", "dn4"]


def pipeline_config(backends: list[Any]) -> dict[str, Any]:
    """The harness config plus the pipeline's sharding table and global table."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-pipeline"))
    tables = cfg["schemas"]["schema1"]["tables"]
    tables["orders"] = {"type": "sharding", "nodes": NODES, "function": "hash-four", "column": "id"}
    tables["orders_by_region"] = {"type": "global", "nodes": NODES}
    return cfg


@pytest.fixture(scope="module")
def pipeline_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    p = ProxyProcess(pipeline_config(backends), name="proxy-pipeline", release_ports=True)
    try:
        p.start()
        yield p
    finally:
        p.cleanup()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    require_connector_j("java")
    s = spark_session("pydble-tests", cores=2)
    try:
        yield s
    finally:
        s.stop()


# -- without Spark's JVM ---------------------------------------------------------------------------

def test_create_table_sql_keeps_types_and_nullability() -> None:
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("id", T.LongType(), True), T.StructField("amount", T.DecimalType(12, 2), False),
                           T.StructField("note", T.StringType(), True), T.StructField("at", T.TimestampType(), True)])
    assert create_table_sql("t", schema, "id") == (
        "CREATE TABLE `t` (\n  `id` BIGINT NOT NULL,\n  `amount` DECIMAL(12,2) NOT NULL,\n  `note` VARCHAR(255),\n"
        "  `at` DATETIME(6),\n  PRIMARY KEY (`id`)\n)")


def test_expected_per_node_follows_the_sharding_function(backends: list[Any], tmp_path: Path) -> None:
    from harness import to_toml

    path = tmp_path / "p.toml"
    path.write_text(to_toml(pipeline_config(backends)))
    cfg = load_config(path)
    table = cfg.table("schema1", "orders")
    assert table is not None
    assert expected_per_node(cfg, table, range(1, 11)) == {"dn1": 2, "dn2": 3, "dn3": 3, "dn4": 2}


def test_table_text_aligns_columns() -> None:
    text = table_text(["a", "bb"], [("x", "1,000"), ("yyy", "2")])
    assert text.splitlines()[1] == "| a   | bb    |"
    assert text.splitlines()[3] == "| x   | 1,000 |"


def test_stage_rate_only_where_rows_move() -> None:
    assert StageResult("load", 1000, 2.0).rate == "500"
    assert StageResult("create", 0, 1.0, moves_rows=False).rate == "-"


def test_unconfigured_tables_are_refused_before_spark_starts(pipeline_proxy: ProxyProcess) -> None:
    opts = Options(str(pipeline_proxy.config_path), table="sharding_4_t1", agg_table="nope")
    with pytest.raises(PipelineError, match="orders|nope"):
        run(opts, out=io.StringIO(), spark=object())  # type: ignore[arg-type]
    res = subprocess.run([sys.executable, "-m", "cli", "pipeline", "--config", str(pipeline_proxy.config_path),
                          "--table", "test"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert res.returncode == 2
    assert "schema1.test must be a sharding table" in res.stderr


# -- the whole pipeline ----------------------------------------------------------------------------

def test_pipeline_end_to_end(pipeline_proxy: ProxyProcess, spark: Any, backends: list[Any]) -> None:
    out = io.StringIO()
    report = run(Options(str(pipeline_proxy.config_path), rows=2000, partitions=2), out=out, spark=spark)
    text = out.getvalue()
    assert report.ok, text
    assert [s.name for s in report.stages] == ["source", "create", "load", "read", "aggregate", "publish", "verify"]
    for i in range(1, 8):
        assert f"[{i}/7]" in text
    assert text.rstrip().endswith("pipeline: OK")
    assert {n.node: n.actual for n in report.nodes} == {"dn1": 500, "dn2": 500, "dn3": 500, "dn4": 500}
    assert report.global_copies == {n: 8 for n in NODES}
    # the backends agree, read without the pipeline's help
    by_node = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
    for node, (i, db) in by_node.items():
        assert backends[i].query("SELECT COUNT(*) FROM orders WHERE id MOD 4 <> %s", db, (NODES.index(node),)) == [(0,)]
        assert backends[i].query("SELECT SUM(orders) FROM orders_by_region", db) == [(2000,)]
    ddl = backends[0].query("SHOW CREATE TABLE orders", "db1")[0][1]
    assert "`amount` decimal(12,2) NOT NULL" in ddl and "`note` varchar(255) DEFAULT NULL" in ddl
    assert "PRIMARY KEY (`id`)" in ddl


def test_pipeline_reads_a_csv_input(pipeline_proxy: ProxyProcess, spark: Any, tmp_path: Path) -> None:
    csv = tmp_path / "in.csv"
    csv.write_text("id,region,amount\n" + "".join(f"{i},r{i % 3},{i}.25\n" for i in range(1, 301)))
    out = io.StringIO()
    report = run(Options(str(pipeline_proxy.config_path), input=str(csv), partitions=2), out=out, spark=spark)
    assert report.ok, out.getvalue()
    assert sum(n.actual for n in report.nodes) == 300
    assert report.global_copies == {n: 3 for n in NODES}


@pytest.mark.slow  # a second JVM start: ~40 s; the in-process run above covers the stages
def test_pipeline_under_spark_submit(pipeline_proxy: ProxyProcess) -> None:
    jar = require_connector_j("java")
    # pip's pyspark puts spark-submit next to this interpreter, which may not be on PATH
    spark_submit = shutil.which("spark-submit") or str(Path(sys.executable).parent / "spark-submit")
    env = dict(os.environ, SPARK_HOME=str(Path(pyspark.__file__).parent), PYSPARK_PYTHON=sys.executable,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    res = subprocess.run([spark_submit, "--master", "local[2]", "--jars", jar, "--driver-class-path", jar,
                          str(REPO_ROOT / "jobs" / "pipeline.py"), "--config", str(pipeline_proxy.config_path),
                          "--rows", "2000", "--partitions", "2"],
                         capture_output=True, text=True, timeout=300, cwd="/", env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "pipeline: OK" in res.stdout
