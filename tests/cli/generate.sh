#!/usr/bin/env bash
# dsv4 generate / chat on a tiny model: streamed text, header and timings lines, --json shape, seeds, stop strings,
# env mirrors, chat commands and state reuse, and one clear message with a non-zero exit for every bad input.
# Usage: generate.sh DSV4_BINARY SOURCE_DIR
set -euo pipefail
dsv4="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export DSV4_CACHE_DIR="$tmp/cache"
unset DSV4_MODEL DSV4_SEED DSV4_N_PREDICT DSV4_PROMPT DSV4_THINK DSV4_RAW DSV4_JSON DSV4_STOP || true

# The embedded default: created on first use, announced as random weights, text on stdout, timings on stderr.
"$dsv4" generate -p "Hello" -n 8 --seed 1 -t 2 >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "default run"; }
[ -s "$tmp/out" ] || fail "no text on stdout"
grep -q "embedded demo model: random weights" "$tmp/err" || fail "header does not say random weights"
grep -Eq "^dsv4: prompt [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tok/s\), generated 8 tokens in [0-9.]+ s \([0-9.]+ tok/s\), first token after [0-9.]+ s, stop: max_tokens$" \
    "$tmp/err" || { cat "$tmp/err" >&2; fail "timings line"; }
default_dir="$(ls -d "$DSV4_CACHE_DIR"/demo-tiny-v4-*)"
[ -f "$default_dir/tokenizer.json" ] || fail "default model has no tokenizer.json"
ls -a "$DSV4_CACHE_DIR" | grep -q '^\.tmp-' && fail "temporary folder left in the cache"

# A model folder given with -m: the tiny checkpoint with the repository's V4 tokenizer copied in.
model="$tmp/model"
mkdir "$model"
cp "$default_dir"/config.json "$default_dir"/*.safetensors "$model/"
cp "$src/tests/data/tokenizer/deepseek_v4_tokenizer.json" "$model/tokenizer.json"
gen() { "$dsv4" generate -m "$model" -t 2 "$@"; }

gen -p "Tell me a story" -n 5 --seed 3 --json >"$tmp/json" 2>/dev/null || fail "--json run"
python3 - "$tmp/json" <<'PY' || fail "--json shape"
import json, sys
d = json.load(open(sys.argv[1]))
keys = ["model", "default_model", "seed", "prompt_tokens", "text", "reasoning", "content", "tool_calls", "tokens",
        "finish_reason", "stop_reason", "timings"]
assert list(d) == keys, list(d)
assert d["default_model"] is False and d["seed"] == 3 and d["prompt_tokens"] > 0
assert len(d["tokens"]) == 5 and all(isinstance(t, int) and 0 <= t < 129280 for t in d["tokens"])
assert d["finish_reason"] == "length" and d["stop_reason"] == "max_tokens"
assert isinstance(d["text"], str) and d["text"], d
t = d["timings"]
assert t["generated_tokens"] == 5 and t["prompt_tokens"] == d["prompt_tokens"], t
assert t["prompt_tokens_per_second"] > 0 and t["generation_tokens_per_second"] > 0, t
PY

# Same seed, same text; another seed, other text; the env mirrors act like the flags.
gen -p "Once upon a time" -n 12 --seed 11 >"$tmp/a" 2>/dev/null || fail "seed run a"
gen -p "Once upon a time" -n 12 --seed 11 >"$tmp/b" 2>/dev/null || fail "seed run b"
gen -p "Once upon a time" -n 12 --seed 12 >"$tmp/c" 2>/dev/null || fail "seed run c"
cmp -s "$tmp/a" "$tmp/b" || fail "same --seed gave different output"
cmp -s "$tmp/a" "$tmp/c" && fail "different seeds gave the same output"
DSV4_SEED=11 DSV4_N_PREDICT=12 DSV4_PROMPT="Once upon a time" DSV4_MODEL="$model" "$dsv4" generate -t 2 \
    >"$tmp/d" 2>/dev/null || fail "env mirror run"
cmp -s "$tmp/a" "$tmp/d" || fail "DSV4_* mirrors differ from the flags"

# A stop string taken from the middle of a known reply cuts the reply just before it and is not printed.
gen -p "Count" -n 24 --seed 5 --raw --json >"$tmp/full" 2>/dev/null || fail "stop reference run"
stop="$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["text"]; print(t[len(t)//2:len(t)//2+2], end="")' "$tmp/full")"
gen -p "Count" -n 24 --seed 5 --raw --json --stop "$stop" >"$tmp/cut" 2>/dev/null || fail "stop run"
python3 - "$tmp/full" "$tmp/cut" "$stop" <<'PY' || fail "stop string"
import json, sys
full, cut, stop = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert cut["stop_reason"] == "stop_string" and cut["finish_reason"] == "stop", cut
assert cut["text"] == full["text"][:full["text"].find(stop)], (cut["text"], full["text"], stop)
assert stop not in cut["text"]
PY

# Thinking mode: the reply starts as reasoning (separated in --json, marked when stdout is not a terminal).
gen -p "Why?" -n 6 --seed 2 --think --json >"$tmp/think" 2>/dev/null || fail "--think run"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["reasoning"], d' "$tmp/think" ||
    fail "--think gave no reasoning"
gen -p "Why?" -n 6 --seed 2 --think >"$tmp/think.txt" 2>/dev/null || fail "--think text run"
head -c 7 "$tmp/think.txt" | grep -q "<think>" || fail "reasoning not marked in text output"

# Chat: replies per line, /reset replays the conversation, a one-token reply leaves the prompt in the state so
# the next turn reuses it.
printf 'Hi\n/nothink\n/reset\nHi\n/exit\nnever\n' | "$dsv4" chat -m "$model" -n 6 --seed 4 -t 2 >"$tmp/chat" \
    2>"$tmp/chat.err" || { cat "$tmp/chat.err" >&2; fail "chat run"; }
[ "$(grep -c '^dsv4: prompt' "$tmp/chat.err")" -eq 2 ] || fail "chat: want two timed replies"
grep -q "conversation reset" "$tmp/chat.err" || fail "chat: /reset not acknowledged"
[ "$(sed -n 1p "$tmp/chat")" = "$(sed -n 2p "$tmp/chat")" ] || fail "chat: reply after /reset differs"
printf 'Hi\nAgain\n' | "$dsv4" chat -m "$model" -n 1 --seed 4 -t 2 >/dev/null 2>"$tmp/reuse.err" || fail "chat reuse"
grep -Eq "prompt [0-9]+ tokens in .*, [0-9]+ reused" "$tmp/reuse.err" || { cat "$tmp/reuse.err" >&2; fail "chat: no reuse"; }

# expect_failure PATTERN ARGS...: non-zero exit and PATTERN (grep -E) in stderr.
expect_failure() {
    local pattern="$1"; shift
    set +e
    "$dsv4" "$@" 2>"$tmp/err" >/dev/null </dev/null
    local rc=$?
    set -e
    [ "$rc" -ne 0 ] || { cat "$tmp/err" >&2; fail "exit code 0 for: $*"; }
    grep -Eq -e "$pattern" "$tmp/err" || { cat "$tmp/err" >&2; fail "message lacks /$pattern/ for: $*"; }
}
mkdir "$tmp/no-tok"
cp "$model"/config.json "$model"/*.safetensors "$tmp/no-tok/"
expect_failure "no tokenizer.json in the model folder" generate -m "$tmp/no-tok" -p hi
expect_failure "no tokenizer.json in the model folder" chat -m "$tmp/no-tok"
"$dsv4" make-model --preset tiny --out "$tmp/small-vocab" >/dev/null 2>&1 || fail "make-model"
cp "$model/tokenizer.json" "$tmp/small-vocab/"
expect_failure "model's vocabulary has only 1024 rows" generate -m "$tmp/small-vocab" -p hi
expect_failure "no such model folder" generate -m "$tmp/missing" -p hi
expect_failure "prompt has [0-9]+ tokens.*context of 8 tokens.*-c" generate -m "$model" -c 8 \
    -p "a prompt that is certainly longer than eight tokens, by quite a margin"
expect_failure "--prompt is required" generate -m "$model"
expect_failure "--temp" generate -m "$model" -p hi --temp -1
expect_failure "--top-p" generate -m "$model" -p hi --top-p 2
expect_failure "excludes" generate -m "$model" -p hi --think --no-think
expect_failure "GPU list '0,x': expected auto or GPU indices separated by commas" generate -m "$model" -p hi \
    --devices 0,x
DSV4_DEVICES="1;2" expect_failure "GPU list '1;2'" generate -m "$model" -p hi
expect_failure "GPUs were named .* but the backend is the CPU" generate -m "$model" -p hi --backend cpu --devices 0
expect_failure "--pass-rows" generate -m "$model" -p hi --pass-rows -5
expect_failure "--pass-rows" generate -m "$model" -p hi --pass-rows 100000
expect_failure "--logit-bias: must be ID=BIAS" generate -m "$model" -p hi --logit-bias 500
expect_failure "--logit-bias: must be ID=BIAS with BIAS in \[-100, 100\], got '5=200'" generate -m "$model" -p hi \
    --logit-bias 5=200
expect_failure "logit_bias names token 200000, outside the model's vocabulary of 129280 ids" generate -m "$model" \
    -p hi --logit-bias 200000=1
# --logit-bias 500=100 forces token 500, greedy or sampled
for t in 0 1; do
    gen -p "Once upon a time" -n 4 --seed 2 --temp $t --logit-bias 500=100 --logit-bias 7=-100 --json >"$tmp/bias" \
        2>/dev/null || fail "--logit-bias run"
    python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["tokens"]; assert t == [500] * 4, t' "$tmp/bias" ||
        fail "--logit-bias 500=100 did not force token 500"
done
# --format json: the reply is a prefix of one JSON object, a whole one when the end token came
for seed in 1 2 3; do
    gen -p "Reply in JSON" -n 30 --seed $seed --format json --json >"$tmp/fmt" 2>/dev/null || fail "--format json run"
    python3 - "$tmp/fmt" <<'PY' || fail "--format json: not JSON"
import json, sys
d = json.load(open(sys.argv[1]))
text = d["content"]
assert text.lstrip().startswith("{") or not text.strip(), text
if d["stop_reason"] == "eos":
    assert isinstance(json.loads(text), dict), text
PY
done
expect_failure "--format" generate -m "$model" -p hi --format yaml
# --pass-rows sets the engine's pass size: the same text in passes of 4 rows as in one pass
gen -p "Once upon a time" -n 12 --seed 11 --pass-rows 4 >"$tmp/e" 2>/dev/null || fail "--pass-rows run"
cmp -s "$tmp/a" "$tmp/e" || fail "--pass-rows 4 changed the text"
echo "generate.sh: all checks passed"
