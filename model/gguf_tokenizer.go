package model

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/tokenizer"
)

// A GGUF file's tokenizer is its tokenizer.ggml.* metadata, written by
// llama.cpp's converter from the Hugging Face tokenizer (llama.cpp's
// llama-vocab.cpp reads it):
//
//	model        "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE with byte fallback)
//	pre          the pre-tokenizer by name ("gpt-2", "llama-bpe", "qwen2", "gpt-4o", …; BPE only)
//	tokens       every token's text, by id
//	token_type   1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
//	merges       "left right" (BPE), by rank
//	scores       (SentencePiece) each piece's score; merges follow from them
//	bos/eos/unknown_token_id, add_bos_token, add_eos_token, add_space_prefix
//
// GGUFTokenizerJSON turns it back into a Hugging Face tokenizer.json that
// package tokenizer loads.

// ggufPre is one BPE pre-tokenizer of llama.cpp (llama-vocab.cpp's
// LLAMA_VOCAB_PRE_TYPE_*) as the Hugging Face tokenizer.json it came from
// writes it: the normalizer and the pre-tokenizer.
type ggufPre struct {
	normalizer any
	pre        any
}

// ggufSplitByteLevel is a Split of pattern (Isolated) then a ByteLevel
// without its own regex: the Llama 3 / Qwen2 / o200k layout.
func ggufSplitByteLevel(pattern string) any {
	return map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
		map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
	}}
}

// ggufPres maps tokenizer.ggml.pre to the Hugging Face components; the
// patterns are those of the tokenizers the names stand for (GPT-2's
// ByteLevel regex, Llama 3's, Qwen2's with single digits and NFC, o200k's).
var ggufPres = map[string]ggufPre{
	"gpt-2":     {nil, map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}},
	"llama-bpe": {nil, ggufSplitByteLevel(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)},
	"qwen2":     {map[string]any{"type": "NFC"}, ggufSplitByteLevel(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)},
	"gpt-4o":    {nil, ggufSplitByteLevel(`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`)},
}

func init() { ggufPres["llama3"] = ggufPres["llama-bpe"] }

// GGUF token types (llama.cpp's llama_token_type).
const (
	ggufTokNormal      = 1
	ggufTokUnknown     = 2
	ggufTokControl     = 3
	ggufTokUserDefined = 4
	ggufTokUnused      = 5
	ggufTokByte        = 6
)

// ggufStrings reads a string-array metadata value.
func ggufStrings(g *checkpoint.GGUFFile, key string) ([]string, error) {
	v, ok := g.Meta(key)
	if !ok {
		return nil, fmt.Errorf("model: %s: metadata %q is missing", g.Path, key)
	}
	a, ok := v.(checkpoint.GGUFArray)
	s, isStr := a.Values.([]string)
	if !ok || !isStr {
		return nil, fmt.Errorf("model: %s: metadata %q: want an array of strings", g.Path, key)
	}
	return s, nil
}

// ggufTokenID reads an optional token id (bos, eos, unknown; -1: absent),
// which must be below n.
func ggufTokenID(g *checkpoint.GGUFFile, key string, n int) (int, error) {
	if _, ok := g.Meta(key); !ok {
		return -1, nil
	}
	id, err := g.MetaInt(key)
	if err != nil {
		return 0, fmt.Errorf("model: %w", err)
	}
	if id < 0 || id >= int64(n) {
		return 0, fmt.Errorf("model: %s: metadata %q = %d is not a token id (0 ≤ id < %d)", g.Path, key, id, n)
	}
	return int(id), nil
}

// ggufBool reads an optional bool, def when absent.
func ggufBool(g *checkpoint.GGUFFile, key string, def bool) (bool, error) {
	v, ok := g.Meta(key)
	if !ok {
		return def, nil
	}
	b, isBool := v.(bool)
	if !isBool {
		return false, fmt.Errorf("model: %s: metadata %q: want a bool", g.Path, key)
	}
	return b, nil
}

// GGUFTokenizerJSON returns the Hugging Face tokenizer.json of a GGUF
// file's tokenizer.ggml.* metadata: tokenizer model "gpt2" with a pre
// tokenizer of ggufPres (byte-level BPE: the merges as stored; control,
// unknown and user-defined tokens as added tokens, the first two
// special), or "llama" (SentencePiece: BPE with
// byte fallback, merges rebuilt from the scores as Hugging Face's
// SentencePiece converter does, ▁ for spaces and a ▁ prepended when
// add_space_prefix, default true). bos/eos are added when add_bos_token /
// add_eos_token say so (default: false for gpt2, add_bos true for llama,
// as llama.cpp). Other models and pre-tokenizers are refused naming them,
// and so is a result that package tokenizer does not load (a merge whose
// result is not a token, which llama.cpp tolerates and Hugging Face does
// not).
func GGUFTokenizerJSON(g *checkpoint.GGUFFile) ([]byte, error) {
	kind, err := g.MetaString("tokenizer.ggml.model")
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	tokens, err := ggufStrings(g, "tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	types := make([]int32, len(tokens))
	for i := range types {
		types[i] = ggufTokNormal
	}
	if v, ok := g.Meta("tokenizer.ggml.token_type"); ok {
		a, _ := v.(checkpoint.GGUFArray)
		t, isI32 := a.Values.([]int32)
		if !isI32 || len(t) != len(tokens) {
			return nil, fmt.Errorf("model: %s: metadata \"tokenizer.ggml.token_type\": want %d int32s, one per token", g.Path, len(tokens))
		}
		types = t
	}
	ids := map[string]int{}
	for _, k := range []string{"bos", "eos", "unknown"} {
		if ids[k], err = ggufTokenID(g, "tokenizer.ggml."+k+"_token_id", len(tokens)); err != nil {
			return nil, err
		}
	}
	tj := map[string]any{"version": "1.0", "truncation": nil, "padding": nil}
	vocab := map[string]int{}
	var added []any
	for id, tok := range tokens {
		switch types[id] {
		case ggufTokControl, ggufTokUserDefined, ggufTokUnknown:
			added = append(added, map[string]any{"id": id, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
				"normalized": types[id] == ggufTokUserDefined, "special": types[id] != ggufTokUserDefined})
			if kind == "llama" {
				vocab[tok] = id // SentencePiece vocabularies hold their control and unknown pieces
			}
		case ggufTokUnused:
		case ggufTokNormal, ggufTokByte:
			if _, dup := vocab[tok]; !dup {
				vocab[tok] = id
			}
		default:
			return nil, fmt.Errorf("model: %s: metadata \"tokenizer.ggml.token_type\"[%d] = %d is not a token type (1–6)", g.Path, id, types[id])
		}
	}
	tj["added_tokens"] = added
	bpe := map[string]any{"type": "BPE", "dropout": nil, "continuing_subword_prefix": nil, "end_of_word_suffix": nil,
		"ignore_merges": false, "vocab": vocab}
	addBOSDefault := false
	switch kind {
	case "gpt2":
		pre, err := g.MetaString("tokenizer.ggml.pre")
		if err != nil {
			return nil, fmt.Errorf("model: %w", err)
		}
		p, ok := ggufPres[pre]
		if !ok {
			names := make([]string, 0, len(ggufPres))
			for n := range ggufPres {
				names = append(names, n)
			}
			sort.Strings(names)
			return nil, fmt.Errorf("model: %s: metadata \"tokenizer.ggml.pre\" = %q is not supported (supported: %v)", g.Path, pre, names)
		}
		merges, err := ggufStrings(g, "tokenizer.ggml.merges")
		if err != nil {
			return nil, err
		}
		bpe["merges"], bpe["unk_token"], bpe["fuse_unk"], bpe["byte_fallback"] = merges, nil, false, false
		tj["normalizer"], tj["pre_tokenizer"] = p.normalizer, p.pre
		byteLevel := map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}
		tj["decoder"], tj["post_processor"] = byteLevel, byteLevel
	case "llama":
		scores, err := ggufScores(g, len(tokens))
		if err != nil {
			return nil, err
		}
		bpe["merges"] = sentencePieceMerges(tokens, types, scores, vocab)
		bpe["fuse_unk"], bpe["byte_fallback"] = true, true
		bpe["unk_token"] = nil
		if ids["unknown"] >= 0 {
			bpe["unk_token"] = tokens[ids["unknown"]]
		}
		prefix, err := ggufBool(g, "tokenizer.ggml.add_space_prefix", true)
		if err != nil {
			return nil, err
		}
		replace := map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}
		tj["pre_tokenizer"] = nil
		tj["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{replace}}
		decoders := []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
		}
		if prefix {
			tj["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Prepend", "prepend": "▁"}, replace}}
			decoders = append(decoders, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0})
		}
		tj["decoder"] = map[string]any{"type": "Sequence", "decoders": decoders}
		tj["post_processor"] = nil
		addBOSDefault = true
	default:
		return nil, fmt.Errorf("model: %s: metadata \"tokenizer.ggml.model\" = %q is not supported (supported: gpt2, llama)", g.Path, kind)
	}
	tj["model"] = bpe
	// the post-processor: bos before and eos after the sequence, where the
	// file says to add them
	add := map[string]bool{}
	for _, k := range []string{"bos", "eos"} {
		if add[k], err = ggufBool(g, "tokenizer.ggml.add_"+k+"_token", k == "bos" && addBOSDefault); err != nil {
			return nil, err
		}
		if add[k] && ids[k] < 0 {
			return nil, fmt.Errorf("model: %s: metadata \"tokenizer.ggml.add_%s_token\" is true but tokenizer.ggml.%s_token_id is missing", g.Path, k, k)
		}
	}
	if add["bos"] || add["eos"] {
		specials := map[string]any{}
		template := func(seq string, typeID int) []any {
			var t []any
			for _, k := range []string{"bos", "", "eos"} {
				switch {
				case k == "":
					t = append(t, map[string]any{"Sequence": map[string]any{"id": seq, "type_id": typeID}})
				case add[k]:
					tok := tokens[ids[k]]
					t = append(t, map[string]any{"SpecialToken": map[string]any{"id": tok, "type_id": typeID}})
					specials[tok] = map[string]any{"id": tok, "ids": []int{ids[k]}, "tokens": []string{tok}}
				}
			}
			return t
		}
		tp := map[string]any{"type": "TemplateProcessing", "single": template("A", 0),
			"pair": append(template("A", 0), template("B", 1)...), "special_tokens": specials}
		if pp := tj["post_processor"]; pp != nil {
			tj["post_processor"] = map[string]any{"type": "Sequence", "processors": []any{pp, tp}}
		} else {
			tj["post_processor"] = tp
		}
	}
	data, err := json.Marshal(tj)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", g.Path, err)
	}
	if _, err := tokenizer.FromJSON(data); err != nil {
		return nil, fmt.Errorf("model: %s: the tokenizer.json made from its tokenizer.ggml.* metadata does not load: %w", g.Path, err)
	}
	return data, nil
}

// ggufScores reads tokenizer.ggml.scores, one float32 per token.
func ggufScores(g *checkpoint.GGUFFile, n int) ([]float32, error) {
	v, ok := g.Meta("tokenizer.ggml.scores")
	a, _ := v.(checkpoint.GGUFArray)
	s, isF32 := a.Values.([]float32)
	if !ok || !isF32 || len(s) != n {
		return nil, fmt.Errorf("model: %s: metadata \"tokenizer.ggml.scores\": want %d float32s, one per token (a SentencePiece vocabulary)", g.Path, n)
	}
	return s, nil
}

// sentencePieceMerges rebuilds a SentencePiece BPE model's merges as
// Hugging Face's SentencePieceExtractor does: every split of every normal
// piece into two pieces of the vocabulary (split by characters) is a
// merge, ordered by the merged piece's score (highest first; ties in id
// order), and within one piece by the ids of its left and right parts.
func sentencePieceMerges(tokens []string, types []int32, scores []float32, vocab map[string]int) [][2]string {
	type merge struct {
		l, r   string
		il, ir int
		id     int
		score  float32
	}
	var ms []merge
	for id, tok := range tokens {
		if types[id] != ggufTokNormal && types[id] != ggufTokUserDefined {
			continue
		}
		rs := []rune(tok)
		for k := 1; k < len(rs); k++ {
			l, r := string(rs[:k]), string(rs[k:])
			il, okL := vocab[l]
			ir, okR := vocab[r]
			if okL && okR {
				ms = append(ms, merge{l: l, r: r, il: il, ir: ir, id: id, score: scores[id]})
			}
		}
	}
	sort.SliceStable(ms, func(a, b int) bool {
		x, y := ms[a], ms[b]
		if x.score != y.score {
			return x.score > y.score
		}
		if x.id != y.id {
			return x.id < y.id
		}
		if x.il != y.il {
			return x.il < y.il
		}
		return x.ir < y.ir
	})
	out := make([][2]string, len(ms))
	for i, m := range ms {
		out[i] = [2]string{m.l, m.r}
	}
	return out
}
