"""Proxies for objects that live on the other side of the sandbox's solution boundary (standard library only).

Part of :mod:`codegrpo.sandbox.rpc` (its docstring describes the protocol). :class:`SolutionObject` is an object
of the solution in the runner, :class:`PeerObject` an object of the runner in the solution's process; every
operation on one is a request to the other side through its endpoint (:mod:`codegrpo.sandbox.rpc_endpoint`).
The runner decides comparisons with plain values itself (``_compare``, ``_plain_value``), and in-place mutation
of arguments made on the other side is copied back after a call (``_copy_back``).

Runs inside the sandbox: loaded by file path there (:mod:`codegrpo.sandbox.rpc` loads it after
:mod:`~codegrpo.sandbox.rpc_rules`).
"""

from __future__ import annotations

import sys

if __package__:
    from codegrpo.sandbox import rpc_rules as rules
else:  # loaded by file path inside the sandbox, after rpc_rules (codegrpo.sandbox.rpc)
    rules = sys.modules["_codegrpo_rpc_rules"]


class Remote:
    """An object of the other process. Every operation is a request; the runner decides comparisons with plain
    values itself (see the module docstring)."""

    __slots__ = ("_ep", "_h", "__weakref__")

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        ep = object.__getattribute__(self, "_ep")
        return ep.op({"op": "getattr", "h": object.__getattribute__(self, "_h"), "name": name})

    def __setattr__(self, name, value):
        ep = object.__getattribute__(self, "_ep")
        ep.op({"op": "setattr", "h": object.__getattribute__(self, "_h"), "name": name, "value": ep.encode(value)})

    def __instancecheck__(self, obj):
        ep = object.__getattribute__(self, "_ep")
        return (
            bool(ep.op({"op": "isinstance", "h": object.__getattribute__(self, "_h"), "value": ep.encode(obj)})) is True
        )

    def __contains__(self, item):
        data = _plain_value(self)
        if data is not rules.NO_DATA and not isinstance(item, Remote):
            return item in data
        return bool(_dunder(self, "__contains__", item)) is True

    def __call__(self, *args, **kwargs):
        ep = object.__getattribute__(self, "_ep")
        msg = {
            "op": "call",
            "h": object.__getattribute__(self, "_h"),
            "args": [ep.encode(a) for a in args],
            "kwargs": {str(k): ep.encode(v) for k, v in kwargs.items()},
        }
        rep = ep.request(msg)
        if ep.out_hook is not None:
            ep.out_hook(rep.get("out"), rep.get("err"))
        _copy_back(ep, args, kwargs, rep.get("mut"))
        if "exc" in rep:
            ep.raise_exc(rep["exc"])
        return ep.decode(rep.get("ok"))

    def __repr__(self):
        try:
            return str(_dunder(self, "__repr__"))[:2000]
        except (rules.SolutionDied, rules.ProtocolError):
            return "<solution object>"

    def __str__(self):
        got = _dunder(self, "__str__")
        return got if type(got) is str else str(got)

    def __iter__(self):
        it = _dunder(self, "__iter__")
        return it if isinstance(it, Remote) else iter(it)

    def __next__(self):
        return _dunder(self, "__next__")

    def __enter__(self):
        return _dunder(self, "__enter__")

    def __exit__(self, *exc):
        _dunder(self, "__exit__", None, None, None)
        return False  # the solution never suppresses the test's exceptions


def _make_forwarder(name):
    def f(self, *args):
        return _dunder(self, name, *args)

    f.__name__ = name
    return f


def _make_comparison(name):
    def f(self, other):
        return _compare(self, name, other)

    f.__name__ = name
    return f


def _make_conversion(name, ok, message):
    """``name`` answered by the other side; an answer that is not ``ok`` is the TypeError ``message``."""

    def f(self):
        got = _dunder(self, name)
        if not ok(got):
            raise TypeError(message)
        return got

    f.__name__ = name
    return f


def _is(kind):
    return lambda got: type(got) is kind


_CONVERSIONS = {
    "__bool__": (_is(bool), "__bool__ should return bool"),
    "__len__": (lambda got: type(got) is int and got >= 0, "__len__ should return a non-negative int"),
    "__hash__": (_is(int), "__hash__ should return an int"),
    "__int__": (_is(int), "__int__ returned non-int"),
    "__float__": (_is(float), "__float__ returned non-float"),
    "__index__": (_is(int), "__index__ returned non-int"),
}


COMPARISONS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__")
for _n in COMPARISONS:
    setattr(Remote, _n, _make_comparison(_n))
for _n, (_ok, _message) in _CONVERSIONS.items():
    setattr(Remote, _n, _make_conversion(_n, _ok, _message))

for _n in (
    "__getitem__",
    "__setitem__",
    "__delitem__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__invert__",
    "__reversed__",
    "__round__",
    "__format__",
):
    setattr(Remote, _n, _make_forwarder(_n))
for _n in rules.BINARY:
    setattr(Remote, f"__{_n}__", _make_forwarder(f"__{_n}__"))
    setattr(Remote, f"__r{_n}__", _make_forwarder(f"__r{_n}__"))


class SolutionObject(Remote):
    """Runner side: an object of the solution (not plain data)."""

    __slots__ = ()


def _dunder(self, name, *args):
    ep = object.__getattribute__(self, "_ep")
    return ep.op(
        {"op": "dunder", "h": object.__getattribute__(self, "_h"), "name": name, "args": [ep.encode(a) for a in args]}
    )


def _plain_value(self):
    """The plain value of a peer object, asked for without showing what it will be compared with."""
    ep = object.__getattribute__(self, "_ep")
    return ep.op({"op": "data", "h": object.__getattribute__(self, "_h")})


def _compare(self, name, other):
    import operator

    if isinstance(other, Remote):  # two objects of the other side: their own comparison decides
        return _dunder(self, name, other)
    data = _plain_value(self)
    if data is rules.NO_DATA:
        return {"__eq__": False, "__ne__": True}.get(name, NotImplemented)
    return getattr(operator, name.strip("_"))(data, other)


def _copy_back(ep, args, kwargs, mut) -> None:
    """In-place mutation of list/dict/set/bytearray arguments, made in the other process, applied here."""
    if not isinstance(mut, dict):
        return
    for key, enc in mut.items():
        if type(key) is not str:
            continue
        if key.isdigit():
            i = int(key)
            if i >= len(args):
                continue
            orig = args[i]
        elif key.startswith("k:") and key[2:] in kwargs:
            orig = kwargs[key[2:]]
        else:
            continue
        _merge(orig, ep.decode(enc))


def _merge(orig, new) -> None:
    if type(orig) is list and type(new) is list:
        if len(orig) == len(new):
            for i, (a, b) in enumerate(zip(orig, new)):
                if type(a) in (list, dict, set, bytearray) and type(a) is type(b):
                    _merge(a, b)
                elif not (type(a) is type(b) and a == b):
                    orig[i] = b
        else:
            orig[:] = new
    elif type(orig) is dict and type(new) is dict:
        for k in [k for k in orig if k not in new]:
            del orig[k]
        for k, b in new.items():
            a = orig.get(k)
            if k in orig and type(a) in (list, dict, set, bytearray) and type(a) is type(b):
                _merge(a, b)
            else:
                orig[k] = b
    elif type(orig) is set and type(new) is set:
        orig.clear()
        orig.update(new)
    elif type(orig) is bytearray and type(new) is bytearray:
        orig[:] = new


class PeerObject(Remote):
    """Candidate side: an object of the runner given to the solution (a callback, a test's own object)."""

    __slots__ = ()

    def __contains__(self, item):
        return bool(_dunder(self, "__contains__", item))

    __hash__ = Remote.__hash__


for _n in COMPARISONS:  # the runner's object compares itself, whatever it is compared with
    setattr(PeerObject, _n, _make_forwarder(_n))


def has_proxy(v) -> bool:
    """Whether a decoded value is (or holds, in a list or tuple) a proxy of the other side."""
    if isinstance(v, Remote):
        return True
    if type(v) in (list, tuple):
        return any(has_proxy(x) for x in v)
    return False
