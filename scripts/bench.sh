#!/usr/bin/env bash
# `make bench`: benchmarks, each printed next to a reference measured in the same run so the
# ratio means something on any machine. Loopback only; every load is bounded in time.
#
#   scripts/bench.sh            all sections
#   scripts/bench.sh bench_api  one section (bench_api, bench_apns_http2, bench_transport, bench_crypto, bench_binary, bench_bulk, bench_storage, bench_stream, bench_webpush, bench_fcm, bench_china)
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${HERALD:-.build/release/herald}
HERALD_BENCH=${HERALD_BENCH:-.build/release/herald-bench}  # the benchmarks and load clients (Sources/HeraldBench)
export HERALD  # herald-bench starts this herald for its daemons and simulators
DURATION=${BENCH_DURATION:-10}

need() { command -v "$1" >/dev/null 2>&1 || { echo "bench: $1 is missing; run scripts/bootstrap.sh" >&2; exit 1; }; }
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" 'index($0, m) == 1 { s += $NF } END { printf "%d", s }'; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
hwm_kb() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"; }  # user + system seconds
wrk_rate() { awk '/^Requests\/sec/ { print int($2) }'; }

# The daemon's HTTP API: accepted notifications/s with a durable commit, and end-to-end
# deliveries/s with 10 devices per user, twice: through the `log` transport (a file; the
# daemon's own ceiling) and through the `apns-http2` transport to the APNs HTTP/2 simulator
# (TLS, token auth), which is the deployment's real path, once with each engine (curl, nghttp2).
bench_api() {
  need wrk; need curl
  local dir; dir=$(mktemp -d /tmp/herald-bench.XXXXXX)
  scripts/make-test-certs.sh "$dir/certs" > /dev/null
  "$HERALD" simulate apns-http2 --port 0 --tls-cert "$dir/certs/server.pem" --tls-key "$dir/certs/server.key" \
    --auth-key-pub "ABC123DEFG=$dir/certs/AuthKey_ABC123DEFG.pub.pem" --team DEF123GHIJ > "$dir/sim.txt" 2>&1 &
  local sim=$!
  local sim_port=""
  for _ in $(seq 100); do sim_port=$(grep -o 'listening on .*' "$dir/sim.txt" 2>/dev/null | grep -o '[0-9]*$' || true); [ -n "$sim_port" ] && break; sleep 0.1; done
  [ -n "$sim_port" ] || { echo "bench_api: the simulator did not start: $(cat "$dir/sim.txt")" >&2; kill $sim; return 1; }
  cat > "$dir/config.json" <<JSON
{
  "storage": {"path": "herald.db", "synchronous": "full"},
  "apps": {
    "com.example.app": {"routes": ["dry"]},
    "com.example.apns": {"routes": ["apns"]},
    "com.example.apns2": {"routes": ["apns2"]}
  },
  "transports": {
    "dry": {"type": "log", "path": "deliveries.jsonl"},
    "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "https://127.0.0.1:$sim_port",
             "caFile": "certs/ca.pem", "keyFile": "certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG",
             "teamId": "DEF123GHIJ", "connections": 2},
    "apns2": {"type": "apns-http2", "engine": "nghttp2", "environment": "sandbox", "endpoint": "https://127.0.0.1:$sim_port",
              "caFile": "certs/ca.pem", "keyFile": "certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG",
              "teamId": "DEF123GHIJ", "connections": 2}
  },
  "api": {"listen": "127.0.0.1:0"},
  "server": {"maxQueuedPerTransport": 50000000, "maxPendingAccepts": 100000},
  "log": {"level": "warning"}
}
JSON
  "$HERALD" serve --config "$dir/config.json" > "$dir/out.txt" 2> "$dir/err.txt" &
  local pid=$!
  trap "kill -TERM $pid $sim 2>/dev/null; wait $pid $sim 2>/dev/null; rm -rf '$dir'" RETURN
  local port=""
  for _ in $(seq 100); do port=$(grep -o '[0-9]*$' "$dir/out.txt" 2>/dev/null || true); [ -n "$port" ] && break; sleep 0.1; done
  [ -n "$port" ] || { echo "bench_api: the daemon did not start: $(cat "$dir/err.txt")" >&2; return 1; }
  local url="http://127.0.0.1:$port"
  sleep 1
  local idle_rss; idle_rss=$(rss_kb $pid)

  # Devices: "solo" has 1; users u0…u199 have 10 each.
  curl -s -o /dev/null -H 'Content-Type: application/json' \
    -d '{"app":"com.example.app","user":"solo","token":"00000000000000000000000000000000000000000000000000000000000000aa"}' "$url/v1/devices"
  for app in com.example.app com.example.apns com.example.apns2; do
    HERALD_APP=$app wrk -t1 -c4 -d3s -s scripts/wrk/register.lua "$url/v1/devices" > "$dir/register.txt"
  done
  local registered; registered=$(curl -s "$url/v1/users/u199/devices?app=com.example.apns" | grep -o '"token"' | wc -l)

  # Reference: the same server answering /healthz (no store, no queue).
  local health; health=$(wrk -t2 -c64 -d5s "$url/healthz" | wrk_rate)

  # Accepted notifications/s: one device each, durable group commit, workers delivering meanwhile.
  local before; before=$(metric "$port" herald_notifications_accepted_total)
  local cpu0; cpu0=$(cpu_s $pid)
  wrk -t2 -c128 -d"${DURATION}s" -s scripts/wrk/accept.lua "$url/v1/notifications" > "$dir/accept.txt" &
  local wrk_pid=$! peak=0
  while kill -0 $wrk_pid 2>/dev/null; do r=$(rss_kb $pid); [ "$r" -gt "$peak" ] && peak=$r; sleep 0.5; done
  local accepted=$(( $(metric "$port" herald_notifications_accepted_total) - before ))
  local accept_rate=$(( accepted / DURATION ))
  local non2xx; non2xx=$(awk '/Non-2xx/ { print $NF }' "$dir/accept.txt"); non2xx=${non2xx:-0}
  # Let the backlog drain before the next section.
  for _ in $(seq 600); do [ "$(metric "$port" 'herald_queue_depth{')" = 0 ] && break; sleep 0.1; done
  # The daemon's own CPU per accepted notification: parse, fan-out, commit, claim, the log
  # transport's line, the outcome.
  local accept_cpu_us; accept_cpu_us=$(awk -v a="$cpu0" -v b="$(cpu_s $pid)" -v n="$accepted" 'BEGIN { printf "%.1f", n ? (b - a) * 1e6 / n : 0 }')

  # End to end: 10 devices per user; deliveries/s from the first request until the queue is empty.
  fanout() { # app transport; sets rate (deliveries/s)
    local d0; d0=$(metric "$port" "herald_deliveries_total{transport=\"$2\",outcome=\"delivered\"")
    local c0; c0=$(cpu_s $pid)
    local t0; t0=$(date +%s.%N)
    HERALD_APP=$1 wrk -t2 -c64 -d"${DURATION}s" -s scripts/wrk/fanout.lua "$url/v1/notifications" > "$dir/fanout.txt" &
    local wrk_pid=$!
    while kill -0 $wrk_pid 2>/dev/null; do r=$(rss_kb $pid); [ "$r" -gt "$peak" ] && peak=$r; sleep 0.5; done
    for _ in $(seq 1200); do [ "$(metric "$port" 'herald_queue_depth{')" = 0 ] && [ "$(metric "$port" 'herald_deliveries_in_flight{')" = 0 ] && break; sleep 0.1; done
    local t1; t1=$(date +%s.%N)
    local delivered=$(( $(metric "$port" "herald_deliveries_total{transport=\"$2\",outcome=\"delivered\"") - d0 ))
    rate=$(awk -v n=$delivered -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", n / (b - a) }')
    cpu_us=$(awk -v a="$c0" -v b="$(cpu_s $pid)" -v n="$delivered" 'BEGIN { printf "%.1f", n ? (b - a) * 1e6 / n : 0 }')
  }
  local rate cpu_us e2e_rate e2e_apns e2e_nghttp2 e2e_cpu_us
  fanout com.example.app dry; e2e_rate=$rate; e2e_cpu_us=$cpu_us
  fanout com.example.apns apns; e2e_apns=$rate
  fanout com.example.apns2 apns2; e2e_nghttp2=$rate
  local received; received=$(( $(metric "$port" 'herald_deliveries_total{transport="apns",outcome="delivered"') + $(metric "$port" 'herald_deliveries_total{transport="apns2",outcome="delivered"') ))
  local commits ops; commits=$(metric "$port" herald_queue_commit_operations_count); ops=$(metric "$port" herald_queue_commit_operations_sum)

  echo "== bench_api (loopback, wrk, ${DURATION}s per load, $(nproc) cores, storage.synchronous=full)"
  printf "  %-52s %10s\n" "reference: GET /healthz (same server, no store)" "$health req/s"
  printf "  %-52s %10s   (target >= 20000; %s non-2xx)\n" "accepted notifications, durable commit" "$accept_rate /s" "$non2xx"
  printf "  %-52s %10s\n" "daemon CPU per accepted notification (1 device)" "$accept_cpu_us us"
  printf "  %-52s %10s\n" "end-to-end deliveries, 10 devices/user, log transport" "$e2e_rate /s"
  printf "  %-52s %10s\n" "daemon CPU per delivery there (accept share included)" "$e2e_cpu_us us"
  printf "  %-52s %10s   (target >= 50000)\n" "end-to-end deliveries, 10 devices/user, APNs simulator" "$e2e_apns /s"
  printf "  %-52s %10s   (target >= 50000)\n" "the same with the nghttp2 engine" "$e2e_nghttp2 /s"
  printf "  %-52s %10s\n" "accept / healthz ratio" "$(awk -v a=$accept_rate -v b=$health 'BEGIN { printf "%.2f", a / b }')"
  printf "  %-52s %10s\n" "operations per group commit (mean)" "$(awk -v a=$ops -v b=$commits 'BEGIN { printf "%.1f", b ? a / b : 0 }')"
  printf "  %-52s %10s   (target <= 30 MB)\n" "RSS idle" "$(( idle_rss / 1024 )) MB"
  printf "  %-52s %10s\n" "RSS under load (peak sampled / VmHWM)" "$(( peak / 1024 )) / $(( $(hwm_kb $pid) / 1024 )) MB"
  printf "  %-52s %10s\n" "devices registered for the fan-out (u199)" "$registered"
  printf "  %-52s %10s\n" "deliveries answered 200 by the simulator (all runs)" "$received"
}

# The APNs HTTP/2 transport's own benchmark (its script, when present).
bench_apns_http2() {
  if [ -x scripts/bench-apns-http2.sh ]; then scripts/bench-apns-http2.sh; else echo "bench_apns_http2: scripts/bench-apns-http2.sh not present, skipped"; fi
}

# The apns-http2 transport itself (both engines, TLS, token auth) against the simulator or nghttpd,
# next to h2load on the same server: notifications/s, the ratio and CPU per notification.
bench_transport() {
  need h2load
  "$HERALD_BENCH" apns-http2 --n "${BENCH_NOTIFICATIONS:-100000}" --work "$(mktemp -d /tmp/herald-bench-transport.XXXXXX)"
}

# ES256, provider tokens and TLS record exchange, next to `openssl speed` on the same machine.
bench_crypto() {
  need openssl
  local dir; dir=$(mktemp -d /tmp/herald-bench-crypto.XXXXXX)
  "$HERALD_BENCH" crypto --work "$dir" || { rm -rf "$dir"; return 1; }
  rm -rf "$dir"
}

# The apns-binary transport on one connection to the binary gateway simulator, next to a raw TLS
# writer of the same frames (the ceiling): notifications/s, the ratio and CPU per notification.
bench_binary() {
  local work; work=$(mktemp -d /tmp/herald-bench-binary.XXXXXX)
  "$HERALD_BENCH" apns-binary --n "${BENCH_BINARY_NOTIFICATIONS:-200000}" --rounds 3 --work "$work" || { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

# `herald send --tokens-file` with BENCH_BULK_TOKENS (1,000,000) tokens: through the log transport
# (to /dev/null), then through apns-http2 to the HTTP/2 simulator with each engine (one
# connection), each with notifications/s, CPU per notification and peak RSS; next to awk writing
# one JSON line per token from the same file (the bare cost of reading a token and writing a line).
bench_bulk() {
  local n=${BENCH_BULK_TOKENS:-1000000} dir; dir=$(mktemp -d /tmp/herald-bench-bulk.XXXXXX)
  awk -v n="$n" 'BEGIN { for (i = 1; i <= n; i++) printf "%064x\n", i }' > "$dir/tokens.txt"
  scripts/make-test-certs.sh "$dir/certs" > /dev/null
  "$HERALD" simulate apns-http2 --port 0 --tls-cert "$dir/certs/server.pem" --tls-key "$dir/certs/server.key" \
    --auth-key-pub "ABC123DEFG=$dir/certs/AuthKey_ABC123DEFG.pub.pem" --team DEF123GHIJ > "$dir/sim.txt" 2>&1 &
  local sim=$! sim_port=""
  trap "kill $sim 2>/dev/null; wait $sim 2>/dev/null; rm -rf '$dir'" RETURN
  for _ in $(seq 100); do sim_port=$(grep -o 'listening on .*' "$dir/sim.txt" 2>/dev/null | grep -o '[0-9]*$' || true); [ -n "$sim_port" ] && break; sleep 0.1; done
  [ -n "$sim_port" ] || { echo "bench_bulk: the simulator did not start: $(cat "$dir/sim.txt")" >&2; return 1; }
  cat > "$dir/config.json" <<JSON
{"storage": {"path": "herald.db", "synchronous": "normal"},
 "apps": {"com.example.log": {"routes": ["dry"]}, "com.example.curl": {"routes": ["curl"]},
          "com.example.nghttp2": {"routes": ["nghttp2"]}},
 "transports": {
   "dry": {"type": "log", "path": "/dev/null"},
   "curl": {"type": "apns-http2", "engine": "curl", "environment": "sandbox", "endpoint": "https://127.0.0.1:$sim_port",
            "caFile": "certs/ca.pem", "keyFile": "certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"},
   "nghttp2": {"type": "apns-http2", "engine": "nghttp2", "environment": "sandbox", "endpoint": "https://127.0.0.1:$sim_port",
               "caFile": "certs/ca.pem", "keyFile": "certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}}}
JSON
  echo "== bench_bulk: herald send --tokens-file, $n tokens"
  local app
  for app in log curl nghttp2; do
    /usr/bin/time -f "%e %U %S %M" -o "$dir/$app.time" "$HERALD" send --config "$dir/config.json" --app "com.example.$app" \
      --tokens-file "$dir/tokens.txt" --alert hi > "$dir/$app.out" || { tail -3 "$dir/$app.out"; return 1; }
    read -r e u s m < "$dir/$app.time"
    awk -v app="$app" -v n="$n" -v e="$e" -v u="$u" -v s="$s" -v m="$m" -v last="$(tail -1 "$dir/$app.out")" \
      'BEGIN { printf "  %-8s %8d notifications/s  %5.1f us CPU each  peak RSS %4d MB   (%s)\n", app, n / e, (u + s) * 1e6 / n, m / 1024, last }'
  done
  echo "  (targets: <= 100 MB whatever the count; <= 10 us of Herald's own CPU per notification, outside the engine: the log row bounds it)"
  /usr/bin/time -f "%e %U %S %M" -o "$dir/awk.time" awk '{ printf "{\"token\":\"%s\",\"payload\":{\"aps\":{\"alert\":\"hi\"}}}\n", $1 }' \
    "$dir/tokens.txt" > /dev/null
  read -r e2 u2 s2 m2 < "$dir/awk.time"
  awk -v n="$n" -v e="$e2" -v u="$u2" -v s="$s2" 'BEGIN { printf "  reference: awk, a line per token: %d lines/s, %.1f us CPU per line\n", n / e, (u + s) * 1e6 / n }'
}

# One daemon on SQLite vs one on PostgreSQL vs three on one PostgreSQL (its own script).
bench_storage() { scripts/bench-storage.sh; }

# Live streams: N streams on one daemon, one notification to all, next to the HTTP layer alone.
bench_stream() {
  "$HERALD_BENCH" stream --n "${BENCH_STREAMS:-10000}"
  "$HERALD_BENCH" stream-hub --n "${BENCH_STREAMS:-10000}"
}

# The webpush transport to `herald simulate webpush` (another process, which decrypts): notifications/s
# and this process's CPU per notification, next to one ECDH (openssl speed ecdhp256) + one P-256 key generation.
bench_webpush() {
  need openssl
  local work; work=$(mktemp -d /tmp/herald-bench-webpush.XXXXXX)
  "$HERALD_BENCH" webpush --n "${BENCH_WEBPUSH_NOTIFICATIONS:-50000}" --work "$work" || { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

# The fcm transport on one connection to `herald simulate fcm`, next to h2load on the same simulator
# and the apns-http2 nghttp2 engine against the APNs simulator (CPU per notification).
bench_fcm() {
  need h2load; need curl; need openssl
  local work; work=$(mktemp -d /tmp/herald-bench-fcm.XXXXXX)
  "$HERALD_BENCH" fcm --n "${BENCH_FCM_NOTIFICATIONS:-100000}" --work "$work" || { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

# China's vendor plugins (hms, xiaomi, oppo, vivo), each on one connection to its simulator,
# next to h2load posting the same request to the same simulator.
bench_china() {
  need h2load; need curl; need openssl
  local work; work=$(mktemp -d /tmp/herald-bench-china.XXXXXX)
  "$HERALD_BENCH" china --n "${BENCH_CHINA_NOTIFICATIONS:-20000}" --work "$work" || { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(bench_api bench_apns_http2 bench_transport bench_crypto bench_binary bench_bulk bench_storage bench_stream bench_webpush bench_fcm bench_china)
for s in "${sections[@]}"; do "$s"; done
