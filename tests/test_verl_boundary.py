"""Only the trainer adapter (codegrpo/verl/) imports verl: every other library module and workflow script
reaches verl through it (an import scan of the source with ast, so lazy imports inside functions count)."""

import ast
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT as ROOT

ADAPTER = ROOT / "codegrpo" / "verl"


def verl_imports(path: Path) -> list[str]:
    """``file:line: statement`` for every import of the ``verl`` package (not ``codegrpo.verl``) in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(n == "verl" or n.startswith("verl.") for n in names):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_scan_finds_verl_imports(tmp_path, monkeypatch):
    src = tmp_path / "m.py"
    src.write_text(
        "import os\nfrom codegrpo.verl import launch\n\ndef f():\n    from verl.trainer import main_ppo\n"
        "    import verl.utils as u\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert verl_imports(src) == ["m.py:5: from verl.trainer import main_ppo", "m.py:6: import verl.utils as u"]


def test_only_the_adapter_imports_verl():
    files = [
        p
        for d in ("codegrpo", "workflow_scripts")
        for p in sorted((ROOT / d).rglob("*.py"))
        if ADAPTER not in p.parents
    ]
    assert len(files) > 50
    offenders = [hit for p in files for hit in verl_imports(p)]
    assert offenders == [], "verl imported outside codegrpo/verl/:\n" + "\n".join(offenders)
    assert any(verl_imports(p) for p in ADAPTER.rglob("*.py"))  # the scan sees the adapter's own imports
