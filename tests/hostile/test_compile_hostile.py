"""Hostile C through the structure reward (``sk2decompile_structure`` → the batch gcc engine).

A policy can emit C that makes gcc hang, read endless devices, expand macros exponentially, flood diagnostics
or fail in a header. Each such sample must score 0 once the engine's time limit ends it, the rest of the batch
must still score normally, no gcc/cc1 process may outlive the batch, and nothing may be written outside the
engine's scratch directory. Every case runs in both engine modes (``fast``: the cc1 syntax command first;
``exact``: the reference ``gcc -c``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from codegrpo.rewards import compute_score_batch
from codegrpo.rewards.compile import CompileEngine
from tests.hostile.conftest import scan_proc

pytestmark = [pytest.mark.hostile, pytest.mark.timeout(300)]

DS = "sk2decompile_structure"
TIMEOUT = 3.0  # engine time limit for these tests (the reference uses 5 s)
GOOD = "int func1(int var1) { return var1 + 1; }"
GT = "int func1(int var1) { return var1 + 1; }"  # placeholders in common: a compiling sample scores >= 1


def _blowup(depth: int = 40) -> str:
    lines = ["#define A0 var1 +"] + [f"#define A{i} A{i - 1} A{i - 1}" for i in range(1, depth + 1)]
    return "\n".join(lines) + f"\nint func1(int var1) {{ return A{depth} 0; }}\n"


def _diagnostic_flood(depth: int = 22) -> str:
    """2**depth stray '@' tokens: millions of error lines if gcc ran to the end."""
    lines = ["#define E0 @"] + [f"#define E{i} E{i - 1} E{i - 1}" for i in range(1, depth + 1)]
    return "\n".join(lines) + f"\nint func1(int var1) {{ E{depth} return var1; }}\n"


# name -> (solution, header); each must score 0
HOSTILE = {
    "include_dev_zero": ('#include "/dev/zero"\n' + GOOD, ""),
    "include_dev_urandom": ('#include "/dev/urandom"\n' + GOOD, ""),
    "include_dev_zero_in_header": (GOOD, '#include "/dev/zero"'),
    "include_self_recursive": ("#include __FILE__\n" + GOOD, ""),
    "macro_exponential": (_blowup(), ""),
    "diagnostic_flood": (_diagnostic_flood(), ""),
    "header_error_directive": (GOOD, "#error the header refuses to compile"),
    "include_missing_system_path": ('#include "/nonexistent/dir/x.h"\n' + GOOD, ""),
    "include_directory": ('#include "/"\n' + GOOD, ""),
    "pragma_poison": ("#pragma GCC poison var1\n" + GOOD, ""),
}


def _descendants_in(root: Path) -> list[str]:
    """Processes whose working directory is inside ``root`` (the engine runs every gcc inside its scratch)."""

    def cwd_and_command(pid: str) -> tuple[str, str]:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        return os.readlink(f"/proc/{pid}/cwd"), cmd

    return [f"{pid}: {cmd}" for pid, (cwd, cmd) in scan_proc(cwd_and_command) if cwd.startswith(str(root))]


def _left_running(root: Path, grace_s: float = 10.0) -> list[str]:
    """Processes still inside ``root`` after ``grace_s``: a SIGKILLed cc1 holding gigabytes needs a moment to
    be torn down, one that was never killed keeps running (an endless input never ends by itself)."""
    deadline = time.monotonic() + grace_s
    while True:
        left = _descendants_in(root)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _files_under(root: Path, skip: Path) -> list[str]:
    out = []
    for dirpath, _dirnames, filenames in os.walk(root):
        if Path(dirpath).resolve().is_relative_to(skip.resolve()):
            continue
        out.extend(os.path.join(dirpath, f) for f in filenames)
    return sorted(out)


@pytest.fixture(params=["fast", "exact"])
def sandbox(request, tmp_path, monkeypatch):
    """An engine whose scratch, the process cwd and TMPDIR are three separate empty folders."""
    scratch, cwd, tmp = tmp_path / "scratch", tmp_path / "cwd", tmp_path / "tmp"
    for d in (scratch, cwd, tmp):
        d.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("TMPDIR", str(tmp))
    engine = CompileEngine(workers=2, mode=request.param, scratch=str(scratch), timeout=TIMEOUT, cache_size=0)
    yield engine, tmp_path, scratch
    engine.close()


def test_hostile_sources_score_zero_and_leave_nothing(sandbox):
    engine, root, scratch = sandbox
    fifo = root / "fifo.h"
    os.mkfifo(fifo)  # an include that blocks forever without using memory
    hostile = dict(HOSTILE, include_fifo=(f'#include "{fifo}"\n' + GOOD, ""))
    names = list(hostile)
    sols = [hostile[n][0] for n in names] + [GOOD]
    infos = [{"header": hostile[n][1]} for n in names] + [{"header": ""}]
    out = compute_score_batch([DS] * len(sols), sols, [GT] * len(sols), infos, engine=engine)
    scores = {n: r["score"] for n, r in zip(names + ["control"], out)}
    # the control sample in the same batch still compiles: the hostile ones did not break the engine
    assert scores.pop("control") == 2.0, out[-1]
    assert scores == {n: 0.0 for n in names}, scores
    assert all(r["compile"] == 0.0 for r in out[:-1])
    # the endless inputs were ended by the engine's limits (time; memory for the endless devices)
    assert engine.stats.timeouts >= 1, engine.stats.as_dict()  # at least the fifo
    assert _left_running(scratch) == [], "gcc processes outlived the batch"
    # nothing written outside the scratch directory (cwd and TMPDIR stay empty)
    assert _files_under(root, scratch) == [str(fifo)]
    # inside the scratch: the workers' temp.c, and (exact mode) the temporaries of killed gcc drivers; no object
    work_files = [f for f in _files_under(scratch, root / "nowhere") if os.path.basename(f) != "temp.c"]
    assert not any(f.endswith(".o") for f in work_files), work_files
    engine.close()
    assert not any(scratch.iterdir()), list(scratch.iterdir())  # close() removes its scratch


def test_killed_compiles_leave_no_temporaries(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with CompileEngine(workers=2, mode="exact", scratch=str(scratch), timeout=TIMEOUT, cache_size=0) as engine:
        fifo = tmp_path / "never_written.h"
        os.mkfifo(fifo)  # cc1 blocks on it without using memory: only the time limit ends these compiles
        sols = [f'#include "{fifo}"\n/* {i} */\n' + GOOD for i in range(3)]
        out = compute_score_batch([DS] * 3, sols, [GT] * 3, [{"header": ""}] * 3, engine=engine)
        assert [r["score"] for r in out] == [0.0] * 3 and engine.stats.timeouts == 3
        assert _left_running(scratch) == []
        left = [f for f in _files_under(scratch, tmp_path / "nowhere") if os.path.basename(f) != "temp.c"]
        assert left == []


def test_engine_keeps_working_after_hostile_batches(sandbox):
    """Timeouts and killed process groups do not poison later batches (workers, scratch dirs, cache)."""
    engine, _, scratch = sandbox
    for _ in range(2):
        out = compute_score_batch(
            [DS] * 3,
            [HOSTILE["include_dev_zero"][0], GOOD, HOSTILE["macro_exponential"][0]],
            [GT] * 3,
            [{"header": ""}] * 3,
            engine=engine,
        )
        assert [r["score"] for r in out] == [0.0, 2.0, 0.0]
    assert _left_running(scratch) == []


_STDIN_SCRIPT = textwrap.dedent("""
    import json, sys
    from codegrpo.rewards import compute_score_batch
    from codegrpo.rewards.compile import CompileEngine
    with CompileEngine(workers=1, mode=sys.argv[1], scratch=sys.argv[2], timeout=10.0, cache_size=0) as eng:
        sols = ["#include </dev/stdin>\\n" + sys.argv[3], "\\n" + sys.argv[3]]
        out = compute_score_batch(["sk2decompile_structure"] * 2, sols, [sys.argv[3]] * 2, [{"header": ""}] * 2,
                                  engine=eng)
        print(json.dumps({"scores": [r["score"] for r in out], "timeouts": eng.stats.timeouts}))
""")


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_include_stdin_does_not_wait_on_the_parent_stdin(mode, tmp_path):
    """The scorer's own stdin is an open pipe nobody writes to (as in a Ray worker): gcc must not read it.
    ``#include </dev/stdin>`` sees an empty file, so the sample scores what its remaining text deserves."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _STDIN_SCRIPT, mode, str(tmp_path), GOOD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=120)  # stdin stays open until the script has finished
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    res = json.loads(out.strip().splitlines()[-1])
    assert res["timeouts"] == 0, res  # it did not block on the pipe until the time limit
    assert res["scores"][0] == res["scores"][1] == 2.0, res


# A gcc program (driver, cc1, as, ld ...; possibly with a target prefix or version suffix) as argv[0].
_GCC_PROGRAM = re.compile(r"^(?:[\w.]+-)*(?:gcc|cc|cc1|cc1plus|as|collect2|ld)(?:-[\d.]+)?$")


def _gcc_pids_in(root: Path) -> list[str]:
    """PIDs of the processes inside ``root`` that already *are* a gcc program. A process the engine has just
    forked is still a copy of this interpreter, and ``prlimit`` applies its limits before it execs gcc: only
    after that exec does the command line name gcc, so only then do its limits show the engine's."""
    out = []
    for entry in _descendants_in(root):
        pid, cmd = entry.split(": ", 1)
        if _GCC_PROGRAM.match(os.path.basename(cmd.split(" ", 1)[0])):
            out.append(pid)
    return out


def _memory_limit_bytes(pid: str) -> float:
    """The smaller of the address-space and data-size limits of a process (inf when unlimited)."""
    lim = float("inf")
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(("Max address space", "Max data size")):
            soft = line.split()[3]
            if soft != "unlimited":
                lim = min(lim, float(soft))
    return lim


def test_gcc_runs_under_a_memory_limit(tmp_path):
    import threading

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    limits: list[float] = []
    with CompileEngine(workers=1, mode="fast", scratch=str(scratch), timeout=3.0, cache_size=0) as engine:
        t = threading.Thread(target=engine.compile_sources, args=([HOSTILE["macro_exponential"][0]],))
        t.start()
        while t.is_alive() and not limits:
            for pid in _gcc_pids_in(scratch):
                try:
                    limits.append(_memory_limit_bytes(pid))
                except OSError:  # it ended meanwhile
                    pass
            time.sleep(0.05)
        t.join()
    assert limits, "no gcc process was seen"
    assert max(limits) <= 4 << 30, f"gcc memory limit: {max(limits)} bytes"
