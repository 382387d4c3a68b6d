"""codegrpo.rewards.c_syntax: the file-scope void-object check of the compile engine's fast mode, on sources gcc
itself judges (``gcc -fsyntax-only`` accepts each; ``gcc -c`` rejects exactly the void objects), and the per-thread
C parser."""

from __future__ import annotations

import shutil
import subprocess
import threading

import pytest

from codegrpo.rewards.c_syntax import c_parser, may_define_void_object

VOID_OBJECTS = [
    "void v;",
    "const void c, *p;",
    "typedef void T; typedef T U; U w;",
    "#ifdef X\nint a;\n#else\nvoid b;\n#endif\n",
]
NO_VOID_OBJECT = [
    "extern void e;",
    "void *p;",
    "void f(void);",
    "int f(void) { return 0; }",
    "typedef void T; T *q;",
    "struct s { int a; }; struct s x;",
    ";",
]


def test_void_objects_are_flagged_and_others_are_not():
    assert all(may_define_void_object(src.encode()) for src in VOID_OBJECTS)
    assert not any(may_define_void_object(src.encode()) for src in NO_VOID_OBJECT)


@pytest.mark.skipif(not shutil.which("gcc"), reason="needs gcc")
@pytest.mark.parametrize("src", VOID_OBJECTS + NO_VOID_OBJECT)
def test_gcc_rejects_exactly_the_flagged_sources(src, tmp_path):
    path = tmp_path / "t.c"
    path.write_text(src + "\n")
    syntax = subprocess.run(["gcc", "-fsyntax-only", str(path)], capture_output=True)
    full = subprocess.run(["gcc", "-c", str(path), "-o", str(tmp_path / "t.o")], capture_output=True)
    assert syntax.returncode == 0
    assert (full.returncode != 0) == may_define_void_object(src.encode())


def test_one_parser_per_thread():
    seen = []
    t = threading.Thread(target=lambda: seen.append(c_parser()))
    t.start()
    t.join()
    assert c_parser() is c_parser() and seen[0] is not c_parser()
