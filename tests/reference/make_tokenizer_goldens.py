#!/usr/bin/env python3
"""Writes tests/data/tokenizer/goldens_v4.jsonl: strings encoded by HF `tokenizers` with DeepSeek-V4's
tokenizer.json, the fixture the C++ tokenizer must match id for id.

Each line is one JSON object:
  {"text": s, "ids": [...]}                 encode(s, add_special_tokens=False).ids
  {"hex": "...", "ids": [...]}              invalid UTF-8 bytes; ids of bytes.decode("utf-8", "replace")
  {"decode": [...], "text": s, "skip": b}   decode(ids, skip_special_tokens=b) of an arbitrary id sequence
and goldens_v4_variants.json: patched copies of the file (added tokens with lstrip/rstrip/single_word/normalized,
Split steps with every behaviour, inverted or not) with the ids HF gives for a few strings.
The strings are generated from a fixed seed (deterministic for a given tokenizer file): English prose, code with
tabs and mixed indentation, CJK, emoji incl. ZWJ sequences, digit runs, whitespace/newline runs, every added
token's text, look-alike ASCII, mixed scripts, random code points.

Usage: python3 tests/reference/make_tokenizer_goldens.py [--tokenizer FILE] [--out FILE]
Requires: pip install -r tests/reference/requirements.txt
"""
import argparse
import json
import pathlib
import random

from tokenizers import Tokenizer

ROOT = pathlib.Path(__file__).resolve().parents[2]

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times; it was the age of wisdom...",
    "Don't panic! We're sure you'll find it's fine -- they've said so.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong's first words were heard by ~600 million people.",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=two#frag.",
    "Mr. O'Neil (aged 42) paid $3,141.59 for 2.5kg of coffee -- a 15% discount!",
    "  Leading spaces, trailing spaces   ",
    "Hyphen-ated, under_scored, camelCase, PascalCase, snake_case and SCREAMING_CASE words.",
    "Quotes: \"double\", 'single', `backtick`, «guillemets», „German“, “curly” and ‘curly’.",
    "He said: 'I can't, won't, shouldn't'—and then left…",
]
CODE = [
    "def f(x):\n\treturn x * 2\n",
    "int main() {\n    printf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) {\n\t  sum += a[i];  // mixed tab+space\n}\n",
    "if x:\n    y = {'a': [1, 2, 3], \"b\": (4, 5)}\n\n\n    pass\n",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;\n",
    "<div class=\"x\"><p>Hello &amp; welcome</p></div>\n",
    "fn main() -> Result<(), Box<dyn Error>> { let v: Vec<u8> = vec![]; Ok(()) }\r\n",
    "x = a&&b || !c; y = a->b; z = ::std::move(w);\n",
    "#include <vector>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n",
    "    \t\t  mixed\t \tindent\n\t\n",
    "```python\nprint('hi')\n```\n",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, true, null]}\n",
    "a = b;\n\nc = d;\r\n\r\ne = f;\n\n\n\n",
    "foo(bar)?.baz!.qux;;;\n",
    "$var = @array[0] . %hash{'k'};\n",
]
CJK = [
    "你好，世界！今天天气很好。",
    "深度求索发布了新的模型，支持一百万个令牌的上下文。",
    "日本語のテキストです。カタカナとひらがなを混ぜます。",
    "東京タワーは333メートルです。",
    "한국어 문장도 포함합니다. 안녕하세요!",
    "中文English混合Mixed文本123测试",
    "「引用」と『二重引用』、〜波ダッシュ〜。",
    "繁體中文與简体中文並存。",
    "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
    "龥龦鿿㐀𠀀",
]
EMOJI = [
    "👍", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵🇺🇸", "🧑🏿‍💻 coding", "😀😃😄😁", "✋🏻✋🏼✋🏽✋🏾✋🏿",
    "I ❤️ NY 🗽!", "🤷‍♂️🤷‍♀️", "👩‍❤️‍💋‍👨", "#️⃣ 1️⃣ *️⃣",
]
SCRIPTS = [
    "Привет, мир! Ёжик в тумане.", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया",
    "สวัสดีชาวโลก", "Xin chào thế giới", "Ünïcödé çåfé naïve résumé", "ǅungla ǈ ǋ", "ﬁﬂ ligatures",
    "Zalgo: Z̴̡̛a̵͇̒l̸̰̈g̶̣̓o̷͙̍", "e\u0301 vs \u00e9", "ᚠᛇᚻ᛫ᛒᛦᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙", "ⅠⅡⅢ Ⅳ ½ ¾ ² ³ ١٢٣ ४५६",
]
LOOKALIKE = [
    "<|User|>", "<|Assistant|>", "<|begin_of_sentence|>", "<｜User|>", "< think>", "<think >", "<thinking>",
    "</think", "<think", "<｜User｜", "｜User｜>", "<<｜User｜>>", "<｜User｜><｜User｜>", "<think></think>",
    "<｜DSML｜invoke name=\"f\">", "｜DSML｜｜DSML｜", "<dsml:tool>", "</dsml:tool>",
]
WHITESPACE = [
    " ", "  ", "   ", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\t", "\t\t", " \n", "\n ", " \n ", "  \n  \n",
    "a \n b", "x\u00a0y", "x\u2003y", "x\u3000y", "\u2028", "\u2029", "\u0085", "a\u000bb\u000cc", " \t \t ",
    "word   ", "   word", "a  b   c    d", "\n\n\nx", "x\n\n\n", "end.\n", "end!\n\n", "?!\r\n", ". \n",
]


def digit_strings(rng):
    out = ["0", "12", "123", "1234", "12345", "1234567", "3.14159265358979", "1,000,000", "-42", "+1e-10",
           "0x1F4A", "2024-05-11T12:34:56Z", "١٢٣٤٥", "١٢٣٤", "²³⁴", "Ⅻ"]
    for n in range(1, 40):
        out.append("".join(rng.choice("0123456789") for _ in range(n)))
    out.append("9" * 1000)
    return out


def random_unicode(rng, n):
    """Random code points: mostly assigned BMP, some astral, controls, combining marks, unassigned."""
    pools = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
             (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F), (0x2190, 0x23FF),
             (0x2500, 0x27BF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xF900, 0xFAFF),
             (0xFE00, 0xFE6F), (0xFF00, 0xFFEF), (0x1F300, 0x1FAFF), (0x10000, 0x1034F), (0x1D400, 0x1D7FF),
             (0x20000, 0x2A6DF), (0xE0000, 0xE007F), (0x0, 0x1F), (0xF0000, 0xF00FF), (0x0378, 0x0379)]
    chars = []
    for _ in range(n):
        lo, hi = rng.choice(pools)
        cp = rng.randint(lo, hi)
        if 0xD800 <= cp <= 0xDFFF:
            cp = 0x41
        chars.append(chr(cp))
    return "".join(chars)


def build_texts(tok_json, rng):
    added = [t["content"] for t in tok_json["added_tokens"]]
    fragments = PROSE + CODE + CJK + EMOJI + SCRIPTS + LOOKALIKE + WHITESPACE + digit_strings(rng)
    texts = ["", *fragments]
    texts += added  # every added/special token on its own
    texts += [f"a{t}b" for t in added[:200]]
    texts += [f" {t} " for t in added[::7]]
    texts += [f"{t}\n{t}" for t in added[::11]]
    # Chat-shaped strings.
    texts += ["<｜begin▁of▁sentence｜>You are helpful.<｜User｜>What is 2+2?<｜Assistant｜></think>4<｜end▁of▁sentence｜>",
              "<｜User｜>Think.<｜Assistant｜><think>\nLet me see... 17*23 = 391.\n</think>\n\n**391**",
              "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n<｜DSML｜parameter name=\"q\" string=\"true\">x"
              "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"]
    # Random mixtures of fragments, added tokens and random code points.
    for _ in range(1400):
        k = rng.randint(1, 6)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(fragments))
            elif r < 0.7:
                parts.append(rng.choice(added))
            elif r < 0.85:
                parts.append(random_unicode(rng, rng.randint(1, 12)))
            else:
                parts.append(rng.choice([" ", "\n", "\t", "  ", "\r\n", "", ".", "'", "-"]))
        texts.append(rng.choice(["", " ", "\n"]).join(parts))
    for _ in range(300):
        texts.append(random_unicode(rng, rng.randint(1, 60)))
    # A few long texts (the BPE cache and long pieces).
    texts.append(" ".join(PROSE) * 20)
    texts.append("\n".join(CODE) * 10)
    texts.append("".join(CJK) * 10)
    texts.append(" " * 5000 + "x")
    texts.append("\n" * 3000)
    texts.append("a" * 3000)
    texts.append("!" * 2000)
    return texts


INVALID = [b"\xff", b"abc\x80def", b"\xc3", b"\xc3(", b"\xe2\x82", b"\xe2\x82(", b"\xf0\x9f\x98", b"\xf0\x80\x80\x80",
           b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"hi \xfe\xff there",
           b"\xe4\xbd\xa0\xe5\xa5", b"<\xef\xbd\x9cUser\xef\xbd\x9c>\xff", b"\x80\x80\x80", b"ok\xe0\x80\x80ok"]


VARIANT_TEXTS = ["a[L]b", "a  [L]b", "x [L]  [L] y", "a[R]  b", "a [R]\n\nb", "[R]", " [B] ", "a\t[B]\u3000b",
                 "[W]", "a[W]b", "a [W] b", "_[W]", "é[W]", "1[W]2", "[W]!", "x-[W]-y", "[N] [NL]", "a[NL]b  ",
                 "the-final--countdown", "-a-", "--", "a--b---c", "", "no dash here", "-", "x - y -- z"]


def variants(tok_json):
    """tokenizer.json variants (patches of the V4 file) exercising flags and split behaviours DeepSeek's file
    does not use; the C++ test applies the same patch and must give the same ids."""
    out = []
    base_id = 129280
    flags = [("[L]", dict(lstrip=True)), ("[R]", dict(rstrip=True)), ("[B]", dict(lstrip=True, rstrip=True)),
             ("[W]", dict(single_word=True)), ("[N]", dict(normalized=True, lstrip=True)),
             ("[NL]", dict(normalized=True, rstrip=True, special=False))]
    added = []
    for i, (content, f) in enumerate(flags):
        tok = dict(id=base_id + i, content=content, single_word=False, lstrip=False, rstrip=False,
                   normalized=False, special=True)
        tok.update(f)
        added.append(tok)
    out.append({"name": "added_token_flags", "patch": {"append_added_tokens": added}})
    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        for invert in (False, True):
            pre = {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"String": "-"}, "behavior": behavior, "invert": invert},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
            out.append({"name": f"split_{behavior}_{'inverted' if invert else 'plain'}",
                        "patch": {"pre_tokenizer": pre}})
    for v in out:
        patched = json.loads(json.dumps(tok_json))
        if "append_added_tokens" in v["patch"]:
            patched["added_tokens"] += v["patch"]["append_added_tokens"]
        if "pre_tokenizer" in v["patch"]:
            patched["pre_tokenizer"] = v["patch"]["pre_tokenizer"]
        tok = Tokenizer.from_str(json.dumps(patched))
        v["cases"] = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in VARIANT_TEXTS]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=str(ROOT / "tests/data/tokenizer/deepseek_v4_tokenizer.json"))
    ap.add_argument("--out", default=str(ROOT / "tests/data/tokenizer/goldens_v4.jsonl"))
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    tok_json = json.loads(pathlib.Path(args.tokenizer).read_text(encoding="utf-8"))
    rng = random.Random(20260511)
    lines = []
    texts = build_texts(tok_json, rng)
    for t in texts:
        ids = tok.encode(t, add_special_tokens=False).ids
        lines.append(json.dumps({"text": t, "ids": ids}, ensure_ascii=False))
    for b in INVALID:
        ids = tok.encode(b.decode("utf-8", errors="replace"), add_special_tokens=False).ids
        lines.append(json.dumps({"hex": b.hex(), "ids": ids}))
    vocab = tok.get_vocab_size()
    for i in range(300):
        ids = [rng.randrange(vocab) for _ in range(rng.randint(1, 8))]
        if i % 3 == 0:  # byte tokens split characters: exercises the U+FFFD path
            ids = [rng.randrange(0, 300) for _ in range(rng.randint(1, 8))]
        skip = bool(i % 2)
        lines.append(json.dumps({"decode": ids, "text": tok.decode(ids, skip_special_tokens=skip), "skip": skip},
                                ensure_ascii=False))
    pathlib.Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    variants_path = pathlib.Path(args.out).with_name(pathlib.Path(args.out).stem + "_variants.json")
    variants_path.write_text(json.dumps(variants(tok_json), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {variants_path}")
    size = pathlib.Path(args.out).stat().st_size
    print(f"wrote {args.out}: {len(texts)} strings, {len(INVALID)} invalid-UTF-8 inputs, 300 decode cases, "
          f"{size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
