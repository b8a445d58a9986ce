#!/usr/bin/env bash
# Admission under a burst: one `serve` with the supplier simulator at its
# documented limit (8 requests per second, 30 profiles per order), then
# `loadtest --admission`: 100 partners order as fast as 64 connections allow
# for DURATION seconds (default 30), several times what the supplier can
# deliver. The verdict requires refusals at admission with Retry-After and at
# once, every accepted order delivered in full, equal shares (±20%), and the
# usual money invariants (docs/admission.md; docs/benchmarks.md).
#
#   scripts/admission_loadtest.sh target/debug/esim-reseller [DATABASE_URL]
#
# Without DATABASE_URL a fresh SQLite file in a temporary folder is used.
# ROUTE=esim_access,airalo adds the simulated Airalo at 8 requests/s (Airalo
# documents no production limit; this is the service's own gate for it):
# then both suppliers must have placed units, and admission's capacity is
# the sum of both.
set -euo pipefail

bin="${1:?usage: scripts/admission_loadtest.sh <path to esim-reseller> [database url]}"
work="$(mktemp -d "${TMPDIR:-/tmp}/esim-admission.XXXXXX")"
database_url="${2:-sqlite://$work/admission.db?mode=rwc}"
duration="${DURATION:-30}"
route="${ROUTE:-esim_access}"
public=127.0.0.1:18780 operator=127.0.0.1:18781

ESIM__DATABASE__URL="$database_url" ESIM__SUPPLIERS__ROUTE="$route" \
ESIM__SIMULATORS__AIRALO_RATE_LIMIT_PER_MINUTE=480 \
ESIM__HTTP__PUBLIC_ADDR=$public ESIM__HTTP__OPERATOR_ADDR=$operator \
ESIM__SIMULATORS__ADDR=127.0.0.1:18790 ESIM__LOG__LEVEL=warn \
ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT=100000000 ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT=100000000 \
  "$bin" serve > "$work/serve.log" 2>&1 &
server=$!
stop() { kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null || true; }
trap stop EXIT

for _ in $(seq 1 150); do
  curl -sf "http://$public/partner/v1/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.2
done

status=0
"$bin" loadtest --public-url "http://$public" --operator-url "http://$operator" \
  --partners 100 --duration "$duration" --concurrency 64 --admission | tee "$work/loadtest.out" \
  || status=$?
auth="Authorization: Bearer dev-operator-token-change-me"
curl -sf "http://$operator/operator/v1/admission" -H "$auth" | head -c 400 || true
echo
curl -sf "http://$operator/operator/v1/suppliers" -H "$auth" > "$work/suppliers.json" || true
if [ "$status" -eq 0 ] && [ "$route" != "${route#*,}" ]; then
  # Every supplier of the route carried a fair part of the burst.
  python3 - "$work/suppliers.json" "$work/loadtest.out" <<'PY' || status=1
import json, re, sys
view = json.load(open(sys.argv[1]))
settled = float(re.search(r"settled/s\s+([0-9.]+)", open(sys.argv[2]).read()).group(1))
print("settled units/s with two suppliers:", settled)
# One simulated supplier at 8 requests/s settles about 115 units/s; two
# must settle well past it (measured: about 270).
if settled < 170:
    sys.exit(f"two suppliers settled {settled} units/s: not about the sum of both capacities")
placed = {s["name"]: s["units_placed"] for s in view["data"] if s["in_route"]}
total = sum(placed.values())
print("units placed per supplier:", placed)
low = [name for name, units in placed.items() if units < total / (3 * len(placed))]
if total == 0 or low:
    sys.exit(f"a supplier of the route carried too little of the burst: {placed}")
PY
fi
stop
trap - EXIT
if [ "$status" -ne 0 ]; then
  echo "admission load test FAILED; server log in $work/serve.log" >&2
  exit "$status"
fi
rm -rf "$work"
