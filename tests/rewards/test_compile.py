"""Batch gcc engine: same outcomes as the reference procedure (both modes), dedupe, cache, timeouts, scratch."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time

import pytest

from codegrpo.contracts import gcc_version
from codegrpo.rewards.compile import CompileEngine, compile_reference, gcc_major, render_source

needs_gcc12 = pytest.mark.skipif(
    gcc_major() != 12, reason=f"outcomes pinned with gcc 12.2; found {gcc_version() or 'no gcc'}"
)


@pytest.fixture(scope="module")
def rows(data_dir):
    with open(data_dir / "sk2decompile" / "sk2decompile-rl-examples.jsonl", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


_PLACEHOLDER = re.compile(r"\b(func|type|var|field)(\d+)\b")

# snippets that parse but fail later in gcc -c (assembler, cgraph, attributes) or need other care
_LATE_FAILURES = [
    'void func_asm(void) { __asm__("not_an_instruction"); }',
    'void func_alias(void) __attribute__((alias("no_such_symbol")));',
    'int var_a asm("same_sym"); int var_b asm("same_sym"); int *func_q(void) { var_a = 1; var_b = 2; return &var_b; }',
    "static inline __attribute__((always_inline)) int func_ai(int); int func_use(void) { return func_ai(1); }",
    'void func_err(void) __attribute__((error("no"))); void func_call(void) { func_err(); }',
    'int var_s __attribute__((section("sec"))) = 1; const int var_t __attribute__((section("sec"))) = 2;',
    "void var_v;",  # file-scope objects of void type: rejected only when the tentative definition is emitted
    "const void var_c, *var_p;",
    "typedef void type_v; typedef type_v type_w; type_w var_w;",
    '#include <stdio.h>\nint func_p(void) { return printf("x"); }',
    "int caf\u00e9 = 1;",
    '#pragma GCC optimize("O2")\nint func_o(void) { return 0; }',
    "int func_b(int x) { return __builtin_popcount(x); }",
]


def mutate(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    kind = rng.randrange(13)
    if kind == 0 and len(lines) > 1:  # delete a line
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines)
    if kind == 1:  # rename placeholders (consistent)
        shift = rng.randrange(1, 4)
        return _PLACEHOLDER.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + shift}", text)
    if kind == 2:  # drop one ; or }
        idx = [i for i, c in enumerate(text) if c in ";}"]
        if idx:
            i = rng.choice(idx)
            return text[:i] + text[i + 1 :]
    if kind == 3:  # truncate
        return text[: rng.randrange(len(text) + 1)]
    if kind == 4 and len(lines) > 1:  # swap two lines
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    if kind == 5:  # an undeclared type
        return text.replace("int ", "type999 ", 1)
    if kind == 6:  # duplicate the whole function (redefinition)
        return text + "\n" + text
    if kind == 7:  # markdown fence around the answer
        return "```c\n" + text + "\n```"
    if kind == 8:  # a late-failure / special construct appended
        return text + "\n" + rng.choice(_LATE_FAILURES)
    if kind == 9:  # implicit declaration of an unknown callee (a warning under gcc 12)
        return text.replace("{", "{ func777(1);", 1)
    if kind == 10:  # stray token
        i = rng.randrange(len(text) + 1)
        return text[:i] + rng.choice([" @ ", " int ", " ( ", " 0x ", ' " ']) + text[i:]
    if kind == 11:  # a file-scope object of void type (directly or through a typedef)
        return rng.choice(["void var999;\n", "typedef void type999;\ntype999 var999;\n"]) + text
    return ""  # empty answer


def corpus(rows, n_per_row: int, seed: int = 1234):
    rng = random.Random(seed)
    out = []
    for r in rows:
        gt, header = r["reward_model"]["ground_truth"], r["extra_info"]["header"]
        out.append((header, gt))
        for _ in range(n_per_row):
            out.append((header, mutate(gt, rng)))
    out += [("", s) for s in _LATE_FAILURES]
    return out


@needs_gcc12
def test_engine_matches_reference_on_shipped_rows(rows):
    pairs = [(r["extra_info"]["header"], r["reward_model"]["ground_truth"]) for r in rows]
    expected = [compile_reference(h, s) for h, s in pairs]
    assert expected.count(1.0) == 99  # only the header-null row fails
    for mode in ("exact", "fast"):
        with CompileEngine(workers=2, mode=mode) as eng:
            assert eng.compile_pairs(*zip(*pairs)) == expected, mode


@needs_gcc12
@pytest.mark.slow
def test_fast_mode_equals_exact_on_mutation_corpus(rows):
    """The cheaper gcc mode is only used because it gives identical outcomes: checked here on ~500 sources."""
    pairs = corpus(rows, n_per_row=4)
    with CompileEngine(workers=2, mode="exact") as exact, CompileEngine(workers=2, mode="fast") as fast:
        a = exact.compile_pairs(*zip(*pairs))
        b = fast.compile_pairs(*zip(*pairs))
        diffs = [(p[1][-200:], x, y) for p, x, y in zip(pairs, a, b) if x != y]
        assert not diffs, diffs[:3]
        # the corpus exercises both outcomes and the confirmation path
        assert 0.2 < sum(a) / len(a) < 0.9
        assert fast.stats.exact_runs > 0 and fast.stats.syntax_runs > fast.stats.exact_runs
    # the engine's exact mode is the reference procedure (spot check against fresh temp dirs)
    rng = random.Random(7)
    for h, s in rng.sample(pairs, 40) + [("", x) for x in _LATE_FAILURES]:
        i = pairs.index((h, s))
        assert compile_reference(h, s) == a[i]


@needs_gcc12
def test_late_failures_are_confirmed_with_gcc_c():
    with CompileEngine(workers=2, mode="fast") as eng:
        got = eng.compile_sources(_LATE_FAILURES)
    assert got == [compile_reference("", s) for s in _LATE_FAILURES]
    assert got[:9] == [0.0] * 9  # these nine pass gcc -fsyntax-only but fail in gcc -c


def test_dedupe_and_cache():
    srcs = ["int a;", "int a;", "int b(void){return 0;}", "int (", "int a;"]
    with CompileEngine(workers=2, mode="fast", cache_size=8) as eng:
        assert eng.compile_sources(srcs) == [1.0, 1.0, 1.0, 0.0, 1.0]
        assert eng.stats.compiled == 3 and eng.stats.batch_duplicates == 2
        assert eng.compile_sources(srcs[:4]) == [1.0, 1.0, 1.0, 0.0]
        assert eng.stats.compiled == 3 and eng.stats.cache_hits == 4
        # LRU bound
        eng.compile_sources([f"int v{i};" for i in range(20)])
        assert len(eng._cache) == 8


def test_render_source_and_encoding():
    assert render_source(None, "x") == "None\n\nx"
    assert render_source("", "") == "\n\n"
    with CompileEngine(workers=1) as eng:
        assert eng.compile_sources(["int a; // \ud800"]) == [0.0]
        assert compile_reference("", "int a; // \ud800") == 0.0


def test_timeout_kills_gcc_and_scores_zero():
    # 4^10 initialisers: about 2 s of gcc on this machine, far beyond the 0.3 s limit used here
    bomb = "#define A0 1,\n" + "".join(f"#define A{i} A{i - 1} A{i - 1} A{i - 1} A{i - 1}\n" for i in range(1, 11))
    bomb += "int v[] = { A10 };\n"
    with CompileEngine(workers=1, mode="exact", timeout=0.3) as eng:
        t0 = time.monotonic()
        assert eng.compile_sources([bomb]) == [0.0]
        assert time.monotonic() - t0 < 5
        assert eng.stats.timeouts == 1
        scratch = eng._scratch_root
    assert not os.path.exists(scratch)


def test_scratch_is_in_ram_and_removed():
    with CompileEngine(workers=1) as eng:
        root = eng._scratch_root
        eng.compile_sources(["int a;"])
        if os.path.isdir("/dev/shm"):
            assert root.startswith("/dev/shm/")
        assert os.path.isdir(root)
    assert not os.path.exists(root)


def test_bad_mode():
    with pytest.raises(ValueError, match="exact"):
        CompileEngine(mode="turbo")


def test_engine_settings_precedence(tmp_path, monkeypatch):
    """explicit argument > the training run's settings.json > CODEGRPO_COMPILE_* > the schema's defaults."""
    from codegrpo import runsettings
    from codegrpo.rewards.compile import engine_from_env, engine_settings

    for k in [k for k in os.environ if k.startswith(("CODEGRPO_COMPILE_", runsettings.SETTINGS_ENV))]:
        monkeypatch.delenv(k)
    defaults = runsettings.schema_defaults("compile_reward")
    assert engine_settings() == {"scratch": None, **defaults}
    monkeypatch.setenv("CODEGRPO_COMPILE_MODE", "exact")
    monkeypatch.setenv("CODEGRPO_COMPILE_WORKERS", "3")
    monkeypatch.setenv("CODEGRPO_COMPILE_CACHE_SIZE", "10")
    with engine_from_env() as eng:
        assert (eng.mode, eng.workers, eng.cache_size) == ("exact", 3, 10)
    monkeypatch.setenv("CODEGRPO_COMPILE_MEMORY_MB", "0")
    with engine_from_env() as eng:
        assert "--as" not in " ".join(eng._limits)
    # inside a training run the run's compile_reward section wins over the environment
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {
                "fingerprint": "x",
                "settings": {"compile_reward": {"mode": "fast", "workers": 2, "cache_size": 7, "memory_mb": None}},
            }
        )
    )
    monkeypatch.setenv(runsettings.SETTINGS_ENV, str(path))
    got = engine_settings()
    assert (got["mode"], got["workers"], got["cache_size"], got["memory_mb"]) == ("fast", 2, 7, None)
    assert engine_settings({"mode": "exact"})["mode"] == "exact"  # an explicit argument wins
    monkeypatch.setenv("CODEGRPO_COMPILE_WORKERS", "x")
    with pytest.raises(ValueError, match="CODEGRPO_COMPILE_WORKERS"):
        engine_settings()


def test_killed_compiles_leave_no_temporaries():
    bomb = "#define A0 1,\n" + "".join(f"#define A{i} A{i - 1} A{i - 1} A{i - 1} A{i - 1}\n" for i in range(1, 11))
    bomb += "int v[] = { A10 };\n"
    with CompileEngine(workers=1, mode="exact", timeout=0.3, cache_size=0) as eng:
        assert eng.compile_sources([bomb, bomb + " "]) == [0.0, 0.0] and eng.stats.timeouts == 2
        left = [os.path.join(dp, f) for dp, _, fs in os.walk(eng._scratch_root) for f in fs if f != "temp.c"]
        assert left == []
        assert eng.compile_sources(["int ok;"]) == [1.0]  # the worker is fine afterwards


@pytest.mark.skipif(not shutil.which("prlimit"), reason="prlimit (util-linux) not installed")
def test_gcc_runs_under_a_memory_limit(tmp_path):
    big = tmp_path / "zeros.h"
    with open(big, "wb") as fh:  # sparse 1.5 GiB: cc1 needs that much memory to read it
        fh.truncate(3 << 29)
    src = f'#include "{big}"\nint func1(void) {{ return 0; }}\n'
    with CompileEngine(workers=1, mode="fast", memory_mb=256, cache_size=0) as eng:
        assert eng._limits[1:3] == [f"--as={256 << 20}", f"--fsize={256 << 20}"]
        t0 = time.monotonic()
        assert eng.compile_sources([src, "int ok;"]) == [0.0, 1.0]
        assert eng.stats.timeouts == 0  # ended by the limit, not by the clock
        assert time.monotonic() - t0 < 5
