#!/usr/bin/env bash
# Reliability proofs for CI: kill -9 the real server while a partner orders
# and pays, then check the money (scripts/crash_test.py; docs/reliability.md).
#
#   scripts/crash_ci.sh target/debug/esim-reseller
#
# 1. the crash test on SQLite (a temporary folder);
# 2. with TEST_DATABASE_URL (postgres://...): the crash test on a fresh
#    PostgreSQL database created beside it and dropped afterwards;
# 3. with TEST_DATABASE_URL and TEST_REDIS_URL: three nodes on one fresh
#    PostgreSQL database and one Redis (kills, the write limit across nodes,
#    reconciler exclusivity), then `loadtest` spread across the three nodes.
#
# CRASH_SEED fixes the random choices (each run prints its seed); CRASH_KILLS
# sets the kills per run (default 20). Logs are kept when a run fails.
#
# 4. with both: the provisioning-lease race (three nodes, one of them
#    provisioning one order at a time behind a 2-second lease, so orders wait
#    in its queue past their lease and another node takes them over): no unit
#    may be worked on by two nodes at once.
set -uo pipefail

bin="${1:?usage: scripts/crash_ci.sh <path to esim-reseller>}"
[ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
here="$(cd "$(dirname "$0")" && pwd)"
kills="${CRASH_KILLS:-20}"
seed_args=()
[ -n "${CRASH_SEED:-}" ] && seed_args=(--seed "$CRASH_SEED")

root="$(mktemp -d "${TMPDIR:-/tmp}/esim-crash-ci.XXXXXX")"
databases=()
failed=()

log() { printf '\n==> %s\n' "$*"; }

# A database URL like $TEST_DATABASE_URL, naming another database.
sibling_url() { # sibling_url <name>
  local base="${TEST_DATABASE_URL%%\?*}" query=""
  [[ "$TEST_DATABASE_URL" == *\?* ]] && query="?${TEST_DATABASE_URL#*\?}"
  printf '%s/%s%s' "${base%/*}" "$1" "$query"
}

create_database() { # create_database <name>
  psql "$TEST_DATABASE_URL" -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$1\"" && databases+=("$1")
}

cleanup() {
  for name in "${databases[@]}"; do
    psql "$TEST_DATABASE_URL" -X -q -c "DROP DATABASE IF EXISTS \"$name\" WITH (FORCE)" >/dev/null 2>&1 || true
  done
  if [ "${#failed[@]}" -eq 0 ]; then
    rm -rf "$root"
  else
    echo "logs kept in $root"
  fi
}
trap cleanup EXIT

run() { # run <label> <crash_test.py arguments...>
  local label="$1"; shift
  local dir="$root/$label" started=$SECONDS
  mkdir -p "$dir"
  log "crash test: $label"
  if python3 "$here/crash_test.py" --bin "$bin" --kills "$kills" "${seed_args[@]}" \
      --workdir "$dir" --json "$dir/summary.json" "$@"; then
    echo "$label passed in $((SECONDS - started))s"
  else
    echo "$label FAILED after $((SECONDS - started))s (logs in $dir)"
    failed+=("$label")
  fi
}

run sqlite --database-url "sqlite://$root/sqlite/crash.db?mode=rwc"

if [ -n "${TEST_DATABASE_URL:-}" ]; then
  suffix="$$_$RANDOM"
  if create_database "crash_pg_$suffix"; then
    run postgres --database-url "$(sibling_url "crash_pg_$suffix")"
  else
    failed+=("postgres (database not created)")
  fi
  if [ -n "${TEST_REDIS_URL:-}" ]; then
    if create_database "crash_nodes_$suffix"; then
      run three-nodes --nodes 3 --database-url "$(sibling_url "crash_nodes_$suffix")" \
        --redis-url "$TEST_REDIS_URL" --loadtest-count 600
    else
      failed+=("three-nodes (database not created)")
    fi
    if create_database "crash_lease_$suffix"; then
      run lease-race --nodes 3 --database-url "$(sibling_url "crash_lease_$suffix")" \
        --redis-url "$TEST_REDIS_URL" --kills 0 --workers 1 --drive-seconds 15 --rate-seconds 1 \
        --provisioning-concurrency 1,64 --supplier-latency-ms 2500 --lease-seconds 2
    fi
  else
    log "TEST_REDIS_URL not set: three-node test skipped"
  fi
else
  log "TEST_DATABASE_URL not set: PostgreSQL and three-node tests skipped"
fi

if [ "${#failed[@]}" -ne 0 ]; then
  log "crash tests failed: ${failed[*]}"
  exit 1
fi
log "crash tests passed"
