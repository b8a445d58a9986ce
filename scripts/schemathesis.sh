#!/usr/bin/env bash
# Runs schemathesis (pinned, in a virtual environment) against a live `serve`
# with a live and a sandbox key: every check, every phase including the
# stateful one driven by the document's links.
#
#   scripts/schemathesis.sh [path/to/esim-reseller]
#
# Environment: ST_VENV (default /var/tmp/esim-st-venv), ST_MAX_EXAMPLES
# (default 60), ST_PORT_BASE (default 18580).
set -euo pipefail
cd "$(dirname "$0")/.."

ST_VERSION=4.32.5
bin="${1:-${CARGO_TARGET_DIR:-target}/debug/esim-reseller}"
venv="${ST_VENV:-/var/tmp/esim-st-venv}"
base="${ST_PORT_BASE:-18580}"
public="127.0.0.1:$base" operator="127.0.0.1:$((base + 1))" sims="127.0.0.1:$((base + 10))"

if [ "$("$venv/bin/st" --version 2>/dev/null)" != "st, version $ST_VERSION" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$ST_VERSION"
fi

work=$(mktemp -d)
cleanup() {
  [ -n "${server:-}" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# Limits lifted so the run exercises the API rather than the 429 (the rate
# limits have their own tests); the supplier answers at once.
ESIM__DATABASE__URL="sqlite://$work/st.db?mode=rwc" \
ESIM__HTTP__PUBLIC_ADDR="$public" ESIM__HTTP__OPERATOR_ADDR="$operator" \
ESIM__SIMULATORS__ADDR="$sims" ESIM__SIMULATORS__SUPPLIER_LATENCY_MS=0 \
ESIM__SUPPLIER__POLL_INTERVAL_MS=20 ESIM__LOG__LEVEL=warn ESIM__LOG__FORMAT=json \
ESIM__RATE_LIMIT__FAILED_AUTH_LIMIT=100000000 \
ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT=100000000 \
ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT=100000000 \
ESIM__RATE_LIMIT__BANDS__GOLD__CATALOGUE__LIMIT=100000000 \
ESIM__RATE_LIMIT__BANDS__SANDBOX__READ__LIMIT=100000000 \
ESIM__RATE_LIMIT__BANDS__SANDBOX__WRITE__LIMIT=100000000 \
ESIM__RATE_LIMIT__BANDS__SANDBOX__CATALOGUE__LIMIT=100000000 \
ESIM__OPERATOR__FOUR_EYES_CENTS=100000000000 \
  "$bin" serve >"$work/serve.log" 2>&1 &
server=$!

deadline=$((SECONDS + 60))
until curl -sf "http://$public/partner/v1/health" >/dev/null; do
  if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$server" 2>/dev/null; then
    echo "serve did not come up:"; cat "$work/serve.log"; exit 1
  fi
  sleep 0.2
done

admin() { "$bin" admin --operator-url "http://$operator" --token dev-operator-token-change-me "$@"; }
field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(d['$1']) if '$1' in d else sys.exit('unexpected answer: %s' % d)"; }
partner=$(admin partner create --name "Schemathesis" --tier gold --status live | field id)
live=$(admin key issue "$partner" --mode live --label st-live | field secret)
sandbox=$(admin key issue "$partner" --mode sandbox --label st-sandbox | field secret)
# The float is far above the four-eyes limit, lifted above for this run: a
# held movement would leave the live key without money.
admin money move "$partner" --kind adjustment --amount-cents 1000000000 \
  --description "schemathesis float" >"$work/move.json" || { cat "$work/move.json"; exit 1; }
grep -q '"object": "ledger_entry"' "$work/move.json" || { echo "the float was not credited:"; cat "$work/move.json"; exit 1; }
admin money sandbox-float "$partner" 1000000000 >"$work/float.json" || { cat "$work/float.json"; exit 1; }

status=0
for mode in live sandbox; do
  key=$live
  [ "$mode" = sandbox ] && key=$sandbox
  echo "==> schemathesis $ST_VERSION, $mode key"
  "$venv/bin/st" --config-file schemathesis.toml run "http://$public/partner/v1/openapi.json" \
    --url "http://$public/partner/v1" \
    --header "Authorization: Bearer $key" \
    --checks all \
    --phases examples,coverage,fuzzing,stateful \
    --max-examples "${ST_MAX_EXAMPLES:-60}" \
    --seed 20261122 \
    --continue-on-failure || status=$?
done

if grep -q '"level":"ERROR"\|panicked' "$work/serve.log"; then
  echo "the server logged errors:"; grep '"level":"ERROR"\|panicked' "$work/serve.log" | head -20
  status=1
fi
exit "$status"
