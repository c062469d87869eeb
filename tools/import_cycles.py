"""Import cycles among the modules of a package, function-level imports included.

    python tools/import_cycles.py [PACKAGE_DIR]           # default: ockstore/ next to this tool's folder
    python tools/import_cycles.py --graph [PACKAGE_DIR]   # also print what each module imports of the package

Walks the ``ast`` of every .py file of the package, resolves each ``import`` and ``from ... import`` (relative ones
too, at any depth in the file: inside functions and methods as well) to the package's own modules, and prints every
strongly connected component of more than one module (and every module importing itself). ``from .pkg import name``
counts as an import of ``pkg.name`` when that is a module, else of ``pkg``. Prints "no import cycles" and exits 0
when there are none, else the cycles and exits 1. Imports of compiled extensions (.pyx) are not followed: they import
nothing of ours.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def modules(root):
    """{dotted name: path} of the package's modules (a package is its __init__); compiled extensions (.pyx) map to
    None: they import nothing of ours."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    for path in root.rglob("*.pyx"):
        found[".".join(path.relative_to(root.parent).with_suffix("").parts)] = None
    return found


def imports(name, path, known):
    """The package's modules that module ``name`` imports (anywhere in the file)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # "pkg.mod.attr" -> "pkg.mod"
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
            elif target == name:
                out.add(name)
    return out


def cycles(graph):
    """Strongly connected components (Tarjan) with more than one node, or a node with an edge to itself."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                result.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return result


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    show_graph = "--graph" in argv
    argv = [a for a in argv if a != "--graph"]
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "ockstore"
    known = modules(root.resolve())
    graph = {name: set() if path is None else imports(name, path, known) for name, path in known.items()}
    if show_graph:
        for name in sorted(graph):
            if known[name] is not None:
                print(f"{name}: {', '.join(sorted(graph[name])) or '-'}")
    found = cycles(graph)
    if not found:
        n = sum(path is not None for path in known.values())
        print(f"no import cycles among the {n} Python modules of {root.name}/ (function-level imports included)")
        return 0
    for component in found:
        members = set(component)
        print("cycle:", " <-> ".join(component))
        for v in component:
            print(f"    {v} imports {', '.join(sorted(graph[v] & members))}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
