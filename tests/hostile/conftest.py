"""What several hostile suites share: a host-side /proc scan, and the always-equal classes as candidate code."""

from __future__ import annotations

import os
from typing import Callable, TypeVar

T = TypeVar("T")


def scan_proc(read: Callable[[str], T]) -> list[tuple[int, T]]:
    """``(pid, read(pid))`` for every process in /proc (``pid`` given to ``read`` as the folder's name); a process
    that ends while it is read (OSError) or whose entry is cut short (IndexError) is left out."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            out.append((int(name), read(name)))
        except (OSError, IndexError):
            continue
    return out


# The base of each always-equal class a forgery suite's candidate may define.
_EQ_BASES = {"_Eq": "object", "_EqInt": "int", "_EqFloat": "float", "_EqStr": "str", "_EqList": "list"}


def always_equal_source(*names: str) -> str:
    """Candidate code (module level) that defines the classes ``names`` (of ``_Eq``, ``_EqInt``, ``_EqFloat``,
    ``_EqStr``, ``_EqList``), in that order: each a subclass of its builtin (``_Eq``: of object) whose ``__eq__``
    is always true and ``__ne__`` always false, hashed as the builtin."""
    return "".join(
        f"class {name}({_EQ_BASES[name]}):\n"
        "    def __eq__(self, other):\n        return True\n"
        "    def __ne__(self, other):\n        return False\n"
        f"    __hash__ = {_EQ_BASES[name]}.__hash__\n"
        for name in names
    )
