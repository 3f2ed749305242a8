#!/usr/bin/env python3
"""The shape of the product code, measured as a reader would (issue #20), and held by `make lint`.

For every product crate (the ones that ship; tests, fuzz and bench are not product code):
- no file over MAX_FILE code lines (blank lines, comments and `#[cfg(test)]` items excluded);
- no function over MAX_FN lines, from `fn` to its closing brace;
- no cycle of `use` imports between the files of one crate (this one also for fuzz, bench and the
  test crates).

`python3 scripts/shape.py` prints what breaks a rule and exits 1 if anything does;
`--report` prints the measures (largest files, longest functions, import edges) and exits 0.
Stdlib only: it reads the sources as text, so a macro-generated item is invisible to it.
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
PRODUCT = ["protos", "core", "core/expr", "filter", "native", "reader", "redis-conn", "control-plane",
           "demo-model", "http-serve"]
# Not product code, but held to "no import cycle" too.
OTHER = ["fuzz", "bench", "tests/support", "tests/integration", "tests/wasm-host"]
MAX_FILE = 500
MAX_FN = 70

FN_RE = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(default\s+)?(const\s+)?(async\s+)?(unsafe\s+)?'
                   r'(extern\s+"C"\s+)?fn\s+(\w+)')
STRING_RE = re.compile(r'"([^"\\]|\\.)*"')
CHAR_RE = re.compile(r"'(\\.|[^'\\])'")


def is_test_file(rel):
    name = os.path.basename(rel)
    return name == "tests.rs" or name.endswith("_tests.rs") or "/tests/" in rel \
        or "/benches/" in rel or "/examples/" in rel


def strip_code(line):
    """The line without string/char literals and a trailing `//` comment (for brace counting)."""
    line = STRING_RE.sub('""', line)
    line = CHAR_RE.sub("''", line)
    return line.split("//", 1)[0]


def item_end(lines, start):
    """Index of the last line of the item starting at `start` (a `;` item or a braced one)."""
    depth, opened = 0, False
    for j in range(start, len(lines)):
        s = strip_code(lines[j])
        depth += s.count("{") - s.count("}")
        opened = opened or "{" in s
        if not opened and s.rstrip().endswith(";"):
            return j
        if opened and depth <= 0:
            return j
    return len(lines) - 1


def without_tests(lines):
    """(line number, text) of every line outside `#[cfg(test)]` items."""
    kept, i = [], 0
    while i < len(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", lines[i]):
            j = i + 1
            while j < len(lines) and lines[j].strip().startswith("#["):
                j += 1
            i = item_end(lines, j) + 1
            continue
        kept.append((i + 1, lines[i]))
        i += 1
    return kept


def code_lines(kept):
    count, in_block = 0, False
    for _, line in kept:
        s = line.strip()
        if in_block:
            in_block = "*/" not in s
            continue
        if not s or s.startswith("//"):
            continue
        if s.startswith("/*"):
            in_block = "*/" not in s
            continue
        count += 1
    return count


def long_functions(kept):
    text = [t for _, t in kept]
    numbers = [n for n, _ in kept]
    found = []
    for i, line in enumerate(text):
        m = FN_RE.match(line)
        if not m:
            continue
        end = item_end(text, i)
        if "{" not in "".join(strip_code(t) for t in text[i:end + 1]):
            continue  # a declaration (trait method, extern block)
        length = numbers[end] - numbers[i] + 1
        found.append((length, m.group(8), numbers[i]))
    return found


def crate_files(crate):
    """{module path tuple: file} for the crate's src/ tree (lib.rs or main.rs is the root)."""
    src = os.path.join(ROOT, crate, "src")
    modules = {}
    for d, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(d, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            if rel and rel[0] == "bin":
                continue
            modules.setdefault(tuple(rel), path)
    return modules


def use_paths(kept):
    """(is `pub use`, path) for every path a `use` statement names, braces expanded
    (`a::{b, c::d}` -> a::b, a::c::d)."""
    text = "\n".join(t for _, t in kept)
    text = re.sub(r"//[^\n]*", "", text)
    paths = []
    for m in re.finditer(r"(?:^|\n)\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", text):
        tree = re.sub(r"\s+as\s+", "@", m.group(2).replace("\n", " ")).replace(" ", "")
        paths.extend((m.group(1) is not None, p) for p in expand(tree))
    # Paths written out in the code (`super::grpc::body(...)`) tie files as a `use` does.
    body = re.sub(r"(?:^|\n)\s*(?:pub(?:\([^)]*\))?\s+)?use\s+[^;]+;", "\n", text)
    body = STRING_RE.sub('""', body)
    paths.extend((False, m.group(0)) for m in re.finditer(r"\b(?:crate|super|self)(?:::\w+)+", body))
    return paths


def expand(tree):
    if "{" not in tree:
        return [tree] if tree else []
    head, rest = tree.split("{", 1)
    inner = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        for e in expand(p):
            out.append(head + e if e != "self" else head.rstrip(":"))
    return out


def resolve(path, here, modules, reexports=None):
    """The module (tuple) of the crate a `use` path lands in, or None (another crate). A name
    that a module only re-exports (`pub use child::Name`) lands where it is defined."""
    segs = [s for s in path.split("@")[0].split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("self", "super"):
        base = here
        while segs and segs[0] in ("self", "super"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    elif here + (segs[0],) in modules:
        base = here
    else:
        return None
    best, rest = (base if base in modules else None), segs
    for k in range(1, len(segs) + 1):
        if base + tuple(segs[:k]) in modules:
            best, rest = base + tuple(segs[:k]), segs[k:]
    if best is not None and rest and reexports:
        return reexports.get((best, rest[0]), best)
    return best


def cycles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
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
                out.append(sorted(comp))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main():
    report = "--report" in sys.argv
    problems, sizes, fns = [], [], []
    for crate in PRODUCT + OTHER:
        if not os.path.isdir(os.path.join(ROOT, crate, "src")):
            continue
        modules = crate_files(crate)
        by_file = {f: m for m, f in modules.items()}
        uses = {}  # module -> [(is pub use, path)]
        for m, f in modules.items():
            with open(f, encoding="utf-8") as fh:
                uses[m] = use_paths(without_tests(fh.read().split("\n")))
        reexports = {}  # (module, name) -> the module that defines it
        for m, paths in uses.items():
            for public, p in paths:
                target = resolve(p, m, modules)
                name = p.split("@")[-1].split("::")[-1]
                if public and target is not None and target != m:
                    reexports[(m, name)] = target
        edges = {}
        # A crate nested in this one's folder (core/expr/ in core/) is measured on its own.
        nested = [os.path.join(ROOT, c) for c in PRODUCT + OTHER if c.startswith(crate + "/")]
        for d, _, files in os.walk(os.path.join(ROOT, crate)):
            if "/target" in d or any(d == n or d.startswith(n + os.sep) for n in nested):
                continue
            for f in files:
                path = os.path.join(d, f)
                rel = os.path.relpath(path, ROOT)
                if not f.endswith(".rs") or is_test_file(rel) or "/src/" not in rel:
                    continue
                with open(path, encoding="utf-8") as fh:
                    kept = without_tests(fh.read().split("\n"))
                if crate in PRODUCT:
                    sizes.append((code_lines(kept), rel))
                    fns.extend((n, rel, name, at) for n, name, at in long_functions(kept))
                here = by_file.get(path)
                if here is None:
                    continue
                for public, p in uses[here]:
                    target = resolve(p, here, modules, reexports)
                    if target is None or target == here:
                        continue
                    if public and target[: len(here)] == here:
                        continue  # a module's facade re-exporting its own children
                    edges.setdefault(rel, set()).add(os.path.relpath(modules[target], ROOT))
        for comp in cycles(edges):
            problems.append("import cycle: " + " <-> ".join(comp))
    problems += [f"{rel}: {n} lines of code (max {MAX_FILE})" for n, rel in sizes if n > MAX_FILE]
    problems += [f"{rel}:{at}: fn {name} is {n} lines (max {MAX_FN})"
                 for n, rel, name, at in fns if n > MAX_FN]
    if report:
        print("largest files (lines of code):")
        for n, rel in sorted(sizes, reverse=True)[:10]:
            print(f"  {n:5}  {rel}")
        print("longest functions (lines):")
        for n, rel, name, at in sorted(fns, reverse=True)[:10]:
            print(f"  {n:5}  {rel}:{at} {name}")
        print(f"{len(sizes)} files, {len(fns)} functions")
    for p in problems:
        print("shape: " + p)
    if not problems:
        print(f"shape: {len(sizes)} product files, none over {MAX_FILE} lines of code, "
              f"no fn over {MAX_FN} lines, no import cycle")
    return 1 if problems and not report else 0


if __name__ == "__main__":
    sys.exit(main())
