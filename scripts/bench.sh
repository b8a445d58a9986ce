#!/usr/bin/env bash
# Reruns the numbers in docs/benchmarks.md on this machine: a release build,
# then the service and the load generator on the same host, for SQLite and
# (when it answers) PostgreSQL, batch versus per-request commits, one hot
# partner and many partners, and read throughput. Prints one JSON line per run.
#
#   scripts/bench.sh            everything below
#   scripts/bench.sh orders     wrk and the naive loop side by side, per database
#   scripts/bench.sh profile    the same wrk load under perf: where the time goes
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/esim-bench}"
DURATION="${DURATION:-10}"
CONCURRENCY="${CONCURRENCY:-64}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432}"
cargo build --release -q
bin="$CARGO_TARGET_DIR/release/esim-reseller"
work=$(mktemp -d)
server=""
stop_server() { [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null; server=""; }
trap stop_server EXIT

lift="100000000"
start_server() { # start_server <database url> <commit mode> [VAR=value ...]
  local url="$1" mode="$2"; shift 2
  # The supplier's rate limit is lifted (simulator and our gate) unless the
  # caller sets it: these runs measure this service's own speed.
  # Later assignments win: the caller's come last.
  env ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT=0 ESIM__SUPPLIER__REQUESTS_PER_SECOND=0 \
    ESIM__DATABASE__URL="$url" ESIM__STORE__COMMIT_MODE="$mode" ESIM__LOG__LEVEL=warn \
    ESIM__HTTP__PUBLIC_ADDR=127.0.0.1:18580 ESIM__HTTP__OPERATOR_ADDR=127.0.0.1:18581 ESIM__SIMULATORS__ADDR=127.0.0.1:18590 \
    ESIM__SIMULATORS__SUPPLIER_LATENCY_MS=0 ESIM__SUPPLIER__POLL_INTERVAL_MS=20 ESIM__PROVISIONING__CONCURRENCY=256 \
    ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT=$lift ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT=$lift \
    ESIM__RATE_LIMIT__BANDS__GOLD__CATALOGUE__LIMIT=$lift ESIM__OPERATOR__FOUR_EYES_CENTS=100000000000 "$@" \
    "$bin" serve > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:18580/partner/v1/health >/dev/null && return 0; sleep 0.2; done
  echo "server did not start" >&2; cat "$work/serve.log" >&2; exit 1
}
rss_kib() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
load() { "$bin" loadtest --public-url http://127.0.0.1:18580 --operator-url http://127.0.0.1:18581 --json "$@"; }

databases=("sqlite://$work/bench-DB.db?mode=rwc")
if pg_isready -h 127.0.0.1 -q 2>/dev/null; then databases+=("$PG_URL/esim_bench_DB"); fi

# --- Side by side: an outside load generator (wrk) against the service, the
# naive one-transaction-per-order loop, and the project's own loadtest, in
# one run. Also the server's CPU per accepted order and GET /balance.
operator() { # operator <method> <path> [json]
  curl -sf -X "$1" "http://127.0.0.1:18581/operator/v1$2" -H "Authorization: Bearer dev-operator-token-change-me" \
    -H 'Content-Type: application/json' ${3:+-d "$3"}
}
funded_key() { # prints a live key's secret of a new gold partner with a large float
  local id
  id=$(operator POST /partners "{\"name\":\"wrk $RANDOM\",\"slug\":\"wrk-$RANDOM$RANDOM\",\"tier\":\"gold\",\"status\":\"live\"}" | jq -r .id)
  operator POST "/partners/$id/movements" '{"kind":"adjustment","amount_cents":1000000000,"description":"bench funding"}' >/dev/null
  operator POST "/partners/$id/keys" '{"mode":"live","label":"wrk"}' | jq -r .secret
}
cpu_ticks() { awk '{print $14+$15}' "/proc/$server/stat"; }
accepted_total() { curl -sf http://127.0.0.1:18581/metrics | awk '/^esim_orders_accepted_total/ {s+=$2} END {print s+0}'; }
settled_total() { curl -sf http://127.0.0.1:18581/metrics | awk '/^esim_orders_settled_total/ {s+=$2} END {print s+0}'; }
wait_settled() { # waits (up to 120 s) until every accepted order settled; prints the seconds waited
  local began=$SECONDS
  for _ in $(seq 1 600); do [ "$(settled_total)" = "$(accepted_total)" ] && break; sleep 0.2; done
  echo $((SECONDS - began))
}
orders_side_by_side() {
  cargo build --release -q --example naive_orders
  for database in "${databases[@]}"; do
    local tag="wrk-$RANDOM" url kind
    url="${database/DB/$tag}"; kind="${url%%:*}"
    if [[ "$url" == postgres* ]]; then psql "$PG_URL/postgres" -qc "CREATE DATABASE \"esim_bench_$tag\"" >/dev/null; fi
    start_server "$url" batch ESIM__PROVISIONING__CONCURRENCY=100000
    local key before after orders cpu settle
    key=$(funded_key)
    before=$(cpu_ticks)
    result=$(API_KEY="$key" RUN="$tag" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 | tail -1)
    settle=$(wait_settled)
    after=$(cpu_ticks); orders=$(accepted_total)
    cpu=$(( (after - before) * 10000000 / $(getconf CLK_TCK) / (orders > 0 ? orders : 1) / 10 ))
    echo "{\"database\":\"$kind\",\"shape\":\"one hot partner\",\"result\":$result,\"seconds_to_settle_after_the_run\":$settle,\"server_cpu_us_per_accepted_and_settled_order\":$cpu}"
    echo "{\"database\":\"$kind\",\"read\":\"/balance\",\"result\":$(API_KEY="$key" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/get.lua http://127.0.0.1:18580 | tail -1)}"
    stop_server
    if [[ "$url" == postgres* ]]; then psql "$PG_URL/postgres" -qc "DROP DATABASE \"esim_bench_$tag\" WITH (FORCE)" >/dev/null; fi
    local naive="${database/DB/naive-$tag}"
    if [[ "$naive" == postgres* ]]; then psql "$PG_URL/postgres" -qc "CREATE DATABASE \"esim_bench_naive-$tag\"" >/dev/null; fi
    "$CARGO_TARGET_DIR/release/examples/naive_orders" --url "$naive" --concurrency "$CONCURRENCY" --duration "$DURATION"
    if [[ "$naive" == postgres* ]]; then psql "$PG_URL/postgres" -qc "DROP DATABASE \"esim_bench_naive-$tag\" WITH (FORCE)" >/dev/null; fi
  done
}
# A profile of the server under the same wrk load (perf, call graphs):
# the share of samples per thread kind and the top symbols, per database.
profile_orders() {
  command -v perf >/dev/null || { echo "perf is not installed" >&2; return 1; }
  for database in "${databases[@]}"; do
    local tag="prof-$RANDOM" url kind
    url="${database/DB/$tag}"; kind="${url%%:*}"
    if [[ "$url" == postgres* ]]; then psql "$PG_URL/postgres" -qc "CREATE DATABASE \"esim_bench_$tag\"" >/dev/null; fi
    start_server "$url" batch ESIM__PROVISIONING__CONCURRENCY=100000
    local key; key=$(funded_key)
    perf record -F 499 -g -p "$server" -o "$work/perf-$kind.data" -- sleep "$DURATION" 2>/dev/null &
    local recorder=$!
    API_KEY="$key" RUN="$tag" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 | tail -1
    wait "$recorder" || true
    stop_server
    if [[ "$url" == postgres* ]]; then psql "$PG_URL/postgres" -qc "DROP DATABASE \"esim_bench_$tag\" WITH (FORCE)" >/dev/null; fi
    echo "== $kind: samples by thread"
    perf report -i "$work/perf-$kind.data" --no-children --sort comm --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -8 || true
    echo "== $kind: samples by shared object"
    perf report -i "$work/perf-$kind.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -8 || true
    echo "== $kind: top symbols"
    perf report -i "$work/perf-$kind.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -25 || true
  done
}
if [ "${1:-all}" = orders ]; then orders_side_by_side; exit 0; fi
if [ "${1:-all}" = profile ]; then profile_orders; exit 0; fi
orders_side_by_side

for database in "${databases[@]}"; do
  for mode in batch per_request; do
    for shape in hot many; do
      tag="$mode-$shape-$RANDOM"
      url="${database/DB/$tag}"
      if [[ "$url" == postgres* ]]; then psql "$PG_URL/postgres" -qc "CREATE DATABASE \"esim_bench_$tag\"" >/dev/null; fi
      start_server "$url" "$mode"
      if [ "$shape" = hot ]; then args=(--partners 1 --hot); else args=(--partners 100); fi
      result=$(load "${args[@]}" --duration "$DURATION" --concurrency "$CONCURRENCY")
      echo "{\"database\":\"${url%%:*}\",\"commit_mode\":\"$mode\",\"shape\":\"$shape\",\"rss_kib_after\":$(rss_kib),\"result\":$result}"
      if [ "$mode" = batch ] && [ "$shape" = hot ]; then
        echo "{\"database\":\"${url%%:*}\",\"read\":\"/balance\",\"result\":$(load --partners 1 --hot --read-path /balance --duration "$DURATION" --concurrency "$CONCURRENCY")}"
        echo "{\"database\":\"${url%%:*}\",\"read\":\"/plans\",\"result\":$(load --partners 1 --hot --read-path '/plans?country=fr' --duration "$DURATION" --concurrency "$CONCURRENCY")}"
      fi
      stop_server
      if [[ "$url" == postgres* ]]; then psql "$PG_URL/postgres" -qc "DROP DATABASE \"esim_bench_$tag\" WITH (FORCE)" >/dev/null; fi
    done
  done
done

# The supplier at its documented rate limit: the simulator enforces 8
# requests/s as eSIM Access documents, our gate keeps to it, and profiles take
# SUPPLIER_LATENCY_MS to allocate. An open loop of SUPPLIER_RATE orders/s from
# 20 partners; then what the supplier saw: requests per settled unit (goal
# <= 0.2 under load), requests refused for the rate (goal 0), its busiest
# second, and no unit refunded.
SUPPLIER_RATE="${SUPPLIER_RATE:-80}"
SUPPLIER_LATENCY_MS="${SUPPLIER_LATENCY_MS:-1000}"
start_server "sqlite://$work/supplier.db?mode=rwc" batch \
  ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT=8 ESIM__SUPPLIER__REQUESTS_PER_SECOND=8 \
  ESIM__SIMULATORS__SUPPLIER_LATENCY_MS="$SUPPLIER_LATENCY_MS" ESIM__SUPPLIER__POLL_INTERVAL_MS=500
result=$(load --partners 20 --rate "$SUPPLIER_RATE" --duration "$DURATION" --concurrency 64)
stats=$(curl -sf http://127.0.0.1:18590/sim/supplier/stats)
echo "{\"supplier\":\"rate-limited 8/s, latency ${SUPPLIER_LATENCY_MS} ms, ${SUPPLIER_RATE} orders/s offered\",\"result\":$result,\"supplier_stats\":$stats,\"requests_per_settled_unit\":$(jq -n --argjson s "$stats" '($s.requests / ([$s.profiles,1]|max)) * 1000 | round / 1000')}"
stop_server

# Memory: idle, then after touching many partners (one /me each).
start_server "sqlite://$work/mem.db?mode=rwc" batch
echo "{\"memory\":\"idle\",\"rss_kib\":$(rss_kib)}"
PARTNERS="${PARTNERS:-2000}"
load --partners "$PARTNERS" --count "$PARTNERS" --concurrency 32 --funding-cents 1000 >/dev/null || true
echo "{\"memory\":\"after $PARTNERS partners with an account actor each\",\"rss_kib\":$(rss_kib)}"
stop_server
