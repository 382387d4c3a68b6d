"""The runner's copy of a pytest job's test file and the host's reading of its test names
(codegrpo/sandbox/verdict.py); the guards on a forged report are tests/hostile/test_harness_forgery.py."""

from __future__ import annotations

from codegrpo import sandbox as ex
from codegrpo.sandbox import client, verdict


def test_count_test_functions():
    assert ex.count_test_functions is client.count_test_functions is verdict.count_test_functions
    code = (
        "def test_a(): pass\nclass TestX:\n    def test_b(self): pass\n    def helper(self): pass\ndef helper(): pass\n"
    )
    assert ex.count_test_functions(code) == 2
    assert ex.count_test_functions("def (") == 0


def test_test_function_names_from_the_file():
    test_function_names = verdict.test_function_names
    assert client.test_function_names is test_function_names  # importable from client as before

    code = (
        "import sys\ndef test_a(): pass\nclass TestX:\n    def test_b(self): pass\n"
        "class TestInit:\n    def __init__(self): pass\n    def test_c(self): pass\n"
        "if sys:\n    def test_d(): pass\ntest_e = test_a\n"
    )
    allowed, required = test_function_names(code)
    assert required == {"test_a", "test_b"}
    assert allowed == {"test_a", "test_b", "test_c", "test_d", "test_e"}
    assert test_function_names("def test_(:\n") == (set(), set())


def test_the_runners_test_file():
    """KodCode's harness module: ``from solution import *`` then the tests; the canary is one more top-level test."""
    assert ex.kodcode_test_file("def test_a():\n    pass\n") == "from solution import *\ndef test_a():\n    pass\n"
    code = verdict.canary_test("test_cg_canary_ab")
    assert "def test_cg_canary_ab():" in code
    allowed, required = verdict.test_function_names(code)
    assert allowed == required == {"test_cg_canary_ab"}
