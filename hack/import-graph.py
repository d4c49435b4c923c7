#!/usr/bin/env python3
"""Finds import cycles between the modules of a Rust crate.

usage: import-graph.py [--verbose] [--with-tests] SRC_ROOT [SRC_ROOT...]

SRC_ROOT is a crate's source folder (`src`, `crates/alibaba-lb/src`). The crate's
module tree is read from `mod` declarations, starting at lib.rs and main.rs (a
main.rs beside a lib.rs is its own crate, shown as `<main>`). A module is one file:
`foo.rs` or `foo/mod.rs`, with the children of `foo.rs` in the folder `foo/`. Inline
`mod x { ... }` blocks belong to their file.

An edge A -> B means code in A names something in B: `use crate::...`, `use super::...`,
`use self::...` (grouped and multi-line ones too), an inline path such as
`crate::b::f(` or `super::b::T`, a path that starts with a child module's name
(`child::f()`), or a serde attribute string like "crate::b::f". Each path counts as
an edge to the deepest module it names, so `super::World` in `world::clb` is an edge
to `world`. A parent's `mod child;` declaration is not an edge: only what the parent
uses from the child is.

Test code is left out unless --with-tests: items under `#[cfg(test)]` (inline test
modules, test-only `mod x;` declarations, helpers) and files named tests.rs,
proptests.rs or testkit.rs.

Prints every cycle (each strongly connected component of more than one module, the
shortest cycle through each of its modules, and the edges inside it with the line that
makes each) and exits 1; with no cycle prints `no cycle in ROOT (N modules, M edges)`
and exits 0. --verbose first lists each module's imports. Exit 2: not a crate root.
"""
import argparse
import collections
import os
import re
import sys

TEST_FILE_NAMES = {"tests.rs", "proptests.rs", "testkit.rs"}
IDENT = r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*"

CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
INNER_CFG_TEST = re.compile(r"#\s*!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
# `pub(in crate::x)` restricts visibility; it names a module without depending on it.
VISIBILITY_IN = re.compile(r"\bpub\s*\(\s*in\s+[^)]*\)")
MOD_ITEM = re.compile(r"(?<![\w:])mod\s+(" + IDENT + r")\s*([;{])")
USE_ITEM = re.compile(r"(?<![\w:])use\s+(?!<)")
PATH_ATTRIBUTE = re.compile(r'#\s*\[\s*path\s*=\s*"([^"]+)"\s*\]')
# A path of two or more segments not preceded by `::` (so it is where a path starts).
INLINE_PATH = re.compile(r"(?<![\w:])" + IDENT + r"(?:\s*::\s*" + IDENT + r")+")
STRING_PATH = re.compile(r"^(?:crate|super|self)(?:::" + IDENT + r")+$")
USE_TOKEN = re.compile(r"::|[{},*;]|" + IDENT)


def is_ident_char(ch):
    return ch.isalnum() or ch == "_"


class SourceFile:
    """One file's text with comments, strings and char literals blanked out (same
    length, newlines kept, so offsets still map to lines), plus the strings it had."""

    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            self.original = f.read()
        self.strings = []  # (offset, content)
        self.test_regions = []  # (start, end) blanked as test code
        self.text = self._blank_literals(self.original)
        self.line_starts = [0] + [i + 1 for i, ch in enumerate(self.original) if ch == "\n"]

    def line_of(self, offset):
        low, high = 0, len(self.line_starts) - 1
        while low < high:
            mid = (low + high + 1) // 2
            if self.line_starts[mid] <= offset:
                low = mid
            else:
                high = mid - 1
        return low + 1

    def _blank_literals(self, src):
        out = list(src)
        n = len(src)

        def blank(start, end):
            for k in range(start, min(end, n)):
                if out[k] != "\n":
                    out[k] = " "

        i = 0
        while i < n:
            ch = src[i]
            starts_token = i == 0 or not is_ident_char(src[i - 1])
            if src.startswith("//", i):
                end = src.find("\n", i)
                end = n if end < 0 else end
                blank(i, end)
                i = end
            elif src.startswith("/*", i):
                depth, j = 1, i + 2
                while j < n and depth:
                    if src.startswith("/*", j):
                        depth, j = depth + 1, j + 2
                    elif src.startswith("*/", j):
                        depth, j = depth - 1, j + 2
                    else:
                        j += 1
                blank(i, j)
                i = j
            elif starts_token and re.match(r'(?:b|c)?r#*"', src[i:i + 300]):
                opening = re.match(r'(?:b|c)?r(#*)"', src[i:])
                closing = '"' + opening.group(1)
                body_start = i + opening.end()
                end = src.find(closing, body_start)
                end = n if end < 0 else end
                self.strings.append((i, src[body_start:end]))
                blank(i, end + len(closing))
                i = end + len(closing)
            elif ch == '"':
                j = i + 1
                while j < n and src[j] != '"':
                    j += 2 if src[j] == "\\" else 1
                self.strings.append((i, src[i + 1:j]))
                blank(i, j + 1)
                i = j + 1
            elif ch == "'":
                if i + 1 < n and src[i + 1] == "\\":
                    j = i + 3
                    while j < n and src[j] != "'":
                        j += 1
                    blank(i, j + 1)
                    i = j + 1
                elif i + 2 < n and src[i + 2] == "'":
                    blank(i, i + 3)
                    i += 3
                else:
                    i += 1  # a lifetime or a label
            else:
                i += 1
        return "".join(out)

    def blank(self, start, end):
        chars = list(self.text)
        for k in range(start, end):
            if chars[k] != "\n":
                chars[k] = " "
        self.text = "".join(chars)


def item_end(text, start):
    """Where the item starting at `start` ends: its `;` or its closing `}` at depth 0."""
    depth, i, n = 0, start, len(text)
    while i < n:
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and ch == "}":
                return i + 1
            if depth < 0:
                return i  # the attribute was on a field or arm: stop at its container
        elif ch == ";" and depth == 0:
            return i + 1
        i += 1
    return n


def matching_brace(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text)


def strip_raw(ident):
    return ident[2:] if ident.startswith("r#") else ident


def use_paths(statement):
    """The paths a use tree names, each a list of segments; `{self, x}` names the
    prefix itself, `*` and `as` name what precedes them."""
    tokens = USE_TOKEN.findall(statement)
    paths = []

    def tree(pos, prefix):
        segments = list(prefix)
        while pos < len(tokens):
            token = tokens[pos]
            if token == "{":
                pos += 1
                while pos < len(tokens) and tokens[pos] != "}":
                    pos = tree(pos, segments)
                    if pos < len(tokens) and tokens[pos] == ",":
                        pos += 1
                return pos + 1
            if token == "*":
                paths.append(segments)
                return pos + 1
            if token == "::":
                if not segments:
                    segments.append("::")  # `::name`: an extern crate
                pos += 1
            elif token == "as":
                paths.append(segments)
                return pos + 2
            elif token in (",", "}", ";"):
                paths.append(segments)
                return pos
            else:
                if not (token == "self" and segments):
                    segments.append(strip_raw(token))
                pos += 1
        paths.append(segments)
        return pos

    tree(0, [])
    return [p for p in paths if p]


class Crate:
    def __init__(self, root_dir, root_file, label, with_tests):
        self.root_dir = root_dir
        self.label = label  # "" for the library (or only) crate
        self.with_tests = with_tests
        self.modules = {}  # segments tuple -> SourceFile
        self.edges = collections.defaultdict(dict)  # from -> {to: (file, line, text)}
        self._load((), os.path.join(root_dir, root_file), mod_rs=True)
        for segments in list(self.modules):
            self._collect_edges(segments)

    def name(self, segments):
        inner = "::".join(segments)
        if self.label:
            return self.label + ("::" + inner if inner else "")
        return inner or "crate"

    def _load(self, segments, path, mod_rs):
        source = SourceFile(path)
        if not self.with_tests:
            if INNER_CFG_TEST.search(source.text):
                return
            for attribute in reversed(list(CFG_TEST.finditer(source.text))):
                end = item_end(source.text, attribute.end())
                source.test_regions.append((attribute.start(), end))
                source.blank(attribute.start(), end)
        for restricted in VISIBILITY_IN.finditer(source.text):
            source.blank(restricted.start(), restricted.end())
        self.modules[segments] = source
        source.inline_modules = []  # (open brace, close brace, name)
        own_dir = os.path.dirname(path)
        children_dir = own_dir if mod_rs else os.path.join(own_dir, os.path.splitext(os.path.basename(path))[0])
        for declaration in MOD_ITEM.finditer(source.text):
            name = strip_raw(declaration.group(1))
            if declaration.group(2) == "{":
                close = matching_brace(source.text, declaration.end() - 1)
                source.inline_modules.append((declaration.end() - 1, close, name))
                continue
            enclosing = self._inline_stack(source, declaration.start())
            child_file = self._child_file(source, declaration, own_dir, children_dir, enclosing, name)
            if child_file is None:
                continue
            if not self.with_tests and os.path.basename(child_file) in TEST_FILE_NAMES:
                continue
            child_is_mod_rs = os.path.basename(child_file) == "mod.rs"
            self._load(segments + tuple(enclosing) + (name,), child_file, child_is_mod_rs)

    def _child_file(self, source, declaration, own_dir, children_dir, enclosing, name):
        preceding = source.text.rfind(";", 0, declaration.start())
        preceding = max(preceding, source.text.rfind("}", 0, declaration.start()),
                        source.text.rfind("{", 0, declaration.start()))
        attributes = source.original[preceding + 1:declaration.start()]
        explicit = PATH_ATTRIBUTE.search(attributes)
        if explicit:
            candidates = [os.path.join(own_dir, *enclosing, explicit.group(1))]
        else:
            folder = os.path.join(children_dir, *enclosing)
            candidates = [os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")]
        for candidate in candidates:
            if os.path.isfile(candidate):
                return os.path.normpath(candidate)
        print(f"warning: {source.path}:{source.line_of(declaration.start())}: no file for mod {name}",
              file=sys.stderr)
        return None

    @staticmethod
    def _inline_stack(source, offset):
        return [name for start, end, name in sorted(source.inline_modules) if start < offset < end]

    def _resolve(self, here, path):
        """The deepest module `path` names, seen from module path `here`, or None for a
        path outside this crate."""
        first = path[0]
        if first == "crate":
            full = list(path[1:])
        elif first in ("self", "super"):
            base = list(here)
            rest = list(path)
            while rest and rest[0] in ("self", "super"):
                if rest[0] == "super":
                    if not base:
                        return None
                    base.pop()
                rest.pop(0)
            full = base + rest
        elif tuple(here) + (first,) in self.modules:
            full = list(here) + list(path)
        else:
            return None
        for length in range(len(full), -1, -1):
            if tuple(full[:length]) in self.modules:
                return tuple(full[:length])
        return None

    def _add_edge(self, segments, source, offset, path, how):
        here = list(segments) + self._inline_stack(source, offset)
        target = self._resolve(here, path)
        if target is None or target == segments:
            return
        if target not in self.edges[segments]:
            shown = how + " " + "::".join(path)
            self.edges[segments][target] = (source.path, source.line_of(offset), shown)

    def _collect_edges(self, segments):
        source = self.modules[segments]
        text = source.text
        for use in USE_ITEM.finditer(text):
            end = text.find(";", use.end())
            end = len(text) if end < 0 else end
            for path in use_paths(text[use.end():end]):
                self._add_edge(segments, source, use.start(), path, "use")
            source.blank(use.start(), end)
            text = source.text
        for match in INLINE_PATH.finditer(text):
            path = [strip_raw(p.strip()) for p in match.group(0).split("::")]
            self._add_edge(segments, source, match.start(), path, "path")
        # serde's `with = "crate::x::f"` and the like: a path kept in a string.
        for offset, content in source.strings:
            in_test = any(start <= offset < end for start, end in source.test_regions)
            if STRING_PATH.match(content) and not in_test:
                self._add_edge(segments, source, offset, content.split("::"), "string")


def strongly_connected(nodes, edges):
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(component)

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return components


def shortest_cycle(start, members, edges):
    previous = {start: None}
    queue = collections.deque([start])
    while queue:
        node = queue.popleft()
        for target in sorted(edges.get(node, {})):
            if target not in members:
                continue
            if target == start:
                cycle = [node]
                while previous[cycle[-1]] is not None:
                    cycle.append(previous[cycle[-1]])
                return list(reversed(cycle)) + [start]
            if target not in previous:
                previous[target] = node
                queue.append(target)
    return None


def crate_roots(root_dir):
    roots = []
    if os.path.isfile(os.path.join(root_dir, "lib.rs")):
        roots.append(("lib.rs", ""))
    if os.path.isfile(os.path.join(root_dir, "main.rs")):
        roots.append(("main.rs", "<main>" if roots else ""))
    return roots


def check(root_dir, verbose, with_tests):
    roots = crate_roots(root_dir)
    if not roots:
        print(f"error: {root_dir} has neither lib.rs nor main.rs", file=sys.stderr)
        return 2
    crates = [Crate(root_dir, root_file, label, with_tests) for root_file, label in roots]
    module_count = sum(len(c.modules) for c in crates)
    edge_count = sum(len(targets) for c in crates for targets in c.edges.values())
    cycles = 0
    for crate in crates:
        if verbose:
            for segments in sorted(crate.modules):
                path = os.path.relpath(crate.modules[segments].path, root_dir)
                targets = ", ".join(crate.name(t) for t in sorted(crate.edges.get(segments, {})))
                print(f"{crate.name(segments)} ({path}) -> {targets or '-'}")
        for component in strongly_connected(crate.modules, crate.edges):
            if len(component) < 2:
                continue
            cycles += 1
            members = set(component)
            names = ", ".join(sorted(crate.name(m) for m in members))
            print(f"cycle {cycles} in {root_dir}: {len(members)} modules reach each other: {names}")
            seen = set()
            for member in sorted(members):
                path = shortest_cycle(member, members, crate.edges)
                turn = path.index(min(path[:-1]))
                key = tuple(path[turn:-1] + path[:turn])
                if key in seen:
                    continue
                seen.add(key)
                print("  " + " -> ".join(crate.name(m) for m in path))
            print("  edges inside it:")
            for source in sorted(members):
                for target in sorted(crate.edges.get(source, {})):
                    if target in members:
                        file, line, shown = crate.edges[source][target]
                        where = f"{os.path.relpath(file, root_dir)}:{line}"
                        print(f"    {crate.name(source)} -> {crate.name(target)}  ({where}: {shown})")
    summary = f"({module_count} modules, {edge_count} edges)"
    if cycles:
        print(f"{cycles} cycle{'s' if cycles > 1 else ''} in {root_dir} {summary}")
        return 1
    print(f"no cycle in {root_dir} {summary}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+", metavar="SRC_ROOT", help="a crate's source folder")
    parser.add_argument("--verbose", action="store_true", help="list each module's imports first")
    parser.add_argument("--with-tests", action="store_true", help="include test code")
    args = parser.parse_args()
    worst = 0
    for root in args.roots:
        worst = max(worst, check(os.path.normpath(root), args.verbose, args.with_tests))
    sys.exit(worst)


if __name__ == "__main__":
    main()
