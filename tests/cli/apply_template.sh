#!/usr/bin/env bash
# dsv4 apply-template: every chat golden renders byte for byte through the CLI (stdout, no added newline), stdin
# works, and malformed files fail with exit code 1 and a message naming the file and the problem.
set -u
DSV4="$1"
SRC="$2"
GOLDEN="$SRC/tests/data/chat_golden"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0
count=0
for json in "$GOLDEN"/*.json "$GOLDEN"/official/official_*.json; do
    want="${json%.json}.txt"
    if ! "$DSV4" apply-template "$json" > "$TMP/out.txt" 2> "$TMP/err.txt"; then
        echo "FAIL: $json: exit code $?: $(cat "$TMP/err.txt")"
        fail=1
        continue
    fi
    if ! cmp -s "$TMP/out.txt" "$want"; then
        echo "FAIL: $json: output differs from $want"
        cmp "$TMP/out.txt" "$want" | head -1
        fail=1
    fi
    count=$((count + 1))
done
if [ "$count" -lt 49 ]; then
    echo "FAIL: expected at least 49 cases, rendered $count"
    fail=1
fi

# stdin
"$DSV4" apply-template - < "$GOLDEN/001_chat_user_only.json" > "$TMP/stdin.txt" || { echo "FAIL: stdin"; fail=1; }
cmp -s "$TMP/stdin.txt" "$GOLDEN/001_chat_user_only.txt" || { echo "FAIL: stdin output differs"; fail=1; }

# expect_error FILE_CONTENT PATTERN: exit code 1 and PATTERN on stderr, nothing on stdout.
expect_error() {
    printf '%s' "$1" > "$TMP/bad.json"
    "$DSV4" apply-template "$TMP/bad.json" > "$TMP/out.txt" 2> "$TMP/err.txt"
    rc=$?
    if [ "$rc" -ne 1 ] || ! grep -q -- "$2" "$TMP/err.txt" || [ -s "$TMP/out.txt" ]; then
        echo "FAIL: expected exit 1 and '$2' for: $1"
        echo "  got rc=$rc stderr: $(cat "$TMP/err.txt")"
        fail=1
    fi
}
expect_error '{"messages": [{"role": "wizard", "content": "x"}], "kwargs": {"thinking_mode": "chat"}}' \
    "bad.json: messages\[0\]: unknown role 'wizard'"
expect_error '{"messages": [{"role": "user", "content": 3}], "kwargs": {"thinking_mode": "chat"}}' \
    "messages\[0\].content must be a string"
expect_error '{"messages": [], "kwargs": {}}' "thinking_mode is required"
expect_error '{"messages": "hi", "kwargs": {"thinking_mode": "chat"}}' '"messages" must be a list'
expect_error '{"messages": [' "not valid JSON"
expect_error '{"messages": [], "kwargs": {"thinking_mode": "chat", "drop_thinking": "yes"}}' \
    "drop_thinking must be true or false"
"$DSV4" apply-template "$TMP/does-not-exist.json" > /dev/null 2> "$TMP/err.txt"
if [ $? -ne 1 ] || ! grep -q "cannot open" "$TMP/err.txt"; then echo "FAIL: missing file"; fail=1; fi

[ "$fail" -eq 0 ] && echo "apply-template: $count goldens and error cases OK"
exit $fail
