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
  `unsafe_code`, `#[unsafe(no_mangle)]` included); this check makes sure
  the only exemptions are those places: every mention of `unsafe_code` in
  the workspace's sources is a whole-line `#![forbid(unsafe_code)]`, an
  `#[allow(unsafe_code)]` right above a `mod` declaration whose module is
  listed, or an `#![allow(unsafe_code)]` inside a listed file, and every
  listed place has its exemption. Where the lint is blind (another crate's
  macro expanding to `unsafe`, doctests) the word `unsafe` in any .rs file
  outside the places fails; so do `include!`, a `#[path]` leaving its crate
  or its place, and cargo configuration setting rustc flags. Every crate
  whose line says `(forbid unsafe)` carries `#![forbid(unsafe_code)]` in its
  root (outside a block comment), and every crate inherits the workspace
  lints.

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
# Whole lines: an attribute, then at most a // comment. Anything else on the
# line (a second attribute, an item) makes it no exemption the check grants.
FORBID = re.compile(r"^\s*#!\[forbid\(unsafe_code\)\]\s*(//.*)?$")
ALLOW_ON_MOD = re.compile(r"^\s*#\[allow\(unsafe_code\)\]\s*(//.*)?$")
ALLOW_INNER = re.compile(r"^\s*#!\[allow\(unsafe_code\)\]\s*(//.*)?$")
# The compiler does not lint `unsafe` that a macro of another crate expands
# to, nor doctests: the word itself, anywhere in a .rs file (comments and
# strings included), is a backstop. The one use outside the listed places is
# a type: the C handler's function pointer.
UNSAFE_WORD = re.compile(r"\bunsafe\b")
FN_POINTER_TYPE = re.compile(r"^\s*Option<unsafe extern \"C\" fn\(")
# Source inclusion, which needs no Cargo edge and no mod in the tree.
INCLUDE = re.compile(r"\binclude!\s*\(")
PATH_ATTR = re.compile(r"#\s*\[\s*path\s*=\s*\"([^\"]*)\"\s*\]")
PATH_ATTR_ANY = re.compile(r"#\s*\[\s*path\b")
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
    run = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"layers: cargo metadata failed (a cycle between crates?):\n{run.stderr.strip()}")
    return json.loads(run.stdout)


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


def without_block_comments(text: str) -> str:
    """The text with /* ... */ comments blanked (a forbid inside one is none)."""
    return re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)


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
        text_lines = without_block_comments(root.read_text()).splitlines() if root else []
        if root is None or not any(FORBID.match(line) for line in text_lines):
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
    # Cargo's configuration, here and in every folder above (cargo reads them
    # all): flags for rustc could lower the lint below what [lints] says.
    for folder in [ROOT, *ROOT.parents]:
        for config in (folder / ".cargo/config.toml", folder / ".cargo/config"):
            if config.is_file() and re.search(r"rustflags|cap-lints|-A|allow",
                                              config.read_text()):
                problems.append(f"{config}: sets rustc flags (they could switch the lint off)")

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
    member_dirs = sorted(dirs.values(), key=lambda d: len(d.parts), reverse=True)

    def crate_dir(path: Path) -> Path | None:
        """The directory of the innermost workspace crate holding `path`."""
        return next((d for d in member_dirs if path.is_relative_to(d)), None)

    for rel in files:
        path = ROOT / rel
        if not any(path.is_relative_to(d) for d in dirs.values()) or rel.startswith("fuzz/"):
            continue
        scanned += 1
        lines = path.read_text().splitlines()
        home = listed(rel)
        for i, line in enumerate(lines):
            where = f"{rel}:{i + 1}"
            if home is None and UNSAFE_WORD.search(line) and not FN_POINTER_TYPE.match(line):
                problems.append(f"{where}: the word unsafe outside the places that may hold it")
            if INCLUDE.search(line):
                problems.append(f"{where}: include! brings in code no module line shows")
            if PATH_ATTR_ANY.search(line):
                m = PATH_ATTR.search(line)
                target = (path.parent / m.group(1)).resolve() if m else None
                own = crate_dir(path)
                if (target is None or target.suffix != ".rs" or own is None
                        or crate_dir(target) != own or target.is_relative_to(ROOT / "fuzz")
                        or listed(str(target.relative_to(ROOT))) != home):
                    problems.append(f"{where}: #[path] to a file outside this module's crate "
                                    "or its place (a module may only move within both)")
            if "unsafe_code" not in line or FORBID.match(line):
                continue
            if ALLOW_INNER.match(line) and home is not None:
                exempted.add(home)
                continue
            if ALLOW_ON_MOD.match(line):
                m = MOD_DECL.match(lines[i + 1]) if i + 1 < len(lines) else None
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
                            "listed places (an #[allow] must stand alone, right above its mod)")

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
