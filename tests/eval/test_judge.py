"""LLM readability judge: the openai client against a loopback OpenAI-compatible fake server."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from codegrpo.eval import judge as j


def good(score: int) -> str:
    return json.dumps({"score": score, "rationale": "fine"})


class FakeServer:
    """POST /v1/chat/completions; each request takes the next scripted action (default: a good answer)."""

    def __init__(self):
        self.script: list = []
        self.prompts: list[str] = []
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.prompts.append(body["messages"][0]["content"])
                action = outer.script.pop(0) if outer.script else ("answer", good(4))
                if action[0] == "hang":
                    outer.release.wait(60)
                    return
                if action[0] == "status":
                    self.send_response(action[1])
                    payload = json.dumps({"error": {"message": f"scripted {action[1]}"}}).encode()
                else:
                    self.send_response(200)
                    payload = json.dumps(
                        {
                            "id": "x",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": action[1]},
                                }
                            ],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        }
                    ).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def settings(server, tmp_path, **kw):
    kw = {"model": "judge-model", "timeout_s": 30.0, **kw}
    return j.JudgeSettings(
        base_url=server.url,
        api_key_env="CODEGRPO_TEST_JUDGE_KEY",
        backoff_s=0.0,
        workers=1,
        cache_path=str(tmp_path / "cache.json"),
        **kw,
    )


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"score": 4, "rationale": "ok"}', 4),
        ('```json\n{"Score": 3}\n```', 3),
        ('{"score": 5, "rationale": "missing brace"', 5),
        ('{"score": 2, "rationale": "bad escape \\q"}', 2),
        ('The answer is "score": 3 overall', 3),
        ('{"score": 9}', None),
        ('{"score": "high"}', None),
        ("no idea", None),
        ("", None),
    ],
)
def test_parse_answer(text, expected):
    assert j.parse_answer(text) == expected


def test_prompt_fills_slots_and_renames(tmp_path):
    t = j.JudgeSettings(base_url="x", model="m").prompt_template()
    p = j.build_prompt(t, "int add(int a) { return add(a); }", "", func_name="add")
    assert "int func0(int a) { return func0(a); }" in p and "decompile error" in p
    bad = tmp_path / "t.txt"
    bad.write_text("only [SRC]")
    with pytest.raises(ValueError, match=r"t.txt: judge prompt lacks the \[DSRC\] placeholder"):
        j.JudgeSettings(base_url="x", model="m", prompt_path=str(bad)).prompt_template()


def test_retries_transient_errors_then_caches(server, tmp_path):
    server.script = [("status", 429), ("status", 500), ("answer", good(5))]
    judge = j.Judge(settings(server, tmp_path))
    out = judge.score_many([("int func0(void) { return 1; }", "int func0(void) { return 1; }", "func0")])
    assert out[0]["score"] == 5 and out[0]["parsed"] and not out[0]["cached"]
    assert judge.requests == 3 and len(server.prompts) == 3
    again = j.Judge(settings(server, tmp_path))  # a rerun: everything from the cache
    out2 = again.score_many([("int func0(void) { return 1; }", "int func0(void) { return 1; }", "func0")])
    assert out2[0]["score"] == 5 and out2[0]["cached"] and again.requests == 0 and len(server.prompts) == 3
    other = j.Judge(settings(server, tmp_path, model="other-model"))  # the model is part of the key
    other.score_many([("int func0(void) { return 1; }", "int func0(void) { return 1; }", "func0")])
    assert other.requests == 1


def test_malformed_answers_are_asked_again_then_score_1(server, tmp_path):
    server.script = [("answer", "I think it is fine"), ("answer", good(2))]
    judge = j.Judge(settings(server, tmp_path, max_retries=2))
    assert judge.score("a", "b")["score"] == 2 and judge.requests == 2
    server.script = [("answer", "garbage")] * 3
    out = judge.score("c", "d")
    assert out == {"score": 1, "parsed": False, "answer": "garbage", "cached": False}


def test_timeout_is_retried(server, tmp_path):
    server.script = [("hang",), ("answer", good(3))]
    judge = j.Judge(settings(server, tmp_path, timeout_s=1.0))
    assert judge.score("a", "b")["score"] == 3 and judge.requests == 2


def test_persistent_failure_and_auth_error_raise(server, tmp_path):
    server.script = [("status", 503)] * 3
    with pytest.raises(j.JudgeError, match="gave up after 3 attempts"):
        j.Judge(settings(server, tmp_path, max_retries=2)).score("a", "b")
    server.script = [("status", 401)]
    judge = j.Judge(settings(server, tmp_path))
    with pytest.raises(j.JudgeError, match="HTTP 401"):
        judge.score("a", "b")
    assert judge.requests == 1


def test_run_judge_on_a_result_file(server, tmp_path):
    data = tmp_path / "he.json"
    data.write_text(
        json.dumps(
            [
                {
                    "task_id": i,
                    "type": lv,
                    "c_func": "#include <stdio.h>\nint func0(int x) { return x; }",
                    "c_test": "int main(void){return func0(0);}",
                    "input_asm_prompt": "",
                }
                for i in range(2)
                for lv in ("O0", "O1")
            ]
        )
    )
    result = tmp_path / "res.json"
    result.write_text(
        json.dumps(
            {
                "benchmark": "humaneval_decompile",
                "system": "sys",
                "label": "S",
                "levels": ["O0", "O1"],
                "records": [
                    {"task_id": 0, "opt": "O0", "output": "int func0(int x) { return x; }"},
                    {"task_id": 1, "opt": "O0", "output": ""},
                    {"task_id": 0, "opt": "O1", "output": "int func0(int a) { return a; }"},
                ],
            }
        )
    )
    server.script = [("answer", good(5)), ("answer", good(1)), ("answer", good(4))]
    out = j.run_judge(result, data, tmp_path / "judge.json", settings=settings(server, tmp_path))
    saved = json.loads((tmp_path / "judge.json").read_text())
    assert saved["judge"] == {"O0": 3.0, "O1": 4.0} and saved["judge_avg"] == 3.5 == out["judge_avg"]
    assert saved["requests"] == 3 and saved["unparsed"] == 0
    assert "#include" not in server.prompts[0] and "decompile error" in server.prompts[1]
