"""BigCodeBench's test file as the candidate's process sees it: every test renamed, a canary hidden among them
(docs/sandbox.md, *Evaluation harnesses*; issue 22).

BigCodeBench's tests run in the candidate's process (they need its objects), so the candidate can read them. To
make a selectively patched ``unittest`` (pass the real tests, fail the canary) need more than a name or a fixed
body to recognise:

* every ``test*`` method of ``TestCases`` gets a random name (``test_<16 hex>``; every NAME token of the file
  with that spelling, so ``self.test_x()`` still works); the runner keeps the map and reports the original names;
* :data:`CANARIES` canaries, each a *clone of a real test* (chosen at random, its decorators kept, so
  ``mock.patch`` arguments still arrive) whose body is wrapped in ``try: ... finally: <a failing assertion>`` (one
  of several forms, random values), placed at a random position among the methods, with a random name like the
  others. Each fails whatever the program does: a ``unittest`` patched to pass everything passes them, and they
  cannot be told from the others by name, position, or a fixed body such as ``assertEqual(0, 1)``. A program that
  fails k tests blindly (hoping they are the canaries) succeeds with probability 1 / C(n + 2, 2) for n real tests.

What remains (docs/sandbox.md, *What is not guaranteed*): a clone is still a near-duplicate of another method
with a ``try``/``finally`` around it (re-printed by ``ast.unparse``, so its quoting may differ), which a program
that compares the test methods' code can find.
"""

from __future__ import annotations

from codegrpo.contracts import parse_python
import ast
import copy
import io
import random
import secrets
import tokenize


def _new_name(taken: set[str]) -> str:
    while True:
        name = "test_" + secrets.token_hex(8)
        if name not in taken:
            taken.add(name)
            return name


def _test_class(tree: ast.Module) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TestCases":
            return node
    return None


def _tests(cls: ast.ClassDef) -> list:
    return [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test")]


def rename_tests(test_code: str) -> tuple[str, dict[str, str]]:
    """``test_code`` with every ``test*`` method of ``TestCases`` (every NAME token spelled like one) renamed to
    a random ``test_<hex>``; returns the new text and the map new name -> original name. Unchanged ({} map) when
    the file does not parse or has no such class."""
    try:
        tree = parse_python(test_code)
        toks = list(tokenize.generate_tokens(io.StringIO(test_code).readline))
    except (SyntaxError, ValueError, tokenize.TokenError):
        return test_code, {}
    cls = _test_class(tree)
    if cls is None:
        return test_code, {}
    taken = {t.string for t in toks if t.type == tokenize.NAME}
    old_to_new = {f.name: _new_name(taken) for f in _tests(cls)}
    lines = test_code.splitlines(keepends=True)
    edits: dict[int, list] = {}
    for t in toks:
        if t.type == tokenize.NAME and t.string in old_to_new:
            edits.setdefault(t.start[0], []).append((t.start[1], t.end[1], old_to_new[t.string]))
    for row, spans in edits.items():
        line = lines[row - 1]
        for start, end, new in sorted(spans, reverse=True):
            line = line[:start] + new + line[end:]
        lines[row - 1] = line
    return "".join(lines), {new: old for old, new in old_to_new.items()}


def _failing_assertion(rng: random.Random) -> ast.stmt:
    """One of a few ordinary-looking assertions that always fail, with random values."""
    a = rng.randint(2, 10**6)
    word = secrets.token_hex(rng.randint(2, 6))
    forms = [
        f"self.assertEqual(len({word!r}), {len(word) + rng.randint(1, 9)})",
        f"self.assertIn({a}, [{a + 1}, {a + rng.randint(2, 50)}])",
        f"self.assertTrue({a} < {a - rng.randint(1, 1000)})",
        f"self.assertEqual(sorted([{a}, {a + 7}]), [{a + 7}, {a}])",
        f"self.assertIsNone({word!r})",
    ]
    return parse_python(rng.choice(forms)).body[0]


def add_canary(
    test_code: str, name: str, rng: random.Random | None = None, clone_from: set[str] | None = None
) -> str | None:
    """``test_code`` with a canary method ``name`` in ``TestCases``: a clone of a random real test (one of
    ``clone_from`` when given) whose body is wrapped in ``try``/``finally`` with a failing assertion, inserted
    before a random method (or after the last). None when the file does not allow it (no class, no test to clone,
    or the result does not parse)."""
    rng = rng or random.Random(secrets.randbits(64))
    try:
        tree = parse_python(test_code)
    except (SyntaxError, ValueError):
        return None
    cls = _test_class(tree)
    if cls is None or not _tests(cls):
        return None
    real = [f for f in _tests(cls) if clone_from is None or f.name in clone_from]
    if not real:
        return None
    twin = copy.deepcopy(rng.choice(real))
    twin.name = name
    # a skipped or expected-to-fail clone would not be reported as failed: drop those decorators (it fails anyway)
    twin.decorator_list = [
        dec for dec in twin.decorator_list if not any(w in ast.unparse(dec) for w in ("skip", "expectedFailure"))
    ]
    twin.body = [ast.Try(body=twin.body, handlers=[], orelse=[], finalbody=[_failing_assertion(rng)])]
    methods = [f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    at = rng.randrange(len(methods) + 1)
    lines = test_code.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    if at < len(methods):
        m = methods[at]
        row = min([m.lineno] + [d.lineno for d in m.decorator_list]) - 1
        indent = " " * m.col_offset
    else:
        row = cls.end_lineno
        indent = " " * methods[-1].col_offset
    text = "".join(indent + ln + "\n" if ln.strip() else "\n" for ln in ast.unparse(twin).splitlines())
    out = "".join(lines[:row]) + ("\n" if at == len(methods) else "") + text + "\n" + "".join(lines[row:])
    try:
        new_cls = _test_class(parse_python(out))
    except (SyntaxError, ValueError):
        return None
    if new_cls is None or name not in {f.name for f in _tests(new_cls)}:
        return None
    return out


CANARIES = 2  # a program that fails k tests blindly fools them with probability 1 / C(n + k, k), n real tests


def disguise(test_code: str, fallback_canary, k: int = CANARIES) -> tuple[str, dict[str, str], list[str]]:
    """The candidate's copy of a BigCodeBench test file: (text, map random name -> original test name, canary
    names). ``fallback_canary(name)`` gives the text to append for a canary that cannot be a clone (no
    ``TestCases`` tests to clone)."""
    text, names = rename_tests(test_code)
    taken = set(names) | set(names.values())
    canaries = [_new_name(taken) for _ in range(k)]
    for canary in canaries:
        cloned = add_canary(text, canary, clone_from=set(names))
        text = cloned if cloned is not None else text + fallback_canary(canary)
    return text, names, canaries
