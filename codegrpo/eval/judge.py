"""Readability by an LLM judge (SK²Decompile's GPT-judge table) over any OpenAI-compatible endpoint.

The judge sees one user message: the prompt template with ``[SRC]`` replaced by the original function (its
name replaced by ``func0``, as the reference does) and ``[DSRC]`` by the decompiled output (``decompile
error`` when empty). The template is a file: the project's default (``judge_prompt.txt`` beside this module)
or any other by path, e.g. the reference's ``sk2decompile/evaluation/template.txt``.

Answers are parsed as JSON after removing Markdown fences, with the reference's two repairs (append ``}``;
remove backslashes) and a last regular-expression look for ``"score": N``. A malformed answer is asked again
(up to ``max_retries``); transient HTTP failures (timeouts, connection errors, 408/409/429/5xx) are retried
with exponential backoff; an answer still unparseable scores 1, as the reference scores it, and is counted.
Every parsed answer is cached on disk keyed by sha256(model, prompt), so a rerun sends no request.
Nothing here runs unless a judge endpoint is configured (``evaluate.decompile.judge.enabled``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

log = logging.getLogger(__name__)

DEFAULT_PROMPT = Path(__file__).with_name("judge_prompt.txt")
_FENCE_RE = re.compile(r"```(?:json)?", re.IGNORECASE)
_SCORE_RE = re.compile(r'"?score"?\s*[:=]\s*"?([1-5])\b', re.IGNORECASE)


class JudgeError(RuntimeError):
    """The judge endpoint refused the request for a reason a retry cannot fix (bad key, unknown model...)."""


@dataclass
class JudgeSettings:
    base_url: str
    model: str
    api_key_env: str = "OPENAI_API_KEY"
    prompt_path: str = ""  # '' = the project's default prompt
    temperature: float = 0.0
    max_tokens: int = 8192
    timeout_s: float = 120.0
    max_retries: int = 5
    backoff_s: float = 1.0
    workers: int = 4
    cache_path: str = ""  # '' = no disk cache
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, cfg: Mapping) -> "JudgeSettings":
        known = {k: v for k, v in cfg.items() if k in cls.__dataclass_fields__}
        if not known.get("base_url") or not known.get("model"):
            raise ValueError("judge settings need base_url and model (evaluate.decompile.judge)")
        return cls(**known)

    def prompt_template(self) -> str:
        path = Path(self.prompt_path) if self.prompt_path else DEFAULT_PROMPT
        text = path.read_text(encoding="utf-8")
        for slot in ("[SRC]", "[DSRC]"):
            if slot not in text:
                raise ValueError(f"{path}: judge prompt lacks the {slot} placeholder")
        return text


def parse_answer(text: str) -> int | None:
    """The integer score 1-5 in a judge answer, or None when there is none."""
    body = _FENCE_RE.sub("", text or "").strip()
    for candidate in (body, body + "}", body.replace("\\", "")):
        try:
            obj = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            for key, value in obj.items():
                if "score" in str(key).lower():
                    try:
                        score = int(value)
                    except (TypeError, ValueError):
                        break
                    return score if 1 <= score <= 5 else None
        return None
    m = _SCORE_RE.search(body)
    return int(m.group(1)) if m else None


def build_prompt(template: str, source: str, decompiled: str, func_name: str = "func0") -> str:
    src = source.replace(func_name, "func0") if func_name and func_name != "func0" else source
    return template.replace("[SRC]", src).replace("[DSRC]", decompiled if decompiled.strip() else "decompile error")


class JudgeCache:
    """sha256(model, prompt) -> answer, persisted as one JSON object (rewritten atomically)."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self._lock = threading.Lock()
        self.data: dict[str, dict] = {}
        if self.path and self.path.is_file():
            try:
                self.data = json.loads(self.path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{self.path}: line {exc.lineno}: judge cache is not valid JSON: {exc.msg}") from exc

    @staticmethod
    def key(model: str, prompt: str) -> str:
        return hashlib.sha256(f"{model}\0{prompt}".encode()).hexdigest()

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self.data.get(key)

    def put(self, key: str, value: dict) -> None:
        with self._lock:
            self.data[key] = value

    def save(self) -> None:
        if self.path is None:
            return
        from codegrpo.io import write_json

        with self._lock:
            write_json(self.path, self.data, indent=None)


class Judge:
    def __init__(self, settings: JudgeSettings, client=None):
        self.settings = settings
        self.template = settings.prompt_template()
        self.cache = JudgeCache(settings.cache_path or None)
        if client is None:
            import openai

            client = openai.OpenAI(
                base_url=settings.base_url,
                api_key=os.environ.get(settings.api_key_env, "") or "none",
                timeout=settings.timeout_s,
                max_retries=0,
            )
        self.client = client
        self.requests = 0

    def _ask(self, prompt: str) -> str:
        import openai

        s = self.settings
        delay = s.backoff_s
        for attempt in range(s.max_retries + 1):
            try:
                self.requests += 1
                resp = self.client.chat.completions.create(
                    model=s.model,
                    messages=[{"role": "user", "content": prompt}],
                    temperature=s.temperature,
                    max_tokens=s.max_tokens,
                    **s.extra,
                )
                return resp.choices[0].message.content or ""
            except (
                openai.APITimeoutError,
                openai.APIConnectionError,
                openai.RateLimitError,
                openai.InternalServerError,
            ) as exc:
                err = exc
            except openai.APIStatusError as exc:
                if exc.status_code not in (408, 409):
                    raise JudgeError(f"judge endpoint {s.base_url}: HTTP {exc.status_code}: {exc.message}") from exc
                err = exc
            if attempt == s.max_retries:
                raise JudgeError(f"judge endpoint {s.base_url}: gave up after {attempt + 1} attempts: {err}") from err
            log.warning("judge request failed (%s); retry %d in %.1f s", type(err).__name__, attempt + 1, delay)
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    def score(self, source: str, decompiled: str, func_name: str = "func0") -> dict:
        """{"score", "answer", "parsed", "cached"} for one (original, decompiled) pair."""
        prompt = build_prompt(self.template, source, decompiled, func_name)
        key = JudgeCache.key(self.settings.model, prompt)
        hit = self.cache.get(key)
        if hit is not None:
            return {**hit, "cached": True}
        answer, score = "", None
        for _ in range(self.settings.max_retries + 1):  # a malformed answer is asked again
            answer = self._ask(prompt)
            score = parse_answer(answer)
            if score is not None:
                break
        out = {"score": score if score is not None else 1, "parsed": score is not None, "answer": answer}
        self.cache.put(key, out)
        return {**out, "cached": False}

    def score_many(self, pairs: Sequence[tuple[str, str, str]]) -> list[dict]:
        """Score (source, decompiled, func_name) triples with ``workers`` threads; saves the cache at the end."""
        import concurrent.futures as cf

        try:
            with cf.ThreadPoolExecutor(max_workers=max(1, self.settings.workers)) as pool:
                return list(pool.map(lambda p: self.score(*p), pairs))
        finally:
            self.cache.save()


def run_judge(
    result_path: str | os.PathLike,
    data_path: str | os.PathLike,
    out_path: str | os.PathLike,
    *,
    settings: JudgeSettings,
    cfg: Mapping | None = None,
    client=None,
    cache_dir: str | os.PathLike | None = None,
) -> dict:
    """Judge the outputs recorded in one re-executability result file; write per-level mean scores."""
    from codegrpo.eval import provenance
    from codegrpo.eval.decompile import LEVELS, load_eval_set, split_includes
    from codegrpo.io import write_json

    res = json.loads(Path(result_path).read_text(encoding="utf-8"))
    levels = tuple(res.get("levels") or LEVELS)
    tasks = {t.key: t for t in load_eval_set(data_path, levels, None, cache_dir)}
    pairs, keys = [], []
    for i, rec in enumerate(res.get("records", [])):
        key = f"{rec['task_id']}_{rec['opt']}"
        if key not in tasks:
            raise ValueError(f"{result_path}: record {i}: task {key} is not in {data_path}")
        t = tasks[key]
        src = split_includes(t.c_func)[1][0].strip()
        pairs.append((src, rec.get("output", ""), t.func_name))
        keys.append((rec["task_id"], rec["opt"]))
    judge = Judge(settings, client)
    answers = judge.score_many(pairs)
    by_level: dict[str, list[int]] = {}
    records = []
    for (task_id, opt), a in zip(keys, answers):
        by_level.setdefault(opt, []).append(a["score"])
        records.append({"task_id": task_id, "opt": opt, **a})
    scores = {lv: sum(v) / len(v) for lv, v in by_level.items()}
    result = {
        "kind": "judge",
        "benchmark": res.get("benchmark"),
        "system": res.get("system"),
        "label": res.get("label"),
        "judge_model": settings.model,
        "judge_endpoint": settings.base_url,
        "prompt": str(settings.prompt_path or DEFAULT_PROMPT),
        "source_result": str(result_path),
        "levels": [lv for lv in LEVELS if lv in scores],
        "judge": scores,
        "judge_avg": sum(scores.values()) / len(scores) if scores else 0.0,
        "unparsed": sum(not a["parsed"] for a in answers),
        "requests": judge.requests,
        "cached": sum(a["cached"] for a in answers),
        "provenance": provenance(settings.model, dict(cfg or {})),
        "records": records,
    }
    write_json(out_path, result)
    log.info(
        "judge %s: avg %.2f over %d outputs (%d cached, %d requests, %d unparsed)",
        res.get("system"),
        result["judge_avg"],
        len(answers),
        result["cached"],
        judge.requests,
        result["unparsed"],
    )
    return result
