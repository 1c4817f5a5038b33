#!/usr/bin/env python3
"""make man-check, second part: docs that describe the tree and the output
of `make run` say what is there.

Fails when
- a directory under src/ is not named in docs/architecture.md (as
  `src/<dir>/`), so a new module cannot leave the map behind;
- `make run` prints anything but its one "make run: building ..." line and
  the output of ibcm-cmtime (a build log, a cmake line, a warning);
- the README's copy of that output differs from what `make run` prints,
  numbers aside (each run's numbers differ; its lines, words and columns do
  not).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs/architecture.md"
README = ROOT / "README.md"
RUN_CONNECTIONS = "200"


def architecture() -> list[str]:
    text = ARCHITECTURE.read_text()
    dirs = sorted(p.relative_to(ROOT) for p in (ROOT / "src").rglob("*") if p.is_dir())
    return [f"{ARCHITECTURE.relative_to(ROOT)}: does not name {d}/ (a directory of the tree)"
            for d in dirs if f"{d}/" not in text]


def masked(lines: list[str]) -> list[str]:
    """Lines with every number replaced by #, runs of blanks by one."""
    return [re.sub(r"\s+", " ", re.sub(r"\d[\d,.]*", "#", line)).strip() for line in lines]


def readme_run_block() -> list[str] | None:
    """The code block the README shows as `make run`'s output."""
    m = re.search(r"^`make run` on .*?^```\n(.*?)^```$", README.read_text(), re.M | re.S)
    return m.group(1).splitlines() if m else None


def make_run() -> list[str]:
    # A make of its own, as a user runs it: not the calling make's flags or
    # jobserver (whose descriptors this process does not pass on).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["LC_ALL"] = "C"
    out = subprocess.run(
        [os.environ.get("MAKE", "make"), "--no-print-directory", "-C", str(ROOT), "run",
         f"CONNECTIONS={RUN_CONNECTIONS}"],
        capture_output=True, text=True, env=env, timeout=1800,
    )
    lines = (out.stdout + out.stderr).splitlines()
    problems = []
    if out.returncode != 0:
        problems.append(f"make run exited {out.returncode}:\n" + "\n".join(lines[-40:]))
        return problems
    if not lines or not lines[0].startswith("make run: building"):
        problems.append("make run: the first line is not 'make run: building ...'")
    tool = lines[1:]
    if not tool or not tool[0].startswith(f"ibcm-cmtime: {RUN_CONNECTIONS} connections"):
        problems.append("make run printed more than its one line before ibcm-cmtime's output:\n"
                        + "\n".join(lines[:20]))
    block = readme_run_block()
    if block is None:
        problems.append("README.md: no code block after a line starting '`make run` on'")
    elif masked(block) != masked(tool):
        diff = [f"  README: {a!r}\n  prints: {b!r}"
                for a, b in zip(masked(block) + [""] * len(tool), masked(tool) + [""] * len(block))
                if a != b]
        problems.append("README.md: its copy of make run's output differs from what it prints "
                        "(numbers aside):\n" + "\n".join(diff[:8]))
    return problems


def main() -> int:
    problems = architecture() + make_run()
    if problems:
        print("docs: " + "\n  ".join(["problems:"] + problems))
        return 1
    print("docs: docs/architecture.md names every directory of src/; make run prints only "
          "its output, as the README shows it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
