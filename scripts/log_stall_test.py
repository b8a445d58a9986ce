#!/usr/bin/env python3
"""A serve whose standard output nobody reads keeps answering.

Starts the binary at the default log level (a line per request) with its
standard output on a pipe this script does not read, sends enough requests
to fill the pipe many times over, and checks that every one is answered
within its timeout; then reads the pipe and checks that every request's line
arrives once the reader catches up, and that the node stops cleanly. A node
that wrote its lines on the threads answering requests froze once the pipe
was full (a stalled log shipper or a full `docker logs` pipe does the same).

    scripts/log_stall_test.py --bin target/debug/esim-reseller

Python 3 standard library only.
"""

import argparse
import http.client
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time

PUBLIC, OPERATOR, SIMULATORS = 18680, 18681, 18690
# A pipe holds 64 KiB; a request's line is about 200 bytes: some 300 lines
# fill it, and these are ten times as many.
REQUESTS = 3000


def wait_for_health(deadline):
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", PUBLIC, timeout=1)
            conn.request("GET", "/partner/v1/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit("the server did not answer its health check")


def hammer(count):
    """Sends `count` health checks on one connection; fails on the first
    that is not answered 200 within 5 s."""
    conn = http.client.HTTPConnection("127.0.0.1", PUBLIC, timeout=5)
    began = time.monotonic()
    for n in range(count):
        try:
            conn.request("GET", "/partner/v1/health")
            response = conn.getresponse()
            response.read()
        except OSError as err:
            sys.exit(f"request {n + 1} of {count} not answered within 5 s ({err}): logging held it")
        if response.status != 200:
            sys.exit(f"request {n + 1} answered {response.status}")
    return time.monotonic() - began


def read_lines(pipe, wanted, deadline):
    """Reads the server's output until `wanted` request lines came or the
    deadline passed; returns how many came."""
    selector = selectors.DefaultSelector()
    selector.register(pipe, selectors.EVENT_READ)
    seen, tail = 0, b""
    while seen < wanted and time.monotonic() < deadline:
        if not selector.select(timeout=0.5):
            continue
        chunk = os.read(pipe.fileno(), 1 << 16)
        if not chunk:
            break
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        seen += sum(1 for line in lines if b"request finished" in line and b"/health" in line)
    return seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ)
        env.pop("RUST_LOG", None)
        env.update({
            "ESIM__DATABASE__URL": f"sqlite://{work}/stall.db?mode=rwc",
            "ESIM__HTTP__PUBLIC_ADDR": f"127.0.0.1:{PUBLIC}",
            "ESIM__HTTP__OPERATOR_ADDR": f"127.0.0.1:{OPERATOR}",
            "ESIM__SIMULATORS__ADDR": f"127.0.0.1:{SIMULATORS}",
            "ESIM__LOG__LEVEL": "info",
            "ESIM__LOG__FORMAT": "json",
        })
        server = subprocess.Popen([args.bin, "serve"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)
        try:
            wait_for_health(time.monotonic() + 60)
            took = hammer(REQUESTS)
            print(f"{REQUESTS} requests answered in {took:.1f} s with nobody reading the output")
            seen = read_lines(server.stdout, REQUESTS, time.monotonic() + 30)
            if seen < REQUESTS:
                sys.exit(f"only {seen} of {REQUESTS} request lines reached the output once it was read")
            print(f"all {seen} request lines reached the output once it was read")
            server.send_signal(signal.SIGTERM)
            # Read on while it stops, as a live reader would.
            read_lines(server.stdout, 1 << 30, time.monotonic() + 30)
            code = server.wait(timeout=5)
            if code != 0:
                sys.exit(f"the server exited {code} on SIGTERM")
            print("stopped cleanly")
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()
