#!/usr/bin/env bash
# Validates the Kubernetes manifests under deploy/kubernetes offline
# (scripts/validate-manifests.py says what is checked): installs PyPI's
# kubernetes-validate, which bundles the Kubernetes JSON schemas, into a
# venv the first time (target/manifests-venv, or $PRESSURE_MANIFESTS_VENV)
# and reuses it after. PRESSURE_BIN: a `pressure` binary to run
# `check-config` on the gateway's config (.ci/run passes the test build's).
set -euo pipefail
cd "$(dirname "$0")/.."

KUBERNETES_VALIDATE_VERSION=1.37.0
venv=${PRESSURE_MANIFESTS_VENV:-${CARGO_TARGET_DIR:-target}/manifests-venv}
if ! "$venv/bin/python" -c "import kubernetes_validate, sys; sys.exit(kubernetes_validate.version.__version__ != '$KUBERNETES_VALIDATE_VERSION')" 2>/dev/null; then
  echo "validate-manifests: installing kubernetes-validate $KUBERNETES_VALIDATE_VERSION into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >&2
fi
exec "$venv/bin/python" scripts/validate-manifests.py
