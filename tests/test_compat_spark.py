"""Compatibility: Spark's JDBC data source over MariaDB Connector/J (Debian libmariadb-java) through the proxy.

Reads a sharding table with partitionColumn/numPartitions, and writes DataFrames into a sharding table
that is configured but does not exist yet: Spark creates it through the proxy (on every node), and
its per-partition transactions are committed (Connector/J sends COMMIT only when IN_TRANS is set).
"""

from __future__ import annotations

import copy
import datetime as dt
from decimal import Decimal
from typing import Any, Iterator

import pytest

from harness import ProxyProcess, free_port, proxy_config, require_connector_j, require_module

require_module("pyspark", "PySpark is not installed (pip install 'pydble[spark]')")

from jobs.spark import Jdbc, spark_session  # noqa: E402

NODES = ["dn1", "dn2", "dn3", "dn4"]
NODE_DB = {"dn1": (0, "db1"), "dn2": (1, "db1"), "dn3": (0, "db2"), "dn4": (1, "db2")}
SRC_ROWS = 1000


@pytest.fixture(scope="module")
def spark_proxy(backends: list[Any]) -> Iterator[ProxyProcess]:
    """A proxy with spark_src (loaded here) and spark_new (configured, never created) as sharding tables."""
    cfg = copy.deepcopy(proxy_config(backends, free_port(), free_port(), instance="pydble-spark"))
    for t in ("spark_src", "spark_new"):
        cfg["schemas"]["schema1"]["tables"][t] = {"type": "sharding", "nodes": NODES, "function": "hash-four",
                                                  "column": "id"}
    p = ProxyProcess(cfg, name="proxy-spark", release_ports=True)
    try:
        p.start()
        conn = p.connect()
        with conn.cursor() as cur:
            cur.execute("DROP TABLE IF EXISTS spark_src")
            cur.execute("DROP TABLE IF EXISTS spark_new")
            cur.execute("CREATE TABLE spark_src (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
                        "amount DECIMAL(10,3), created DATETIME, big BIGINT UNSIGNED)")
            cur.executemany("INSERT INTO spark_src VALUES (%s, %s, %s, %s, %s)",
                            [(i, f"name{i}", Decimal(i) / 8 if i % 7 else None,
                              dt.datetime(2024, 1, 1) + dt.timedelta(hours=i), 2 ** 63 + i) for i in range(SRC_ROWS)])
        conn.close()
        yield p
    finally:
        p.cleanup()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    require_connector_j("java")
    s = spark_session("pydble-compat", cores=2)
    try:
        yield s
    finally:
        s.stop()


def endpoint(p: ProxyProcess) -> Jdbc:
    return Jdbc("127.0.0.1", p.port, "schema1", "test", "111111")


def on_node(backends: list[Any], node: str, sql: str) -> list[tuple[Any, ...]]:
    i, db = NODE_DB[node]
    return backends[i].query(sql, db)


def test_partitioned_read_through_the_proxy(spark_proxy: ProxyProcess, spark: Any) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    j = endpoint(spark_proxy)
    df = spark.read.jdbc(j.url, "spark_src", column="id", lowerBound=0, upperBound=SRC_ROWS, numPartitions=4,
                         properties=j.properties())
    assert df.rdd.getNumPartitions() == 4
    types = {f.name: f.dataType for f in df.schema.fields}
    assert types == {"id": T.IntegerType(), "name": T.StringType(), "amount": T.DecimalType(10, 3),
                     "created": T.TimestampType(), "big": T.DecimalType(20, 0)}
    # each partition's rows: Spark's `id < 250 or id is null`, `id >= 250 AND id < 500`, ... all scatter-merged
    sizes = df.rdd.glom().map(len).collect()
    assert sizes == [250, 250, 250, 250]
    row = df.agg(F.count("*"), F.sum("amount"), F.max("big"), F.countDistinct("name")).first()
    want = sum(Decimal(i) / 8 for i in range(SRC_ROWS) if i % 7)
    assert (row[0], row[1], row[2], row[3]) == (SRC_ROWS, want, Decimal(2 ** 63 + SRC_ROWS - 1), SRC_ROWS)
    pushed = df.where("id BETWEEN 10 AND 19 AND name <> 'name12'").select("id").collect()
    assert sorted(r.id for r in pushed) == [i for i in range(10, 20) if i != 12]


def test_write_new_sharding_table_append_then_overwrite(spark_proxy: ProxyProcess, spark: Any,
                                                        backends: list[Any]) -> None:
    from pyspark.sql import types as T

    j = endpoint(spark_proxy)
    schema = T.StructType([
        T.StructField("id", T.IntegerType(), False),
        T.StructField("label", T.StringType(), True),
        T.StructField("price", T.DecimalType(14, 4), False),
        T.StructField("ratio", T.DoubleType(), True),
        T.StructField("day", T.DateType(), True),
        T.StructField("big", T.LongType(), True),
    ])
    rows = [(i, None if i % 5 == 0 else f"l{i}", Decimal(i) / 16, i / 3, dt.date(2024, 1, 1 + i % 28), i * 10 ** 12)
            for i in range(400)]
    df = spark.createDataFrame(rows, schema).repartition(3)

    df.write.mode("append").jdbc(j.url, "spark_new", properties=j.properties())  # creates it: it did not exist
    ddls = {n: on_node(backends, n, "SHOW CREATE TABLE spark_new")[0][1] for n in NODES}
    assert len(set(ddls.values())) == 1, "the CREATE reached every node alike"
    ddl = ddls["dn1"]
    for col in ("`id` int(11) NOT NULL", "`price` decimal(14,4) NOT NULL", "`label` longtext DEFAULT NULL",
                "`ratio` double DEFAULT NULL", "`day` date DEFAULT NULL", "`big` bigint(20) DEFAULT NULL"):
        assert col in ddl, ddl
    for n in NODES:  # committed: visible to other connections, each row on its node
        idx = NODES.index(n)
        assert on_node(backends, n, "SELECT COUNT(*), SUM(id MOD 4 <> %d) FROM spark_new" % idx) == [(100, 0)]

    df.where("id < 200").write.mode("append").jdbc(j.url, "spark_new", properties=j.properties())
    assert spark_proxy.query("SELECT COUNT(*), COUNT(DISTINCT id) FROM spark_new") == [(600, 400)]

    df.where("id >= 300").write.mode("overwrite").jdbc(j.url, "spark_new", properties=j.properties())
    assert spark_proxy.query("SELECT COUNT(*), MIN(id), MAX(id) FROM spark_new") == [(100, 300, 399)]
    assert "`price` decimal(14,4) NOT NULL" in on_node(backends, "dn3", "SHOW CREATE TABLE spark_new")[0][1]
    back = spark.read.jdbc(j.url, "spark_new", properties=j.properties())
    assert {f.name: f.dataType for f in back.schema.fields}["price"] == T.DecimalType(14, 4)
    got = sorted(back.collect(), key=lambda r: r.id)
    assert [tuple(r) for r in got] == [rows[i] for i in range(300, 400)]

    df.where("id < 8").write.mode("overwrite").option("truncate", "true").jdbc(j.url, "spark_new",
                                                                               properties=j.properties())
    assert sum(on_node(backends, n, "SELECT COUNT(*) FROM spark_new")[0][0] for n in NODES) == 8
