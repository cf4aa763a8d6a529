#!/usr/bin/env bash
# Installs what Herald needs to build, test and run on Debian/Ubuntu. Idempotent; silent when
# everything is already there. Called by `make run`, `make test` and `make bench`; with
# --with-synapse (`make test`) also Synapse from PyPI for the Matrix gateway's end-to-end test;
# with --with-chromium (`make test`) also Debian's headless Chromium and chromedriver for the demo page test.
set -euo pipefail

packages=(
  pkg-config ca-certificates openssl curl
  libcurl4-openssl-dev libssl-dev libsqlite3-dev   # transports, crypto, store
  libmicrohttpd-dev libnghttp2-dev                 # daemon HTTP API, HTTP/2 simulator
  libpq-dev postgresql                             # PostgreSQL storage driver; the server its tests start
  nghttp2-client nghttp2-server                    # h2load and nghttpd: reference tools for tests and benchmarks
  wrk                                              # HTTP/1.1 load generator for `make bench` (the daemon API)
  strace                                           # holds the daemon inside a write in the kill -9 test
  python3 python3-venv                             # Synapse (from PyPI) for the Matrix gateway's end-to-end test
  python3-cryptography                             # cross-checks the Web Push encryption test
)

with_synapse=0
for arg in "$@"; do
  case "$arg" in
    --with-synapse) with_synapse=1 ;;
    --with-chromium) packages+=(chromium chromium-driver) ;;   # the browser demo page's test (about 400 MB installed)
    *) echo "bootstrap: unknown option $arg (known: --with-synapse, --with-chromium)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ! command -v swift >/dev/null 2>&1; then
  echo "bootstrap: the Swift toolchain (6.0 or later) is not on PATH; install it from https://www.swift.org/install/linux/" >&2
  exit 1
fi

synapse() { if [ "$with_synapse" = 1 ]; then "$(dirname "$0")/synapse-venv.sh"; fi; }
# The Web Push encryption test cross-checks Herald's RFC 8291 bodies with Python's `cryptography`
# (whichever python3 is on PATH; Debian's python3-cryptography covers /usr/bin/python3).
python_crypto() {
  if [ "$with_synapse" = 1 ] && command -v python3 >/dev/null 2>&1 && ! python3 -c "import cryptography" 2>/dev/null; then
    echo "bootstrap: installing the cryptography package for $(command -v python3)" >&2
    python3 -m pip install -q cryptography >&2
  fi
}
[ ${#missing[@]} -eq 0 ] && { synapse; python_crypto; exit 0; }

if ! command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: missing packages (${missing[*]}) and no apt-get to install them; install them by hand" >&2
  exit 1
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "bootstrap: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "bootstrap: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done" >&2
synapse
python_crypto
