#!/usr/bin/env bash
# `make bench` section bench_storage: accepted notifications/s and deliveries/s through the `log`
# transport for one daemon on SQLite and one on PostgreSQL in the same run, and for three daemons
# on one PostgreSQL database; database round trips per accepted notification; duplicates across
# the three nodes' ledgers. PostgreSQL (Debian's package) runs in a temporary folder on a free
# loopback port, with fsync on, as the `postgres` user when run as root.
# BENCH_ROUNDS rounds (default 3), each on fresh databases, the setups interleaved; the ratios
# are printed per round and as their median (a shared machine's speed drifts between setups).
# Each round also runs one node with a third of the connections (the concurrency one of three
# nodes sees), and the three nodes with three times the connections (each node's concurrency
# that of the single node): what three nodes lose at 128 is per-node concurrency or coordination.
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${HERALD:-.build/release/herald}
DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-3}
CONNECTIONS=128
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 { s += $NF } END { printf "%d", s }'; }
wrk_rate() { awk '/^Requests\/sec/ { print int($2) }'; }

bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$bin/pg_ctl" ] || { echo "bench_storage: PostgreSQL is missing; run scripts/bootstrap.sh" >&2; exit 1; }
work=$(mktemp -d /tmp/herald-bench-pg.XXXXXX)
as_pg() { if [ "$(id -u)" = 0 ]; then chown -R postgres "$work/pg" 2>/dev/null || true; runuser -u postgres -- "$@"; else "$@"; fi; }
mkdir -p "$work/pg"
[ "$(id -u)" = 0 ] && chown postgres "$work" "$work/pg"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
as_pg "$bin/initdb" -D "$work/pg/data" -A trust -U herald > /dev/null
as_pg "$bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -w -o "-p $port -k $work/pg -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=top" start > /dev/null
sql() { as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U herald -d "$1" -Atqc "$2"; }
stop_node() {
  if [ -f "$1/pid" ]; then
    kill -TERM "$(cat "$1/pid")" 2>/dev/null || true
    while kill -0 "$(cat "$1/pid")" 2>/dev/null; do sleep 0.1; done
    rm -f "$1/pid"
  fi
}
cleanup() { set +e; for d in "$work"/*/; do stop_node "$d"; done
            as_pg "$bin/pg_ctl" -D "$work/pg/data" -m fast -w stop > /dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

node() { # dir storage-json; echoes the API port
  mkdir -p "$1"
  cat > "$1/config.json" <<JSON
{"storage": $2, "apps": {"com.example.app": {"routes": ["dry"]}},
 "transports": {"dry": {"type": "log", "path": "deliveries.jsonl"}},
 "api": {"listen": "127.0.0.1:0"}, "server": {"maxQueuedPerTransport": 50000000, "maxPendingAccepts": 100000},
 "log": {"level": "warning"}}
JSON
  local exe; exe=$(realpath "$HERALD")
  (cd "$1" && exec "$exe" serve --config config.json > out.txt 2> err.txt) &
  echo $! > "$1/pid"
  local p=""
  for _ in $(seq 200); do p=$(grep -o '[0-9]*$' "$1/out.txt" 2>/dev/null || true); [ -n "$p" ] && break; sleep 0.1; done
  [ -n "$p" ] || { echo "bench_storage: the daemon did not start: $(cat "$1/err.txt")" >&2; exit 1; }
  echo "$p"
}

cpu() { # user+system seconds of the given pids (gone ones count 0)
  local hz t=0 p; hz=$(getconf CLK_TCK)
  for p in "$@"; do [ -r "/proc/$p/stat" ] && t=$(awk -v t="$t" -v hz="$hz" '{ printf "%.3f", t + ($14 + $15) / hz }' "/proc/$p/stat"); done
  echo "$t"
}
server_pids() { local pm; pm=$(head -1 "$work/pg/data/postmaster.pid"); echo "$pm" $(ps -o pid= --ppid "$pm"); }
node_pids() { cat "$work"/*/pid 2>/dev/null; }

run() { # label database ports...; accepts for DURATION spread over the nodes, then waits for the drain
  local label=$1 db=$2; shift 2
  local ports=("$@") n=$#
  # Each setup starts from a checkpoint, so no checkpoint of an earlier setup's writes lands in its load.
  [ -n "$db" ] && sql "$db" "SELECT pg_stat_statements_reset()" > /dev/null && sql "$db" "CHECKPOINT" > /dev/null
  curl -s -o /dev/null -H 'Content-Type: application/json' \
    -d '{"app":"com.example.app","user":"solo","token":"00000000000000000000000000000000000000000000000000000000000000aa"}' "http://127.0.0.1:${ports[0]}/v1/devices"
  local a0=0 d0=0 s0=0 p
  for p in "${ports[@]}"; do
    a0=$(( a0 + $(metric "$p" herald_notifications_accepted_total) )); d0=$(( d0 + $(metric "$p" 'herald_deliveries_total{transport="dry",outcome="delivered"') ))
    s0=$(( s0 + $(metric "$p" herald_queue_accept_statements_total) ))
  done
  local h0 g0; h0=$(cpu $(node_pids)); g0=$(cpu $(server_pids))
  local t0; t0=$(date +%s.%N)
  local loads=()
  for p in "${ports[@]}"; do wrk -t1 -c$(( CONNECTIONS / n )) -d"${DURATION}s" -s scripts/wrk/accept.lua "http://127.0.0.1:$p/v1/notifications" > "$work/wrk-$p.txt" & loads+=($!); done
  wait "${loads[@]}"
  local a1=0 s1=0
  for p in "${ports[@]}"; do a1=$(( a1 + $(metric "$p" herald_notifications_accepted_total) )); s1=$(( s1 + $(metric "$p" herald_queue_accept_statements_total) )); done
  local accepted=$(( a1 - a0 ))
  local d1=0
  for _ in $(seq 1200); do
    d1=0; for p in "${ports[@]}"; do d1=$(( d1 + $(metric "$p" 'herald_deliveries_total{transport="dry",outcome="delivered"') )); done
    [ $(( d1 - d0 )) -ge "$accepted" ] && break; sleep 0.1
  done
  local t1; t1=$(date +%s.%N)
  local h1 g1; h1=$(cpu $(node_pids)); g1=$(cpu $(server_pids))
  local rt="-"; [ $(( s1 - s0 )) -gt 0 ] && rt=$(awk -v s=$(( s1 - s0 )) -v a=$accepted 'BEGIN { printf "%.2f", s / a }')
  # Every statement any node sent (pg_stat_statements: accepts, claims, outcomes, depth, housekeeping).
  local all="-"
  if [ -n "$db" ]; then
    all=$(sql "$db" "SELECT round(sum(calls)::numeric / $accepted, 2) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db')")
    sql "$db" "SELECT calls, round(total_exec_time)::bigint, regexp_replace(left(query, 70), '\s+', ' ', 'g') FROM pg_stat_statements
               WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db') ORDER BY total_exec_time DESC LIMIT 6" > "$work/top-$db.txt"
  fi
  printf "  %-34s %9s accepted/s %9s deliveries/s   round trips/accept: writer %s, all %s\n" "$label" "$(( accepted / DURATION ))" \
    "$(awk -v n=$(( d1 - d0 )) -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", n / (b - a) }')" "$rt" "$all"
  # CPU per accepted notification (its delivery included), herald and the PostgreSQL server.
  awk -v h=$(awk -v a="$h0" -v b="$h1" 'BEGIN { print b - a }') -v g=$(awk -v a="$g0" -v b="$g1" 'BEGIN { print b - a }') -v n=$accepted -v db="$db" \
    'BEGIN { printf "      CPU per accepted notification: herald %d us%s\n", h * 1e6 / n, db == "" ? "" : sprintf(", PostgreSQL server %d us", g * 1e6 / n) }'
  [ -n "$db" ] && awk -F'|' '{ printf "      %8d calls %7d ms  %s\n", $1, $2, $3 }' "$work/top-$db.txt"
  echo "$(( accepted / DURATION ))"> "$work/last-rate"
}

echo "== bench_storage (loopback, wrk -c128 over the nodes, ${DURATION}s, $(nproc) cores, log transport; SQLite synchronous=full, PostgreSQL fsync on; $ROUNDS rounds)"
median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
pg_ratios=() node_ratios=() third_ratios=() equal_ratios=()
for round in $(seq "$ROUNDS"); do
  echo "  round $round"
  sqlite=$(node "$work/sqlite$round" '{"path": "herald.db", "synchronous": "full"}')
  run "1 node, SQLite" "" "$sqlite"; r_sqlite=$(cat "$work/last-rate")
  stop_node "$work/sqlite$round"
  for d in one$round third$round three$round; do
    as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U herald -d postgres -qc "CREATE DATABASE $d" > /dev/null
    sql "$d" "CREATE EXTENSION pg_stat_statements" > /dev/null
  done
  one=$(node "$work/pg1-$round" "{\"driver\": \"postgresql\", \"url\": \"postgresql://herald@127.0.0.1:$port/one$round\"}")
  run "1 node, PostgreSQL" "one$round" "$one"; r_one=$(cat "$work/last-rate")
  stop_node "$work/pg1-$round"
  third=$(node "$work/pgT-$round" "{\"driver\": \"postgresql\", \"url\": \"postgresql://herald@127.0.0.1:$port/third$round\"}")
  CONNECTIONS=43 run "1 node, PostgreSQL, 43 connections" "third$round" "$third"; r_third=$(cat "$work/last-rate")
  stop_node "$work/pgT-$round"
  nodes=()
  for n in A B C; do nodes+=("$(node "$work/pg$n-$round" "{\"driver\": \"postgresql\", \"url\": \"postgresql://herald@127.0.0.1:$port/three$round\"}")"); done
  run "3 nodes, one PostgreSQL" "three$round" "${nodes[@]}"; r_three=$(cat "$work/last-rate")
  CONNECTIONS=384 run "3 nodes, 384 connections" "three$round" "${nodes[@]}"; r_equal=$(cat "$work/last-rate")
  for n in A B C; do stop_node "$work/pg$n-$round"; done
  for d in one$round third$round three$round; do as_pg "$bin/psql" -h 127.0.0.1 -p "$port" -U herald -d postgres -qc "DROP DATABASE $d" > /dev/null; done
  lines=$(cat "$work"/pg{A,B,C}-"$round"/deliveries.jsonl | wc -l)
  unique=$(cat "$work"/pg{A,B,C}-"$round"/deliveries.jsonl | grep -o '"apns-id":"[^"]*"' | sort -u | wc -l)
  pg_ratios+=("$(awk -v a="$r_one" -v b="$r_sqlite" 'BEGIN { printf "%.2f", a / b }')")
  node_ratios+=("$(awk -v a="$r_three" -v b="$r_one" 'BEGIN { printf "%.2f", a / b }')")
  third_ratios+=("$(awk -v a="$r_third" -v b="$r_one" 'BEGIN { printf "%.2f", a / b }')")
  equal_ratios+=("$(awk -v a="$r_equal" -v b="$r_one" 'BEGIN { printf "%.2f", a / b }')")
  printf "    PG / SQLite %s   3 nodes / 1 node %s   (1 node at 43 connections / 1 node %s; 3 nodes at 384 / 1 node at 128 %s)   duplicates %s of %s\n" \
    "${pg_ratios[-1]}" "${node_ratios[-1]}" "${third_ratios[-1]}" "${equal_ratios[-1]}" "$(( lines - unique ))" "$lines"
done
printf "  %-34s %9s   (target >= 0.5; rounds: %s)\n" "PostgreSQL / SQLite, one node" "$(printf '%s\n' "${pg_ratios[@]}" | median)" "${pg_ratios[*]}"
printf "  %-34s %9s   (target >= 0.9; rounds: %s)\n" "three nodes / one node, PostgreSQL" "$(printf '%s\n' "${node_ratios[@]}" | median)" "${node_ratios[*]}"
printf "  %-34s %9s   (rounds: %s)\n" "one node at 43 connections / 128" "$(printf '%s\n' "${third_ratios[@]}" | median)" "${third_ratios[*]}"
printf "  %-34s %9s   (rounds: %s)\n" "3 nodes at 3 x 128 / 1 node at 128" "$(printf '%s\n' "${equal_ratios[@]}" | median)" "${equal_ratios[*]}"
