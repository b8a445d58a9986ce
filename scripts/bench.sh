#!/usr/bin/env bash
# Reruns the numbers in docs/benchmarks.md on this machine: a release build,
# then the service and the load generator on the same host, for SQLite and
# (when it answers) PostgreSQL, batch versus per-request commits, one hot
# partner and many partners, and read throughput. Prints one JSON line per run.
#
#   scripts/bench.sh            everything below
#   scripts/bench.sh orders     wrk with 1, 100 and 1000 partners, each beside the
#                               naive loop with as many, per database, against the service's
#                               default settings (only the limits lifted), with the
#                               simulators in their own process (`simulate`);
#                               after each drive settles, the money is checked in
#                               place (`verify`)
#   scripts/bench.sh profile    the same load (PROFILE_PARTNERS partners, 100) under
#                               perf: where the time goes (CALL_GRAPH=dwarf for
#                               whole call stacks; PROFILE_ALL=1 records every
#                               process, the database and the idle machine too)
#   scripts/bench.sh instructions
#                               the server under valgrind's callgrind, SQLite:
#                               instructions per GET /balance and per accepted and
#                               settled order (INSTRUCTION_PARTNERS partners, 1),
#                               which (unlike seconds) repeat from run to run;
#                               CALLGRIND_OUT keeps the files
#   scripts/bench.sh statements PostgreSQL's own time per order, statement by
#                               statement (pg_stat_statements, which the server at
#                               PG_URL must preload), with 1 and 100 partners
#   scripts/bench.sh messages   PostgreSQL's messages an accepted order, counted by
#                               strace: all, sqlx's pings, BEGIN/COMMIT (1 and 100
#                               partners)
#   scripts/bench.sh settling   orders asked for faster than they settle, for long
#                               (SETTLING_QUANTITY units an order, 5; SETTLING_DURATION
#                               seconds, 30; SETTLING_PARTNERS, 1), per database:
#                               every order's wait from acceptance to settlement, those
#                               past the spec's 92 s, refunds, refusals at acceptance
#   scripts/bench.sh pace       a supplier that takes fewer calls than the gate was
#                               told (nothing, its limit, twice it): how long orders
#                               take to settle, its refusals for the rate, the pace
#                               learnt from them
#   scripts/bench.sh pace-minute the same against a supplier whose limit is a
#                               minute's (Airalo's simulator, PACE_MINUTE_LIMIT a
#                               minute, 120): the gate told nothing
#
# PARTNER_COUNTS="1 100" and DATABASES=sqlite (or postgres) run a part of it.
# Many partners' requests draw their partner at random (PARTNER_ORDER=turn
# takes the keys in turn, which flatters many partners: see load-testing.md).
# QUANTITY=5 orders five units an order in `orders` (1 unless set).
# LOG_LEVEL is the server's log level (info, the service's default, unless
# set: a line per request; LOG_LEVEL=warn measures without it, the default
# here before the fifty-seventh run); LOG_FORMAT its log.format (pretty
# unless set; json for shippers).
# BENCH_BIN runs another build's server (a binary built from another
# commit) in place of this tree's, which is then not built, for builds
# alternated round by round;
# NAIVE=0 leaves the naive loop out of `orders`.
# PG_SOCKET=/var/run/postgresql has the service reach PostgreSQL through its
# Unix socket in that folder (PG_URL's port names the socket), not over TCP.
# PG_DATABASE_OPTIONS is appended to each drive's CREATE DATABASE, for a
# database of another locale (for example "TEMPLATE template0
# LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'").
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/esim-bench}"
DURATION="${DURATION:-10}"
CONCURRENCY="${CONCURRENCY:-64}"
export PARTNER_ORDER="${PARTNER_ORDER:-random}"
export QUANTITY="${QUANTITY:-1}"
LOG_LEVEL="${LOG_LEVEL:-info}"
LOG_FORMAT="${LOG_FORMAT:-pretty}"
PG_URL="${PG_URL:-postgres://postgres@127.0.0.1:5432}"
# A binary named by BENCH_BIN is run as it is: nothing of this tree is built for it.
if [ -z "${BENCH_BIN:-}" ]; then cargo build --release -q; fi
bin="${BENCH_BIN:-$CARGO_TARGET_DIR/release/esim-reseller}"
work=$(mktemp -d)
server=""
sims=""
stop_server() { [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null; server=""; }
disk_watch=""
stop_all() { stop_disk_watch; stop_server; [ -n "$sims" ] && kill -TERM "$sims" 2>/dev/null && wait "$sims" 2>/dev/null; sims=""; }
trap stop_all EXIT
# The stand-ins in a process of their own, supplier latency 0 and no rate
# limit: the server's CPU figures are then its own.
start_simulators() {
  ESIM__SIMULATORS__ADDR=127.0.0.1:18590 ESIM__SIMULATORS__SUPPLIER_LATENCY_MS=0 \
    ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT=0 ESIM__LOG__LEVEL=warn \
    "$bin" simulate --callbacks-to http://127.0.0.1:18580 > "$work/simulate.log" 2>&1 &
  sims=$!
  for _ in $(seq 1 100); do curl -sf http://127.0.0.1:18590/sim/health >/dev/null && return 0; sleep 0.2; done
  echo "simulate did not start" >&2; cat "$work/simulate.log" >&2; exit 1
}
# The service as a user runs it (its defaults), buying from the separate
# simulators, with only the rate limits lifted; under server_wrapper (a
# command and its arguments) if one is set.
server_wrapper=()
health_tries=100
start_default_server() { # start_default_server <database url>
  local url="$1"
  # PG_SOCKET (a folder, /var/run/postgresql on Debian): the server reaches
  # PostgreSQL through its Unix socket there instead of TCP on PG_URL's port.
  if [[ "$url" == postgres* && -n "${PG_SOCKET:-}" ]]; then url="$url?host=$PG_SOCKET"; fi
  env ESIM__DATABASE__URL="$url" ESIM__LOG__LEVEL="$LOG_LEVEL" ESIM__LOG__FORMAT="$LOG_FORMAT" ESIM__SUPPLIER__REQUESTS_PER_SECOND=0 \
    ESIM__SUPPLIER__BASE_URL=http://127.0.0.1:18590 ESIM__AIRALO__BASE_URL=http://127.0.0.1:18590/v2 \
    ESIM__PAYMENTS__BASE_URL=http://127.0.0.1:18590 ESIM__SIMULATORS__ADDR=127.0.0.1:18592 \
    ESIM__HTTP__PUBLIC_ADDR=127.0.0.1:18580 ESIM__HTTP__OPERATOR_ADDR=127.0.0.1:18581 \
    ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT=$lift ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT=$lift \
    ESIM__RATE_LIMIT__BANDS__GOLD__CATALOGUE__LIMIT=$lift ESIM__OPERATOR__FOUR_EYES_CENTS=100000000000 \
    "${server_wrapper[@]}" "$bin" serve > "$work/serve.log" 2>&1 &
  server=$!
  for _ in $(seq 1 "$health_tries"); do curl -sf http://127.0.0.1:18580/partner/v1/health >/dev/null && return 0; sleep 0.2; done
  echo "server did not start" >&2; cat "$work/serve.log" >&2; exit 1
}

lift="100000000"
start_server() { # start_server <database url> <commit mode> [VAR=value ...]
  local url="$1" mode="$2"; shift 2
  # The supplier's rate limit is lifted (simulator and our gate) unless the
  # caller sets it: these runs measure this service's own speed.
  # Later assignments win: the caller's come last.
  env ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT=0 ESIM__SUPPLIER__REQUESTS_PER_SECOND=0 \
    ESIM__DATABASE__URL="$url" ESIM__STORE__COMMIT_MODE="$mode" ESIM__LOG__LEVEL="$LOG_LEVEL" ESIM__LOG__FORMAT="$LOG_FORMAT" \
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

# A bench database's life: on PostgreSQL each drive's database (the last
# part of its URL) is made before and dropped after; a SQLite file needs
# neither.
create_db() { [[ "$1" == postgres* ]] || return 0; psql "$PG_URL/postgres" -qc "CREATE DATABASE \"${1##*/}\" ${PG_DATABASE_OPTIONS:-}" >/dev/null; }
drop_db() { [[ "$1" == postgres* ]] || return 0; psql "$PG_URL/postgres" -qc "DROP DATABASE \"${1##*/}\" WITH (FORCE)" >/dev/null; }

databases=()
wanted="${DATABASES:-sqlite postgres}"
if [[ "$wanted" == *sqlite* ]]; then databases+=("sqlite://$work/bench-DB.db?mode=rwc"); fi
if [[ "$wanted" == *postgres* ]] && pg_isready -h 127.0.0.1 -q 2>/dev/null; then
  databases+=("$PG_URL/esim_bench_DB")
fi

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
# PostgreSQL's own CPU in clock ticks: every postgres process alive now
# (the server's connections, the writers, the checkpointer), plus what its
# ended processes used (an autovacuum worker, a connection the pool closed),
# which the kernel adds to the postmaster's children's time when it reaps
# them. Without the latter, a process that ended during a drive took its
# CPU out of the sum.
pg_ticks() {
  local total=0 pid
  for pid in $(pgrep -x postgres); do total=$((total + $(awk '{print $14+$15+$16+$17}' "/proc/$pid/stat" 2>/dev/null || echo 0))); done
  echo "$total"
}
# The machine's CPU ticks: all of them, those idle or waiting for the disk,
# and those stolen (/proc/stat). A drive that leaves the machine idle is
# bounded by something serial, not by the CPU; ticks stolen are time a
# virtual machine's host gave its processors to someone else, which makes
# one drive slower than its neighbours for no reason of its own.
machine_ticks() { awk '/^cpu / {print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6, $9}' /proc/stat; }
# The percentage of the ticks between two machine_ticks readings that were
# idle (column 2) or stolen (column 3): ticks_percent <before> <after> <column>.
ticks_percent() { echo "$1 $2" | awk -v k="$3" '{printf "%.1f", ($(k + 3) - $k) * 100 / ($4 - $1 > 0 ? $4 - $1 : 1)}'; }
# KiB the machine has written to its disks so far (/proc/vmstat pgpgout).
disk_kib() { awk '/^pgpgout / {print $2}' /proc/vmstat; }
# The disk under the drives' files, and its writes completed so far with the
# milliseconds they took (/proc/diskstats): their average over a drive is
# how long the disk took to complete a write request (longer for larger
# ones), which a virtual machine's host can lengthen for reasons of its
# own, as it can steal processors.
disk_device=$(basename "$(findmnt -no SOURCE --target "$work" 2>/dev/null || true)")
disk_writes() { awk -v d="$disk_device" '$3 == d {print $8, $11}' /proc/diskstats; }
# The average milliseconds a write took between two disk_writes readings
# (null without the disk or without a write): write_ms <before> <after>.
write_ms() { echo "$1 $2" | awk 'NF == 4 && $3 > $1 {printf "%.2f", ($4 - $2) / ($3 - $1); next} {print "null"}'; }
# The disk's writes read every 100 ms over a drive, in the background: the
# worst 100 ms's average says whether one write stalled (a virtual disk
# sometimes takes a few hundred ms to complete one, and every commit waits
# for its own), which the drive's average hides.
start_disk_watch() {
  : > "$work/disk-samples"
  (while :; do disk_writes; sleep 0.1; done >> "$work/disk-samples") &
  disk_watch=$!
}
# Stops the watch (the parent shell must: it is its child).
stop_disk_watch() {
  if [ -n "$disk_watch" ]; then kill "$disk_watch" 2>/dev/null || true; wait "$disk_watch" 2>/dev/null || true; fi
  disk_watch=""
}
# The highest average ms a write took over any 100 ms the watch read (null
# without the disk).
worst_write_ms() {
  awk 'NR > 1 && $1 > w {v = ($2 - m) / ($1 - w); if (v > worst) worst = v} {w = $1; m = $2} END {if (NR > 1) printf "%.1f", worst; else print "null"}' "$work/disk-samples"
}
# The server's /metrics, read once.
scrape() { curl -sf http://127.0.0.1:18581/metrics; }
# The sum of a series' samples over its label sets in a scrape (0 when
# absent): series_sum <scrape> <name, or name{labels} for one sample>.
series_sum() { awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%.0f", s}' <<< "$1"; }
accepted_total() { series_sum "$(scrape)" esim_orders_accepted_total; }
settled_total() { series_sum "$(scrape)" esim_orders_settled_total; }
# Orders per shared commit over the server's life (one fsync each on
# SQLite), from a scrape.
orders_per_commit() {
  awk -v o="$(series_sum "$1" esim_order_commit_orders_sum)" -v c="$(series_sum "$1" esim_order_commits_total)" 'BEGIN {printf "%.1f", (c > 0 ? o / c : 0)}'
}
# From a scrape, SQLite's counts so far (all 0 on PostgreSQL): microseconds
# the write gate was held, times the WAL started over after a checkpoint,
# and inline commits that took longer than 100 ms (the
# esim_db_inline_commit_seconds histogram's count above its 0.1 s bucket).
sqlite_counts() {
  echo "$(series_sum "$1" esim_db_write_gate_held_microseconds_total)" \
    "$(series_sum "$1" esim_db_wal_restarts_total)" \
    "$(( $(series_sum "$1" esim_db_inline_commit_seconds_count) - $(series_sum "$1" 'esim_db_inline_commit_seconds_bucket{le="0.1"}') ))"
}
wait_settled() { # waits (up to $1 s, 120) until every accepted order settled; prints the seconds waited
  local began=$SECONDS
  for _ in $(seq 1 $(( ${1:-120} * 5 ))); do [ "$(settled_total)" = "$(accepted_total)" ] && break; sleep 0.2; done
  echo $((SECONDS - began))
}
# The money after a drive, read in place while the server still serves
# (`verify`: every invariant and reference in one snapshot): true when every
# one holds; otherwise false, with what broke on stderr.
money_held() { # money_held <database url>
  local said
  if said=$(ESIM__DATABASE__URL="$1" ESIM__LOG__LEVEL=warn "$bin" verify 2>&1); then echo true; return; fi
  echo "money check after the drive on $1: $said" >&2
  echo false
}
keys_file() { # keys_file <n>: n new funded gold partners, one live key each, in a file
  local file="$work/keys-$1-$RANDOM"
  for _ in $(seq 1 "$1"); do funded_key >> "$file"; done
  echo "$file"
}
# GET /balance with the first key of a keys file, as many connections as the
# order drives: one line of its own.
balance_drive() { # balance_drive <database kind> <keys file>
  local before result steal
  before=$(machine_ticks)
  result=$(API_KEY="$(head -1 "$2")" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/get.lua http://127.0.0.1:18580 | tail -1)
  steal=$(ticks_percent "$before" "$(machine_ticks)" 3)
  echo "{\"database\":\"$1\",\"read\":\"/balance\",\"log_level\":\"$LOG_LEVEL\",\"log_format\":\"$LOG_FORMAT\",\"result\":$result,\"machine_steal_percent\":$steal}"
}
# CPU milliseconds a shell's waited-for children had used, user and system
# together, from what its `times` builtin wrote to <file> (the second line).
# `times` must run in the shell whose children count, not in a command
# substitution, which is a shell of its own.
children_cpu_ms() { # children_cpu_ms <file>
  awk 'NR == 2 {ms = 0; for (i = 1; i <= 2; i++) {split($i, t, /[ms]/); ms += (t[1] * 60 + t[2]) * 1000} printf "%.0f", ms}' "$1"
}
# The naive loop's CPU and PostgreSQL's over one run of it, in ms:
# naive_run <database url> <partners> <seconds>; its line goes to
# $work/naive-line.
naive_run() {
  local url="${1/DB/naive-$RANDOM}" pg_before pg_after
  create_db "$url"
  times > "$work/times-before"; pg_before=$(pg_ticks)
  "$CARGO_TARGET_DIR/release/naive-orders" --url "$url" --concurrency "$CONCURRENCY" \
    --duration "$3" --partners "$2" > "$work/naive-line"
  times > "$work/times-after"; pg_after=$(pg_ticks)
  drop_db "$url"
  echo "$(( $(children_cpu_ms "$work/times-after") - $(children_cpu_ms "$work/times-before") ))" \
    "$(( (pg_after - pg_before) * 1000 / $(getconf CLK_TCK) ))"
}
# The naive loop at <partners>, on a database of its own: its line, with
# its own CPU an order and (on PostgreSQL) the database's. A run of no
# seconds first takes what its setup costs (the migrations, a thousand
# partners made and funded), so the figures are the loop's alone.
naive_drive() { # naive_drive <database url with DB> <partners>
  local setup_cpu setup_pg cpu pg
  read -r setup_cpu setup_pg <<< "$(naive_run "$1" "$2" 0)"
  read -r cpu pg <<< "$(naive_run "$1" "$2" "$DURATION")"
  jq -c --argjson cpu "$((cpu - setup_cpu))" --argjson pg "$((pg - setup_pg))" --arg kind "${1%%:*}" \
    '(.orders | if . > 0 then . else 1 end) as $n
     | . + {naive_cpu_us_per_order: ($cpu * 1000 / $n | round),
            postgres_cpu_us_per_order: (if $kind == "postgres" then ($pg * 1000 / $n | round) else null end)}' \
    "$work/naive-line"
}
money_broken=0
orders_side_by_side() {
  if [ "${NAIVE:-1}" != 0 ]; then cargo build --release -q -p naive-orders; fi
  start_simulators
  for database in "${databases[@]}"; do
    for partners in ${PARTNER_COUNTS:-1 100 1000}; do
      local tag="wrk-$partners-$RANDOM" url kind
      url="${database/DB/$tag}"; kind="${url%%:*}"
      create_db "$url"
      start_default_server "$url"
      local keys before after pg_before pg_after pg_cpu orders cpu settle result
      local machine_before machine_after disk_before idle steal disk gate_before clock_before gate_busy money
      local writes_before write_wait worst_wait restarts_before restarts slow_before slow gate_after
      local scraped clock_after settled
      keys=$(keys_file "$partners")
      before=$(cpu_ticks); pg_before=$(pg_ticks); machine_before=$(machine_ticks); disk_before=$(disk_kib)
      writes_before=$(disk_writes); start_disk_watch
      read -r gate_before restarts_before slow_before <<< "$(sqlite_counts "$(scrape)")"; clock_before=$(date +%s%N)
      result=$(KEYS_FILE="$keys" RUN="$tag" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 | tail -1)
      settle=$(wait_settled)
      after=$(cpu_ticks); pg_after=$(pg_ticks); machine_after=$(machine_ticks)
      # Every count the line takes from the server, read once after the settling.
      scraped=$(scrape); clock_after=$(date +%s%N)
      orders=$(series_sum "$scraped" esim_orders_accepted_total); settled=$(series_sum "$scraped" esim_orders_settled_total)
      read -r gate_after restarts slow <<< "$(sqlite_counts "$scraped")"
      idle=$(ticks_percent "$machine_before" "$machine_after" 2)
      steal=$(ticks_percent "$machine_before" "$machine_after" 3)
      write_wait=$(write_ms "$writes_before" "$(disk_writes)")
      stop_disk_watch; worst_wait=$(worst_write_ms)
      disk=$(awk -v a="$(disk_kib)" -v b="$disk_before" -v n="$orders" 'BEGIN {printf "%.1f", (a - b) / (n > 0 ? n : 1)}')
      # The share of the drive (and its settling) some writer held the gate.
      gate_busy=$(awk -v a="$gate_after" -v b="$gate_before" -v t="$(( (clock_after - clock_before) / 1000 ))" 'BEGIN {printf "%.1f", (a - b) * 100 / (t > 0 ? t : 1)}')
      restarts=$(( restarts - restarts_before )); slow=$(( slow - slow_before ))
      if [[ "$url" == postgres* ]]; then gate_busy=null; restarts=null; slow=null; fi
      money=$(money_held "$url")
      [ "$money" = true ] || money_broken=1
      cpu=$(( (after - before) * 10000000 / $(getconf CLK_TCK) / (orders > 0 ? orders : 1) / 10 ))
      pg_cpu=null
      if [[ "$url" == postgres* ]]; then pg_cpu=$(( (pg_after - pg_before) * 10000000 / $(getconf CLK_TCK) / (orders > 0 ? orders : 1) / 10 )); fi
      echo "{\"database\":\"$kind\",\"partners\":$partners,\"partner_order\":\"$PARTNER_ORDER\",\"quantity\":$QUANTITY,\"settings\":\"defaults, limits lifted\",\"log_level\":\"$LOG_LEVEL\",\"log_format\":\"$LOG_FORMAT\",\"result\":$result,\"accepted\":$orders,\"settled\":$settled,\"seconds_to_settle_after_the_run\":$settle,\"server_cpu_us_per_accepted_and_settled_order\":$cpu,\"postgres_cpu_us_per_accepted_and_settled_order\":$pg_cpu,\"orders_per_commit\":$(orders_per_commit "$scraped"),\"machine_idle_percent\":$idle,\"machine_steal_percent\":$steal,\"machine_disk_write_ms\":$write_wait,\"machine_disk_worst_write_ms\":$worst_wait,\"disk_kib_written_per_order\":$disk,\"write_gate_held_percent\":$gate_busy,\"wal_restarts\":$restarts,\"commits_over_100ms\":$slow,\"money_invariants_held\":$money}"
      if [ "$partners" = 1 ]; then balance_drive "$kind" "$keys"; fi
      stop_server
      drop_db "$url"
      if [ "${NAIVE:-1}" != 0 ]; then naive_drive "$database" "$partners"; fi
    done
  done
  stop_all
  # Every drive ran; a broken invariant still fails the run.
  if [ "$money_broken" = 1 ]; then echo "the money did not hold after every drive (see above)" >&2; return 1; fi
}
# A profile of the server under the same wrk load as `orders` (defaults,
# limits lifted, simulators in their own process), PROFILE_PARTNERS partners
# (100 unless set): the share of samples per thread and the top symbols.
profile_orders() {
  command -v perf >/dev/null || { echo "perf is not installed" >&2; return 1; }
  start_simulators
  for database in "${databases[@]}"; do
    local tag="prof-$RANDOM" url kind keys
    url="${database/DB/$tag}"; kind="${url%%:*}"
    create_db "$url"
    start_default_server "$url"
    keys=$(keys_file "${PROFILE_PARTNERS:-100}")
    # Frame pointers (the default) stop at the first Rust frame of a release
    # build; CALL_GRAPH=dwarf unwinds whole stacks, at 199 Hz to keep the file small.
    local sampling=(-F 499 -g)
    if [ "${CALL_GRAPH:-}" = dwarf ]; then sampling=(-F 199 --call-graph dwarf,32768); fi
    # PROFILE_ALL=1 records every process (the database, wrk, the idle
    # kernel too), so a drive's whole machine shows side by side.
    local scope=(-p "$server")
    if [ "${PROFILE_ALL:-}" = 1 ]; then scope=(-a); fi
    perf record "${sampling[@]}" "${scope[@]}" -o "$work/perf-$kind.data" -- sleep "$DURATION" 2>/dev/null &
    local recorder=$!
    KEYS_FILE="$keys" RUN="$tag" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 | tail -1
    wait "$recorder" || true
    echo "settled $(wait_settled) s after the run"
    local server_pid=$server
    stop_server
    drop_db "$url"
    echo "== $kind: samples by thread"
    perf report -i "$work/perf-$kind.data" --no-children --sort comm --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -8 || true
    echo "== $kind: samples by shared object"
    perf report -i "$work/perf-$kind.data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -8 || true
    echo "== $kind: top symbols"
    perf report -i "$work/perf-$kind.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -25 || true
    if [ "${PROFILE_ALL:-}" = 1 ]; then
      # Samples, not shares: at perf's 499 Hz a sample is about 2 ms of one
      # processor, so samples x 2004 / orders is µs an order.
      echo "== $kind: samples by command, user and kernel side"
      perf report -i "$work/perf-$kind.data" --no-children -n --sort comm,dso --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -20 || true
      echo "== $kind: the server's top symbols"
      perf report -i "$work/perf-$kind.data" --no-children -n --pid "$server_pid" --sort dso,sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -25 || true
      if [[ "$url" == postgres* ]]; then
        echo "== $kind: PostgreSQL's top symbols"
        perf report -i "$work/perf-$kind.data" --no-children -n --comms postgres --sort dso,sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -25 || true
      fi
    fi
  done
  stop_all
}
# Instructions the server executes per request and per order, counted by
# callgrind (valgrind) with counting switched on only for each drive: what a
# change saves on the request path shows without the noise of a shared
# machine. Under valgrind the server runs some hundred times slower, so the
# orders' batches are smaller than under wrk at full speed, and a memory
# copy counts as many instructions as it moves words.
instructions() {
  command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; return 1; }
  local out="${CALLGRIND_OUT:-$work/callgrind}" partners="${INSTRUCTION_PARTNERS:-1}" key requests orders before
  start_simulators
  start_counted_server "$out.balance"
  key=$(keys_file 1)
  callgrind_control -i on "$server" >/dev/null 2>&1
  requests=$(API_KEY="$(head -1 "$key")" wrk -t1 -c8 -d"${DURATION}s" -s scripts/wrk/get.lua http://127.0.0.1:18580 | tail -1 | jq .requests)
  callgrind_control -i off "$server" >/dev/null 2>&1
  stop_server
  echo "{\"database\":\"sqlite\",\"read\":\"/balance\",\"requests\":$requests,\"instructions_per_request\":$(( $(callgrind_total "$out.balance") / requests ))}"
  start_counted_server "$out.orders"
  key=$(keys_file "$partners")
  # A warm-up drive first: the supplier orders' drivers and the writers start.
  KEYS_FILE="$key" RUN="warm-$RANDOM" wrk -t1 -c16 -d5s -s scripts/wrk/orders.lua http://127.0.0.1:18580 >/dev/null
  wait_settled >/dev/null
  before=$(accepted_total)
  callgrind_control -i on "$server" >/dev/null 2>&1
  KEYS_FILE="$key" RUN="cg-$RANDOM" wrk -t1 -c16 -d"${DURATION}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 >/dev/null
  wait_settled >/dev/null
  callgrind_control -i off "$server" >/dev/null 2>&1
  orders=$(( $(accepted_total) - before ))
  stop_server
  echo "{\"database\":\"sqlite\",\"partners\":$partners,\"orders\":$orders,\"instructions_per_accepted_and_settled_order\":$(( $(callgrind_total "$out.orders") / (orders > 0 ? orders : 1) ))}"
  stop_all
}
# start_counted_server <callgrind file>: the default server on a new SQLite
# file, under callgrind with counting off until switched on (valgrind starts
# it slowly, hence the longer wait).
start_counted_server() {
  local server_wrapper=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$1") health_tries=600
  start_default_server "sqlite://$work/$(basename "$1").db?mode=rwc"
}
# PostgreSQL's own time per accepted and settled order, statement by
# statement: one drive per partner count on a new database, the server's
# pg_stat_statements view reset before it and read once every order settled.
# The server at PG_URL must preload the view's library
# (shared_preload_libraries = 'pg_stat_statements'); docs/load-testing.md
# shows one started for it beside the machine's own.
statements() {
  psql "$PG_URL/postgres" -qc "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1 \
    && psql "$PG_URL/postgres" -qAtc "SELECT 1 FROM pg_stat_statements LIMIT 1" >/dev/null 2>&1 \
    || { echo "pg_stat_statements is not loaded by the server at $PG_URL" >&2; return 1; }
  start_simulators
  for partners in ${PARTNER_COUNTS:-1 100}; do
    local tag="stmts-$partners-$RANDOM" keys orders result
    create_db "$PG_URL/esim_bench_$tag"
    start_default_server "$PG_URL/esim_bench_$tag"
    keys=$(keys_file "$partners")
    psql "$PG_URL/postgres" -qAtc "SELECT pg_stat_statements_reset()" >/dev/null
    result=$(KEYS_FILE="$keys" RUN="$tag" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 | tail -1)
    wait_settled >/dev/null
    orders=$(accepted_total)
    echo "{\"database\":\"postgres\",\"partners\":$partners,\"result\":$result,\"accepted\":$orders}"
    psql "$PG_URL/postgres" -qAt -v orders="$orders" -v db="esim_bench_$tag" <<'SQL'
SELECT json_build_object(
  'statement', left(regexp_replace(s.query, '\s+', ' ', 'g'), 120),
  'calls', s.calls, 'rows', s.rows,
  'exec_us_per_order', round((s.total_exec_time * 1000 / greatest(:orders, 1))::numeric, 1),
  'blocks_per_order', round(((s.shared_blks_hit + s.shared_blks_read)::numeric / greatest(:orders, 1)), 1),
  'wal_records_per_order', round((s.wal_records::numeric / greatest(:orders, 1)), 2))
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = :'db' ORDER BY s.total_exec_time DESC LIMIT 15;
SQL
    stop_server
    drop_db "$PG_URL/esim_bench_$tag"
  done
  stop_all
}
# Orders asked for faster than this service settles them, for long enough
# that a backlog it does not bound outgrows the spec's 92 s: the default
# server (the suppliers' limits lifted, so only its own settling bounds
# it), then every live order's wait from acceptance to settlement, read
# from the orders themselves once all settled.
settling() {
  start_simulators
  for database in "${databases[@]}"; do
    local tag="settling-$RANDOM" url keys result settle view
    url="${database/DB/$tag}"
    create_db "$url"
    start_default_server "$url"
    keys=$(keys_file "${SETTLING_PARTNERS:-1}")
    result=$(QUANTITY="${SETTLING_QUANTITY:-5}" KEYS_FILE="$keys" RUN="$tag" wrk -t2 -c"$CONCURRENCY" \
      -d"${SETTLING_DURATION:-30}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 | tail -1)
    view=$(operator GET /admission | jq -c '{bound_by, settling_units_per_second, room_units, backlog_units, refusals}')
    settle=$(wait_settled 900)
    echo "{\"database\":\"${url%%:*}\",\"partners\":${SETTLING_PARTNERS:-1},\"quantity\":${SETTLING_QUANTITY:-5},\"settling\":{\"result\":$result,\"admission_at_the_end\":${view:-null},\"seconds_to_settle_after_the_run\":$settle,\"orders\":$(order_waits "$url")}}"
    stop_server
    drop_db "$url"
  done
  stop_all
}
# A supplier that takes fewer calls than this service was told: the
# simulator enforces PACE_LIMIT requests a second (8, eSIM Access's
# documented limit) and profiles take SUPPLIER_LATENCY_MS (1000) to
# allocate; the gate is told nothing (0), the limit itself, and twice it
# (as two nodes on one account without Redis would be). An open loop of
# SUPPLIER_RATE (80) orders a second from 20 partners for DURATION seconds,
# SQLite; then the seconds until every order settled, the refunds, what the
# supplier saw (requests, those refused for the rate) and the pace learnt.
pace() {
  local limit="${PACE_LIMIT:-8}" told result settle stats view
  for told in 0 "$limit" $((limit * 2)); do
    start_server "sqlite://$work/pace-$told-$RANDOM.db?mode=rwc" batch \
      ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT="$limit" ESIM__SUPPLIER__REQUESTS_PER_SECOND="$told" \
      ESIM__SIMULATORS__SUPPLIER_LATENCY_MS="${SUPPLIER_LATENCY_MS:-1000}" ESIM__SUPPLIER__POLL_INTERVAL_MS=500
    result=$(load --partners 20 --rate "${SUPPLIER_RATE:-80}" --duration "$DURATION" --concurrency 64)
    settle=$(wait_settled "${PACE_WAIT:-300}")
    stats=$(curl -sf http://127.0.0.1:18590/sim/supplier/stats)
    view=$(operator GET /suppliers | jq -c '.data[0] | {calls, slow_downs, learnt_requests_per_second}')
    echo "{\"pace\":{\"supplier_limit\":$limit,\"told\":$told},\"result\":$result,\"seconds_to_settle_after_the_run\":$settle,\"supplier_stats\":$stats,\"gate\":${view:-null}}"
    stop_server
  done
}
# A supplier whose limit is a minute's: the Airalo simulator takes
# PACE_MINUTE_LIMIT (120) requests a minute, in fixed windows, and answers
# past it with 429 and the seconds left of the minute; the gate is told
# nothing. An open loop of SUPPLIER_RATE (20) orders a second from 20
# partners for DURATION seconds (use several minutes), SQLite; the same
# figures as `pace`, from Airalo, and every order's wait (order_waits) over
# the drive and after its first two minutes.
pace_minute() {
  local limit="${PACE_MINUTE_LIMIT:-120}" url="sqlite://$work/pace-minute-$RANDOM.db?mode=rwc" result settle stats view
  start_server "$url" batch \
    ESIM__SUPPLIERS__ROUTE=airalo ESIM__AIRALO__REQUESTS_PER_SECOND=0 \
    ESIM__SIMULATORS__AIRALO_RATE_LIMIT_PER_MINUTE="$limit" ESIM__SUPPLIER__POLL_INTERVAL_MS=500
  result=$(load --partners 20 --rate "${SUPPLIER_RATE:-20}" --duration "$DURATION" --concurrency 64)
  settle=$(wait_settled "${PACE_WAIT:-300}")
  stats=$(curl -sf http://127.0.0.1:18590/sim/airalo/stats | jq -c 'del(.orders_per_description)')
  view=$(operator GET /suppliers | jq -c '.data[] | select(.name == "airalo") | {calls, slow_downs, learnt_requests_per_second, learnt_window_seconds, learnt_requests_per_window}')
  stop_server
  echo "{\"pace_minute\":{\"supplier_limit_per_minute\":$limit,\"told\":0},\"result\":$result,\"seconds_to_settle_after_the_run\":$settle,\"supplier_stats\":$stats,\"gate\":${view:-null},\"order_waits\":$(order_waits "$url"),\"order_waits_after_the_first_minute\":$(order_waits "$url" 60),\"order_waits_after_two_minutes\":$(order_waits "$url" 120)}"
}
# order_waits <database url> [seconds]: live orders by status, and their
# waits from acceptance to settlement (p50, p99, the longest, how many past
# 92 s); with seconds, only the orders accepted that long after the first.
order_waits() {
  local skip="${2:-0}"
  if [[ "$1" == postgres* ]]; then
    psql "$1" -qAtc "WITH w AS (SELECT status, failure_code, extract(epoch FROM completed_at - created_at) AS s FROM orders WHERE mode = 'live'
        AND created_at >= (SELECT min(created_at) FROM orders WHERE mode = 'live') + interval '$skip seconds')
      SELECT json_build_object('orders', count(*), 'refunded', count(*) FILTER (WHERE failure_code IS NOT NULL),
        'wait_p50_s', round(percentile_cont(0.5) WITHIN GROUP (ORDER BY s)::numeric, 1),
        'wait_p99_s', round(percentile_cont(0.99) WITHIN GROUP (ORDER BY s)::numeric, 1),
        'wait_max_s', round(max(s)::numeric, 1), 'past_92_s', count(*) FILTER (WHERE s > 92)) FROM w"
  else
    python3 - "${1#sqlite://}" "$skip" <<'PY'
import json, sqlite3, sys
from datetime import datetime, timedelta
db = sqlite3.connect(sys.argv[1].split("?")[0])
rows = db.execute("SELECT failure_code, created_at, completed_at FROM orders WHERE mode = 'live'").fetchall()
at = lambda text: datetime.fromisoformat(text.replace(" +00:00", "+00:00"))
if rows:
    since = min(at(made) for _, made, _ in rows) + timedelta(seconds=float(sys.argv[2]))
    rows = [row for row in rows if at(row[1]) >= since]
waits = sorted((at(done) - at(made)).total_seconds() for _, made, done in rows if done)
pick = lambda q: round(waits[min(len(waits) - 1, int(q * len(waits)))], 1) if waits else None
print(json.dumps({"orders": len(rows), "refunded": sum(1 for code, _, _ in rows if code),
                  "wait_p50_s": pick(0.5), "wait_p99_s": pick(0.99),
                  "wait_max_s": round(waits[-1], 1) if waits else None,
                  "past_92_s": sum(1 for w in waits if w > 92)}))
PY
  fi
}
# The messages the server sends PostgreSQL an accepted order, counted by
# strace (each `sendto` on a socket to PG_URL's port through a DURATION
# drive, with 1 and 100 partners, PARTNER_COUNTS): all of them, sqlx's pings
# among them (a lone `Sync`, five bytes) and the simple queries (`BEGIN`,
# `COMMIT`, `ROLLBACK`). Under strace the server runs several times slower,
# so its commits carry fewer orders than in `orders`: for comparing builds.
# Over TCP only: with PG_SOCKET set it would find no socket to that port.
messages() {
  command -v strace >/dev/null || { echo "strace is not installed" >&2; return 1; }
  local port="${PG_URL##*:}"
  start_simulators
  for partners in ${PARTNER_COUNTS:-1 100}; do
    local url="$PG_URL/esim_bench_msgs-$partners-$RANDOM" keys before orders trace="$work/strace-$partners" tracer
    create_db "$url"
    start_default_server "$url"
    keys=$(keys_file "$partners")
    before=$(accepted_total)
    strace -f -qq -yy -xx -s 5 -e trace=sendto -o "$trace" -p "$server" &
    tracer=$!
    sleep 1
    KEYS_FILE="$keys" RUN="${url##*/}" wrk -t2 -c"$CONCURRENCY" -d"${DURATION}s" -s scripts/wrk/orders.lua http://127.0.0.1:18580 >/dev/null
    wait_settled >/dev/null
    kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
    orders=$(( $(accepted_total) - before ))
    stop_server
    drop_db "$url"
    grep -F ":$port]>" "$trace" | awk -v orders="$orders" -v partners="$partners" '
      { all++ }
      /"\\x53\\x00\\x00\\x00\\x04", 5,/ { pings++ }
      /"\\x51/ { simple++ }
      END { per = (orders > 0 ? orders : 1)
            printf "{\"database\":\"postgres\",\"partners\":%d,\"orders\":%d,\"messages_per_order\":%.2f,\"pings_per_order\":%.2f,\"simple_queries_per_order\":%.2f}\n",
              partners, orders, all / per, pings / per, simple / per }'
  done
  stop_all
}
# The instructions a callgrind file counted.
callgrind_total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }
if [ "${1:-all}" = orders ]; then orders_side_by_side; exit 0; fi
if [ "${1:-all}" = instructions ]; then instructions; exit 0; fi
if [ "${1:-all}" = profile ]; then profile_orders; exit 0; fi
if [ "${1:-all}" = statements ]; then statements; exit 0; fi
if [ "${1:-all}" = messages ]; then messages; exit 0; fi
if [ "${1:-all}" = settling ]; then settling; exit 0; fi
if [ "${1:-all}" = pace ]; then pace; exit 0; fi
if [ "${1:-all}" = pace-minute ]; then pace_minute; exit 0; fi
orders_side_by_side

for database in "${databases[@]}"; do
  for mode in batch per_request; do
    for shape in hot many; do
      tag="$mode-$shape-$RANDOM"
      url="${database/DB/$tag}"
      create_db "$url"
      start_server "$url" "$mode"
      if [ "$shape" = hot ]; then args=(--partners 1 --hot); else args=(--partners 100); fi
      result=$(load "${args[@]}" --duration "$DURATION" --concurrency "$CONCURRENCY")
      echo "{\"database\":\"${url%%:*}\",\"commit_mode\":\"$mode\",\"shape\":\"$shape\",\"rss_kib_after\":$(rss_kib),\"result\":$result}"
      if [ "$mode" = batch ] && [ "$shape" = hot ]; then
        echo "{\"database\":\"${url%%:*}\",\"read\":\"/balance\",\"result\":$(load --partners 1 --hot --read-path /balance --duration "$DURATION" --concurrency "$CONCURRENCY")}"
        echo "{\"database\":\"${url%%:*}\",\"read\":\"/plans\",\"result\":$(load --partners 1 --hot --read-path '/plans?country=fr' --duration "$DURATION" --concurrency "$CONCURRENCY")}"
      fi
      stop_server
      drop_db "$url"
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
