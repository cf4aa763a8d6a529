#!/usr/bin/env bash
# `make run`: start Herald on config.json with a local APNs and a local Web Push service.
#
# The sample config sends through the `apns` transport (APNs HTTP/2 over TLS with token auth) to
# Herald's own APNs simulator on 127.0.0.1:2197, which this script starts with throwaway
# credentials in var/certs; what arrives is recorded in var/apns-received.jsonl. For Apple's
# real servers, remove `endpoint` and `caFile` from the transport and point `keyFile`, `keyId`
# and `teamId` at your key (docs/configuration.md).
#
# Generates an API key on first run (kept in var/api-key) unless HERALD_API_KEY is set, and the
# client-token secret of the sample app's streams (var/client-secret) unless HERALD_CLIENT_SECRET is.
# Stop with Ctrl-C (SIGINT) or SIGTERM; SIGHUP to the daemon reloads the config.
set -euo pipefail
config="${1:-config.json}"
herald=.build/release/herald
mkdir -p var
scripts/make-test-certs.sh var/certs

# A secret from the environment, else from var/<file> (made on first run, mode 600).
# Appends to `exports` the line another terminal needs to use the same secret.
exports=""
secret() {
  local name=$1 file=var/$2 bytes=$3
  if [ -z "${!name:-}" ]; then
    [ -s "$file" ] || { openssl rand -hex "$bytes" > "$file"; chmod 600 "$file"; }
    export "$name=$(cat "$file")"
    echo "run: $name in $file (export $name to choose your own)" >&2
    exports+=" $name=\$(cat $file)"
  else
    exports+=" $name=<the value you exported>"
  fi
}
secret HERALD_API_KEY api-key 24
# Signs client tokens for the sample app's live streams (GET /v1/stream).
secret HERALD_CLIENT_SECRET client-secret 32
# The China vendors' app secrets, shared by the sample's vendor routes and their simulators.
secret HMS_APP_SECRET hms-app-secret 16
secret XIAOMI_APP_SECRET xiaomi-app-secret 16
secret OPPO_MASTER_SECRET oppo-master-secret 16
secret VIVO_APP_SECRET vivo-app-secret 16

# The local push services, each recording what it receives under var/: Herald's APNs HTTP/2
# simulator (verifying the test key's JWTs), its FCM simulator (Google's token endpoint and FCM
# v1, accepting the service account make-test-certs.sh wrote to var/certs) and its Web Push simulator (subscriptions made as
# browsers make them, in var/subscriptions.jsonl; what arrives is decrypted).
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT
simulator() {
  local name=$1 log=var/$2.log; shift 2
  "$herald" simulate "$@" > "$log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 50); do
    grep -q "listening on" "$log" 2>/dev/null && return 0
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then
      echo "run: the $name simulator did not start (port taken?):" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
}
simulator APNs simulator apns-http2 --port 2197 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
  --auth-key-pub ABC123DEFG=var/certs/AuthKey_ABC123DEFG.pub.pem --team DEF123GHIJ \
  --record var/apns-received.jsonl
simulator FCM fcm-simulator fcm --port 2199 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
  --service-account var/certs/fcm-service-account.json --record var/fcm-received.jsonl
# Huawei, Xiaomi, OPPO and vivo push, each checking the sample routes' credentials (app id
# 10086000, app key sim-app-key, package com.example.app, the secrets above).
simulator HMS hms-simulator hms --port 2201 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
  --app-id 10086000 --app-secret-env HMS_APP_SECRET --record var/hms-received.jsonl
simulator Xiaomi xiaomi-simulator xiaomi --port 2202 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
  --package com.example.app --app-secret-env XIAOMI_APP_SECRET --record var/xiaomi-received.jsonl
simulator OPPO oppo-simulator oppo --port 2203 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
  --app-key sim-app-key --master-secret-env OPPO_MASTER_SECRET --record var/oppo-received.jsonl
simulator vivo vivo-simulator vivo --port 2204 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
  --app-id 10086000 --app-key sim-app-key --app-secret-env VIVO_APP_SECRET --record var/vivo-received.jsonl
simulator "Web Push" webpush-simulator webpush --port 2198 --tls-cert var/certs/server.pem --tls-key var/certs/server.key \
  --seed herald-sample --subscriptions-out var/subscriptions.jsonl --count 3 --record var/webpush-received.jsonl

"$herald" check --config "$config" --quiet
cat >&2 <<HINT
run: APNs simulator on 127.0.0.1:2197 (records to var/apns-received.jsonl), FCM simulator on
     127.0.0.1:2199 (records to var/fcm-received.jsonl), Web Push simulator on
     127.0.0.1:2198 (subscriptions in var/subscriptions.jsonl, records to var/webpush-received.jsonl),
     Huawei, Xiaomi, OPPO and vivo simulators on 127.0.0.1:2201-2204 (records to var/hms-received.jsonl,
     var/xiaomi-received.jsonl, var/oppo-received.jsonl, var/vivo-received.jsonl); starting the daemon
     (API on 127.0.0.1:8080, Matrix push gateway on 127.0.0.1:8090).
In another terminal, in this folder; for the CLI (herald check, devices, send, client-token, ...),
which reads config.json and so needs both secrets:
  export$exports
  export PATH="\$PWD/.build/release:\$PATH"
Then, over the API:
  KEY=\$(cat var/api-key)
  curl -s -H "Authorization: Bearer \$KEY" -H 'Content-Type: application/json' \\
       -d '{"app":"com.example.app","user":"demo-user","token":"0000000000000000000000000000000000000000000000000000000000000001"}' \\
       http://127.0.0.1:8080/v1/devices
  curl -s -H "Authorization: Bearer \$KEY" -H 'Content-Type: application/json' \\
       -d '{"app":"com.example.app","users":["demo-user"],"alert":{"title":"Herald","body":"It works"}}' \\
       http://127.0.0.1:8080/v1/notifications
  tail -1 var/apns-received.jsonl
HINT
"$herald" serve --config "$config"
