"""The comparisons of the code-generation suites' checks, standard library only: EvalPlus's output match (with the
benchmark's special oracles and its float tolerance), LiveCodeBench's stdin/stdout line match, and the static
always-equal probe of BigCodeBench programs.

Part of the evaluation driver (:mod:`codegrpo.eval.suite_driver`): the sandbox runs one source text,
:func:`codegrpo.eval.suites.common.driver_source`, which is this file followed by the driver (its import of these
names removed), so nothing here may import from ``codegrpo``. On the host the driver imports them from here.
"""

from __future__ import annotations

import math

# --------------------------------------------------------------------------------------------------------
# EvalPlus


def _is_floats(x) -> bool:
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)) and x:
        return all(isinstance(i, float) for i in x)
    return False


def _close(out, exp, atol: float, rtol: float = 1e-7) -> bool:
    """Element-wise |out - exp| <= atol + rtol * |exp| over (nested) sequences of numbers (NaN never close)."""
    if isinstance(exp, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(exp):
            return False
        return all(_close(o, e, atol, rtol) for o, e in zip(out, exp))
    if isinstance(out, (list, tuple)):
        return False
    try:
        o, e = complex(out), complex(exp)
    except (TypeError, ValueError):
        return False
    if any(math.isnan(v) for v in (o.real, o.imag, e.real, e.imag)):
        return False
    if math.isinf(abs(e)) or math.isinf(abs(o)):
        return o == e
    return abs(o - e) <= atol + rtol * abs(e)


def _poly(xs, x):
    return sum(c * math.pow(x, i) for i, c in enumerate(xs))


def _surface_area(base_edge, height):  # MBPP+ task 581's oracle (a pyramid's surface, rounded)
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 2 * base_edge * slant)


def _digit_distance(a, b):  # MBPP+ task 558's oracle (digits aligned by zero padding)
    sa, sb = str(a), str(b)
    n = max(len(sa), len(sb))
    return sum(abs(int(x) - int(y)) for x, y in zip(sa.zfill(n), sb.zfill(n)))


def evalplus_match(task: dict, inp, out, exp) -> bool:
    ep, atol = task["entry_point"], float(task["atol"] or 0)
    exact = out == exp
    if task["dataset"] == "humaneval" and ep == "find_zero":
        return abs(_poly(*inp, out)) <= atol
    if task["dataset"] == "mbpp":
        if ep == "are_equivalent":
            exact = True
        elif ep == "sum_div":
            exact = exact or out == 0
        elif ep == "surface_Area":
            exact = exact or abs(out - _surface_area(*inp)) <= atol
        elif ep == "digit_distance_nums":
            exact = exact or out == _digit_distance(*inp)
        elif ep in task.get("set_eq_tasks", ()):
            exact = set(out) == set(exp)
        elif ep in task.get("not_none_tasks", ()):
            exact = (out == exp) if isinstance(out, bool) else (exp == (out is not None))
    if atol == 0 and _is_floats(exp):
        atol = 1e-6
    if exact:
        return True
    if atol == 0:
        return False
    if type(out) is not type(exp):
        return False
    return _close(out, exp, atol)


# --------------------------------------------------------------------------------------------------------
# LiveCodeBench


def _lines(text: str) -> list[str]:
    return [ln.strip() for ln in text.strip().split("\n")]


def _decimals(line: str):
    from decimal import Decimal, InvalidOperation

    try:
        return [Decimal(x) for x in line.split()]
    except (InvalidOperation, ValueError):
        return None


def lcb_stdio_match(got: str, want: str) -> bool:
    a, b = _lines(got), _lines(want)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x == y:
            continue
        dx, dy = _decimals(x), _decimals(y)
        if dx is None or dy is None or dx != dy:
            return False
    return True


# --------------------------------------------------------------------------------------------------------
# BigCodeBench


def always_equal_classes(src: str) -> list[str]:
    """Classes of a program whose ``__eq__`` only ever returns the constant ``True`` (or ``__ne__`` the constant
    ``False``): the always-equal trick, which the BigCodeBench tests (run in the solution's process) cannot see.
    A static check of the program as written (docs/sandbox.md: a program that builds such a class at run time
    is not caught)."""
    import ast

    try:
        tree = ast.parse(src)
    except (SyntaxError, ValueError):
        return []
    found = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for fn in cls.body:
            if not (isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name in ("__eq__", "__ne__")):
                continue
            want = fn.name == "__eq__"
            returns = [node for node in ast.walk(fn) if isinstance(node, ast.Return)]
            if returns and all(isinstance(r.value, ast.Constant) and r.value.value is want for r in returns):
                found.append(cls.name)  # every return is the constant (an early ``if self is other`` is fine)
        for st in cls.body:  # __eq__ = lambda *a: True
            if (
                isinstance(st, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id in ("__eq__", "__ne__") for t in st.targets)
                and isinstance(st.value, ast.Lambda)
                and isinstance(st.value.body, ast.Constant)
                and isinstance(st.value.body.value, bool)
            ):
                found.append(cls.name)
    return sorted(set(found))
