#!/usr/bin/env python3
"""Checks that the crate's top-level modules depend on each other one way.

    scripts/check_layers.py            # exit 1 on a cycle or an import across the layers

Reads every `src/**/*.rs` (test modules and comment lines excluded) for `crate::<module>`
paths, including those inside `use crate::{...}` groups, and builds the graph
of top-level modules (`src/<module>.rs` or `src/<module>/`). It fails when

- two top-level modules import each other, directly or through others (a
  cycle), naming the modules and the files that close it;
- a module below the edges imports an edge: only `app` (the wiring), the
  edges themselves and the binary may import `http` or `operator`.

Python 3 standard library only.
"""

import collections
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

# The edges (they answer HTTP) and what may import them.
EDGES = {"http", "operator"}
ABOVE_THE_EDGES = {"app", "docs", "loadtest"}
# Files outside the module graph: the binary and the crate root.
IGNORED = {"main", "lib"}


def crate_paths(text):
    """Top-level module names a file imports through `crate::`."""
    names = set(re.findall(r"crate::(\w+)", text))
    for group in re.finditer(r"use crate::\{(.*?)\};", text, re.S):
        depth, current, items = 0, "", []
        for ch in group.group(1):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                items.append(current)
                current = ""
            else:
                current += ch
        items.append(current)
        for item in items:
            name = item.strip().split("::")[0].split("{")[0].strip()
            if re.fullmatch(r"\w+", name or ""):
                names.add(name)
    return names


def graph():
    """(module -> imported modules, (module, imported) -> files)."""
    edges = collections.defaultdict(set)
    files = collections.defaultdict(set)
    for root, _, names in os.walk(SRC):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, SRC)
            top = rel.split(os.sep)[0].removesuffix(".rs")
            if top in IGNORED:
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read().split("#[cfg(test)]")[0]
            # Comments may name any module (intra-doc links): only code counts.
            text = re.sub(r"(?m)^\s*//.*$", "", text)
            for imported in crate_paths(text):
                if imported != top and imported not in IGNORED:
                    edges[top].add(imported)
                    files[(top, imported)].add(rel)
    return edges, files


def cycles(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(edges) | {n for targets in edges.values() for n in targets}):
        if node not in index:
            visit(node)
    return found


def main():
    edges, files = graph()
    problems = []
    for component in cycles(edges):
        members = set(component)
        links = [
            f"    {a} -> {b}: {', '.join(sorted(files[(a, b)]))}"
            for a in component
            for b in sorted(edges[a] & members)
        ]
        problems.append("import cycle between " + ", ".join(component) + ":\n" + "\n".join(links))
    for module, imported in sorted(edges.items()):
        if module in EDGES or module in ABOVE_THE_EDGES:
            continue
        for edge in sorted(imported & EDGES):
            problems.append(
                f"{module} imports the edge `{edge}` ({', '.join(sorted(files[(module, edge)]))}); "
                "only app and the edges may"
            )
    if problems:
        print("\n".join(problems))
        print(f"\n{len(problems)} layering problem(s)")
        return 1
    layers = ", ".join(f"{m} -> {sorted(t)}" for m, t in sorted(edges.items()))
    print(f"layers point one way ({len(edges)} modules): {layers}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
