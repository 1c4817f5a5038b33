#!/usr/bin/env python3
"""make layers-check: the crate graph and the home of `unsafe` are what
docs/architecture.md says they are.

docs/architecture.md has two blocks this reads:

- "crate graph": one line per workspace crate, `name -> dep, dep` (or
  `name -> nothing`). Every dependency between workspace crates (normal,
  build or dev) must be drawn there, and everything drawn must exist: a crate
  that imports upward needs a Cargo edge the picture does not have, so the
  compiler and this check together forbid it. A path dependency outside the
  workspace (one that could carry the code back in) fails too.
- "unsafe lives in": one path per line (a file, or a directory ending in
  `/`). The compiler finds the `unsafe` (the workspace denies the lint
  `unsafe_code`, macros and `#[unsafe(no_mangle)]` included); this check
  makes sure the only exemptions are those places: every mention of
  `unsafe_code` in the workspace's sources is a `#![forbid(unsafe_code)]`, an
  `#[allow(unsafe_code)]` on a `mod` declaration whose module is listed, or an
  `#![allow(unsafe_code)]` inside a listed file, and every listed place has
  its exemption. Every crate whose line says `(forbid unsafe)` carries
  `#![forbid(unsafe_code)]` in its root, every crate inherits the workspace
  lints, and no cargo config or build script turns the lint off.

Fails, listing every problem, when either stops being true.
"""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs/architecture.md"
FORBID = re.compile(r"^\s*#!\[forbid\(unsafe_code\)\]\s*$")
ALLOW_ON_MOD = re.compile(r"^\s*#\[allow\(unsafe_code\)\]\s*$")
ALLOW_INNER = re.compile(r"^\s*#!\[allow\(unsafe_code\)\]\s*$")
MOD_DECL = re.compile(r"^\s*(pub(\([a-z ]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;\s*$")


def block(text: str, title: str) -> list[str]:
    """The lines of the fenced block right after a line containing `title`."""
    m = re.search(rf"^[^\n]*{re.escape(title)}[^\n]*\n+```[a-z]*\n(.*?)^```$", text, re.M | re.S)
    if not m:
        sys.exit(f"layers: {ARCHITECTURE.name} has no block titled '{title}'")
    return [line.strip() for line in m.group(1).splitlines() if line.strip()]


def drawn_graph(lines: list[str], problems: list[str]) -> tuple[dict[str, set[str]], set[str]]:
    graph, forbid = {}, set()
    for line in lines:
        m = re.fullmatch(r"(\S+)\s+->\s+(.*?)\s*(\(forbid unsafe\))?", line)
        if not m:
            sys.exit(f"layers: cannot read crate graph line {line!r}")
        name, deps, forbids = m.groups()
        if name in graph:
            problems.append(f"{name}: drawn twice in the crate graph")
        graph[name] = set() if deps == "nothing" else {d.strip() for d in deps.split(",")}
        if forbids:
            forbid.add(name)
    return graph, forbid


def metadata(no_deps: bool) -> dict:
    args = ["cargo", "metadata", "--format-version", "1", "--offline"]
    if no_deps:
        args.append("--no-deps")
    return json.loads(subprocess.run(args, cwd=ROOT, check=True, capture_output=True,
                                     text=True).stdout)


def real_graph() -> tuple[dict[str, set[str]], dict[str, Path], dict[str, Path]]:
    meta = metadata(no_deps=True)
    members = {p["name"] for p in meta["packages"]}
    graph, roots, dirs = {}, {}, {}
    for p in meta["packages"]:
        graph[p["name"]] = {d["name"] for d in p["dependencies"] if d["name"] in members}
        dirs[p["name"]] = Path(p["manifest_path"]).parent
        for t in p["targets"]:
            if "lib" in t["kind"] or "rlib" in t["kind"] or "cdylib" in t["kind"]:
                roots[p["name"]] = Path(t["src_path"])
    return graph, roots, dirs


def code(line: str) -> str:
    """The line with a // comment cut off."""
    return line.split("//", 1)[0]


def module_path(decl_file: Path, name: str) -> list[str]:
    """Where `mod name;` in `decl_file` may live, relative to ROOT."""
    base = decl_file.parent
    if decl_file.name not in ("mod.rs", "lib.rs", "main.rs"):
        base = base / decl_file.stem
    return [str((base / f"{name}.rs").relative_to(ROOT)), str((base / name).relative_to(ROOT)) + "/"]


def main() -> int:
    text = ARCHITECTURE.read_text()
    problems: list[str] = []
    drawn, forbid = drawn_graph(block(text, "crate graph"), problems)
    allowed = block(text, "unsafe lives in")
    real, roots, dirs = real_graph()

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

    # Path dependencies anywhere below the workspace, transitively: each must
    # be a member, or code could come back in through a crate nobody draws.
    for p in metadata(no_deps=False)["packages"]:
        if p["source"] is None and p["name"] not in real:
            problems.append(f"{p['name']}: a path dependency outside the workspace "
                            f"({Path(p['manifest_path']).parent})")

    for name in sorted(forbid & set(real)):
        root = roots.get(name)
        if root is None or not any(FORBID.match(line) for line in root.read_text().splitlines()):
            problems.append(f"{name}: drawn as (forbid unsafe), but its root has no "
                            "#![forbid(unsafe_code)]")

    # The lint: denied for the workspace, inherited by every crate, and not
    # switched off from outside the sources.
    workspace = tomllib.loads((ROOT / "Cargo.toml").read_text())
    if workspace.get("workspace", {}).get("lints", {}).get("rust", {}).get("unsafe_code") not in (
            "deny", "forbid"):
        problems.append('Cargo.toml: [workspace.lints.rust] does not say unsafe_code = "deny"')
    for name, d in sorted(dirs.items()):
        manifest = tomllib.loads((d / "Cargo.toml").read_text())
        if manifest.get("lints", {}).get("workspace") is not True:
            problems.append(f"{name}: its Cargo.toml does not say [lints] workspace = true")
    for config in [ROOT / ".cargo/config.toml", ROOT / ".cargo/config", ROOT / "build.rs",
                   *[d / "build.rs" for d in dirs.values()]]:
        if config.is_file() and "unsafe_code" in config.read_text():
            problems.append(f"{config.relative_to(ROOT)}: mentions the lint unsafe_code")

    def listed(rel: str) -> str | None:
        for a in allowed:
            if rel == a or (a.endswith("/") and rel.startswith(a)):
                return a
        return None

    for a in allowed:
        if not (ROOT / a).exists():
            problems.append(f"{a}: listed under 'unsafe lives in', but not in the tree")

    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "*.rs"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    # The workspace's own sources: its crates' directories, not fuzz/ (a
    # workspace of its own, whose targets call the library's C ABI).
    scanned, exempted = 0, set()
    for rel in files:
        path = ROOT / rel
        if not any(path.is_relative_to(d) for d in dirs.values()) or rel.startswith("fuzz/"):
            continue
        scanned += 1
        lines = path.read_text().splitlines()
        for i, raw in enumerate(lines):
            line = code(raw)
            if "unsafe_code" not in line or FORBID.match(line):
                continue
            where = f"{rel}:{i + 1}"
            if ALLOW_INNER.match(line) and listed(rel) is not None:
                exempted.add(listed(rel))
                continue
            if ALLOW_ON_MOD.match(line):
                nxt = next((code(x) for x in lines[i + 1:] if code(x).strip()
                            and not code(x).strip().startswith("#[")), "")
                m = MOD_DECL.match(nxt)
                if m:
                    homes = module_path(path, m.group(3))
                    # The module itself must be listed: not a wider one around it.
                    granted = [h for h in homes if h in allowed]
                    if granted:
                        exempted.update(granted)
                        continue
                    problems.append(f"{where}: unsafe allowed for module {m.group(3)} "
                                    f"({' or '.join(homes)}), which is not listed")
                    continue
            problems.append(f"{where}: an exemption from unsafe_code that is not one of the "
                            "listed places")

    for a in sorted(set(allowed) - exempted):
        if (ROOT / a).exists():
            problems.append(f"{a}: listed under 'unsafe lives in', but nothing allows it unsafe "
                            "code (drop it from the list?)")

    for p in problems:
        print(f"layers: {p}")
    if problems:
        print(f"layers: {len(problems)} problem(s); the picture is in {ARCHITECTURE.relative_to(ROOT)}")
        return 1
    edges = sum(len(d) for d in real.values())
    print(f"layers: {len(real)} crates, {edges} edges, as drawn; unsafe allowed only in the "
          f"{len(allowed)} places listed ({scanned} files read; the compiler denies it elsewhere)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
