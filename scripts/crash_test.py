#!/usr/bin/env python3
"""Crash test: kill -9 the real server while a partner orders and pays, then check the money.

    scripts/crash_test.py --bin target/debug/esim-reseller \\
        --database-url "sqlite://$PWD/crash/crash.db?mode=rwc"
    scripts/crash_test.py --bin target/debug/esim-reseller --nodes 3 \\
        --database-url postgres://postgres@127.0.0.1:5432/crash --redis-url redis://127.0.0.1:6379

What it does (docs/reliability.md has the long version):

1. Starts a simulator host (a `serve` with its own throwaway SQLite database,
   provisioning off) that plays the outside world: the eSIM supplier and the
   payment provider. It is never killed, like a real supplier is not killed
   when we crash. Payment webhooks are relayed by this script to the nodes
   under test, and redelivered until a node answers 2xx, as the provider does.
2. Starts one node (or three on one PostgreSQL and one Redis) on the database
   under test, with a short reconciler interval and a short provisioning lease.
3. Creates a gold partner with a live key, funds it with a wire deposit, and
   drives it from threads: orders with an Idempotency-Key, duplicate retries
   of answered keys, same-key races, and crypto deposits paid in one or two
   steps. A request that fails on the client side (connection refused or
   reset, time-out) is UNKNOWN and is sent again later with the same key and
   body until it gets a definite answer; a 5xx or a 429 is sent again too.
4. kill -9's a node several times (during an acceptance burst, while orders
   are provisioning, right after a deposit's payment webhook, at random) and
   restarts it on the same database.
5. Lets everything settle, replays answered keys once more, then checks the
   invariants against the database (sqlite3 or psql) and the API, and prints
   a summary. Exit status 1 on any violation or if a node did not come back.

With --nodes 3 it also checks that a normal (not lifted) write limit holds
across the nodes within each window, that a key revoked and an account
suspended through one node are refused by every node at once (the nodes
cache keys for an hour, so only the announcement can do it; the summary gives
each node's delay), and that no order is provisioned by two
nodes at once: node 3 runs with provisioning off (its orders are stranded and
re-driven by the others' reconcilers), and every node reaches the supplier
through its own tap in this script, which records which node asked the
supplier about which unit and when.

Python 3 standard library only.
"""

import argparse
import collections
import hashlib
import heapq
import hmac
import http.client
import http.server
import itertools
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

OPERATOR_TOKEN = "crash-test-operator-token-0123456789"
CURSOR_SECRET = "crash-test-cursor-secret-0123456789"
WEBHOOK_SECRET = "crash-test-webhook-secret"
PLANS = ["pl_fr_500mb_7d", "pl_fr_1gb_7d", "pl_de_500mb_7d", "pl_de_1gb_7d", "pl_de_5gb_30d"]
RECONCILER_INTERVAL = 2
SUPPLIER_DEADLINE_SECONDS = 92  # the spec's provisioning deadline
SUPPLIER_LATENCY_MS = 300
SUPPLIER_FAIL_RATE = 0.03
CLIENT_TIMEOUT = 10.0
SAFE_ID = re.compile(r"^[A-Za-z0-9_-]+$")


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


class Unknown(Exception):
    """The request failed on the client side: we do not know what the server did."""

    def __init__(self, text, refused):
        super().__init__(text)
        # Connection refused: nothing listened (the node was down).
        self.refused = refused


def request(method, url, body=None, headers=None, timeout=CLIENT_TIMEOUT):
    """One HTTP request on a fresh connection: (status, headers, json or None)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Connection": "close"}
        if data is not None:
            sent["Content-Type"] = "application/json"
        sent.update(headers or {})
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path, body=data, headers=sent)
        response = conn.getresponse()
        raw = response.read()
        received = {k.lower(): v for k, v in response.getheaders()}
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return response.status, received, parsed
    except (OSError, http.client.HTTPException) as err:
        raise Unknown(f"{type(err).__name__}: {err}", isinstance(err, ConnectionRefusedError)) from None
    finally:
        conn.close()


def free_ports(count, rng):
    """Distinct ports free right now, below the kernel's ephemeral range so that
    no outgoing connection takes one while its node is down between a kill and
    its restart."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    ports = []
    while len(ports) < count:
        port = rng.randrange(20000, max(20001, min(low, 32768)))
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


# --------------------------------------------------------------------------
# Processes


class Server:
    """One `serve` process that can be killed and started again on the same ports."""

    def __init__(self, name, binary, env, workdir, public_port, operator_port):
        self.name = name
        self.binary = binary
        self.env = env
        self.workdir = workdir
        self.public = f"http://127.0.0.1:{public_port}"
        self.operator = f"http://127.0.0.1:{operator_port}"
        self.proc = None
        self.run = 0
        self.logs = []
        self.up = False
        self.kills = []  # times of kill -9
        self.starts = []  # (run, start time)

    def start(self):
        self.run += 1
        path = os.path.join(self.workdir, f"{self.name}.run{self.run}.log")
        self.logs.append(path)
        with open(path, "wb") as out:
            self.proc = subprocess.Popen(
                [self.binary, "serve"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # Away from any config/ folder: the binary's own compiled-in defaults apply.
                cwd=self.workdir,
                start_new_session=True,
            )
        self.starts.append((self.run, time.time()))

    def wait_healthy(self, seconds=40):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                status, _, body = request("GET", f"{self.public}/partner/v1/health", timeout=2)
                if status == 200 and body and body.get("status") == "ok":
                    self.up = True
                    return True
            except Unknown:
                pass
            time.sleep(0.1)
        return False

    def kill9(self):
        self.up = False
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.kills.append(time.time())

    def stop(self):
        self.up = False
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def base_env(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ESIM_") and k != "RUST_LOG"}
    env.update(
        {
            "ESIM__OPERATOR__TOKEN": OPERATOR_TOKEN,
            # The drills fund partners with more than the four-eyes limit;
            # four eyes are the API tests' subject, not this one's.
            "ESIM__OPERATOR__FOUR_EYES_CENTS": "100000000000",
            "ESIM__CURSOR__SECRET": CURSOR_SECRET,
            "ESIM__PAYMENTS__WEBHOOK_SECRET": WEBHOOK_SECRET,
            # Nodes run with the simulators off, where serve refuses the
            # public development secrets: the simulator host and the nodes
            # share these instead.
            "ESIM__PAYMENTS__API_KEY": "crash-test-payments-api-key",
            "ESIM__SUPPLIER__ACCESS_CODE": "crash-test-access-code",
            "ESIM__SUPPLIER__SECRET": "crash-test-supplier-secret",
            "ESIM__LOG__FORMAT": "json",
        }
    )
    env.update(extra)
    return env


# --------------------------------------------------------------------------
# Supplier tap (three nodes): which node asked the supplier about which unit, when


class Tap:
    """Forwards one node's supplier calls to the simulator host and records them."""

    def __init__(self, node_index, port, upstream_port, nodes, records, lock):
        self.node_index = node_index
        tap = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                started = time.time()
                run = nodes[tap.node_index].run
                forward = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "connection", "content-length")
                }
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
                    conn.request("POST", self.path, body=body, headers=forward)
                    response = conn.getresponse()
                    answer = response.read()
                    status = response.status
                    conn.close()
                except (OSError, http.client.HTTPException):
                    status, answer = 502, b"{}"
                ended = time.time()
                try:
                    sent = json.loads(body or b"{}")
                    got = json.loads(answer or b"{}")
                except ValueError:
                    sent, got = {}, {}
                if not isinstance(got, dict):
                    got = {}
                record = None
                if self.path.endswith("/esim/order") and isinstance(sent, dict):
                    order_no = (got.get("obj") or {}).get("orderNo") if got.get("success") else None
                    record = ("place", sent.get("transactionId"), order_no)
                elif self.path.endswith("/esim/query") and isinstance(sent, dict):
                    record = ("query", None, sent.get("orderNo"))
                if record:
                    with lock:
                        records.append((tap.node_index, run, started, ended) + record)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        class Quiet(http.server.ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a node killed mid-request resets its connection

        self.server = Quiet(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# --------------------------------------------------------------------------
# The database under test, read directly


class Database:
    def __init__(self, url):
        self.url = url
        if url.startswith("sqlite:"):
            self.kind = "sqlite"
            rest = url[len("sqlite:") :]
            rest = rest[2:] if rest.startswith("//") else rest
            self.path = os.path.abspath(rest.split("?")[0])
            query = rest.split("?", 1)[1] if "?" in rest else "mode=rwc"
            # The nodes run in another folder: hand them an absolute path.
            self.url = f"sqlite://{self.path}?{query}"
        elif url.startswith(("postgres://", "postgresql://")):
            self.kind = "postgres"
        else:
            raise SystemExit(f"unsupported database URL: {url}")

    def rows(self, sql):
        """Every row of a query, each value a string ('' for NULL)."""
        if self.kind == "sqlite":
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30)
            try:
                return [["" if v is None else str(v) for v in row] for row in conn.execute(sql)]
            finally:
                conn.close()
        out = subprocess.run(
            ["psql", self.url, "-X", "-q", "-At", "-F", "\x1f", "-v", "ON_ERROR_STOP=1", "-c", sql],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode != 0:
            raise RuntimeError(f"psql failed: {out.stderr.strip()}")
        return [line.split("\x1f") for line in out.stdout.splitlines() if line != ""]

    def scalar(self, sql):
        rows = self.rows(sql)
        return rows[0][0] if rows else ""


# --------------------------------------------------------------------------
# What the partner (this script) knows


class KeyState:
    __slots__ = (
        "key",
        "body",
        "order_ids",
        "final",
        "accepted_node",
        "answers",
        "unknowns",
        "retryable",
        "had_unknown",
        "partner",
    )

    def __init__(self, key, body, partner):
        self.key = key
        self.body = body
        self.partner = partner
        self.order_ids = set()
        self.final = None  # ("order", id) or ("refused", status, code)
        self.accepted_node = None
        self.answers = []  # (status, code or order id, replayed)
        self.unknowns = 0
        self.retryable = 0
        self.had_unknown = False


class Partner:
    def __init__(self, pid, secret, label):
        self.id = pid
        self.secret = secret
        self.label = label

    def auth(self):
        return {"Authorization": f"Bearer {self.secret}"}


class Deposit:
    def __init__(self, dep_id, requested):
        self.id = dep_id
        self.requested = requested
        self.events = []
        self.expected_credit = None  # cents once a final payment event was sent
        self.paid_so_far = 0


class Run:
    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.keys = {}
        self.accepted_keys = collections.defaultdict(list)
        self.retry_heap = []
        self.retry_seq = itertools.count()
        self.key_seq = itertools.count(1)
        self.run_id = f"{int(time.time())}{self.rng.randrange(10**6):06d}"
        self.stats = collections.Counter()
        self.inflight = 0
        self.deposits = {}
        self.relay_heap = []
        self.violations = []
        self.notes = []
        self.stop_new = threading.Event()
        self.stop_all = threading.Event()
        self.burst = threading.Event()
        self.rr = itertools.count()
        self.nodes = []
        self.kill_log = []
        self.downtimes = []  # (killed at, healthy again at), any node
        self.tap_records = []
        self.tap_lock = threading.Lock()

    # ---- helpers

    def violation(self, text):
        with self.lock:
            self.violations.append(text)
        log(f"VIOLATION: {text}")

    def next_node(self):
        return self.nodes[next(self.rr) % len(self.nodes)]

    def operator(self, method, path, body=None):
        for node in itertools.chain(self.nodes, self.nodes):
            if not node.up:
                continue
            try:
                return request(
                    method,
                    f"{node.operator}/operator/v1{path}",
                    body,
                    {"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                )
            except Unknown:
                continue
        raise RuntimeError(f"no node answered the operator call {method} {path}")

    def first_up(self):
        for node in self.nodes:
            if node.up:
                return node
        return self.nodes[0]

    # ---- orders

    def new_key(self, partner):
        n = next(self.key_seq)
        key = f"crash-{self.run_id}-{n:06d}"
        body = json.dumps(
            {
                "plan_id": self.rng.choice(PLANS),
                "quantity": self.rng.choice([1, 1, 1, 2, 3]),
                "metadata": {"crash_test": self.run_id, "n": n},
            },
            separators=(",", ":"),
        ).encode()
        state = KeyState(key, body, partner)
        with self.lock:
            self.keys[key] = state
        return state

    def schedule_retry(self, state, delay):
        with self.lock:
            heapq.heappush(self.retry_heap, (time.time() + delay, next(self.retry_seq), state.key))

    def due_retry(self):
        with self.lock:
            if self.retry_heap and self.retry_heap[0][0] <= time.time():
                return self.keys[heapq.heappop(self.retry_heap)[2]]
        return None

    def pending_retries(self):
        with self.lock:
            return len(self.retry_heap)

    def send_order(self, state, node=None, kind="new"):
        node = node or self.next_node()
        headers = dict(state.partner.auth())
        headers["Idempotency-Key"] = state.key
        with self.lock:
            self.inflight += 1
            self.stats[f"order_requests_{kind}"] += 1
        try:
            status, got, body = request(
                "POST", f"{node.public}/partner/v1/orders", state.body, headers
            )
        except Unknown as err:
            with self.lock:
                self.inflight -= 1
                self.stats["order_unknown"] += 1
                self.stats["order_unknown_refused" if err.refused else "order_unknown_lost"] += 1
                state.unknowns += 1
                state.had_unknown = True
            self.schedule_retry(state, self.rng.uniform(0.3, 1.5))
            # A partner backs off a little when the service does not answer.
            time.sleep(self.rng.uniform(0.1, 0.4))
            return
        with self.lock:
            self.inflight -= 1
        self.classify(state, node, status, got, body, kind)

    def classify(self, state, node, status, got, body, kind):
        replayed = got.get("idempotency-replayed") == "true"
        tag = "order" if state.partner.label == "gold" else state.partner.label
        if status in (200, 202) and isinstance(body, dict) and body.get("object") == "order":
            order_id = body.get("id")
            with self.lock:
                state.answers.append((status, order_id, replayed))
                first = state.final is None
                state.order_ids.add(order_id)
                if state.final is not None and state.final != ("order", order_id):
                    previous = state.final
                else:
                    previous = None
                state.final = ("order", order_id)
                if status == 202:
                    self.stats[f"{tag}_202"] += 1
                    if state.accepted_node is None:
                        state.accepted_node = node.name
                else:
                    self.stats[f"{tag}_200_replay"] += 1
                if first:
                    self.accepted_keys[state.partner.id].append(state.key)
                    if state.had_unknown:
                        self.stats["unknown_resolved_" + ("replay" if replayed else "fresh")] += 1
            if status == 200 and not replayed:
                self.violation(f"key {state.key}: 200 without Idempotency-Replayed")
            if status == 202 and not first:
                with self.lock:
                    self.stats["second_202_same_order"] += 1
            if previous is not None:
                self.violation(f"key {state.key}: answered {previous} and then order {order_id}")
            return
        code = body.get("error", {}).get("code") if isinstance(body, dict) else None
        if status == 429 and kind == "rate":
            # The write-limit check gives up on a limited key (a 429 binds nothing).
            with self.lock:
                self.stats["rate_429"] += 1
                state.answers.append((status, code, replayed))
                state.final = ("refused", status, code)
            return
        if status == 429 or status >= 500:
            with self.lock:
                self.stats[f"{tag}_{status}"] += 1
                state.retryable += 1
            self.schedule_retry(state, self.rng.uniform(0.3, 1.5))
            return
        with self.lock:
            self.stats[f"{tag}_{status}_{code}"] += 1
            state.answers.append((status, code, replayed))
            previous = state.final
            if previous is None:
                state.final = ("refused", status, code)
        if previous is not None and previous != ("refused", status, code):
            self.violation(f"key {state.key}: answered {previous}, then {status} {code}")

    def order_worker(self, partner):
        while not self.stop_all.is_set():
            state = self.due_retry()
            if state is not None:
                self.send_order(state, kind="retry")
                continue
            if self.stop_new.is_set():
                time.sleep(0.05)
                continue
            roll = self.rng.random()
            with self.lock:
                answered = self.accepted_keys[partner.id]
                key = self.rng.choice(answered) if answered else None
            if roll < 0.08 and key:
                self.send_order(self.keys[key], kind="duplicate")
            elif roll < 0.12:
                state = self.new_key(partner)
                twin = threading.Thread(target=self.send_order, args=(state, None, "race"))
                twin.start()
                self.send_order(state, kind="race")
                twin.join()
            else:
                self.send_order(self.new_key(partner))
            if not self.burst.is_set():
                time.sleep(self.rng.uniform(0.02, 0.08))

    def burst_worker(self, partner, count):
        for _ in range(count):
            if self.stop_new.is_set():
                return
            self.send_order(self.new_key(partner), kind="burst")

    # ---- deposits

    def open_deposit(self, partner, node=None):
        node = node or self.next_node()
        amount = self.rng.choice([10000, 20000, 25000, 50000])
        with self.lock:
            self.stats["deposit_create_requests"] += 1
        try:
            status, _, body = request(
                "POST", f"{node.public}/partner/v1/deposits", {"amount_cents": amount}, partner.auth()
            )
        except Unknown:
            with self.lock:
                self.stats["deposit_create_unknown"] += 1
            return None
        if status != 201 or not isinstance(body, dict):
            with self.lock:
                self.stats[f"deposit_create_{status}"] += 1
            return None
        deposit = Deposit(body["id"], amount)
        with self.lock:
            self.deposits[deposit.id] = deposit
            self.stats["deposits_opened"] += 1
        return deposit

    def sim_event(self, deposit, event, amount=0):
        """Tells the simulated provider about a payment; queues its webhook for relay."""
        status, _, body = request(
            "POST",
            f"{self.sim_url}/sim/payments/deposits/{deposit.id}/events",
            {"event": event, "amount_cents": amount},
        )
        if status != 200 or not isinstance(body, dict) or "delivered" not in body:
            raise RuntimeError(f"simulator refused {event} for {deposit.id}: {status} {body}")
        with self.lock:
            deposit.events.append((event, amount))
            if event in ("partial", "paid", "paid_late"):
                deposit.paid_so_far += amount
            if event in ("paid", "paid_late"):
                deposit.expected_credit = deposit.paid_so_far
            self.stats[f"deposit_event_{event}"] += 1
        return body["delivered"]

    def relay(self, payload, node=None):
        """Delivers one webhook as the provider would; False when it must be redelivered."""
        node = node or self.next_node()
        raw = json.dumps(payload, separators=(",", ":")).encode()
        sig = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), raw, hashlib.sha256).hexdigest()
        with self.lock:
            self.stats["webhook_deliveries"] += 1
        try:
            status, _, _ = request(
                "POST", f"{node.public}/callbacks/btcpay", raw, {"BTCPay-Sig": sig}
            )
        except Unknown:
            status = 0
        if 200 <= status < 300:
            return True
        with self.lock:
            self.stats["webhook_redeliveries_needed"] += 1
        return False

    def queue_relay(self, payload, delay=0.0):
        with self.lock:
            heapq.heappush(self.relay_heap, (time.time() + delay, next(self.retry_seq), payload))

    def relay_worker(self):
        while not self.stop_all.is_set():
            item = None
            with self.lock:
                if self.relay_heap and self.relay_heap[0][0] <= time.time():
                    item = heapq.heappop(self.relay_heap)
            if item is None:
                time.sleep(0.05)
                continue
            if not self.relay(item[2]):
                self.queue_relay(item[2], self.rng.uniform(0.5, 2.0))

    def pending_relays(self):
        with self.lock:
            return len(self.relay_heap)

    def pay(self, deposit):
        """One of several payment stories, each ending in a final payment."""
        story = self.rng.choice(["paid", "partial_then_paid", "overpaid", "paid_late", "redelivered"])
        with self.lock:
            self.stats[f"deposit_story_{story}"] += 1
        if story == "partial_then_paid":
            first = deposit.requested // 2
            self.queue_relay(self.sim_event(deposit, "partial", first))
            self.queue_relay(self.sim_event(deposit, "paid", deposit.requested - first), 0.2)
        elif story == "overpaid":
            self.queue_relay(self.sim_event(deposit, "paid", deposit.requested + 700))
        elif story == "paid_late":
            self.queue_relay(self.sim_event(deposit, "paid_late", deposit.requested))
        elif story == "redelivered":
            payload = self.sim_event(deposit, "paid", deposit.requested)
            self.queue_relay(payload)
            self.queue_relay(self.sim_event(deposit, "redeliver"), 0.1)
            self.queue_relay(payload, 0.3)
        else:
            self.queue_relay(self.sim_event(deposit, "paid", deposit.requested))

    def deposit_worker(self, partner):
        while not self.stop_new.is_set():
            deposit = self.open_deposit(partner)
            if deposit is not None:
                self.pay(deposit)
            self.stop_new.wait(self.rng.uniform(0.8, 1.6))

    def chaos_worker(self):
        """Now and then the supplier refuses a few placements (refunds follow)."""
        while not self.stop_new.wait(self.rng.uniform(4, 7)):
            faults = {
                "latency_ms": self.args.supplier_latency_ms,
                "fail_rate": SUPPLIER_FAIL_RATE,
                "reject_next": self.rng.randint(1, 3),
            }
            try:
                request("POST", f"{self.sim_url}/sim/supplier/faults", faults)
                with self.lock:
                    self.stats["supplier_rejections_injected"] += faults["reject_next"]
            except Unknown:
                pass


# --------------------------------------------------------------------------
# Kills


def healing_bound(run, db, partner_ids):
    """Every order settled within the provisioning deadline plus one
    reconciler interval, not counting the time the nodes were down while it
    waited (plus a little slack for the kill itself)."""
    ids = ",".join(f"'{p}'" for p in partner_ids)
    if db.kind == "sqlite":
        epoch = "(julianday({}) - 2440587.5) * 86400.0"
    else:
        epoch = "extract(epoch from {})"
    rows = db.rows(
        f"SELECT id, {epoch.format('created_at')}, {epoch.format('completed_at')} FROM orders "
        f"WHERE partner_id IN ({ids}) AND completed_at IS NOT NULL"
    )
    slack = 3.0
    worst = 0.0
    past = []
    for order_id, created, completed in rows:
        created, completed = float(created), float(completed)
        down = sum(max(0.0, min(end, completed) - max(start, created)) for start, end in run.downtimes)
        took = completed - created - down
        worst = max(worst, took)
        if took > SUPPLIER_DEADLINE_SECONDS + RECONCILER_INTERVAL + slack:
            past.append((order_id, round(took, 1)))
    if past:
        run.violation(f"{len(past)} orders settled past the bound (e.g. {past[:3]})")
    return {
        "orders": len(rows),
        "bound_seconds": SUPPLIER_DEADLINE_SECONDS + RECONCILER_INTERVAL,
        "slowest_seconds_net_of_downtime": round(worst, 1),
        "past_the_bound": len(past),
    }


def processing_count(db, partner_ids):
    ids = ",".join(f"'{p}'" for p in partner_ids)
    return int(db.scalar(f"SELECT COUNT(*) FROM orders WHERE status = 'processing' AND partner_id IN ({ids})") or 0)


def do_kill(run, db, kind, partner, partner_ids):
    nodes = run.nodes
    allowed = [n for n in nodes if n.provisions] if kind == "provisioning" else nodes
    fewest = min(len(n.kills) for n in allowed)
    target = run.rng.choice([n for n in allowed if len(n.kills) == fewest])
    note = {"kind": kind, "node": target.name, "run": target.run}
    if kind == "burst":
        run.burst.set()
        threads = [
            threading.Thread(target=run.burst_worker, args=(partner, 12), daemon=True)
            for _ in range(16)
        ]
        for t in threads:
            t.start()
        time.sleep(run.rng.uniform(0.15, 0.5))
    elif kind == "provisioning":
        deadline = time.time() + 8
        while time.time() < deadline and processing_count(db, partner_ids) == 0:
            time.sleep(0.05)
    elif kind == "deposit":
        # Three deposits paid at once; their webhooks race the kill.
        paid = [d for d in (run.open_deposit(partner, target) for _ in range(3)) if d is not None]
        payloads = [run.sim_event(d, "paid", d.requested) for d in paid]
        note["deposits"] = [d.id for d in paid]
        answered = []

        def deliver(payload):
            if run.relay(payload, target):
                answered.append(time.time())
            else:
                run.queue_relay(payload, 0.5)

        relays = [threading.Thread(target=deliver, args=(p,)) for p in payloads]
        for t in relays:
            t.start()
        time.sleep(run.rng.uniform(0.002, 0.012))
    with run.lock:
        note["inflight_orders"] = run.inflight
        before_unknown = run.stats["order_unknown"]
    target.kill9()
    note["at"] = round(time.time() - run.started, 2)
    # Read after the kill, so the kill is not delayed: what the dead node left behind.
    note["processing_orders"] = processing_count(db, partner_ids)
    if kind == "deposit":
        for t in relays:
            t.join()
        note["webhooks_answered_before_kill"] = sum(1 for a in answered if a < target.kills[-1])
    if kind == "burst":
        run.burst.clear()
    down = run.rng.uniform(0.2, 1.5)
    time.sleep(down)
    target.start()
    if not target.wait_healthy():
        note["came_back"] = False
        run.kill_log.append(note)
        return False
    note["came_back"] = True
    run.downtimes.append((target.kills[-1], time.time()))
    note["down_seconds"] = round(down, 2)
    with run.lock:
        note["unknowns_while_down"] = run.stats["order_unknown"] - before_unknown
    run.kill_log.append(note)
    log(f"kill {len(run.kill_log)}: {note}")
    return True


# --------------------------------------------------------------------------
# Three nodes: the write limit across nodes


def rate_limit_phase(run, partner):
    """Fires orders for a key on a normal band across all nodes; per window, accepted <= limit."""
    answers = []
    stop_at = time.time() + run.args.rate_seconds
    lock = threading.Lock()

    def fire():
        while time.time() < stop_at:
            state = run.new_key(partner)
            node = run.next_node()
            headers = dict(partner.auth())
            headers["Idempotency-Key"] = state.key
            try:
                status, got, body = request("POST", f"{node.public}/partner/v1/orders", state.body, headers)
            except Unknown:
                with lock:
                    answers.append(("unknown", None, None, node.name))
                continue
            run.classify(state, node, status, got, body, "rate")
            with lock:
                answers.append((status, got.get("x-ratelimit-reset"), got.get("x-ratelimit-limit"), node.name))
            time.sleep(0.1)

    threads = [threading.Thread(target=fire) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    windows = collections.defaultdict(lambda: collections.Counter())
    limits = set()
    for status, reset, limit, node in answers:
        if status == "unknown":
            continue
        if reset is None or limit is None:
            run.violation(f"rate limit: a {status} write without X-RateLimit headers")
            continue
        limits.add(int(limit))
        windows[int(reset)]["accepted" if status != 429 else "limited"] += 1
        windows[int(reset)][node] += 1 if status != 429 else 0
    limit = min(limits) if limits else None
    summary = []
    for reset in sorted(windows):
        counts = windows[reset]
        summary.append({"window_end": reset, "accepted": counts["accepted"], "limited": counts["limited"],
                        "accepted_by_node": {n.name: counts[n.name] for n in run.nodes}})
        if limit is not None and counts["accepted"] > limit:
            run.violation(f"rate limit: {counts['accepted']} writes accepted in the window ending {reset} (limit {limit})")
    limited = sum(w["limited"] for w in summary)
    if limited == 0:
        run.violation("rate limit: no write was limited; the test proved nothing")
    if len({n for s in summary for n, c in s["accepted_by_node"].items() if c}) < 2:
        run.notes.append("rate limit: accepted writes reached fewer than two nodes")
    return {"limit": limit, "limits_seen": sorted(limits), "requests": len(answers), "windows": summary}


# --------------------------------------------------------------------------
# Three nodes: revocation and suspension reach every node at once


def refused_after(run, secret, since, expect_status, deadline=5.0):
    """Polls every node with `secret` until each refuses it; per node, seconds from `since`."""
    took = {}
    pending = list(run.nodes)
    stop_at = time.time() + deadline
    while pending and time.time() < stop_at:
        for node in list(pending):
            try:
                status, _, _ = request("GET", f"{node.public}/partner/v1/balance", None,
                                       {"Authorization": f"Bearer {secret}"})
            except Unknown:
                continue
            if status == expect_status:
                took[node.name] = time.time() - since
                pending.remove(node)
        time.sleep(0.002)
    for node in pending:
        run.violation(f"announcements: {node.name} still accepted a changed key {deadline:.0f}s later")
    return took


def announcement_phase(run):
    """Revokes a key and suspends an account on one node; every node must refuse at once.

    The nodes cache keys for an hour (ESIM__AUTH__KEY_CACHE_SECONDS), so only
    the announcement can make the others refuse."""
    figures = {}
    for change in ("revoke", "suspend"):
        status, _, created = run.operator("POST", "/partners", {"name": f"Announce {change} {run.run_id}", "tier": "gold", "status": "live"})
        assert status == 201, (status, created)
        status, _, key = run.operator("POST", f"/partners/{created['id']}/keys", {"mode": "live", "label": change})
        assert status == 201, (status, key)
        for node in run.nodes:
            status, _, body = request("GET", f"{node.public}/partner/v1/balance", None,
                                      {"Authorization": f"Bearer {key['secret']}"})
            assert status == 200, (node.name, status, body)
        if change == "revoke":
            path, method, body, expect = f"/keys/{key['id']}/revoke", "POST", None, 401
        else:
            path, method, body, expect = f"/partners/{created['id']}", "PATCH", {"status": "suspended"}, 403
        since = time.time()
        status, _, answer = run.operator(method, path, body)
        assert status == 200, (status, answer)
        took = refused_after(run, key["secret"], since, expect)
        figures[change] = {name: round(seconds * 1000, 1) for name, seconds in sorted(took.items())}
    return figures


# --------------------------------------------------------------------------
# Invariants


def check_invariants(run, db, partners):
    v = run.violation
    facts = {}
    for partner in partners:
        pid = partner.id
        if not SAFE_ID.match(pid):
            raise SystemExit(f"unexpected partner id {pid!r}")
        orders = {
            r[0]: {"key": r[1], "status": r[2], "total": int(r[3]), "refunded": int(r[4]), "quantity": int(r[5]), "mode": r[6], "unit": int(r[7])}
            for r in db.rows(
                "SELECT id, idempotency_key, status, total_cents, refunded_cents, quantity, mode, unit_price_cents "
                f"FROM orders WHERE partner_id = '{pid}'"
            )
        }
        ledger = [
            {"id": r[0], "seq": int(r[1]), "kind": r[2], "amount": int(r[3]), "after": int(r[4]), "order": r[5], "deposit": r[6], "movement": r[7]}
            for r in db.rows(
                "SELECT id, seq, kind, amount_cents, balance_after_cents, order_id, deposit_id, movement_key "
                f"FROM ledger_entries WHERE partner_id = '{pid}' ORDER BY seq"
            )
        ]
        float_row = db.rows(f"SELECT balance_cents, next_seq FROM floats WHERE partner_id = '{pid}' AND mode = 'live'")
        units = db.rows(
            "SELECT u.id, u.order_id, u.status FROM order_units u JOIN orders o ON o.id = u.order_id "
            f"WHERE o.partner_id = '{pid}'"
        )
        esims = db.rows(f"SELECT iccid, order_id, unit_id FROM esims WHERE partner_id = '{pid}'")
        deposits = {
            r[0]: {"status": r[1], "method": r[2], "requested": int(r[3]), "credited": int(r[4]) if r[4] else None, "ledger": r[5]}
            for r in db.rows(
                "SELECT id, status, method, requested_cents, credited_cents, ledger_entry_id "
                f"FROM deposits WHERE partner_id = '{pid}'"
            )
        }
        bindings = db.rows(f'SELECT "key", order_id, error_status FROM idempotency_keys WHERE partner_id = \'{pid}\'')

        # Orders as the partner saw them.
        client = [s for s in run.keys.values() if s.partner is partner]
        by_key = collections.defaultdict(list)
        for oid, o in orders.items():
            by_key[o["key"]].append(oid)
        purchases = collections.defaultdict(list)
        refunds = collections.defaultdict(list)
        deposit_rows = collections.defaultdict(list)
        for row in ledger:
            if row["kind"] == "purchase":
                purchases[row["order"]].append(row)
            elif row["kind"] == "refund":
                refunds[row["order"]].append(row)
            elif row["kind"] == "deposit":
                deposit_rows[row["deposit"]].append(row)
        unresolved = [s.key for s in client if s.final is None]
        if unresolved:
            v(f"{partner.label}: {len(unresolved)} keys never got a definite answer (e.g. {unresolved[:3]})")
        for s in client:
            if len(s.order_ids) > 1:
                v(f"{partner.label}: key {s.key} answered with several orders {sorted(s.order_ids)}")
            if s.final and s.final[0] == "order":
                oid = s.final[1]
                o = orders.get(oid)
                if o is None:
                    v(f"{partner.label}: order {oid} answered for key {s.key} has no order row")
                    continue
                if o["key"] != s.key:
                    v(f"{partner.label}: order {oid} carries key {o['key']}, answered for {s.key}")
                rows = purchases.get(oid, [])
                if o["mode"] == "live" and (len(rows) != 1 or rows[0]["amount"] != -o["total"]):
                    v(f"{partner.label}: order {oid} has purchase rows {rows} for a total of {o['total']}")
            elif s.final and s.key in by_key:
                v(f"{partner.label}: key {s.key} answered {s.final} but the database holds order(s) {by_key[s.key]}")
        client_keys = {s.key for s in client}
        for key, oids in by_key.items():
            if len(oids) > 1:
                v(f"{partner.label}: key {key} has {len(oids)} orders {oids}")
            if key not in client_keys:
                v(f"{partner.label}: order(s) {oids} under key {key} the partner never sent")
        for oid, rows in purchases.items():
            if oid not in orders:
                v(f"{partner.label}: purchase row(s) {[r['id'] for r in rows]} for missing order {oid}")
            elif len(rows) > 1:
                v(f"{partner.label}: order {oid} charged {len(rows)} times")
        for oid, o in orders.items():
            if o["mode"] == "live" and oid not in purchases:
                v(f"{partner.label}: order {oid} has no purchase row")
        bound = collections.Counter(b[0] for b in bindings)
        for key, count in bound.items():
            if count > 1:
                v(f"{partner.label}: key {key} bound {count} times")
        for key, oid, _ in bindings:
            if oid and orders.get(oid, {}).get("key") != key:
                v(f"{partner.label}: key {key} bound to order {oid} that does not carry it")

        # Money: balance = sum of the ledger, seq contiguous, balance_after a running sum.
        total = 0
        for expected_seq, row in enumerate(ledger, start=1):
            total += row["amount"]
            if row["seq"] != expected_seq:
                v(f"{partner.label}: ledger seq {row['seq']} where {expected_seq} was expected")
                break
            if row["after"] != total:
                v(f"{partner.label}: ledger row {row['seq']} balance_after {row['after']} != running sum {total}")
                break
            if row["after"] < 0:
                v(f"{partner.label}: ledger row {row['seq']} leaves the float negative")
        movement = collections.Counter(r["movement"] for r in ledger if r["movement"])
        for key, count in movement.items():
            if count > 1:
                v(f"{partner.label}: movement {key} written {count} times")
        if not float_row:
            v(f"{partner.label}: no live float row")
            balance_db = None
        else:
            balance_db = int(float_row[0][0])
            if balance_db != total:
                v(f"{partner.label}: float {balance_db} != ledger sum {total}")
            if int(float_row[0][1]) != len(ledger) + 1:
                v(f"{partner.label}: next_seq {float_row[0][1]} with {len(ledger)} ledger rows")
        node = run.first_up()
        status, _, body = request("GET", f"{node.public}/partner/v1/balance", headers=partner.auth())
        balance_api = body.get("balance_cents") if status == 200 and isinstance(body, dict) else None
        if balance_api != total:
            v(f"{partner.label}: API balance {balance_api} != ledger sum {total}")
        api_ledger = api_pages(node, partner, "/partner/v1/ledger?limit=200")
        if sum(r["amount_cents"] for r in api_ledger) != total or len(api_ledger) != len(ledger):
            v(f"{partner.label}: the API ledger ({len(api_ledger)} rows) differs from the database ({len(ledger)})")

        # Settlement: nothing processing, units and refunds consistent.
        processing = [oid for oid, o in orders.items() if o["status"] == "processing"]
        if processing:
            v(f"{partner.label}: {len(processing)} orders still processing (e.g. {processing[:3]})")
        api_processing = api_pages(node, partner, "/partner/v1/orders?status=processing&limit=100")
        if api_processing:
            v(f"{partner.label}: the API lists {len(api_processing)} orders processing")
        unit_status = collections.defaultdict(collections.Counter)
        for _, oid, status_ in units:
            unit_status[oid][status_] += 1
        for oid, o in orders.items():
            counts = unit_status.get(oid, collections.Counter())
            # A unit's row is written when a supplier order takes it: a settled
            # order has one per unit, a processing one may have fewer.
            written = sum(counts.values())
            if written > o["quantity"] or (o["status"] != "processing" and written != o["quantity"]):
                v(f"{partner.label}: order {oid} ({o['status']}) has {written} units for quantity {o['quantity']}")
            refund_rows = refunds.get(oid, [])
            refunded = sum(r["amount"] for r in refund_rows)
            if o["mode"] == "live" and refunded != o["refunded"]:
                v(f"{partner.label}: order {oid} refunded_cents {o['refunded']} != refund rows {refunded}")
            if counts["refunded"] * o["unit"] != o["refunded"]:
                v(f"{partner.label}: order {oid} has {counts['refunded']} refunded units but refunded_cents {o['refunded']}")
            if o["status"] == "completed" and counts["delivered"] != o["quantity"]:
                v(f"{partner.label}: order {oid} completed with {counts['delivered']} of {o['quantity']} units delivered")

        # Profiles: no ICCID delivered twice, one per delivered unit.
        iccids = collections.Counter(e[0] for e in esims)
        unit_ids = collections.Counter(e[2] for e in esims)
        for iccid, count in iccids.items():
            if count > 1:
                v(f"{partner.label}: ICCID {iccid} delivered {count} times")
        for unit, count in unit_ids.items():
            if count > 1:
                v(f"{partner.label}: unit {unit} has {count} profiles")
        delivered_units = {u[0] for u in units if u[2] == "delivered"}
        if set(unit_ids) != delivered_units:
            v(f"{partner.label}: {len(unit_ids)} profiles for {len(delivered_units)} delivered units")
        api_esims = api_pages(node, partner, "/partner/v1/esims?limit=100")
        api_iccids = collections.Counter(e["iccid"] for e in api_esims)
        if any(c > 1 for c in api_iccids.values()) or set(api_iccids) != set(iccids):
            v(f"{partner.label}: the API lists {len(api_iccids)} distinct ICCIDs ({len(api_esims)} rows), the database {len(iccids)}")

        # Deposits: each credited once, with what was paid.
        for dep_id, rows in deposit_rows.items():
            if len(rows) > 1:
                v(f"{partner.label}: deposit {dep_id} credited {len(rows)} times")
            if dep_id not in deposits:
                v(f"{partner.label}: deposit ledger row for unknown deposit {dep_id}")
        for dep_id, d in deposits.items():
            rows = deposit_rows.get(dep_id, [])
            if d["status"] == "credited":
                if len(rows) != 1 or rows[0]["amount"] != d["credited"] or rows[0]["id"] != d["ledger"]:
                    v(f"{partner.label}: deposit {dep_id} credited {d['credited']} with ledger rows {rows}")
            elif rows:
                v(f"{partner.label}: deposit {dep_id} is {d['status']} but has ledger rows")
        for d in run.deposits.values():
            if d.id not in deposits:
                continue
            row = deposits[d.id]
            if d.expected_credit is not None and (row["status"] != "credited" or row["credited"] != d.expected_credit):
                v(f"{partner.label}: deposit {d.id} paid {d.expected_credit} ({d.events}) is {row['status']} with {row['credited']}")
        api_deposits = api_pages(node, partner, "/partner/v1/deposits?limit=100")
        if {d["id"]: d["status"] for d in api_deposits} != {k: d["status"] for k, d in deposits.items()}:
            v(f"{partner.label}: the API's deposits differ from the database's")

        facts[partner.label] = {
            "orders": len(orders),
            "orders_by_status": dict(collections.Counter(o["status"] for o in orders.values())),
            "ledger_rows": len(ledger),
            "balance_cents": total,
            "profiles": len(iccids),
            "deposits": dict(collections.Counter(d["status"] for d in deposits.values())),
            "refund_rows": sum(len(r) for r in refunds.values()),
        }
    # PostgreSQL does not check these references on every row (migration
    # m20261205_000014_order_path_references): no order without its partner,
    # no unit without its order.
    orphans = {
        "orders without their partner": "SELECT COUNT(*) FROM orders o LEFT JOIN partners p ON p.id = o.partner_id WHERE p.id IS NULL",
        "units without their order": "SELECT COUNT(*) FROM order_units u LEFT JOIN orders o ON o.id = u.order_id WHERE o.id IS NULL",
    }
    for what, sql in orphans.items():
        found = int(db.scalar(sql) or 0)
        if found:
            v(f"{found} {what}")
    return facts


class ApiReadFailed(Exception):
    pass


def api_pages(node, partner, path):
    rows, url = [], f"{node.public}{path}"
    while True:
        try:
            status, _, body = request("GET", url, headers=partner.auth())
        except Unknown as err:
            raise ApiReadFailed(f"GET {path}: {err}") from None
        if status != 200 or not isinstance(body, dict):
            raise ApiReadFailed(f"GET {path}: {status} {json.dumps(body)[:200]}")
        rows.extend(body.get("data") or [])
        cursor = body.get("next_cursor")
        if not cursor:
            return rows
        sep = "&" if "?" in path else "?"
        url = f"{node.public}{path}{sep}cursor={urllib.parse.quote(cursor)}"


def replay_sweep(run, partner, db):
    """Sends answered keys again: every answer must name the same order, and no cent moves."""
    before = db.scalar(f"SELECT balance_cents FROM floats WHERE partner_id = '{partner.id}' AND mode = 'live'")
    # A partner resends what it may resend: answered orders, and the refusals
    # that bind the key (402, 403). Other 4xx are never retried unchanged.
    states = [s for s in run.keys.values()
              if s.partner is partner and s.final and (s.final[0] == "order" or s.final[1] in (402, 403))]
    sample = [s for s in states if s.had_unknown or s.retryable]
    others = [s for s in states if not (s.had_unknown or s.retryable)]
    sample += run.rng.sample(others, min(len(others), 150))
    for state in sample:
        expected = state.final
        node = run.next_node()
        headers = dict(partner.auth())
        headers["Idempotency-Key"] = state.key
        try:
            status, got, body = request("POST", f"{node.public}/partner/v1/orders", state.body, headers)
        except Unknown:
            run.violation(f"replay sweep: {state.key} got no answer from {node.name}")
            continue
        replayed = got.get("idempotency-replayed") == "true"
        if expected[0] == "order":
            ok = status == 200 and replayed and isinstance(body, dict) and body.get("id") == expected[1]
        else:
            ok = status == expected[1] and (status not in (402, 403) or replayed)
        if not ok:
            code = body.get("error", {}).get("code") if isinstance(body, dict) else None
            run.violation(f"replay sweep: {state.key} expected {expected}, got {status} {code or (body or {}).get('id')} replayed={replayed}")
    after = db.scalar(f"SELECT balance_cents FROM floats WHERE partner_id = '{partner.id}' AND mode = 'live'")
    if before != after:
        run.violation(f"replay sweep: the balance moved from {before} to {after}")
    return len(sample)


# --------------------------------------------------------------------------
# Logs and the supplier tap


def read_logs(nodes):
    facts = {"error_lines": 0, "panics": 0, "stranded_redriven": {}, "settled_by_node": {}, "error_messages": {}}
    credited_by = collections.defaultdict(list)
    error_messages = collections.Counter()
    settled = collections.defaultdict(set)
    errors = []
    for node in nodes:
        redriven = 0
        for run_number, path in enumerate(node.logs, start=1):
            with open(path, "rb") as f:
                for raw in f:
                    try:
                        line = json.loads(raw)
                    except ValueError:
                        continue
                    message = line.get("message", "")
                    if message == "deposit credited" and line.get("deposit_id"):
                        credited_by[line["deposit_id"]].append(f"{node.name}.run{run_number}")
                    if line.get("level") == "ERROR":
                        facts["error_lines"] += 1
                        error_messages[f"{message}: {str(line.get('error', ''))[:110]}"] += 1
                        if len(errors) < 5:
                            errors.append(f"{node.name}: {message} {line.get('error', '')}")
                    if "panic" in message:
                        facts["panics"] += 1
                    if message == "re-driving stranded orders":
                        redriven += int(line.get("count", 0))
                    if message == "order settled" and line.get("order_id"):
                        settled[line["order_id"]].add(node.name)
        facts["stranded_redriven"][node.name] = redriven
        facts["settled_by_node"][node.name] = sum(1 for names in settled.values() if node.name in names)
    facts["orders_settled_in_two_logs"] = sum(1 for names in settled.values() if len(names) > 1)
    facts["first_errors"] = errors
    facts["error_messages"] = dict(error_messages.most_common(5))
    facts["credited_by"] = credited_by
    return facts


def analyse_tap(run, db, partner_ids, run_end):
    """Per supplier order (its transaction id): which nodes drove it, whether
    two did at the same time, and whether one transaction id was ever answered
    with two supplier order numbers (two purchases)."""
    with run.tap_lock:
        records = list(run.tap_records)
    with open(os.path.join(run.workdir, "supplier_tap.jsonl"), "w") as f:
        for node, prun, start, end, kind, txn, order_no in records:
            f.write(json.dumps({"node": run.nodes[node].name, "run": prun, "start": round(start - run.started, 4),
                                "end": round(end - run.started, 4), "call": kind, "transaction_id": txn,
                                "order_no": order_no}) + "\n")
    txn_of = {}
    order_nos = collections.defaultdict(set)
    for node, prun, start, end, kind, txn, order_no in records:
        if kind == "place" and txn and order_no:
            txn_of[order_no] = txn
            order_nos[txn].add(order_no)
    for txn, numbers in order_nos.items():
        if len(numbers) > 1:
            run.violation(f"transaction id {txn} was answered with {len(numbers)} supplier orders: {sorted(numbers)}")
    spans = {}
    for node, prun, start, end, kind, txn, order_no in records:
        supplier_order = txn if kind == "place" else txn_of.get(order_no)
        if not supplier_order:
            continue
        key = (supplier_order, node, prun)
        lo, hi = spans.get(key, (start, end))
        spans[key] = (min(lo, start), max(hi, end))
    # A killed process stops working at its kill.
    kill_of = {}
    for i, node in enumerate(run.nodes):
        for (r, started), killed in zip(node.starts, node.kills + [run_end] * len(node.starts)):
            kill_of[(i, r)] = killed
    by_txn = collections.defaultdict(list)
    for (txn, node, prun), (lo, hi) in spans.items():
        by_txn[txn].append((node, prun, lo, min(hi, kill_of.get((node, prun), hi))))
    overlapping, multi_node, same_node_runs = [], 0, 0
    for txn, passes in by_txn.items():
        if len({p[0] for p in passes}) > 1:
            multi_node += 1
        if len(passes) > len({p[0] for p in passes}):
            same_node_runs += 1
        for a, b in itertools.combinations(passes, 2):
            if a[0] != b[0] and a[2] < b[3] and b[2] < a[3]:
                overlapping.append((txn, a, b))
    places = collections.Counter((r[5], r[0], r[1]) for r in records if r[4] == "place" and r[6])
    repeated_places = sum(1 for c in places.values() if c > 1)
    # Orders the non-provisioning node accepted: who provisioned them?
    ids = ",".join(f"'{p}'" for p in partner_ids)
    attempts = collections.Counter(
        r[0] for r in db.rows(f"SELECT attempts FROM orders WHERE partner_id IN ({ids}) AND mode = 'live'")
    )
    carrier_of = collections.defaultdict(set)
    for order_id, txn in db.rows(
        "SELECT order_id, supplier_txn_id FROM order_units WHERE supplier_txn_id IS NOT NULL"
    ):
        carrier_of[order_id].add(txn)
    # Every unit is carried by one supplier order at most (the schema's
    # guard); units of one order may travel in several.
    idle = {n.name for n in run.nodes if not n.provisions}
    stranded_keys = [s for s in run.keys.values() if s.accepted_node in idle and s.final]
    stranded_units = collections.Counter()
    for s in stranded_keys:
        oid = s.final[1]
        nodes_on = {run.nodes[p[0]].name for txn in carrier_of.get(oid, ()) for p in by_txn.get(txn, ())}
        stranded_units[",".join(sorted(nodes_on)) or "none"] += 1
    facts = {
        "supplier_calls": len(records),
        "supplier_orders_seen": len(by_txn),
        "supplier_orders_driven_by_two_nodes_in_turn": multi_node,
        # Harmless: a repeated transaction id is the same supplier order.
        "supplier_orders_asked_about_by_two_nodes_at_once": len(overlapping),
        "supplier_orders_driven_again_by_a_restarted_node": same_node_runs,
        "supplier_orders_placed_twice_by_one_process": repeated_places,
        "transaction_ids_answered_with_two_supplier_orders": sum(1 for n in order_nos.values() if len(n) > 1),
        "orders_by_claim_count": dict(sorted(attempts.items())),
    }
    if idle:
        facts["orders_accepted_by_non_provisioning_node"] = len(stranded_keys)
        facts["their_provisioning_nodes"] = dict(stranded_units)
    return facts


# --------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the esim-reseller binary")
    parser.add_argument("--database-url", required=True, help="sqlite://... or postgres://... (the database under test)")
    parser.add_argument("--kills", type=int, default=6)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--nodes", type=int, choices=[1, 3], default=1)
    parser.add_argument("--redis-url", default=None, help="Redis for shared rate-limit windows (required with --nodes 3)")
    parser.add_argument("--drive-seconds", type=float, default=50.0, help="how long orders are driven")
    parser.add_argument("--settle-seconds", type=float, default=60.0, help="longest wait for everything to settle")
    parser.add_argument("--workers", type=int, default=6, help="order threads")
    parser.add_argument("--rate-seconds", type=float, default=11.0, help="three nodes: length of the write-limit check")
    parser.add_argument("--workdir", default=None, help="logs go here (default: a new temporary folder)")
    parser.add_argument("--loadtest-count", type=int, default=0,
                        help="three nodes: afterwards, run `loadtest` with this many orders spread across the nodes")
    parser.add_argument("--json", default=None, help="also write the summary to this file")
    parser.add_argument("--provisioning-concurrency", default=None,
                        help="orders a node provisions at once, one value or one per node (default: the server's)")
    parser.add_argument("--supplier-latency-ms", type=int, default=SUPPLIER_LATENCY_MS,
                        help="how long the simulated supplier takes to allocate a profile")
    parser.add_argument("--lease-seconds", type=int, default=None,
                        help="provisioning lease of the nodes (default: the server's, as in production)")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    if args.nodes == 3 and (not args.redis_url or not args.database_url.startswith("postgres")):
        parser.error("--nodes 3 needs a postgres:// --database-url and --redis-url")
    binary = os.path.abspath(args.bin)
    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="esim-crash-"))
    os.makedirs(workdir, exist_ok=True)
    db = Database(args.database_url)
    run = Run(args)
    run.workdir = workdir
    log(f"crash test: {args.nodes} node(s), {db.kind}, {args.kills} kills, seed {args.seed}, logs in {workdir}")

    ports = free_ports(3 + 3 * args.nodes, random.Random())
    sim_public, sim_operator, sim_port = ports[:3]
    node_ports = ports[3 : 3 + 2 * args.nodes]
    tap_ports = ports[3 + 2 * args.nodes :]  # one supplier tap per node
    run.sim_url = f"http://127.0.0.1:{sim_port}"
    started_servers = []
    taps = []
    exit_code = 1
    summary = {}
    try:
        sim = Server(
            "simulators",
            binary,
            base_env(
                {
                    "ESIM__DATABASE__URL": f"sqlite://{workdir}/simulators.db?mode=rwc",
                    "ESIM__HTTP__PUBLIC_ADDR": f"127.0.0.1:{sim_public}",
                    "ESIM__HTTP__OPERATOR_ADDR": f"127.0.0.1:{sim_operator}",
                    "ESIM__SIMULATORS__ENABLED": "true",
                    "ESIM__SIMULATORS__ADDR": f"127.0.0.1:{sim_port}",
                    "ESIM__SIMULATORS__SUPPLIER_LATENCY_MS": str(args.supplier_latency_ms),
                    "ESIM__SIMULATORS__SUPPLIER_FAIL_RATE": str(SUPPLIER_FAIL_RATE),
                    # This test is about healing after kills, not about the
                    # supplier's capacity: its documented rate limit is lifted
                    # here and in the nodes' gate.
                    "ESIM__SIMULATORS__SUPPLIER_RATE_LIMIT": "0",
                    "ESIM__PROVISIONING__ENABLED": "false",
                    "ESIM__LOG__LEVEL": "warn",
                }
            ),
            workdir,
            sim_public,
            sim_operator,
        )
        sim.start()
        started_servers.append(sim)
        if not sim.wait_healthy(60):
            raise SystemExit("the simulator host did not start; see " + sim.logs[-1])

        for i in range(args.nodes):
            public, operator_port = node_ports[2 * i], node_ports[2 * i + 1]
            provisions = not (args.nodes > 1 and i == args.nodes - 1)
            taps.append(Tap(i, tap_ports[i], sim_port, run.nodes, run.tap_records, run.tap_lock))
            supplier = f"http://127.0.0.1:{tap_ports[i]}"
            env = {
                "ESIM__DATABASE__URL": db.url,
                "ESIM__HTTP__PUBLIC_ADDR": f"127.0.0.1:{public}",
                "ESIM__HTTP__OPERATOR_ADDR": f"127.0.0.1:{operator_port}",
                "ESIM__SIMULATORS__ENABLED": "false",
                "ESIM__SUPPLIER__BASE_URL": supplier,
                "ESIM__PAYMENTS__BASE_URL": run.sim_url,
                "ESIM__SUPPLIER__POLL_INTERVAL_MS": "100",
                "ESIM__SUPPLIER__RETRY_BACKOFF_MS": "200",
                "ESIM__SUPPLIER__REQUESTS_PER_SECOND": "0",
                "ESIM__RECONCILER__INTERVAL_SECONDS": str(RECONCILER_INTERVAL),
                "ESIM__RECONCILER__GRACE_SECONDS": "1",
                "ESIM__PROVISIONING__ENABLED": "true" if provisions else "false",
                "ESIM__RATE_LIMIT__BANDS__GOLD__WRITE__LIMIT": "100000000",
                "ESIM__RATE_LIMIT__BANDS__GOLD__READ__LIMIT": "100000000",
                "ESIM__LOG__LEVEL": "info",
            }
            if args.lease_seconds is not None:
                env["ESIM__PROVISIONING__LEASE_SECONDS"] = str(args.lease_seconds)
            if db.kind == "postgres":
                env["ESIM__DATABASE__MAX_CONNECTIONS"] = "8"
            if args.provisioning_concurrency:
                per_node = args.provisioning_concurrency.split(",")
                env["ESIM__PROVISIONING__CONCURRENCY"] = per_node[min(i, len(per_node) - 1)]
            if args.nodes > 1:
                # Only announcements can spread a revocation within the run.
                env["ESIM__AUTH__KEY_CACHE_SECONDS"] = "3600"
            if args.redis_url:
                env["ESIM__RATE_LIMIT__BACKEND"] = "redis"
                env["ESIM__RATE_LIMIT__REDIS_URL"] = args.redis_url
            node = Server(f"node{i + 1}", binary, base_env(env), workdir, public, operator_port)
            node.provisions = provisions
            run.nodes.append(node)
        # The first start migrates and seeds; the others follow once it has.
        for node in run.nodes:
            node.start()
            started_servers.append(node)
            if not node.wait_healthy(90):
                raise SystemExit(f"{node.name} did not start; see {node.logs[-1]}")
        run.started = time.time()

        # The partner.
        status, _, created = run.operator("POST", "/partners", {"name": f"Crash {run.run_id}", "tier": "gold", "status": "live"})
        assert status == 201, (status, created)
        status, _, key = run.operator("POST", f"/partners/{created['id']}/keys", {"mode": "live", "label": "crash"})
        assert status == 201, (status, key)
        partner = Partner(created["id"], key["secret"], "gold")
        status, _, wire = run.operator(
            "POST", f"/partners/{partner.id}/wire-deposits", {"amount_cents": 5_000_000, "reference": f"WIRE-{run.run_id}"}
        )
        assert status == 201, (status, wire)
        partners = [partner]

        rate = None
        announcements = None
        if args.nodes > 1:
            status, _, created = run.operator("POST", "/partners", {"name": f"Limited {run.run_id}", "tier": "bronze", "status": "live"})
            assert status == 201, (status, created)
            status, _, key = run.operator("POST", f"/partners/{created['id']}/keys", {"mode": "live", "label": "limited"})
            assert status == 201, (status, key)
            limited = Partner(created["id"], key["secret"], "bronze")
            status, _, _ = run.operator(
                "POST", f"/partners/{limited.id}/wire-deposits", {"amount_cents": 200_000, "reference": f"WIRE-L-{run.run_id}"}
            )
            assert status == 201
            partners.append(limited)
            log(f"write limit across {args.nodes} nodes for {args.rate_seconds:.0f}s")
            rate = rate_limit_phase(run, limited)
            log(f"write limit: {json.dumps(rate['windows'])}")
            announcements = announcement_phase(run)
            log(f"refused by every node after (ms, from the operator call): {json.dumps(announcements)}")

        # Drive, and kill.
        threads = [threading.Thread(target=run.order_worker, args=(partner,), daemon=True) for _ in range(args.workers)]
        threads.append(threading.Thread(target=run.deposit_worker, args=(partner,), daemon=True))
        threads.append(threading.Thread(target=run.relay_worker, daemon=True))
        threads.append(threading.Thread(target=run.chaos_worker, daemon=True))
        for t in threads:
            t.start()
        kinds = ["burst", "provisioning", "deposit"]
        run.rng.shuffle(kinds)
        kinds += [run.rng.choice(["burst", "provisioning", "deposit", "random"]) for _ in range(max(0, args.kills - 3))]
        kinds = kinds[: args.kills]
        drive_start = time.time()
        healthy = True
        for n, kind in enumerate(kinds, start=1):
            at = drive_start + args.drive_seconds * n / (len(kinds) + 1) + run.rng.uniform(-1.0, 1.0)
            time.sleep(max(0.0, at - time.time()))
            if not do_kill(run, db, kind, partner, [p.id for p in partners]):
                healthy = False
                run.violation(f"a node did not come back after kill {n} ({kind})")
                break
        last_restart = time.time()
        time.sleep(max(0.0, drive_start + args.drive_seconds - time.time()))
        run.stop_new.set()
        log(f"drive over after {time.time() - drive_start:.1f}s; settling")

        # Settle: every unknown answered, every webhook delivered, nothing processing.
        settle_started = time.time()
        deadline = settle_started + args.settle_seconds
        # A restarted node takes its claims back as it starts and a dead
        # one's are taken over at the next pass: two passes are enough.
        min_until = last_restart + 2 * RECONCILER_INTERVAL
        settled = False
        ids = [p.id for p in partners]
        while healthy and time.time() < deadline:
            waiting = run.pending_retries() + run.pending_relays()
            with run.lock:
                waiting += run.inflight
                unpaid = [d for d in run.deposits.values() if d.expected_credit is not None]
            if waiting == 0 and time.time() >= min_until:
                pending_credit = 0
                if unpaid:
                    listed = ",".join(f"'{d.id}'" for d in unpaid)
                    pending_credit = int(db.scalar(f"SELECT COUNT(*) FROM deposits WHERE id IN ({listed}) AND status <> 'credited'") or 0)
                if processing_count(db, ids) == 0 and pending_credit == 0:
                    settled = True
                    break
            time.sleep(0.25)
        settle_seconds = round(time.time() - settle_started, 1)
        if not settled:
            run.violation(
                f"not settled within {args.settle_seconds:.0f}s: {run.pending_retries()} retries, "
                f"{run.pending_relays()} webhooks, {processing_count(db, ids)} orders processing"
            )
        log(f"settled in {settle_seconds}s" if settled else "not settled")

        swept = replay_sweep(run, partner, db) if healthy else 0
        run.stop_all.set()
        for t in threads:
            t.join(timeout=15)

        try:
            facts = check_invariants(run, db, partners)
        except ApiReadFailed as err:
            facts = {}
            run.violation(f"the API failed a read while checking: {err}")
        facts["healing"] = healing_bound(run, db, ids)
        logs = read_logs(run.nodes)
        if logs["orders_settled_in_two_logs"]:
            run.violation(f"{logs['orders_settled_in_two_logs']} orders logged as settled by two nodes")
        for note in run.kill_log:
            if note.get("deposits") is not None:
                killed_run = f"{note['node']}.run{note['run']}"
                credits = [logs["credited_by"].get(d, []) for d in note["deposits"]]
                note["credited_by_killed_process"] = sum(1 for c in credits if killed_run in c)
                note["credited_after_restart_or_elsewhere"] = sum(1 for c in credits if c and killed_run not in c)
                for dep, c in zip(note["deposits"], credits):
                    if len(c) > 1:
                        run.violation(f"deposit {dep} credited by {c}")
        del logs["credited_by"]
        if logs["panics"]:
            run.violation(f"{logs['panics']} panics in the logs")
        tap = analyse_tap(run, db, ids, time.time())

        loadtest = None
        if args.loadtest_count and healthy:
            urls = ",".join(n.public for n in run.nodes)
            log(f"loadtest across {urls}")
            began = time.time()
            out = subprocess.run(
                [binary, "loadtest", "--public-url", urls, "--operator-url", run.nodes[0].operator,
                 "--token", OPERATOR_TOKEN, "--partners", "3", "--count", str(args.loadtest_count),
                 "--concurrency", "16", "--duplicate-fraction", "0.1", "--race-fraction", "0.05", "--json"],
                capture_output=True, text=True, timeout=300,
            )
            try:
                loadtest = json.loads(out.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                loadtest = {"verdict": "FAIL", "stdout": out.stdout[-2000:], "stderr": out.stderr[-2000:]}
            loadtest["seconds"] = round(time.time() - began, 1)
            if out.returncode != 0 or loadtest.get("verdict") != "PASS":
                run.violation(f"loadtest across the nodes: {loadtest.get('verdict')} {loadtest.get('invariants', {}).get('failures')}")

        with run.lock:
            stats = dict(run.stats)
        summary = {
            "database": db.kind,
            "nodes": args.nodes,
            "seed": args.seed,
            "run_seconds": round(time.time() - run.started, 1),
            "kills_planned": args.kills,
            "kills_survived": sum(1 for k in run.kill_log if k.get("came_back")),
            "settle_seconds": settle_seconds,
            "kills": run.kill_log,
            "orders_keys_driven": sum(1 for s in run.keys.values() if s.partner is partner),
            "orders_accepted": facts.get("gold", {}).get("orders"),
            "order_requests": sum(v for k, v in stats.items() if k.startswith("order_requests_")),
            "unknown_answers": stats.get("order_unknown", 0),
            "unknown_refused": stats.get("order_unknown_refused", 0),
            "unknown_lost": stats.get("order_unknown_lost", 0),
            "unknown_retries": stats.get("order_requests_retry", 0),
            "keys_with_unknown": sum(1 for s in run.keys.values() if s.had_unknown),
            "unknowns_found_committed": stats.get("unknown_resolved_replay", 0),
            "unknowns_found_not_committed": stats.get("unknown_resolved_fresh", 0),
            "retryable_answers_5xx_429": sum(v for k, v in stats.items() if re.match(r"order_(429|5\d\d)$", k)),
            "duplicates_sent": stats.get("order_requests_duplicate", 0),
            "races_sent": stats.get("order_requests_race", 0) // 2,
            "replay_sweep": swept,
            "deposits_driven": len(run.deposits),
            "deposits_unknown_on_create": stats.get("deposit_create_unknown", 0),
            "webhook_deliveries": stats.get("webhook_deliveries", 0),
            "webhook_redeliveries_needed": stats.get("webhook_redeliveries_needed", 0),
            "supplier_rejections_injected": stats.get("supplier_rejections_injected", 0),
            "database_facts": facts,
            "logs": logs,
            "rate_limit": rate,
            "announcements_ms": announcements,
            "exclusivity": tap,
            "loadtest": None if loadtest is None else {k: loadtest.get(k) for k in ("requests", "accepted_orders", "accepted_per_second", "responses", "requests_by_url", "verdict", "seconds", "invariants")},
            "stats": stats,
            "notes": run.notes,
            "violations": run.violations,
            "workdir": workdir,
        }
        exit_code = 0 if healthy and not run.violations else 1
    finally:
        run.stop_new.set()
        run.stop_all.set()
        for server in reversed(started_servers):
            server.stop()
        for tap in taps:
            tap.close()

    print_summary(summary)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return exit_code


def print_summary(s):
    if not s:
        return
    print()
    print(f"crash test ({s['database']}, {s['nodes']} node(s), seed {s['seed']}) in {s['run_seconds']}s")
    print(f"  kills survived         {s['kills_survived']} of {s['kills_planned']}")
    for k in s["kills"]:
        print(f"    {k.get('at')}s {k['kind']:<12} {k['node']}: {k.get('inflight_orders')} requests in flight, "
              f"{k.get('processing_orders')} orders processing, {k.get('unknowns_while_down', '?')} unknown answers"
              + (f", {len(k['deposits'])} webhooks sent, {k['webhooks_answered_before_kill']} answered before the kill, "
                 f"{k.get('credited_by_killed_process')} credited by the killed process, "
                 f"{k.get('credited_after_restart_or_elsewhere')} after it"
                 if k.get("deposits") is not None else ""))
    print(f"  orders                 {s['orders_keys_driven']} keys, {s['orders_accepted']} orders, {s['order_requests']} requests")
    print(f"  unknown answers        {s['unknown_answers']} on {s['keys_with_unknown']} keys "
          f"({s['unknown_lost']} reset or timed out in flight, {s['unknown_refused']} refused while down), {s['unknown_retries']} retries "
          f"({s['unknowns_found_committed']} had committed, {s['unknowns_found_not_committed']} had not)")
    print(f"  5xx/429 retried        {s['retryable_answers_5xx_429']}")
    print(f"  duplicates, races      {s['duplicates_sent']}, {s['races_sent']}; replay sweep {s['replay_sweep']} keys")
    print(f"  deposits               {s['deposits_driven']} driven, {s['webhook_deliveries']} webhook deliveries "
          f"({s['webhook_redeliveries_needed']} redelivered), {s['deposits_unknown_on_create']} unknown on create")
    for label, facts in s["database_facts"].items():
        print(f"  {label:<22} {json.dumps(facts)}")
    logs = s["logs"]
    print(f"  logs                   {logs['error_lines']} ERROR lines, {logs['panics']} panics, "
          f"stranded orders listed by reconciler passes {logs['stranded_redriven']}")
    for message, count in logs["error_messages"].items():
        print(f"    {count} x {message}")
    if s.get("rate_limit"):
        r = s["rate_limit"]
        print(f"  write limit            {r['limit']} per window; "
              + "; ".join(f"{w['accepted']} accepted/{w['limited']} limited" for w in r["windows"]))
    if s.get("announcements_ms"):
        print(f"  refused by every node  " + "; ".join(
            f"{change}: " + ", ".join(f"{n} {ms} ms" for n, ms in took.items())
            for change, took in s["announcements_ms"].items()))
    if s.get("exclusivity"):
        print(f"  exclusivity            {json.dumps(s['exclusivity'])}")
    if s.get("loadtest"):
        lt = s["loadtest"]
        print(f"  loadtest               {lt.get('verdict')}: {lt.get('accepted_orders')} orders, "
              f"{lt.get('accepted_per_second')}/s, {lt.get('responses')}, requests by node {lt.get('requests_by_url')}")
    print("  order answers          " + ", ".join(f"{k}: {v}" for k, v in sorted(s["stats"].items())
                                            if re.match(r"(order|bronze)_\d", k) or k.startswith("order_unknown")))
    for note in s["notes"]:
        print(f"  note                   {note}")
    print(f"  violations             {len(s['violations'])}")
    for v in s["violations"][:30]:
        print(f"    {v}")
    print(f"  logs in                {s['workdir']}")
    print("PASS" if not s["violations"] else "FAIL")


if __name__ == "__main__":
    sys.exit(main())
