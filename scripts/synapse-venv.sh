#!/usr/bin/env bash
# Installs Synapse, the Matrix homeserver, from PyPI into var/synapse/venv: the Matrix gateway's
# end-to-end test (Tests/HeraldServerTests/MatrixSynapseTests.swift) starts it on loopback.
# Idempotent; silent when the pinned version is there. Called by scripts/bootstrap.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.163.2
venv=var/synapse/venv

installed() {
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$version" <<'PY' 2>/dev/null
import importlib.metadata, sys
sys.exit(0 if importlib.metadata.version("matrix-synapse") == sys.argv[1] else 1)
PY
}
installed && exit 0

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  echo "synapse-venv: python3 with the venv module is needed (apt-get install python3-venv)" >&2
  exit 1
fi
echo "bootstrap: installing matrix-synapse $version into $venv (for the Matrix gateway test)" >&2
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check "matrix-synapse==$version" >&2
installed || { echo "synapse-venv: matrix-synapse $version did not install into $venv" >&2; exit 1; }
