#!/usr/bin/env bash
# sysbench 1.0 through pydble vs straight to MariaDB, in the same run: point_select and read_write.
#
# Starts two MariaDB servers and one pydble instance (the test harness classes). Through the proxy,
# sbtest1 is a sharding table (hash-four on id over dn1..dn4, two nodes per server); the baseline is
# the same sbtest1 unsharded in one database of the first server. Each workload runs for SECONDS with
# THREADS threads, direct and proxy alternating, in sysbench's default --db-ps-mode=auto (prepared
# statements) and in --db-ps-mode=disable. Prints tps/qps of each and the ratio proxy/direct.
#
#   bench/sysbench.sh [--table-size N] [--time SECONDS] [--threads N] [--modes "auto disable"]
#
# The `--auto_inc=off` option makes sysbench send the ids itself, so every INSERT carries the
# sharding key (pydble has no global sequence); `--rand-type=uniform` spreads the rows touched.
set -euo pipefail

TABLE_SIZE=100000
SECONDS_PER_RUN=20
THREADS=8
MODES="auto disable"
while [ $# -gt 0 ]; do
  case "$1" in
    --table-size) TABLE_SIZE="$2"; shift 2 ;;
    --time) SECONDS_PER_RUN="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
command -v sysbench >/dev/null || { echo "sysbench is not installed (apt-get install sysbench)" >&2; exit 2; }

WORK="$(mktemp -d -t pydble-sysbench-XXXXXX)"
# The launcher keeps the servers up until $WORK/stop appears, then cleans them up.
"$PYTHON" - "$WORK" <<'EOF' > "$WORK/launcher.log" 2>&1 &
import sys, time
from pathlib import Path
sys.path[:0] = [".", "tests"]
from harness import MariaDBServer, ProxyProcess, free_port, proxy_config, start_all

work = Path(sys.argv[1])
backends = [MariaDBServer("sysbench-backend1"), MariaDBServer("sysbench-backend2")]
proxy = None
try:
    start_all(backends)
    for b in backends:
        b.create_databases("db1", "db2", "db3")
    backends[0].create_databases("sbdirect")
    cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-sysbench")
    cfg["schemas"]["schema1"]["tables"]["sbtest1"] = {
        "type": "sharding", "nodes": ["dn1", "dn2", "dn3", "dn4"], "function": "hash-four", "column": "id"}
    proxy = ProxyProcess(cfg, name="sysbench-proxy", release_ports=True)
    proxy.start()
    (work / "env").write_text(f"PROXY_PORT={proxy.port}\nDIRECT_PORT={backends[0].port}\n")
    while not (work / "stop").exists():
        time.sleep(0.2)
finally:
    if proxy is not None:
        proxy.cleanup()
    for b in backends:
        b.cleanup()
    (work / "stopped").write_text("1")
EOF
LAUNCHER=$!
cleanup() {
  touch "$WORK/stop"
  wait "$LAUNCHER" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

for _ in $(seq 600); do
  [ -f "$WORK/env" ] && break
  kill -0 "$LAUNCHER" 2>/dev/null || { cat "$WORK/launcher.log" >&2; exit 1; }
  sleep 0.1
done
[ -f "$WORK/env" ] || { echo "servers did not start" >&2; cat "$WORK/launcher.log" >&2; exit 1; }
# shellcheck disable=SC1091
. "$WORK/env"

COMMON=(--db-driver=mysql --mysql-host=127.0.0.1 --tables=1 --table-size="$TABLE_SIZE" --auto_inc=off
        --rand-type=uniform)
PROXY=(--mysql-port="$PROXY_PORT" --mysql-user=test --mysql-password=111111 --mysql-db=schema1)
DIRECT=(--mysql-port="$DIRECT_PORT" --mysql-user=root --mysql-password= --mysql-db=sbdirect)

echo "preparing sbtest1 ($TABLE_SIZE rows): through the proxy (sharded over 4 nodes) and direct"
sysbench oltp_read_write "${COMMON[@]}" "${PROXY[@]}" prepare >/dev/null
sysbench oltp_read_write "${COMMON[@]}" "${DIRECT[@]}" prepare >/dev/null

# run TEST MODE TARGET...: prints "tps qps errors"
run() {
  local test="$1" mode="$2"; shift 2
  local out
  out="$(sysbench "$test" "${COMMON[@]}" "$@" --db-ps-mode="$mode" --threads="$THREADS" \
         --time="$SECONDS_PER_RUN" --report-interval=0 run)"
  local tps qps errs
  tps="$(sed -n 's/^ *transactions: *[0-9]* *(\([0-9.]*\) per sec.)/\1/p' <<<"$out")"
  qps="$(sed -n 's/^ *queries: *[0-9]* *(\([0-9.]*\) per sec.)/\1/p' <<<"$out")"
  errs="$(sed -n 's/^ *ignored errors: *\([0-9]*\).*/\1/p' <<<"$out")"
  echo "${tps:-0} ${qps:-0} ${errs:-?}"
}

printf '\n%-18s %-8s %-7s %12s %12s %8s %6s\n' workload ps-mode target tps qps errors ratio
for test in oltp_point_select oltp_read_write; do
  for mode in $MODES; do
    read -r d_tps d_qps d_err < <(run "$test" "$mode" "${DIRECT[@]}")
    read -r p_tps p_qps p_err < <(run "$test" "$mode" "${PROXY[@]}")
    ratio="$(awk -v p="$p_tps" -v d="$d_tps" 'BEGIN { if (d > 0) printf "%.2f", p / d; else print "-" }')"
    printf '%-18s %-8s %-7s %12s %12s %8s %6s\n' "$test" "$mode" direct "$d_tps" "$d_qps" "$d_err" ""
    printf '%-18s %-8s %-7s %12s %12s %8s %6s\n' "$test" "$mode" proxy "$p_tps" "$p_qps" "$p_err" "$ratio"
  done
done
echo
echo "threads $THREADS, $SECONDS_PER_RUN s per run, table $TABLE_SIZE rows; ratio = proxy tps / direct tps"
