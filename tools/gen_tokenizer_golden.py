#!/usr/bin/env python3
"""Generate the tokenizer golden data of tests/data/tokenizer/ with the
Hugging Face `tokenizers` library.

Usage:
    python3 tools/gen_tokenizer_golden.py OUT_DIR

Needs only `tokenizers` (0.2x) and Python's own standard library, whose .py
files are the training text (nothing is downloaded). For each tokenizer below
it trains a small BPE (vocab 2000) with the pipeline of a real model family,
saves OUT_DIR/<name>/tokenizer.json, encodes the text set CASES with the
library and writes OUT_DIR/<name>/cases.json:

    {"tokenizers_version": "...", "name": "...", "about": "...",
     "cases": [{"text": ..., "ids": [...], "tokens": [...], "decoded": ...}]}

`ids` are Tokenizer.encode(text, add_special_tokens=True).ids; `decoded` is
Tokenizer.decode(ids, skip_special_tokens=False); `pieces` is what the
pre-tokenizer alone makes of the (normalized) text, added tokens not split
out, for debugging. ssmc's tokenizer must give
identical ids (tests/test_tokenizer.c).

A tokenizer that fails (to train, or to be written) is reported and the
others are still written; the script ends listing what it wrote and exits 1
if anything failed.

The tokenizers:
  gpt2      ByteLevel pre-tokenizer (GPT-2 regex) with add_prefix_space=true,
            no normalizer, <|endoftext|> and an lstrip <mask> (as RoBERTa);
            merges rewritten in the legacy "a b" string form.
  neox      GPT-NeoX-20b (state-spaces/mamba-*-hf): NFC normalizer, ByteLevel
            (add_prefix_space=false), <|endoftext|>, <|padding|>, and
            non-special normalized added tokens for runs of 2..24 spaces.
  falcon    tiiuae/falcon-7b (and falcon-mamba): no normalizer,
            Sequence[Punctuation(contiguous), ByteLevel(use_regex=true),
            Digits(individual_digits=false), Split("[0-9][0-9][0-9]",
            isolated)], the >>TITLE<< ... special tokens, no post-processor.
  llama3    Sequence[Split(GPT-4 / Llama-3 regex, isolated),
            ByteLevel(use_regex=false)], merges as [a, b] pairs.
  splitmix  Sequence[Split(GPT-2 regex, merged_with_next), Digits(individual),
            ByteLevel(add_prefix_space=true, use_regex=false)]: per-piece
            prefix spaces and another split behavior.
  qwen2     Qwen2: NFC, Sequence[Split(Qwen2 regex, isolated),
            ByteLevel(use_regex=false)]; <|endoftext|>, <|im_start|>,
            <|im_end|>.
  llama2    SentencePiece-style BPE (Llama 2, Mistral): normalizer
            Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer,
            decoder Sequence[Replace("▁", " "), ByteFallback, Fuse,
            Strip(" ", 1, 0)]; byte_fallback with the 256 <0xXX> tokens at
            ids 3..258, unk_token <unk>, fuse_unk; <unk> <s> </s>. The
            alphabet is limited to 120 characters, so rarer ones (CJK,
            emoji) fall back to bytes.
  metaspace Metaspace(prepend_scheme="first") pre-tokenizer and decoder,
            byte_fallback (the decoder leaves <0xXX> tokens as text),
            unk_token <unk>; <unk> <s> </s> <|endoftext|>.
  normmix   ByteLevel with Sequence[NFKD, Lowercase, Strip, Replace(regex
            "[ \\t]+", " "), Replace("’", "'"), Prepend(" ")], and a
            normalized added token "ＤＯＮ'Ｔ" (matched and decoded as
            " don't").
"""

import glob
import json
import os
import sys
import sysconfig

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
GPT4_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
           r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
            r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SP = "\u2581"  # SentencePiece's space

MULTILINGUAL = [
    "Le café est très bon, n'est-ce pas? Ça coûte 3,50 €. Élève, naïve, façade, Ångström.",
    "Der Bär läuft über die Straße. Größe, Übermut, Öl, ß.",
    "日本語のテキストを処理します。東京は大きな都市です。中文文本处理，你好世界！",
    "한국어 텍스트를 처리합니다. 안녕하세요 세계!",
    "Привет, мир! Как дела? Это русский текст.",
    "مرحبا بالعالم! هذا نص عربي.  שלום עולם!",
    "नमस्ते दुनिया! यह हिंदी पाठ है।  สวัสดีครับ ภาษาไทย",
    "Emoji: 😀 😃 👍🏽 ❤️ 🦀 👩‍👩‍👧‍👦 🏳️‍🌈 🇯🇵 🇫🇷 ✨🎉",
    "Numbers: 1234567890 3.14159 2,718 -42 1e10 ²³ ½ ¾ ٣٤٥ ๑๒๓ Ⅻ",
    "    def f(x):\n        return x + 1\n\n\tint main(void) {\n\t\treturn 0;\n\t}\r\n",
]

CASES = [
    "",
    " ",
    "a",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine; we've done what you'd do. DON'T SHOUT'S 'RE 'Ve",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main(void) {\n\tfor (int i = 0; i < 10; i++) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n}\r\n",
    "line with trailing spaces   \n  \n\n\n   indented\t\ttabs \t mixed\r\n\r\nend",
    "a  b   c    d     e" + " " * 30 + "f" + " " * 7,
    "   leading and trailing   ",
    "\n\n\n",
    " \n \n ",
    "I ❤️ 🦀 and 👩‍👩‍👧‍👦 family, 🏳️‍🌈 flag, 🇯🇵🇫🇷 flags, thumbs 👍🏽👍🏿 😀😃",
    "日本語のテキストと中文文本，한국어 텍스트。東京タワー！",
    "café naïve résumé Ångström façade Øresund żółć",
    "cafe\u0301 nai\u0308ve A\u030a a\u0301\u0323 q\u0307\u0323 e\u0301\u0301 \u1e9b\u0323",
    "1234567890 3.14159 -42 1e10 0x1F abc12345def 99 bottles ²³ ½ ٣٤٥ ๑๒๓ Ⅻ",
    "Hello<|endoftext|>World <|endoftext|> <|endoftext|><|endoftext|>end",
    "a <mask> b<mask>c  <mask>",
    ">>TITLE<< Paper >>ABSTRACT<<Text>>COMMENT<<",
    "Well... (really?!) [yes]; {no}: 'quoted' \"double\" — em – en «guill» ¿qué? ¡sí! …",
    "Привет, мир! مرحبا بالعالم שלום नमस्ते दुनिया สวัสดีครับ Γειά σου",
    "zero\u200bwidth\u200cjoin\u200dsoft\u00adhyphen nb\u00a0sp ideo\u3000sp line\u2028sep",
    "\x01\x02\x1b[0m\x7f bell\x07 vtab\x0b ff\x0c",
    "camelCaseWord snake_case_word SCREAMING_CASE __dunder__ x86_64 i18n",
    "https://example.com/path?query=1&x=%20y#frag user@example.org",
    "It’s the “smart” quotes’ turn — don’t they’re",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "   \t\t  x\n",
    "ſ K Å ǅ ﬁ ﬀ ㎏ ①②③",
]


def random_cases(n, seed=1234):
    """Seeded random strings over a pool that stresses the split rules."""
    import random
    rng = random.Random(seed)
    pool = (list("abcxyzABCXYZ") + list("0123456789") + [" "] * 8 + ["\t", "\n", "\r", "'"] * 2 +
            list("sStTdDmMlLrevE") + list(".,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`") +
            ["é", "e\u0301", "ß", "ñ", "Ω", "ж", "日", "本", "語", "한", "ة", "ॐ", "ก", "²", "½", "٣",
             "Ⅻ", "😀", "👍🏽", "👩‍👩‍👧", "🇯🇵", "\u200d", "\u00a0", "\u3000", "\u2028", "…", "—",
             "’", "«", "¿", "<|endoftext|>", ">>TITLE<<", "<mask>", "   ", "\n\n"])
    return ["".join(rng.choice(pool) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def training_text():
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")))
    texts, total = [], 0
    for f in files:
        with open(f, encoding="utf-8", errors="replace") as fh:
            t = fh.read()
        texts.append(t)
        total += len(t)
        if total > 3_000_000:
            break
    return texts + MULTILINGUAL * 40, files


def long_case(files):
    # A long code prompt: the first ~4000 characters of a stdlib file.
    for f in files:
        if f.endswith(os.sep + "textwrap.py"):
            with open(f, encoding="utf-8") as fh:
                return fh.read()[:4000]
    with open(files[0], encoding="utf-8", errors="replace") as fh:
        return fh.read()[:4000]


def train(pre_tokenizer, normalizer, special, post_processor):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    if post_processor is not None:
        tok.post_processor = post_processor
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(TEXTS, trainer)
    return tok


def make_gpt2():
    bl = pre_tokenizers.ByteLevel
    tok = train(bl(add_prefix_space=True, use_regex=True), None, ["<|endoftext|>"],
                processors.ByteLevel(trim_offsets=True))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    return tok, "ByteLevel(add_prefix_space=true), lstrip <mask>, legacy merges"


def make_neox():
    bl = pre_tokenizers.ByteLevel
    tok = train(bl(add_prefix_space=False, use_regex=True), normalizers.NFC(),
                ["<|endoftext|>", "<|padding|>"], processors.ByteLevel(trim_offsets=True))
    tok.add_tokens([AddedToken(" " * k, normalized=True, special=False) for k in range(24, 1, -1)])
    return tok, "GPT-NeoX-20b pipeline: NFC, ByteLevel, space-run added tokens"


def make_falcon():
    falcon_special = [">>TITLE<<", ">>ABSTRACT<<", ">>INTRODUCTION<<", ">>SUMMARY<<",
                      ">>COMMENT<<", ">>ANSWER<<", ">>QUESTION<<", ">>DOMAIN<<", ">>PREFIX<<",
                      ">>SUFFIX<<", ">>MIDDLE<<", "<|endoftext|>"]
    seq = pre_tokenizers.Sequence([
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex("[0-9][0-9][0-9]"), behavior="isolated", invert=False),
    ])
    return (train(seq, None, falcon_special, None),
            "tiiuae/falcon-7b pipeline: Punctuation, ByteLevel, Digits, Split")


def make_llama3():
    seq = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT4_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    return (train(seq, None, ["<|endoftext|>"], processors.ByteLevel(trim_offsets=False)),
            "Split(GPT-4 regex) + ByteLevel(use_regex=false)")


def make_splitmix():
    seq = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(GPT2_RE), behavior="merged_with_next", invert=False),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
    ])
    return (train(seq, None, ["<|endoftext|>"], None),
            "Split(GPT-2 regex, merged_with_next) + Digits(individual) + "
            "ByteLevel(add_prefix_space=true, use_regex=false)")


def make_qwen2():
    seq = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_RE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    return (train(seq, normalizers.NFC(), ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                  processors.ByteLevel(trim_offsets=False)),
            "Qwen2 pipeline: NFC, Split(Qwen2 regex) + ByteLevel(use_regex=false)")


def with_byte_tokens(tok):
    """The tokenizer with the 256 <0xXX> byte-fallback tokens in model.vocab
    right after the special tokens (as Llama 2 has them), the trained tokens
    moved up by 256 ids. The trainer does not make them, and as added tokens
    they would be split out of the text."""
    obj = json.loads(tok.to_str())
    vocab = obj["model"]["vocab"]
    n_special = len(obj["added_tokens"])
    assert all(t["id"] < n_special for t in obj["added_tokens"])
    assert sorted(t["id"] for t in obj["added_tokens"]) == list(range(n_special))
    assert not any(("<0x%02X>" % b) in vocab for b in range(256))
    new = {}
    for t, i in sorted(vocab.items(), key=lambda kv: kv[1]):
        new[t] = i if i < n_special else i + 256
    for b in range(256):
        new["<0x%02X>" % b] = n_special + b
    obj["model"]["vocab"] = dict(sorted(new.items(), key=lambda kv: kv[1]))
    return Tokenizer.from_str(json.dumps(obj))


def train_sp(model, normalizer, pre_tokenizer, special):
    """A SentencePiece-style BPE: characters, not bytes, with a limited
    alphabet so that rare characters are left to byte fallback."""
    tok = Tokenizer(model)
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, special_tokens=special,
                                  limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(TEXTS, trainer)
    return tok


def make_llama2():
    # trained with a Metaspace split so that no token spans a space, as
    # SentencePiece trains; the saved pipeline has no pre-tokenizer
    tok = train_sp(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True),
                   normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)]),
                   pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="never", split=True),
                   ["<unk>", "<s>", "</s>"])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    return (with_byte_tokens(tok),
            "Llama 2 / Mistral pipeline: Prepend + Replace normalizer, no pre-tokenizer, "
            "byte_fallback, Replace/ByteFallback/Fuse/Strip decoder")


def make_metaspace():
    meta = dict(replacement=SP, prepend_scheme="first", split=True)
    tok = train_sp(models.BPE(unk_token="<unk>", byte_fallback=True), None,
                   pre_tokenizers.Metaspace(**meta), ["<unk>", "<s>", "</s>", "<|endoftext|>"])
    tok.decoder = decoders.Metaspace(**meta)
    return (with_byte_tokens(tok),
            "Metaspace(prepend_scheme=first) pre-tokenizer and decoder, byte_fallback")


def make_normmix():
    norm = normalizers.Sequence([
        normalizers.NFKD(), normalizers.Lowercase(), normalizers.Strip(left=True, right=True),
        normalizers.Replace(Regex(r"[ \t]+"), " "), normalizers.Replace("\u2019", "'"),
        normalizers.Prepend(" "),
    ])
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), norm,
                ["<|endoftext|>"], None)
    tok.add_tokens([AddedToken("\uff24\uff2f\uff2e'\uff34", normalized=True, special=False)])
    return (tok, "ByteLevel with NFKD, Lowercase, Strip, Replace (regex and string), Prepend; "
            "a normalized added token")


MAKERS = [("gpt2", make_gpt2), ("neox", make_neox), ("falcon", make_falcon),
          ("llama3", make_llama3), ("splitmix", make_splitmix), ("qwen2", make_qwen2),
          ("llama2", make_llama2), ("metaspace", make_metaspace), ("normmix", make_normmix)]


def build(failed):
    out = {}
    for name, make in MAKERS:
        try:
            out[name] = make()
        except Exception as e:  # keep the others: device runs are scarce
            print("%s: FAILED: %r" % (name, e), flush=True)
            failed.append(name)
    return out


def dump_tokenizer_json(obj, path):
    """Compact JSON with one vocab entry / merge / added token per line."""
    model = obj["model"]
    head = {k: v for k, v in obj.items() if k not in ("model", "added_tokens")}
    lines = ["{"]
    for k, v in head.items():
        lines.append(" %s: %s," % (json.dumps(k), json.dumps(v, ensure_ascii=False)))
    lines.append(' "added_tokens": [')
    lines.append(",\n".join("  " + json.dumps(t, ensure_ascii=False) for t in obj["added_tokens"]))
    lines.append(" ],")
    lines.append(' "model": {')
    for k, v in model.items():
        if k not in ("vocab", "merges"):
            lines.append("  %s: %s," % (json.dumps(k), json.dumps(v, ensure_ascii=False)))
    lines.append('  "vocab": {')
    lines.append(",\n".join("   %s: %d" % (json.dumps(t, ensure_ascii=False), i)
                            for t, i in model["vocab"].items()))
    lines.append("  },")
    lines.append('  "merges": [')
    lines.append(",\n".join("   " + json.dumps(m, ensure_ascii=False) for m in model["merges"]))
    lines.append("  ]")
    lines.append(" }")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    json.loads(text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    global TEXTS
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    print("tokenizers %s, Python %s" % (tokenizers.__version__, sys.version.split()[0]), flush=True)
    TEXTS, files = training_text()
    cases = CASES + [long_case(files)] + random_cases(60)
    failed, wrote = [], []
    built = build(failed)
    for name, (tok, about) in built.items():
        try:
            wrote.append(write_one(out_dir, name, tok, about, cases))
        except Exception as e:
            print("%s: FAILED writing: %r" % (name, e), flush=True)
            failed.append(name)
    print("wrote %d tokenizer(s):" % len(wrote))
    for d in wrote:
        print("  %s/tokenizer.json, %s/cases.json" % (d, d))
    if failed:
        print("FAILED: %s" % ", ".join(failed))
        sys.exit(1)


def write_one(out_dir, name, tok, about, cases):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    obj = json.loads(tok.to_str())
    if name == "gpt2":  # the legacy merges format: "a b" strings
        obj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                  for m in obj["model"]["merges"]]
    path = os.path.join(d, "tokenizer.json")
    dump_tokenizer_json(obj, path)
    tok = Tokenizer.from_file(path)  # what we check against is what was written
    rows = []
    for text in cases:
        enc = tok.encode(text)
        norm = tok.normalizer.normalize_str(text) if tok.normalizer else text
        pieces = ([p for p, _ in tok.pre_tokenizer.pre_tokenize_str(norm)]
                  if tok.pre_tokenizer else [norm])
        rows.append({"text": text, "ids": enc.ids, "tokens": enc.tokens,
                     "decoded": tok.decode(enc.ids, skip_special_tokens=False),
                     "pieces": pieces})
    head = {"tokenizers_version": tokenizers.__version__, "name": name, "about": about}
    text = json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n'
    text += ",\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n]}\n"
    json.loads(text)
    with open(os.path.join(d, "cases.json"), "w", encoding="utf-8") as f:
        f.write(text)
    print("%s: vocab %d, %d merges, %d cases, %d bytes" %
          (name, tok.get_vocab_size(), len(obj["model"]["merges"]), len(rows),
           os.path.getsize(path)), flush=True)
    return d


if __name__ == "__main__":
    main()
