#!/usr/bin/env python3
"""Reads the JSON lines `scripts/bench.sh orders` prints and writes the run
as the Markdown table docs/benchmarks.md keeps: one row per database and
partner count, over every drive of it.

    scripts/bench.sh orders | tee run.jsonl
    python3 scripts/bench_table.py run.jsonl           # or lines on stdin
    python3 scripts/bench_table.py --by build a.jsonl  # a table per build

A line may also be wrapped as `{"build": ..., "line": {...}}` (how the
run files in docs/benchmarks/ keep alternated builds apart); `--by` names
the wrapper's field that splits the table. Lines of other kinds (profiles,
statements) are skipped.

Orders/s and KiB written are the mean over the drives with their range in
brackets; p99, CPU and seconds to settle are their range. `x one`
is the row's mean against the same database's one-partner mean of the same
table. CPU is the server's an accepted and settled order, then PostgreSQL's
own after a `+` (the same for the naive loop, whose lines carry them since
the sixtieth run). `money held` counts the drives whose money held (`verify`
after each). The naive one-transaction-per-order loop is shown at the
row's partner count (lines without `partners`, from before the loop took
them, count as one partner), and `x naive` is the service's mean against
it. The footer gives `GET /balance`.

`--self-test` checks the arithmetic on lines made up here.
"""

import argparse
import json
import statistics
import sys
from collections import defaultdict


def unwrap(record):
    """The bench line a record carries, and the record it came in."""
    if isinstance(record.get("line"), dict):
        return record["line"], record
    return record, record


def number(value, digits):
    """`value` with thousands separators, rounded to `digits`."""
    return f"{value:,.{digits}f}"


def span(values, digits=0):
    """`min-max`, or the one value; rounded to `digits`."""
    shown = [v for v in values if v is not None]
    if not shown:
        return ""
    low, high = number(min(shown), digits), number(max(shown), digits)
    return low if low == high else f"{low}-{high}"


def spread(values, digits=0):
    """`mean (min-max)`, or the mean alone when the range shows one value."""
    shown = [v for v in values if v is not None]
    if not shown:
        return ""
    mean, ranged = number(statistics.fmean(shown), digits), span(shown, digits)
    return mean if ranged == number(min(shown), digits) else f"{mean} ({ranged})"


class Table:
    """The drives of one table, grouped by what each line measured."""

    def __init__(self):
        self.orders = defaultdict(list)
        self.balance = defaultdict(list)
        self.naive = defaultdict(list)

    def add(self, line):
        database = line.get("database")
        result = line.get("result") or {}
        if "partners" in line and "accepted_per_second" in result:
            self.orders[(database, line["partners"])].append(line)
        elif line.get("read") == "/balance":
            self.balance[database].append(result.get("requests_per_second"))
        elif "baseline" in line and "orders_per_second" in line:
            self.naive[(database, line.get("partners", 1))].append(line)

    def one_partner_mean(self, database):
        drives = self.orders.get((database, 1), [])
        rates = [d["result"]["accepted_per_second"] for d in drives]
        return statistics.fmean(rates) if rates else None

    def row(self, database, partners):
        drives = self.orders[(database, partners)]
        rates = [d["result"]["accepted_per_second"] for d in drives]
        one = self.one_partner_mean(database)
        ratio = f"{statistics.fmean(rates) / one:.2f}" if one and partners != 1 else ""
        cpu = span([d.get("server_cpu_us_per_accepted_and_settled_order") for d in drives])
        pg = span([d.get("postgres_cpu_us_per_accepted_and_settled_order") for d in drives])
        held = sum(1 for d in drives if d.get("money_invariants_held") is True)
        naive_lines = self.naive.get((database, partners), [])
        naive = [n["orders_per_second"] for n in naive_lines]
        times = f"{statistics.fmean(rates) / statistics.fmean(naive):.1f}" if naive else ""
        naive_cpu = span([n.get("naive_cpu_us_per_order") for n in naive_lines])
        naive_pg = span([n.get("postgres_cpu_us_per_order") for n in naive_lines])
        cells = [
            database,
            f"{partners:,}",
            str(len(drives)),
            spread(rates),
            ratio,
            span([d["result"].get("p99_ms") for d in drives], 1),
            f"{cpu} + {pg}" if pg else cpu,
            spread([d.get("disk_kib_written_per_order") for d in drives], 1),
            span([d.get("seconds_to_settle_after_the_run") for d in drives]),
            f"{held}/{len(drives)}",
            spread(naive),
            f"{naive_cpu} + {naive_pg}" if naive_pg else naive_cpu,
            times,
        ]
        return "| " + " | ".join(cells) + " |"

    def markdown(self):
        head = [
            "| database | partners | drives | accepted orders/s | x one | p99 ms "
            "| CPU µs an order | KiB written an order | settled after (s) | money held "
            "| naive loop orders/s | its CPU µs an order | x naive |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        rows = [self.row(db, n) for db, n in sorted(self.orders, key=order_key)]
        foot = [
            f"- {database}: `GET /balance` {spread(self.balance[database])} req/s"
            for database in sorted(self.balance, key=lambda d: order_key((d, 0)))
        ]
        return "\n".join(head + rows + ([""] + foot if foot else []))


def order_key(key):
    database, partners = key
    return (0 if database == "sqlite" else 1, database or "", partners)


def tables(records, by):
    """The tables of `records`, keyed by the wrapper's `by` field."""
    split = defaultdict(Table)
    for record in records:
        line, wrapper = unwrap(record)
        split[str(wrapper.get(by, "")) if by else ""].add(line)
    return split


def records_of(stream):
    """The JSON objects among a stream's lines (bench.sh's own words between
    them, and anything else not JSON, skipped)."""
    for text in stream:
        text = text.strip()
        if not text.startswith("{"):
            continue
        try:
            yield json.loads(text)
        except json.JSONDecodeError:
            continue


def read_records(paths):
    if not paths:
        yield from records_of(sys.stdin)
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            yield from records_of(stream)


def self_test():
    def order(db, partners, rate, cpu, pg=None, money=True):
        return {
            "database": db, "partners": partners,
            "result": {"accepted_per_second": rate, "p99_ms": 10.0 + partners / 100},
            "server_cpu_us_per_accepted_and_settled_order": cpu,
            "postgres_cpu_us_per_accepted_and_settled_order": pg,
            "disk_kib_written_per_order": 10.0, "seconds_to_settle_after_the_run": 0,
            "money_invariants_held": money,
        }

    records = [
        {"build": "a", "line": order("sqlite", 1, 10000, 100)},
        {"build": "a", "line": order("sqlite", 1, 12000, 110)},
        {"build": "a", "line": order("sqlite", 100, 5500, 150, money=False)},
        {"build": "a", "line": order("postgres", 1, 5000, 120, 180)},
        {"build": "a", "line": {"database": "sqlite", "read": "/balance",
                                 "result": {"requests_per_second": 40000}}},
        {"build": "a", "line": {"database": "sqlite", "baseline": "naive",
                                 "orders_per_second": 2000}},
        {"build": "a", "line": {"database": "sqlite", "baseline": "naive", "partners": 100,
                                 "orders_per_second": 1100, "naive_cpu_us_per_order": 480}},
        {"build": "b", "line": order("sqlite", 1, 9000, 130)},
        {"build": "a", "line": {"statement": "UPDATE", "calls": 1}},
    ]
    split = tables(records, "build")
    assert sorted(split) == ["a", "b"], split.keys()
    text = split["a"].markdown()
    lines = text.splitlines()
    assert lines[2] == ("| sqlite | 1 | 2 | 11,000 (10,000-12,000) |  | 10.0 | 100-110 "
                        "| 10.0 | 0 | 2/2 | 2,000 |  | 5.5 |"), lines[2]
    assert lines[3].startswith("| sqlite | 100 | 1 | 5,500 | 0.50 | 11.0 | 150 |"), lines[3]
    assert lines[3].endswith("| 0/1 | 1,100 | 480 | 5.0 |"), lines[3]
    assert lines[4].startswith("| postgres | 1 | 1 | 5,000 |  | 10.0 | 120 + 180 |"), lines[4]
    assert lines[4].endswith("| 1/1 |  |  |  |"), lines[4]
    assert lines[6] == "- sqlite: `GET /balance` 40,000 req/s", text
    assert "9,000" not in text, "build b's drive leaked into build a's table"
    assert len(lines) == 7, lines
    print("bench_table self-test passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="JSON lines files (stdin if none)")
    parser.add_argument("--by", help="the wrapper's field that splits the table (build, round)")
    parser.add_argument("--self-test", action="store_true", help="check the arithmetic and exit")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    split = tables(read_records(args.files), args.by)
    for name in sorted(split):
        if args.by:
            print(f"\n{args.by} {name}\n")
        print(split[name].markdown())


if __name__ == "__main__":
    main()
