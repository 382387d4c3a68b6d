"""Header validation with the real gcc, and the Psyche-C adapter (absent, and present via stand-in scripts).

Its absence is tested directly (nothing on PATH, no build directory); the failure modes of the present
path are tested with small executable shell scripts named psychecgen / psychecsolver-exe on PATH, which
exercise the adapter's process handling (arguments, exit codes, missing output, timeouts with lingering
children) and its memo. The real tool is tested in tests/data/test_headers_psychec.py.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

import pytest

import codegrpo.data.headers as headers_mod
from codegrpo.contracts import gcc_version
from codegrpo.data.headers import PsycheC, gcc_syntax_check, run_limited, ToolTimeout, validate_headers
from codegrpo.data.ingest import ingest_dataset

HEADER = "typedef struct type1 { int field1; } type1;\nint var2;\n"
CODE = "int func1(type1 *var1) { return var1->field1 + var2; }"


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def fake_psychec(tmp_path, monkeypatch):
    """psychecgen copies the code to the .cstr file (and counts its runs); the solver writes a header that
    declares what CODE needs, unless the code contains BREAK (exit 3), SLEEP (hangs), NOFILE (writes nothing)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    count = tmp_path / "gen_runs"
    _script(
        bin_dir / "psychecgen",
        f'echo run >> "{count}"\n'
        '[ "$2" = "-o" ] || exit 64\n'
        f'grep -q SLEEP "$1" && {{ sleep 30 & echo $! > "{tmp_path}/bg_pid"; sleep 30; }}\n'
        'cp "$1" "$3"\n',
    )
    _script(
        bin_dir / "psychecsolver-exe",
        '[ "$1" = "-i" ] && [ "$3" = "-o" ] || exit 64\n'
        'grep -q BREAK "$2" && exit 3\n'
        'grep -q NOFILE "$2" && exit 0\n'
        f"printf '%s' '{HEADER}' > \"$4\"\n",
    )
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return count


def test_gcc_syntax_check():
    assert gcc_syntax_check(HEADER, CODE) == (True, "")
    ok, why = gcc_syntax_check("", CODE)
    assert not ok and "error" in why and "check.c" in why
    # the exact reward file layout: a None header is the literal text "None" -> always fails
    assert not gcc_syntax_check(None, CODE)[0]


@pytest.fixture
def no_psychec(monkeypatch, tmp_path):
    """Psyche-C absent: not on PATH and no build directory."""
    monkeypatch.setattr(headers_mod, "BUILD_DIRS", [])
    if PsycheC().available:
        pytest.fail("psychecgen / psychecsolver-exe are on the system PATH: these tests need them absent")


def test_psychec_absent(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    monkeypatch.setattr(headers_mod, "BUILD_DIRS", [])
    p = PsycheC()
    assert not p.available and p.generate(CODE) is None
    with pytest.raises(FileNotFoundError, match="not found"):
        PsycheC(gen=str(tmp_path / "psychecgen"))


def test_psychec_found_in_build_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "b").mkdir()
    for name in ("psychecgen", "psychecsolver-exe"):
        _script(tmp_path / "b" / name, "exit 0\n")
    monkeypatch.setattr(headers_mod, "BUILD_DIRS", [tmp_path / "b"])
    p = PsycheC()
    assert p.available and p.gen == str(tmp_path / "b" / "psychecgen")


def test_shipped_rl_headers(data_dir, no_psychec):
    recs = ingest_dataset(
        "rl",
        {"path": str(data_dir / "sk2decompile/sk2decompile-rl-examples.jsonl"), "shape": "verl", "stage": "skeleton"},
    ).records
    out, summary = validate_headers(recs, psychec=PsycheC(gen=None, solver=None), workers=2)
    assert summary["gcc_version"] == gcc_version()
    statuses = {r["index"]: r["header_status"] for r in out}
    missing = [i for i, s in statuses.items() if s == "missing"]
    assert missing == [87208]
    major = int(re.search(r"\) (\d+)\.", summary["gcc_version"]).group(1))
    if major < 14:  # gcc >= 14 turns implicit declarations into errors (spec 2.1)
        assert summary["status_counts"] == {"ok": 99, "regenerated": 0, "missing": 1, "fails": 0}
    assert summary["psyche_c_used"] is False and summary["psyche_c"]["available"] is False
    assert [r["id"] for r in out] == [r["id"] for r in recs]  # order kept, nothing removed


def test_fails_status_and_reason(no_psychec):
    recs = [
        {"id": "a", "header": HEADER, "target": CODE},
        {"id": "b", "header": "int var2;", "target": CODE},
        {"id": "c", "header": None, "target": CODE},
    ]
    out, summary = validate_headers(recs)
    assert [r["header_status"] for r in out] == ["ok", "fails", "missing"]
    assert "type1" in out[1]["header_reason"]
    assert summary["status_counts"] == {"ok": 1, "regenerated": 0, "missing": 1, "fails": 1}


def test_unchecked():
    out, summary = validate_headers([{"id": "a", "header": None, "target": "x"}], enabled=False)
    assert out[0]["header_status"] == "unchecked" and summary["status_counts"] == {"unchecked": 1}


def test_psychec_present_regenerates_and_memoises(fake_psychec):
    p = PsycheC(timeout=5)
    assert p.available and p.gen.endswith("psychecgen") and p.solver.endswith("psychecsolver-exe")
    recs = [{"id": str(i), "header": None, "target": CODE} for i in range(4)]
    recs.append({"id": "other", "header": None, "target": CODE + "\n"})
    out, summary = validate_headers(recs, psychec=p, workers=2)
    assert {r["header_status"] for r in out} == {"regenerated"}
    assert all(r["header"] == HEADER for r in out)
    # two distinct codes -> two runs; the identical ones come from the memo
    assert fake_psychec.read_text().count("run") == 2
    assert summary["psyche_c"]["runs"] == 2 and summary["psyche_c"]["memo_hits"] == 3
    assert summary["psyche_c_used"] is True


def test_psychec_failures_are_none(fake_psychec):
    p = PsycheC(timeout=5)
    assert p.generate(CODE + "/* BREAK */") is None
    assert p.generate(CODE + "/* NOFILE */") is None
    assert p.describe()["failures"] == {"psychecsolver exit 3": 1, "psychecsolver wrote no sample.h": 1}
    out, _ = validate_headers([{"id": "x", "header": None, "target": CODE + "/* BREAK */"}], psychec=p)
    assert out[0]["header_status"] == "missing" and "Psyche-C failed" in out[0]["header_reason"]
    # a generated header that does not make the code compile -> fails
    out, _ = validate_headers(
        [{"id": "y", "header": None, "target": "int g() { return undeclared_thing; }"}], psychec=p
    )
    assert out[0]["header_status"] == "fails"


def test_psychec_timeout_kills_process_group(fake_psychec):
    p = PsycheC(timeout=0.5)
    # the grandchild `sleep 30 &` holds the pipes; killing the group is what lets us return at all
    assert p.generate(CODE + "/* SLEEP */") is None
    assert p.describe()["failures"] == {"psychecgen timeout": 1}
    bg = int((fake_psychec.parent / "bg_pid").read_text())
    deadline = time.monotonic() + 10
    while _alive(bg) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(bg), "the background child of the timed-out tool survived"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_run_limited(tmp_path):
    assert run_limited(["sh", "-c", "echo hi"], 5).stdout == b"hi\n"
    with pytest.raises(ToolTimeout):
        run_limited(["sh", "-c", "sleep 10"], 0.2)
