"""codegrpo.contracts: the program in a completion (one rule for training and evaluation), data_source keys, gcc."""

from __future__ import annotations

import ast
import os
import stat

import pytest

from codegrpo import contracts
from codegrpo.contracts import extract_code, gcc_version

SOLUTION = "def two_sum(nums, target):\n    seen = {}\n    for i, n in enumerate(nums):\n        if target - n in seen:\n            return [seen[target - n], i]\n        seen[n] = i\n    return []"

# (case id, completion as a model writes it, program extract_code must return)
CASES = [
    (
        "python block with prose around it",
        "Here is an efficient solution using a hash map:\n\n```python\n" + SOLUTION + "\n```\n\n"
        "**Explanation:** we store each number's index and look up its complement.",
        SOLUTION,
    ),
    (
        "revised answer: the last python block wins",
        "First attempt:\n```python\ndef two_sum(nums, target):\n    return []\n```\nThat misses the pairs. "
        "Corrected version:\n```python\n" + SOLUTION + "\n```",
        SOLUTION,
    ),
    (
        "python block then example output in a bare block",
        "```python\n" + SOLUTION + "\n```\n\nExample:\n```\n>>> two_sum([2, 7, 11, 15], 9)\n[0, 1]\n```",
        SOLUTION,
    ),
    (
        "python block then shell commands",
        "```python\n" + SOLUTION + "\n```\nRun the tests with:\n```bash\npytest -q test_solution.py\n```",
        SOLUTION,
    ),
    ("bare fence only: taken as the Python answer", "Sure!\n```\n" + SOLUTION + "\n```\nHope this helps.", SOLUTION),
    ("two bare blocks: the last", "```\nx = 1\n```\nor better\n```\nx = 2\n```", "x = 2"),
    (
        "tag spellings: Python, py, python3, py3, with trailing info",
        "```Python\na = 1\n```\n```py\nb = 2\n```\n```python3 title=solution.py\n" + SOLUTION + "\n```",
        SOLUTION,
    ),
    ("py3 tag", "```py3\nprint('hi')\n```", "print('hi')"),
    ("no fence at all: the whole completion is the program", "\n" + SOLUTION + "\n\n", SOLUTION),
    (
        "other languages only: no program",
        "Install it first:\n```bash\npip install numpy\n```\nthen:\n```text\ndone\n```",
        "",
    ),
    (
        "unclosed block (max response length): runs to the end",
        "Let me write it.\n```python\ndef two_sum(nums, target):\n    seen = {}\n    for i, n in enumer",
        "def two_sum(nums, target):\n    seen = {}\n    for i, n in enumer",
    ),
    (
        "closed python block, then an unclosed bare block: the python block",
        "```python\n" + SOLUTION + "\n```\nOutput:\n```\n[0, 1",
        SOLUTION,
    ),
    (
        "closing backticks glued to the last code line",
        "```python\ndef f():\n    return 1```\nThat's it.",
        "def f():\n    return 1",
    ),
    (
        "a new python fence inside an unclosed block closes it",
        "```python\ndef f():\n    return 0\n```python\n" + SOLUTION + "\n```",
        SOLUTION,
    ),
    (
        "fence indented in a numbered list: the indentation goes",
        "1. Define the function:\n\n   ```python\n   def f(x):\n       return x + 1\n   ```\n2. Done.",
        "def f(x):\n    return x + 1",
    ),
    ("windows line ends", "```python\r\ndef f():\r\n    return 1\r\n```\r\n", "def f():\n    return 1"),
    (
        "blank lines inside the fence are trimmed at both ends only",
        "```python\n\n\nimport math\n\n\ndef area(r):\n    return math.pi * r * r\n\n```",
        "import math\n\n\ndef area(r):\n    return math.pi * r * r",
    ),
    (
        "backticks inside a string literal do not close the block",
        '```python\ndef fence():\n    return "```" + "python"\n```',
        'def fence():\n    return "```" + "python"',
    ),
    ("empty python block: no program", "```python\n```", ""),
    ("empty completion", "", ""),
]


@pytest.mark.parametrize("completion, program", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_extract_code(completion, program):
    assert extract_code(completion) == program


def test_extracted_solutions_parse():
    """Every case whose answer is the full solution yields a program Python accepts (no fence residue)."""
    for _name, completion, program in CASES:
        if program == SOLUTION:
            ast.parse(extract_code(completion))


@pytest.mark.parametrize("value", [None, b"```python\nx = 1\n```", 3])
def test_non_string_is_no_program(value):
    assert extract_code(value) == ""


def test_training_and_evaluation_use_the_same_function():
    from codegrpo.eval import codegen
    from codegrpo.rewards import dhrcl

    assert dhrcl.extract_code is contracts.extract_code
    assert codegen.extract_code is contracts.extract_code


def test_data_source_keys_are_the_ones_data_prep_and_the_reward_table_use():
    from codegrpo.data import kodcode
    from codegrpo.rewards import REWARD_TABLE

    assert contracts.STAGE_DATA_SOURCE == {"skeleton": contracts.SK2D_STRUCTURE, "skin": contracts.SK2D_IDENTIFIER}
    assert kodcode.DATA_SOURCE == contracts.KODCODE
    keys = {
        contracts.SK2D_STRUCTURE,
        contracts.SK2D_STRUCTURE_SIM,
        contracts.SK2D_IDENTIFIER,
        contracts.LLM4DECOMPILE_EXE,
        contracts.KODCODE,
        contracts.TOY_TARGET_CHARS,
    }
    assert set(REWARD_TABLE) == keys
    # a legacy key is scored exactly like its canonical key
    for legacy, canonical in contracts.LEGACY_DATA_SOURCE_ALIASES.items():
        assert REWARD_TABLE[legacy] is REWARD_TABLE[canonical]


def test_config_schema_spells_the_same_keys(repo_root):
    """The schema (YAML cannot import the constants) maps legacy keys onto the stage keys of the contract."""
    import yaml

    with open(repo_root / "schemas" / "config.schema.yaml", encoding="utf-8") as fh:
        schema = yaml.safe_load(fh)
    aliases = schema["properties"]["data"]["properties"]["data_source_aliases"]
    assert set(aliases["additionalProperties"]["enum"]) == set(contracts.STAGE_DATA_SOURCE.values())
    assert aliases["default"] == contracts.LEGACY_DATA_SOURCE_ALIASES


# ----------------------------------------------------------------------------------------------- gcc_version
def test_gcc_version_is_the_first_line_of_the_compiler_banner():
    ver = gcc_version()
    assert ver.startswith("gcc") and "\n" not in ver and ver == ver.strip()


def _fake_gcc(tmp_path, body: str) -> str:
    exe = tmp_path / "fake-gcc"
    exe.write_text("#!/bin/sh\n" + body + "\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return str(exe)


def test_gcc_version_reads_the_given_compiler(tmp_path):
    fake = _fake_gcc(tmp_path, 'echo "fakecc (Test) 99.1.0"; echo "Copyright"')
    assert gcc_version(fake) == "fakecc (Test) 99.1.0"


def test_missing_compiler_is_empty_or_a_clear_error(tmp_path):
    missing = str(tmp_path / "no-such-gcc")
    assert gcc_version(missing) == ""
    with pytest.raises(FileNotFoundError, match="no-such-gcc"):
        gcc_version(missing, required=True)
    silent = _fake_gcc(tmp_path, "exit 0")
    assert gcc_version(silent) == ""
    with pytest.raises(FileNotFoundError, match="printed nothing"):
        gcc_version(silent, required=True)


def test_one_gcc_version_in_the_library():
    """The helper is defined once: data summaries, reward tests and evaluation provenance agree."""
    root = os.path.join(os.path.dirname(contracts.__file__))
    defs = []
    for dirpath, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    if "def gcc_version(" in fh.read():
                        defs.append(os.path.relpath(path, root))
    assert defs == ["contracts.py"]


# Files that run on their own inside the sandbox (standard library only, one thread): they parse for themselves.
SANDBOX_SIDE = {
    "codegrpo/eval/suite_driver.py",
    "codegrpo/eval/suite_checks.py",
    "codegrpo/sandbox/supervisor.py",
    "codegrpo/sandbox/processes.py",
    "codegrpo/sandbox/pytest_driver.py",
    "codegrpo/sandbox/rpc.py",
    "codegrpo/sandbox/rpc_rules.py",
    "codegrpo/sandbox/rpc_proxy.py",
    "codegrpo/sandbox/rpc_endpoint.py",
}


def test_host_side_parses_go_through_the_one_lock(repo_root):
    """CPython 3.11's AST constructor counts its recursion per interpreter: concurrent ``ast.parse`` calls in threads
    (the sandbox pool, the evaluation pools) can fail with "AST constructor recursion depth mismatch" (seen once in
    a DHRCL run's reward). Every host-side parse therefore goes through ``contracts.parse_python``."""
    direct = []
    for path in sorted((repo_root / "codegrpo").rglob("*.py")):
        rel = path.relative_to(repo_root).as_posix()
        if rel in SANDBOX_SIDE or rel == "codegrpo/contracts.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            f = getattr(node, "func", None)
            if (
                isinstance(node, ast.Call)
                and isinstance(f, ast.Attribute)
                and f.attr == "parse"
                and isinstance(f.value, ast.Name)
                and f.value.id == "ast"
            ):
                direct.append(f"{rel}:{node.lineno}")
    assert direct == [], f"ast.parse outside contracts.parse_python: {direct}"
    tree = contracts.parse_python("def f(x):\n    return x + 1\n")
    assert ast.dump(tree) == ast.dump(ast.parse("def f(x):\n    return x + 1\n"))
    assert not contracts._AST_LOCK.locked()
