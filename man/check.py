#!/usr/bin/env python3
"""make man-check: the manual pages cover exactly the API and render cleanly.

Fails when
- an exported symbol (c-tests/exported-symbols.txt) has no man3 page, or a
  man3 page documents a name that is not exported;
- a page's .TH or NAME line does not name its file;
- a man3 page's SYNOPSIS does not show the prototype of include/rdma/ib_cm.h
  or ib_sa.h (whitespace aside), so a changed signature cannot leave its page behind;
- ib_cm(7) does not refer to every man3 page;
- an EXAMPLES program (each .EX/.EE block, as the reader sees it) does not
  compile against the header with -Wall -Werror;
- a page has a byte outside ASCII, or any message from
  `mandoc -T lint -W warning` or `groff -man -Tutf8 -ww -z`
  (what `man --warnings -l` runs).
The template (man/page-template.3) is linted too.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAN = ROOT / "man"
HEADER = ROOT / "include/rdma/ib_cm.h"
SA_HEADER = ROOT / "include/rdma/ib_sa.h"
SYMBOLS = ROOT / "c-tests/exported-symbols.txt"
C_LOCALE = dict(os.environ, LC_ALL="C")


def lint(page: Path) -> list[str]:
    """Every message mandoc's and groff's checkers print for `page`."""
    problems = []
    data = page.read_bytes()
    for lineno, line in enumerate(data.splitlines(), 1):
        if any(b > 0x7F for b in line):
            problems.append(f"{page.name}:{lineno}: non-ASCII byte (use a roff escape)")
    runs = [
        ["mandoc", "-T", "lint", "-W", "warning", str(page)],
        ["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
    ]
    for cmd in runs:
        out = subprocess.run(cmd, capture_output=True, text=True, env=C_LOCALE)
        text = (out.stdout + out.stderr).strip()
        if text or out.returncode != 0:
            problems.append(text or f"{page.name}: {cmd[0]} exited {out.returncode}")
    return problems


def so_target(page: Path) -> str | None:
    """The page a link page (`.so man3/other.3`) points to."""
    lines = [l for l in page.read_text().splitlines() if not l.startswith('.\\"')]
    if len(lines) == 1 and lines[0].startswith(".so "):
        return lines[0][4:].strip()
    return None


def title_and_name(page: Path, section: str) -> list[str]:
    """.TH names the file in upper case; NAME lists the file's name."""
    text = page.read_text()
    problems = []
    th = re.search(r"^\.TH\s+(\S+)\s+(\S+)", text, re.M)
    if not th or th.group(1) != page.stem.upper() or th.group(2) != section:
        problems.append(f"{page.name}: .TH must be '.TH {page.stem.upper()} {section} ...'")
    name = re.search(r"^\.SH NAME\n(.*?) \\- ", text, re.M)
    names = [n.strip() for n in name.group(1).split(",")] if name else []
    if page.stem not in names:
        problems.append(f"{page.name}: the NAME line must list {page.stem}")
    return problems


def normalise(decl: str) -> str:
    decl = re.sub(r"\s+", " ", decl)
    return re.sub(r"\( ", "(", re.sub(r" \)", ")", decl)).strip()


def header_prototype(symbol: str, header: str) -> str | None:
    m = re.search(rf"^[^\n;{{}}#/]*\b{symbol}\([^;]*\);", header, re.M)
    return normalise(m.group(0)) if m else None


def rendered_synopsis(page: Path) -> str:
    """The SYNOPSIS section as a reader sees it, formatting removed."""
    out = subprocess.run(
        ["mandoc", "-T", "ascii", "-O", "width=400", str(page)],
        capture_output=True, text=True, check=True, env=C_LOCALE,
    ).stdout
    plain = re.sub(r".\x08", "", out)
    m = re.search(r"^SYNOPSIS\n(.*?)^\S", plain, re.M | re.S)
    return normalise(m.group(1)) if m else ""


def examples(page: Path) -> list[str]:
    """The .EX/.EE blocks of `page` as the reader sees them."""
    blocks = re.findall(r"^\.EX\n(.*?)^\.EE$", page.read_text(), re.M | re.S)
    unescape = {"\\-": "-", "\\e": "\\", "\\&": "", "\\(aq": "'", "\\(dq": '"'}
    out = []
    for block in blocks:
        for escape, plain in unescape.items():
            block = block.replace(escape, plain)
        out.append(block)
    return out


def compile_examples(page: Path) -> list[str]:
    """Each example of `page` compiles: it is a whole translation unit."""
    problems = []
    for i, source in enumerate(examples(page), 1):
        cmd = [os.environ.get("CC", "cc"), "-std=gnu11", "-Wall", "-Werror",
               "-fsyntax-only", "-I", str(ROOT / "include"), "-x", "c", "-"]
        out = subprocess.run(cmd, input=source, capture_output=True, text=True, env=C_LOCALE)
        if out.returncode != 0:
            problems.append(f"{page.name}: example {i} does not compile:\n{out.stderr.strip()}")
    return problems


def main() -> int:
    missing = [t for t in ("mandoc", "groff") if not shutil.which(t)]
    if missing:
        print(f"man: {' and '.join(missing)} not found: run make deps (scripts/install-deps.sh)")
        return 1
    symbols = set(SYMBOLS.read_text().split())
    header = HEADER.read_text() + SA_HEADER.read_text()
    man3 = sorted((MAN / "man3").glob("*.3"))
    man7 = sorted((MAN / "man7").glob("*.7"))
    man8 = sorted((MAN / "man8").glob("*.8"))  # ibcmd(8): linted only
    problems = []

    documented = {p.stem for p in man3}
    for s in sorted(symbols - documented):
        problems.append(f"{s}: exported but has no page (copy man/page-template.3 to man/man3/{s}.3)")
    for s in sorted(documented - symbols):
        problems.append(f"man3/{s}.3: documents {s}, which is not exported")

    for page in [MAN / "page-template.3"] + man3 + man7 + man8:
        target = so_target(page)
        if target:
            if not (MAN / target).is_file():
                problems.append(f"{page.name}: .so {target}: no such page")
            continue
        problems += lint(page)
        problems += compile_examples(page)
        if page.parent.name in ("man3", "man7"):
            problems += title_and_name(page, page.suffix[1:])
        if page.parent.name == "man3" and page.stem in symbols:
            proto = header_prototype(page.stem, header)
            if proto is None:
                problems.append(f"{page.name}: {page.stem} is not declared in {HEADER.name}")
            elif proto not in rendered_synopsis(page):
                problems.append(f"{page.name}: SYNOPSIS does not show the header's\n    {proto}")

    overview = (MAN / "man7/ib_cm.7").read_text() if (MAN / "man7/ib_cm.7").exists() else ""
    if not overview:
        problems.append("man7/ib_cm.7: missing")
    for s in sorted(documented):
        if not re.search(rf"^\.BR {s} \(3\)", overview, re.M):
            problems.append(f"ib_cm.7: SEE ALSO does not list {s}(3)")

    n_examples = sum(len(examples(p)) for p in man3 + man7)
    if problems:
        print("man: " + "\n  ".join(["problems:"] + problems))
        return 1
    print(
        f"man: {len(man3)} section-3 pages for {len(symbols)} exported symbols, "
        f"{len(man7)} section-7; prototypes match the header; {n_examples} examples compile; "
        "mandoc -T lint -W warning and groff -ww: no message"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
