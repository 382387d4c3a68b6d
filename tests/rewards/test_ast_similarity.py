"""r_ast (codegrpo.rewards.ast_similarity) on a real KodCode record: identity, canonical renaming, dropped docstrings,
constants by type, a failed parse, and the node cap."""

from __future__ import annotations

from codegrpo.rewards import ast_similarity as a


def test_r_ast_identity_renaming_and_failure(record):
    ref = record["solution"]
    assert a.r_ast(ref, ref) == 1.0
    renamed = ref.replace("first_str", "aa").replace("second_str", "bb").replace("result", "out")
    renamed = renamed.replace(
        '"""\n    Interleave the characters from two strings and return the result.\n    """\n', ""
    )
    assert a.r_ast(renamed, ref) == 1.0  # identifiers renamed canonically, docstring dropped
    assert a.r_ast(renamed, ref, method="jaccard") == 1.0
    other = "def interleave_strings(a, b):\n    return ''.join(x + y for x, y in zip(a, b)) + a[len(b):] + b[len(a):]\n"
    s = a.r_ast(other, ref)
    assert 0.0 < s < 1.0
    assert 0.0 < a.r_ast(other, ref, method="jaccard") < 1.0
    assert a.r_ast("def f(:\n", ref) == 0.0  # strict parse fails
    const = ref.replace("0, 0", "5, 7")
    assert a.r_ast(const, ref) == 1.0  # constants compared by type


def test_r_ast_node_cap_bounds_the_trees(record):
    ref = record["solution"]
    big = "\n".join(f"v{i} = {i} + {i}" for i in range(400))
    capped = a.r_ast(big, ref, node_cap=20)
    assert 0.0 <= capped <= 1.0
    tree, n = a._apted_tree(a.normalized_ast(big), 20)
    assert n == 20
