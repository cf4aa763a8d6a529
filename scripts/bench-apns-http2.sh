#!/usr/bin/env bash
# Benchmarks `herald simulate apns-http2` against nghttpd on the same machine, in the same run:
# h2load, one connection, 100 concurrent streams, TLS (ALPN h2), token auth with a JWT made by
# openssl, a 90-byte alert payload.
#
#   scripts/bench-apns-http2.sh [REQUESTS] [ROUNDS]      (defaults: 200000 requests, 3 rounds)
#
# PIN=0 leaves CPU placement to the scheduler.
# SIM_ARGS adds simulator options (e.g. SIM_ARGS=--production: no apns-unique-id).
# Needs: .build/release/herald (make build), h2load and nghttpd (Debian nghttp2-client,
# nghttp2-server), openssl. Prints, per round and server: requests/s (wall clock, h2load) and the
# server's CPU time per request (utime+stime from /proc), then the medians. On a 2-core machine
# h2load itself takes one core, so the wall-clock figure is bounded by the client too.
set -euo pipefail
requests="${1:-200000}"
rounds="${2:-3}"
root="$(cd "$(dirname "$0")/.." && pwd)"
herald="${HERALD:-$root/.build/release/herald}"
for tool in h2load nghttpd openssl "$herald"; do
  command -v "$tool" >/dev/null || { echo "bench-apns-http2: $tool not found (make build; apt-get install nghttp2-client nghttp2-server)" >&2; exit 2; }
done

# With taskset and 2+ cores: servers on CPU 0, h2load on CPU 1, so each has one core.
server_cpu=""; client_cpu=""
if [ "${PIN:-1}" = 1 ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then server_cpu="taskset -c 0"; client_cpu="taskset -c 1"; fi

work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
"$root/scripts/make-test-certs.sh" "$work/certs" >/dev/null
certs="$work/certs"
token="$(printf 'ab%.0s' $(seq 32))"
printf '%s' '{"aps":{"alert":{"title":"Hello","body":"A benchmark notification"},"sound":"default"}}' > "$work/payload.json"

# A provider token, signed by openssl; the DER signature becomes raw R||S (JWS form).
b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
header="$(printf '{"alg":"ES256","kid":"ABC123DEFG"}' | b64url)"
claims="$(printf '{"iss":"DEF123GHIJ","iat":%s}' "$(date +%s)" | b64url)"
printf '%s.%s' "$header" "$claims" | openssl dgst -sha256 -sign "$certs/AuthKey_ABC123DEFG.p8" -out "$work/sig.der"
rs=""
for hex in $(openssl asn1parse -inform DER -in "$work/sig.der" | awk -F: '/INTEGER/ {print $NF}'); do
  hex="${hex#00}"; while [ ${#hex} -lt 64 ]; do hex="0$hex"; done; rs="$rs${hex: -64}"
done
signature="$(printf '%s' "$rs" | xxd -r -p | b64url)"
jwt="$header.$claims.$signature"

# The simulator (token auth; all streams allowed at once, as h2load opens 100 before reading SETTINGS).
$server_cpu "$herald" simulate apns-http2 --port 0 --tls-cert "$certs/server.pem" --tls-key "$certs/server.key" \
  --auth-key-pub "ABC123DEFG=$certs/AuthKey_ABC123DEFG.pub.pem" --team DEF123GHIJ --allow-streams-before-auth ${SIM_ARGS:-} \
  > "$work/sim.out" 2>"$work/sim.err" &
pids+=($!); sim_pid=$!
# nghttpd answers POST 200 only when the file exists.
mkdir -p "$work/htdocs/3/device" && touch "$work/htdocs/3/device/$token"
nghttpd_port=$(( 20000 + RANDOM % 20000 ))
$server_cpu nghttpd --address=127.0.0.1 -d "$work/htdocs" "$nghttpd_port" "$certs/server.key" "$certs/server.pem" >/dev/null 2>&1 &
pids+=($!); nghttpd_pid=$!
for _ in $(seq 50); do grep -q "listening on" "$work/sim.out" 2>/dev/null && break; sleep 0.1; done
sim_port="$(head -1 "$work/sim.out" | sed 's/.*://')"
sleep 0.3

cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"
run() { # name pid port
  local before after out rate
  before="$(cpu "$2")"
  out="$($client_cpu h2load -n "$requests" -c 1 -m 100 "https://127.0.0.1:$3/3/device/$token" -d "$work/payload.json" \
         -H 'apns-topic: com.example.app' -H "authorization: bearer $jwt" 2>&1)"
  after="$(cpu "$2")"
  grep -q "$requests succeeded" <<<"$out" || { echo "$1: not every request succeeded:" >&2; grep -E "requests:|status codes" <<<"$out" >&2; }
  rate="$(sed -n 's/.*finished in [0-9.]*s, \([0-9.]*\) req\/s.*/\1/p' <<<"$out")"
  echo "$1 $rate $(awk -v t=$((after - before)) -v n="$requests" -v hz="$hz" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "h2load -n $requests -c 1 -m 100, TLS, token auth; $(nproc) cores${server_cpu:+, servers pinned to CPU 0 and h2load to CPU 1}; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %12s %16s\n' server "req/s" "server µs CPU/req"
results=()
for _ in $(seq "$rounds"); do
  for s in simulator nghttpd; do
    if [ "$s" = simulator ]; then line="$(run "$s" "$sim_pid" "$sim_port")"; else line="$(run "$s" "$nghttpd_pid" "$nghttpd_port")"; fi
    results+=("$line")
    read -r name rate us <<<"$line"
    printf '%-10s %12s %16s\n' "$name" "$rate" "$us"
  done
done
for s in simulator nghttpd; do
  rate="$(printf '%s\n' "${results[@]}" | awk -v s=$s '$1 == s {print $2}' | median)"
  us="$(printf '%s\n' "${results[@]}" | awk -v s=$s '$1 == s {print $3}' | median)"
  printf 'median %-10s %10s req/s %8s µs CPU/req (%s req per CPU-second)\n' "$s" "$rate" "$us" "$(awk -v u="$us" 'BEGIN { printf "%.0f", 1e6 / u }')"
done
kill -TERM "$sim_pid"
