"""What may cross the sandbox's solution boundary, and what the solution may do (standard library only).

Part of :mod:`codegrpo.sandbox.rpc` (its docstring describes the protocol): the protocol's errors
(:class:`ProtocolError`, :class:`SolutionDied`), its size limits, the exceptions and standard-library modules that
may cross by name, the checks the runner's decoder applies to the peer's JSON (:func:`expect_str`,
:func:`expect_list`, :func:`expect_pair`), and the operators forwarded to an object of the other side
(:data:`ALL_DUNDERS`, :func:`apply_dunder`, :func:`check_peer_op`).

Runs inside the sandbox: loaded by file path there (:mod:`codegrpo.sandbox.rpc` loads it), so it imports nothing
of the package.
"""

from __future__ import annotations

import builtins

MAX_MESSAGE = 256 << 20  # bytes of one message the runner accepts
MAX_OUTPUT = 1 << 20  # characters of captured output per reply

# Exceptions that may come back from the solution (builtin, subclasses of Exception, none of pytest's).
ALLOWED_EXCEPTIONS = {
    name: obj
    for name, obj in vars(builtins).items()
    if isinstance(obj, type)
    and issubclass(obj, Exception)
    and not issubclass(obj, (StopAsyncIteration,))
    and not name.startswith("_")
}

# Standard-library modules whose functions and classes the runner uses itself when the solution exports them
# (``from collections import Counter`` in the solution, ``Counter(...)`` in the test): pure computation only.
STD_MODULES = frozenset(
    {
        "math",
        "cmath",
        "collections",
        "itertools",
        "functools",
        "heapq",
        "bisect",
        "string",
        "re",
        "datetime",
        "decimal",
        "fractions",
        "typing",
        "operator",
        "statistics",
        "copy",
        "numbers",
        "array",
        "json",
        "random",
        "enum",
        "dataclasses",
        "abc",
        "queue",
        "collections.abc",
        "textwrap",
        "unicodedata",
        "calendar",
    }
)


class ProtocolError(Exception):
    """The peer sent something the protocol does not admit (in the runner: the solution broke the boundary, e.g.
    by writing into the socket itself). :attr:`count` counts them in this process; the runner reports it."""

    count = 0

    def __init__(self, *args):
        super().__init__(*args)
        ProtocolError.count += 1


class SolutionDied(Exception):
    """The solution's process is gone (the socket closed)."""


NP_KINDS = "biufcSU"  # numpy dtypes that cross as data (no object arrays)


def expect_str(x) -> str:
    if type(x) is not str:
        raise ProtocolError("expected a string")
    return x


def expect_list(x) -> list:
    if type(x) is not list:
        raise ProtocolError("expected a list")
    return x


def expect_pair(p):
    if type(p) is not list or len(p) != 2:
        raise ProtocolError("expected a pair")
    return p


def has_handle(enc) -> bool:
    if isinstance(enc, dict):
        if enc.get("t") in ("h", "p", "exc", "std", "mod", "bexc"):
            return True
        return any(has_handle(x) for x in (enc.get("v") if isinstance(enc.get("v"), list) else []))
    if isinstance(enc, list):
        return any(has_handle(x) for x in enc)
    return False


BUILTINS_NOT_SHARED = frozenset(
    {
        "exec",
        "eval",
        "compile",
        "open",
        "__import__",
        "breakpoint",
        "input",
        "exit",
        "quit",
        "globals",
        "locals",
        "vars",
        "setattr",
        "delattr",
        "getattr",
        "help",
    }
)


def std_object(mod: str, qual: str):
    import importlib

    if mod == "builtins":
        obj = getattr(builtins, qual, None)
        if obj is None or qual.startswith("_") or qual in BUILTINS_NOT_SHARED:
            raise ProtocolError("builtin not allowed")
        return obj
    if mod not in STD_MODULES:
        raise ProtocolError("module not allowed")
    obj = importlib.import_module(mod)
    for part in qual.split("."):
        if part.startswith("_"):
            raise ProtocolError("private name")
        obj = getattr(obj, part)
    return obj


class NoData:
    def __repr__(self) -> str:
        return "<no plain value>"


NO_DATA = NoData()


# Operators forwarded to the object that lives on the other side (both directions).
FORWARDED = (
    "__len__",
    "__iter__",
    "__next__",
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__call__",
    "__bool__",
    "__hash__",
    "__repr__",
    "__str__",
    "__int__",
    "__float__",
    "__index__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__invert__",
    "__reversed__",
    "__enter__",
    "__exit__",
    "__round__",
    "__format__",
    "__contains__",
)
BINARY = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor", "lshift", "rshift")
COMPARE = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")
ALL_DUNDERS = frozenset(FORWARDED + COMPARE + tuple(f"__{n}__" for n in BINARY) + tuple(f"__r{n}__" for n in BINARY))


def apply_dunder(target, name: str, args: list):
    if name not in ALL_DUNDERS:
        raise ProtocolError(f"operator {name!r} not allowed")
    import operator

    simple = {
        "__len__": len,
        "__iter__": iter,
        "__next__": next,
        "__bool__": bool,
        "__hash__": hash,
        "__repr__": repr,
        "__str__": str,
        "__int__": int,
        "__float__": float,
        "__index__": operator.index,
        "__neg__": operator.neg,
        "__pos__": operator.pos,
        "__abs__": abs,
        "__invert__": operator.invert,
        "__reversed__": reversed,
    }
    if name in simple:
        return simple[name](target)
    if name == "__contains__":
        return args[0] in target
    if name == "__getitem__":
        return target[args[0]]
    if name == "__setitem__":
        target[args[0]] = args[1]
        return None
    if name == "__delitem__":
        del target[args[0]]
        return None
    if name == "__round__":
        return round(target, *args[:1])
    if name == "__format__":
        return format(target, *args[:1])
    if name in ("__enter__", "__exit__"):
        return getattr(target, name)(*args)
    if name in COMPARE:
        return getattr(operator, name.strip("_"))(target, args[0])
    base = name.strip("_")
    if base.startswith("r") and base[1:] in BINARY:
        f = getattr(operator, base[1:] + "_" if base[1:] in ("and", "or") else base[1:])
        return f(args[0], target)
    f = getattr(operator, base + "_" if base in ("and", "or") else base)
    return f(target, args[0])


def check_peer_op(op, msg) -> None:
    """Runner side: what the solution may do with the runner's objects it was given (callbacks, the test's own
    objects passed as arguments): call them, read and set public attributes, use operators. No ``_`` names
    (``__globals__``, ``__class__`` ...), so nothing beyond those objects is reachable."""
    if op in ("getattr", "setattr"):
        name = msg.get("name")
        if type(name) is not str or name.startswith("_"):
            raise AttributeError(f"attribute {name!r} of a test object is not available to the solution")
    elif op == "dunder":
        if msg.get("name") not in ALL_DUNDERS:
            raise ProtocolError("operator not allowed")
    elif op not in ("call", "data"):
        raise ProtocolError(f"operation {op!r} not allowed")
