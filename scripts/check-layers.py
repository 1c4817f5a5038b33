#!/usr/bin/env python3
"""make layers-check: the crate graph and the home of `unsafe` are what
docs/architecture.md says they are.

docs/architecture.md has two blocks this reads:

- "crate graph": one line per workspace crate, `name -> dep, dep` (or
  `name -> nothing`). Every dependency between workspace crates (normal,
  build or dev) must be drawn there, and everything drawn must exist: a crate
  that imports upward needs a Cargo edge the picture does not have, so the
  compiler and this check together forbid it.
- "unsafe lives in": one path per line (a file, or a directory ending in
  `/`). A `.rs` file of the workspace outside them that uses the keyword
  `unsafe` fails the check, and every crate whose line in the crate graph
  says `(forbid unsafe)` must carry `#![forbid(unsafe_code)]` in its root.

Fails, listing every problem, when either stops being true.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs/architecture.md"
# The keyword as code uses it: a block, fn, impl, trait or extern.
UNSAFE = re.compile(r"\bunsafe\s*(\{|fn\b|impl\b|trait\b|extern\b)")


def block(text: str, title: str) -> list[str]:
    """The lines of the fenced block right after a line containing `title`."""
    m = re.search(rf"^[^\n]*{re.escape(title)}[^\n]*\n+```[a-z]*\n(.*?)^```$", text, re.M | re.S)
    if not m:
        sys.exit(f"layers: {ARCHITECTURE.name} has no block titled '{title}'")
    return [line.strip() for line in m.group(1).splitlines() if line.strip()]


def drawn_graph(lines: list[str]) -> tuple[dict[str, set[str]], set[str]]:
    graph, forbid = {}, set()
    for line in lines:
        m = re.fullmatch(r"(\S+)\s+->\s+(.*?)\s*(\(forbid unsafe\))?", line)
        if not m:
            sys.exit(f"layers: cannot read crate graph line {line!r}")
        name, deps, forbids = m.groups()
        graph[name] = set() if deps == "nothing" else {d.strip() for d in deps.split(",")}
        if forbids:
            forbid.add(name)
    return graph, forbid


def real_graph() -> tuple[dict[str, set[str]], dict[str, Path], dict[str, Path]]:
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
        cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    members = {p["name"] for p in meta["packages"]}
    graph, roots, dirs = {}, {}, {}
    for p in meta["packages"]:
        graph[p["name"]] = {d["name"] for d in p["dependencies"] if d["name"] in members}
        dirs[p["name"]] = Path(p["manifest_path"]).parent
        for t in p["targets"]:
            if "lib" in t["kind"] or "rlib" in t["kind"] or "cdylib" in t["kind"]:
                roots[p["name"]] = Path(t["src_path"])
    return graph, roots, dirs


def code_lines(path: Path):
    """(number, line) of the file with // comments cut off."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        yield n, line.split("//", 1)[0]


def main() -> int:
    text = ARCHITECTURE.read_text()
    drawn, forbid = drawn_graph(block(text, "crate graph"))
    allowed = block(text, "unsafe lives in")
    real, roots, dirs = real_graph()
    problems = []

    for name in sorted(set(real) | set(drawn)):
        if name not in real:
            problems.append(f"{name}: drawn in the crate graph, not a workspace crate")
            continue
        if name not in drawn:
            problems.append(f"{name}: a workspace crate the crate graph does not draw")
            continue
        for dep in sorted(real[name] - drawn[name]):
            problems.append(f"{name} -> {dep}: a dependency the crate graph does not draw "
                            "(an upward or sideways import?)")
        for dep in sorted(drawn[name] - real[name]):
            problems.append(f"{name} -> {dep}: drawn, but {name} does not depend on it")

    for name in sorted(forbid & set(real)):
        root = roots.get(name)
        if root is None or "#![forbid(unsafe_code)]" not in root.read_text():
            problems.append(f"{name}: drawn as (forbid unsafe), but its root has no "
                            "#![forbid(unsafe_code)]")

    def may_hold_unsafe(rel: str) -> bool:
        return any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in allowed)

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.rs"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    # The workspace's own sources: its crates' directories, not fuzz/ (a
    # workspace of its own, whose targets call the library's C ABI).
    scanned = 0
    for rel in files:
        path = ROOT / rel
        if not any(path.is_relative_to(d) for d in dirs.values()) or rel.startswith("fuzz/"):
            continue
        scanned += 1
        if may_hold_unsafe(rel):
            continue
        for n, line in code_lines(path):
            if UNSAFE.search(line):
                problems.append(f"{rel}:{n}: unsafe outside the places that may hold it")

    for p in problems:
        print(f"layers: {p}")
    if problems:
        print(f"layers: {len(problems)} problem(s); the picture is in {ARCHITECTURE.relative_to(ROOT)}")
        return 1
    edges = sum(len(d) for d in real.values())
    print(f"layers: {len(real)} crates, {edges} edges, as drawn; unsafe only where allowed "
          f"({scanned} files read)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
