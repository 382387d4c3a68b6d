"""Write data/rehearsal/decompile-sample.jsonl: the (pseudo, source) sample that the rehearsal's data_generate reads.

The release LLM4Binary/decompile-ghidra-100k has columns ``instruction`` (the pseudo-code prompt) and ``output``
(the C source). The sample has exactly those columns, made from shipped real pairs: the first short BringUpBench
functions of data/sk2decompile/bringupbench-merged.O0.func_map.infer.jsonl (IDA pseudo-code, O0) without
preprocessor lines, one per distinct body. Usage: python scripts/make_rehearsal_sample.py [N] (default 8).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from codegrpo.data.generate import body_key

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "data/sk2decompile/bringupbench-merged.O0.func_map.infer.jsonl"
OUT = ROOT / "data/rehearsal/decompile-sample.jsonl"


def main(n: int = 8) -> int:
    rows, seen = [], set()
    for lineno, line in enumerate(SRC.read_text().splitlines(), 1):
        try:
            rec = json.loads(line)
            src, pseudo = rec["source"]["content"], rec["pseudo"]["content"]
        except (ValueError, KeyError, TypeError) as exc:
            raise SystemExit(f"{SRC}:{lineno}: field source.content / pseudo.content: {exc}") from exc
        key = body_key(src)
        if len(src) < 600 and key not in seen and "#" not in src:
            seen.add(key)
            prompt = "# This is the assembly code:\n" + pseudo.strip() + "\n# What is the source code?\n"
            rows.append({"instruction": prompt, "output": src})
        if len(rows) == n:
            break
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(OUT)
    print(f"{OUT}: {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 8))
