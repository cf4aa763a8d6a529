#!/usr/bin/env bash
# `make soak`: the daemon under sustained load through the apns-http2 transport to the HTTP/2
# simulator with faults (500, 503 and 429 answers, a GOAWAY every 7000 requests per connection)
# and a SIGHUP reload half-way. Each round is SOAK_SECONDS (default 20) of wrk fan-out (10
# devices per user), then the queue drains. Checks at the end: every accepted delivery was
# answered 200 exactly once (distinct apns-ids in the simulator's record), SIGTERM exits 0.
# Prints RSS per round so a leak shows as a trend. Loopback only.
#
#   scripts/soak.sh [ROUNDS]     (default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
HERALD=${HERALD:-.build/release/herald}
ROUNDS=${1:-8}
SECONDS_PER_ROUND=${SOAK_SECONDS:-20}
command -v wrk >/dev/null || { echo "soak: wrk is missing; run scripts/bootstrap.sh" >&2; exit 1; }
dir=$(mktemp -d /tmp/herald-soak.XXXXXX)
scripts/make-test-certs.sh "$dir/certs" > /dev/null
sim="" daemon=""
cleanup() { kill -TERM $daemon $sim 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do p=$(grep -o 'listening on .*' "$1" 2>/dev/null | grep -o '[0-9]*$' || true); [ -n "$p" ] && { echo "$p"; return; }; sleep 0.1; done; echo "soak: no port in $1: $(cat "$1")" >&2; exit 1; }

"$HERALD" simulate apns-http2 --port 0 --tls-cert "$dir/certs/server.pem" --tls-key "$dir/certs/server.key" \
  --auth-key-pub "ABC123DEFG=$dir/certs/AuthKey_ABC123DEFG.pub.pem" --team DEF123GHIJ \
  --goaway-after 7000 --internal-server-errors 300 --service-unavailable 300 --throttle 300 \
  --record "$dir/received.jsonl" > "$dir/sim.txt" 2>&1 &
sim=$!
sim_port=$(wait_port "$dir/sim.txt")
cat > "$dir/config.json" <<JSON
{
  "storage": {"path": "herald.db"},
  "apps": {"com.example.app": {"routes": ["apns"]}},
  "transports": {
    "apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "https://127.0.0.1:$sim_port",
             "caFile": "certs/ca.pem", "keyFile": "certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG",
             "teamId": "DEF123GHIJ", "connections": 2}
  },
  "api": {"listen": "127.0.0.1:0"},
  "log": {"level": "notice"}
}
JSON
"$HERALD" serve --config "$dir/config.json" > "$dir/out.txt" 2> "$dir/err.txt" &
daemon=$!
url=http://127.0.0.1:$(wait_port "$dir/out.txt")
metric() { curl -s "$url/metrics" | awk -v m="$1" 'index($0, m) == 1 { s += $NF } END { printf "%d", s }'; }

wrk -t1 -c4 -d3s -s scripts/wrk/register.lua "$url/v1/devices" > /dev/null

echo "== soak: $ROUNDS rounds of ${SECONDS_PER_ROUND}s, 10 devices per user, faults and GOAWAYs, SIGHUP after round $(( (ROUNDS + 1) / 2 ))"
printf "  %5s %10s %12s %12s\n" round "RSS MB" accepted delivered
for round in $(seq "$ROUNDS"); do
  wrk -t1 -c16 -d"${SECONDS_PER_ROUND}s" -s scripts/wrk/fanout.lua "$url/v1/notifications" > /dev/null
  [ "$round" = $(( (ROUNDS + 1) / 2 )) ] && kill -HUP $daemon
  for _ in $(seq 1200); do
    [ "$(( $(metric 'herald_queue_depth{') + $(metric 'herald_deliveries_in_flight{') ))" = 0 ] && break; sleep 0.5
  done
  printf "  %5d %10d %12d %12d\n" "$round" $(( $(awk '/^VmRSS/ { print $2 }' /proc/$daemon/status) / 1024 )) \
    "$(metric herald_notifications_accepted_total)" "$(metric 'herald_deliveries_total{transport="apns",outcome="delivered"')"
done
accepted=$(metric herald_notifications_accepted_total)
delivered=$(metric 'herald_deliveries_total{transport="apns",outcome="delivered"')
retries=$(metric herald_retries_total)
kill -TERM $daemon; status=0; wait $daemon || status=$?; daemon=""
kill -TERM $sim; wait $sim || true; sim=""
records=$(wc -l < "$dir/received.jsonl")
unique=$(grep -o '"apnsId":"[^"]*"' "$dir/received.jsonl" | sort -u | wc -l)
echo "  accepted $accepted notifications, $delivered deliveries answered 200, $retries retries"
echo "  simulator: $(tail -1 "$dir/sim.txt")"
fail=0
[ "$delivered" = $(( accepted * 10 )) ] || { echo "soak: FAIL: $delivered delivered, expected $(( accepted * 10 ))"; fail=1; }
[ "$records" = "$unique" ] || { echo "soak: FAIL: $records notifications recorded, $unique distinct apns-ids (sent twice)"; fail=1; }
[ "$records" = "$delivered" ] || { echo "soak: FAIL: the simulator recorded $records, Herald counted $delivered"; fail=1; }
[ "$status" = 0 ] || { echo "soak: FAIL: SIGTERM exit status $status"; fail=1; }
[ $fail = 0 ] && echo "soak: OK: every delivery answered 200 exactly once; clean exit"
exit $fail
