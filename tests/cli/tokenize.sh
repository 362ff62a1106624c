#!/usr/bin/env bash
# dsv4 tokenize / detokenize: ids, pieces, JSONL mode and error messages, against ids from HF tokenizers
# (computed with tokenizers 0.23.3 on tests/data/tokenizer/deepseek_v4_tokenizer.json).
# Usage: tokenize.sh DSV4_BINARY SOURCE_DIR
set -u
BIN=$1
SRC=$2
TOK=$SRC/tests/data/tokenizer/deepseek_v4_tokenizer.json
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0

expect_eq() {  # name expected actual
    if [[ "$2" != "$3" ]]; then
        echo "FAIL $1: expected [$2] got [$3]"
        fails=$((fails + 1))
    fi
}
expect_fail() {  # name pattern-in-stderr command...
    local name=$1 pattern=$2
    shift 2
    if "$@" >"$TMP/out" 2>"$TMP/err"; then
        echo "FAIL $name: succeeded, expected an error"
        fails=$((fails + 1))
    elif ! grep -q -- "$pattern" "$TMP/err"; then
        echo "FAIL $name: stderr lacks '$pattern': $(cat "$TMP/err")"
        fails=$((fails + 1))
    fi
}

# Encoding (chat markup, code with a tab and trailing spaces, CJK + digits).
expect_eq chat "0,128803,3085,344,223,20,13,20,33,128804,128822" \
    "$("$BIN" tokenize --tokenizer "$TOK" '<｜begin▁of▁sentence｜><｜User｜>What is 2+2?<｜Assistant｜></think>')"
expect_eq code "19923,14,2058,8567,200,8308,1393,262" \
    "$("$BIN" tokenize --tokenizer "$TOK" $'Hello, world!\n\tcode()  ')"
expect_eq cjk "17180,1645,4568,223,6895,1883" "$("$BIN" tokenize --tokenizer "$TOK" '深度求索 12345')"
expect_eq empty "" "$("$BIN" tokenize --tokenizer "$TOK" '')"
expect_eq stdin "19923,14,2058,3" "$(printf 'Hello, world!' | "$BIN" tokenize --tokenizer "$TOK" -)"

# -m DIR finds DIR/tokenizer.json.
mkdir -p "$TMP/model"
cp "$TOK" "$TMP/model/tokenizer.json"
expect_eq model_dir "19923,14,2058,3" "$("$BIN" tokenize -m "$TMP/model" 'Hello, world!')"

# --pieces: id, token string, text.
expect_eq pieces $'19923\tHello\t"Hello"\n14\t,\t","' "$("$BIN" tokenize --tokenizer "$TOK" --pieces 'Hello,')"

# Decoding.
expect_eq detok "Hello, world!" "$("$BIN" detokenize --tokenizer "$TOK" 19923,14,2058,3)"
expect_eq detok_list "Hello, world!" "$("$BIN" detokenize --tokenizer "$TOK" '[19923, 14, 2058, 3]')"
expect_eq detok_special "<｜begin▁of▁sentence｜>Hello<｜end▁of▁sentence｜>" "$("$BIN" detokenize --tokenizer "$TOK" 0,19923,1)"
expect_eq detok_skip "Hello" "$("$BIN" detokenize --tokenizer "$TOK" --skip-special 0,19923,1)"

# JSONL: one {"ids": [...]} per input line, in order.
printf '%s\n' '{"text": "Hello, world!"}' '{"text": ""}' '{"text": "<think>", "other": 1}' > "$TMP/in.jsonl"
expect_eq jsonl $'{"ids":[19923,14,2058,3]}\n{"ids":[]}\n{"ids":[128821]}' \
    "$("$BIN" tokenize --tokenizer "$TOK" --jsonl "$TMP/in.jsonl")"

# Errors.
printf '%s\n' '{"text": "ok"}' '{"txt": "no"}' > "$TMP/bad_field.jsonl"
expect_fail jsonl_field "line 2" "$BIN" tokenize --tokenizer "$TOK" --jsonl "$TMP/bad_field.jsonl"
printf '%s\n' '{"text": "ok"}' '{"text": "ok"}' 'not json' > "$TMP/bad_json.jsonl"
expect_fail jsonl_json "line 3" "$BIN" tokenize --tokenizer "$TOK" --jsonl "$TMP/bad_json.jsonl"
expect_fail jsonl_missing "cannot open" "$BIN" tokenize --tokenizer "$TOK" --jsonl "$TMP/nope.jsonl"
expect_fail missing_file "no such file" "$BIN" tokenize --tokenizer "$TMP/nope.json" hi
expect_fail missing_dir "not a directory" "$BIN" tokenize -m "$TMP/nope" hi
expect_fail no_source "no tokenizer given" "$BIN" tokenize hi
expect_fail id_range "outside the vocabulary" "$BIN" detokenize --tokenizer "$TOK" 1,129280
expect_fail id_negative "outside the vocabulary" "$BIN" detokenize --tokenizer "$TOK" 1,-5
expect_fail id_text "not an integer" "$BIN" detokenize --tokenizer "$TOK" 1,abc
echo '{' > "$TMP/broken.json"
expect_fail corrupt_json "not valid JSON" "$BIN" tokenize --tokenizer "$TMP/broken.json" hi

if [[ $fails -ne 0 ]]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "tokenize.sh: all checks passed"
