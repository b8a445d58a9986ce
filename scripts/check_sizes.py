#!/usr/bin/env python3
"""Keeps the rooms small: no source file over 600 lines and no function over
80 lines, outside tests and generated code.

    scripts/check_sizes.py           # exit 1 naming every file or function over its limit
    scripts/check_sizes.py --report  # also list the ten largest of each, passing or not

Reads `src/**/*.rs`, `entities/src/**/*.rs` and `migration/src/**/*.rs`.
A file's size is its line count without its `#[cfg(test)]` module (the tests
beside pure code may grow with the code they prove). A function's size runs
from its `fn` line to the line that closes its body, found by counting braces
outside strings, chars and comments. Functions inside a `#[cfg(test)]` module
are not counted.

Python 3 standard library only.
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TREES = ["src", "entities/src", "migration/src"]
FILE_LIMIT = 600
FUNCTION_LIMIT = 80

FN_START = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)"
)


def strip_code(line, in_block_comment):
    """The line with strings, chars and comments blanked, and whether a
    block comment is still open at its end."""
    out, i, n = [], 0, len(line)
    while i < n:
        if in_block_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i, in_block_comment = end + 2, False
            continue
        two = line[i : i + 2]
        ch = line[i]
        if two == "//":
            break
        if two == "/*":
            in_block_comment, i = True, i + 2
            continue
        if ch == '"' or (ch == "r" and re.match(r'r#*"', line[i:])):
            # Raw strings: r"..", r#".."#; plain strings with escapes.
            raw = re.match(r'r(#*)"', line[i:])
            if raw:
                close = '"' + raw.group(1)
                end = line.find(close, i + len(raw.group(0)))
                i = n if end < 0 else end + len(close)
            else:
                j = i + 1
                while j < n and line[j] != '"':
                    j += 2 if line[j] == "\\" else 1
                i = j + 1
            out.append('""')
            continue
        if ch == "'":
            char = re.match(r"'(?:\\.|[^\\'])[^']{0,8}'", line[i:])
            if char and len(char.group(0)) <= 10 and not re.match(r"'\w+\b(?!')", line[i:]):
                out.append("' '")
                i += len(char.group(0))
                continue
        out.append(ch)
        i += 1
    return "".join(out), in_block_comment


def test_module_span(lines):
    """(start, end) line indexes of the file's `#[cfg(test)] mod` block, or None."""
    for index, line in enumerate(lines):
        if line.strip() == "#[cfg(test)]" and index + 1 < len(lines) and re.match(
            r"\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{", lines[index + 1]
        ):
            end = block_end(lines, index + 1)
            return index, end
    return None


def block_end(lines, start):
    """Index of the line closing the first `{` found from `start`."""
    depth, opened, in_comment = 0, False, False
    for index in range(start, len(lines)):
        code, in_comment = strip_code(lines[index], in_comment)
        for ch in code:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
                if opened and depth == 0:
                    return index
        if not opened and code.rstrip().endswith(";"):
            return index  # a declaration without a body
    return len(lines) - 1


def measure(path):
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    span = test_module_span(lines)
    skipped = set(range(span[0], span[1] + 1)) if span else set()
    file_lines = len([i for i in range(len(lines)) if i not in skipped and (lines[i] or i < len(lines) - 1)])
    functions = []
    for index, line in enumerate(lines):
        if index in skipped:
            continue
        found = FN_START.match(line)
        if found:
            end = block_end(lines, index)
            functions.append((found.group(1), index + 1, end - index + 1))
    return file_lines, functions


def sources():
    for tree in TREES:
        for folder, _, names in os.walk(os.path.join(ROOT, tree)):
            for name in sorted(names):
                if name.endswith(".rs"):
                    yield os.path.relpath(os.path.join(folder, name), ROOT)


def main():
    report = "--report" in sys.argv[1:]
    files, functions, failures = [], [], []
    for path in sources():
        size, fns = measure(os.path.join(ROOT, path))
        files.append((size, path))
        if size > FILE_LIMIT:
            failures.append(f"{path}: {size} lines (limit {FILE_LIMIT}, tests not counted)")
        for name, line, length in fns:
            functions.append((length, f"{path}:{line} {name}"))
            if length > FUNCTION_LIMIT:
                failures.append(f"{path}:{line}: fn {name} is {length} lines (limit {FUNCTION_LIMIT})")
    if report:
        print("largest files:")
        for size, path in sorted(files, reverse=True)[:10]:
            print(f"  {size:5} {path}")
        print("longest functions:")
        for length, where in sorted(functions, reverse=True)[:10]:
            print(f"  {length:5} {where}")
    if failures:
        print("rooms over their size:", *failures, sep="\n  ")
        return 1
    print(f"sizes: {len(files)} files within {FILE_LIMIT} lines, {len(functions)} functions within {FUNCTION_LIMIT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
