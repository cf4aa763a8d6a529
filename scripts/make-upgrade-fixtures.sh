#!/usr/bin/env bash
# make-upgrade-fixtures.sh COMMIT [OUT]
#
# Makes the upgrade fixtures: a SQLite database and a PostgreSQL dump written by the Herald of
# COMMIT, with a manifest of exactly what they hold, for Tests/HeraldServerTests/UpgradeTests.swift
# (a later Herald must open them, migrate in place and keep everything).
#
#   scripts/make-upgrade-fixtures.sh cefef4f                  # writes Tests/Fixtures/upgrade/cefef4f/
#   scripts/make-upgrade-fixtures.sh cefef4f /tmp/fixtures    # elsewhere
#   DRIVERS=sqlite scripts/make-upgrade-fixtures.sh cefef4f   # one driver only
#
# How: the tree of COMMIT (`git archive`, nothing of the working tree) is built with
# `swift build --product herald` in .build/upgrade-fixtures/<commit>/src (kept, so a second run
# does not build again), and that binary's REAL `herald serve` is driven through its HTTP API,
# with two of that binary's `herald simulate apns-http2` and curl as the app's stream client:
#
#   1. daemon 1, transports pointed at simulators answering 200: register the devices
#      (com.example.app: alice production+sandbox, bob production, dave sandbox;
#       com.example.live: erin, frank); SIGTERM.
#   2. a simulator for `apns-sandbox` that answers dave's token 410 Unregistered with a timestamp
#      (after his registration) and every other request 503 ServiceUnavailable (no Retry-After:
#      the retry is due `delivery.initialBackoff` = 30 s later); the one for `apns-prod` knows the
#      key under another team, so it refuses the provider token (403 InvalidProviderToken).
#   3. daemon 2: erin's stream (curl) gets 3 notifications live (inbox seq 1-3), closes; then 2 more
#      for erin and 2 for frank are `parked` (local-only, no stream); a notification to alice, bob
#      and dave: production deliveries stay `queued` behind the paused `apns-prod`, alice's
#      sandbox one is retrying (queued, attempt 1, ServiceUnavailable), dave's ends invalid_token
#      and his device is invalidated with Apple's timestamp; one to alice with an idempotency_key
#      (sent twice: the second answers the first id). Checked through the API, then SIGTERM (exit 0).
#
# Each driver gets OUT/<driver>/: config.json (the configuration used: relative paths, secrets and
# endpoints as ${ENV}), manifest.json (devices, notifications with each delivery's state in the
# fixture and expected after the upgrade, inbox rows and sequences, the idempotency key, the raw
# rows), and herald.db (SQLite, checkpointed: no -wal) or herald.sql (PostgreSQL:
# `pg_dump --no-owner --no-privileges`, plain SQL, of a database on a throwaway server started
# under /tmp as the `postgres` user, as HeraldTestKit's PostgresServer does).
#
# Needs: swift, git, curl, python3, sqlite3, openssl, Debian's postgresql (for the postgresql
# driver). Nothing is left running: every process started is stopped by its pid on exit.
set -euo pipefail

COMMIT_ARG="${1:?usage: make-upgrade-fixtures.sh COMMIT [OUT]}"
ROOT="$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)"
DRIVERS="${DRIVERS:-sqlite postgresql}"
COMMIT="$(git -C "$ROOT" rev-parse --verify "$COMMIT_ARG^{commit}")"
OUT="$(realpath -m "${2:-$ROOT/Tests/Fixtures/upgrade/${COMMIT:0:7}}")"

KEY="upgrade-fixture-api-key-0123456789"
LIVE_SECRET="upgrade-fixture-live-secret-0123456789abcdef"
IDEMPOTENCY_KEY="upgrade-fixture-key-1"
tok() { printf '%064x' "$1"; }   # a 64-hex-digit token
A_PROD=$(tok 0xa1); A_SANDBOX=$(tok 0xa2); B_PROD=$(tok 0xb1); D_SANDBOX=$(tok 0xd1)
E_LIVE=$(tok 0xe1); F_LIVE=$(tok 0xf1)

# --- build the herald of COMMIT ---------------------------------------------------------------
BUILD="$ROOT/.build/upgrade-fixtures/$COMMIT"
if [ ! -f "$BUILD/src/Package.swift" ]; then
  rm -rf "$BUILD"; mkdir -p "$BUILD/src"
  git -C "$ROOT" archive "$COMMIT" | tar -x -C "$BUILD/src"
fi
echo "building herald at $COMMIT in $BUILD/src" >&2
(cd "$BUILD/src" && swift build --product herald >&2)
HERALD="$BUILD/src/.build/debug/herald"
[ -x "$HERALD" ] || { echo "no $HERALD after the build" >&2; exit 1; }

WORK="$(mktemp -d /tmp/herald-upgrade-XXXXXX)"
chmod 755 "$WORK"
PIDS=()
PGCTL_STOP=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [ ${#PGCTL_STOP[@]} -gt 0 ]; then "${PGCTL_STOP[@]}" >/dev/null 2>&1 || true; fi
  if [ -n "${KEEP_WORK:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

bash "$BUILD/src/scripts/make-test-certs.sh" "$WORK/certs" >/dev/null 2>&1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { python3 -c 'import time; print(int(time.time()*1000))'; }
fail() { echo "make-upgrade-fixtures: $*" >&2; exit 1; }

# wait_for FILE TEXT: until FILE has a line containing TEXT (30 s).
wait_for() {
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "timed out waiting for \"$2\" in $1: $(tail -5 "$1" 2>/dev/null)"
}
port_of() { grep -m1 'listening on' "$1" | sed 's/.*:\([0-9]*\).*/\1/'; }

# simulator NAME ARGS...: starts `herald simulate apns-http2`; sets SIM_PORT and SIM_PID.
simulator() {
  local name="$1"; shift
  "$HERALD" simulate apns-http2 --port 0 --tls-cert "$WORK/certs/server.pem" --tls-key "$WORK/certs/server.key" \
    --auth-key-pub "ABC123DEFG=$WORK/certs/AuthKey_ABC123DEFG.pub.pem" --record "$WORK/$name.jsonl" "$@" \
    >"$WORK/$name.out" 2>"$WORK/$name.err" &
  SIM_PID=$!; PIDS+=("$SIM_PID")
  wait_for "$WORK/$name.out" "listening on"
  SIM_PORT=$(port_of "$WORK/$name.out")
}

# stop PID: SIGTERM, waits, fails unless it exits 0.
stop() {
  kill -TERM "$1"
  local rc=0; wait "$1" || rc=$?
  [ "$rc" = 0 ] || fail "process $1 exited $rc on SIGTERM"
}

api() { curl -sS --max-time 10 -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))" "$1"; }

# daemon NAME PROD_PORT SANDBOX_PORT: starts `herald serve` in the run folder; sets API and DAEMON_PID.
daemon() {
  (cd "$RUN" && HERALD_API_KEY="$KEY" LIVE_CLIENT_SECRET="$LIVE_SECRET" HERALD_PG_URL="${PG_URL:-}" \
     APNS_PROD_ENDPOINT="https://127.0.0.1:$2" APNS_SANDBOX_ENDPOINT="https://127.0.0.1:$3" \
     exec "$HERALD" serve --config config.json) >"$WORK/$1.out" 2>"$WORK/$1.err" &
  DAEMON_PID=$!; PIDS+=("$DAEMON_PID")
  wait_for "$WORK/$1.out" "listening on"
  API="http://127.0.0.1:$(port_of "$WORK/$1.out")"
}

# state ID TOKEN: "state attempts" of the notification's delivery to TOKEN.
state() {
  api "$API/v1/notifications/$1" | json "' '.join(next((str(x['state']), str(x['attempts'])) for x in d['deliveries'] if x['token']=='$2'))"
}
# until_state ID TOKEN "STATE ATTEMPTS": waits up to 20 s (a glob: "delivered *").
until_state() {
  local s=""
  for _ in $(seq 200); do s=$(state "$1" "$2"); [[ "$s" == $3 ]] && return 0; sleep 0.1; done
  fail "delivery of $1 to $2 is \"$s\", not \"$3\": $(tail -5 "$WORK/daemon2.err")"
}
send() {   # send APP USERS_JSON TEXT [EXTRA_JSON]: prints the notification id
  local r; r=$(api -d "{\"app\":\"$1\",\"users\":$2,\"alert\":\"$3\"${4:+,$4}}" "$API/v1/notifications")
  echo "$r" | json "d['id']"
}
metric() { api "$API/metrics" | awk -v m="$1" '$1 == m {print $2}'; }

config() {   # config DRIVER: the configuration used (written to the run folder and committed)
  local storage
  if [ "$1" = sqlite ]; then storage='{"driver": "sqlite", "path": "herald.db", "synchronous": "normal"}'
  else storage='{"driver": "postgresql", "url": "${HERALD_PG_URL}", "pool": 4}'; fi
  cat <<EOF
{
  "storage": $storage,
  "apps": {
    "com.example.app": {"routes": ["apns-prod", "apns-sandbox"]},
    "com.example.live": {"routes": ["apns-sandbox", "live"], "foreground": "local-only", "clientSecret": "\${LIVE_CLIENT_SECRET}",
                         "inbox": {"ttl": "3650d", "maxPerUser": 1000}}
  },
  "transports": {
    "apns-prod": {"type": "apns-http2", "environment": "production", "endpoint": "\${APNS_PROD_ENDPOINT}", "caFile": "certs/ca.pem",
                  "keyFile": "certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "timeout": "5s"},
    "apns-sandbox": {"type": "apns-http2", "environment": "sandbox", "endpoint": "\${APNS_SANDBOX_ENDPOINT}", "caFile": "certs/ca.pem",
                     "keyFile": "certs/AuthKey_ABC123DEFG.p8", "keyId": "ABC123DEFG", "teamId": "DEF123GHIJ", "timeout": "5s"},
    "live": {"type": "local"}
  },
  "api": {"listen": "127.0.0.1:0", "keys": [{"id": "backend", "secret": "\${HERALD_API_KEY}", "scopes": ["send", "devices", "admin"]}],
          "streams": {"heartbeat": "1s"}},
  "delivery": {"initialBackoff": "30s", "jitter": 0},
  "server": {"batchLinger": 0, "probeInterval": "10m", "retention": "3650d", "idempotencyWindow": "3650d", "maintenanceInterval": "10m"},
  "log": {"level": "info", "format": "json"}
}
EOF
}

# --- a throwaway PostgreSQL server -------------------------------------------------------------
start_postgres() {
  local bin; bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$bin/pg_ctl" ] || fail "PostgreSQL is not installed (apt package postgresql; scripts/bootstrap.sh)"
  PGBIN="$bin"
  local as=(); [ "$(id -u)" = 0 ] && as=(/usr/sbin/runuser -u postgres --)
  PGDIR="$WORK/pg"; mkdir -p "$PGDIR"; [ "$(id -u)" = 0 ] && chown postgres: "$PGDIR"
  "${as[@]}" "$bin/initdb" -D "$PGDIR/data" -A trust -U herald --no-sync >/dev/null
  PGPORT=$(free_port)
  "${as[@]}" "$bin/pg_ctl" -D "$PGDIR/data" -l "$PGDIR/server.log" -w -t 60 \
    -o "-p $PGPORT -k $PGDIR -c listen_addresses=127.0.0.1" start >/dev/null
  PGCTL_STOP=("${as[@]}" "$bin/pg_ctl" -D "$PGDIR/data" -m fast -w stop)
  "$bin/createdb" -h 127.0.0.1 -p "$PGPORT" -U herald herald
  PG_URL="postgresql://herald@127.0.0.1:$PGPORT/herald"
}

# rows SQL: JSON rows of a query against the run's database.
rows() {
  if [ "$DRIVER" = sqlite ]; then
    local r; r=$(sqlite3 -json "$RUN/herald.db" "$1"); echo "${r:-[]}"
  else
    "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U herald -d herald -At -v ON_ERROR_STOP=1 \
      -c "SELECT coalesce(json_agg(row_to_json(q)), '[]') FROM ($1) q"
  fi
}

# has_column TABLE COLUMN: whether the run's database has it (the schema moved on: from SQLite
# step 5 and PostgreSQL step 6 the environment is a device attribute and `apns_id` is `message_id`).
has_column() {
  if [ "$DRIVER" = sqlite ]; then
    [ "$(sqlite3 "$RUN/herald.db" "SELECT count(*) FROM pragma_table_info('$1') WHERE name = '$2'")" = 1 ]
  else
    [ "$("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U herald -d herald -At -c "SELECT count(*) FROM information_schema.columns WHERE table_name = '$1' AND column_name = '$2'")" = 1 ]
  fi
}

generate() {
  DRIVER="$1"
  RUN="$WORK/run-$DRIVER"; mkdir -p "$RUN"
  ln -s "$WORK/certs" "$RUN/certs"
  config "$DRIVER" >"$RUN/config.json"
  PG_URL=""
  [ "$DRIVER" = postgresql ] && start_postgres

  # 1. Devices, with transports that work.
  simulator plain-prod --team DEF123GHIJ --production; local p1=$SIM_PID p1port=$SIM_PORT
  simulator plain-sandbox --team DEF123GHIJ; local s1=$SIM_PID s1port=$SIM_PORT
  daemon daemon1 "$p1port" "$s1port"
  register() {   # register APP USER TOKEN ENVIRONMENT
    local r; r=$(api -o /dev/null -w '%{http_code}' -d "{\"app\":\"$1\",\"user\":\"$2\",\"token\":\"$3\",\"environment\":\"$4\"}" "$API/v1/devices")
    [ "$r" = 201 ] || fail "registering $3 answered $r"
  }
  register com.example.app alice "$A_PROD" production
  register com.example.app alice "$A_SANDBOX" sandbox
  register com.example.app bob "$B_PROD" production
  register com.example.app dave "$D_SANDBOX" sandbox
  register com.example.live erin "$E_LIVE" sandbox
  register com.example.live frank "$F_LIVE" sandbox
  stop "$DAEMON_PID"; stop "$p1"; stop "$s1"

  # 2. Simulators that refuse: the production one knows the key under another team (403
  # InvalidProviderToken: the transport pauses); the sandbox one answers dave 410 with a
  # timestamp after his registration and every other request 503.
  sleep 1
  DEAD_TS=$(( $(now_ms) - 500 ))
  echo "$D_SANDBOX $DEAD_TS" >"$WORK/dead.txt"
  simulator refusing-prod --team ZZZ999ZZZZ --production; local p2=$SIM_PID p2port=$SIM_PORT
  simulator failing-sandbox --team DEF123GHIJ --unregistered "$WORK/dead.txt" --service-unavailable 100000; local s2=$SIM_PID s2port=$SIM_PORT
  daemon daemon2 "$p2port" "$s2port"

  # 3a. erin's stream gets three notifications live (inbox seq 1-3), then closes.
  local ctoken; ctoken=$(api -d "{\"app\":\"com.example.live\",\"user\":\"erin\",\"device\":\"$E_LIVE\",\"ttl\":3600}" "$API/v1/client-tokens" | json "d['token']")
  curl -sS -N --max-time 60 -H "Authorization: Bearer $ctoken" "$API/v1/stream?app=com.example.live" >"$WORK/erin.sse" 2>/dev/null &
  local curl_pid=$!; PIDS+=("$curl_pid")
  wait_for "$WORK/erin.sse" ": connected"
  LIVE=()
  for i in 1 2 3; do
    LIVE+=("$(send com.example.live '["erin"]' "live $i")")
    until_state "${LIVE[-1]}" "$E_LIVE" "delivered *"
  done
  wait_for "$WORK/erin.sse" "^id: 3"
  kill -TERM "$curl_pid"; wait "$curl_pid" 2>/dev/null || true
  for _ in $(seq 200); do [ "$(metric herald_streams_open)" = 0 ] && break; sleep 0.1; done
  [ "$(metric herald_streams_open)" = 0 ] || fail "erin's stream is still open after curl ended: $(api "$API/metrics" | grep herald_streams)"

  # 3b. Parked: two more for erin, two for frank (never connected).
  PARKED_ERIN=(); PARKED_FRANK=()
  for i in 1 2; do
    PARKED_ERIN+=("$(send com.example.live '["erin"]' "parked erin $i")"); until_state "${PARKED_ERIN[-1]}" "$E_LIVE" "parked *"
    PARKED_FRANK+=("$(send com.example.live '["frank"]' "parked frank $i")"); until_state "${PARKED_FRANK[-1]}" "$F_LIVE" "parked *"
  done

  # 3c. Paused, retrying, invalidated; the idempotency key.
  PUSH1=$(send com.example.app '["alice","bob","dave"]' "to everyone")
  until_state "$PUSH1" "$D_SANDBOX" "invalid_token 1"
  until_state "$PUSH1" "$A_SANDBOX" "queued 1"
  local ready=""
  for _ in $(seq 200); do
    ready=$(curl -sS "$API/readyz" | json "d.get('transports', d).get('apns-prod', '')" 2>/dev/null || true)
    case "$ready" in paused*) break;; esac; sleep 0.1
  done
  case "$ready" in paused*) ;; *) fail "apns-prod did not pause: $(curl -sS "$API/readyz")";; esac
  until_state "$PUSH1" "$A_PROD" "queued 0"
  until_state "$PUSH1" "$B_PROD" "queued 0"
  local body="{\"app\":\"com.example.app\",\"users\":[\"alice\"],\"alert\":\"once\",\"idempotency_key\":\"$IDEMPOTENCY_KEY\"}"
  PUSH2=$(api -d "$body" "$API/v1/notifications" | json "d['id']")
  [ "$(api -d "$body" "$API/v1/notifications" | json "d['id']")" = "$PUSH2" ] || fail "the idempotency key did not answer $PUSH2"
  until_state "$PUSH2" "$A_SANDBOX" "queued 1"
  until_state "$PUSH2" "$A_PROD" "queued 0"
  local failed; failed=$(python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if l.strip()))' "$WORK/failing-sandbox.jsonl" 2>/dev/null || echo 0)
  [ "$failed" = 0 ] || fail "the failing simulator accepted $failed notifications"

  # What the API says, just before the stop.
  mkdir -p "$WORK/api-$DRIVER"
  for id in "${LIVE[@]}" "${PARKED_ERIN[@]}" "${PARKED_FRANK[@]}" "$PUSH1" "$PUSH2"; do
    api "$API/v1/notifications/$id" >"$WORK/api-$DRIVER/notification-$id.json"
  done
  for u in "com.example.app alice" "com.example.app bob" "com.example.app dave" "com.example.live erin" "com.example.live frank"; do
    set -- $u; api "$API/v1/users/$2/devices?app=$1" >"$WORK/api-$DRIVER/devices-$1-$2.json"
  done
  stop "$DAEMON_PID"; stop "$p2"; stop "$s2"

  # The rows as stored.
  local q='"user"'; [ "$DRIVER" = sqlite ] && q='user'
  local parked_true='1'; [ "$DRIVER" = postgresql ] && parked_true='true'
  # The same fields from every schema (the manifest keeps the names of the first fixtures).
  local env='environment' d_env='d.environment' d_id='d.apns_id'
  if ! has_column devices environment; then
    env="json_extract(attributes, '\$.environment') AS environment"
    [ "$DRIVER" = postgresql ] && env="(attributes::json ->> 'environment') AS environment"
    d_env='NULL AS environment'
  fi
  has_column deliveries apns_id || d_id='d.message_id AS apns_id'
  rows "SELECT app, token, $q AS \"user\", transport, $env, created_at, updated_at, invalidated_at, invalidation_reason FROM devices ORDER BY app, token" >"$WORK/db-devices.json"
  rows "SELECT id, app, idempotency_key, deliveries, created_at FROM notifications ORDER BY seq" >"$WORK/db-notifications.json"
  rows "SELECT n.id AS notification, d.token, d.$q AS \"user\", $d_env, d.transport, d.state, (d.parked = $parked_true) AS parked, d.fallback, d.attempts, d.next_attempt_at, d.lease_until, d.last_reason, $d_id FROM deliveries d JOIN notifications n ON n.seq = d.notification ORDER BY d.id" >"$WORK/db-deliveries.json"
  rows "SELECT app, $q AS \"user\", seq, device, notification, created_at FROM inbox ORDER BY app, $q, seq" >"$WORK/db-inbox.json"
  rows "SELECT app, $q AS \"user\", seq FROM inbox_sequences ORDER BY app, $q" >"$WORK/db-inbox-sequences.json"

  local dest="$OUT/$DRIVER"
  rm -rf "$dest"; mkdir -p "$dest"
  cp "$RUN/config.json" "$dest/config.json"
  if [ "$DRIVER" = sqlite ]; then
    # herald closed the database on SIGTERM (its last connection checkpoints and removes the
    # -wal); checkpoint anyway in case a -wal is left.
    sqlite3 "$RUN/herald.db" "PRAGMA wal_checkpoint(TRUNCATE);" >/dev/null
    [ ! -s "$RUN/herald.db-wal" ] || fail "a -wal is left next to herald.db"
    cp "$RUN/herald.db" "$dest/herald.db"
    local version; version=$(sqlite3 "$RUN/herald.db" "PRAGMA user_version")
  else
    "$PGBIN/pg_dump" -h 127.0.0.1 -p "$PGPORT" -U herald --no-owner --no-privileges herald >"$dest/herald.sql"
    local version; version=$("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U herald -d herald -At -c "SELECT max(version) FROM herald_schema")
    "${PGCTL_STOP[@]}" >/dev/null; PGCTL_STOP=()
  fi

  python3 - "$WORK" "$DRIVER" "$dest" "$COMMIT" "$version" "$DEAD_TS" "$IDEMPOTENCY_KEY" \
      "${LIVE[*]}" "${PARKED_ERIN[*]}" "${PARKED_FRANK[*]}" "$PUSH1" "$PUSH2" \
      "$A_PROD" "$A_SANDBOX" "$B_PROD" "$D_SANDBOX" "$E_LIVE" "$F_LIVE" <<'PY'
import json, sys, os, glob
(work, driver, dest, commit, version, dead_ts, idem_key, live, parked_erin, parked_frank, push1, push2,
 a_prod, a_sandbox, b_prod, d_sandbox, e_live, f_live) = sys.argv[1:]
live, parked_erin, parked_frank = live.split(), parked_erin.split(), parked_frank.split()
load = lambda name: json.load(open(os.path.join(work, name)))
api = os.path.join(work, "api-" + driver)
db_deliveries = load("db-deliveries.json")
for d in db_deliveries:
    d["parked"] = bool(d["parked"])

def deliveries(nid):
    return [d for d in db_deliveries if d["notification"] == nid]

def describe(nid, scenario, expected):
    status = json.load(open(os.path.join(api, "notification-%s.json" % nid)))
    out = []
    for d in deliveries(nid):
        shown = next(x for x in status["deliveries"] if x["token"] == d["token"])
        fixture_state = "parked" if d["parked"] else d["state"]
        assert shown["state"] == fixture_state, (nid, shown, d)
        out.append({"token": d["token"], "user": d["user"], "transport": d["transport"], "apns_id": d["apns_id"],
                    "state": fixture_state, "attempts": d["attempts"], "last_reason": d["last_reason"],
                    "next_attempt_at": d["next_attempt_at"], "expected": expected(d)})
    return {"id": nid, "app": status["app"], "scenario": scenario, "created_at": status["created_at"],
            "idempotency_key": status.get("idempotency_key"), "deliveries": out}

def push_expected(d):
    if d["state"] == "invalid_token":
        return {"state": "invalid_token", "sent_to_apns": False}
    return {"state": "delivered", "sent_to_apns": True}

notifications = []
for i, n in enumerate(live):
    notifications.append(describe(n, "live: written to erin's open stream (inbox seq %d)" % (i + 1),
                                  lambda d: {"state": "delivered", "sent_to_apns": False}))
for n in parked_erin:
    notifications.append(describe(n, "parked for erin (local-only, her stream closed): comes out when it reopens",
                                  lambda d: {"state": "delivered", "sent_to_apns": False, "stream": True}))
for n in parked_frank:
    notifications.append(describe(n, "parked for frank (never connected): comes out when his stream opens",
                                  lambda d: {"state": "delivered", "sent_to_apns": False, "stream": True}))
notifications.append(describe(push1, "alice, bob, dave: production queued behind the paused apns-prod, alice's sandbox "
                              "one retrying after 503, dave's invalid_token (410 Unregistered)", push_expected))
notifications.append(describe(push2, "alice, with idempotency_key %s: production queued (paused), sandbox retrying" % idem_key,
                              push_expected))

devices = []
for d in load("db-devices.json"):
    listed = json.load(open(os.path.join(api, "devices-%s-%s.json" % (d["app"], d["user"]))))["devices"]
    shown = next(x for x in listed if x["token"] == d["token"])
    devices.append({"app": d["app"], "user": d["user"], "token": d["token"], "transport": d["transport"],
                    "environment": d["environment"], "invalidated_at_ms": d["invalidated_at"],
                    "invalidated_at": shown["invalidated_at"], "invalidation_reason": d["invalidation_reason"],
                    "created_at": shown["created_at"], "updated_at": shown["updated_at"]})
assert any(d["invalidated_at_ms"] == int(dead_ts) for d in devices)

manifest = {
    "made_by": "scripts/make-upgrade-fixtures.sh %s" % commit,
    "herald_commit": commit,
    "driver": driver,
    "schema_version": int(version),
    "database": "herald.db" if driver == "sqlite" else "herald.sql",
    "config": "config.json",
    "environment": {
        "HERALD_API_KEY": "any API key (the config's only key, scopes send, devices, admin)",
        "LIVE_CLIENT_SECRET": "any secret of at least 32 bytes (client tokens are minted at test time)",
        "APNS_PROD_ENDPOINT": "https://host:port of the APNs for apns-prod (production)",
        "APNS_SANDBOX_ENDPOINT": "https://host:port of the APNs for apns-sandbox (sandbox)",
        "HERALD_PG_URL": "postgresql only: the database the dump was restored into",
        "files": "certs/ca.pem and certs/AuthKey_ABC123DEFG.p8 (scripts/make-test-certs.sh; key ABC123DEFG, team DEF123GHIJ)",
    },
    "retry_due_at_ms": max([d["next_attempt_at"] or 0 for d in db_deliveries if d["state"] == "queued" and not d["parked"]]),
    "devices": devices,
    "notifications": notifications,
    "idempotency": [{"app": "com.example.app", "key": idem_key, "notification": push2}],
    "inbox": [{"app": r["app"], "user": r["user"], "seq": r["seq"], "device": r["device"], "notification": r["notification"],
               "created_at": r["created_at"]} for r in load("db-inbox.json")],
    "inbox_sequences": load("db-inbox-sequences.json"),
    "rows": {"notifications": load("db-notifications.json"), "deliveries": db_deliveries},
}
json.dump(manifest, open(os.path.join(dest, "manifest.json"), "w"), indent=2, sort_keys=False)
open(os.path.join(dest, "manifest.json"), "a").write("\n")
PY
  echo "wrote $dest" >&2
  rm -rf "$WORK/api-$DRIVER" "$WORK"/*.jsonl "$WORK"/*.out "$WORK"/*.err "$WORK"/db-*.json "$WORK/erin.sse"
}

for driver in $DRIVERS; do
  case "$driver" in sqlite|postgresql) generate "$driver";; *) fail "unknown driver $driver (sqlite, postgresql)";; esac
done
