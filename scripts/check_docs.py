#!/usr/bin/env python3
"""Checks the Markdown docs offline (`make lint`): every relative link's target exists, every
`#anchor` names a heading of its target, and docs/SUMMARY.md lists every chapter of the book.

Anchors follow GitHub's (and mdBook's) rule: the heading's text, lowercased, spaces to '-',
every character but letters, digits, '-' and '_' dropped; a repeated heading gets '-1', '-2'.
It also checks docs/environment.md against the code: every `FERRY_*` variable the code, the
scripts or the tests read is on it, every `FERRY_*` the book names is read somewhere, and the
demo scripts' default ports are the page's (the commands' own ports and variables are generated
blocks, checked by Rust tests from clap's definitions). And it keeps one home for each fact of
ONE_HOME: stated in its owner, linked from everywhere else.

Exit status 1 with one line per problem. Python 3 standard library only.
"""

import os
import re
import subprocess
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BOOK = "docs"
SUMMARY = os.path.join(BOOK, "SUMMARY.md")
# Never walked when git is unavailable: build output, virtualenvs, fuzz output.
SKIP_DIRS = {".git", "target", ".venv", ".venv-feast", "node_modules", ".run"}

FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
INCLUDE = re.compile(r"\{\{#include\s+([^}\s:]+)[^}]*\}\}")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def markdown_files():
    """Tracked and new (not ignored) *.md files, repository-relative."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            cwd=ROOT, capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if f and os.path.isfile(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, names in os.walk(ROOT):
            dirs[:] = [x for x in dirs if x not in SKIP_DIRS]
            files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names if n.endswith(".md")]
    rendered = os.path.join(BOOK, "book") + os.sep
    return sorted(set(f for f in files if not f.startswith(rendered)))


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text)
    kept = "".join(c for c in text.lower() if c.isalnum() or c in " -_" or c.isspace())
    return re.sub(r"\s", "-", kept)


_anchor_cache = {}


def anchors(path, seen=()):
    """Every anchor a Markdown file defines (headings, HTML ids, mdBook includes)."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    found, counts = set(), {}
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for _, line in prose_lines(text):
        m = HEADING.match(line)
        if m:
            base = slug(m.group(2))
            n = counts.get(base, 0)
            counts[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        found.update(HTML_ID.findall(line))
        for inc in INCLUDE.findall(line):
            target = os.path.normpath(os.path.join(os.path.dirname(path), inc))
            if target not in seen and os.path.isfile(target):
                found |= anchors(target, seen + (path,))
    _anchor_cache[path] = found
    return found


def links(text):
    """(line number, destination) of every link outside code."""
    for n, line in prose_lines(text):
        m = REF_DEF.match(line)
        if m:
            yield n, m.group(1).strip("<>")
            continue
        for m in INLINE_LINK.finditer(CODE_SPAN.sub("", line)):
            yield n, m.group(1).strip("<>")


def check_link(src, dest):
    """None if the link holds, else why not."""
    if SCHEME.match(dest) or dest.startswith("//"):
        return None  # external: not checked offline
    path, _, anchor = dest.partition("#")
    if path.startswith("/"):
        target = os.path.join(ROOT, path.lstrip("/"))
    elif path:
        target = os.path.join(os.path.dirname(os.path.join(ROOT, src)), path)
    else:
        target = os.path.join(ROOT, src)
    target = os.path.normpath(target)
    if not os.path.exists(target):
        return f"no such file: {os.path.relpath(target, ROOT)}"
    if anchor and target.endswith(".md") and os.path.isfile(target):
        if anchor not in anchors(target):
            return f"no heading for #{anchor} in {os.path.relpath(target, ROOT)}"
    return None


def check_summary(files):
    """The book's chapters and SUMMARY.md agree both ways."""
    problems = []
    summary = os.path.join(ROOT, SUMMARY)
    if not os.path.isfile(summary):
        return [f"{SUMMARY}: missing"]
    with open(summary, encoding="utf-8") as f:
        text = f.read()
    listed = set()
    for n, dest in links(text):
        path = dest.partition("#")[0]
        if not path or SCHEME.match(path):
            problems.append(f"{SUMMARY}:{n}: entry '{dest}' is not a chapter file")
            continue
        listed.add(os.path.normpath(os.path.join(BOOK, path)))
    chapters = {f for f in files if f.startswith(BOOK + os.sep) and f != SUMMARY}
    for ch in sorted(chapters - listed):
        problems.append(f"{ch}: chapter not listed in {SUMMARY}")
    # An entry naming no file is reported with the other links (SUMMARY.md is checked as one).
    return problems


ENV_PAGE = os.path.join(BOOK, "environment.md")
FERRY_VAR = re.compile(r"\bFERRY_[A-Z0-9_]*[A-Z0-9]\b")
# Files whose FERRY_* names are variables someone sets (not the book, not build output).
CODE_FILE = re.compile(r"(\.(rs|sh|py|toml|yaml|yml|tmpl)|Makefile|Dockerfile[^/]*)$")
# FERRY_* names in the code that are not environment variables.
NOT_VARIABLES = {
    "FERRY_HTTP_FILTER",  # a placeholder of envoy/*.yaml.tmpl, replaced by `ferry envoy-config`
    "FERRY_YAML",  # a test's constant (the text of a ferry.yaml)
    "FERRY_DOCKER",  # the prefix of FERRY_DOCKER_* in a script's loop
}
DEMO_PORT = re.compile(r"\$\{(FERRY_[A-Z_]+_PORT):-(\d+)\}")
DEMO_SCRIPTS = ("scripts/demo.sh", "scripts/demo-feast.sh")


def tracked(pattern):
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if pattern.search(f) and os.path.isfile(os.path.join(ROOT, f))]


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def check_environment(markdown):
    """docs/environment.md against the FERRY_* names the code reads and the demo's ports."""
    if not os.path.isfile(os.path.join(ROOT, ENV_PAGE)):
        return [f"{ENV_PAGE}: missing"]
    problems = []
    code = set()
    for f in tracked(CODE_FILE):
        if not f.startswith(("target/", "docs/")) and f != "scripts/check_docs.py":
            code |= set(FERRY_VAR.findall(read(f)))
    code -= NOT_VARIABLES
    page = read(ENV_PAGE)
    listed = set(FERRY_VAR.findall(page))
    for v in sorted(code - listed):
        problems.append(f"{ENV_PAGE}: {v} is read by the code but not listed")
    for md in markdown:
        for v in sorted(set(FERRY_VAR.findall(read(md))) - code):
            problems.append(f"{md}: {v} is read nowhere in the code")
    rows = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[1].isdigit():
            rows[cells[-2].strip("`")] = cells[1]
    seen = {}
    for script in DEMO_SCRIPTS:
        for var, port in DEMO_PORT.findall(read(script)):
            seen[var] = port
            if rows.get(var) != port:
                problems.append(f"{ENV_PAGE}: {script} starts {var} on {port}, "
                                f"the page says {rows.get(var, 'nothing')}")
    for var in sorted(set(rows) - set(seen)):
        problems.append(f"{ENV_PAGE}: port row {var} is in no demo script")
    return problems


# One home for each fact (#38): the facts that had drifted apart in two or three copies, each with
# the one file that states it and the patterns that recognise a statement of it. A match in any
# other file of the README and the book fails: link to the owner instead. bench/README.md is the
# benchmarks' own record (the figures' source, which the owners cite) and is not scanned; nor are
# generated blocks (`<!-- generated: ... -->`), which restate the code, not a chapter.
ONE_HOME = [
    ("the pitch and its diagram", "README.md",
     [r"──HTTP──▶ Envoy", r"never calls a feature server"]),
    ("the two commands", "README.md", [r"(?m)^make (demo|stop|test) +#"]),
    ("the Docker targets", "docs/docker.md",
     [r"(?m)^make (docker-demo|docker-stop|test-docker) +#"]),
    ("an enriched request, before and after", "docs/request-formats.md",
     [r'"transactions__txn_count_7d": \d+']),
    ("the control plane's metrics", "docs/metrics.md",
     [r"ferry_xds_\{", r"ferry_xds_connected_streams"]),
    ("the on-demand cost figures", "docs/on-demand.md",
     [r"(?i)five derived features[^.]{0,80}?\d+(\.\d+)? µs"]),
    ("the default ports", "docs/environment.md",
     [r"default `?127\.0\.0\.1:\d+", r"defaults \d{4,5}/\d{4,5}",
      r"(?i)\badmin on \d{4,5}"]),
    ("the `ferry.yaml` settings' defaults and bounds", "docs/ferry-yaml.md",
     [r"(?<![_a-z])(max_body_bytes|max_entities|reader_timeout_ms|max_header_bytes|cache_max_age_ms"
      r"|max_bytes)\b[^|\n]{0,40}\bdefault \d"]),
    ("`ferry serve --max-streams`'s default", "docs/cli.md",
     [r"`--max-streams` \(default 16"]),
]
# The table of contents is the README's links (the entrance) and docs/SUMMARY.md (the book's
# sidebar); any other page linking this many chapters is a copy of it.
TOC_LINKS = 12
GENERATED = re.compile(r"<!-- generated: .*?<!-- end generated -->", re.S)


def one_home(markdown):
    problems = []
    scanned = [f for f in markdown if (f == "README.md" or f.startswith(BOOK + os.sep))
               and f != SUMMARY]
    for f in scanned:
        text = GENERATED.sub("", read(f))
        flat = re.sub(r"\s*\n\s*", " ", text)
        for fact, owner, patterns in ONE_HOME:
            if f == owner:
                continue
            for pat in patterns:
                m = re.search(pat, text) or re.search(pat, flat)
                if m:
                    problems.append(f"{f}: states {fact} ('{m.group(0)}'), whose home is {owner}: "
                                    f"link to it instead")
                    break
        if f != "README.md":
            chapters = {os.path.normpath(os.path.join(os.path.dirname(f), d.partition("#")[0]))
                        for _, d in links(text) if not SCHEME.match(d)}
            chapters = {c for c in chapters if c.startswith(BOOK + os.sep) and c.endswith(".md")}
            if len(chapters) >= TOC_LINKS:
                problems.append(f"{f}: links {len(chapters)} chapters, a copy of the table of "
                                f"contents (README.md's links, {SUMMARY}): link to them instead")
    for fact, owner, _ in ONE_HOME:
        if not os.path.isfile(os.path.join(ROOT, owner)):
            problems.append(f"{owner}: missing, the home of {fact}")
    return problems


def main():
    files = markdown_files()
    problems = []
    for src in files:
        with open(os.path.join(ROOT, src), encoding="utf-8") as f:
            text = f.read()
        for n, dest in links(text):
            why = check_link(src, dest)
            if why:
                problems.append(f"{src}:{n}: ({dest}) {why}")
    problems += check_summary(files)
    problems += check_environment(files)
    problems += one_home(files)
    if problems:
        print(f"check_docs: {len(problems)} problem(s): broken links, book entries, environment, one home:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return 1
    print(f"check_docs: {len(files)} Markdown files, every relative link and anchor holds, "
          f"{ENV_PAGE} matches the code, each fact of ONE_HOME has one home")
    return 0


if __name__ == "__main__":
    sys.exit(main())
