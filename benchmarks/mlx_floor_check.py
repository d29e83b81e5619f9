"""Does an mlx-lm wheel have every mlx-lm name macprof uses? By default the floor pyproject.toml
declares (`mlx-lm>=X`), so a version check that says "supported" means the code runs.

What macprof uses is read from its own source (ast), never listed by hand, so it cannot drift:
- every `import mlx_lm...` / `from mlx_lm... import NAME` (also inside Python held in a string
  constant, such as the probe run/distributed.py runs in a fresh interpreter), and every
  `mlx_lm.a.b` attribute chain on an imported mlx-lm module;
- every keyword argument of a call to such a name (`load_model(path, lazy=True)`);
- every attribute used on a variable bound to an instance of an mlx-lm class in the same function
  (`gen = BatchGenerator(...)`, then `gen.next_generated()`);
- `python -m mlx_lm SUB --flag ...` command lines: the subcommand's module and its flags.
Not checked: attributes of what mlx-lm returns (cache layers, responses, models), whose type
the source does not name; macprof feature-detects those where they vary (engines/mlx.py,
engines/mlx_shard.py).

The wheel is read as text (ast again): mlx is never imported, so this runs on any machine.

    python benchmarks/mlx_floor_check.py [VERSION | WHEEL | DIR] [--json]

A VERSION is fetched with `pip download --no-deps` into a temporary folder. Prints a table, one
row per use; exits 1 when one is missing, 2 when the wheel cannot be had.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mlx_lm"


@dataclass(frozen=True)
class Use:
    """One thing macprof needs from mlx-lm. kind: module, name, keyword, attribute or flag;
    name: the object in `module` (a class's attribute as Class.attr); detail: the keyword or flag."""
    kind: str
    module: str
    name: str = ""
    detail: str = ""
    where: str = ""

    @property
    def what(self) -> str:
        target = f"{self.module}.{self.name}" if self.name else self.module
        if self.kind == "keyword":
            return f"{target}({self.detail}=)"
        if self.kind == "flag":
            return f"{self.module} {self.detail}"
        return target


# -- macprof's side: what it uses ------------------------------------------------------------
def floor_version(pyproject: str) -> str:
    """The mlx-lm floor pyproject.toml declares."""
    found = re.search(r'"mlx-lm>=([0-9][0-9a-z.]*)', pyproject)
    if not found:
        raise ValueError("pyproject.toml declares no mlx-lm>= floor")
    return found.group(1)


def scan_source(text: str, where: str) -> list[Use]:
    """Every mlx-lm use in one Python source (see the module's docstring)."""
    return _scan(ast.parse(text), where, 0)


def scan_package(root: Path) -> list[Use]:
    uses: list[Use] = []
    for path in sorted(root.rglob("*.py")):
        uses += scan_source(path.read_text(), str(path.relative_to(root.parent)))
    return uses


def _scan(tree: ast.AST, where: str, line0: int) -> list[Use]:
    uses = _scan_scope(tree, where, line0, {})
    for node in ast.walk(tree):
        at = f"{where}:{line0 + getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and PACKAGE in node.value:
            try:  # Python run from a string (a probe in a fresh interpreter): its lines count from the string's
                inner = ast.parse(node.value)
            except SyntaxError:
                continue
            uses += _scan(inner, where, line0 + node.lineno - 1)
        elif isinstance(node, ast.List):
            uses += _module_command(node, at)
    return list(dict.fromkeys(uses))


def _scan_scope(scope: ast.AST, where: str, line0: int, outer: dict[str, tuple[str, str]]) -> list[Use]:
    """Imports and uses within one module body or function, then in the functions nested in it,
    which see the names it imported (a module-level import serves every function)."""
    bound = dict(outer)  # local name -> (module, object name or "" for a module)
    instances: dict[str, tuple[str, str]] = {}  # local name -> (module, class) it was made from
    uses: list[Use] = []
    nodes = list(_own_nodes(scope))
    for node in nodes:
        at = f"{where}:{line0 + getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ours(alias.name):
                    uses.append(Use("module", alias.name, where=at))
                    if alias.asname:
                        bound[alias.asname] = (alias.name, "")
                    else:
                        bound[alias.name.split(".")[0]] = (PACKAGE, "")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and _ours(node.module):
            uses.append(Use("module", node.module, where=at))
            for alias in node.names:
                uses.append(Use("name", node.module, alias.name, where=at))
                bound[alias.asname or alias.name] = (node.module, alias.name)
    inner = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}  # a.b of a.b.c: only the whole chain counts
    for node in nodes:
        at = f"{where}:{line0 + getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store) and id(node) not in inner:
            target = _resolve(node, bound)
            if target and target[1]:
                uses.append(Use("name", *target, where=at))
            elif isinstance(node.value, ast.Name) and node.value.id in instances:
                module, cls = instances[node.value.id]
                uses.append(Use("attribute", module, f"{cls}.{node.attr}", where=at))
        elif isinstance(node, ast.Call):
            target = _resolve(node.func, bound)
            if target and target[1]:
                uses += [Use("keyword", *target, k.arg, where=at) for k in node.keywords if k.arg]
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.targets) == 1:
            made = _resolve(node.value.func, bound)
            if made and made[1] and made[1][:1].isupper() and isinstance(node.targets[0], ast.Name):
                instances[node.targets[0].id] = made  # a class by mlx-lm's naming (PEP 8): an instance of it
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            uses += _scan_scope(node, where, line0, bound)
    return uses


def _own_nodes(scope: ast.AST):
    """The nodes of a scope, not those of the functions (and classes) nested in it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop(0)
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))
        elif not isinstance(node, ast.Lambda):  # a def's decorators and defaults run in this scope
            todo.extend(node.decorator_list)


def _ours(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


def _resolve(node: ast.expr, bound: dict[str, tuple[str, str]]) -> tuple[str, str] | None:
    """(module, name) an expression names, for a bound name or a dotted chain on a bound module:
    `mlx_lm.utils.load_model` -> ("mlx_lm.utils", "load_model"); ("mlx_lm.utils", "") for a module."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in bound:
        return None
    module, name = bound[node.id]
    if name and parts:
        return None  # an attribute of an imported object (a class's method...): not a module path
    if name:
        return module, name
    if not parts:
        return None
    *mods, last = parts
    return ".".join([module, *mods]), last


def _module_command(node: ast.List, at: str) -> list[Use]:
    """`[py, "-m", "mlx_lm", "server", "--model", ...]`: the subcommand's module and its flags."""
    words = [e.value if isinstance(e, ast.Constant) and isinstance(e.value, str) else "" for e in node.elts]
    for i in range(len(words) - 1):
        if words[i] == "-m" and _ours(words[i + 1]):
            module, rest, uses = words[i + 1], words[i + 2:], []
            if module == PACKAGE and rest and rest[0] and not rest[0].startswith("-"):  # mlx_lm's own CLI
                module, rest = f"{PACKAGE}.{rest[0]}", rest[1:]
                uses.append(Use("module", f"{PACKAGE}.__main__", where=at))
            uses.append(Use("module", module, where=at))
            return uses + [Use("flag", module, detail=w, where=at) for w in rest if w.startswith("--")]
    return []


# -- the wheel's side: what it has -----------------------------------------------------------
class Wheel:
    """An mlx-lm wheel (or an unpacked copy) read as Python source, never imported."""

    def __init__(self, sources: dict[str, str], version: str) -> None:
        self.sources = sources
        self.version = version
        self._trees: dict[str, ast.Module] = {}

    @classmethod
    def open(cls, path: Path) -> "Wheel":
        if path.is_dir():
            files = {str(p.relative_to(path)): p for p in path.rglob("*.py")}
            sources = {k: p.read_text() for k, p in files.items()}
        else:
            with zipfile.ZipFile(path) as z:
                sources = {n: z.read(n).decode() for n in z.namelist() if n.endswith(".py")}
        found = re.search(r'__version__\s*=\s*["\']([^"\']+)["\']', sources.get(f"{PACKAGE}/_version.py", ""))
        return cls(sources, found.group(1) if found else path.name)

    def module_file(self, module: str) -> str | None:
        base = module.replace(".", "/")
        return next((f for f in (f"{base}.py", f"{base}/__init__.py") if f in self.sources), None)

    def tree(self, module: str) -> ast.Module | None:
        file = self.module_file(module)
        if file is None:
            return None
        if file not in self._trees:
            self._trees[file] = ast.parse(self.sources[file])
        return self._trees[file]

    def definition(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST | None] | None:
        """Where `name` is defined in `module`, following re-exports (`from .utils import load`):
        (the module defining it, its def/class, or None for an assignment or a submodule); None: absent."""
        tree = self.tree(module)
        if tree is None or depth > 8:
            return None
        for node in _top_level(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
                return module, node
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                    return module, None
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        source = _absolute(module, node, self.module_file(module) or "")
                        if source and _ours(source):
                            return self.definition(source, alias.name, depth + 1) or (
                                (f"{source}.{alias.name}", None) if self.module_file(f"{source}.{alias.name}") else None)
                        return module, None  # from another package: present as far as this wheel goes
            if isinstance(node, ast.Import) and any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return module, None
        if self.module_file(f"{module}.{name}"):
            return f"{module}.{name}", None
        return None

    def constants(self, module: str) -> set[str]:
        tree = self.tree(module)
        return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)} if tree else set()


def _top_level(tree: ast.Module):
    """Module-level statements, with those inside top-level if/try blocks (optional imports)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                todo.extend(handler.body)


def _absolute(module: str, node: ast.ImportFrom, file: str) -> str | None:
    if node.level == 0:
        return node.module
    package = module if file.endswith("__init__.py") else module.rsplit(".", 1)[0]
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _parameters(node: ast.AST) -> tuple[set[str], bool] | None:
    """A def's keyword-passable parameters and whether it takes **kwargs; a class's __init__'s
    (a dataclass's fields); None when the source does not say."""
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            fields = {n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
            return (fields, False) if fields else None
        node = init
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = node.args
    return {p.arg for p in a.args + a.kwonlyargs}, a.kwarg is not None


def _class_attributes(node: ast.ClassDef) -> set[str]:
    names = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name) and n.value.id == "self":
            names.add(n.attr)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)) and n in node.body:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def check(use: Use, wheel: Wheel) -> tuple[bool, str]:
    """(present, how it was found or why it is missing)."""
    if use.kind == "module":
        return (True, wheel.module_file(use.module) or "") if wheel.module_file(use.module) else (False, "no such module")
    if use.kind == "flag":
        if wheel.module_file(use.module) is None:
            return False, "no such module"
        return (True, "a string constant there") if use.detail in wheel.constants(use.module) else (False, "the module never names it")
    cls, _, attr = use.name.partition(".") if use.kind == "attribute" else (use.name, "", "")
    found = wheel.definition(use.module, cls)
    if found is None:
        return False, f"{cls} is not in {use.module}"
    home, node = found
    if use.kind == "name":
        return True, f"defined in {home}"
    if use.kind == "attribute":
        if not isinstance(node, ast.ClassDef):
            return False, f"{home}.{cls} is not a class this wheel defines"
        return (True, f"{home}.{cls}") if attr in _class_attributes(node) else (False, f"{home}.{cls} has no {attr}")
    params = _parameters(node) if node is not None else None
    if params is None:
        return False, f"{home}.{cls}: no signature in the source"
    names, kwargs = params
    if use.detail in names:
        return True, f"a parameter of {home}.{cls}"
    return (True, f"taken by {home}.{cls}'s **kwargs") if kwargs else (False, f"{home}.{cls} has no {use.detail}=")


# -- the command -----------------------------------------------------------------------------
def fetch(version: str, into: Path) -> Path:
    """The mlx-lm wheel of `version`, downloaded (no dependencies: only its source is read)."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           f"mlx-lm=={version}", "-d", str(into)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("mlx_lm-*.whl"))
    if out.returncode != 0 or not wheels:
        raise RuntimeError(f"pip download mlx-lm=={version} failed: {(out.stderr or out.stdout).strip()[-400:]}")
    return wheels[0]


def report(uses: list[Use], wheel: Wheel) -> list[dict]:
    rows: dict[tuple, dict] = {}
    for use in uses:  # one row per distinct use, with every place it is made
        key = (use.kind, use.module, use.name, use.detail)
        if key not in rows:
            ok, how = check(use, wheel)
            rows[key] = {**asdict(use), "what": use.what, "present": ok, "how": how, "where": [use.where]}
        else:
            rows[key]["where"].append(use.where)
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel", nargs="?", help="a version (default: pyproject's floor), a .whl, or an unpacked wheel")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    target = args.wheel or floor_version((ROOT / "pyproject.toml").read_text())
    uses = scan_package(ROOT / "macprof")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = Path(target) if Path(target).exists() else fetch(target, Path(tmp))
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 2
        wheel = Wheel.open(path)
    rows = report(uses, wheel)
    missing = [r for r in rows if not r["present"]]
    if args.json:
        print(json.dumps({"mlx_lm": wheel.version, "rows": rows, "missing": len(missing)}, indent=1))
    else:
        width = max(len(r["what"]) for r in rows)
        print(f"mlx-lm {wheel.version}: {len(rows)} uses by macprof, {len(missing)} missing")
        for r in rows:
            print(f"{'ok  ' if r['present'] else 'MISS'}  {r['what']:<{width}}  {r['how']}  [{', '.join(r['where'])}]")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
