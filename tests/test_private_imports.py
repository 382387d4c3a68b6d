"""No module of codegrpo/ uses another module's private (underscore) name (issue 26): an ``import`` of such a
name, or an attribute ``alias._name`` on an imported codegrpo module. What must stay is allow-listed with its
reason."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT as REPO

PKG = REPO / "codegrpo"

# (importing file, module, name): why it stays
ALLOWED: dict[tuple[str, str, str], str] = {}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _absolute(path: Path, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    pkg = _module_name(path).split(".")
    if path.name != "__init__.py":
        pkg.pop()
    base = pkg[: len(pkg) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    rel = Path(*name.split("."))
    return (REPO / rel).with_suffix(".py").is_file() or (REPO / rel / "__init__.py").is_file()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_uses(path: Path) -> list[tuple[str, str, int]]:
    """``(module, name, line)`` for each private name of another codegrpo module that ``path`` uses."""
    me = _module_name(path)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    aliases: dict[str, str] = {}  # local name -> codegrpo module
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "codegrpo":
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom):
            mod = _absolute(path, node)
            if mod.split(".")[0] != "codegrpo":
                continue
            for a in node.names:
                if _is_module(f"{mod}.{a.name}"):
                    aliases[a.asname or a.name] = f"{mod}.{a.name}"
                elif _private(a.name) and mod != me:
                    found.append((mod, a.name, node.lineno))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = ast.unparse(node.value)
            mod = aliases.get(target)
            if mod and mod != me and not _is_module(f"{mod}.{node.attr}"):
                found.append((mod, node.attr, node.lineno))
    return found


def test_no_private_names_across_modules():
    bad, used = [], set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for mod, name, line in private_uses(path):
            if (rel, mod, name) in ALLOWED:
                used.add((rel, mod, name))
            else:
                bad.append(f"{rel}:{line}: {mod}.{name}")
    assert not bad, "private names of other modules (make them public or allow-list with a reason):\n" + "\n".join(bad)
    assert used == set(ALLOWED), f"allow-list entries no longer needed: {sorted(set(ALLOWED) - used)}"


def test_the_scan_sees_each_form(tmp_path, monkeypatch):
    """The scan finds a from-import, a relative import and an attribute on an imported module."""
    pkg = tmp_path / "codegrpo"
    (pkg / "sub").mkdir(parents=True)
    for f in ("__init__.py", "sub/__init__.py", "sub/a.py", "b.py"):
        (pkg / f).write_text("_x = 1\n")
    (pkg / "c.py").write_text(
        "from codegrpo.b import _x\nfrom .sub.a import _x as y\nfrom codegrpo.sub import a\n"
        "import codegrpo.b as bb\nprint(a._x, bb._x, a.__name__)\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    got = sorted((m, n) for m, n, _ in private_uses(pkg / "c.py"))
    assert got == [("codegrpo.b", "_x"), ("codegrpo.b", "_x"), ("codegrpo.sub.a", "_x"), ("codegrpo.sub.a", "_x")]
