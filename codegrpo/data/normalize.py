"""SK2Decompile pseudo-code normalisation (spec sk2decompile.md section 4.2 step 1).

Steps, in this order: remove ``/*...*/`` (non-greedy, across lines) and ``//...`` to end of line (naive, not
string-aware); hex literals (with an optional u/U/l/L suffix of 1-3 characters) to decimal, suffix kept;
delete the calling-convention keywords; replace IDA/glibc typedef names by plain C types (whole words, in
the order of :data:`TYPEDEF_MAP`); ``clang-format --style=Google``; drop blank lines. A result is kept only
when the number of lines after the first ``{`` whose stripped length is at least 3 is strictly between
``min_lines`` (3) and ``max_lines`` (300). A clang-format failure or timeout drops the record.

The style is a parameter: the reference calls ``--style=Google``, but from clang-format 20 the Google preset no
longer derives the pointer alignment from the input (``DerivePointerAlignment: false``), so ``char *p`` becomes
``char* p``. The project's default, ``{BasedOnStyle: Google, DerivePointerAlignment: true}``, restores the
behaviour of the formatter that produced the shipped data (99 of the 100 shipped RL prompts are unchanged by a
second normalisation, against 11 with the plain preset; see tests/data/test_normalize.py).

The reference uses a 0.5 s clang-format timeout; ``clang_format_timeout`` is a config key because a loaded
machine can exceed 0.5 s for a formatter start-up, which would drop good records.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tqdm import tqdm

log = logging.getLogger(__name__)

_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
_LINE_COMMENT = re.compile(r"//.*?$", re.MULTILINE)
_HEX = re.compile(r"\b(0x[0-9a-fA-F]+)([uUlL]{1,3})?\b")
_KEYWORDS = re.compile(r"\b__fastcall\b|\b__cdecl\b|\b__ptr32\b|\b__noreturn\s+noreturn\b")

# IDA / glibc typedef names and their replacement, applied one after another in this order.
TYPEDEF_MAP: dict[str, str] = {
    "cpu_set_t": "int",
    "nl_item": "int",
    "__time_t": "int",
    "__mode_t": "unsigned short",
    "__off64_t": "long long",
    "__blksize_t": "long",
    "__ino_t": "unsigned long",
    "__blkcnt_t": "unsigned long long",
    "__syscall_slong_t": "long",
    "__ssize_t": "long int",
    "wchar_t": "unsigned short int",
    "wctype_t": "unsigned short int",
    "__int64": "long long",
    "__int32": "int",
    "__int16": "short",
    "__int8": "char",
    "_QWORD": "uint64_t",
    "_OWORD": "long double",
    "_DWORD": "uint32_t",
    "size_t": "unsigned int",
    "_BYTE": "uint8_t",
    "_TBYTE": "uint16_t",
    "_BOOL8": "uint8_t",
    "gcc_va_list": "va_list",
    "_WORD": "unsigned short",
    "_BOOL4": "int",
    "__va_list_tag": "va_list",
    "_IO_FILE": "FILE",
    "DIR": "int",
    "__fsword_t": "long",
    "__kernel_ulong_t": "int",
    "cc_t": "int",
    "speed_t": "int",
    "fd_set": "int",
    "__suseconds_t": "int",
    "_UNKNOWN": "void",
    "__sighandler_t": "void (*)(int)",
    "__compar_fn_t": "int (*)(const void *, const void *)",
}
_TYPEDEF_PATTERNS = [(re.compile(r"\b" + re.escape(k) + r"\b"), v) for k, v in TYPEDEF_MAP.items()]


class ClangFormatError(RuntimeError):
    pass


def find_clang_format(configured: str | None = None) -> str:
    """The clang-format executable: the configured path, the one next to this Python (the venv's PyPI
    wheel), or the first on PATH."""
    if configured:
        path = shutil.which(configured)
        if path is None:
            raise ClangFormatError(f"clang-format not found at configured path {configured!r}")
        return path
    beside = Path(sys.executable).parent / "clang-format"
    if beside.is_file():
        return str(beside)
    path = shutil.which("clang-format")
    if path is None:
        raise ClangFormatError("clang-format not found next to the Python interpreter nor on PATH")
    return path


def clang_format_version(exe: str) -> str:
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.strip()


def remove_comments(code: str) -> str:
    return _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", code))


def hex_to_decimal(code: str) -> str:
    return _HEX.sub(lambda m: str(int(m.group(1), 16)) + (m.group(2) or ""), code)


def remove_keywords(code: str) -> str:
    return _KEYWORDS.sub("", code)


def replace_typedefs(code: str) -> str:
    for pattern, plain in _TYPEDEF_PATTERNS:
        code = pattern.sub(plain, code)
    return code


def pre_format(code: str) -> str:
    """The text rewrites before clang-format."""
    return replace_typedefs(remove_keywords(hex_to_decimal(remove_comments(code))))


def drop_blank_lines(code: str) -> str:
    return "\n".join(line for line in code.splitlines() if line.strip())


def body_line_count(code: str) -> int | None:
    """Lines after the first ``{`` whose stripped length is >= 3; None when there is no ``{``."""
    pos = code.find("{")
    if pos < 0:
        return None
    return sum(1 for line in code[pos + 1 :].split("\n") if len(line.strip()) >= 3)


def clang_format(code: str, exe: str, timeout: float, style: str = "Google") -> str:
    """Format ``code`` read from stdin (as the reference does); raise ClangFormatError on failure/timeout."""
    try:
        proc = subprocess.run([exe, f"--style={style}"], input=code, text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ClangFormatError(f"clang-format timed out after {timeout} s") from None
    if proc.returncode != 0:
        raise ClangFormatError(f"clang-format exit {proc.returncode}: {proc.stderr.strip()[:200]}")
    return proc.stdout


def normalize_pseudo(
    code: str, *, exe: str, timeout: float, min_lines: int = 3, max_lines: int = 300, style: str = "Google"
) -> tuple[str | None, str | None]:
    """Normalise one function: ``(normalised, None)`` or ``(None, reason it was dropped)``."""
    text = pre_format(code)
    if not text.strip():
        return None, "empty after comment/keyword removal"
    try:
        formatted = clang_format(text, exe, timeout, style)
    except ClangFormatError as exc:
        return None, str(exc)
    norm = drop_blank_lines(formatted)
    n = body_line_count(norm)
    if n is None:
        return None, "no '{' (no function body)"
    if not (min_lines < n < max_lines):
        return None, f"{n} body lines, outside ({min_lines}, {max_lines})"
    return norm, None


def normalize_records(
    records: list[dict],
    *,
    enabled: bool,
    clang_format_path: str | None = None,
    timeout: float = 5.0,
    min_lines: int = 3,
    max_lines: int = 300,
    style: str = "Google",
) -> tuple[list[dict], list[dict], dict]:
    """Normalise the ``input`` of each record (skeleton pseudo-code) when ``enabled``.

    Returns ``(kept, dropped, summary)``; each dropped entry names the record id, its source line and the
    reason. With ``enabled`` false the records pass through unchanged (inputs already normalised, e.g. the
    verl-shaped RL file, or IR inputs of the skin stage).
    """
    kept: list[dict] = []
    dropped: list[dict] = []
    summary: dict = {"normalize": bool(enabled), "records_in": len(records)}
    if not enabled:
        for rec in records:
            kept.append(dict(rec, input_raw=None))
        summary.update({"kept": len(kept), "dropped": 0, "dropped_by_reason": {}})
        return kept, dropped, summary
    exe = find_clang_format(clang_format_path)
    summary["clang_format"] = clang_format_version(exe)
    summary["clang_format_timeout_s"] = timeout
    summary["clang_format_style"] = style
    t0 = time.monotonic()
    for rec in tqdm(records, desc="normalize", unit="rec", mininterval=2.0, disable=None):
        norm, reason = normalize_pseudo(
            rec["input"], exe=exe, timeout=timeout, min_lines=min_lines, max_lines=max_lines, style=style
        )
        if norm is None:
            dropped.append(
                {
                    "id": rec["id"],
                    "source_file": rec["source_file"],
                    "source_line": rec["source_line"],
                    "reason": reason,
                }
            )
            continue
        kept.append(dict(rec, input=norm, input_raw=rec["input"]))
    by_reason: dict[str, int] = {}
    for d in dropped:
        key = d["reason"].split(":")[0] if "clang-format" in d["reason"] else _reason_kind(d["reason"])
        by_reason[key] = by_reason.get(key, 0) + 1
    elapsed = time.monotonic() - t0
    summary.update(
        {"kept": len(kept), "dropped": len(dropped), "dropped_by_reason": by_reason, "seconds": round(elapsed, 3)}
    )
    log.info(
        "normalize: %d in, %d kept, %d dropped (%.1f rec/s)",
        len(records),
        len(kept),
        len(dropped),
        len(records) / elapsed if elapsed > 0 else 0.0,
    )
    return kept, dropped, summary


def _reason_kind(reason: str) -> str:
    if "body lines" in reason:
        return "line count"
    return reason
