"""Hostile programs against the execution sandbox (Python under pytest, and C via run_binary).

Each case checks the effect on the host, so it fails if the protection is removed: a loopback listener
that must see no connection, host files that must not appear, a secret that must not be printed, a /proc
scan for marker processes that must find none, limits that must end the job by the expected signal.
"""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import threading
import time
import uuid

import pytest

from codegrpo import sandbox as ex
from codegrpo.sandbox.supervisor import TRUNC_MARK, UID_RANGE
from tests.hostile.conftest import scan_proc

pytestmark = pytest.mark.hostile

SECRET_NAME = "CODEGRPO_HOSTILE_TEST_SECRET"
SECRET_VALUE = "s3cr3t-" + uuid.uuid4().hex
os.environ[SECRET_NAME] = SECRET_VALUE  # set before any sandbox starts: it must not reach the jobs

TESTS_ONE = "def test_one():\n    assert True\n"


@pytest.fixture(scope="module", params=["server", "fresh"])
def sandbox(request):
    with ex.Sandbox(
        ex.SandboxLimits(wall_s=10, cpu_s=10, memory_mb=512, nproc=32, fsize_mb=4, output_bytes=4096),
        mode=request.param,
    ) as sb:
        yield sb


def _marker() -> str:
    return "cgmark" + uuid.uuid4().hex[:12]


def _marker_pids(marker: str) -> list[int]:
    """Host-side /proc scan: live processes whose command line contains the marker."""

    def command_and_state(pid: str) -> tuple[bytes, str]:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read()
        with open(f"/proc/{pid}/stat") as fh:
            return cmd, fh.read().rsplit(")", 1)[1].split()[0]

    return [pid for pid, (cmd, state) in scan_proc(command_and_state) if marker.encode() in cmd and state != "Z"]


def _sandbox_uid_pids() -> list[int]:
    lo, hi = UID_RANGE
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as fh:
                    st = fh.read()
            except OSError:
                continue
            uid = int(next(line for line in st.splitlines() if line.startswith("Uid:")).split()[1])
            state = next(line for line in st.splitlines() if line.startswith("State:")).split()[1]
            if lo <= uid < hi and state != "Z":
                out.append(int(name))
    return out


def _assert_no_leftovers(marker: str) -> None:
    deadline = time.monotonic() + 3  # the kernel may need a moment to tear down killed processes
    while _marker_pids(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marker_pids(marker) == [], f"processes with {marker} outlived the job"


class _Listener:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self._stop = True
        self.thread.join()
        self.sock.close()


# ---- network ---------------------------------------------------------------------------------------------
def test_python_network_to_loopback_blocked(sandbox):
    lst = _Listener()
    try:
        sol = (
            f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {lst.port}), timeout=2)\n"
            "    print('CONNECTED')\nexcept OSError as e:\n    print('BLOCKED', e)\n"
        )
        res = sandbox.run_tests(sol, "def test_out(capsys):\n    pass\n")
        # the import-time print goes to the job's stdout file
        time.sleep(0.3)
        assert lst.accepted == 0
        assert res.executed and "BLOCKED" in res.stdout and "CONNECTED" not in res.stdout
    finally:
        lst.close()


def test_c_network_to_loopback_blocked(sandbox):
    lst = _Listener()
    try:
        src = r"""
#include <arpa/inet.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
int main(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET; a.sin_port = htons(PORT); a.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) { puts("CONNECTED"); return 0; }
    perror("connect"); return 1;
}
""".replace("PORT", str(lst.port))
        res = sandbox.run_binary(src, timeout_s=10)
        time.sleep(0.3)
        assert lst.accepted == 0 and "CONNECTED" not in res.stdout and not res.ok
    finally:
        lst.close()


# ---- filesystem ------------------------------------------------------------------------------------------
@pytest.fixture()
def open_dir():
    """A world-writable directory beside the sandbox's scratch space (a /tmp sibling)."""
    d = tempfile.mkdtemp(prefix="codegrpo-hostile-")
    os.chmod(d, 0o777)
    yield d
    import shutil

    shutil.rmtree(d, ignore_errors=True)


def _targets(open_dir, repo_root):
    name = "hostile-" + uuid.uuid4().hex[:8]
    return [
        os.path.join(open_dir, name),
        os.path.join(str(repo_root), name),
        os.path.join(os.path.expanduser("~"), name),
        os.path.join("/tmp", name),
    ]


def test_python_writes_outside_scratch_blocked(sandbox, open_dir, repo_root):
    targets = _targets(open_dir, repo_root)
    sol = (
        "import os\nfor p in %r:\n    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n"
        "open('inside.txt', 'w').write('ok')\n" % (targets,)
    )
    res = sandbox.run_tests(sol, "def test_inside():\n    assert open('inside.txt').read() == 'ok'\n")
    assert res.all_passed  # writing to the scratch directory works
    for p in targets:
        assert not os.path.exists(p), p


def test_c_writes_outside_scratch_blocked(sandbox, open_dir, repo_root):
    targets = _targets(open_dir, repo_root)
    body = "".join(f'f = fopen("{p}", "w"); if (f) {{ fputs("x", f); fclose(f); }}\n' for p in targets)
    src = (
        "#include <stdio.h>\nint main(void) { FILE *f;\n"
        + body
        + 'f = fopen("inside.txt", "w"); if (!f) return 3; fputs("ok", f); fclose(f); return 0; }\n'
    )
    res = sandbox.run_binary(src, timeout_s=10)
    assert res.ok, res.stderr
    for p in targets:
        assert not os.path.exists(p), p


# ---- environment -----------------------------------------------------------------------------------------
def test_python_env_secrets_not_visible(sandbox):
    sol = (
        "import os, glob\nfound = [k for k, v in os.environ.items() if %r in v]\n"
        "for f in glob.glob('/proc/*/environ'):\n"
        "    try:\n        found += [f] if %r in open(f, 'rb').read().decode('latin1') else []\n"
        "    except OSError:\n        pass\n"
    ) % (SECRET_VALUE, SECRET_VALUE)
    res = sandbox.run_tests(
        sol,
        "def test_no_secret():\n    assert found == []\n"
        "def test_env_var_absent():\n    import os\n    assert %r not in os.environ\n" % SECRET_NAME,
    )
    assert res.all_passed, res.stdout
    assert SECRET_VALUE not in res.stdout + res.stderr


def test_c_env_secrets_not_visible(sandbox):
    src = (
        "#include <stdio.h>\nextern char **environ;\nint main(void){ for (char **e = environ; *e; e++) "
        "puts(*e); return 0; }\n"
    )
    res = sandbox.run_binary(src, timeout_s=10)
    assert res.ok and "PATH=" in res.stdout
    assert SECRET_VALUE not in res.stdout and SECRET_NAME not in res.stdout


# ---- processes -------------------------------------------------------------------------------------------
def test_python_fork_bomb_contained(sandbox):
    mark = _marker()
    sol = (
        "import os\nn = 0\nwhile True:\n    try:\n        pid = os.fork()\n    except OSError:\n"
        "        n += 1\n        if n > 200:\n            break\n        continue\n"
        "    if pid == 0:\n        try:\n            os.execv('/bin/sleep', [%r, '300'])\n"
        "        finally:\n            os._exit(0)\n"
    ) % mark
    res = sandbox.run_tests(sol, TESTS_ONE, timeout_s=4)
    assert res.executed  # fork failed at the process limit instead of exhausting the host
    _assert_no_leftovers(mark)
    assert _sandbox_uid_pids() == []


def test_c_fork_bomb_contained(sandbox):
    mark = _marker()
    src = (
        "#include <unistd.h>\nint main(void){ int fails = 0; while (fails < 200) { pid_t p = fork();"
        ' if (p < 0) { fails++; continue; } if (p == 0) { execl("/bin/sleep", "%s", "300", (char*)0);'
        " _exit(0); } } return 7; }\n"
    ) % mark
    res = sandbox.run_binary(src, timeout_s=4)
    assert res.returncode == 7  # fork() hit the process limit
    _assert_no_leftovers(mark)


def test_python_daemon_outliving_parent_is_killed(sandbox):
    mark = _marker()
    sol = (
        "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        os.execv('/bin/sleep', [%r, '300'])\n    os._exit(0)\n"
    ) % mark
    res = sandbox.run_tests(sol, TESTS_ONE)
    assert res.all_passed  # the job itself finished normally
    _assert_no_leftovers(mark)


def test_c_daemon_outliving_parent_is_killed(sandbox):
    mark = _marker()
    src = (
        "#include <unistd.h>\nint main(void){ if (fork() == 0) { setsid(); if (fork() == 0) {"
        ' execl("/bin/sleep", "%s", "300", (char*)0); } _exit(0); } return 0; }\n'
    ) % mark
    res = sandbox.run_binary(src, timeout_s=5)
    assert res.ok
    _assert_no_leftovers(mark)


def test_python_sleep_past_limit(sandbox):
    mark = _marker()
    sol = (
        "import subprocess, time\nsubprocess.Popen([%r, '300'], executable='/bin/sleep')\ndef f():\n    return 1\n"
    ) % mark
    tests = "import time\ndef test_slow():\n    time.sleep(60)\n"
    res = sandbox.run_tests(sol, tests, timeout_s=1.5)
    assert res.executed and res.timed_out and res.passed == 0
    _assert_no_leftovers(mark)


def test_c_sleep_past_limit(sandbox):
    res = sandbox.run_binary("#include <unistd.h>\nint main(void){ sleep(60); return 0; }\n", timeout_s=1)
    assert res.timed_out and not res.ok and res.signal == signal.SIGKILL


# ---- resources -------------------------------------------------------------------------------------------
def test_python_memory_bomb(sandbox):
    res = sandbox.run_tests("blob = bytearray(8 << 30)\n", TESTS_ONE)
    assert not res.executed and "MemoryError" in (res.error or "")
    res = sandbox.run_tests("chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))\n", TESTS_ONE)
    assert not res.executed and not res.timed_out


def test_c_memory_bomb(sandbox):
    src = (
        "#include <stdlib.h>\n#include <string.h>\nint main(void){ size_t n = (size_t)8 << 30;"
        " char *p = malloc(n); if (!p) return 9; memset(p, 1, n); return 0; }\n"
    )
    res = sandbox.run_binary(src, timeout_s=10)
    assert res.returncode == 9  # malloc refused by the address-space limit


def test_python_cpu_spin_hits_cpu_limit(sandbox):
    lim = ex.SandboxLimits(wall_s=30, cpu_s=1, memory_mb=512, nproc=32, fsize_mb=4)
    res = sandbox.run_tests("while True:\n    pass\n", TESTS_ONE, limits=lim)
    assert res.timed_out and not res.executed
    assert res.signal in (signal.SIGXCPU, signal.SIGKILL) and res.duration_s < 30


def test_c_cpu_spin_hits_cpu_limit(sandbox):
    lim = ex.SandboxLimits(wall_s=30, cpu_s=1, memory_mb=512, nproc=32, fsize_mb=4)
    res = sandbox.run_binary("int main(void){ volatile long i = 0; for(;;) i++; }\n", limits=lim)
    assert res.timed_out and res.signal == signal.SIGXCPU  # the CPU limit, not the 30 s wall clock


def test_python_huge_stdout(sandbox):
    res = sandbox.run_tests("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n", TESTS_ONE)
    # stopped at the file-size limit (Python ignores SIGXFSZ, so the write fails with EFBIG instead)
    assert not res.executed and not res.timed_out
    assert res.signal == signal.SIGXFSZ or "File too large" in (res.error or "")
    assert len(res.stdout) <= 4096 + len(TRUNC_MARK) and res.stdout.endswith(TRUNC_MARK)


def test_c_huge_stdout(sandbox):
    src = '#include <stdio.h>\nint main(void){ for(;;) fputs("yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\\n", stdout); }\n'
    res = sandbox.run_binary(src, timeout_s=10)
    assert not res.ok and res.signal == signal.SIGXFSZ and not res.timed_out
    assert len(res.stdout) <= 4096 + len(TRUNC_MARK)


def test_mechanism_in_use_is_reported():
    info = ex.sandbox_info()
    assert info.mechanism in ("bwrap", "rlimits") and info.reason
    if os.geteuid() == 0 and info.mechanism == "bwrap":
        assert info.private_uid
