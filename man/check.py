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
  compile against the header with -Wall -Werror; one with a main() (ib_cm(7)'s
  client and server) does not link against the staged library ($IBCM_STAGE,
  default build/stage: `make stage`), exit 0 within 30 s, and report no error
  under `valgrind --leak-check=full` with c-tests/libib_cm.supp;
- a page names an errno the library never returns, or an IBCM_* environment
  variable it never reads (read in src/, tests aside), or ib_cm(7) leaves out
  a variable it reads;
- a section-3 page says, outside ERRORS, that a call returns (fails with,
  gives) an errno its ERRORS does not list, unless that errno is the
  kernel's, a handler's or a callback's: another function's errnos are told
  on that function's page, where they are kept up to date;
- a sentence says that a thread reads something without naming the thread
  (the worker, or its name, ibcm-...), a page names a thread the library
  does not start, or ib_cm(7) leaves out one it does;
- a page has a byte outside ASCII, or any message from
  `mandoc -T lint -W warning` or `groff -man -Tutf8 -ww -z`
  (what `man --warnings -l` runs).
The template (man/page-template.3) is linted too.
"""

import errno
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
SUPPRESSIONS = ROOT / "c-tests/libib_cm.supp"
STAGE = Path(os.environ.get("IBCM_STAGE", ROOT / "build/stage"))
C_LOCALE = dict(os.environ, LC_ALL="C")
ERRNO_NAMES = {name for name in dir(errno) if re.fullmatch(r"E[A-Z0-9]+", name)}
RUN_TIMEOUT = 30
VALGRIND_TIMEOUT = 120


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


def run_examples(page: Path) -> tuple[list[str], int]:
    """Each example of `page` with a main() is a program: built against the
    staged library as a user builds one, it exits 0, alone and under
    valgrind's leak check with the library's suppression file."""
    programs = [src for src in examples(page) if re.search(r"^int main\(", src, re.M)]
    if not programs:
        return [], 0
    lib = STAGE / "lib"
    if not (lib / "libib_cm.so").exists():
        return [f"{page.name}: no library in {lib} to run the examples with: make stage"], 0
    problems = []
    build = ROOT / "build/man-examples"
    build.mkdir(parents=True, exist_ok=True)
    env = dict(C_LOCALE, LD_LIBRARY_PATH=str(lib))
    for i, source in enumerate(programs, 1):
        exe = build / f"{page.stem}-{i}"
        cmd = [os.environ.get("CC", "cc"), "-std=gnu11", "-Wall", "-Werror",
               "-I", str(STAGE / "include"), "-x", "c", "-", "-x", "none",
               "-L", str(lib), "-lib_cm", "-pthread", "-o", str(exe)]
        out = subprocess.run(cmd, input=source, capture_output=True, text=True, env=C_LOCALE)
        if out.returncode != 0:
            problems.append(f"{page.name}: program {i} does not link:\n{out.stderr.strip()}")
            continue
        runs = [
            ("", [str(exe)], RUN_TIMEOUT),
            (" under valgrind", ["valgrind", "-q", "--leak-check=full", "--error-exitcode=99",
                                 f"--suppressions={SUPPRESSIONS}", str(exe)], VALGRIND_TIMEOUT),
        ]
        for how, argv, timeout in runs:
            try:
                out = subprocess.run(argv, capture_output=True, text=True, env=env,
                                     timeout=timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"{page.name}: program {i}{how} did not end within {timeout} s")
                continue
            if out.returncode != 0:
                problems.append(f"{page.name}: program {i}{how} exited {out.returncode}:\n"
                                f"{(out.stdout + out.stderr).strip()}")
    return problems, len(programs)


# ---- what the pages say against what the code does ------------------------

def rust_code(path: Path) -> str:
    """A source file's code: comments and its unit tests left out."""
    text = re.split(r"^#\[cfg\(test\)\]\s*\nmod tests\b", path.read_text(), flags=re.M)[0]
    return re.sub(r"//[^\n]*", "", text)


def library_sources() -> dict[Path, str]:
    """src/, tests aside (tests.rs, tests/, test_*.rs and `mod tests`)."""
    return {
        p: rust_code(p) for p in sorted((ROOT / "src").rglob("*.rs"))
        if not re.search(r"(^|/)(tests?|test_[a-z_]+)(\.rs$|/)|/tests_[a-z_]+\.rs$",
                         str(p.relative_to(ROOT)))
    }


def code_errnos(sources: dict[Path, str]) -> set[str]:
    """Every errno the library's code names (src/errno.rs's constants and
    libc::E* wherever used): what a call can return."""
    return {w for code in sources.values() for w in re.findall(r"\bE[A-Z0-9]+\b", code)
            if w in ERRNO_NAMES}


def code_env_vars(sources: dict[Path, str]) -> set[str]:
    """The environment variables the library reads."""
    read = r'(?:secure_var_os|getenv|var_os|env::var)\(c?"(IBCM_[A-Z0-9_]+)"'
    return {v for code in sources.values() for v in re.findall(read, code)}


def code_thread_names(sources: dict[Path, str]) -> set[str]:
    """The names of the threads the library starts, with "dev" for a
    device's name: "ibcm-worker", "ibcm-umad-dev", ..."""
    names = set()
    for code in sources.values():
        for template in re.findall(r'"(ibcm-[a-z{}.]*(?:-\{[^"]*)?)"', code):
            if not re.search(r"\.name\(|thread_name|Builder", code):
                continue
            if "{kind}" in template:
                # format!("ibcm-{kind}-{}", ...) over (kind, reader) pairs.
                kinds = re.findall(r'\(\s*"([a-z]+)"\s*,\s*reader_of\b', code)
                names |= {f"ibcm-{kind}-dev" for kind in kinds}
            elif "{" in template:
                names.add(re.sub(r"\{[^}]*\}", "dev", template))
            else:
                names.add(template)
    return names


def rendered_paragraphs(page: Path) -> list[tuple[str, str]]:
    """(section, paragraph) pairs of `page` as a reader sees them."""
    out = subprocess.run(
        ["mandoc", "-T", "ascii", "-O", "width=1000", str(page)],
        capture_output=True, text=True, check=True, env=C_LOCALE,
    ).stdout
    plain = re.sub(r".\x08", "", out)
    section, paragraphs = "", []
    for block in re.split(r"\n\s*\n", plain):
        lines = block.split("\n")
        if lines and re.fullmatch(r"[A-Z][A-Z ]+", lines[0]):
            section, lines = lines[0], lines[1:]
        text = " ".join(line.strip() for line in lines).strip()
        if text:
            paragraphs.append((section, text))
    return paragraphs


def sentences(page: Path) -> list[tuple[str, str]]:
    """(section, sentence) pairs of `page`."""
    return [
        (section, sentence)
        for section, text in rendered_paragraphs(page)
        for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z(])", text)
    ]


def listed_errors(page: Path) -> set[str]:
    """The errnos the ERRORS section of `page` lists (its .TP tags)."""
    m = re.search(r"^\.SH ERRORS\n(.*?)(?=^\.SH )", page.read_text(), re.M | re.S)
    tags = re.findall(r"^\.TP\n(.*)$", m.group(1), re.M) if m else []
    return {w for tag in tags for w in re.findall(r"\bE[A-Z0-9]+\b", tag) if w in ERRNO_NAMES}


def header_identifiers() -> set[str]:
    return set(re.findall(r"\bIBCM_[A-Z0-9_]+\b", HEADER.read_text() + SA_HEADER.read_text()))


def claims(pages: list[Path], overview: Path) -> list[str]:
    """What the pages say about errnos, environment variables and threads
    is what the code does (see the module's docstring)."""
    sources = library_sources()
    errnos, env_vars, threads = (code_errnos(sources), code_env_vars(sources),
                                 code_thread_names(sources))
    if not (errnos and env_vars and threads):
        return ["man/check.py: found no errno, environment variable or thread name in src/"]
    c_names = header_identifiers()
    problems = []
    named_threads: dict[Path, set[str]] = {}
    for page in pages:
        own_errors = listed_errors(page) if page.parent.name == "man3" else None
        named_threads[page] = set()
        for section, sentence in sentences(page):
            where = f"{page.name} ({section}): \"{sentence}\"\n    "
            named = {w for w in re.findall(r"\bE[A-Z0-9]+\b", sentence) if w in ERRNO_NAMES}
            for name in sorted(named - errnos):
                problems.append(f"{where}names {name}, which the library never returns")
            for var in sorted(set(re.findall(r"\bIBCM_[A-Z0-9_]+\b", sentence)) - c_names):
                if var not in env_vars and var != page.stem.upper():
                    problems.append(f"{where}names {var}, which the library does not read")
            if (own_errors is not None and section != "ERRORS"
                    and re.search(r"\b(returns?|returned|fails?|gives?)\b", sentence)
                    and not re.search(r"\b(kernel|kernel's|handlers?|callbacks?)\b", sentence)):
                for name in sorted(named - own_errors):
                    problems.append(f"{where}says a call returns {name}, which the page's ERRORS "
                                    "do not list: another function's errnos belong on its page")
            thread_names = {n.rstrip(".,;:)") for n in re.findall(r"\bibcm-[a-z]+(?:-dev)?\b",
                                                                  sentence)}
            thread_names = {n for n in thread_names if n.split("-")[1] not in
                            ("cmtime", "loopbench", "interop")}
            named_threads[page] |= thread_names
            for name in sorted(thread_names - threads):
                problems.append(f"{where}names the thread {name}, which the library does not start")
            if (re.search(r"\bthreads?\b", sentence) and re.search(r"\bread(s|er|ers)?\b", sentence)
                    and not thread_names and "worker" not in sentence):
                problems.append(f"{where}says a thread reads without naming it (the worker, or "
                                f"one of {', '.join(sorted(threads))})")
    text = overview.read_text()
    environment = re.search(r"^\.SH ENVIRONMENT\n(.*?)(?=^\.SH )", text, re.M | re.S)
    for var in sorted(env_vars):
        if not environment or not re.search(rf"^\.B {var}$", environment.group(1), re.M):
            problems.append(f"{overview.name}: ENVIRONMENT does not describe {var}, which the "
                            "library reads")
    for name in sorted(threads - named_threads.get(overview, set())):
        problems.append(f"{overview.name}: does not name the thread {name}, which the library starts")
    return problems


def main() -> int:
    missing = [t for t in ("mandoc", "groff", "valgrind") if not shutil.which(t)]
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

    programs = 0
    for page in [MAN / "page-template.3"] + man3 + man7 + man8:
        target = so_target(page)
        if target:
            if not (MAN / target).is_file():
                problems.append(f"{page.name}: .so {target}: no such page")
            continue
        problems += lint(page)
        problems += compile_examples(page)
        ran, n = run_examples(page)
        problems += ran
        programs += n
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

    pages = [p for p in man3 + man7 + man8 if not so_target(p)]
    problems += claims(pages, MAN / "man7/ib_cm.7")

    n_examples = sum(len(examples(p)) for p in man3 + man7)
    if problems:
        print("man: " + "\n  ".join(["problems:"] + problems))
        return 1
    print(
        f"man: {len(man3)} section-3 pages for {len(symbols)} exported symbols, "
        f"{len(man7)} section-7; prototypes match the header; {n_examples} examples compile, "
        f"{programs} run (alone and under valgrind: no error); errnos, environment variables "
        "and threads as in src/; mandoc -T lint -W warning and groff -ww: no message"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
