"""Source → IR obfuscation for SK²Decompile data generation (spec sk2decompile.md §4, §7).

The reference's obfuscation script is missing upstream; this is a reconstruction of its conventions, as
seen in the shipped ``norm2code`` / ``pseudo2norm`` pairs: user-defined functions, types, variables and
fields become ``funcN`` / ``typeN`` / ``varN`` / ``fieldN`` (one counter per kind, numbered from 1 in order
of first appearance in the text); names the decompiler's pseudo-code still shows (library calls, external
symbols, a function name kept in the binary's symbols) stay; so do the standard C library names of the
reference's ``Preprocess/standard_c.txt`` (shipped verbatim as ``codegrpo/data/resources/standard_c.txt``,
provenance beside it) used as functions or variables (a struct member named ``time`` is a field like any other)
and the language-environment names of ``ALWAYS_KEEP``; literals, keywords, labels and the
C built-in types stay. A word inside a string or character literal of the pseudo-code (``"size %d"``) does not
make a name visible.

Identifiers are found and classified with the same tree-sitter-c rules as the skin reward
(:func:`codegrpo.rewards.sk2d.identifier_kind`): ``type_identifier`` → type, ``field_identifier`` → field, an
``identifier`` that is a function declarator's name or a call's callee → func, any other ``identifier`` →
var. Functions and variables share C's ordinary namespace, so a name keeps the kind of its first
appearance (a function pointer variable that is later called stays ``varN``).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from codegrpo.rewards.c_syntax import c_parser
from codegrpo.rewards.sk2d import identifier_kind

PLACEHOLDER = re.compile(r"^(func|type|var|field)\d+$")
_WORD = re.compile(r"[A-Za-z_]\w*")

# Names that are part of the language environment rather than of the program: kept even when the
# pseudo-code does not show them (tree-sitter already parses NULL/true/false/TRUE/FALSE as literals and
# the fixed-width integer types as primitive types).
ALWAYS_KEEP = frozenset(
    {
        "main",
        "stdin",
        "stdout",
        "stderr",
        "errno",
        "EOF",
        "FILE",
        "va_list",
        "va_start",
        "va_end",
        "va_arg",
        "sizeof",
        "offsetof",
        "assert",
        "__func__",
        "__FUNCTION__",
        "__LINE__",
        "__FILE__",
    }
)


STANDARD_C_FILE = Path(__file__).with_name("resources") / "standard_c.txt"
# string and character literals (escapes included); their words are text, not names the decompiler shows
_LITERAL = re.compile(r"\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'")


@functools.lru_cache(maxsize=1)
def standard_c_names() -> frozenset[str]:
    """The reference's standard C names (comma-separated in the shipped data file), kept by :func:`obfuscate`."""
    text = STANDARD_C_FILE.read_text(encoding="utf-8")
    names = frozenset(w.strip() for w in text.split(",") if w.strip())
    bad = sorted(n for n in names if not _WORD.fullmatch(n))
    if bad:
        raise ValueError(f"{STANDARD_C_FILE}: not C identifiers: {bad[:5]}")
    return names


def visible_names(pseudo: str) -> set[str]:
    """The names the decompiler still shows: every word of the pseudo-code outside its string and character
    literals."""
    return set(_WORD.findall(_LITERAL.sub(" ", pseudo or "")))


def obfuscate(source: str, keep: set[str] | frozenset[str] = frozenset()) -> tuple[str, dict[str, str]]:
    """``(ir, mapping)``: ``source`` with user-defined names replaced; ``mapping`` original → placeholder.

    ``keep``: names that stay (usually :func:`visible_names` of the pseudo-code).
    """
    standard = standard_c_names()
    data = source.encode("utf8")
    tree = c_parser().parse(data)
    nodes = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        kind = identifier_kind(node)
        if kind is not None:
            nodes.append((node.start_byte, node.end_byte, kind, node.text.decode("utf8")))
        stack.extend(node.children)
    nodes.sort()
    counters = {"func": 0, "type": 0, "var": 0, "field": 0}
    mapping: dict[tuple[str, str], str] = {}
    edits = []
    for start, end, kind, name in nodes:
        # a standard C name stays as a function or variable, not as a struct member (`level.time`: the
        # reference IR of norm2code-examples line 7 has `var4.field4`)
        if (
            name in keep
            or name in ALWAYS_KEEP
            or PLACEHOLDER.match(name)
            or (name in standard and kind in ("func", "var"))
        ):
            continue
        space = "ordinary" if kind in ("func", "var") else kind
        key = (space, name)
        if key not in mapping:
            counters[kind] += 1
            mapping[key] = f"{kind}{counters[kind]}"
        edits.append((start, end, mapping[key]))
    out = bytearray()
    pos = 0
    for start, end, repl in edits:
        out += data[pos:start] + repl.encode("utf8")
        pos = end
    out += data[pos:]
    return out.decode("utf8"), {name: ph for (_, name), ph in mapping.items()}


def ir_kept_names(ir: str) -> set[str]:
    """Names of an IR that are not placeholders (what the pseudo-code showed, for the agreement measure)."""
    return {w for w in _WORD.findall(ir) if not PLACEHOLDER.match(w)}


_TOKEN = re.compile(r"[A-Za-z_]\w*|\d\w*|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|\S")


def tokens(code: str) -> list[str]:
    """C tokens (identifiers, numbers, string / char literals, punctuation), whitespace ignored."""
    return _TOKEN.findall(code)


def agreement(ir: str, reference: str) -> dict:
    """How close an IR is to the reference IR of the same function: token-sequence similarity (difflib ratio),
    exact token match, and whether the placeholder sequences (funcN/typeN/varN/fieldN in text order) agree."""
    import difflib

    a, b = tokens(ir), tokens(reference)
    ph_a = [t for t in a if PLACEHOLDER.match(t)]
    ph_b = [t for t in b if PLACEHOLDER.match(t)]
    return {
        "token_ratio": difflib.SequenceMatcher(None, a, b, autojunk=False).ratio(),
        "exact": a == b,
        "placeholders_equal": ph_a == ph_b,
        "placeholder_ratio": difflib.SequenceMatcher(None, ph_a, ph_b, autojunk=False).ratio(),
    }


def measure_norm2code(path, lines=None) -> dict:
    """Agreement over a file of shipped ``norm2code`` pairs (input = wrapped reference IR, output = source).
    The names the reference IR kept stand for what the pseudo-code showed. ``roundtrip``: how many of the
    reference IRs this module reproduces from their own de-obfuscated text (:func:`roundtrip`), i.e. whether
    the placeholder conventions agree independently of how far the shipped source differs from the IR's.
    ``lines``: only these 1-based line numbers of the file (e.g. the pairs whose source is the IR's source)."""
    import json

    from codegrpo.data.ingest import unwrap_prompt

    per = []
    rt = 0
    with open(path, encoding="utf-8") as fh:
        for lineno, ln in enumerate(fh, 1):
            if not ln.strip() or (lines is not None and lineno not in lines):
                continue
            r = json.loads(ln)
            ref = unwrap_prompt("normalized", r["input"])
            ir, _ = obfuscate(r["output"], ir_kept_names(ref))
            per.append(agreement(ir, ref))
            rt += roundtrip(ref)
    n = len(per)
    return {
        "pairs": n,
        "roundtrip": rt,
        "exact": sum(p["exact"] for p in per),
        "placeholders_equal": sum(p["placeholders_equal"] for p in per),
        "mean_token_ratio": round(sum(p["token_ratio"] for p in per) / n, 4) if n else None,
        "mean_placeholder_ratio": round(sum(p["placeholder_ratio"] for p in per) / n, 4) if n else None,
    }


_PH_ANY = re.compile(r"\b(func|type|var|field)(\d+)\b")


def deobfuscate(ir: str) -> str:
    """A source whose only difference from ``ir`` is its names: every placeholder ``kindN`` becomes ``q<k>N_``
    (names that are not placeholders and that no IR uses)."""
    return _PH_ANY.sub(lambda m: f"q{m.group(1)[0]}{m.group(2)}_", ir)


def roundtrip(ir: str) -> bool:
    """Do this module's placeholder conventions reproduce a reference IR? ``ir``'s placeholders are renamed
    back to ordinary names (:func:`deobfuscate`) and the result obfuscated again, keeping the names the IR kept;
    True when that gives ``ir`` back exactly (same kinds, same numbering by first appearance, same names kept)."""
    return obfuscate(deobfuscate(ir), ir_kept_names(ir))[0] == ir


def main(argv: list[str] | None = None) -> int:
    """``python -m codegrpo.data.obfuscate NORM2CODE.jsonl``: print :func:`measure_norm2code` as JSON."""
    import argparse
    import json

    ap = argparse.ArgumentParser(description="IR agreement of the obfuscator with shipped norm2code pairs")
    ap.add_argument("path", help="JSONL with input = wrapped reference IR, output = source")
    ap.add_argument("--lines", help="comma-separated 1-based line numbers to measure (default: all)")
    args = ap.parse_args(argv)
    lines = {int(x) for x in args.lines.split(",")} if args.lines else None
    print(json.dumps(measure_norm2code(args.path, lines), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
