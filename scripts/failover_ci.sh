#!/usr/bin/env bash
# PostgreSQL failover under load (docs/reliability.md, "PostgreSQL failover").
#
#   scripts/failover_ci.sh target/debug/esim-reseller
#
# Builds on this machine, from Debian's packages, a PostgreSQL primary with
# one synchronous standby (pg_basebackup -R, synchronous_commit = on) and
# HAProxy in front of both on one address; HAProxy sends traffic only to the
# server that says it is not in recovery (a tcp-check reading the
# `in_hot_standby` parameter PostgreSQL reports at startup; `option
# pgsql-check` only proves a server accepts a login, which a standby does
# too). Two `serve` nodes use HAProxy's address. A partner-like driver sends
# orders (and crypto deposits) to both nodes, retrying every unanswered or
# 5xx request with the same Idempotency-Key as a partner would; then
#
#   kill:   the primary is stopped with `pg_ctl -m immediate stop`,
#   freeze: every process of the primary is SIGSTOPped (a host that stops
#           answering while its kernel still acknowledges),
#
# and the standby is promoted 2 s later. The run fails when an acknowledged
# order is missing, a debit is doubled or missing (float = ledger, one
# purchase row per acknowledged order and none without one, one order per
# key), a paid deposit is not credited exactly once, a request hangs past
# the HTTP time-out (15 s), a node is not accepting orders again within 15 s
# of the promotion, a node process died, or `loadtest` across both nodes
# afterwards does not say PASS. It prints the outage as clients saw it, the
# 5xx answers during it and the time to the first accepted order after the
# promotion. Logs are kept in the temporary folder when it fails.
#
# Needs PostgreSQL's server tools (initdb, pg_ctl, pg_basebackup; Debian's
# postgresql package) and installs haproxy with apt-get when missing.
# FAILOVER_SCENARIOS=kill (or freeze) runs one scenario only.
set -uo pipefail

bin="${1:?usage: scripts/failover_ci.sh <path to esim-reseller>}"
[ -x "$bin" ] || { echo "not an executable: $bin" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
scenarios="${FAILOVER_SCENARIOS:-kill freeze}"
http_timeout=15   # the driver's per-request time-out: no request may take longer
recover_within=15 # both nodes accept orders again within this of the promotion

log() { printf '\n==> %s\n' "$*"; }
die() { echo "FAILED: $*" >&2; exit 1; }

# --- tools -------------------------------------------------------------------
pgbin=""
if command -v pg_ctl >/dev/null 2>&1 && command -v initdb >/dev/null 2>&1; then
  pgbin="$(dirname "$(readlink -f "$(command -v pg_ctl)")")"
else
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then pgbin="$dir"; break; fi
  done
fi
if [ -z "$pgbin" ]; then
  echo "skipped: PostgreSQL server tools (pg_ctl, initdb) are not installed"
  exit 0
fi
for tool in pg_basebackup psql; do
  [ -x "$pgbin/$tool" ] || command -v "$tool" >/dev/null 2>&1 || die "$tool not found beside $pgbin/pg_ctl"
done
psql_bin="$pgbin/psql"; [ -x "$psql_bin" ] || psql_bin="$(command -v psql)"
id postgres >/dev/null 2>&1 || die "no postgres OS user (initdb refuses to run as root)"
if ! command -v haproxy >/dev/null 2>&1; then
  log "installing haproxy"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q haproxy >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q haproxy >/dev/null; } \
    || die "could not install haproxy"
fi
haproxy_bin="$(command -v haproxy)" || die "haproxy not found after installing it"
for tool in python3 curl; do command -v "$tool" >/dev/null 2>&1 || die "$tool not found"; done

# --- state and clean-up ------------------------------------------------------
root="$(mktemp -d "${TMPDIR:-/tmp}/esim-failover.XXXXXX")"
chmod 755 "$root" # the postgres user reaches its data folders below
pids=()           # node, HAProxy and driver processes to end
clusters=()       # data folders of clusters to stop
failed=0

as_postgres() { runuser -u postgres -- "$@"; }

stop_cluster() { # stop_cluster <data dir>
  local data="$1" pm
  [ -f "$data/postmaster.pid" ] || return 0
  pm="$(head -1 "$data/postmaster.pid" 2>/dev/null)"
  if [ -n "$pm" ] && kill -0 "$pm" 2>/dev/null; then
    # A frozen cluster is thawed first so that it can shut down (and free
    # its shared memory); nothing talks to it any more by now.
    kill -CONT "$pm" $(pgrep -P "$pm") 2>/dev/null
    as_postgres "$pgbin/pg_ctl" -D "$data" -m immediate -w -t 20 stop >/dev/null 2>&1 \
      || { kill -KILL $(pgrep -P "$pm") "$pm" 2>/dev/null; }
  fi
}

cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  for data in "${clusters[@]}"; do stop_cluster "$data"; done
  if [ "$failed" -eq 0 ]; then
    rm -rf "$root"
  else
    echo "logs kept in $root"
  fi
}
trap cleanup EXIT
trap 'failed=1; exit 130' INT TERM

free_ports() { # free_ports <n>: n distinct free TCP ports on 127.0.0.1
  python3 - "$1" <<'PY'
import socket, sys
held = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    held.append(s)
print(" ".join(str(s.getsockname()[1]) for s in held))
PY
}

hex() { printf '%s' "$1" | od -An -tx1 -v | tr -d ' \n'; }

# The StartupMessage of the health check: user postgres, database postgres.
startup_message() {
  local body
  body="00030000$(hex user)00$(hex postgres)00$(hex database)00$(hex postgres)00$(hex application_name)00$(hex haproxy_check)0000"
  printf '%08x%s' $(( ${#body} / 2 + 4 )) "$body"
}

write_haproxy_cfg() { # write_haproxy_cfg <file> <port> <pg1 port> <pg2 port>
  cat > "$1" <<EOF
global
    maxconn 2000
    log stderr format iso local0 info

defaults
    mode tcp
    log global
    option log-health-checks
    option tcplog
    option dontlog-normal
    timeout connect 1s
    timeout client 1h
    timeout server 1h
    timeout check 1s

listen postgres
    bind 127.0.0.1:$2
    balance first
    # Only a server that is not in recovery (the primary) passes. PostgreSQL
    # (14+) reports in_hot_standby right after authentication: "off" on a
    # primary, "on" on a standby. option pgsql-check would only check that a
    # login is accepted, which a hot standby does as well.
    option tcp-check
    tcp-check connect
    tcp-check send-binary $(startup_message)
    tcp-check expect binary 520000000800000000 comment AuthenticationOk
    tcp-check expect binary 5a00000005 comment ReadyForQuery
    tcp-check expect min-recv 1 binary $(hex in_hot_standby)00$(hex off)00 comment primary
    tcp-check send-binary 5800000004
    # A server that fails two checks (1 s each at most, every 500 ms) is out,
    # and its open sessions are cut at once: a frozen primary cannot hold a
    # pool's connections after it is marked down.
    default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
    server pg1 127.0.0.1:$3 check
    server pg2 127.0.0.1:$4 check
EOF
}

# Every connection the nodes hold to the database address has TCP keepalive
# on (src/store/mod.rs sets it on the pool's sockets). Sampled ten times: an
# idle socket shows its keepalive timer (one sending at that instant shows
# its retransmission timer instead), and a socket seen idle without any
# timer (twice, so not one caught while it was being opened) has none.
check_keepalive() { # check_keepalive <dir> <haproxy port> <label>
  if ! command -v ss >/dev/null 2>&1; then
    echo "ss (iproute2) not found: TCP keepalive not checked"; return 0
  fi
  local sample
  for sample in $(seq 1 10); do
    # ss names a process by its command name, cut to 15 characters.
    ss -tnopH state established "( dport = :$2 )" 2>/dev/null | grep -F "\"$(basename "$bin" | cut -c1-15)\""
    sleep 0.1
  done >"$1/sockets-$3.txt"
  python3 - "$1/sockets-$3.txt" "$3" <<'CHECK'
import collections, sys
seen, armed, bare = set(), set(), collections.Counter()
for line in open(sys.argv[1]):
    local = line.split()[2]
    seen.add(local)
    if "timer:(keepalive" in line:
        armed.add(local)
    elif "timer:(" not in line:
        bare[local] += 1
# Seen idle without a timer twice: not a connection caught while opening.
unarmed = {local for local, n in bare.items() if n >= 2} - armed
print(f"database connections of the nodes ({sys.argv[2]}): {len(seen)}, keepalive seen on {len(armed)}, idle without keepalive {len(unarmed)}")
sys.exit(0 if seen and not unarmed else "a database connection without TCP keepalive")
CHECK
}

# --- one scenario ------------------------------------------------------------
scenario() { # scenario <kill|freeze>
  local mode="$1" dir="$root/$1"
  mkdir -p "$dir" && chmod 755 "$dir"
  local ports pg1 pg2 ha n1 n1o n1s n2 n2o n2s
  read -r pg1 pg2 ha n1 n1o n1s n2 n2o n2s <<<"$(free_ports 9)"
  local d1="$dir/pg1" d2="$dir/pg2"

  log "$mode: primary on $pg1, synchronous standby on $pg2, HAProxy on $ha"
  install -d -o postgres -g postgres -m 700 "$d1"
  install -o postgres -g postgres -m 644 /dev/null "$dir/pg1.log"
  install -o postgres -g postgres -m 644 /dev/null "$dir/pg2.log"
  as_postgres "$pgbin/initdb" -D "$d1" -U postgres -A trust --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log"; return 1; }
  cat >> "$d1/postgresql.conf" <<EOF
port = $pg1
listen_addresses = '127.0.0.1'
unix_socket_directories = '$d1'
wal_level = replica
max_wal_senders = 4
wal_keep_size = '256MB'
hot_standby = on
synchronous_commit = on
max_connections = 100
EOF
  clusters+=("$d1")
  as_postgres "$pgbin/pg_ctl" -D "$d1" -l "$dir/pg1.log" -w -t 30 start >/dev/null || { cat "$dir/pg1.log"; return 1; }
  install -d -o postgres -g postgres -m 700 "$d2"
  as_postgres "$pgbin/pg_basebackup" -h 127.0.0.1 -p "$pg1" -U postgres -D "$d2" -R -X stream \
    --checkpoint=fast >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log"; return 1; }
  # The standby names itself (cluster_name is its walreceiver's
  # application_name) and, once promoted, waits for no standby of its own:
  # it runs alone until one is rebuilt, rather than blocking every commit.
  cat >> "$d2/postgresql.conf" <<EOF
port = $pg2
unix_socket_directories = '$d2'
cluster_name = 'pg2'
synchronous_standby_names = ''
EOF
  clusters+=("$d2")
  as_postgres "$pgbin/pg_ctl" -D "$d2" -l "$dir/pg2.log" -w -t 30 start >/dev/null || { cat "$dir/pg2.log"; return 1; }
  local q=("$psql_bin" -X -q -At -h 127.0.0.1 -U postgres)
  "${q[@]}" -p "$pg1" -d postgres -c "ALTER SYSTEM SET synchronous_standby_names = 'FIRST 1 (pg2)'" -c "SELECT pg_reload_conf()" >/dev/null \
    || return 1
  local state=""
  for _ in $(seq 1 50); do
    state="$("${q[@]}" -p "$pg1" -d postgres -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'pg2'")"
    [ "$state" = "sync" ] && break
    sleep 0.2
  done
  [ "$state" = "sync" ] || { echo "the standby is not synchronous (state '$state')"; return 1; }
  "${q[@]}" -p "$pg1" -d postgres -c "CREATE DATABASE esim" >/dev/null || return 1

  write_haproxy_cfg "$dir/haproxy.cfg" "$ha" "$pg1" "$pg2"
  "$haproxy_bin" -c -q -f "$dir/haproxy.cfg" || { echo "haproxy refused its configuration"; return 1; }
  "$haproxy_bin" -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
  pids+=($!)
  local ready=""
  for _ in $(seq 1 50); do
    ready="$("${q[@]}" -p "$ha" -d esim -c "SELECT NOT pg_is_in_recovery()" 2>/dev/null)"
    [ "$ready" = "t" ] && break
    sleep 0.2
  done
  [ "$ready" = "t" ] || { echo "HAProxy does not lead to the primary"; cat "$dir/haproxy.log"; return 1; }

  # --- the nodes ---
  local url="postgres://postgres@127.0.0.1:$ha/esim"
  local common=(
    ESIM__DATABASE__URL="$url" ESIM__RATE_LIMIT__BACKEND=memory ESIM__LOG__LEVEL=info
    ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT=100000000 ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT=100000000
    ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT=0 ESIM__SUPPLIER__REQUESTS_PER_SECOND=0
    ESIM__SIMULATORS__SUPPLIER_LATENCY_MS=20 ESIM__SUPPLIER__POLL_INTERVAL_MS=50
    ESIM__RECONCILER__INTERVAL_SECONDS=2 ESIM__RECONCILER__GRACE_SECONDS=1
    ESIM__OPERATOR__FOUR_EYES_CENTS=100000000000
  )
  # The nodes run in the scenario's folder: the binary's own embedded
  # defaults apply, not a ./config of whatever folder this was started from.
  cd "$dir" || return 1
  env "${common[@]}" "$bin" migrate >"$dir/migrate.log" 2>&1 || { cat "$dir/migrate.log"; return 1; }
  local node_pids=()
  env "${common[@]}" ESIM__NODE__ID=failover-1 ESIM__HTTP__PUBLIC_ADDR="127.0.0.1:$n1" \
    ESIM__HTTP__OPERATOR_ADDR="127.0.0.1:$n1o" ESIM__SIMULATORS__ADDR="127.0.0.1:$n1s" \
    "$bin" serve >"$dir/node1.log" 2>&1 &
  node_pids+=($!); pids+=($!)
  env "${common[@]}" ESIM__NODE__ID=failover-2 ESIM__HTTP__PUBLIC_ADDR="127.0.0.1:$n2" \
    ESIM__HTTP__OPERATOR_ADDR="127.0.0.1:$n2o" ESIM__SIMULATORS__ADDR="127.0.0.1:$n2s" \
    "$bin" serve >"$dir/node2.log" 2>&1 &
  node_pids+=($!); pids+=($!)
  local port
  for port in "$n1" "$n2"; do
    local up=""
    for _ in $(seq 1 150); do
      curl -sf "http://127.0.0.1:$port/partner/v1/health" >/dev/null && { up=1; break; }
      sleep 0.2
    done
    [ -n "$up" ] || { echo "node on $port did not come up"; tail -20 "$dir"/node*.log; return 1; }
  done

  # --- the drive and the fault ---
  mkdir -p "$dir/events"
  python3 "$root/driver.py" --dir "$dir" --http-timeout "$http_timeout" --recover-within "$recover_within" \
    --node "http://127.0.0.1:$n1,http://127.0.0.1:$n1o,http://127.0.0.1:$n1s" \
    --node "http://127.0.0.1:$n2,http://127.0.0.1:$n2o,http://127.0.0.1:$n2s" \
    --psql "${q[*]} -p $pg2 -d esim" --mode "$mode" >"$dir/driver.log" 2>&1 &
  local driver=$!
  pids+=($driver)
  # Wait for the driver's partners and its first orders, then 6 s of load.
  for _ in $(seq 1 300); do [ -f "$dir/events/driving" ] && break; kill -0 $driver 2>/dev/null || break; sleep 0.1; done
  [ -f "$dir/events/driving" ] || { echo "the driver did not start"; cat "$dir/driver.log"; return 1; }
  sleep 6
  check_keepalive "$dir" "$ha" before || return 1
  local pm
  pm="$(head -1 "$d1/postmaster.pid")"
  if [ "$mode" = kill ]; then
    date +%s.%N > "$dir/events/fault"
    as_postgres "$pgbin/pg_ctl" -D "$d1" -m immediate stop >/dev/null || { echo "pg_ctl stop failed"; return 1; }
  else
    date +%s.%N > "$dir/events/fault"
    # The postmaster first, so it forks nothing new, then every backend.
    kill -STOP "$pm" && kill -STOP $(pgrep -P "$pm")
  fi
  echo "primary $([ "$mode" = kill ] && echo killed || echo frozen) at $(cat "$dir/events/fault")"
  sleep 2
  date +%s.%N > "$dir/events/promote"
  as_postgres "$pgbin/pg_ctl" -D "$d2" -w -t 30 promote >/dev/null || { echo "promotion failed"; cat "$dir/pg2.log"; return 1; }
  date +%s.%N > "$dir/events/promoted"
  echo "standby promoted at $(cat "$dir/events/promoted")"
  # Keep driving 12 s after the promotion, then let the driver settle and check.
  sleep 12
  touch "$dir/events/stop"
  local status=0
  wait $driver || status=$?
  cat "$dir/driver.log"
  [ "$status" -eq 0 ] || { echo "the driver's checks failed"; return 1; }

  # --- the nodes lived through it ---
  local pid
  for pid in "${node_pids[@]}"; do
    kill -0 "$pid" 2>/dev/null || { echo "node process $pid died"; return 1; }
  done
  for f in "$dir/node1.log" "$dir/node2.log"; do
    [ "$(grep -c 'node starting' "$f")" -eq 1 ] || { echo "$f: the node started more than once"; return 1; }
    if grep -qi 'panick' "$f"; then echo "$f: a panic"; grep -i -m3 'panick' "$f"; return 1; fi
  done

  # --- the service's own verdict on money, across both nodes, after it ---
  log "$mode: loadtest across both nodes on the promoted primary"
  "$bin" loadtest --public-url "http://127.0.0.1:$n1,http://127.0.0.1:$n2" --operator-url "http://127.0.0.1:$n1o" \
    --partners 2 --count 200 --concurrency 8 --duplicate-fraction 0.1 --race-fraction 0.05 \
    --settle-timeout 60 >"$dir/loadtest.log" 2>&1
  local lt=$?
  grep -E 'PASS|FAIL|accepted' "$dir/loadtest.log" | tail -5
  [ "$lt" -eq 0 ] || { echo "loadtest after the failover failed"; tail -30 "$dir/loadtest.log"; return 1; }

  # The connections opened to the promoted primary are armed too.
  check_keepalive "$dir" "$ha" after || return 1

  # Both nodes stop cleanly (SIGTERM) within 20 s.
  for pid in "${node_pids[@]}"; do kill -TERM "$pid"; done
  for pid in "${node_pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && { echo "node $pid did not stop on SIGTERM"; return 1; }
  done
  return 0
}

# --- the driver: a partner's view of the run, and the checks ----------------
cat > "$root/driver.py" <<'PY'
"""Orders and deposits on two nodes through a failover; then the checks."""
import argparse, collections, http.client, json, os, random, shlex, subprocess, sys, threading, time, uuid
from urllib.parse import urlsplit

p = argparse.ArgumentParser()
p.add_argument("--dir", required=True)
p.add_argument("--node", action="append", required=True, help="public,operator,simulator base URLs")
p.add_argument("--psql", required=True, help="psql command line for the promoted primary")
p.add_argument("--mode", required=True)
p.add_argument("--http-timeout", type=float, default=15)
p.add_argument("--recover-within", type=float, default=15)
p.add_argument("--workers-per-node", type=int, default=3)
p.add_argument("--partners", type=int, default=4)
args = p.parse_args()
EVENTS = os.path.join(args.dir, "events")
NODES = [dict(zip(("public", "operator", "sim"), n.split(","))) for n in args.node]
TOKEN = "dev-operator-token-change-me"
PLAN = "pl_fr_1gb_7d"
lock = threading.Lock()
answers = []          # (node, sent, received, status, code): every order request
health = []           # (node, time, status)
acked = {}            # key -> set of order ids answered 200/202
key_partner = {}      # key -> partner index
unexpected = []       # answers that are neither success nor retryable
unresolved = []       # keys never answered for sure
deposits_paid = {}    # deposit id -> (partner index, cents)
deposit_notes = collections.Counter()
stop = threading.Event()
give_up = threading.Event()


class Client:
    """One keep-alive connection to one base URL, remade after any error."""

    def __init__(self, base, timeout):
        u = urlsplit(base)
        self.host, self.port, self.timeout, self.conn = u.hostname, u.port, timeout, None

    def call(self, method, path, body=None, headers=None):
        """(status, json body) or raises OSError / http.client errors."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        data = None if body is None else json.dumps(body).encode()
        try:
            self.conn.request(method, path, body=data, headers=hdrs)
            resp = self.conn.getresponse()
            raw = resp.read()
        except Exception:
            self.conn.close()
            self.conn = None
            raise
        try:
            payload = json.loads(raw) if raw else None
        except ValueError:
            payload = None
        return resp.status, payload


def operator_setup():
    op = Client(NODES[0]["operator"], 30)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    run = uuid.uuid4().hex[:10]
    partners = []
    for n in range(args.partners):
        s, body = op.call("POST", "/operator/v1/partners", {"name": f"Failover {run} {n}", "slug": f"failover-{run}-{n}", "tier": "gold", "status": "live"}, auth)
        assert s == 201, (s, body)
        pid = body["id"]
        s, key = op.call("POST", f"/operator/v1/partners/{pid}/keys", {"mode": "live", "label": "failover"}, auth)
        assert s == 201, (s, key)
        s, body = op.call("POST", f"/operator/v1/partners/{pid}/movements", {"kind": "adjustment", "amount_cents": 100_000_000, "description": "failover funding"}, auth)
        assert s == 201, (s, body)
        partners.append({"id": pid, "auth": {"Authorization": f"Bearer {key['secret']}"}})
    return partners


def order_worker(node, partner_index, partners):
    client = Client(NODES[node]["public"], args.http_timeout)
    partner = partners[partner_index]
    while not stop.is_set():
        key = str(uuid.uuid4())
        with lock:
            key_partner[key] = partner_index
        while True:  # one key until a definite answer, as a partner retries
            sent = time.time()
            try:
                status, body = client.call("POST", "/partner/v1/orders", {"plan_id": PLAN, "quantity": 1}, {**partner["auth"], "Idempotency-Key": key})
                code = (body or {}).get("error", {}).get("code") if isinstance(body, dict) else None
            except TimeoutError:
                status, code = "timeout", None
            except Exception as e:  # refused, reset, closed: unknown
                status, code = "transport", type(e).__name__
            received = time.time()
            with lock:
                answers.append((node, sent, received, status, code))
            if status in (200, 202):
                with lock:
                    acked.setdefault(key, set()).add(body["id"])
                break
            if isinstance(status, int) and status < 500 and status not in (409, 429):
                with lock:
                    unexpected.append((key, status, body))
                break
            if give_up.is_set():
                with lock:
                    unresolved.append(key)
                return
            time.sleep(0.1)
        time.sleep(0.02)


def deposit_worker(node, partner_index, partners):
    client = Client(NODES[node]["public"], args.http_timeout)
    sim = Client(NODES[node]["sim"], args.http_timeout)
    partner = partners[partner_index]
    while not stop.is_set():
        time.sleep(0.7)
        cents = 10_000
        try:
            s, body = client.call("POST", "/partner/v1/deposits", {"amount_cents": cents}, partner["auth"])
        except Exception:
            deposit_notes["create unknown"] += 1
            continue
        if s != 201:
            deposit_notes[f"create {s}"] += 1
            continue
        dep = body["id"]
        try:
            s, _ = sim.call("POST", f"/sim/payments/deposits/{dep}/events", {"event": "paid", "amount_cents": cents})
        except Exception:
            s = None
        if s is None or s >= 300:
            deposit_notes["pay failed"] += 1
            continue
        with lock:
            deposits_paid[dep] = (partner_index, cents, node)


def health_poller(node):
    client = Client(NODES[node]["public"], 5)
    while not stop.is_set():
        t = time.time()
        try:
            s, body = client.call("GET", "/partner/v1/health")
            health.append((node, t, s, (body or {}).get("status")))
        except Exception:
            health.append((node, t, "transport", None))
        time.sleep(0.2)


def event(name):
    path = os.path.join(EVENTS, name)
    return float(open(path).read()) if os.path.exists(path) else None


def pages(client, path, auth):
    rows, cursor = [], None
    while True:
        sep = "&" if "?" in path else "?"
        s, page = client.call("GET", path + (f"{sep}cursor={cursor}" if cursor else ""), headers=auth)
        assert s == 200, (path, s, page)
        rows += page["data"]
        cursor = page.get("next_cursor")
        if not cursor:
            return rows


def psql(sql):
    out = subprocess.run(shlex.split(args.psql) + ["-F", "\t", "-c", sql], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"psql failed: {out.stderr}")
    return [line.split("\t") for line in out.stdout.splitlines() if line]


def main():
    partners = operator_setup()
    threads = []
    for node in range(len(NODES)):
        for w in range(args.workers_per_node):
            threads.append(threading.Thread(target=order_worker, args=(node, (node * args.workers_per_node + w) % len(partners), partners)))
        threads.append(threading.Thread(target=deposit_worker, args=(node, node % len(partners), partners)))
        threads.append(threading.Thread(target=health_poller, args=(node,), daemon=True))
    for t in threads:
        t.start()
    open(os.path.join(EVENTS, "driving"), "w").close()
    started = time.time()
    while not os.path.exists(os.path.join(EVENTS, "stop")) and time.time() - started < 120:
        time.sleep(0.1)
    stop.set()
    deadline = time.time() + 30
    for t in threads:
        if not t.daemon:
            t.join(max(0.1, deadline - time.time()))
    give_up.set()
    for t in threads:
        if not t.daemon:
            t.join(5)
    failures = figures(partners)
    failures += check(partners)
    if failures:
        print("FAIL")
        for f in failures:
            print("  -", f)
        sys.exit(1)
    print("PASS")


def figures(partners):
    failures = []
    fault, promote, promoted = event("fault"), event("promote"), event("promoted")
    if fault is None or promote is None:
        return ["the fault or the promotion never happened"]
    ok = lambda a: a[3] in (200, 202)
    after = [a for a in answers if a[2] >= fault]
    per_node = {}
    for node in range(len(NODES)):
        mine = sorted((a for a in after if a[0] == node), key=lambda a: a[2])
        first_bad = next((a for a in mine if not ok(a)), None)
        first_ok_after_promote = next((a for a in mine if ok(a) and a[2] >= promote), None)
        last_ok_before = max((a[2] for a in answers if a[0] == node and ok(a) and a[2] < fault), default=None)
        recovered = first_ok_after_promote[2] if first_ok_after_promote else None
        window = [a for a in mine if recovered is None or a[2] <= recovered]
        bad = [a for a in window if not ok(a)]
        codes = collections.Counter(f"{a[3]} {a[4]}" if a[4] else str(a[3]) for a in bad)
        degraded = [h for h in health if h[0] == node and h[1] >= fault and h[2] != 200]
        per_node[node] = {
            "outage_s": round(recovered - (last_ok_before or fault), 2) if recovered else None,
            "first_failure_after_fault_s": round(first_bad[1] - fault, 2) if first_bad else None,
            "first_accept_after_promotion_s": round(recovered - promote, 2) if recovered else None,
            "failed_answers": len(bad),
            "5xx": sum(1 for a in bad if isinstance(a[3], int) and a[3] >= 500),
            "by_status": dict(codes),
            "slowest_s": round(max((a[2] - a[1] for a in window), default=0), 2),
            "health_not_ok": len(degraded),
            "health_statuses": dict(collections.Counter(f"{h[2]} {h[3]}" for h in degraded)),
        }
        if recovered is None or recovered - promote > args.recover_within:
            failures.append(f"node {node + 1} did not accept an order within {args.recover_within:.0f} s of the promotion")
    slowest = max((a[2] - a[1] for a in answers), default=0)
    hung = [a for a in answers if a[3] == "timeout" or a[2] - a[1] >= args.http_timeout]
    if hung:
        failures.append(f"{len(hung)} requests hung past the HTTP time-out of {args.http_timeout:.0f} s")
    summary = {
        "mode": args.mode,
        "promote_took_s": round(promoted - promote, 2) if promoted else None,
        "orders_acknowledged": len(acked),
        "requests": len(answers),
        "slowest_request_s": round(slowest, 2),
        "deposits_paid": len(deposits_paid),
        "deposit_notes": dict(deposit_notes),
        "nodes": per_node,
    }
    print(json.dumps(summary, indent=1))
    with open(os.path.join(args.dir, "figures.json"), "w") as f:
        json.dump(summary, f)
    o = [per_node[n]["outage_s"] or 0 for n in per_node]
    r = [per_node[n]["first_accept_after_promotion_s"] or 0 for n in per_node]
    print(f"FIGURES {args.mode}: outage seen by clients {max(o):.1f} s (per node {', '.join(f'{x:.1f}' for x in o)}); "
          f"5xx during it {sum(per_node[n]['5xx'] for n in per_node)} (+{sum(per_node[n]['failed_answers'] - per_node[n]['5xx'] for n in per_node)} transport errors); "
          f"first accepted order after promotion {max(r):.1f} s (per node {', '.join(f'{x:.1f}' for x in r)}); "
          f"orders acknowledged {len(acked)}; slowest request {slowest:.1f} s; deposits paid {len(deposits_paid)}")
    return failures


def check(partners):
    failures = []
    if unexpected:
        failures.append(f"{len(unexpected)} unexpected answers, e.g. {unexpected[:3]}")
    if unresolved:
        failures.append(f"{len(unresolved)} Idempotency-Keys never answered for sure")
    doubled = {k: v for k, v in acked.items() if len(v) > 1}
    if doubled:
        failures.append(f"{len(doubled)} keys answered with two orders")
    client = Client(NODES[0]["public"], 30)
    # Settle: no order processing, every paid deposit credited (lost webhooks
    # are redelivered, and the deposit reconciler asks too).
    deadline = time.time() + 60
    pending = {}
    while time.time() < deadline:
        processing = sum(len(pages_once(client, "/partner/v1/orders?status=processing&limit=1", p["auth"])) for p in partners)
        pending = {}
        for dep, (pi, cents, node) in deposits_paid.items():
            s, body = client.call("GET", f"/partner/v1/deposits/{dep}", headers=partners[pi]["auth"])
            if s != 200 or body["status"] != "credited":
                pending[dep] = (body or {}).get("status")
                Client(NODES[node]["sim"], 10).call("POST", f"/sim/payments/deposits/{dep}/events", {"event": "redeliver"})
        if processing == 0 and not pending:
            break
        time.sleep(1)
    else:
        failures.append(f"not settled after 60 s: orders processing or deposits not credited {pending}")
    acked_by_partner = collections.defaultdict(dict)
    for key, ids in acked.items():
        acked_by_partner[key_partner[key]][next(iter(ids))] = key
    for pi, partner in enumerate(partners):
        pid = partner["id"]
        mine = acked_by_partner[pi]
        orders = {r[0]: {"key": r[1], "status": r[2]} for r in psql(f"SELECT id, idempotency_key, status FROM orders WHERE partner_id = '{pid}'")}
        ledger = [{"seq": int(r[0]), "kind": r[1], "amount": int(r[2]), "after": int(r[3]), "order": r[4], "deposit": r[5]}
                  for r in psql(f"SELECT seq, kind, amount_cents, balance_after_cents, coalesce(order_id, ''), coalesce(deposit_id, '') FROM ledger_entries WHERE partner_id = '{pid}' ORDER BY seq")]
        float_cents = int(psql(f"SELECT balance_cents FROM floats WHERE partner_id = '{pid}' AND mode = 'live'")[0][0])
        s, bal = client.call("GET", "/partner/v1/balance", headers=partner["auth"])
        api_orders = {o["id"]: o for o in pages(client, "/partner/v1/orders?limit=200", partner["auth"])}
        missing = [oid for oid, key in mine.items() if oid not in orders or orders[oid]["key"] != key]
        if missing:
            failures.append(f"{pid}: {len(missing)} acknowledged orders missing after the failover, e.g. {missing[:3]}")
        unseen = [oid for oid in orders if oid not in mine]
        if unseen:
            failures.append(f"{pid}: {len(unseen)} orders the partner never saw acknowledged, e.g. {unseen[:3]}")
        if set(api_orders) != set(orders):
            failures.append(f"{pid}: GET /orders lists {len(api_orders)} orders, the database has {len(orders)}")
        purchases = collections.Counter(r["order"] for r in ledger if r["kind"] == "purchase")
        twice = [o for o, n in purchases.items() if n > 1]
        if twice:
            failures.append(f"{pid}: {len(twice)} orders charged twice, e.g. {twice[:3]}")
        if set(purchases) != set(orders):
            failures.append(f"{pid}: purchase rows for {len(purchases)} orders, {len(orders)} orders")
        total, seq_ok, negative = 0, True, 0
        for i, row in enumerate(ledger, 1):
            total += row["amount"]
            seq_ok &= row["seq"] == i and row["after"] == total
            negative += row["after"] < 0
        if not seq_ok or negative:
            failures.append(f"{pid}: ledger sequence or running balance broken (negative rows {negative})")
        if not (float_cents == total == (bal or {}).get("balance_cents")):
            failures.append(f"{pid}: float {float_cents}, ledger sum {total}, GET /balance {(bal or {}).get('balance_cents')}")
        processing = [o for o, v in orders.items() if v["status"] == "processing"]
        if processing:
            failures.append(f"{pid}: {len(processing)} orders still processing")
        credits = collections.Counter(r["deposit"] for r in ledger if r["kind"] == "deposit")
        if any(n > 1 for n in credits.values()):
            failures.append(f"{pid}: a deposit credited twice")
        for dep, (owner, cents, _) in deposits_paid.items():
            if owner == pi and credits.get(dep) != 1:
                failures.append(f"{pid}: paid deposit {dep} credited {credits.get(dep, 0)} times")
    return failures


def pages_once(client, path, auth):
    s, page = client.call("GET", path, headers=auth)
    assert s == 200, (path, s, page)
    return page["data"]


main()
PY

for mode in $scenarios; do
  case "$mode" in kill | freeze) ;; *) die "unknown scenario $mode (kill or freeze)" ;; esac
  started=$SECONDS
  if scenario "$mode"; then
    echo "$mode passed in $((SECONDS - started))s"
  else
    echo "$mode FAILED after $((SECONDS - started))s (logs in $root/$mode)"
    failed=1
  fi
  # Each scenario leaves its processes and clusters behind it: end them now.
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  done
  pids=()
  for data in "${clusters[@]}"; do stop_cluster "$data"; done
  clusters=()
  [ "$failed" -eq 0 ] || break
done

if [ "$failed" -ne 0 ]; then
  log "failover test FAILED"
  exit 1
fi
log "failover test passed"
