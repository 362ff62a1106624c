#!/usr/bin/env python3
"""dsv4 serve end to end over real sockets on 127.0.0.1.

Two kinds of server run here: `dsv4 serve` over a tiny random checkpoint (make-model --preset tiny, 1024-token
vocabulary, served with --fold-vocab beside the real 129,280-id V4 tokenizer), and the scripted-model host
(tests/server/scripted_host.cpp: the same server, a model that replies with scripted text) for what a random model
cannot say: DSML tool calls, closed reasoning, slow replies. The official `openai` client drives chat, streaming,
tools and reasoning; raw HTTP covers the bad-input table, disconnects and /metrics (parsed by prometheus_client).
Every server started here is stopped at the end, whatever happens.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import openai
from prometheus_client.parser import text_string_to_metric_families

ARGS = None
SERVERS = []  # every ServerProcess started, stopped in tearDownModule
TMP = None
CTX = 512


class ServerProcess:
    def __init__(self, cmd, log_name):
        self.log_path = os.path.join(TMP, log_name)
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        SERVERS.append(self)
        self.port = None
        deadline = time.time() + 30
        while time.time() < deadline and self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited early:\n" + open(self.log_path).read())
            with open(self.log_path) as f:
                m = re.search(r"listening on http://[0-9.]+:(\d+)", f.read())
            if m:
                self.port = int(m.group(1))
            time.sleep(0.02)
        if self.port is None:
            raise RuntimeError("server did not report its port:\n" + open(self.log_path).read())

    def wait_ready(self, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _, _ = request(self.port, "GET", "/health")
            if status == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("server not ready:\n" + open(self.log_path).read())

    def client(self, key="none"):
        return openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % self.port, api_key=key, max_retries=0, timeout=60)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def request(port, method, path, body=None, headers=None):
    """One HTTP request; body may be bytes, str or a JSON-able object. Returns (status, headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    except (ConnectionError, http.client.HTTPException):
        return 0, {}, b""
    finally:
        conn.close()


def metrics(port, headers=None):
    status, _, body = request(port, "GET", "/metrics", headers=headers)
    assert status == 200, status
    out = {}
    for fam in text_string_to_metric_families(body.decode()):
        for s in fam.samples:
            out[s.name + (json.dumps(s.labels, sort_keys=True) if s.labels else "")] = s.value
    return out


def open_stream(port, body, headers=None):
    """Starts a streaming request on a raw socket and returns it after the first SSE data line."""
    payload = json.dumps(body).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(payload)
    for k, v in (headers or {}).items():
        head += "%s: %s\r\n" % (k, v)
    s.sendall(head.encode() + b"\r\n" + payload)
    data = b""
    while b"data: {" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    return s, data


def wait_until(pred, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def setUpModule():
    global TMP, REAL, SCRIPTED
    TMP = tempfile.mkdtemp(prefix="dsv4_server_test_")
    model = os.path.join(TMP, "tiny")
    subprocess.run([ARGS.dsv4, "make-model", "--preset", "tiny", "--out", model], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.copy(os.path.join(ARGS.source_dir, "tests/data/tokenizer/deepseek_v4_tokenizer.json"),
                os.path.join(model, "tokenizer.json"))
    REAL = ServerProcess([ARGS.dsv4, "serve", "-m", model, "--port", "0", "-np", "4", "-c", str(CTX),
                          "--fold-vocab", "--max-body", "65536", "-t", "2", "--chunk", "64"], "real.log")
    script = os.path.join(TMP, "script.json")
    with open(script, "w") as f:
        json.dump(SCRIPT, f)
    SCRIPTED = ServerProcess([ARGS.scripted_host, "--tokenizer", os.path.join(model, "tokenizer.json"),
                              "--script", script, "-np", "2"], "scripted.log")
    REAL.wait_ready()
    SCRIPTED.wait_ready()


def tearDownModule():
    for s in SERVERS:
        s.stop()
    if TMP and not os.environ.get("DSV4_KEEP_TMP"):
        shutil.rmtree(TMP, ignore_errors=True)


TOOL_REPLY = ("Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
              "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
              "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
              "</｜DSML｜invoke>\n</｜DSML｜tool_calls>")
SCRIPT = [
    {"when": "forecast for Paris", "reply": TOOL_REPLY[len("Checking."):]},  # the call alone
    {"when": "weather", "reply": TOOL_REPLY},
    {"when": "two plus two", "reply": "Two and two make four.</think>The answer is 4."},
    {"when": "long story", "reply": "once upon a time " * 100},
    {"when": "", "reply": "Hello there!"},
]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather forecast",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]


class RealModel(unittest.TestCase):
    """dsv4 serve over the tiny random checkpoint."""

    def test_health_and_models(self):
        status, _, body = request(REAL.port, "GET", "/health")
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["status"], "ok")
        models = REAL.client().models.list()
        self.assertEqual([m.id for m in models.data], ["tiny"])
        one = REAL.client().models.retrieve("tiny")
        self.assertEqual((one.id, one.object), ("tiny", "model"))
        status, _, body = request(REAL.port, "GET", "/v1/models/other%FF")
        self.assertEqual(status, 404)
        self.assertEqual(json.loads(body)["error"]["code"], "model_not_found")

    def test_chat_and_stream_agree(self):
        c = REAL.client()
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say something."}]
        full = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=10, seed=7, temperature=0.9)
        self.assertEqual(full.choices[0].finish_reason in ("stop", "length"), True)
        self.assertGreater(full.usage.prompt_tokens, 5)
        self.assertEqual(full.usage.total_tokens, full.usage.prompt_tokens + full.usage.completion_tokens)
        stream = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=10, seed=7, temperature=0.9,
                                           stream=True, stream_options={"include_usage": True})
        text, finish, usage, roles = "", None, None, []
        for chunk in stream:
            if chunk.usage:
                usage = chunk.usage
            for ch in chunk.choices:
                if ch.delta.role:
                    roles.append(ch.delta.role)
                text += ch.delta.content or ""
                finish = ch.finish_reason or finish
        self.assertEqual(roles, ["assistant"])
        self.assertEqual(text, full.choices[0].message.content)
        self.assertEqual(finish, full.choices[0].finish_reason)
        self.assertEqual(usage.completion_tokens, full.usage.completion_tokens)
        self.assertEqual(usage.prompt_tokens, full.usage.prompt_tokens)

    def test_thinking_mode_gives_reasoning(self):
        r = REAL.client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Think."}], max_tokens=6, seed=1,
            extra_body={"chat_template_kwargs": {"thinking": True}})
        msg = r.choices[0].message
        # A random model never closes </think>: everything it says is reasoning.
        self.assertTrue(msg.model_extra.get("reasoning_content"))
        self.assertEqual(msg.content, "")

    def test_completions_logprobs_and_seed(self):
        c = REAL.client()
        a = c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, seed=11, logprobs=3)
        b = c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=8, seed=11, logprobs=3)
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        lp = a.choices[0].logprobs
        self.assertEqual(len(lp.token_logprobs), a.usage.completion_tokens)
        for v, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(v, 0.0)
            self.assertLessEqual(len(top), 3)

    def test_chat_logprobs_greedy_pick_is_top(self):
        r = REAL.client().chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x"}], max_tokens=5, temperature=0,
            logprobs=True, top_logprobs=3)
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for e in content:
            self.assertEqual(len(e.top_logprobs), 3)
            self.assertEqual(e.top_logprobs[0].token, e.token)
            self.assertAlmostEqual(e.top_logprobs[0].logprob, e.logprob, places=5)

    def test_several_choices(self):
        c = REAL.client()
        many = c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, seed=7, n=3)
        self.assertEqual([ch.index for ch in many.choices], [0, 1, 2])
        # choice i is the same request alone with the seed + i
        alone = [c.completions.create(model="tiny", prompt="Once upon a time", max_tokens=6, seed=7 + i)
                 for i in range(3)]
        for i in range(3):
            self.assertEqual(many.choices[i].text, alone[i].choices[0].text)
            self.assertEqual(many.choices[i].finish_reason, alone[i].choices[0].finish_reason)
        self.assertEqual(many.usage.prompt_tokens, alone[0].usage.prompt_tokens)
        self.assertEqual(many.usage.completion_tokens, sum(a.usage.completion_tokens for a in alone))
        self.assertEqual(many.usage.total_tokens, many.usage.prompt_tokens + many.usage.completion_tokens)
        # streamed: each choice's deltas under its index, one usage chunk at the end
        msgs = [{"role": "user", "content": "Say something."}]
        full = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, seed=5, n=2)
        stream = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=8, seed=5, n=2, stream=True)
        text, finish, roles, usages = ["", ""], [None, None], [[], []], []
        for chunk in stream:
            if chunk.usage:
                usages.append(chunk.usage)
            for ch in chunk.choices:
                if ch.delta.role:
                    roles[ch.index].append(ch.delta.role)
                text[ch.index] += ch.delta.content or ""
                finish[ch.index] = ch.finish_reason or finish[ch.index]
        self.assertEqual(roles, [["assistant"], ["assistant"]])
        self.assertEqual(text, [full.choices[i].message.content for i in range(2)])
        self.assertEqual(finish, [full.choices[i].finish_reason for i in range(2)])
        self.assertEqual(len(usages), 1)
        self.assertEqual(usages[0].completion_tokens, full.usage.completion_tokens)

    def test_json_object_reply(self):
        c = REAL.client()
        msgs = [{"role": "user", "content": "Reply in JSON."}]
        # random weights: each reply is a prefix of a JSON object, and one that ended is a whole object
        for seed in range(4):
            r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=24, seed=seed,
                                          response_format={"type": "json_object"})
            content = r.choices[0].message.content
            self.assertTrue(content.lstrip().startswith("{") or not content.strip(), content)
            if r.choices[0].finish_reason == "stop":
                self.assertIsInstance(json.loads(content), dict)
        # leaning on "}" closes the object at once; the end token is then the only one allowed
        s, _, b = request(REAL.port, "POST", "/tokenize", {"content": "}"})
        close = json.loads(b)["tokens"]
        self.assertEqual(len(close), 1)
        r = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=24, temperature=0,
                                      logit_bias={str(close[0]): 60}, response_format={"type": "json_object"})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(json.loads(r.choices[0].message.content), {})
        stream = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=24, temperature=0, stream=True,
                                           logit_bias={str(close[0]): 60}, response_format={"type": "json_object"})
        self.assertEqual(json.loads("".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)), {})

    def test_logit_bias_forces_a_token(self):
        c = REAL.client()
        s, _, b = request(REAL.port, "POST", "/detokenize", {"tokens": [500] * 4})
        self.assertEqual(s, 200)
        base = c.completions.create(model="tiny", prompt="abc", max_tokens=4, temperature=0)
        forced = c.completions.create(model="tiny", prompt="abc", max_tokens=4, temperature=0, logit_bias={"500": 100})
        self.assertEqual(forced.choices[0].text, json.loads(b)["content"])
        self.assertNotEqual(base.choices[0].text, forced.choices[0].text)  # the random model's own reply differs
        # the same with sampling and a seed, through the stream
        chunks = c.completions.create(model="tiny", prompt="abc", max_tokens=4, seed=3, logit_bias={"500": 100},
                                      stream=True)
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices), json.loads(b)["content"])

    def test_stop_string_cuts_the_text(self):
        c = REAL.client()
        base = c.completions.create(model="tiny", prompt="abc", max_tokens=24, seed=5, temperature=0)
        text = base.choices[0].text
        cut = next((i for i in range(3, len(text) - 2) if text[i:i + 2].strip() and text.find(text[i:i + 2]) == i), None)
        self.assertIsNotNone(cut, "no usable stop string in %r" % text)
        r = c.completions.create(model="tiny", prompt="abc", max_tokens=24, seed=5, temperature=0, stop=[text[cut:cut + 2]])
        self.assertEqual(r.choices[0].text, text[:cut])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_prefix_cache_reports_cached_tokens(self):
        prompt = list(range(100, 140))
        s1, _, b1 = request(REAL.port, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 1})
        s2, _, b2 = request(REAL.port, "POST", "/v1/completions", {"prompt": prompt + [7, 8], "max_tokens": 1})
        self.assertEqual((s1, s2), (200, 200))
        self.assertEqual(json.loads(b1)["usage"]["prompt_tokens_details"]["cached_tokens"], 0)
        self.assertEqual(json.loads(b2)["usage"]["prompt_tokens_details"]["cached_tokens"], len(prompt))

    def test_tokenize_detokenize_apply_template(self):
        s, _, b = request(REAL.port, "POST", "/tokenize", {"content": "Hello world<｜User｜>"})
        self.assertEqual(s, 200)
        ids = json.loads(b)["tokens"]
        self.assertIn(128803, ids)
        s, _, b = request(REAL.port, "POST", "/detokenize", {"tokens": ids})
        self.assertEqual(json.loads(b)["content"], "Hello world<｜User｜>")
        s, _, b = request(REAL.port, "POST", "/apply-template",
                          {"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"thinking": True}})
        self.assertEqual(json.loads(b)["prompt"], "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>")

    def test_concurrent_streams_equal_sequential(self):
        c = REAL.client()

        def run(i):
            stream = c.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "client %d says hi" % i}], max_tokens=12,
                seed=100 + i, temperature=0.8, stream=True)
            text, finish = "", None
            for chunk in stream:
                for ch in chunk.choices:
                    text += ch.delta.content or ""
                    finish = ch.finish_reason or finish
            return text, finish

        n = 16
        with concurrent.futures.ThreadPoolExecutor(n) as pool:
            together = list(pool.map(run, range(n)))
        alone = [run(i) for i in range(n)]
        self.assertEqual(together, alone)
        self.assertTrue(all(f in ("stop", "length") for _, f in together))
        self.assertGreater(len(set(t for t, _ in together)), 1)

    def test_metrics_parse(self):
        REAL.client().chat.completions.create(model="tiny", messages=[{"role": "user", "content": "m"}], max_tokens=3)
        status, headers, body = request(REAL.port, "GET", "/metrics")
        self.assertTrue(headers.get("Content-Type", "").startswith("text/plain"))
        fams = {f.name: f for f in text_string_to_metric_families(body.decode())}
        for name, kind in [("dsv4_requests_running", "gauge"), ("dsv4_requests_waiting", "gauge"),
                           ("dsv4_prompt_tokens", "counter"), ("dsv4_generated_tokens", "counter"),
                           ("dsv4_generated_tokens_drawn_by_engine", "counter"),
                           ("dsv4_prompt_seconds", "counter"), ("dsv4_generation_seconds", "counter"),
                           ("dsv4_time_to_first_token_seconds", "histogram"),
                           ("dsv4_inter_token_latency_seconds", "histogram"),
                           ("dsv4_kv_cache_usage_ratio", "gauge"), ("dsv4_slots_busy", "gauge")]:
            self.assertIn(name, fams)
            self.assertEqual(fams[name].type, kind, name)
        m = metrics(REAL.port)
        self.assertGreater(m["dsv4_time_to_first_token_seconds_count"], 0)
        self.assertGreater(m["dsv4_generated_tokens_total"], 0)
        # the CPU backend draws nothing beside its logits: every token came from the host sampler
        self.assertEqual(m["dsv4_generated_tokens_drawn_by_engine_total"], 0)
        self.assertEqual(m["dsv4_slots_total"], 4)
        self.assertEqual(m["dsv4_kv_cache_tokens_capacity"], 4 * CTX)

    def test_bad_input_table(self):
        chat, cmpl = "/v1/chat/completions", "/v1/completions"
        ok = [{"role": "user", "content": "hi"}]
        cases = [
            (chat, b"not json", 400), (chat, b"[]", 400), (chat, b"", 400), (chat, {}, 400),
            (chat, {"messages": "hi"}, 400), (chat, {"messages": []}, 400), (chat, {"messages": [1]}, 400),
            (chat, {"messages": [{"role": "wizard", "content": "x"}]}, 400),
            (chat, {"messages": [{"content": "x"}]}, 400),
            (chat, {"messages": [{"role": "user", "content": 5}]}, 400),
            (chat, {"messages": ok, "temperature": "hot"}, 400), (chat, {"messages": ok, "temperature": 5}, 400),
            (chat, {"messages": ok, "top_p": 0}, 400), (chat, {"messages": ok, "max_tokens": 0}, 400),
            (chat, {"messages": ok, "max_tokens": "10"}, 400), (chat, {"messages": ok, "n": 17}, 400),
            (chat, {"messages": ok, "n": 0}, 400),
            (chat, {"messages": ok, "stream": "yes"}, 400), (chat, {"messages": ok, "stop": 5}, 400),
            (chat, {"messages": ok, "stop": ["a", 3]}, 400), (chat, {"messages": ok, "seed": 1.5}, 400),
            (chat, {"messages": ok, "top_logprobs": 3}, 400),
            (chat, {"messages": ok, "logprobs": True, "top_logprobs": 50}, 400),
            (chat, {"messages": ok, "tools": "x"}, 400), (chat, {"messages": ok, "tool_choice": "sometimes"}, 400),
            (chat, {"messages": ok, "chat_template_kwargs": []}, 400),
            (chat, {"messages": ok, "reasoning_effort": "extreme"}, 400),
            (chat, b'{"messages":[{"role":"user","content":"\xff\xfe"}]}', 400),
            (chat, {"messages": [{"role": "user", "content": "word " * 2000}]}, 400),
            (chat, {"messages": [{"role": "user", "content": "x" * 100000}]}, 413),
            (chat, {"messages": ok, "frequency_penalty": 3}, 400), (chat, {"messages": ok, "logit_bias": {"x5": 1}}, 400),
            (chat, {"messages": ok, "logit_bias": {"5": 101}}, 400), (chat, {"messages": ok, "logit_bias": [5]}, 400),
            (chat, {"messages": ok, "logit_bias": {"129280": 1}}, 400),
            (chat, {"messages": ok, "logit_bias": {"5": 1, "05": 2}}, 400),
            (chat, {"messages": ok, "model": 5}, 400),
            (chat, {"messages": [{"role": "assistant", "content": "", "tool_calls": "x"}]}, 400),
            (chat, {"messages": ok, "tool_choice": "required"}, 400),
            (chat, {"messages": ok, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "f"}}}, 400),
            (chat, {"messages": ok, "tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}},
             400),
            (cmpl, {"prompt": [1, -5]}, 400), (cmpl, {"prompt": {"a": 1}}, 400), (cmpl, {}, 400),
            (cmpl, {"prompt": "x", "echo": True}, 400), (cmpl, {"prompt": [[1], [2]]}, 400),
            ("/detokenize", {"tokens": [999999999]}, 400), ("/tokenize", {"content": 5}, 400),
            ("/apply-template", {"messages": 3}, 400), ("/v1/nothing", {}, 404),
        ]
        self.assertGreaterEqual(len(cases), 25)
        for path, body, want in cases:
            status, _, raw = request(REAL.port, "POST", path, body)
            self.assertEqual(status, want, "%s %r -> %d %r" % (path, body if len(str(body)) < 200 else "<long>", status, raw[:300]))
            err = json.loads(raw)["error"]
            self.assertIsInstance(err["message"], str)
            self.assertTrue(err["message"])
            self.assertIsInstance(err["type"], str)
            self.assertIn("param", err)
            self.assertIn("code", err)
        s, _, b = request(REAL.port, "POST", chat, {"messages": [{"role": "user", "content": "word " * 2000}]})
        self.assertEqual(json.loads(b)["error"]["code"], "context_length_exceeded")
        self.assertEqual(request(REAL.port, "GET", "/health")[0], 200)


class Scripted(unittest.TestCase):
    """The real server over a scripted model: tool calls and closed reasoning."""

    def test_tool_call(self):
        r = SCRIPTED.client().chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS)
        ch = r.choices[0]
        self.assertEqual(ch.finish_reason, "tool_calls")
        self.assertEqual(ch.message.content, "Checking.")
        self.assertEqual(len(ch.message.tool_calls), 1)
        call = ch.message.tool_calls[0]
        self.assertEqual(call.function.name, "get_weather")
        self.assertEqual(json.loads(call.function.arguments), {"city": "Paris", "days": 3})

    def test_tool_choice_holds_the_reply_to_a_call(self):
        c = SCRIPTED.client()
        named = {"type": "function", "function": {"name": "get_weather"}}
        # a reply that opens with the call passes through the constraint unchanged, named or required
        for choice in (named, "required"):
            r = c.chat.completions.create(model="scripted", tools=TOOLS, tool_choice=choice,
                                          messages=[{"role": "user", "content": "The forecast for Paris?"}])
            ch = r.choices[0]
            self.assertEqual(ch.finish_reason, "tool_calls")
            self.assertEqual([t.function.name for t in ch.message.tool_calls], ["get_weather"])
            self.assertEqual(json.loads(ch.message.tool_calls[0].function.arguments), {"city": "Paris", "days": 3})
        # a reply that would start with text ("Checking.") is held to the call's opening instead: the stream names
        # the call at once and carries no content (the scripted model's text after the forced opening is not a
        # whole call, so the call stays unfinished)
        stream = c.chat.completions.create(model="scripted", tools=TOOLS, tool_choice=named, max_tokens=40,
                                           stream=True,
                                           messages=[{"role": "user", "content": "What is the weather in Paris?"}])
        names, content = [], ""
        for chunk in stream:
            for ch in chunk.choices:
                content += ch.delta.content or ""
                names += [t.function.name for t in (ch.delta.tool_calls or []) if t.function and t.function.name]
        self.assertEqual(names, ["get_weather"])
        self.assertNotIn("Checking", content)

    def test_tool_call_streamed(self):
        stream = SCRIPTED.client().chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": "weather in Paris please"}], tools=TOOLS,
            tool_choice="auto", stream=True)
        name, args, arg_deltas, content, finish, ids = None, "", 0, "", None, set()
        for chunk in stream:
            for ch in chunk.choices:
                content += ch.delta.content or ""
                finish = ch.finish_reason or finish
                for tc in ch.delta.tool_calls or []:
                    self.assertEqual(tc.index, 0)
                    if tc.id:
                        ids.add(tc.id)
                    if tc.function and tc.function.name:
                        name = tc.function.name
                    if tc.function and tc.function.arguments:
                        args += tc.function.arguments
                        arg_deltas += 1
        self.assertEqual((name, finish, content, len(ids)), ("get_weather", "tool_calls", "Checking.", 1))
        self.assertEqual(json.loads(args), {"city": "Paris", "days": 3})
        self.assertGreater(arg_deltas, 1)

    def test_tool_result_round_trip_prompt(self):
        msgs = [{"role": "user", "content": "weather?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]
        s, _, b = request(SCRIPTED.port, "POST", "/apply-template", {"messages": msgs, "tools": TOOLS})
        self.assertEqual(s, 200, b)
        prompt = json.loads(b)["prompt"]
        self.assertIn("<tool_result>sunny</tool_result>", prompt)
        self.assertIn("get_weather", prompt)

    def test_reasoning_split(self):
        c = SCRIPTED.client()
        msgs = [{"role": "user", "content": "What is two plus two?"}]
        r = c.chat.completions.create(model="scripted", messages=msgs,
                                      extra_body={"chat_template_kwargs": {"thinking": True}})
        self.assertEqual(r.choices[0].message.model_extra["reasoning_content"], "Two and two make four.")
        self.assertEqual(r.choices[0].message.content, "The answer is 4.")
        reasoning, content = "", ""
        for chunk in c.chat.completions.create(model="scripted", messages=msgs, stream=True,
                                               extra_body={"chat_template_kwargs": {"thinking": True}}):
            for ch in chunk.choices:
                reasoning += (ch.delta.model_extra or {}).get("reasoning_content") or ""
                content += ch.delta.content or ""
        self.assertEqual((reasoning, content), ("Two and two make four.", "The answer is 4."))


class Limits(unittest.TestCase):
    """One slot, one queue place, slow tokens, an API key: loading, auth, queue, disconnect, timeout."""

    def test_sequence(self):
        key = {"Authorization": "Bearer s3cret"}
        script = os.path.join(TMP, "script.json")
        srv = ServerProcess([ARGS.scripted_host, "--tokenizer", os.path.join(TMP, "tiny", "tokenizer.json"),
                             "--script", script, "-np", "1", "--queue", "1", "--delay-ms", "30",
                             "--load-delay-ms", "800", "--api-key", "s3cret", "--timeout", "4"], "limits.log")
        # Loading: /health is 503 with an error object, and so is work.
        status, _, body = request(srv.port, "GET", "/health")
        self.assertEqual(status, 503)
        self.assertEqual(json.loads(body)["error"]["code"], "model_loading")
        status, _, _ = request(srv.port, "POST", "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "hi"}]}, key)
        self.assertEqual(status, 503)
        srv.wait_ready()

        # API key: every route but /health.
        self.assertEqual(request(srv.port, "GET", "/v1/models")[0], 401)
        self.assertEqual(request(srv.port, "GET", "/metrics", headers={"Authorization": "Bearer wrong"})[0], 401)
        self.assertEqual(request(srv.port, "GET", "/v1/models", headers=key)[0], 200)
        with self.assertRaises(openai.AuthenticationError):
            srv.client("wrong").models.list()
        r = srv.client("s3cret").chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}])
        self.assertEqual(r.choices[0].message.content, "Hello there!")

        # Queue: one running, one waiting, the third is refused with 503 + Retry-After.
        long = {"messages": [{"role": "user", "content": "a long story"}], "stream": True}
        a, _ = open_stream(srv.port, long, key)
        b = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        payload = json.dumps(long).encode()
        b.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(payload) + payload)
        self.assertTrue(wait_until(lambda: metrics(srv.port, key)["dsv4_requests_waiting"] == 1, 3))
        status, headers, body = request(srv.port, "POST", "/v1/chat/completions", long, key)
        self.assertEqual(status, 503)
        self.assertEqual(headers.get("Retry-After"), "1")
        self.assertEqual(json.loads(body)["error"]["code"], "queue_full")

        # Disconnect frees the slot at once: the waiting request takes it, then that one goes too.
        before = metrics(srv.port, key)["dsv4_requests_cancelled_total"]
        a.close()
        self.assertTrue(wait_until(lambda: metrics(srv.port, key)["dsv4_requests_waiting"] == 0, 2))
        b.close()
        self.assertTrue(wait_until(lambda: metrics(srv.port, key)["dsv4_slots_busy"] == 0, 2))
        self.assertEqual(metrics(srv.port, key)["dsv4_requests_cancelled_total"], before + 2)

        # Timeout: the 100-token reply takes longer than --timeout 4 s at 30 ms a token.
        t0 = time.time()
        status, _, body = request(srv.port, "POST", "/v1/chat/completions",
                                  {"messages": [{"role": "user", "content": "long story"}]}, key)
        self.assertEqual(status, 408, body)
        self.assertEqual(json.loads(body)["error"]["type"], "timeout_error")
        self.assertLess(time.time() - t0, 8)
        self.assertEqual(metrics(srv.port, key)["dsv4_slots_busy"], 0)


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--dsv4", required=True)
    p.add_argument("--scripted-host", required=True)
    p.add_argument("--source-dir", required=True)
    ARGS, rest = p.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
