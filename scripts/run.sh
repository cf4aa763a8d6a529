#!/usr/bin/env bash
# `make run`: start Herald with the sample configuration. Generates an API key on first run
# (kept in var/api-key) unless HERALD_API_KEY is set.
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
"$herald" check --config "$config"
echo "run: dry-run send through the log transport:" >&2
"$herald" devices add --config "$config" --app com.example.app --user demo-user \
  --token 0000000000000000000000000000000000000000000000000000000000000001 >&2
"$herald" send --config "$config" --app com.example.app --user demo-user --title "Herald" --body "It works"
echo "run: deliveries are appended to var/deliveries.jsonl" >&2
