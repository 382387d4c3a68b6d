"""The boundary between the trusted test runner and the untrusted solution (standard library only).

The solution runs in its own process (the *candidate*), under its own uid; the test file runs in the *runner*,
which never executes the solution's code. In the runner, module ``solution`` is a proxy: every call into the
solution (functions, classes, methods, attribute reads, operators) is a request over a socket to the candidate,
and values cross that socket as plain data only:

* exact builtin values: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``bytearray``,
  ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``, and a few standard-library value types
  (``collections.deque`` / ``Counter`` / ``OrderedDict`` / ``defaultdict``, ``decimal.Decimal``,
  ``fractions.Fraction``), rebuilt by the receiver with its own classes. A subclass of a builtin (an ``int``
  whose ``__eq__`` is always true, a ``list`` with a forged ``__iter__``) is sent as the builtin value it holds,
  read through the builtin's own methods;
* any other object stays where it lives and crosses as an opaque *handle*; the receiver gets a proxy
  (:class:`SolutionObject` in the runner) that forwards operations back;
* exception classes of the solution arrive as runner-made subclasses of an allowed builtin exception, so
  ``pytest.raises(ValueError)`` and ``pytest.raises(solution.MyError)`` still work; exceptions raised by the
  solution come back by name from :data:`ALLOWED_EXCEPTIONS` (never ``SystemExit``, pytest's outcomes ...);
* in-place mutation of ``list`` / ``dict`` / ``set`` / ``bytearray`` arguments is copied back after each call;
* what the solution prints during a call comes back with the reply and is written to the runner's streams (so
  ``capsys`` sees it).

Decisions the runner makes from solution objects that are not plain data: comparing a handle with a plain value
uses the handle's plain value (asked for *without* showing the other operand; an object with no plain value
equals nothing); comparing two handles, their truth value, hashing and ``repr`` are forwarded (see
docs/sandbox.md, *What is not guaranteed*).

Messages are JSON lines. The runner's decoder (:meth:`Endpoint.decode`) accepts only the tags above.

The boundary in four modules, each one job: :mod:`~codegrpo.sandbox.rpc_rules` (what may cross, the protocol's
errors and limits, the forwarded operators), :mod:`~codegrpo.sandbox.rpc_proxy` (proxies of the other side's
objects), :mod:`~codegrpo.sandbox.rpc_endpoint` (:class:`Endpoint`: the wire, requests, the codec) and this one:
the two processes' entry points (:func:`serve_candidate` in the candidate; :func:`connect_runner`,
:func:`solution_module`, :func:`ping` in the runner). The names the callers use are importable from here.

Standard library only. Inside the sandbox this file is loaded by file path (``pytest_driver``), with no package on
the path: it then loads its three parts by file path as well (:data:`PARTS`, in dependency order).
"""

from __future__ import annotations

import builtins
import io
import os
import sys

PARTS = ("rpc_rules", "rpc_proxy", "rpc_endpoint")  # loaded in this order (each uses those before it)

if __package__:
    from codegrpo.sandbox import rpc_endpoint, rpc_proxy, rpc_rules
else:  # loaded by file path inside the sandbox (pytest_driver): the parts likewise, as _codegrpo_<part>
    import importlib.util

    for _part in PARTS:
        _spec = importlib.util.spec_from_file_location(
            f"_codegrpo_{_part}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{_part}.py")
        )
        _mod = importlib.util.module_from_spec(_spec)
        sys.modules[_spec.name] = _mod
        _spec.loader.exec_module(_mod)
    rpc_rules, rpc_proxy, rpc_endpoint = (sys.modules[f"_codegrpo_{p}"] for p in PARTS)

# The boundary's names, importable from here (pytest_driver, eval.suite_driver, the tests).
ALLOWED_EXCEPTIONS = rpc_rules.ALLOWED_EXCEPTIONS
MAX_MESSAGE = rpc_rules.MAX_MESSAGE
MAX_OUTPUT = rpc_rules.MAX_OUTPUT
STD_MODULES = rpc_rules.STD_MODULES
ProtocolError = rpc_rules.ProtocolError
SolutionDied = rpc_rules.SolutionDied
SolutionObject = rpc_proxy.SolutionObject
PeerObject = rpc_proxy.PeerObject
Endpoint = rpc_endpoint.Endpoint

__all__ = [
    "ALLOWED_EXCEPTIONS",
    "MAX_MESSAGE",
    "MAX_OUTPUT",
    "STD_MODULES",
    "ProtocolError",
    "SolutionDied",
    "SolutionObject",
    "PeerObject",
    "Endpoint",
    "serve_candidate",
    "SolutionModule",
    "connect_runner",
    "solution_module",
    "ping",
]


# ---------------------------------------------------------------------------------------------------------
# The candidate process: import the solution, then serve the runner
# ---------------------------------------------------------------------------------------------------------
class _Capture(io.TextIOBase):
    def __init__(self, fd: int):
        self.parts: list[str] = []
        self.size = 0
        self.fd = fd

    def writable(self) -> bool:
        return True

    def write(self, s) -> int:
        s = str(s)
        os.write(self.fd, s.encode("utf-8", "replace"))  # the job's bounded file (RLIMIT_FSIZE: EFBIG)
        if self.size < MAX_OUTPUT:
            self.parts.append(s[: MAX_OUTPUT - self.size])
            self.size += len(s)
        return len(s)

    def take(self) -> str:
        out = "".join(self.parts)
        self.parts, self.size = [], 0
        return out

    def fileno(self) -> int:
        return self.fd


class _CandidateEndpoint(Endpoint):
    proxy_type = PeerObject  # the runner's objects given to the solution

    def __init__(self, fd: int):
        super().__init__(fd, trusted=False)
        self.cap_out = _Capture(1)
        self.cap_err = _Capture(2)

    def finish_reply(self, msg: dict, out: dict, ctx: dict) -> None:
        if "args" in ctx:
            args, kwargs = ctx["args"]
            mut = {}
            for i, a in enumerate(args):
                if type(a) in (list, dict, set, bytearray):
                    mut[str(i)] = self.encode(a)
            for k, a in kwargs.items():
                if type(a) in (list, dict, set, bytearray):
                    mut["k:" + k] = self.encode(a)
            if mut:
                out["mut"] = mut
        out["out"] = self.cap_out.take()
        out["err"] = self.cap_err.take()


def serve_candidate(fd: int, cand_dir: str) -> int:
    """Runs in the candidate process: import ``solution`` from ``cand_dir``, tell the runner its names, serve."""
    import importlib

    ep = _CandidateEndpoint(fd)
    sys.path.insert(0, cand_dir)
    sys.dont_write_bytecode = True
    sys.stdout, sys.stderr = ep.cap_out, ep.cap_err
    try:
        mod = importlib.import_module("solution")
    except BaseException as exc:  # noqa: BLE001  (SystemExit, MemoryError ... all mean "did not execute")
        ep.send(
            {"import_error": f"{type(exc).__name__}: {exc}"[:2000], "out": ep.cap_out.take(), "err": ep.cap_err.take()}
        )
        return 3
    h = ep.lend(mod)
    names = getattr(mod, "__all__", None)
    if not (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)):
        names = [n for n in vars(mod) if not n.startswith("_")]
    values = {}
    for n in list(vars(mod)):
        if n.startswith("__"):
            continue
        try:
            values[n] = ep.encode(vars(mod)[n])
        except Exception:  # noqa: BLE001
            continue
    ep.send(
        {
            "hello": h,
            "all": [str(n) for n in names],
            "values": values,
            "out": ep.cap_out.take(),
            "err": ep.cap_err.take(),
        }
    )
    while True:
        try:
            msg = ep.recv()
        except SolutionDied:
            return 0
        if msg.get("op") == "ping":
            ep.send({"re": msg.get("id"), "ok": "pong"})
            continue
        ep.serve_one(msg)


# ---------------------------------------------------------------------------------------------------------
# The runner: module ``solution`` as a proxy
# ---------------------------------------------------------------------------------------------------------
class SolutionModule(type(sys)):
    """Runner side: module ``solution``. Names the solution defined are set from its first message; others are
    asked for on use (``from solution import _helper``)."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        ep = self.__dict__["_cg_ep"]
        return ep.op({"op": "getattr", "h": self.__dict__["_cg_h"], "name": name})


def connect_runner(fd: int, out_hook=None) -> tuple[Endpoint, dict]:
    """Runner side: wait for the candidate's first message; returns the endpoint and that message."""
    ep = Endpoint(fd, trusted=True)
    ep.out_hook = out_hook
    first = ep.recv()
    if out_hook is not None:
        out_hook(first.get("out"), first.get("err"))
    return ep, first


def solution_module(ep: Endpoint, hello: dict) -> SolutionModule:
    """The proxy module for the solution's first message. ``from solution import *`` exports its public names
    except those that would shadow a builtin or that pytest would collect as tests."""
    h = hello.get("hello")
    if type(h) is not int:
        raise ProtocolError("bad hello")
    mod = SolutionModule("solution")
    mod.__dict__["_cg_ep"] = ep
    mod.__dict__["_cg_h"] = h
    values = hello.get("values")
    if not isinstance(values, dict):
        raise ProtocolError("bad hello")
    for name, enc in values.items():
        if type(name) is not str or not name.isidentifier() or name.startswith("__"):
            continue
        try:
            mod.__dict__[name] = ep.decode(enc)
        except ProtocolError:
            continue
    exported = []
    for name in rpc_rules.expect_list(hello.get("all", [])):
        if type(name) is not str or not name.isidentifier() or name.startswith("_") or hasattr(builtins, name):
            continue
        if name.lower().startswith("test"):
            continue
        exported.append(name)
    mod.__dict__["__all__"] = exported
    mod.__dict__["__file__"] = os.path.join(os.getcwd(), "solution.py")
    return mod


def ping(ep: Endpoint) -> bool:
    """Runner side, at the end: does the candidate still answer (its import did not fail afterwards)?"""
    try:
        rep = ep.request({"op": "ping"})
    except (SolutionDied, ProtocolError):
        return False
    return rep.get("ok") == "pong"
