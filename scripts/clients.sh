#!/usr/bin/env bash
# Proves the published contract (openapi.json) the way a partner meets it:
# generates the clients a partner would generate from it, type-checks a partner
# flow written against each, and drives that flow through each client against
# a fresh server.
#
#   TypeScript: openapi-typescript + openapi-fetch (clients/typescript,
#               pinned in package.json/package-lock.json), `tsc --noEmit`
#               under strict, then clients/typescript/flow.ts.
#   Python:     openapi-python-client (clients/python/requirements.txt),
#               the generated package pip-installed, `mypy --strict` on
#               clients/python/flow.py, then the flow.
#
# The flow: health; /me and /balance; plans of a country and a quote; an order
# with an Idempotency-Key and metadata read back typed, its replay, polling
# until it settles (honouring poll_after_ms), the status checked against the
# generated union/enum; an eSIM's install payload and usage; the ledger's
# purchase row; a deposit invoice read back and paid through the payment
# simulator until credited; typed refusals (plan.not_found,
# balance.insufficient, forbidden) branched on the generated error-code type.
#
#   scripts/clients.sh
#
# Environment:
#   ESIM_BIN           the server binary (default
#                      $CARGO_TARGET_DIR/debug/esim-reseller, CARGO_TARGET_DIR
#                      defaulting to /var/tmp/esim-reseller-target)
#   CLIENTS_VENV_ROOT  where the Python venv is cached, keyed by the hash of
#                      requirements.txt (default /var/tmp)
#   CLIENTS_DEADLINE_S how long the server may take to come up (default 60)
#   ESIM_FLOW_DEADLINE_MS  how long a flow waits for provisioning or a credit
#                      (default 60000)
#   CLIENTS_KEEP=1     keep the work folder (server log, generated clients)
#
# Exits non-zero if generation, type-checking or either flow fails; the last
# line says how many of the two clients passed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${ESIM_BIN:-${CARGO_TARGET_DIR:-/var/tmp/esim-reseller-target}/debug/esim-reseller}"
venv_root="${CLIENTS_VENV_ROOT:-/var/tmp}"
up_deadline="${CLIENTS_DEADLINE_S:-60}"
flow_deadline_ms="${ESIM_FLOW_DEADLINE_MS:-60000}"
keep="${CLIENTS_KEEP:-0}"

# The server reads ESIM__* from the environment: start from none of the caller's.
while IFS= read -r name; do unset "$name"; done < <(compgen -e | grep -E '^ESIM_' || true)

say() { printf '== %s\n' "$*"; }
die() { printf 'clients.sh: %s\n' "$*" >&2; exit 1; }

[ -x "$bin" ] || die "no server binary at $bin (set ESIM_BIN, or build it: cargo build)"
for tool in node npm python3 curl; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

work="$(mktemp -d "${TMPDIR:-/tmp}/esim-clients.XXXXXX")"
server=""
status=1
cleanup() {
  if [ -n "$server" ] && kill -0 "$server" 2>/dev/null; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ] || [ "$keep" = 1 ]; then
    echo "clients.sh: work folder kept: $work (server log: $work/serve.log)" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- a fresh server on free ports ---------------------------------------------
operator_token="clients-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
say "starting $bin on free ports, database in $work"
(
  cd "$work"
  exec env \
    ESIM__DATABASE__URL="sqlite://$work/clients.db?mode=rwc" \
    ESIM__HTTP__PUBLIC_ADDR=127.0.0.1:0 \
    ESIM__HTTP__OPERATOR_ADDR=127.0.0.1:0 \
    ESIM__SIMULATORS__ENABLED=true \
    ESIM__SIMULATORS__ADDR=127.0.0.1:0 \
    ESIM__OPERATOR__TOKEN="$operator_token" \
    ESIM__LOG__FORMAT=json \
    ESIM__LOG__LEVEL=info \
    "$bin" serve
) >"$work/serve.log" 2>&1 &
server=$!

# --- the clients, generated while the server starts ----------------------------
# Each step's outcome: "ok" or a reason; a failed step fails its client only,
# so one run reports both clients.
ts_result="ok"
py_result="ok"

say "typescript: npm ci (pinned by package-lock.json), generate, tsc --noEmit (strict)"
ts_dir="$root/clients/typescript"
lock_hash="$(sha256sum "$ts_dir/package-lock.json" | cut -c1-16)"
if [ "$(cat "$ts_dir/node_modules/.clients-lock-hash" 2>/dev/null)" != "$lock_hash" ]; then
  (cd "$ts_dir" && npm ci --no-audit --no-fund --loglevel=error) >"$work/npm-ci.log" 2>&1 \
    && echo "$lock_hash" >"$ts_dir/node_modules/.clients-lock-hash" \
    || { cat "$work/npm-ci.log" >&2; ts_result="npm ci failed"; }
fi
if [ "$ts_result" = ok ]; then
  rm -rf "$ts_dir/generated"
  (cd "$ts_dir" && ./node_modules/.bin/openapi-typescript ../../openapi.json -o generated/schema.d.ts) \
    >"$work/openapi-typescript.log" 2>&1 \
    || { cat "$work/openapi-typescript.log" >&2; ts_result="openapi-typescript failed"; }
  grep -iE 'warn|error' "$work/openapi-typescript.log" >&2 || true
fi
if [ "$ts_result" = ok ]; then
  if (cd "$ts_dir" && ./node_modules/.bin/tsc --noEmit -p .) >"$work/tsc.log" 2>&1; then
    echo "   tsc: no errors"
  else
    echo "   tsc found errors: flow.ts does not compile against openapi.json" >&2
    sed 's/^/   /' "$work/tsc.log" >&2
    ts_result="tsc --noEmit failed"
  fi
fi

say "python: venv (requirements.txt), openapi-python-client generate, pip install, mypy --strict"
py_dir="$root/clients/python"
req_hash="$(sha256sum "$py_dir/requirements.txt" | cut -c1-16)"
venv="$venv_root/esim-clients-venv-$req_hash"
if [ ! -f "$venv/.complete" ]; then
  rm -rf "$venv"
  if python3 -m venv "$venv" >"$work/venv.log" 2>&1 \
    && "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$py_dir/requirements.txt" >>"$work/venv.log" 2>&1; then
    touch "$venv/.complete"
  else
    cat "$work/venv.log" >&2
    py_result="venv setup failed"
  fi
fi
if [ "$py_result" = ok ]; then
  cat >"$work/opc-config.yaml" <<'EOF'
project_name_override: esim-partner-client
package_name_override: esim_partner_client
EOF
  # The generator's post hooks run ruff from PATH: the venv's.
  if PATH="$venv/bin:$PATH" "$venv/bin/openapi-python-client" generate \
      --path "$root/openapi.json" --output-path "$work/python-client" --meta setup \
      --config "$work/opc-config.yaml" >"$work/openapi-python-client.log" 2>&1; then
    # Anything beyond its "Generating ..." line is a warning about the document.
    if grep -v -E '^Generating ' "$work/openapi-python-client.log" | grep -q .; then
      echo "   openapi-python-client said:" >&2
      sed 's/^/   /' "$work/openapi-python-client.log" >&2
    fi
  else
    cat "$work/openapi-python-client.log" >&2
    py_result="openapi-python-client generate failed"
  fi
fi
if [ "$py_result" = ok ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --no-build-isolation \
      --force-reinstall "$work/python-client" >"$work/pip-client.log" 2>&1 \
    || { cat "$work/pip-client.log" >&2; py_result="pip install of the generated client failed"; }
fi
if [ "$py_result" = ok ]; then
  if (cd "$work" && "$venv/bin/mypy" --strict --cache-dir "$venv/.mypy_cache" "$py_dir/flow.py") \
      >"$work/mypy.log" 2>&1; then
    echo "   mypy: $(tail -n1 "$work/mypy.log")"
  else
    echo "   mypy --strict found errors in flow.py against the generated client" >&2
    sed 's/^/   /' "$work/mypy.log" >&2
    py_result="mypy --strict failed"
  fi
fi

# --- wait for the server ---------------------------------------------------------
listener_addr() {
  python3 - "$work/serve.log" "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
    try:
        record = json.loads(line)
    except ValueError:
        continue
    if record.get("message") == "listening" and record.get("listener") == sys.argv[2]:
        print(record["addr"])
        break
EOF
}
say "waiting for the server (deadline ${up_deadline}s)"
deadline=$((SECONDS + up_deadline))
public="" operator="" sims=""
while :; do
  kill -0 "$server" 2>/dev/null || { cat "$work/serve.log" >&2; die "the server exited while starting"; }
  [ -n "$public" ] || public="$(listener_addr public)"
  [ -n "$operator" ] || operator="$(listener_addr operator)"
  [ -n "$sims" ] || sims="$(listener_addr simulators)"
  if [ -n "$public" ] && [ -n "$operator" ] && [ -n "$sims" ] \
    && curl -sf --max-time 2 "http://$public/partner/v1/health" >/dev/null; then
    break
  fi
  [ "$SECONDS" -lt "$deadline" ] || { tail -n 50 "$work/serve.log" >&2; die "no healthy server within ${up_deadline}s"; }
  sleep 0.2
done
echo "   public $public, operator $operator, simulators $sims"

# --- a live partner with a live and a sandbox key, funded ---------------------------
admin() { "$bin" admin --operator-url "http://$operator" --token "$operator_token" "$@"; }
field() {
  python3 -c 'import json, sys
answer = json.load(sys.stdin)
if sys.argv[1] not in answer:
    sys.exit("unexpected answer: %s" % answer)
print(answer[sys.argv[1]])' "$1"
}
say "creating a live gold partner, its keys and its opening float"
partner="$(admin partner create --name "Client Flow Travel" --tier gold --status live | field id)"
live_key="$(admin key issue "$partner" --mode live --label clients-live | field secret)"
sandbox_key="$(admin key issue "$partner" --mode sandbox --label clients-sandbox | field secret)"
admin money move "$partner" --kind adjustment --amount-cents 50000 --description "opening float" >/dev/null
echo "   partner $partner, live key ...${live_key: -4}, sandbox key ...${sandbox_key: -4}, 50000 cents"

export ESIM_BASE_URL="http://$public/partner/v1"
export ESIM_LIVE_KEY="$live_key"
export ESIM_SANDBOX_KEY="$sandbox_key"
export ESIM_SIM_URL="http://$sims"
export ESIM_FLOW_DEADLINE_MS="$flow_deadline_ms"

# --- the flows ----------------------------------------------------------------------
if [ "$ts_result" = ok ]; then
  say "typescript flow (openapi-fetch)"
  (cd "$ts_dir" && ./node_modules/.bin/tsx flow.ts) || ts_result="flow failed"
else
  # The flow still runs when only the type check failed, so a run tells
  # whether the server honours the contract even while the document is wrong.
  if [ "$ts_result" = "tsc --noEmit failed" ]; then
    say "typescript flow (openapi-fetch), run although it does not type-check"
    (cd "$ts_dir" && ./node_modules/.bin/tsx flow.ts) || ts_result="tsc --noEmit failed; flow failed"
  fi
fi
if [ "$py_result" = ok ] || [ "$py_result" = "mypy --strict failed" ]; then
  say "python flow (openapi-python-client)"
  if ! (cd "$work" && "$venv/bin/python" "$py_dir/flow.py"); then
    if [ "$py_result" = ok ]; then py_result="flow failed"; else py_result="$py_result; flow failed"; fi
  fi
fi

# --- verdict ------------------------------------------------------------------------
passed=0 failed=0
for pair in "typescript:$ts_result" "python:$py_result"; do
  name="${pair%%:*}" result="${pair#*:}"
  if [ "$result" = ok ]; then
    passed=$((passed + 1)); echo "   $name client: passed"
  else
    failed=$((failed + 1)); echo "   $name client: FAILED ($result)"
  fi
done
echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && status=0
exit "$status"
