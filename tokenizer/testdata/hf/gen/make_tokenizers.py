"""Writes the small hand-made tokenizer.json files of ../ (one per feature).

usage: python3 make_tokenizers.py   (then: node gen_cases.js, see README.md)
Every vocabulary and merge list here is made up for the tests.
"""
import json, os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def byte_chars():
    """GPT-2's byte-level alphabet, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = [], 0
    for b in range(256):
        if b in printable:
            out.append(chr(b))
        else:
            out.append(chr(256 + n))
            n += 1
    return out


def bpe(vocab_list, merges, as_pairs=False, **opts):
    """A BPE model; merges are (a, b) pairs whose concatenation is added to the vocabulary."""
    vocab = {}
    for t in vocab_list:
        vocab.setdefault(t, len(vocab))
    prefix = opts.get("continuing_subword_prefix") or ""
    for a, b in merges:
        assert a in vocab and b in vocab, (a, b)
        vocab.setdefault(a + b[len(prefix):], len(vocab))
    m = {
        "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
        "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
        "vocab": vocab,
        "merges": [[a, b] for a, b in merges] if as_pairs else ["#version: 0.2"] + [a + " " + b for a, b in merges],
    }
    m.update(opts)
    return m


def tok(model, normalizer=None, pre=None, post=None, decoder=None, added=(), truncation=None, padding=None):
    return {"version": "1.0", "truncation": truncation, "padding": padding, "added_tokens": list(added),
            "normalizer": normalizer, "pre_tokenizer": pre, "post_processor": post, "decoder": decoder, "model": model}


def added(id, content, special=True, single_word=False, lstrip=False, rstrip=False, normalized=None):
    return {"id": id, "content": content, "single_word": single_word, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": (not special) if normalized is None else normalized, "special": special}


BL = byte_chars()
G = "\u0120"  # byte-level space
# Merges over the byte-level alphabet (in rank order).
BL_MERGES = [
    (G, "t"), ("h", "e"), (G + "t", "he"), ("e", "l"), ("l", "o"), ("el", "lo"), ("h", "ello"),
    (G, "w"), ("o", "r"), (G + "w", "or"), ("l", "d"), (G + "wor", "ld"), ("a", "a"), ("aa", "aa"),
    ("!", "!"), ("0", "0"), ("00", "00"), ("-", "-"), ("i", "n"), ("in", "g"), ("'", "s"), ("'", "t"),
    ("c", "a"), ("ca", "f"), (G, "a"), ("x", "x"), ("1", "2"), ("3", "4"), (G, G), (G + G, G + G),
    ("\u010a", "\u010a"), ("t", "he"), ("W", "O"), ("WO", "R"), ("H", "e"), ("He", "l"), ("Hel", "lo"),
]
BLW_VOCAB = BL + [c + "</w>" for c in BL]
BLW_MERGES = [
    ("a", "b"), ("ab", "c</w>"), ("-", "-"), ("--", "-</w>"), ("x", "x</w>"), ("1", "2</w>"), ("3", "4</w>"),
    ("t", "h"), ("th", "e</w>"), ("a", "-</w>"), ("-", "b"), ("1", "-</w>"), ("-", "x"), ("-", "-</w>"),
]

T = {}

T["roberta_like"] = tok(
    bpe(["<s>", "<pad>", "</s>", "<unk>"] + BL, BL_MERGES),
    pre={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    post={"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0], "trim_offsets": True, "add_prefix_space": True},
    decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    added=[added(0, "<s>"), added(1, "<pad>"), added(2, "</s>"), added(3, "<unk>"),
           added(4 + 256 + len(BL_MERGES), "<mask>", lstrip=True)],
)

n = 256 + len(BL_MERGES)
T["added_flags"] = tok(
    bpe(BL, BL_MERGES, as_pairs=True),
    normalizer={"type": "Lowercase"},
    pre={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
    post={"type": "TemplateProcessing",
          "single": [{"SpecialToken": {"id": "<|x|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<|y|>", "type_id": 0}}],
          "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
          "special_tokens": {"<|x|>": {"id": "<|x|>", "ids": [n + 7], "tokens": ["<|x|>"]},
                             "<|y|>": {"id": "<|y|>", "ids": [n + 8, n + 7], "tokens": ["<|y|>", "<|x|>"]}}},
    decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    added=[added(n, "[A]", special=False, single_word=True, normalized=False),
           added(n + 1, "[B]", lstrip=True),
           added(n + 2, "[C]", rstrip=True),
           added(n + 3, "[D]", special=False, lstrip=True, rstrip=True, normalized=False),
           added(n + 4, "Hello", special=False, normalized=True),
           added(n + 5, "WORLD", special=False, normalized=False),
           added(n + 6, "the", special=False, normalized=False),
           added(n + 7, "<|x|>"), added(n + 8, "<|y|>"),
           added(999, "<gap>"),
           added(2, "#", special=True),
           added(n + 9, "", special=False)],
    truncation={"direction": "Left", "max_length": 12, "strategy": "LongestFirst", "stride": 0},
    padding={"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": 5, "pad_id": 1,
             "pad_type_id": 0, "pad_token": "\""},
)

for beh in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
    for inv in (False, True):
        pattern = {"Regex": "[a-z]+"} if inv else {"Regex": "-+|\\d"}
        T["split_%s%s" % (beh, "_invert" if inv else "")] = tok(
            bpe(BLW_VOCAB, BLW_MERGES, end_of_word_suffix="</w>"),
            pre={"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": pattern, "behavior": beh, "invert": inv},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        )
T["split_string"] = tok(
    bpe(BLW_VOCAB, BLW_MERGES, end_of_word_suffix="</w>"),
    pre={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "--"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"String": "a.b"}, "behavior": "Removed", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
    decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
)
for beh in ["Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
    T["split_empty_" + beh] = tok(
        bpe(BLW_VOCAB, BLW_MERGES, end_of_word_suffix="</w>"),
        pre={"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "x*"}, "behavior": beh, "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    )
T["split_lookaround"] = tok(
    bpe(BLW_VOCAB, BLW_MERGES, end_of_word_suffix="</w>"),
    pre={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?<=[a-z])(?=[A-Z])|\\s+(?!\\S)|\\b"}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
    decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
)

T["whitespace_digits"] = tok(
    bpe(BLW_VOCAB, BLW_MERGES, end_of_word_suffix="</w>"),
    pre={"type": "Sequence", "pretokenizers": [{"type": "Whitespace"}, {"type": "Digits", "individual_digits": True}]},
)
T["wsplit_digits_unk_fuse"] = tok(
    bpe(["[UNK]"] + BLW_VOCAB, BLW_MERGES, end_of_word_suffix="</w>", unk_token="[UNK]", fuse_unk=True),
    pre={"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": False}]},
)
T["wsplit_unk"] = tok(
    bpe(["[UNK]"] + BLW_VOCAB, BLW_MERGES, end_of_word_suffix="</w>", unk_token="[UNK]"),
    pre={"type": "WhitespaceSplit"},
)

letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list("0123456789")
PS_VOCAB = ["[UNK]"] + letters + ["##" + c for c in letters] + [c + "</w>" for c in letters] + ["##" + c + "</w>" for c in letters]
T["prefix_suffix"] = tok(
    bpe(PS_VOCAB, [("t", "##h"), ("th", "##e</w>"), ("h", "##e"), ("he", "##l"), ("##l", "##o</w>"), ("hel", "##lo</w>"),
                   ("a", "##a"), ("aa", "##a"), ("##a", "##a</w>")],
        continuing_subword_prefix="##", end_of_word_suffix="</w>", unk_token="[UNK]"),
    normalizer={"type": "Lowercase"},
    pre={"type": "WhitespaceSplit"},
)

for im in (True, False):
    T["ignore_merges_" + str(im).lower()] = tok(
        bpe(BL + ["hello", G + "world", "aaaa", "HELLO"], BL_MERGES, ignore_merges=im),
        pre={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    )

BF_VOCAB = ["<unk>"] + ["<0x%02X>" % b for b in range(256)] + letters + [" "]
T["byte_fallback"] = tok(
    bpe(BF_VOCAB, [("t", "h"), ("th", "e")], byte_fallback=True, unk_token="<unk>"),
    pre={"type": "WhitespaceSplit"},
)

T["normalizers"] = tok(
    bpe(BL, BL_MERGES),
    normalizer={"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Lowercase"},
        {"type": "Replace", "pattern": {"String": "  "}, "content": " "},
        {"type": "Replace", "pattern": {"Regex": "\\d+"}, "content": "#"},
        {"type": "Strip", "strip_left": True, "strip_right": True},
        {"type": "Prepend", "prepend": "^"}]},
    pre={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
)
for form in ["NFC", "NFD", "NFKC", "NFKD"]:
    T["unicode_" + form] = tok(
        bpe(BL, BL_MERGES),
        normalizer={"type": form},
        pre={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        added=[added(300, "café", special=False, normalized=True)],
    )

T["bert_processing_no_decoder"] = tok(
    bpe(["[CLS]", "[SEP]"] + BL, BL_MERGES),
    pre={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True},
    post={"type": "BertProcessing", "sep": ["[SEP]", 1], "cls": ["[CLS]", 0]},
    added=[added(0, "[CLS]"), added(1, "[SEP]")],
    truncation={"direction": "Right", "max_length": 9, "strategy": "LongestFirst", "stride": 0},
    padding={"strategy": {"Fixed": 11}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 3,
             "pad_type_id": 0, "pad_token": "$"},
)

LLAMA3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
m = bpe(BL + ["hello", "'S", "'ſ", "'t"], BL_MERGES, ignore_merges=True)
T["llama3_like"] = tok(
    m,
    pre={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    post={"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {"type": "TemplateProcessing",
         "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                  {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [len(m["vocab"])], "tokens": ["<|begin_of_text|>"]}}}]},
    decoder={"type": "Sequence", "decoders": [{"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
    added=[added(len(m["vocab"]), "<|begin_of_text|>"), added(len(m["vocab"]) + 1, "<|eot_id|>"),
           added(len(m["vocab"]) + 2, "<|reserved_special_token_0|>")],
)
QWEN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
T["qwen_like"] = tok(
    bpe(BL + ["'S", "'ſ"], BL_MERGES),
    normalizer={"type": "NFC"},
    pre={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
    post={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
)
T["gpt2_like_prefix_space"] = tok(
    bpe(BL + ["'S"], BL_MERGES),
    pre={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    added=[added(5000, "<|endoftext|>")],
)

# SentencePiece-style BPE ("▁" for a space, byte fallback) with the Metaspace
# pre-tokenizer and decoder in their three prepend schemes, with and without
# split, inside Sequences, and the decoders Replace, ByteFallback, Fuse and
# Strip in the orders Mistral and Gemma use and in others. (Hugging Face's Strip
# panics when its stop cut reaches the start of a token, an empty one included:
# such decoders are left out.)
SP = "\u2581"
SP_VOCAB = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + [SP] + \
    [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)] + \
    list("0123456789.,!'-_[]<>|é中")
SP_MERGES = [(SP, "t"), ("h", "e"), (SP + "t", "he"), (SP, SP), (SP + SP, SP + SP), ("e", "l"), ("l", "o"),
             ("el", "lo"), ("h", "ello"), (SP, "hello"), (SP, "w"), ("o", "r"), (SP + "w", "or"), ("l", "d"),
             (SP + "wor", "ld"), ("a", "a"), ("aa", "aa"), (SP, "a"), ("!", "!"), ("0", "0"), ("i", "n"),
             ("in", "g"), (SP, "x"), ("x", "x"), ("<", "s"), ("<s", ">"), (SP, "<s>"), ("'", "s"), (SP, "["),
             ("!", SP), ("!" + SP, "x"), ("l", SP + "w")]  # the last three join across a "▁" (Gemma has one such)
SP_ADDED = [added(1, "<s>"), added(2, "</s>"), added(0, "<unk>"), added(400, "[A]", special=False),
            added(401, "<mask>", lstrip=True), added(402, "[R]", special=False, rstrip=True, normalized=False)]
SP_DECODER_MISTRAL = {"type": "Sequence", "decoders": [
    {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"},
    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}


def metaspace(scheme, split=True):
    return {"type": "Metaspace", "replacement": SP, "prepend_scheme": scheme, "split": split}


T["sp_mistral_like"] = tok(
    bpe(SP_VOCAB, SP_MERGES, byte_fallback=True, fuse_unk=True, unk_token="<unk>"),
    normalizer={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP},
                                                    {"type": "Replace", "pattern": {"String": " "}, "content": SP}]},
    post={"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
          "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "<s>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
          "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    decoder=SP_DECODER_MISTRAL, added=SP_ADDED,
)
T["sp_metaspace_first"] = tok(
    bpe(SP_VOCAB, SP_MERGES, byte_fallback=True, unk_token="<unk>"),
    pre=metaspace("first"), decoder=metaspace("first"), added=SP_ADDED,
)
T["sp_metaspace_always_nosplit"] = tok(
    bpe(SP_VOCAB, SP_MERGES, byte_fallback=True, fuse_unk=True, unk_token="<unk>"),
    pre=metaspace("always", split=False),
    decoder={"type": "Sequence", "decoders": [{"type": "Strip", "content": SP, "start": 0, "stop": 1},
                                              metaspace("always")]},
    added=SP_ADDED,
)
T["sp_metaspace_never_seq"] = tok(
    bpe(SP_VOCAB, SP_MERGES, unk_token="<unk>", fuse_unk=True),
    pre={"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, metaspace("never")]},
    decoder={"type": "Sequence", "decoders": [{"type": "ByteFallback"}, metaspace("never"),
                                              {"type": "Strip", "content": " ", "start": 0, "stop": 1}]},
    added=SP_ADDED,
)
T["sp_metaspace_first_seq"] = tok(
    bpe(SP_VOCAB, SP_MERGES, byte_fallback=True, unk_token="<unk>", ignore_merges=True),
    normalizer={"type": "Strip", "strip_left": True, "strip_right": False},
    pre={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "-"}, "behavior": "Isolated", "invert": False}, metaspace("first")]},
    decoder={"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"Regex": SP + "+"}, "content": "_"}, {"type": "Fuse"},
        {"type": "ByteFallback"}, {"type": "Strip", "content": "_", "start": 2, "stop": 0}]},
    added=SP_ADDED,
)
T["sp_metaspace_first_strip"] = tok(
    bpe(SP_VOCAB, SP_MERGES, byte_fallback=True, unk_token="<unk>"),
    normalizer={"type": "Sequence", "normalizers": [{"type": "Strip", "strip_left": True, "strip_right": True},
                                                    {"type": "Prepend", "prepend": "_"}]},
    pre=metaspace("first", split=False), decoder=metaspace("first"), added=SP_ADDED,
)
T["sp_gemma_like"] = tok(
    bpe(SP_VOCAB, SP_MERGES, byte_fallback=True, fuse_unk=True, unk_token="<unk>"),
    normalizer={"type": "Replace", "pattern": {"String": " "}, "content": SP},
    pre={"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious", "invert": False},
    decoder={"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"}, {"type": "Fuse"}]},
    added=SP_ADDED,
)

for name, t in sorted(T.items()):
    with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
        json.dump(t, f, ensure_ascii=False)
print(len(T), "tokenizers")
