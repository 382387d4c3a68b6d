"""The plain-data boundary of the sandbox (codegrpo/sandbox/rpc.py), without a sandbox: what crosses and how.

The runner's decoder is the trust boundary: it must build only exact builtins (or its own std classes and
proxies) from whatever the solution's process sends, and refuse anything else.
"""

from __future__ import annotations

import collections
import decimal
import fractions
import json
import os
import socket

import pytest

from codegrpo.sandbox import rpc


@pytest.fixture()
def pair():
    a, b = socket.socketpair()
    runner = rpc.Endpoint(a.detach(), trusted=True)
    cand = rpc.Endpoint(b.detach(), trusted=False)
    yield runner, cand
    runner.sock.close()
    cand.sock.close()


class EqInt(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class EqList(list):
    def __eq__(self, other):
        return True

    def __iter__(self):
        return iter([1, 2, 3])


class AlwaysEq:
    def __eq__(self, other):
        return True


def test_builtin_subclasses_cross_as_the_builtin_value(pair):
    runner, cand = pair
    for value, want in (
        (EqInt(5), 5),
        (EqList([7]), [7]),
        (True, True),
        (2**100, 2**100),
        (1.5, 1.5),
        ("s", "s"),
        (b"\x00", b"\x00"),
        ((1, [2, {3}]), (1, [2, {3}])),
        ({"k": (1,)}, {"k": (1,)}),
        (range(1, 9, 2), range(1, 9, 2)),
        (frozenset({1}), frozenset({1})),
        (3 + 4j, 3 + 4j),
        (collections.Counter("aab"), collections.Counter("aab")),
        (collections.deque([1, 2], maxlen=3), collections.deque([1, 2], maxlen=3)),
        (decimal.Decimal("1.10"), decimal.Decimal("1.10")),
        (fractions.Fraction(1, 3), fractions.Fraction(1, 3)),
    ):
        got = runner.decode(cand.encode(value))
        assert got == want and type(got) is type(want), (value, got)
    assert type(runner.decode(cand.encode(EqInt(5)))) is int
    assert runner.decode(cand.encode(EqInt(5))) != 6  # the subclass's __eq__ did not cross


def test_other_objects_cross_as_handles(pair):
    runner, cand = pair
    got = runner.decode(cand.encode(AlwaysEq()))
    assert isinstance(got, rpc.SolutionObject)
    a = [1]
    a.append(a)  # a cycle becomes a handle, not a recursion
    assert isinstance(runner.decode(cand.encode(a))[1], rpc.SolutionObject)


@pytest.mark.parametrize(
    "bad",
    [
        {"t": "code", "v": "x"},
        {"t": "mod", "v": "os"},
        {"t": "std", "m": "os", "q": "system"},
        {"t": "std", "m": "builtins", "q": "exec"},
        {"t": "std", "m": "collections", "q": "_sys"},
        {"t": "bexc", "v": "SystemExit"},
        {"t": "p", "v": 12345},
        {"t": "ndarray", "v": {"t": "list", "v": []}, "d": "|O"},
        {"t": "list", "v": "notalist"},
        [1, 2],
    ],
)
def test_runner_refuses_what_the_protocol_does_not_admit(pair, bad):
    runner, _ = pair
    with pytest.raises((rpc.ProtocolError, TypeError)):
        runner.decode(bad)


def test_exceptions_come_back_from_the_allow_list(pair):
    runner, cand = pair
    with pytest.raises(ValueError, match="bad"):
        runner.raise_exc(cand.encode_exc(ValueError("bad")))

    class MyError(KeyError):
        pass

    enc = cand.encode_exc(MyError("k"))
    with pytest.raises(KeyError) as info:
        runner.raise_exc(enc)
    assert type(info.value).__name__ == "MyError" and type(info.value) is not MyError
    with pytest.raises(rpc.ProtocolError):  # never SystemExit, KeyboardInterrupt or pytest's outcomes
        runner.raise_exc({"cls": {"t": "std", "m": "builtins", "q": "SystemExit"}, "args": []})


def test_solution_module_exports(pair):
    runner, cand = pair
    hello = {
        "hello": 1,
        "all": ["f", "sorted", "test_x", "TestY", "_p", "x"],
        "values": {"x": 3, "sorted": {"t": "h", "v": 2}, "test_x": {"t": "h", "v": 3}},
    }
    mod = rpc.solution_module(runner, hello)
    assert mod.__all__ == ["f", "x"]  # no builtin shadowing, nothing pytest would collect
    assert mod.x == 3


def test_loaded_by_file_path_it_loads_its_parts_without_the_package():
    """Inside the sandbox rpc.py is loaded by file path with no package on the path (pytest_driver): it loads its
    parts (``rpc.PARTS``) the same way, and the names the runner uses come from them; every part is a file the
    sandbox is made to see (``bwrap.SUPERVISOR_FILES``)."""
    import subprocess
    import sys
    from pathlib import Path

    from codegrpo.sandbox import bwrap

    here = Path(os.path.realpath(rpc.__file__)).parent
    code = (
        "import importlib.util, json, sys\n"
        f"s = importlib.util.spec_from_file_location('_codegrpo_rpc', {str(here / 'rpc.py')!r})\n"
        "m = importlib.util.module_from_spec(s); sys.modules['_codegrpo_rpc'] = m; s.loader.exec_module(m)\n"
        "print(json.dumps([m.Endpoint.__module__, m.ProtocolError.__module__, m.PeerObject.__module__,\n"
        "                  m._CandidateEndpoint.proxy_type.__name__, m.Endpoint.proxy_type.__name__,\n"
        "                  any(k.split('.')[0] == 'codegrpo' for k in sys.modules)]))\n"
    )
    proc = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [
        "_codegrpo_rpc_endpoint",
        "_codegrpo_rpc_rules",
        "_codegrpo_rpc_proxy",
        "PeerObject",
        "SolutionObject",
        False,
    ]
    shown = set(bwrap.SUPERVISOR_FILES.values())
    assert {str(here / f"{p}.py") for p in rpc.PARTS} <= shown
