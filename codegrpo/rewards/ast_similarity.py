"""``r_ast`` of the DHRCL reward (:mod:`codegrpo.rewards.dhrcl`): similarity of normalised Python ASTs against the
reference solution. Normalisation renames identifiers canonically (builtins kept), drops docstrings and compares
constants by type; similarity is ``1 - TED / max size`` (apted, trees capped at ``node_cap`` nodes) or the Jaccard
index of parent->child node-type pairs; 0 when the completion does not parse strictly."""

from __future__ import annotations

import ast
import builtins

from codegrpo.contracts import parse_python


_BUILTIN_NAMES = frozenset(dir(builtins))


class _Normalizer(ast.NodeTransformer):
    """Drop docstrings, rename identifiers canonically (order of first appearance), constants -> their type."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _canon(self, name: str) -> str:
        if name in _BUILTIN_NAMES:
            return name
        if name not in self.names:
            self.names[name] = f"v{len(self.names)}"
        return self.names[name]

    @staticmethod
    def _drop_docstring(body: list) -> list:
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(getattr(body[0], "value", None), ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            return body[1:] or [ast.Pass()]
        return body

    def _named(self, node):
        node.name = self._canon(node.name)
        if hasattr(node, "body") and isinstance(node.body, list):
            node.body = self._drop_docstring(node.body)
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _named

    def visit_Module(self, node):
        node.body = self._drop_docstring(node.body)
        return self.generic_visit(node)

    def visit_Name(self, node):
        node.id = self._canon(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self._canon(node.arg)
        node.annotation = self.visit(node.annotation) if node.annotation is not None else None
        return node

    def visit_alias(self, node):
        if node.asname:
            node.asname = self._canon(node.asname)
        return node

    def visit_Constant(self, node):
        node.value = type(node.value).__name__
        return node


def normalized_ast(code: str) -> ast.AST | None:
    """Strictly parsed and normalised AST, or None when the code does not parse."""
    try:
        tree = parse_python(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return _Normalizer().visit(tree)


def _label(node: ast.AST) -> str:
    name = type(node).__name__
    for attr in ("id", "arg", "name", "attr", "asname"):
        val = getattr(node, attr, None)
        if isinstance(val, str):
            return f"{name}:{val}"
    if isinstance(node, ast.Constant):
        return f"Constant:{node.value}"
    if isinstance(node, (ast.operator, ast.boolop, ast.cmpop, ast.unaryop, ast.expr_context)):
        return name
    return name


def _children(node: ast.AST) -> list[ast.AST]:
    return [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr_context)]


def _apted_tree(root: ast.AST, cap: int):
    """apted Tree of the AST, cut to the first ``cap`` nodes in preorder; returns (tree, size)."""
    from apted.helpers import Tree

    count = 0

    def build(node):
        nonlocal count
        count += 1
        kids = []
        for child in _children(node):
            if count >= cap:
                break
            kids.append(build(child))
        return Tree(_label(node), *kids)

    tree = build(root)
    return tree, count


def ast_similarity_ted(a: ast.AST, b: ast.AST, node_cap: int = 400) -> float:
    from apted import APTED

    ta, na = _apted_tree(a, node_cap)
    tb, nb = _apted_tree(b, node_cap)
    dist = APTED(ta, tb).compute_edit_distance()
    return max(0.0, 1.0 - dist / max(na, nb, 1))


def _edge_set(root: ast.AST) -> set[tuple[str, str]]:
    out = set()
    stack = [root]
    while stack:
        node = stack.pop()
        for child in _children(node):
            out.add((type(node).__name__, type(child).__name__))
            stack.append(child)
    return out


def ast_similarity_jaccard(a: ast.AST, b: ast.AST) -> float:
    ea, eb = _edge_set(a), _edge_set(b)
    if not ea and not eb:
        return 1.0
    return len(ea & eb) / len(ea | eb)


def r_ast(code: str, reference: str, method: str = "ted", node_cap: int = 400) -> float:
    cand = normalized_ast(code)
    if cand is None:
        return 0.0
    ref = normalized_ast(reference or "")
    if ref is None:
        return 0.0
    if method == "jaccard":
        return ast_similarity_jaccard(cand, ref)
    return ast_similarity_ted(cand, ref, node_cap)
