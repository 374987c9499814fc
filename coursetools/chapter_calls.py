"""Which graded functions a chapter calls, through the course's own code too.

A chapter imports ``lessons.attention.decode`` and never names ``causal_attention``, yet
``decode`` calls it: the learner's copy must name that exercise in the chapter's first cell.  This
reads the course's packages (no import, no run): for every top-level function and class of every
module, the names it refers to, resolved through the module's own definitions and imports; a class
refers to what any of its methods does.  What a chapter calls is then everything reachable from
what its code cells import and use.  It errs on the side of naming: a call on a path the chapter
never takes still counts.
"""
from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["CallGraph", "chapter_calls"]

Qualified = tuple[str, str]            # (module, top-level name)


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, module: str, is_package: bool) -> dict[str, str]:
    """{local name: what it stands for, "module" or "module:name"} of a module's imports."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            for a in node.names:
                names[a.asname or a.name] = f"{base}:{a.name}"
    return names


def _references(node: ast.AST, imports: dict[str, str], module: str, defined: set[str],
                modules: set[str]) -> set[Qualified]:
    found: set[Qualified] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            target = imports.get(sub.id)
            if target and ":" in target:
                mod, name = target.split(":", 1)
                found.add((f"{mod}.{name}", "*") if f"{mod}.{name}" in modules else (mod, name))
            elif sub.id in defined:
                found.add((module, sub.id))
        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            target = imports.get(sub.value.id, "")
            mod = target.replace(":", ".")
            if mod in modules:
                found.add((mod, sub.attr))
    return found


class CallGraph:
    """The references between the top-level definitions of the course's packages under ``root``."""

    def __init__(self, root: Path, packages: list[str]):
        self.edges: dict[Qualified, set[Qualified]] = {}
        self.imports: dict[str, dict[str, str]] = {}
        files = [p for package in packages for p in sorted((root / package).rglob("*.py"))
                 if "__pycache__" not in p.parts]
        self.modules = {_module_name(root, p) for p in files}
        for path in files:
            try:
                tree = ast.parse(path.read_text(encoding="utf-8"))
            except SyntaxError:
                continue
            self._add_module(_module_name(root, path), tree, path.name == "__init__.py")

    def _add_module(self, module: str, tree: ast.Module, is_package: bool) -> None:
        """The edges of one module: each definition to what it references, each module-level name
        bound to others (``ALIAS = function``) to those, each re-export to its definition."""
        imports = _imports(tree, module, is_package)
        self.imports[module] = imports
        defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        defined = {n.name for n in defs} | {t.id for n in tree.body if isinstance(n, ast.Assign)
                                            for t in n.targets if isinstance(t, ast.Name)}
        for node in defs:
            self.edges[(module, node.name)] = _references(node, imports, module, defined, self.modules)
        for node in tree.body:
            if isinstance(node, ast.Assign):
                refs = _references(node.value, imports, module, defined, self.modules)
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        self.edges.setdefault((module, t.id), set()).update(refs)
        # a name a module re-exports (``from .x import f``) stands for the definition
        for local, target in imports.items():
            if ":" in target:
                mod, name = target.split(":", 1)
                self.edges.setdefault((module, local), set()).add((mod, name))

    def reachable(self, roots: set[Qualified]) -> set[Qualified]:
        seen, todo = set(), list(roots)
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            if node[1] == "*":          # a whole module used as a name: everything of it it names
                todo.extend(k for k in self.edges if k[0] == node[0])
            todo.extend(self.edges.get(node, ()))
        return seen


def chapter_calls(sources: list[str], graph: CallGraph, graded: set[str]) -> set[str]:
    """The graded names (functions or classes of ``graded``) that the code cells ``sources`` reach."""
    trees = []
    for source in sources:
        try:
            trees.append(ast.parse("\n".join("" if l.lstrip().startswith(("%", "!")) else l
                                             for l in source.splitlines())))
        except SyntaxError:
            continue
    imports: dict[str, str] = {}          # a notebook's imports hold for every later cell
    for tree in trees:
        imports.update(_imports(tree, "__chapter__", False))
    roots: set[Qualified] = set()
    for tree in trees:
        roots |= _references(tree, imports, "__chapter__", set(), graph.modules)
    return {name for module, name in graph.reachable(roots) if name in graded and module in graph.modules}
