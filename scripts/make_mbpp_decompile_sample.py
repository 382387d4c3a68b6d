#!/usr/bin/env python3
"""Write data/sk2decompile/mbpp-decompile-sample.json: a tiny MBPP-Decompile stand-in in the exact schema of
SK²Decompile's ``mbpp_normsrcpseudo.json`` (Decompile-Bench-Eval rows), for the CPU pipeline and the tests.

No MBPP-Decompile data ships with this project (the reference file is > 4 MiB and was not obtainable), so the
tasks below are written by this project: four small C functions in the style of MBPP problems (C translations
of short Python exercises), each with a ``main`` of C ``assert``s as its test, at O0-O3. What is real and what
is written by hand (see data/sk2decompile/PROVENANCE.md):

* ``func``, ``func_dep``, ``test``: written here; the gold function passes its test at every level;
* ``asm``: real ``objdump -d`` output of the function compiled with ``gcc -O<level> -c`` on this machine;
* ``ida_pseudo`` / ``ghidra_pseudo``: written by hand in the style of IDA Pro / Ghidra output for a stripped
  -O0 binary (``sub_`` / ``FUN_`` names), the same text at every level: no decompiler runs here;
* ``ida_asm`` / ``ghidra_asm``: empty (no disassembler of those tools here);
* ``ida_pseudo_norm``: ``ida_pseudo`` through this project's pseudo-code normaliser.

    .venv/bin/python scripts/make_mbpp_decompile_sample.py [--out data/sk2decompile/mbpp-decompile-sample.json]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEVELS = ("O0", "O1", "O2", "O3")

TASKS = [
    {
        "index": 0,
        "func_name": "smallest_num",
        "func_dep": "#include <stdio.h>",
        "func": """int smallest_num(int *xs, int n) {
  int best = xs[0];
  for (int i = 1; i < n; i++) {
    if (xs[i] < best) {
      best = xs[i];
    }
  }
  return best;
}
""",
        "test": """#include <assert.h>

int main(void) {
  int a[] = {10, 20, 1, 45, 99};
  int b[] = {1, 2, 3};
  int c[] = {45, 46, 50, 60};
  int d[] = {-4, 7, -9, 0};
  assert(smallest_num(a, 5) == 1);
  assert(smallest_num(b, 3) == 1);
  assert(smallest_num(c, 4) == 45);
  assert(smallest_num(d, 4) == -9);
  return 0;
}
""",
        "ida_pseudo": """__int64 __fastcall sub_1149(unsigned int *a1, int a2)
{
  unsigned int v3; // [rsp+14h] [rbp-8h]
  int i; // [rsp+18h] [rbp-4h]

  v3 = *a1;
  for ( i = 1; i < a2; ++i )
  {
    if ( (int)a1[i] < (int)v3 )
      v3 = a1[i];
  }
  return v3;
}
""",
        "ghidra_pseudo": """int FUN_00101149(int *param_1,int param_2)
{
  int local_10;
  int local_c;

  local_10 = *param_1;
  for (local_c = 1; local_c < param_2; local_c = local_c + 1) {
    if (param_1[local_c] < local_10) {
      local_10 = param_1[local_c];
    }
  }
  return local_10;
}
""",
    },
    {
        "index": 1,
        "func_name": "is_not_prime",
        "func_dep": "#include <math.h>",
        "func": """int is_not_prime(int n) {
  if (n < 2) {
    return 1;
  }
  for (int i = 2; i <= (int)sqrt((double)n); i++) {
    if (n % i == 0) {
      return 1;
    }
  }
  return 0;
}
""",
        "test": """#include <assert.h>

int main(void) {
  assert(is_not_prime(2) == 0);
  assert(is_not_prime(10) == 1);
  assert(is_not_prime(35) == 1);
  assert(is_not_prime(37) == 0);
  assert(is_not_prime(1) == 1);
  return 0;
}
""",
        "ida_pseudo": """__int64 __fastcall sub_1169(int a1)
{
  int i; // [rsp+1Ch] [rbp-4h]

  if ( a1 <= 1 )
    return 1LL;
  for ( i = 2; i <= (int)sqrt((double)a1); ++i )
  {
    if ( !(a1 % i) )
      return 1LL;
  }
  return 0LL;
}
""",
        "ghidra_pseudo": """undefined8 FUN_00101169(int param_1)
{
  double dVar1;
  int local_c;

  if (param_1 < 2) {
    return 1;
  }
  local_c = 2;
  while( true ) {
    dVar1 = sqrt((double)param_1);
    if ((int)dVar1 < local_c) {
      return 0;
    }
    if (param_1 % local_c == 0) break;
    local_c = local_c + 1;
  }
  return 1;
}
""",
    },
    {
        "index": 2,
        "func_name": "count_char",
        "func_dep": "#include <string.h>",
        "func": """int count_char(const char *s, char c) {
  int count = 0;
  size_t len = strlen(s);
  for (size_t i = 0; i < len; i++) {
    if (s[i] == c) {
      count++;
    }
  }
  return count;
}
""",
        "test": """#include <assert.h>

int main(void) {
  assert(count_char("abcc", 'c') == 2);
  assert(count_char("ababca", 'a') == 3);
  assert(count_char("mnmm0pm", 'm') == 4);
  assert(count_char("", 'x') == 0);
  return 0;
}
""",
        "ida_pseudo": """__int64 __fastcall sub_1189(const char *a1, char a2)
{
  unsigned int v3; // [rsp+1Ch] [rbp-14h]
  size_t i; // [rsp+20h] [rbp-10h]
  size_t v5; // [rsp+28h] [rbp-8h]

  v3 = 0;
  v5 = strlen(a1);
  for ( i = 0LL; i < v5; ++i )
  {
    if ( a2 == a1[i] )
      ++v3;
  }
  return v3;
}
""",
        "ghidra_pseudo": """int FUN_00101189(char *param_1,char param_2)
{
  size_t sVar1;
  int local_1c;
  ulong local_18;

  local_1c = 0;
  sVar1 = strlen(param_1);
  for (local_18 = 0; local_18 < sVar1; local_18 = local_18 + 1) {
    if (param_2 == param_1[local_18]) {
      local_1c = local_1c + 1;
    }
  }
  return local_1c;
}
""",
    },
    {
        "index": 3,
        "func_name": "sum_digits",
        "func_dep": "#include <stdlib.h>",
        "func": """long sum_digits(long n) {
  long total = 0;
  n = labs(n);
  while (n > 0) {
    total += n % 10;
    n /= 10;
  }
  return total;
}
""",
        "test": """#include <assert.h>

int main(void) {
  assert(sum_digits(345) == 12);
  assert(sum_digits(12) == 3);
  assert(sum_digits(97) == 16);
  assert(sum_digits(-505) == 10);
  assert(sum_digits(0) == 0);
  return 0;
}
""",
        "ida_pseudo": """__int64 __fastcall sub_1149(__int64 a1)
{
  __int64 v2; // [rsp+8h] [rbp-18h]
  __int64 v3; // [rsp+18h] [rbp-8h]

  v3 = 0LL;
  v2 = labs(a1);
  while ( v2 > 0 )
  {
    v3 += v2 % 10;
    v2 /= 10LL;
  }
  return v3;
}
""",
        "ghidra_pseudo": """long FUN_00101149(long param_1)
{
  long local_20;
  long local_10;

  local_10 = 0;
  local_20 = labs(param_1);
  for (; 0 < local_20; local_20 = local_20 / 10) {
    local_10 = local_10 + local_20 % 10;
  }
  return local_10;
}
""",
    },
]


def disassemble(task: dict, level: str, work: Path) -> str:
    """``objdump -d`` of the function alone, compiled with ``gcc -<level> -c``."""
    src = work / f"{task['func_name']}_{level}.c"
    obj = src.with_suffix(".o")
    src.write_text(f"{task['func_dep']}\n{task['func']}", encoding="utf-8")
    subprocess.run(["gcc", f"-{level}", "-c", str(src), "-o", str(obj)], check=True, capture_output=True)
    out = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", f"--disassemble={task['func_name']}", str(obj)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    body = out[out.index(f"<{task['func_name']}>:") :]
    return f"{task['func_name']}:\n" + "\n".join(line.strip() for line in body.splitlines()[1:] if line.strip())


def check_gold(task: dict, work: Path) -> None:
    """The gold function passes its test (sk2decompile's program layout, gcc -O0 ... -lm)."""
    prog = work / f"{task['func_name']}_test.c"
    exe = prog.with_suffix("")
    prog.write_text(f"{task['func_dep']}\n{task['func']}\n{task['test']}", encoding="utf-8")
    subprocess.run(["gcc", "-O0", str(prog), "-o", str(exe), "-lm"], check=True, capture_output=True)
    subprocess.run([str(exe)], check=True, timeout=10)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "data" / "sk2decompile" / "mbpp-decompile-sample.json"))
    args = ap.parse_args(argv)

    from codegrpo.data import normalize
    from codegrpo.io import write_json

    exe = normalize.find_clang_format()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for task in TASKS:
            check_gold(task, work)
            norm, reason = normalize.normalize_pseudo(task["ida_pseudo"], exe=exe, timeout=10.0)
            if norm is None:
                raise SystemExit(f"task {task['index']}: the normaliser dropped ida_pseudo: {reason}")
            for level in LEVELS:
                rows.append(
                    {
                        "index": task["index"],
                        "func_name": task["func_name"],
                        "func_dep": task["func_dep"],
                        "func": task["func"],
                        "test": task["test"],
                        "opt": level,
                        "language": "c",
                        "asm": disassemble(task, level, work),
                        "ida_asm": "",
                        "ida_pseudo": task["ida_pseudo"],
                        "ghidra_asm": "",
                        "ghidra_pseudo": task["ghidra_pseudo"],
                        "ida_pseudo_norm": norm,
                    }
                )
    write_json(args.out, rows)
    print(f"wrote {len(rows)} rows ({len(TASKS)} tasks x {len(LEVELS)} levels) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
