"""Spark plumbing shared by the jobs, the benchmarks and the tests: one place knows the JDBC jar and URL rules.

MariaDB Connector/J 2.7 (Debian `libmariadb-java`) accepts both `jdbc:mariadb:` and `jdbc:mysql:` URLs.
pydble's jobs use `jdbc:mysql:` so that Spark picks its MySQL dialect (backticked identifiers, MySQL
type names); Spark has no dialect for `jdbc:mariadb:` and would quote identifiers with `"`.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DRIVER = "org.mariadb.jdbc.Driver"
PIPELINE_OFF = "usePipelineAuth=false"
JAR_ENV = "PYDBLE_JDBC_JAR"
_JAR_GLOBS = ("/usr/share/java/mariadb-java-client.jar", "/usr/share/java/mariadb-java-client-*.jar")


class SparkUnavailable(RuntimeError):
    """PySpark, Java or the Connector/J jar is missing; the message says which and how to get it."""


def find_jdbc_jar() -> str:
    """The MariaDB Connector/J jar: $PYDBLE_JDBC_JAR, else Debian's libmariadb-java."""
    env = os.environ.get(JAR_ENV)
    if env:
        if not os.path.exists(env):
            raise SparkUnavailable(f"{JAR_ENV}={env} does not exist")
        return env
    for pattern in _JAR_GLOBS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise SparkUnavailable("MariaDB Connector/J not found: apt-get install libmariadb-java, or set "
                           f"{JAR_ENV} to the jar")


@dataclass(frozen=True)
class Jdbc:
    """Where and how Spark connects: a MySQL-protocol endpoint (the proxy or one backend)."""

    host: str
    port: int
    database: str
    user: str
    password: str
    options: str = ""  # extra URL parameters, e.g. "rewriteBatchedStatements=true"

    @property
    def url(self) -> str:
        """The JDBC URL (jdbc:mysql: so Spark uses its MySQL dialect).

        usePipelineAuth=false: Connector/J 2.x otherwise pipelines its post-login queries under a
        500 ms read timeout and fails the connection when a busy server (or proxy) answers later.
        """
        opts = "&".join(o for o in (PIPELINE_OFF, self.options) if o)
        return f"jdbc:mysql://{self.host}:{self.port}/{self.database}?{opts}"

    def properties(self, **extra: Any) -> dict[str, str]:
        """Connection properties for spark.read.jdbc / DataFrame.write.jdbc."""
        props = {"user": self.user, "password": self.password, "driver": DRIVER}
        props.update({k: str(v) for k, v in extra.items()})
        return props


def spark_session(app: str = "pydble", master: str | None = None, *, cores: int = 2,
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession with Connector/J on its class path (local mode unless spark-submit chose a master)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        raise SparkUnavailable("PySpark is not installed: pip install 'pydble[spark]'") from e
    jar = find_jdbc_jar()
    b = SparkSession.builder.appName(app)
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ and "spark.master" not in (conf or {}):
        master = f"local[{cores}]"  # not launched by spark-submit, which would have chosen the master
    if master is not None:
        b = b.master(master)
    settings = {
        "spark.jars": jar,
        "spark.driver.extraClassPath": jar,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, cores)),
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-Duser.timezone=UTC",
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    }
    settings.update(conf or {})
    for k, v in settings.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


__all__ = ["DRIVER", "Jdbc", "SparkUnavailable", "find_jdbc_jar", "spark_session"]
