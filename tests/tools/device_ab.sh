#!/usr/bin/env bash
# scripts/device-ab on a throw-away tree (a copy of the script beside a one-line file; builds by a stand-in cmake):
# the base run and each variant see their own tree, every patch is taken back afterwards, the base is built again
# last, the base's command runs once before it as a warm-up (unless --no-warmup), and a patch that is missing or does
# not apply stops the run before anything changes; --base-again runs the base last once more.
# Usage: device_ab.sh SOURCE_ROOT
set -euo pipefail
root="${1:?usage: device_ab.sh SOURCE_ROOT}"
fail() { echo "FAIL: $*" >&2; exit 1; }
t="$(mktemp -d)"
trap 'rm -rf "$t"' EXIT
mkdir -p "$t/tree/scripts" "$t/patches"
cp "$root/scripts/device-ab" "$root/scripts/sync-build-times" "$t/tree/scripts/"
printf 'alpha\n' > "$t/tree/value.txt"
cat > "$t/patches/beta.patch" <<'P'
--- a/value.txt
+++ b/value.txt
@@ -1 +1 @@
-alpha
+beta
P
cat > "$t/patches/stale.patch" <<'P'
--- a/value.txt
+++ b/value.txt
@@ -1 +1 @@
-gamma
+delta
P
cd "$t"
out="$(OUT="$t/out" tree/scripts/device-ab --no-build --grep . beta=patches/beta.patch -- cat tree/value.txt)"
[ "$(printf '%s\n' "$out" | grep -v '^==')" = "$(printf 'alpha\nbeta')" ] || fail "outputs: $out"
grep -q '^== base (rc 0' <<<"$out" && grep -q '^== beta (rc 0' <<<"$out" || fail "headers: $out"
[ "$(cat "$t/out/beta.txt")" = beta ] || fail "beta.txt holds '$(cat "$t/out/beta.txt")'"
[ "$(cat tree/value.txt)" = alpha ] || fail "the patch was not taken back"
# with builds (a stand-in cmake records the tree each build saw): base, the variant, then the base again, so the
# build directory is not left holding the variant's binaries
mkdir -p "$t/bin"
printf '#!/usr/bin/env bash\ncat "$FAKE_TREE/value.txt" >> "$FAKE_LOG"\n' > "$t/bin/cmake"
chmod +x "$t/bin/cmake"
FAKE_TREE="$t/tree" FAKE_LOG="$t/builds.txt" PATH="$t/bin:$PATH" OUT="$t/out2" \
    tree/scripts/device-ab --build-dir "$t/build" beta=patches/beta.patch -- true > /dev/null
[ "$(tr '\n' ' ' < "$t/builds.txt")" = "alpha beta alpha " ] || fail "builds saw: $(tr '\n' ' ' < "$t/builds.txt")"
# their logs in one file, a header per build, and no other build files
[ "$(grep '^== build of' "$t/out2/builds.txt" | tr '\n' ' ')" = "== build of base (rc 0) == build of beta (rc 0) == build of restore (rc 0) " ] ||
    fail "builds.txt headers: $(grep '^==' "$t/out2/builds.txt" | tr '\n' ' ')"
[ "$(ls "$t/out2" | tr '\n' ' ')" = "base.txt beta.txt builds.txt warmup.txt " ] || fail "files: $(ls "$t/out2" | tr '\n' ' ')"
# the base's command runs once more first (warm-up, output to warmup.txt), unless --no-warmup
OUT="$t/out3" tree/scripts/device-ab --no-build beta=patches/beta.patch -- \
    bash -c 'cat tree/value.txt >> runs.txt' > /dev/null
[ "$(tr '\n' ' ' < runs.txt)" = "alpha alpha beta " ] || fail "runs with warm-up: $(tr '\n' ' ' < runs.txt)"
[ -f "$t/out3/warmup.txt" ] || fail "no warmup.txt"
rm runs.txt
OUT="$t/out4" tree/scripts/device-ab --no-build --no-warmup beta=patches/beta.patch -- \
    bash -c 'cat tree/value.txt >> runs.txt' > /dev/null
[ "$(tr '\n' ' ' < runs.txt)" = "alpha beta " ] || fail "runs without warm-up: $(tr '\n' ' ' < runs.txt)"
rm runs.txt
# --base-again: the base once more after the variants, on the tree as it was found
OUT="$t/out5" tree/scripts/device-ab --no-build --no-warmup --base-again beta=patches/beta.patch -- \
    bash -c 'cat tree/value.txt >> runs.txt' > /dev/null
[ "$(tr '\n' ' ' < runs.txt)" = "alpha beta alpha " ] || fail "runs with base-again: $(tr '\n' ' ' < runs.txt)"
[ -f "$t/out5/base-again.txt" ] || fail "no base-again.txt"
set +e
msg="$(tree/scripts/device-ab --no-build stale=patches/stale.patch -- cat tree/value.txt 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'does not apply' <<<"$msg" || fail "stale patch: rc $rc, '$msg'"
msg="$(tree/scripts/device-ab --no-build gone=patches/none.patch -- true 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'existing patch file' <<<"$msg" || fail "missing patch: rc $rc, '$msg'"
msg="$(tree/scripts/device-ab --no-build 2>&1)"; rc=$?
[ $rc = 2 ] && grep -q 'no command' <<<"$msg" || fail "no command: rc $rc, '$msg'"
[ "$(cat tree/value.txt)" = alpha ] || fail "a failed run changed the tree"
echo "device-ab: variants run on their own trees, patches taken back, the base rebuilt last, a warm-up run, the base again on request, bad patches refused"
