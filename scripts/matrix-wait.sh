#!/usr/bin/env bash
# Measures what waiting for APNs's first answer would cost a Matrix notify: the notify's own
# answer time, and the time from that 200 until APNs answers the push, sequentially (as Synapse
# sends one pusher's notifications) against the local APNs simulator with LATENCY_MS added to
# each of its answers. Usage: scripts/matrix-wait.sh [HERALD_BINARY] (default .build/debug/herald);
# N (default 300) notifies per latency, LATENCIES (default "0 20 100").
set -euo pipefail
cd "$(dirname "$0")/.."
herald="${1:-.build/debug/herald}"
n="${N:-300}"
scripts/make-test-certs.sh var/certs >/dev/null
work=$(mktemp -d /tmp/herald-matrix-wait.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

port_of() { for _ in $(seq 1 200); do grep -o "listening on [0-9.]*:[0-9]*" "$1" 2>/dev/null | head -1 | sed 's/.*://' && return 0; sleep 0.05; done; return 1; }

for latency in ${LATENCIES:-0 20 100}; do
  rm -f "$work"/*
  "$herald" simulate apns-http2 --port 0 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
    --auth-key-pub ABC123DEFG=var/certs/AuthKey_ABC123DEFG.pub.pem --team DEF123GHIJ --latency-ms "$latency" \
    --record "$work/received.jsonl" > "$work/sim.log" 2>&1 &
  pids+=($!)
  sim=$(port_of "$work/sim.log")
  cat > "$work/config.json" <<JSON
{"storage": {"path": "$work/herald.db"},
 "apps": {"com.example.app": {"routes": ["apns"]}},
 "transports": {"apns": {"type": "apns-http2", "environment": "sandbox", "endpoint": "https://127.0.0.1:$sim",
   "caFile": "$PWD/var/certs/ca.pem", "keyFile": "$PWD/var/certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ"}},
 "api": {"listen": "127.0.0.1:0"},
 "server": {"batchLinger": 0},
 "log": {"level": "warning"},
 "matrix": {"apps": {"im.vector.app.ios.prod": {"app": "com.example.app"}}}}
JSON
  "$herald" serve --config "$work/config.json" > "$work/herald.log" 2>&1 &
  pids+=($!)
  api=$(port_of "$work/herald.log")
  python3 - "$api" "$work/received.jsonl" "$n" "$latency" <<'PY'
import http.client, json, sys, time, datetime, base64
port, record, n, latency = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
conn = http.client.HTTPConnection("127.0.0.1", port)
pushkey = base64.b64encode(bytes(range(32))).decode()
answered = {}
notify = []
for i in range(n):
    body = json.dumps({"notification": {"event_id": f"$e{i}", "room_id": "!r:x", "type": "m.room.message", "sender": "@a:x",
                       "content": {"msgtype": "m.text", "body": "hi"}, "counts": {"unread": 1},
                       "devices": [{"app_id": "im.vector.app.ios.prod", "pushkey": pushkey, "pushkey_ts": 1700000000}]}})
    t0 = time.time()
    conn.request("POST", "/_matrix/push/v1/notify", body, {"Content-Type": "application/json"})
    r = conn.getresponse(); r.read()
    t1 = time.time()
    assert r.status == 200, r.status
    notify.append(t1 - t0)
    answered[f"$e{i}"] = t1
    time.sleep(0.01)   # a homeserver's pace for one pusher, not a flood
deadline = time.time() + 30
seen = {}
while time.time() < deadline and len(seen) < n:
    try:
        for line in open(record):
            rec = json.loads(line)
            eid = json.loads(rec["payload"])["event_id"] if isinstance(rec.get("payload"), str) else rec["payload"]["event_id"]
            t = datetime.datetime.fromisoformat(rec["time"].replace("Z", "+00:00")).timestamp()
            seen[eid] = t + latency / 1000.0
    except FileNotFoundError:
        pass
    time.sleep(0.1)
after = sorted(seen[e] - answered[e] for e in seen)
notify.sort()
pct = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))] * 1000
print(f"APNs latency {latency:>3} ms: notify answered p50 {pct(notify, .5):6.2f} ms p99 {pct(notify, .99):6.2f} ms; "
      f"200 -> APNs answer p50 {pct(after, .5):6.2f} ms p99 {pct(after, .99):6.2f} ms ({len(seen)}/{n} arrived)")
PY
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  pids=()
done
