"""The pydble data pipeline on Spark: load a sharding table through the proxy, read it back, aggregate, verify.

Stages (one progress line each, then a summary table):
  1 source     generate N rows (or read a CSV/Parquet file)
  2 create     DROP + CREATE the target sharding table through the proxy (DDL through the cluster)
  3 load       DataFrame -> proxy over JDBC (MariaDB Connector/J), committed per partition
  4 read       read it back through the proxy, partitioned on the sharding column
  5 aggregate  group by a column in Spark
  6 publish    CREATE the global table through the proxy and write the aggregate into it
  7 verify     every row on the node the sharding function names, counts per node, global copies equal

Run it as `pydble pipeline --config conf/pydble.toml` or
`spark-submit --jars /usr/share/java/mariadb-java-client.jar jobs/pipeline.py --config conf/pydble.toml`.
The target tables must be configured in that config (a sharding table and a global table).
Progress and the summary go to stdout: they are this job's user interface.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, TextIO

if __package__ in (None, ""):  # run as a file by spark-submit: make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from meta.config import Config, ConfigError, TableConfig, load_config  # noqa: E402
from meta.sharding import make_function, node_index  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from jobs.spark import Jdbc

REGIONS = ("north", "south", "east", "west", "centre", "coast", "hills", "islands")


class PipelineError(RuntimeError):
    """A stage failed in a way the user must fix (configuration, unreachable proxy, bad input)."""


@dataclass
class StageResult:
    """One line of the summary."""

    name: str
    rows: int
    seconds: float
    detail: str = ""
    ok: bool = True
    moves_rows: bool = True   # a rate makes sense (not for DDL or a handful of aggregate rows)

    @property
    def rate(self) -> str:
        """Rows per second, when meaningful."""
        return f"{self.rows / self.seconds:,.0f}" if self.moves_rows and self.rows and self.seconds > 0 else "-"


@dataclass
class NodeCheck:
    """What one shardingNode holds of the target table against what the sharding function says."""

    node: str
    address: str
    expected: int
    actual: int
    misplaced: int

    @property
    def ok(self) -> bool:
        return self.expected == self.actual and self.misplaced == 0


@dataclass
class Report:
    """Everything the run measured; `ok` is the exit status."""

    stages: list[StageResult] = field(default_factory=list)
    nodes: list[NodeCheck] = field(default_factory=list)
    global_copies: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(s.ok for s in self.stages) and all(n.ok for n in self.nodes)


@dataclass(frozen=True)
class Options:
    """The pipeline's parameters (the command line, parsed)."""

    config: str
    schema: str = "schema1"
    table: str = "orders"
    agg_table: str = "orders_by_region"
    group_by: str = "region"
    rows: int = 100_000
    input: str | None = None
    partitions: int = 4
    batch_size: int = 1000
    master: str | None = None
    proxy_host: str | None = None
    proxy_port: int | None = None
    user: str | None = None
    password: str | None = None
    verify: bool = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The pipeline's command-line options (shared by `pydble pipeline` and spark-submit)."""
    p.add_argument("--config", required=True, help="the proxy's TOML config (tables, users, backends)")
    p.add_argument("--schema", default="schema1", help="logical schema (default schema1)")
    p.add_argument("--table", default="orders", help="target sharding table, configured in --config")
    p.add_argument("--agg-table", default="orders_by_region", help="global table for the aggregate")
    p.add_argument("--group-by", default="region", help="column to aggregate by (default region)")
    p.add_argument("--rows", type=int, default=100_000, help="rows to generate (ignored with --input)")
    p.add_argument("--input", help="read this CSV (with header) or Parquet file instead of generating")
    p.add_argument("--partitions", type=int, default=4, help="Spark partitions for load and read")
    p.add_argument("--batch-size", type=int, default=1000, help="JDBC insert batch size")
    p.add_argument("--master", help="Spark master (default local[2]; spark-submit's when run by it)")
    p.add_argument("--proxy-host", help="proxy address (default: [server] bind of --config)")
    p.add_argument("--proxy-port", type=int, help="proxy port (default: [server] port of --config)")
    p.add_argument("--user", help="client user (default: the first [[users]] entry)")
    p.add_argument("--password", help="its password (default: from --config)")
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip reading the backends directly")


def options_from(args: argparse.Namespace) -> Options:
    """Options from parsed arguments."""
    return Options(args.config, args.schema, args.table, args.agg_table, args.group_by, args.rows, args.input,
                   args.partitions, args.batch_size, args.master, args.proxy_host, args.proxy_port, args.user,
                   args.password, args.verify)


# ------------------------------------------------------------------------------------------------
# Output: the job's user interface
# ------------------------------------------------------------------------------------------------

class Progress:
    """One line per stage on a stream, numbered."""

    def __init__(self, total: int, out: TextIO) -> None:
        self.total = total
        self.out = out
        self.n = 0

    def start(self, name: str, what: str) -> float:
        """Announce a stage; return its start time."""
        self.n += 1
        self.out.write(f"[{self.n}/{self.total}] {name:<9} {what} ...\n")
        self.out.flush()
        return time.monotonic()

    def done(self, result: StageResult) -> None:
        """Close a stage with its figures."""
        rate = f"{result.rate} rows/s" if result.rate != "-" else ""
        mark = "ok" if result.ok else "FAILED"
        self.out.write(f"      {mark:<6} {result.rows:>10,} rows  {result.seconds:7.2f}s  {rate:>16}  "
                       f"{result.detail}\n")
        self.out.flush()


def table_text(headers: list[str], rows: Iterable[Iterable[Any]]) -> str:
    """A plain text table with aligned columns."""
    body = [[str(c) for c in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) if body else len(h) for i, h in enumerate(headers)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line, "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |", line]
    for r in body:
        out.append("| " + " | ".join(c.rjust(w) if c.replace(",", "").replace(".", "").isdigit() else c.ljust(w)
                                      for c, w in zip(r, widths)) + " |")
    out.append(line)
    return "\n".join(out)


def summary(report: Report) -> str:
    """The closing summary: stages, then nodes, then the verdict."""
    parts = [table_text(["stage", "rows", "seconds", "rows/s", "status", "detail"],
                        [(s.name, f"{s.rows:,}", f"{s.seconds:.2f}", s.rate, "ok" if s.ok else "FAILED", s.detail)
                         for s in report.stages])]
    if report.nodes:
        parts.append(table_text(["node", "backend", "expected", "actual", "misplaced", "status"],
                                [(n.node, n.address, f"{n.expected:,}", f"{n.actual:,}", f"{n.misplaced:,}",
                                  "ok" if n.ok else "WRONG") for n in report.nodes]))
    if report.global_copies:
        parts.append(table_text(["global copy", "rows"], sorted(report.global_copies.items())))
    for p in report.problems:
        parts.append(f"problem: {p}")
    parts.append("pipeline: OK" if report.ok else "pipeline: FAILED")
    return "\n".join(parts)


# ------------------------------------------------------------------------------------------------
# Pieces
# ------------------------------------------------------------------------------------------------

def _tables(cfg: Config, opts: Options) -> tuple[TableConfig, TableConfig]:
    target = cfg.table(opts.schema, opts.table)
    agg = cfg.table(opts.schema, opts.agg_table)
    if opts.schema not in cfg.schemas:
        raise PipelineError(f"schema {opts.schema} is not in {opts.config}")
    if target is None or target.type != "sharding":
        raise PipelineError(f"{opts.schema}.{opts.table} must be a sharding table in {opts.config}: add "
                            f"[schemas.{opts.schema}.tables.{opts.table}] with type = \"sharding\"")
    if agg is None or agg.type != "global":
        raise PipelineError(f"{opts.schema}.{opts.agg_table} must be a global table in {opts.config}: add "
                            f"[schemas.{opts.schema}.tables.{opts.agg_table}] with type = \"global\"")
    return target, agg


def proxy_endpoint(cfg: Config, opts: Options) -> Jdbc:
    """Where clients reach the proxy, and as whom, from the config unless overridden."""
    from jobs.spark import Jdbc

    user_name = opts.user or next(iter(cfg.users), None)
    if user_name is None:
        raise PipelineError(f"{opts.config} has no [[users]]")
    password = opts.password
    if password is None:
        u = cfg.users.get(user_name)
        if u is None:
            raise PipelineError(f"user {user_name} is not in {opts.config}; pass --password")
        if u.password.startswith("*"):
            raise PipelineError(f"the password of {user_name} is stored hashed in {opts.config}; pass --password")
        password = u.password
    host = opts.proxy_host or cfg.server.bind
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return Jdbc(host, opts.proxy_port or cfg.server.port, opts.schema, user_name, password,
                "rewriteBatchedStatements=true")


def _mysql(endpoint: Jdbc) -> Any:
    import pymysql

    return pymysql.connect(host=endpoint.host, port=endpoint.port, user=endpoint.user, password=endpoint.password,
                           database=endpoint.database, autocommit=True, connect_timeout=10, read_timeout=600)


def generate(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    """A synthetic order book: ids 1..rows, a region, a customer, an amount, a date, an optional note."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DecimalType

    regions = F.array(*[F.lit(r) for r in REGIONS])
    def never_null(c: Any, default: Any) -> Any:
        return F.coalesce(c, F.lit(default))  # a non-NULL fallback makes Spark type the column NOT NULL

    return spark.range(1, rows + 1, numPartitions=max(1, partitions)).select(
        F.col("id").cast("long").alias("id"),
        never_null(F.element_at(regions, (F.col("id") % len(REGIONS) + 1).cast("int")), "").alias("region"),
        never_null((F.col("id") * 7919 % 10007).cast("int"), 0).alias("customer"),
        never_null(((F.col("id") * 37 % 100000) / F.lit(100)).cast(DecimalType(12, 2)),
                   F.lit(0).cast(DecimalType(12, 2))).alias("amount"),
        never_null(F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % 366).cast("int")),
                   F.lit("2024-01-01").cast("date")).alias("created"),
        F.when(F.col("id") % 10 == 0, F.lit(None)).otherwise(F.concat(F.lit("order "), F.col("id"))).alias("note"),
    )


def read_input(spark: SparkSession, path: str) -> DataFrame:
    """A CSV (header row, types inferred) or Parquet file."""
    if not os.path.exists(path):
        raise PipelineError(f"input {path} does not exist")
    if path.endswith(".parquet") or os.path.isdir(path):
        return spark.read.parquet(path)
    return spark.read.option("header", "true").option("inferSchema", "true").csv(path)


def sql_type(dt: Any) -> str:
    """The MariaDB column type for a Spark type (explicit, so the DDL is ours, not the JDBC dialect's)."""
    from pyspark.sql import types as T

    if isinstance(dt, T.BooleanType):
        return "TINYINT(1)"
    if isinstance(dt, T.ByteType):
        return "TINYINT"
    if isinstance(dt, T.ShortType):
        return "SMALLINT"
    if isinstance(dt, T.IntegerType):
        return "INT"
    if isinstance(dt, T.LongType):
        return "BIGINT"
    if isinstance(dt, T.FloatType):
        return "FLOAT"
    if isinstance(dt, T.DoubleType):
        return "DOUBLE"
    if isinstance(dt, T.DecimalType):
        return f"DECIMAL({dt.precision},{dt.scale})"
    if isinstance(dt, T.DateType):
        return "DATE"
    if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        return "DATETIME(6)"
    if isinstance(dt, T.BinaryType):
        return "BLOB"
    if isinstance(dt, T.StringType):
        return "VARCHAR(255)"
    raise PipelineError(f"no MariaDB column type for Spark type {dt.simpleString()}")


def create_table_sql(name: str, schema: Any, key: str | None) -> str:
    """CREATE TABLE for a DataFrame schema; the sharding column becomes the primary key."""
    cols = [f"`{f.name}` {sql_type(f.dataType)}{'' if f.nullable and f.name != key else ' NOT NULL'}"
            for f in schema.fields]
    if key is not None:
        cols.append(f"PRIMARY KEY (`{key}`)")
    return f"CREATE TABLE `{name}` (\n  " + ",\n  ".join(cols) + "\n)"


def _node_address(cfg: Config, node: str) -> tuple[Any, str]:
    sn = cfg.sharding_nodes[node]
    g = cfg.db_groups[sn.db_group]
    return g, sn.database


def _direct(cfg: Config, node: str) -> Any:
    import pymysql
    import pymysql.cursors

    g, db = _node_address(cfg, node)
    return pymysql.connect(host=g.host, port=g.port, user=g.user, password=g.password, database=db,
                           connect_timeout=g.connect_timeout_s, read_timeout=600,
                           cursorclass=pymysql.cursors.SSCursor)


def expected_per_node(cfg: Config, table: TableConfig, keys: Iterable[Any]) -> dict[str, int]:
    """How many of the keys the sharding function puts on each node of the table."""
    assert table.function is not None
    fn = make_function(cfg.functions[table.function])
    counts = dict.fromkeys(table.nodes, 0)
    for k in keys:
        counts[table.nodes[node_index(table, fn, k)]] += 1
    return counts


def check_nodes(cfg: Config, table: TableConfig, expected: dict[str, int]) -> list[NodeCheck]:
    """Read every node of the table directly: its rows, and any whose key belongs elsewhere."""
    assert table.function is not None and table.column is not None
    fn = make_function(cfg.functions[table.function])
    out = []
    for i, node in enumerate(table.nodes):
        g, db = _node_address(cfg, node)
        conn = _direct(cfg, node)
        actual = misplaced = 0
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT `{table.column}` FROM `{table.name}`")
                for (k,) in cur:
                    actual += 1
                    if node_index(table, fn, k) != i:
                        misplaced += 1
        finally:
            conn.close()
        out.append(NodeCheck(node, f"{g.host}:{g.port}/{db}", expected.get(node, 0), actual, misplaced))
    return out


def global_copies(cfg: Config, table: TableConfig) -> dict[str, int]:
    """Row count of each copy of a global table, read on its nodes directly."""
    out = {}
    for node in table.nodes:
        conn = _direct(cfg, node)
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM `{table.name}`")
                out[node] = int(cur.fetchone()[0])
        finally:
            conn.close()
    return out


# ------------------------------------------------------------------------------------------------
# The run
# ------------------------------------------------------------------------------------------------

def run(opts: Options, out: TextIO = sys.stdout, spark: SparkSession | None = None) -> Report:
    """Run every stage; the report says what happened (stages stop at the first failure)."""
    from pyspark.sql import functions as F

    from jobs.spark import spark_session

    try:
        cfg = load_config(opts.config)
    except ConfigError as e:
        raise PipelineError(f"config error: {e}") from None
    target, agg_cfg = _tables(cfg, opts)
    key = target.column
    assert key is not None
    endpoint = proxy_endpoint(cfg, opts)
    report = Report()
    progress = Progress(7 if opts.verify else 6, out)
    out.write(f"pydble pipeline: {opts.schema}.{opts.table} (sharding on {key} over {', '.join(target.nodes)}) "
              f"through {endpoint.host}:{endpoint.port}\n")
    own_spark = spark is None
    if spark is None:
        spark = spark_session("pydble-pipeline", opts.master, cores=max(2, min(opts.partitions, 8)))
    jdbc_props = endpoint.properties()

    def stage(name: str, what: str, fn: Callable[[], tuple[int, str]]) -> StageResult:
        t0 = progress.start(name, what)
        try:
            rows, detail = fn()
            res = StageResult(name, rows, time.monotonic() - t0, detail,
                              moves_rows=name in ("source", "load", "read", "verify"))
        except PipelineError:
            raise
        except Exception as e:  # noqa: BLE001 - a stage failure ends the run with a readable line
            res = StageResult(name, 0, time.monotonic() - t0, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}",
                              ok=False)
        report.stages.append(res)
        progress.done(res)
        return res

    state: dict[str, Any] = {}
    try:
        def source() -> tuple[int, str]:
            if opts.input:
                df = read_input(spark, opts.input)
                what = opts.input
            else:
                df = generate(spark, opts.rows, opts.partitions)
                what = "generated"
            if key not in df.columns:
                raise PipelineError(f"the data has no sharding column {key} (columns: {', '.join(df.columns)})")
            df = df.repartition(opts.partitions).cache()
            state["df"] = df
            return df.count(), what

        def create() -> tuple[int, str]:
            ddl = create_table_sql(opts.table, state["df"].schema, key)
            with _mysql(endpoint) as conn, conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS `{opts.table}`")
                cur.execute(ddl)
            return 0, f"{len(state['df'].columns)} columns, key {key}"

        def load() -> tuple[int, str]:
            df = state["df"]
            (df.write.mode("append")
             .option("batchsize", str(opts.batch_size))
             .option("isolationLevel", "READ_COMMITTED")
             .jdbc(endpoint.url, opts.table, properties=jdbc_props))
            with _mysql(endpoint) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM `{opts.table}`")
                n = int(cur.fetchone()[0])
            if n != state["rows"]:
                raise RuntimeError(f"{n} rows in {opts.table} after loading {state['rows']}")
            return n, f"{df.rdd.getNumPartitions()} partitions, committed"

        def read() -> tuple[int, str]:
            with _mysql(endpoint) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT MIN(`{key}`), MAX(`{key}`) FROM `{opts.table}`")
                lo, hi = cur.fetchone()
            back = spark.read.jdbc(endpoint.url, opts.table, column=key, lowerBound=int(lo or 0),
                                   upperBound=int(hi or 0) + 1, numPartitions=opts.partitions,
                                   properties=jdbc_props).cache()
            state["back"] = back
            n = back.count()
            if n != state["rows"]:
                raise RuntimeError(f"read {n} rows back, loaded {state['rows']}")
            return n, f"{back.rdd.getNumPartitions()} partitions on {key}"

        def aggregate() -> tuple[int, str]:
            back = state["back"]
            if opts.group_by not in back.columns:
                raise PipelineError(f"no column {opts.group_by} to group by")
            num = [f.name for f in back.schema.fields
                   if f.name not in (key, opts.group_by) and f.dataType.typeName() in ("decimal", "double", "float")]
            aggs = [F.count(F.lit(1)).alias("orders")]
            for c in num[:1]:
                aggs += [F.sum(c).alias(f"total_{c}"), F.avg(c).cast("decimal(16,4)").alias(f"avg_{c}")]
            agg = back.groupBy(opts.group_by).agg(*aggs).orderBy(opts.group_by).cache()
            state["agg"] = agg
            groups = agg.count()
            total = agg.agg(F.sum("orders")).first()[0] or 0
            if total != state["rows"]:
                raise RuntimeError(f"the groups add up to {total} rows, not {state['rows']}")
            return groups, f"{groups} groups by {opts.group_by}"

        def publish() -> tuple[int, str]:
            agg = state["agg"]
            ddl = create_table_sql(opts.agg_table, agg.schema, opts.group_by)
            with _mysql(endpoint) as conn, conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS `{opts.agg_table}`")
                cur.execute(ddl)
            agg.coalesce(1).write.mode("append").jdbc(endpoint.url, opts.agg_table, properties=jdbc_props)
            return agg.count(), f"global table on {', '.join(agg_cfg.nodes)}"

        def verify() -> tuple[int, str]:
            keys = (r[0] for r in state["df"].select(key).toLocalIterator())
            expected = expected_per_node(cfg, target, keys)
            report.nodes = check_nodes(cfg, target, expected)
            report.global_copies = global_copies(cfg, agg_cfg)
            groups = state["agg"].count()
            bad = [n for n, c in report.global_copies.items() if c != groups]
            if bad:
                report.problems.append(f"global table copies on {', '.join(bad)} do not have {groups} rows")
            wrong = [n.node for n in report.nodes if not n.ok]
            if wrong:
                report.problems.append(f"rows not where the sharding function puts them on {', '.join(wrong)}")
            checked = sum(n.actual for n in report.nodes)
            return checked, "per node counts match" if not wrong and not bad else "MISMATCH"

        plan: list[tuple[str, str, Callable[[], tuple[int, str]]]] = [
            ("source", opts.input or f"{opts.rows:,} generated rows", source),
            ("create", f"sharding table {opts.schema}.{opts.table} through the proxy", create),
            ("load", f"into {opts.table} over JDBC, batches of {opts.batch_size}", load),
            ("read", f"{opts.table} back, {opts.partitions} partitions on {key}", read),
            ("aggregate", f"by {opts.group_by}", aggregate),
            ("publish", f"aggregate into global table {opts.agg_table}", publish),
        ]
        if opts.verify:
            plan.append(("verify", "counts per node read directly from the backends", verify))
        for name, what, fn in plan:
            res = stage(name, what, fn)
            if name == "source":
                state["rows"] = res.rows
            if not res.ok:
                break
    except PipelineError as e:
        report.problems.append(str(e))
    finally:
        for k in ("df", "back", "agg"):
            if k in state:
                state[k].unpersist()
        if own_spark:
            spark.stop()
    out.write(summary(report) + "\n")
    out.flush()
    return report


def main(argv: list[str] | None = None) -> int:
    """Command line entry: parse, run, exit 0 when every stage and check passed."""
    p = argparse.ArgumentParser(prog="pydble pipeline", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run_cli(p.parse_args(argv))


def run_cli(args: argparse.Namespace) -> int:
    """Run from parsed arguments (the `pydble pipeline` subcommand lands here)."""
    from jobs.spark import SparkUnavailable

    try:
        report = run(options_from(args))
    except (PipelineError, SparkUnavailable) as e:
        sys.stderr.write(f"pydble pipeline: {e}\n")
        return 2
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
