#!/usr/bin/env python3
"""The module graph of carma's library, derived from its `use` lines and `crate::` paths.

Usage: python3 reports/architecture/modgraph.py [SRC_DIR] [--json]

It counts what issue 22 asks to bring to zero:
- arrows running back up: an import from a top-level module to one declared *above* it in
  LAYERS (the intended layering, lowest first, as ARCHITECTURE.md describes it);
- circles: groups of two or more files that import each other (strongly connected
  components of the file graph, test files left out);
- source files over 700 lines.

It reads text only: `use crate::…`, `use super::…`, grouped `use` trees and inline
`crate::a::b` paths. `#[cfg(test)]` modules and `tests.rs` files are left out, because a
test may look at any layer. Standard library only, so it runs on any machine with python3.
"""

import json
import os
import re
import sys

# The intended layers, lowest first. A module may import only from its own layer or below.
# Top-level modules not listed here are reported as unplaced (and counted as a failure).
LAYERS = [
    ["clock", "error", "id", "text", "systemd", "access", "fsutil", "scratch"],
    ["spec", "sched"],
    ["exec"],
    ["estimate", "gpu", "config", "home"],
    ["journal", "inventory", "intake"],
    ["view", "notify", "metrics"],
    ["session"],
    ["tick", "report", "doctor"],
    ["slurm"],
    ["sim", "replay"],
    ["bench"],
    ["serve", "mcp"],
    ["cli", "submit_argv"],
    ["commands"],
]

LINES_MAX = 700
FN_LINES_MAX = 70


def long_functions(text):
    """(name, lines, explained) of every fn longer than FN_LINES_MAX lines. `explained`: a
    plain `//` comment sits among the lines right above it (attributes and docs skipped),
    saying why it is long."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+|async\s+|unsafe\s+)*fn\s+(\w+)", line)
        if not m or line.rstrip().endswith(";"):
            continue
        depth, started, end = 0, False, None
        for j in range(i, len(lines)):
            code = re.sub(r'"(?:\\.|[^"\\])*"', '""', lines[j].split("//")[0])
            for ch in code:
                if ch == "{":
                    depth += 1
                    started = True
                elif ch == "}":
                    depth -= 1
            if started and depth <= 0:
                end = j
                break
            if not started and code.rstrip().endswith(";"):
                break
        if end is None or end - i + 1 <= FN_LINES_MAX:
            continue
        k, explained = i - 1, False
        while k >= 0 and re.match(r"\s*(///|//|#\[)", lines[k]):
            if re.match(r"\s*//(?!/)", lines[k]):
                explained = True
            k -= 1
        out.append((m.group(1), end - i + 1, explained))
    return out


def module_of(rel):
    """src-relative path -> module path (tuple)."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def strip_tests(text, comments=True):
    """Drops `#[cfg(test)] mod x { … }` blocks (brace-matched) and, unless told, comments."""
    if comments:
        text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [re.sub(r"as\w+$", "", tree)]
    prefix, inner = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    items.append(cur)
    out = []
    for it in items:
        if it:
            out.extend(expand_use(prefix + it))
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    as_json = "--json" in sys.argv
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "..", "src")
    src = os.path.normpath(src)

    files, test_only = {}, set()
    for root, _, names in os.walk(src):
        if os.path.basename(root) == "tests":
            continue
        for n in names:
            if n.endswith(".rs") and n != "tests.rs":
                rel = os.path.relpath(os.path.join(root, n), src)
                files[module_of(rel)] = rel
                with open(os.path.join(src, rel), encoding="utf-8") as f:
                    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+);", f.read()):
                        test_only.add(module_of(rel) + (m.group(1),))
    # Modules declared `#[cfg(test)] mod x;` are tests, like tests.rs.
    files = {m: rel for m, rel in files.items() if m not in test_only}
    modules = set(files)

    def resolve(path):
        """Longest module prefix of a path, or None."""
        for k in range(len(path), 0, -1):
            if tuple(path[:k]) in modules:
                return tuple(path[:k])
        return None

    edges = {}  # file module -> set of file modules
    for mod, rel in files.items():
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = strip_tests(f.read())
        targets = set()
        paths = []
        for m in re.finditer(r"\buse\s+((?:crate|super|self)::[^;]+);", text):
            paths.extend(expand_use(m.group(1)))
        paths.extend(re.findall(r"(?<![\w:])(?:crate|super)(?:::\w+)+", text))
        for p in paths:
            segs = [s for s in p.split("::") if s]
            if segs[0] == "crate":
                segs = segs[1:]
            elif segs[0] == "super":
                base = list(mod)
                while segs and segs[0] == "super":
                    base = base[:-1]
                    segs = segs[1:]
                segs = base + segs
            elif segs[0] == "self":
                segs = list(mod) + segs[1:]
            t = resolve(segs)
            if t and t != mod and t != ():
                targets.add(t)
        edges[mod] = targets

    layer_of = {}
    for i, names in enumerate(LAYERS):
        for n in names:
            layer_of[n] = i

    top = lambda m: m[0] if m else "lib"
    back, unplaced = [], set()
    for a, ts in edges.items():
        for b in ts:
            ta, tb = top(a), top(b)
            if ta == tb or ta in ("lib", "main") or tb in ("lib", "main"):
                continue
            for t in (ta, tb):
                if t not in layer_of:
                    unplaced.add(t)
            if ta in layer_of and tb in layer_of and layer_of[tb] > layer_of[ta]:
                back.append((files[a], files[b]))

    # Tarjan's strongly connected components over files.
    index, low, on, stack, sccs, counter = {}, {}, set(), [], [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                sccs.append(sorted(files[c] for c in comp))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            strong(v)

    long_files, long_fns = [], []
    for rel in files.values():
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = f.read()
        n = text.count("\n")
        if n > LINES_MAX:
            long_files.append((rel, n))
        for name, length, explained in long_functions(strip_tests(text, comments=False)):
            long_fns.append((rel, name, length, explained))

    result = {
        "files": len(files),
        "arrows": sum(len(t) for t in edges.values()),
        "back_arrows": sorted(back),
        "circles": sorted(sccs),
        "files_over_700_lines": sorted(long_files, key=lambda x: -x[1]),
        "unplaced_modules": sorted(unplaced),
        "functions_over_70_lines": sorted(long_fns, key=lambda x: -x[2]),
    }
    if as_json:
        print(json.dumps(result, indent=2))
        return
    print(f"files {result['files']}, arrows {result['arrows']}")
    print(f"arrows running back up: {len(back)}")
    for a, b in result["back_arrows"]:
        print(f"  src/{a} -> src/{b}")
    print(f"circles: {len(sccs)}")
    for c in result["circles"]:
        print("  " + " <-> ".join("src/" + x for x in c))
    print(f"files over {LINES_MAX} lines: {len(long_files)}")
    for rel, n in result["files_over_700_lines"]:
        print(f"  src/{rel} {n}")
    unexplained = [f for f in result["functions_over_70_lines"] if not f[3]]
    print(
        f"functions over {FN_LINES_MAX} lines: {len(long_fns)}, "
        f"{len(unexplained)} without a comment saying why"
    )
    for rel, name, length, explained in result["functions_over_70_lines"]:
        print(f"  src/{rel} {name} {length}" + ("" if explained else " (no why)"))
    if unplaced:
        print("modules in no layer: " + ", ".join(sorted(unplaced)))


if __name__ == "__main__":
    main()
