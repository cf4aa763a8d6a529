#!/usr/bin/env bash
# `make run`: start the Herald daemon on config.json (HTTP API on api.listen, default
# 127.0.0.1:8080). Generates an API key on first run (kept in var/api-key) unless
# HERALD_API_KEY is set. Stop with Ctrl-C (SIGINT) or SIGTERM; SIGHUP reloads the config.
set -euo pipefail
config="${1:-config.json}"
herald=.build/release/herald
mkdir -p var
if [ -z "${HERALD_API_KEY:-}" ]; then
  if [ ! -s var/api-key ]; then
    openssl rand -hex 24 > var/api-key
    chmod 600 var/api-key
  fi
  HERALD_API_KEY="$(cat var/api-key)"
  export HERALD_API_KEY
  echo "run: API key in var/api-key (export HERALD_API_KEY to choose your own)" >&2
fi
"$herald" check --config "$config" --quiet
cat >&2 <<HINT
run: starting the daemon; in another terminal:
  KEY=\$(cat var/api-key)
  curl -s -H "Authorization: Bearer \$KEY" -H 'Content-Type: application/json' \\
       -d '{"app":"com.example.app","user":"demo-user","token":"0000000000000000000000000000000000000000000000000000000000000001"}' \\
       http://127.0.0.1:8080/v1/devices
  curl -s -H "Authorization: Bearer \$KEY" -H 'Content-Type: application/json' \\
       -d '{"app":"com.example.app","users":["demo-user"],"alert":{"title":"Herald","body":"It works"}}' \\
       http://127.0.0.1:8080/v1/notifications
  deliveries are appended to var/deliveries.jsonl (the "log" transport)
HINT
exec "$herald" serve --config "$config"
