"""C sources through tree-sitter-c: this thread's parser (:func:`c_parser`, shared by the SK²Decompile rewards and
the data stage's obfuscation) and the check of :mod:`codegrpo.rewards.compile`'s fast mode for file-scope objects
of void type (:func:`may_define_void_object`).

``void v;`` (also ``const void v;``, ``typedef void T; T v;``) at file scope passes ``gcc -fsyntax-only`` but fails
in ``gcc -c`` when the tentative definition is emitted. Sources that may declare such an object are confirmed with
gcc -c; the check parses the source with tree-sitter-c and is conservative (anything it cannot classify counts).
"""

from __future__ import annotations

import threading

_ts_local = threading.local()
_SAFE_TOP = frozenset(
    {
        "function_definition",
        "preproc_def",
        "preproc_function_def",
        "preproc_include",
        "preproc_call",
        "comment",
        "struct_specifier",
        "union_specifier",
        "enum_specifier",
        "primitive_type",
        "sized_type_specifier",
    }
)
_CONTAINERS = frozenset({"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"})
_UNWRAP = frozenset({"init_declarator", "parenthesized_declarator", "attributed_declarator"})


def c_parser():
    """This thread's tree-sitter C parser (parsers are not thread-safe; one per thread, created on first use)."""
    p = getattr(_ts_local, "parser", None)
    if p is None:
        import tree_sitter
        import tree_sitter_c

        p = tree_sitter.Parser(tree_sitter.Language(tree_sitter_c.language()))
        _ts_local.parser = p
    return p


def _top_level(node):
    """File-scope nodes, looking through #if/#ifdef/#else blocks (their conditions and names skipped)."""
    for i, child in enumerate(node.children):
        if not child.is_named:
            continue
        field = node.field_name_for_child(i)
        if node.type in _CONTAINERS and field in ("condition", "name"):
            continue
        if child.type in _CONTAINERS:
            yield from _top_level(child)
        else:
            yield child


def _declared_name_node(decl):
    while decl is not None and decl.type in _UNWRAP:
        inner = decl.child_by_field_name("declarator")
        if inner is None:  # parenthesized_declarator / attributed_declarator hold the declarator unnamed
            named = [c for c in decl.children if c.is_named and c.type not in ("attribute_specifier", "attribute")]
            inner = named[0] if named else None
        decl = inner
    return decl


def may_define_void_object(data: bytes) -> bool:
    """True unless the source surely has no file-scope, non-extern object declaration of (possibly typedef'd) void."""
    root = c_parser().parse(data).root_node
    typedefs: dict[bytes, object] = {}
    nodes = list(_top_level(root))
    for node in nodes:  # typedef names first (a typedef after its use does not make the use void in C)
        if node.type == "type_definition":
            base = node.child_by_field_name("type")
            for i, c in enumerate(node.children):
                if node.field_name_for_child(i) != "declarator":
                    continue
                if c.type == "type_identifier":
                    typedefs[c.text] = base
                else:  # pointer / array / function typedefs are never void objects
                    inner = c
                    while inner is not None and inner.type != "type_identifier":
                        inner = inner.child_by_field_name("declarator")
                    if inner is not None:
                        typedefs[inner.text] = "nonvoid"

    def is_void(tnode, depth=0) -> bool:
        if tnode is None or depth > 32:
            return True
        if tnode == "nonvoid":
            return False
        t = tnode.type
        if t == "primitive_type":
            return tnode.text == b"void"
        if t in ("sized_type_specifier", "struct_specifier", "union_specifier", "enum_specifier"):
            return False
        if t == "type_identifier":
            return is_void(typedefs.get(tnode.text), depth + 1)
        return True

    for node in nodes:
        t = node.type
        if t in _SAFE_TOP or t == "type_definition":
            continue
        if t == "expression_statement" and node.named_child_count == 0:
            continue  # a stray ';'
        if t != "declaration":
            return True  # ERROR nodes, file-scope statements: gcc and tree-sitter disagree, be conservative
        if any(c.type == "storage_class_specifier" and c.text == b"extern" for c in node.children):
            continue
        if not is_void(node.child_by_field_name("type")):
            continue
        for i, c in enumerate(node.children):
            if node.field_name_for_child(i) != "declarator":
                continue
            inner = _declared_name_node(c)
            if inner is None or inner.type not in ("function_declarator", "pointer_declarator"):
                return True
    return False
