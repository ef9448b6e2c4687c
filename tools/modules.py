#!/usr/bin/env python3
"""The module rules of lib.rs, checked: no import from a lower layer to a higher one, and no two
modules (at depth 1, 2 and 3 of src/) importing each other. Reads every `use` (groups expanded)
and every `crate::`/`super::` path outside `#[cfg(test)] mod tests`; the command line (src/cli,
main.rs) is the top layer and not checked. Exit status 1 with the offending imports."""
import os, re, sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
LIB = os.path.join(ROOT, "lib.rs")


def layers():
    """lib.rs's layers, bottom first, as its doc comment lists them (each numbered item's
    backticked module names that lib.rs declares): a module may use its own layer's and the
    layers below. Also the modules lib.rs declares that no layer names."""
    text = open(LIB, encoding="utf-8").read()
    declared = set(re.findall(r"^(?:pub )?mod (\w+);", text, re.M))
    doc = "\n".join(l[3:].strip() for l in text.splitlines() if l.startswith("//!"))
    items = re.split(r"(?:^|\s)\d+\.\s", doc[doc.index("The layers"):])[1:]
    out = [[n for n in re.findall(r"`(\w+)`", item) if n in declared] for item in items]
    out = [names for names in out if names]
    return out, declared - {n for names in out for n in names}


LAYERS, UNLAYERED = layers()


def modname(path):
    p = os.path.relpath(path, ROOT)[:-3].split(os.sep)
    if p[-1] in ("mod", "lib", "main"):
        p = p[:-1]
    return tuple(p)


def expand(tree):
    tree = tree.strip()
    i = tree.find("{")
    if i < 0:
        return [tree]
    prefix, inner = tree[:i], tree[i + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [x for p in parts if p.strip() for x in expand(prefix + p.strip())]


def sources():
    for d, _, fs in os.walk(ROOT):
        for f in fs:
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def circles(g):
    """The strongly connected sets of two or more modules of the import graph `g` (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
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
                out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


# Not rdml's options: docker's (named with `docker run`) and the help switch every program has. A
# build with a cargo feature is the token ⟨+feature⟩, which each front end words.
NOT_OPTIONS = ("--help", "--gpus")


def flag_names(path, text):
    """Command-line flags written into the library's messages: they must be `⟨name⟩` tokens, which
    each front end renders in its own words (src/field.rs); help texts and the report page too.
    Comments are not messages."""
    if path.endswith("field.rs"):
        return []
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        code = line.split("//")[0] if not line.strip().startswith('"') else line
        if line.strip().startswith("//"):
            continue
        for m in re.finditer(r"(?<![\w`-])--[a-z][a-z-]*[a-z]", code):
            before = code[: m.start()]
            if m.group(0) in NOT_OPTIONS:
                continue
            out.append(f"{os.path.relpath(path, ROOT)}:{n}: {m.group(0)} in a library message (write ⟨name⟩)")
    return out


def main():
    mods = {modname(p) for p in sources()}
    resolve = lambda t: next((t[:i] for i in range(len(t), 0, -1) if t[:i] in mods), None)
    layer = {m: i for i, names in enumerate(LAYERS) for m in names}
    edges, bad = set(), [f"{m}: declared in lib.rs but in none of its layers" for m in sorted(UNLAYERED)]
    for path in sources():
        me = modname(path)
        if not me or me[0] == "cli" or path.endswith("main.rs"):
            continue
        text = open(path, encoding="utf-8").read()
        bad.extend(flag_names(path, text.split("#[cfg(test)]")[0]))
        text = re.sub(r"#\[cfg\(test\)\]\s*mod tests \{.*", "", text, flags=re.S)
        text = re.sub(r"//.*", "", text)
        paths = [x for m in re.finditer(r"\buse\s+([^;]+);", text, re.S) for x in expand(re.sub(r"\s+", " ", m.group(1)))]
        paths += re.findall(r"\b((?:crate|super)(?:::\w+)+)", text)
        for p in paths:
            seg = re.sub(r"\s+as\s+\w+$", "", p.strip()).split("::")
            if seg[0] == "crate":
                target = tuple(seg[1:])
            elif seg[0] == "super":
                base, k = list(me[:-1]), 1
                while k < len(seg) and seg[k] == "super":
                    base, k = base[:-1], k + 1
                target = tuple(base) + tuple(seg[k:])
            else:
                continue
            t = resolve(target)
            if t:
                edges.add((me, t))
    for a, b in sorted(edges):
        if a[0] in layer and b[0] in layer and layer[b[0]] > layer[a[0]]:
            bad.append(f"upward import: {'::'.join(a)} (layer {layer[a[0]] + 1}) uses {'::'.join(b)} (layer {layer[b[0]] + 1})")
        if a[0] not in layer:
            bad.append(f"{a[0]}: not in a layer of lib.rs's list (add it where it belongs)")
    for depth in (1, 2, 3):
        g = {}
        for a, b in edges:
            if a[:depth] != b[:depth]:
                g.setdefault(a[:depth], set()).add(b[:depth])
        for comp in circles(g):
            bad.append("circle: " + " ↔ ".join(sorted("::".join(m) for m in comp)))
    for line in sorted(set(bad)):
        print(line)
    print(f"modules: {len(mods)} files, {len(edges)} imports; {len(set(bad))} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
