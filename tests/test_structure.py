"""The layout rules of tensorlite/ (issue 44), read from the source with ast, so no import runs:
no private name imported (or read through an imported module) across modules, no import below a
module's first statement (no bottom-of-file imports), no module-level import cycle, no file over
1,000 lines."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tensorlite"
BACKENDS = ROOT.parent / "backends"  # installed as tensorlite.backends
KERNELS = ROOT.parent / "kernels"  # installed as tensorlite.kernels
PROJECT = {"tensorlite", "backends"}
MAX_LINES = 1000


def _modules(root=ROOT):
    """{dotted module name: path} of every Python file of the package."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _package(name, path):
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _source(node, name, path):
    """The absolute module an ImportFrom names."""
    if not node.level:
        return node.module or ""
    pkg = _package(name, path).split(".")
    base = pkg[:len(pkg) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking(node):
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _module_level_imports(tree):
    """The imports a module runs when imported: its top-level ones, also inside top-level if / try
    blocks, but not under `if TYPE_CHECKING:` (for annotations only, never run)."""
    out = []

    def visit(body):
        for n in body:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                out.append(n)
            elif isinstance(n, ast.If) and not _type_checking(n):
                visit(n.body)
                visit(n.orelse)
            elif isinstance(n, ast.Try):
                for b in (n.body, n.orelse, n.finalbody, *[h.body for h in n.handlers]):
                    visit(b)
    visit(tree.body)
    return out


def private_imports(root=ROOT):
    """(importing module, imported module, name) for each `from <tensorlite module> import _name`
    (dunder names excepted), anywhere in a module, functions included."""
    mods = _modules(root)
    found = set()
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                src = _source(node, name, path)
                if src.split(".")[0] != root.name:
                    continue
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__") and f"{src}.{a.name}" not in mods:
                        found.add((name, src, a.name))
    return found


def private_attribute_reads(root=ROOT):
    """(module, line, name) for each `alias._name` read through a package module imported as a
    name (`from . import dtype as _dt` ... `_dt._BY_NAME`): the same crossing as importing it."""
    mods = _modules(root)
    found = set()
    for name, path in mods.items():
        tree = ast.parse(path.read_text())
        aliases = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom):
                src = _source(n, name, path)
                aliases |= {a.asname or a.name for a in n.names if f"{src}.{a.name}" in mods}
            elif isinstance(n, ast.Import):
                aliases |= {a.asname for a in n.names if a.name in mods and a.asname}
        for n in ast.walk(tree):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases
                    and n.attr.startswith("_") and not n.attr.startswith("__")):
                found.add((name, n.lineno, f"{n.value.id}.{n.attr}"))
    return found


def private_aliases(root=ROOT):
    """(module, line, alias) for each public name of the project imported under a private alias
    (`from .. import dtype as _dt`): the reader then meets a private-looking name for a public one."""
    found = set()
    for name, path in _modules(root).items():
        for n in ast.walk(ast.parse(path.read_text())):
            if isinstance(n, ast.ImportFrom):
                src = _source(n, name, path)
                if src.split(".")[0] not in PROJECT:
                    continue
            elif isinstance(n, ast.Import):
                if not any(a.name.split(".")[0] in PROJECT for a in n.names):
                    continue
            else:
                continue
            found |= {(name, n.lineno, a.asname) for a in n.names
                      if a.asname and a.asname.startswith("_") and not a.name.startswith("_")}
    return found


def late_imports(root=ROOT):
    """(module, line) of each top-level import below the module's first other statement (the
    docstring, `from __future__`, and `if TYPE_CHECKING:` blocks among the imports excepted)."""
    found = []
    for name, path in _modules(root).items():
        seen_code = False
        for n in ast.parse(path.read_text()).body:
            if isinstance(n, (ast.Import, ast.ImportFrom)):
                if seen_code:
                    found.append((name, n.lineno))
            elif not (_type_checking(n) or isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)):
                seen_code = True
    return found


def import_graph(root=ROOT):
    """{module: the package's modules that its module-level imports import}. `from pkg import a`
    names the submodule pkg.a where there is one, else pkg itself (whose names it reads)."""
    mods = _modules(root)
    graph = {}
    for name, path in mods.items():
        edges = set()
        for n in _module_level_imports(ast.parse(path.read_text())):
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            else:
                src = _source(n, name, path)
                subs = [f"{src}.{a.name}" for a in n.names]
                targets = [s for s in subs if s in mods] + ([src] if any(s not in mods for s in subs) else [])
            edges |= {t for t in targets if t in mods and t != name}
        graph[name] = edges
    return graph


def import_cycles(graph):
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_private_name_imported_across_modules():
    assert private_imports() == set(), "import the public name (tensorlite._core, tensorlite.ops.*)"
    assert private_attribute_reads() == set(), "read the module's public name"


def test_no_public_name_under_a_private_alias():
    assert private_aliases() == set()
    assert private_aliases(BACKENDS) == set()


def test_no_import_below_the_first_statement():
    assert late_imports() == []


def test_no_module_level_import_cycle():
    assert import_cycles(import_graph()) == []


def test_the_core_and_autograd_import_nothing_above_them():
    graph = import_graph()
    above = {m for m in graph if m.startswith(("tensorlite.ops", "tensorlite.nn", "tensorlite.optim"))} | {
        "tensorlite.tensor"}
    for low in ("tensorlite._core", "tensorlite.autograd", "tensorlite.custom_op"):
        assert graph[low] & above == set(), low


def test_no_file_over_the_line_budget():
    """Every module of the installed package: tensorlite/ and the backends/ and kernels/ installed in it."""
    files = [p for root in (ROOT, BACKENDS, KERNELS) for p in _modules(root).values()]
    assert BACKENDS / "rocm" / "amdemu" / "executor.py" in files  # the backends are read, not skipped
    long = {str(p.relative_to(ROOT.parent)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_every_package_is_in_the_wheel():
    """A new subpackage not listed in pyproject.toml's explicit `packages` would be missing from
    the wheel (the explicit list is needed: tensorlite.backends and .kernels live outside tensorlite/)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, p in _modules().items() if p.name == "__init__.py"}
    found |= {"tensorlite.backends" + name[len("backends"):] for name, p in _modules(BACKENDS).items()
              if p.name == "__init__.py"}
    found.add("tensorlite.kernels")
    assert found - listed == set(), "add these to [tool.setuptools] packages"
