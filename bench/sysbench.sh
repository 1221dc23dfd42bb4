#!/usr/bin/env bash
# sysbench 1.0 through pydble vs straight to MariaDB, in the same invocation.
#
# Starts two MariaDB servers and one pydble instance (the test harness classes). Through the proxy,
# sbtest1..sbtestN are sharding tables (hash-four on id over dn1..dn4, two nodes per server); the
# baseline is the same tables unsharded in one database of the first server. Each workload runs for
# SECONDS with THREADS threads, direct and proxy alternating, in each --db-ps-mode (auto = prepared
# statements, disable = text), REPEAT times. Prints per run: tps, qps, ignored errors (and their
# codes), reconnects, sysbench's exit code and whether it reported a malformed packet; then the ratio.
#
#   bench/sysbench.sh [--table-size N] [--tables N] [--time SECONDS] [--threads "4 16"]
#                     [--modes "auto disable"] [--tests "oltp_read_write oltp_write_only"]
#                     [--rand-type uniform|special|...] [--repeat N] [--direct-every K]
#                     [--keep-logs DIR]
#
# --repeat N runs each proxy configuration N times in a row; --direct-every K runs the direct
# baseline before the 1st, (K+1)th, ... of them only (default 1: before every proxy run), so a
# ten-run soak costs 12 baselines instead of 20. A proxy run passes when sysbench exits 0 with no
# malformed packet and no reconnect, ignores only 1213/1205, and ignores at most twice the mean of
# the same configuration's direct runs (with 1 as the floor of that mean).
#
# The `--auto_inc=off` option makes sysbench send the ids itself, so every INSERT carries the
# sharding key (pydble has no global sequence). The default --rand-type is sysbench's own (special:
# skewed, so transactions collide: deadlocks and lock wait timeouts, the contended run);
# `--rand-type uniform` spreads the rows touched.
set -euo pipefail

TABLE_SIZE=100000
TABLES=1
SECONDS_PER_RUN=20
THREADS="8"
MODES="auto disable"
TESTS="oltp_point_select oltp_read_write"
RAND_TYPE=""
REPEAT=1
DIRECT_EVERY=1
KEEP_LOGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --table-size) TABLE_SIZE="$2"; shift 2 ;;
    --tables) TABLES="$2"; shift 2 ;;
    --time) SECONDS_PER_RUN="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --modes) MODES="$2"; shift 2 ;;
    --tests) TESTS="$2"; shift 2 ;;
    --rand-type) RAND_TYPE="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --direct-every) DIRECT_EVERY="$2"; shift 2 ;;
    --keep-logs) KEEP_LOGS="$2"; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
command -v sysbench >/dev/null || { echo "sysbench is not installed (apt-get install sysbench)" >&2; exit 2; }

WORK="$(mktemp -d -t pydble-sysbench-XXXXXX)"
# The launcher keeps the servers up until $WORK/stop appears, then cleans them up.
"$PYTHON" - "$WORK" "$TABLES" <<'PYEOF' > "$WORK/launcher.log" 2>&1 &
import sys, time
from pathlib import Path
sys.path[:0] = [".", "tests"]
from harness import MariaDBServer, ProxyProcess, free_port, proxy_config, start_all

work, tables = Path(sys.argv[1]), int(sys.argv[2])
backends = [MariaDBServer("sysbench-backend1"), MariaDBServer("sysbench-backend2")]
proxy = None
try:
    start_all(backends)
    for b in backends:
        b.create_databases("db1", "db2", "db3")
    backends[0].create_databases("sbdirect")
    cfg = proxy_config(backends, free_port(), free_port(), instance="pydble-sysbench")
    for i in range(1, tables + 1):
        cfg["schemas"]["schema1"]["tables"][f"sbtest{i}"] = {
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
PYEOF
LAUNCHER=$!
cleanup() {
  touch "$WORK/stop"
  wait "$LAUNCHER" 2>/dev/null || true
  if [ -n "$KEEP_LOGS" ]; then mkdir -p "$KEEP_LOGS"; cp "$WORK"/*.log "$KEEP_LOGS"/ 2>/dev/null || true; fi
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

COMMON=(--db-driver=mysql --mysql-host=127.0.0.1 --tables="$TABLES" --table-size="$TABLE_SIZE" --auto_inc=off)
[ -n "$RAND_TYPE" ] && COMMON+=(--rand-type="$RAND_TYPE")
PROXY=(--mysql-port="$PROXY_PORT" --mysql-user=test --mysql-password=111111 --mysql-db=schema1)
DIRECT=(--mysql-port="$DIRECT_PORT" --mysql-user=root --mysql-password= --mysql-db=sbdirect)

echo "preparing $TABLES table(s) of $TABLE_SIZE rows: through the proxy (sharded over 4 nodes) and direct"
sysbench oltp_read_write "${COMMON[@]}" "${PROXY[@]}" prepare >/dev/null
sysbench oltp_read_write "${COMMON[@]}" "${DIRECT[@]}" prepare >/dev/null

N=0
# run TEST MODE THREADS TARGET...: prints "tps qps errors reconnects exit malformed error-codes"
run() {
  local test="$1" mode="$2" threads="$3"; shift 3
  N=$((N + 1))
  local log="$WORK/run$N.log" rc=0
  sysbench "$test" "${COMMON[@]}" "$@" --db-ps-mode="$mode" --threads="$threads" \
    --time="$SECONDS_PER_RUN" --report-interval=0 --verbosity=5 run >"$log" 2>&1 || rc=$?
  local tps qps errs recon malformed codes
  tps="$(sed -n 's/^ *transactions: *[0-9]* *(\([0-9.]*\) per sec.)/\1/p' "$log")"
  qps="$(sed -n 's/^ *queries: *[0-9]* *(\([0-9.]*\) per sec.)/\1/p' "$log")"
  errs="$(sed -n 's/^ *ignored errors: *\([0-9]*\).*/\1/p' "$log")"
  recon="$(sed -n 's/^ *reconnects: *\([0-9]*\).*/\1/p' "$log")"
  malformed="$(grep -c -i 'malformed packet' "$log" || true)"
  # at --verbosity=5 sysbench logs an ignored error as "Ignoring error NNNN" (not every occurrence)
  codes="$( (grep -o 'Ignoring error [0-9]*' "$log" || true) | awk '{print $3}' | sort -u | paste -sd, -)"
  echo "${tps:-0} ${qps:-0} ${errs:-?} ${recon:-?} $rc $malformed ${codes:--}"
}

printf '\n%-18s %-8s %3s %-7s %10s %10s %7s %6s %4s %9s %s\n' workload ps-mode thr target tps qps ignored recon exit malformed codes
FAILED=0
TOO_MANY=0
for test in $TESTS; do
  for threads in $THREADS; do
    for mode in $MODES; do
      d_sum=0; d_runs=0; p_errs=""; p_bad=0
      for i in $(seq "$REPEAT"); do
        if [ $(( (i - 1) % DIRECT_EVERY )) = 0 ]; then
          run "$test" "$mode" "$threads" "${DIRECT[@]}" >"$WORK/result"
          read -r d_tps d_qps d_err d_rec d_rc d_mal d_codes <"$WORK/result"
          d_sum=$((d_sum + ${d_err//\?/0})); d_runs=$((d_runs + 1))
          printf '%-18s %-8s %3s %-7s %10s %10s %7s %6s %4s %9s %s\n' "$test" "$mode" "$threads" direct \
            "$d_tps" "$d_qps" "$d_err" "$d_rec" "$d_rc" "$d_mal" "$d_codes"
        fi
        run "$test" "$mode" "$threads" "${PROXY[@]}" >"$WORK/result"
        read -r p_tps p_qps p_err p_rec p_rc p_mal p_codes <"$WORK/result"
        verdict=ok
        [ "$p_rc" = 0 ] && [ "$p_mal" = 0 ] && [ "$p_rec" = 0 ] || verdict=BROKEN
        case ",$p_codes," in *,-,*) ;; *) [ -z "$(echo "$p_codes" | tr ',' '\n' | grep -v -x -e 1213 -e 1205)" ] || verdict=BROKEN ;; esac
        [ "$verdict" = ok ] || FAILED=$((FAILED + 1))
        p_errs="$p_errs ${p_err//\?/0}"
        ratio="$(awk -v p="$p_tps" -v d="$d_tps" 'BEGIN { if (d > 0) printf "%.2f", p / d; else print "-" }')"
        printf '%-18s %-8s %3s %-7s %10s %10s %7s %6s %4s %9s %s  ratio %s %s\n' "$test" "$mode" "$threads" proxy \
          "$p_tps" "$p_qps" "$p_err" "$p_rec" "$p_rc" "$p_mal" "$p_codes" "$ratio" "$verdict"
      done
      # ignored errors: each proxy run at most twice the mean of this configuration's direct runs
      limit="$(awk -v s="$d_sum" -v n="$d_runs" 'BEGIN { m = s / n; if (m < 1) m = 1; printf "%d", 2 * m }')"
      for e in $p_errs; do [ "$e" -le "$limit" ] || p_bad=$((p_bad + 1)); done
      if [ "$p_bad" -gt 0 ]; then
        echo "  $test $mode $threads: $p_bad proxy run(s) ignored more than $limit errors (2 x direct mean)"
        TOO_MANY=$((TOO_MANY + p_bad))
      fi
    done
  done
done
echo
echo "threads $THREADS, $SECONDS_PER_RUN s per run, $TABLES table(s) of $TABLE_SIZE rows, rand-type ${RAND_TYPE:-special, sysbench default}"
echo "ratio = proxy tps / direct tps; codes = the ignored error codes seen; proxy runs broken (exit != 0, malformed packet,"
echo "reconnect or an error other than 1213/1205): $FAILED; over 2 x direct ignored errors: $TOO_MANY"
[ "$FAILED" = 0 ] && [ "$TOO_MANY" = 0 ]
