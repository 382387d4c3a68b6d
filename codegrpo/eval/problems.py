"""The problem and result types of the code-generation evaluation (codegrpo.eval.codegen, codegrpo.eval.suites)
and the helpers both sides use."""

from __future__ import annotations

from codegrpo.contracts import parse_python
import re
from dataclasses import dataclass, field


@dataclass
class SampleResult:
    problem_id: str
    sample: int
    syntax_ok: bool
    exec_ok: bool
    passed: bool
    n_pass: int = 0
    n_test: int = 0
    detail: str = ""
    passed_base: bool | None = None  # EvalPlus suites: the base tests alone (``passed`` is base and plus)
    missing_libs: list | None = None  # BigCodeBench: libraries the job environment lacks (the task failed)
    hack: str | None = None  # the harness guard that fired (then passed=False); docs/sandbox.md


@dataclass
class Problem:
    problem_id: str
    prompt: str  # the text given to the model
    tests: str  # pytest code (KodCode) or the HumanEval check code
    entry_point: str | None = None
    reference: str = ""  # a reference / canonical solution (sanity rows)
    prefix: str = ""  # HumanEval: the function header prompt (prepended when the program lacks the function)
    extra: dict = field(default_factory=dict)


def parses(code: str) -> bool:
    try:
        parse_python(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def humaneval_prompt(problem_prompt: str, entry_point: str) -> str:
    """A HumanEval problem in the KodCode training prompt format (codegrpo.data.kodcode.build_prompt).

    The model is trained on KodCode prompts; HumanEval's function header and docstring become the question,
    and the completion's last ```python block is the program.
    """
    from codegrpo.data.kodcode import build_prompt

    question = "Implement the following Python function.\n\n```python\n" + problem_prompt.rstrip() + "\n```"
    return build_prompt(question, None, [entry_point], tests_import=False)


def humaneval_program(problem: Problem, code: str) -> str:
    """The program under test: the code (with the prompt's header when it does not define the entry point)."""
    defines = re.search(rf"^\s*def\s+{re.escape(problem.entry_point or '')}\s*\(", code, re.M) is not None
    if not defines:
        return problem.prefix + code
    # keep the prompt's imports (typing names, math, ...) that the model may not repeat
    imports = [ln for ln in problem.prefix.splitlines() if ln.startswith(("import ", "from "))]
    return "\n".join(imports) + "\n" + code
