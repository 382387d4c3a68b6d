"""One end of the sandbox's solution boundary: the wire, requests, and the plain-data codec (standard library only).

Part of :mod:`codegrpo.sandbox.rpc` (its docstring describes the protocol and what crosses it). One job, one class:
:class:`Endpoint` sends and receives JSON lines, serves the peer's requests on the objects it lent, and encodes /
decodes values (plain data by value, anything else as a handle that the receiver turns into a proxy of
:mod:`codegrpo.sandbox.rpc_proxy`); encoder and decoder stay side by side: every tag one writes the other checks.

Runs inside the sandbox: loaded by file path there (:mod:`codegrpo.sandbox.rpc` loads it after
:mod:`~codegrpo.sandbox.rpc_rules` and :mod:`~codegrpo.sandbox.rpc_proxy`).
"""

from __future__ import annotations

import builtins
import collections
import decimal
import fractions
import json
import socket
import sys

if __package__:
    from codegrpo.sandbox import rpc_proxy as proxy
    from codegrpo.sandbox import rpc_rules as rules
else:  # loaded by file path inside the sandbox, after its two parts (codegrpo.sandbox.rpc)
    rules = sys.modules["_codegrpo_rpc_rules"]
    proxy = sys.modules["_codegrpo_rpc_proxy"]

_INT_BIG = 1 << 62


class _Data:
    """A request's answer that asks for the plain value of ``obj`` (:meth:`Endpoint.encode_data`)."""

    def __init__(self, obj):
        self.obj = obj


class Endpoint:
    """One end of the boundary. ``trusted=True`` is the runner: it decodes strictly and limits what the peer may
    do with the runner's objects; ``trusted=False`` is the candidate."""

    def __init__(self, fd: int, trusted: bool):
        self.sock = socket.socket(fileno=fd)
        self.sock.setblocking(True)
        self.trusted = trusted
        self.buf = b""
        self.next_id = 1
        self.lent: dict[int, object] = {}  # our objects the peer holds handles to
        self.lent_ids: dict[int, int] = {}  # id(obj) -> handle
        self.proxies: dict[int, object] = {}  # the peer's handles -> our proxy objects
        self.exc_classes: dict[int, type] = {}  # the peer's exception classes -> our classes
        self.seq = 0
        self.out_hook = None  # runner: where the candidate's captured output goes

    # -- wire ----------------------------------------------------------------------------------------------
    def send(self, msg: dict) -> None:
        data = (json.dumps(msg, allow_nan=True) + "\n").encode("utf-8", "surrogatepass")
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise rules.SolutionDied(f"the solution's process is gone ({exc})") from None

    def recv(self) -> dict:
        while b"\n" not in self.buf:
            if len(self.buf) > rules.MAX_MESSAGE:
                raise rules.ProtocolError("message too large")
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError as exc:
                raise rules.SolutionDied(f"the solution's process is gone ({exc})") from None
            if not chunk:
                raise rules.SolutionDied("the solution's process is gone")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise rules.ProtocolError(f"not a message ({type(exc).__name__})") from None
        if not isinstance(msg, dict):
            raise rules.ProtocolError("not a message")
        return msg

    # -- requests ------------------------------------------------------------------------------------------
    def request(self, msg: dict):
        """Send a request and serve the peer's nested requests until its reply comes; returns the reply."""
        self.seq += 1
        rid = self.seq
        msg["id"] = rid
        self.send(msg)
        while True:
            got = self.recv()
            if "op" in got:
                self.serve_one(got)
                continue
            if got.get("re") != rid:
                raise rules.ProtocolError("a reply to no request")
            return got

    def serve_one(self, msg: dict) -> None:
        rid = msg.get("id")
        out = {"re": rid}
        ctx: dict = {}
        try:
            out["ok"] = self.encode(self.handle(msg, ctx))
        except (rules.SolutionDied, rules.ProtocolError):
            raise
        except BaseException as exc:  # noqa: BLE001  (the error goes back to the caller)
            if not isinstance(exc, Exception):
                raise
            out.pop("ok", None)
            out["exc"] = self.encode_exc(exc)
        self.finish_reply(msg, out, ctx)
        self.send(out)

    def finish_reply(self, msg: dict, out: dict, ctx: dict) -> None:  # candidate: mutations and output
        pass

    def handle(self, msg: dict, ctx: dict):
        op = msg.get("op")
        target = self.local(msg.get("h"))
        if self.trusted:
            rules.check_peer_op(op, msg)
        if op == "getattr":
            return getattr(target, str(msg["name"]))
        if op == "setattr":
            setattr(target, str(msg["name"]), self.decode(msg["value"]))
            return None
        if op == "call":
            args = [self.decode(a) for a in msg.get("args", [])]
            kwargs = {str(k): self.decode(v) for k, v in msg.get("kwargs", {}).items()}
            ctx["args"] = (args, kwargs)
            return target(*args, **kwargs)
        if op == "dunder":
            name = str(msg["name"])
            args = [self.decode(a) for a in msg.get("args", [])]
            return rules.apply_dunder(target, name, args)
        if op == "data":
            return _Data(target)
        if op == "isinstance":
            return isinstance(self.decode(msg["value"]), target)
        raise rules.ProtocolError(f"unknown operation {op!r}")

    def local(self, h):
        if h is None:
            return None
        if not isinstance(h, int) or h not in self.lent:
            raise rules.ProtocolError("unknown handle")
        return self.lent[h]

    def lend(self, obj) -> int:
        key = id(obj)
        h = self.lent_ids.get(key)
        if h is not None and self.lent.get(h) is obj:
            return h
        h = self.next_id
        self.next_id += 1
        self.lent[h] = obj
        self.lent_ids[key] = h
        return h

    proxy_type: type = proxy.SolutionObject  # what the peer's objects become here (the candidate: PeerObject)

    def make_proxy(self, h: int):
        """A proxy of the peer's object ``h`` (the handle's ``"k"`` does not matter: calls are forwarded)."""
        p = object.__new__(self.proxy_type)
        object.__setattr__(p, "_ep", self)
        object.__setattr__(p, "_h", h)
        return p

    # -- values --------------------------------------------------------------------------------------------
    def encode(self, v, seen=None):
        """A JSON tree for ``v``: plain data by value, anything else as a handle."""
        if isinstance(v, _Data):
            return self.encode_data(v.obj)
        t = type(v)
        if t is bool or v is None or t is str:
            return v
        if t is int:
            return v if -_INT_BIG < v < _INT_BIG else {"t": "int", "v": format(v, "x")}
        if t is float:
            return v
        if isinstance(v, proxy.Remote) and v._ep is self:
            return {"t": "p", "v": object.__getattribute__(v, "_h")}
        if t is type and getattr(v, "_cg_ep", None) is self:
            return {"t": "p", "v": v._cg_h}
        seen = set() if seen is None else seen
        if id(v) in seen:  # a cycle: lend the object instead
            return {"t": "h", "v": self.lend(v)}
        plain = self.encode_plain(v, seen)
        if plain is not None:
            return plain
        return self.encode_other(v)

    def encode_plain(self, v, seen):
        """Exact builtins and builtin subclasses (read through the builtin's own methods); None when not plain."""
        t = type(v)
        seen.add(id(v))
        try:
            if isinstance(v, bool):
                return bool(v)
            if isinstance(v, int):
                return self.encode(int.__index__(v))
            if isinstance(v, float):
                return float.__float__(v)
            if isinstance(v, str):
                return str.__str__(v)
            if isinstance(v, complex):
                return {"t": "complex", "v": [complex.__getattribute__(v, "real"), complex.__getattribute__(v, "imag")]}
            if isinstance(v, (bytes, bytearray)):
                return {"t": "bytes" if isinstance(v, bytes) else "bytearray", "v": bytes(v).hex()}
            if isinstance(v, collections.deque):
                return {"t": "deque", "v": [self.encode(x, seen) for x in collections.deque.__iter__(v)], "m": v.maxlen}
            if isinstance(v, dict):
                items = [[self.encode(k, seen), self.encode(x, seen)] for k, x in dict.items(v)]
                if isinstance(v, collections.Counter):
                    return {"t": "Counter", "v": items}
                if isinstance(v, collections.OrderedDict):
                    return {"t": "OrderedDict", "v": items}
                if isinstance(v, collections.defaultdict):
                    f = v.default_factory
                    fac = f.__name__ if f in (int, list, set, dict, str, float, tuple, frozenset, bool) else None
                    return {"t": "defaultdict", "v": items, "f": fac}
                return {"t": "dict", "v": items}
            if isinstance(v, list):
                return {"t": "list", "v": [self.encode(x, seen) for x in list.__iter__(v)]}
            if isinstance(v, tuple):
                return {"t": "tuple", "v": [self.encode(x, seen) for x in tuple.__iter__(v)]}
            if isinstance(v, frozenset):
                return {"t": "frozenset", "v": [self.encode(x, seen) for x in frozenset.__iter__(v)]}
            if isinstance(v, set):
                return {"t": "set", "v": [self.encode(x, seen) for x in set.__iter__(v)]}
            if t is range:
                return {"t": "range", "v": [self.encode(v.start), self.encode(v.stop), self.encode(v.step)]}
            if t is slice:
                return {
                    "t": "slice",
                    "v": [self.encode(v.start, seen), self.encode(v.stop, seen), self.encode(v.step, seen)],
                }
            if isinstance(v, decimal.Decimal):
                return {"t": "Decimal", "v": decimal.Decimal.__str__(v)}
            if isinstance(v, fractions.Fraction):
                return {"t": "Fraction", "v": [self.encode(int(v.numerator)), self.encode(int(v.denominator))]}
            np = sys.modules.get("numpy")
            if np is not None and isinstance(v, (np.ndarray, np.generic)) and v.dtype.kind in rules.NP_KINDS:
                if isinstance(v, np.ndarray):
                    return {"t": "ndarray", "v": self.encode(np.ndarray.tolist(v), seen), "d": v.dtype.str}
                return {"t": "npscalar", "v": self.encode(np.generic.item(v), seen), "d": v.dtype.str}
        finally:
            seen.discard(id(v))
        return None

    def encode_other(self, v):
        if isinstance(v, type(sys)):
            name = getattr(v, "__name__", None)
            if isinstance(name, str) and name in rules.STD_MODULES:
                return {"t": "mod", "v": name}
        if isinstance(v, type) and issubclass(v, BaseException):
            bases = [
                c.__name__
                for c in v.__mro__
                if c.__name__ in rules.ALLOWED_EXCEPTIONS and rules.ALLOWED_EXCEPTIONS[c.__name__] is c
            ]
            if v.__name__ in rules.ALLOWED_EXCEPTIONS and rules.ALLOWED_EXCEPTIONS[v.__name__] is v:
                return {"t": "bexc", "v": v.__name__}
            return {"t": "exc", "v": self.lend(v), "name": str(v.__name__)[:200], "bases": bases[:1]}
        if isinstance(v, (type, type(len), type(rules.apply_dunder))):
            mod = getattr(v, "__module__", None)
            qual = getattr(v, "__qualname__", None)
            if mod in rules.STD_MODULES and isinstance(qual, str) and "<" not in qual:
                return {"t": "std", "m": mod, "q": qual}
            if (
                mod == "builtins"
                and getattr(builtins, str(qual), None) is v
                and not str(qual).startswith("_")
                and qual not in rules.BUILTINS_NOT_SHARED
            ):
                return {"t": "std", "m": "builtins", "q": qual}
        return {"t": "h", "v": self.lend(v), "k": "callable" if callable(v) else ""}

    def encode_data(self, obj):
        """The plain value of ``obj`` for a comparison (no handles); ``{"t": "none"}`` when it has none."""
        if (
            isinstance(
                obj,
                (
                    list,
                    tuple,
                    dict,
                    set,
                    frozenset,
                    int,
                    float,
                    str,
                    bytes,
                    bytearray,
                    complex,
                    collections.deque,
                    decimal.Decimal,
                    fractions.Fraction,
                ),
            )
            or obj is None
        ):
            try:
                enc = self.encode(obj)
                if not rules.has_handle(enc):
                    return enc
            except RecursionError:
                pass
        np = sys.modules.get("numpy")
        if np is not None and isinstance(obj, (np.ndarray, np.generic)):
            try:
                enc = self.encode(obj)
                if not rules.has_handle(enc):
                    return enc
            except Exception:  # noqa: BLE001
                pass
        return {"t": "none"}

    def encode_exc(self, exc: BaseException) -> dict:
        args = []
        for a in exc.args[:8]:
            try:
                enc = self.encode(a)
                args.append(enc if not rules.has_handle(enc) else str(a)[:2000])
            except Exception:  # noqa: BLE001
                args.append(repr(a)[:2000])
        return {"cls": self.encode(type(exc)), "args": args}

    def decode(self, v):
        """A value from the peer: exact builtins, the receiver's own classes for the std types, proxies."""
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is list:  # never at value level
            raise rules.ProtocolError("bare list")
        t = v.get("t")
        x = v.get("v")
        if t == "int":
            return int(rules.expect_str(x), 16)
        if t == "list":
            return [self.decode(e) for e in rules.expect_list(x)]
        if t == "tuple":
            return tuple(self.decode(e) for e in rules.expect_list(x))
        if t == "set":
            return {self.decode(e) for e in rules.expect_list(x)}
        if t == "frozenset":
            return frozenset(self.decode(e) for e in rules.expect_list(x))
        if t in ("dict", "Counter", "OrderedDict", "defaultdict"):
            pairs = [(self.decode(k), self.decode(e)) for k, e in (rules.expect_pair(p) for p in rules.expect_list(x))]
            if t == "dict":
                return dict(pairs)
            if t == "Counter":
                return collections.Counter(dict(pairs))
            if t == "OrderedDict":
                return collections.OrderedDict(pairs)
            fac = v.get("f")
            factory = (
                {
                    n: getattr(builtins, n)
                    for n in ("int", "list", "set", "dict", "str", "float", "tuple", "frozenset", "bool")
                }.get(fac)
                if fac
                else None
            )
            return collections.defaultdict(factory, pairs)
        if t == "deque":
            m = v.get("m")
            return collections.deque(
                (self.decode(e) for e in rules.expect_list(x)), m if type(m) is int and m >= 0 else None
            )
        if t == "complex":
            re_, im = rules.expect_list(x)[:2]
            if type(re_) not in (int, float) or type(im) not in (int, float):
                raise rules.ProtocolError("bad complex")
            return complex(re_, im)
        if t in ("bytes", "bytearray"):
            data = bytes.fromhex(rules.expect_str(x))
            return data if t == "bytes" else bytearray(data)
        if t == "Decimal":
            return decimal.Decimal(rules.expect_str(x))
        if t == "Fraction":
            num, den = (self.decode(e) for e in rules.expect_list(x)[:2])
            if type(num) is not int or type(den) is not int or den == 0:
                raise rules.ProtocolError("bad Fraction")
            return fractions.Fraction(num, den)
        if t in ("range", "slice"):
            a, b, c = (self.decode(e) for e in rules.expect_list(x)[:3])
            if t == "range":
                if not all(type(n) is int for n in (a, b, c)):
                    raise rules.ProtocolError("bad range")
                return range(a, b, c)
            if proxy.has_proxy([a, b, c]):
                raise rules.ProtocolError("bad slice")
            return slice(a, b, c)
        if t in ("ndarray", "npscalar"):
            import numpy as np

            dtype = np.dtype(rules.expect_str(v.get("d")))
            if dtype.kind not in rules.NP_KINDS:
                raise rules.ProtocolError("numpy dtype not allowed")
            val = self.decode(x)
            if proxy.has_proxy(val):
                raise rules.ProtocolError("numpy value with handles")
            return np.array(val, dtype=dtype) if t == "ndarray" else dtype.type(val)
        if t == "none":
            return rules.NO_DATA
        if t == "p":  # one of our own objects, handed back
            return self.local(x)
        if t == "h":
            if type(x) is not int:
                raise rules.ProtocolError("bad handle")
            p = self.proxies.get(x)
            if p is None:
                p = self.proxies[x] = self.make_proxy(x)
            return p
        if t == "mod":
            name = rules.expect_str(x)
            if name not in rules.STD_MODULES:
                raise rules.ProtocolError("module not allowed")
            import importlib

            return importlib.import_module(name)
        if t == "std":
            return rules.std_object(rules.expect_str(v.get("m")), rules.expect_str(v.get("q")))
        if t == "bexc":
            name = rules.expect_str(x)
            if name not in rules.ALLOWED_EXCEPTIONS:
                raise rules.ProtocolError("exception not allowed")
            return rules.ALLOWED_EXCEPTIONS[name]
        if t == "exc":
            return self.exc_class(v)
        raise rules.ProtocolError(f"unknown value tag {t!r}")

    def exc_class(self, v: dict) -> type:
        h = v.get("v")
        if type(h) is not int:
            raise rules.ProtocolError("bad handle")
        cls = self.exc_classes.get(h)
        if cls is None:
            bases = [
                rules.ALLOWED_EXCEPTIONS[b]
                for b in rules.expect_list(v.get("bases", []))
                if type(b) is str and b in rules.ALLOWED_EXCEPTIONS
            ][:1] or [Exception]
            name = rules.expect_str(v.get("name", "SolutionError"))[:200] or "SolutionError"
            cls = type(name, tuple(bases), {"_cg_ep": self, "_cg_h": h, "__module__": "solution"})
            self.exc_classes[h] = cls
        return cls

    def raise_exc(self, e) -> None:
        if not isinstance(e, dict):
            raise rules.ProtocolError("bad exception")
        cls = self.decode(e.get("cls"))
        if not (
            isinstance(cls, type)
            and issubclass(cls, Exception)
            and (cls in rules.ALLOWED_EXCEPTIONS.values() or getattr(cls, "_cg_ep", None) is self)
        ):
            if self.trusted:
                raise rules.ProtocolError("exception class not allowed")
            cls = RuntimeError
        args = [self.decode(a) for a in rules.expect_list(e.get("args", []))]
        try:
            exc = cls(*args)
        except Exception:  # noqa: BLE001  (a class whose constructor wants other arguments)
            exc = cls.__new__(cls)
            exc.args = tuple(args)
        raise exc

    # -- operations on the peer's objects ------------------------------------------------------------------
    def op(self, msg: dict):
        rep = self.request(msg)
        if self.out_hook is not None:
            self.out_hook(rep.get("out"), rep.get("err"))
        if "exc" in rep:
            self.raise_exc(rep["exc"])
        return self.decode(rep.get("ok"))
