"""codegrpo.eval.suite_checks and the driver's one source text (codegrpo.eval.suites.common.driver_source): the
comparisons on hand-checked cases, and the source the sandbox runs is self-contained (it runs the EvalPlus
ground-truth mode in an interpreter that cannot import codegrpo)."""

from __future__ import annotations

import ast
import builtins
import json
import pickle
import subprocess
import sys

from codegrpo.eval import suite_driver
from codegrpo.eval.suite_checks import always_equal_classes, evalplus_match, lcb_stdio_match
from codegrpo.eval.suites import driver_source


def test_evalplus_match_tolerance_and_oracles():
    task = {"entry_point": "f", "atol": 0, "dataset": "humaneval"}
    assert evalplus_match(task, (), 0.1 + 0.2, 0.3)  # float outputs with atol 0: 1e-6
    assert not evalplus_match(task, (), 0.31, 0.3) and not evalplus_match(task, (), 1, 1.0 + 1e-3)
    assert not evalplus_match(task, (), [0.3, 0.3], [0.3])
    zero = {"entry_point": "find_zero", "atol": 1e-4, "dataset": "humaneval"}
    assert evalplus_match(zero, ([-6, 11, -6, 1],), 1.00001, 3.0)  # any root of the polynomial passes
    area = {"entry_point": "surface_Area", "atol": 0, "dataset": "mbpp"}
    assert evalplus_match(area, (3, 4), 35, 0) and not evalplus_match(area, (3, 4), 34, 0)  # round(9 + 6 * 4.27)


def test_lcb_lines_and_always_equal():
    assert lcb_stdio_match("1 2\n3.0\n", "1 2\n3") and not lcb_stdio_match("1 2", "1 2\n3")
    src = "class A:\n    def __eq__(self, o):\n        return True\nclass B:\n    __ne__ = lambda *a: False\n"
    assert always_equal_classes(src) == ["A", "B"] and always_equal_classes("def f(:") == []


def test_the_driver_uses_the_checks_it_imports():
    assert suite_driver.lcb_stdio_match is lcb_stdio_match and suite_driver.evalplus_match is evalplus_match


def test_driver_source_is_self_contained():
    src = driver_source()
    imports = [n for n in ast.walk(ast.parse(src)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n.lineno for n in imports if "codegrpo" in ast.unparse(n)]
    ns = {"__name__": "_codegrpo_suite_driver", "__builtins__": builtins}  # as pytest_driver.driver_child runs it
    exec(compile(src, "suite_driver.py", "exec"), ns)  # noqa: S102
    assert {"run_runner", "MODES", "evalplus_match", "lcb_stdio_match", "always_equal_classes"} <= set(ns)


def test_evalplus_ground_truth_runs_without_codegrpo(tmp_path):
    (tmp_path / "main.py").write_text(driver_source())
    (tmp_path / "solution.py").write_text("def add(a, b):\n    return a + b\n")
    task = {"entry_point": "add", "inputs": {"base": [[1, 2]], "plus": [[3, 4], [[1], [2]]]}, "output_not_none": False}
    (tmp_path / "task.pkl").write_bytes(pickle.dumps(task))
    # -I -S: no PYTHONPATH, no site-packages (codegrpo's editable install is one): standard library only
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "main.py", "evalplus_gt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "result.json").read_text())["ok"] is True
    assert pickle.loads((tmp_path / "expected.pkl").read_bytes()) == {"base": [3], "plus": [7, [1, 2]]}
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", "import codegrpo"], cwd=tmp_path, capture_output=True)
    assert probe.returncode != 0  # the check above really ran without codegrpo
