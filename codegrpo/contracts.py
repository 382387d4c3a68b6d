"""Contracts shared by data preparation, the rewards and evaluation (docs/architecture.md).

Three things several stages must agree on, defined once here:

* the ``data_source`` keys of verl RL rows: data preparation writes them, the reward table
  (:mod:`codegrpo.rewards`) routes on them, evaluation scores with them;
* :func:`extract_code`: the program in a model completion; the DHRCL reward (training) and pass@k evaluation
  must read the same program out of the same text, or evaluation measures something training did not reward;
* :func:`gcc_version`: the compiler version recorded in data summaries, reward tests and evaluation provenance.

This module imports only the standard library (verl's reward process and the data stage both import it).
"""

from __future__ import annotations

import ast
import re
import subprocess
import threading

__all__ = [
    "SK2D_STRUCTURE",
    "SK2D_STRUCTURE_SIM",
    "SK2D_IDENTIFIER",
    "LLM4DECOMPILE_EXE",
    "KODCODE",
    "TOY_TARGET_CHARS",
    "STAGE_DATA_SOURCE",
    "LEGACY_DATA_SOURCE_ALIASES",
    "RL_STAGES",
    "PYTHON_FENCE_TAGS",
    "chat_template_kwargs",
    "extract_code",
    "with_template_kwargs",
    "gcc_version",
]

# ----------------------------------------------------------------------------------------------------------
# data_source keys
# ----------------------------------------------------------------------------------------------------------
#: skeleton phase (pseudo-code -> IR): compile + placeholder Jaccard (SK²Decompile's exe_type)
SK2D_STRUCTURE = "sk2decompile_structure"
#: the skeleton phase scored with sim_exe (compile + token Jaccard), chosen by ``skeleton_rl.structure_reward``
SK2D_STRUCTURE_SIM = "sk2decompile_structure_sim"
#: skin phase (IR -> named source): identifier-summary embedding similarity
SK2D_IDENTIFIER = "sk2decompile_identifier"
#: the data_source of the shipped SK²Decompile RL examples (LLM4Decompile's name); scored as SK2D_STRUCTURE
LLM4DECOMPILE_EXE = "llm4decompile_exe"
#: DHRCL code generation on KodCode
KODCODE = "kodcode"
#: the toy reward of the learning checks (docs/learning.md)
TOY_TARGET_CHARS = "toy_target_chars"
#: what the KODCODE (DHRCL) reward reports per sample beside its score (codegrpo.rewards.dhrcl)
DHRCL_RESULT_KEYS = (
    "r_syntax",
    "r_exec",
    "r_pass",
    "r_ast",
    "a_syntax",
    "a_exec",
    "a_pass",
    "stage",
    "all_passed",
    "timed_out",
    "hack_detected",
    "hack_guard",
    "rm_score",
    "r_dense",
)

#: the data_source data preparation writes for each SK²Decompile stage
STAGE_DATA_SOURCE = {"skeleton": SK2D_STRUCTURE, "skin": SK2D_IDENTIFIER}
#: legacy keys accepted in input data and mapped to a canonical key (config ``data.data_source_aliases`` default)
LEGACY_DATA_SOURCE_ALIASES = {LLM4DECOMPILE_EXE: SK2D_STRUCTURE}
#: the SK2Decompile RL stages (config sections and run names)
RL_STAGES = ("skeleton_rl", "skin_rl")


# ----------------------------------------------------------------------------------------------------------
# extract_code
# ----------------------------------------------------------------------------------------------------------
#: info strings (first word, case-insensitive) that mark a fenced block as Python
PYTHON_FENCE_TAGS = frozenset({"python", "python3", "py", "py3"})
_FENCE = re.compile(r"^[ \t]*```")


def chat_template_kwargs(cfg) -> dict:
    """Keyword arguments of every chat-template call of the DHRCL runs, in training and in evaluation alike:
    ``{"enable_thinking": ...}`` from ``dhrcl.enable_thinking`` (Qwen3's thinking switch), {} when unset."""
    value = (cfg.get("dhrcl") or {}).get("enable_thinking")
    return {} if value is None else {"enable_thinking": bool(value)}


def with_template_kwargs(tokenizer, kwargs: dict):
    """``tokenizer`` whose ``apply_chat_template`` passes ``kwargs`` (explicit arguments of a call win)."""
    if kwargs:
        original = tokenizer.apply_chat_template

        def apply_chat_template(*args, **kw):
            return original(*args, **{**kwargs, **kw})

        tokenizer.apply_chat_template = apply_chat_template
    return tokenizer


def _trim_blank_lines(lines: list[str]) -> str:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[start:end])


def _dedent(line: str, indent: str) -> str:
    return line[len(indent) :] if line.startswith(indent) else line.lstrip(" \t")


def extract_code(completion: str) -> str:
    """The Python program in a model completion (used by the DHRCL reward and by pass@k evaluation).

    The completion is read line by line:

    * A **fence** is a line whose first non-blank characters are three backticks. Outside a block it opens one;
      its info string (the first word after the backticks, case-insensitive) is the block's language:
      ``python``, ``python3``, ``py`` or ``py3`` make a *Python block*, nothing makes a *bare block*, anything
      else (``bash``, ``text``, ``output``, ``c`` ...) a block of another language.
    * Inside a block, a line made of three backticks closes it; a code line that ends in three backticks closes
      it too (the part before the backticks is code); a fence with an info string closes an unclosed block and
      opens the next one. A block still open at the end of the text (the model ran out of tokens) runs to the
      end.
    * The lines of a block lose the indentation of its opening fence (fences indented in a list item).

    The program is, in this order of preference:

    1. the **last Python block** (models revise: "here is the corrected version"; a later bare block is usually
       example output);
    2. else the **last bare block** (the prompt asks for Python, a bare fence holds the answer);
    3. else, if the completion has **no fence at all**, the whole completion (a model that answers with code
       only);
    4. else ``""``: the completion fenced only other languages, so it holds no Python program.

    Blank lines at the start and end of the result are removed; line ends become ``\\n``. A completion that is
    not a string (None, bytes: never produced by verl's decoding) is no program: ``""``.
    """
    if not isinstance(completion, str):
        return ""
    blocks: list[tuple[str, list[str]]] = []  # (language tag, lines)
    cur: tuple[str, list[str]] | None = None
    indent = ""
    saw_fence = False
    for line in completion.splitlines():
        if _FENCE.match(line):
            saw_fence = True
            info = line.strip()[3:].strip().strip("`").strip()
            if cur is not None:
                blocks.append(cur)
                cur = None
                if not info:  # a closing fence
                    continue
            tag = info.split()[0].lower() if info else ""
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            cur = (tag, [])
            continue
        if cur is None:
            continue
        stripped = line.rstrip()
        if stripped.endswith("```"):
            cur[1].append(_dedent(stripped[:-3], indent))
            blocks.append(cur)
            cur = None
            continue
        cur[1].append(_dedent(line, indent))
    if cur is not None:
        blocks.append(cur)
    for wanted in (lambda t: t in PYTHON_FENCE_TAGS, lambda t: t == ""):
        chosen = [lines for tag, lines in blocks if wanted(tag)]
        if chosen:
            return _trim_blank_lines(chosen[-1])
    if saw_fence:
        return ""
    return _trim_blank_lines(completion.splitlines())


# ----------------------------------------------------------------------------------------------------------
# gcc_version
# ----------------------------------------------------------------------------------------------------------
def gcc_version(gcc: str = "gcc", *, required: bool = False) -> str:
    """First line of ``<gcc> --version``, e.g. ``gcc (Debian 12.2.0-14+deb12u1) 12.2.0``.

    A compiler that cannot be run (not installed, not executable, hangs for 30 s) or prints nothing gives ``""``,
    or with ``required=True`` raises :class:`FileNotFoundError` naming the command.
    """
    try:
        out = subprocess.run([gcc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        if required:
            raise FileNotFoundError(f"gcc not runnable ({gcc!r}): {exc}") from None
        return ""
    first = out.splitlines()[0].strip() if out and out.strip() else ""
    if required and not first:
        raise FileNotFoundError(f"gcc not runnable ({gcc!r}): '{gcc} --version' printed nothing")
    return first


# CPython 3.11 keeps the AST constructor's recursion counter per interpreter, not per thread: two threads in
# ast.parse / compile at once (the sandbox's run_tests_many, the evaluation's thread pools) can make one of them
# fail with "SystemError: AST constructor recursion depth mismatch". Every host-side parse goes through this lock.
_AST_LOCK = threading.Lock()


def parse_python(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source)``, one thread at a time in this process (see above)."""
    with _AST_LOCK:
        return ast.parse(source, filename)
