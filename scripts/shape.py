#!/usr/bin/env python3
"""The shape of the product code, measured as a reader would (issue #20), and held by `make lint`.

For every product crate (the ones that ship; tests, fuzz and bench are not product code):
- no file over MAX_FILE code lines (blank lines, comments and `#[cfg(test)]` items excluded);
- no function over MAX_FN lines, from `fn` to its closing brace;
- no cycle of `use` imports between the files of one crate (this one also for fuzz, bench and the
  test crates);
- the layer order that ARCHITECTURE.md declares (its ```layers block, the one home of it): the
  product crates, lowest first, each depending (`[dependencies]`) only on crates of lower layers;
  and for a crate listed there by its folder, its top-level modules, each importing only modules
  of its own layer or lower ones. Every workspace member is a product crate of the block or a
  known test/tool crate, and every top-level module of a listed crate has a layer;
- no product crate holds more than MAX_SHARE of the product's code lines;
- one module style and one test-file name: no `x.rs` beside a folder `x/` (a module with
  children is `x/mod.rs`), no file named plain `tests.rs` (a module's tests in a file of their
  own are `<module>_tests.rs` beside it).

`python3 scripts/shape.py` prints what breaks a rule and exits 1 if anything does;
`--report` prints the measures (largest files, longest functions, import edges) and exits 0.
Stdlib only: it reads the sources as text, so a macro-generated item is invisible to it.
"""
import os
import re
import sys
import tomllib

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# Not product code, but held to "no import cycle" too.
OTHER = ["fuzz", "bench", "tests/support", "tests/integration", "tests/wasm-host"]
MAX_FILE = 500
MAX_FN = 70
MAX_SHARE = 0.30


def declared_layers():
    """ARCHITECTURE.md's ```layers block: {"crates": {folder: layer}, folder: {module: layer}}.
    Its lines are `name:` (a section: `crates`, or a crate's folder) and `N  item item ...`."""
    with open(os.path.join(ROOT, "ARCHITECTURE.md"), encoding="utf-8") as fh:
        text = fh.read()
    m = re.search(r"^```layers\n(.*?)^```", text, re.S | re.M)
    if not m:
        sys.exit("shape: ARCHITECTURE.md has no ```layers block")
    layers, section = {}, None
    for line in m.group(1).splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) == 1 and words[0].endswith(":"):
            section = layers.setdefault(words[0][:-1], {})
        elif section is not None and words[0].isdigit():
            for item in words[1:]:
                section[item] = int(words[0])
        else:
            sys.exit(f"shape: ARCHITECTURE.md's layers block: cannot read {line!r}")
    if "crates" not in layers:
        sys.exit("shape: ARCHITECTURE.md's layers block has no `crates:` section")
    return layers


LAYERS = declared_layers()
PRODUCT = list(LAYERS["crates"])


def crate_layer_problems():
    """A product crate's `[dependencies]` on another crate of the workspace must be lower."""
    with open(os.path.join(ROOT, "Cargo.toml"), "rb") as fh:
        members = tomllib.load(fh)["workspace"]["members"]
    problems = [f"workspace member {m} is neither a product crate of ARCHITECTURE.md's layers "
                f"nor a test/tool crate" for m in members if m not in PRODUCT and m not in OTHER]
    problems += [f"ARCHITECTURE.md's layers name {c}, which is no workspace member"
                 for c in PRODUCT if c not in members]
    folder_of = {}
    manifests = {}
    for m in members:
        with open(os.path.join(ROOT, m, "Cargo.toml"), "rb") as fh:
            manifests[m] = tomllib.load(fh)
        folder_of[manifests[m]["package"]["name"]] = m
    for crate in PRODUCT:
        if crate not in manifests:
            continue
        for dep in manifests[crate].get("dependencies", {}):
            target = folder_of.get(dep)
            if target is None:
                continue
            if target not in LAYERS["crates"]:
                problems.append(f"{crate} depends on {target}, which is not a product crate")
            elif LAYERS["crates"][target] >= LAYERS["crates"][crate]:
                problems.append(f"{crate} (layer {LAYERS['crates'][crate]}) depends on {target} "
                                f"(layer {LAYERS['crates'][target]}): not a lower layer")
    return problems


def module_layer_problem(crate, here, target):
    """Why an import from module `here` to `target` (tuples) of `crate` breaks its layers."""
    order = LAYERS.get(crate)
    if order is None or not here or not target or here[0] == target[0]:
        return None
    a, b = order.get(here[0]), order.get(target[0])
    if a is None or b is None or b <= a:
        return None
    return (f"{crate}: {'::'.join(here)} (layer {a}) imports {'::'.join(target)} (layer {b}): "
            f"up the layer order")


def style_problems(crate):
    problems = []
    for d, dirs, files in os.walk(os.path.join(ROOT, crate, "src")):
        for f in files:
            rel = os.path.relpath(os.path.join(d, f), ROOT)
            if f == "tests.rs":
                problems.append(f"{rel}: a test file is named after its module "
                                f"(`<module>_tests.rs`)")
            if f.endswith(".rs") and f[:-3] in dirs:
                problems.append(f"{rel} beside {f[:-3]}/: a module with children is "
                                f"`{f[:-3]}/mod.rs`")
    return problems

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
    problems, sizes, fns = crate_layer_problems(), [], []
    for crate in PRODUCT + OTHER:
        if not os.path.isdir(os.path.join(ROOT, crate, "src")):
            continue
        problems += style_problems(crate)
        modules = crate_files(crate)
        if crate in LAYERS:
            tops = {m[0] for m in modules if m}
            problems += [f"{crate}: module {t} has no layer in ARCHITECTURE.md"
                         for t in sorted(tops - set(LAYERS[crate]))]
            problems += [f"ARCHITECTURE.md's layers of {crate} name {t}, which is no module"
                         for t in sorted(set(LAYERS[crate]) - tops)]
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
        for d, dirs, files in os.walk(os.path.join(ROOT, crate)):
            if "/target" in d:
                continue
            # A crate nested in this one's folder (control-plane/xds/) is measured on its own.
            dirs[:] = [x for x in dirs if not os.path.isfile(os.path.join(d, x, "Cargo.toml"))]
            for f in files:
                path = os.path.join(d, f)
                rel = os.path.relpath(path, ROOT)
                if not f.endswith(".rs") or is_test_file(rel) or "/src/" not in rel:
                    continue
                with open(path, encoding="utf-8") as fh:
                    kept = without_tests(fh.read().split("\n"))
                if crate in PRODUCT:
                    sizes.append((code_lines(kept), rel, crate))
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
                    why = module_layer_problem(crate, here, target)
                    if why and why not in problems:
                        problems.append(why)
                    edges.setdefault(rel, set()).add(os.path.relpath(modules[target], ROOT))
        for comp in cycles(edges):
            problems.append("import cycle: " + " <-> ".join(comp))
    problems += [f"{rel}: {n} lines of code (max {MAX_FILE})" for n, rel, _ in sizes
                 if n > MAX_FILE]
    total = sum(n for n, _, _ in sizes) or 1
    share = {}
    for n, _, crate in sizes:
        share[crate] = share.get(crate, 0) + n
    problems += [f"{crate}: {n} of the product's {total} lines of code ({100 * n / total:.1f} %, "
                 f"max {100 * MAX_SHARE:.0f} %)" for crate, n in share.items()
                 if n > MAX_SHARE * total]
    problems += [f"{rel}:{at}: fn {name} is {n} lines (max {MAX_FN})"
                 for n, rel, name, at in fns if n > MAX_FN]
    if report:
        print("largest files (lines of code):")
        for n, rel, _ in sorted(sizes, reverse=True)[:10]:
            print(f"  {n:5}  {rel}")
        print("product crates (lines of code, share):")
        for crate, n in sorted(share.items(), key=lambda kv: -kv[1]):
            print(f"  {n:5}  {100 * n / total:4.1f} %  {crate}")
        print("longest functions (lines):")
        for n, rel, name, at in sorted(fns, reverse=True)[:10]:
            print(f"  {n:5}  {rel}:{at} {name}")
        print(f"{len(sizes)} files, {len(fns)} functions")
    for p in problems:
        print("shape: " + p)
    if not problems:
        print(f"shape: {len(sizes)} product files in {len(share)} crates, none over "
              f"{100 * MAX_SHARE:.0f} % of the code, no file over {MAX_FILE} lines of code, no fn "
              f"over {MAX_FN} lines, no import cycle, no import up the declared layers")
    return 1 if problems and not report else 0


if __name__ == "__main__":
    sys.exit(main())
