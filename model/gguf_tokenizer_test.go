package model

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/tokenizer"
)

// hfTokenizerToGGUF writes a byte-level BPE tokenizer.json's tokenizer as
// llama.cpp's converter does (get_vocab_base): every id up to the largest
// its token text ("[PADn]", type unused, where there is none), added
// tokens control (special) or user-defined, the merges as "left right", the
// pre-tokenizer by name, bos and add_bos_token from a TemplateProcessing.
func hfTokenizerToGGUF(t *testing.T, tj map[string]any, pre string) []checkpoint.GGUFKV {
	t.Helper()
	model := tj["model"].(map[string]any)
	text := map[int]string{}
	typ := map[int]int32{}
	n := 0
	for tok, id := range model["vocab"].(map[string]any) {
		i := int(id.(float64))
		text[i], typ[i], n = tok, ggufTokNormal, max(n, i+1)
	}
	for _, a := range tj["added_tokens"].([]any) {
		at := a.(map[string]any)
		i := int(at["id"].(float64))
		text[i], typ[i], n = at["content"].(string), ggufTokUserDefined, max(n, i+1)
		if at["special"].(bool) {
			typ[i] = ggufTokControl
		}
	}
	tokens, types := make([]string, n), make([]int32, n)
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("[PAD%d]", i), ggufTokUnused
		if s, ok := text[i]; ok {
			tokens[i], types[i] = s, typ[i]
		}
	}
	var merges []string
	for _, m := range model["merges"].([]any) {
		switch x := m.(type) {
		case string:
			merges = append(merges, x)
		case []any:
			merges = append(merges, x[0].(string)+" "+x[1].(string))
		}
	}
	kv := []checkpoint.GGUFKV{
		{Key: "tokenizer.ggml.model", Type: checkpoint.GGUFString, Value: "gpt2"},
		{Key: "tokenizer.ggml.pre", Type: checkpoint.GGUFString, Value: pre},
		{Key: "tokenizer.ggml.tokens", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFString, Values: tokens}},
		{Key: "tokenizer.ggml.token_type", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFInt32, Values: types}},
		{Key: "tokenizer.ggml.merges", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFString, Values: merges}},
	}
	if data, _ := json.Marshal(tj["post_processor"]); bytes.Contains(data, []byte("TemplateProcessing")) {
		var pp struct {
			Processors []struct {
				Type          string
				SpecialTokens map[string]struct{ IDs []int } `json:"special_tokens"`
			}
		}
		json.Unmarshal(data, &pp)
		for _, p := range pp.Processors {
			for _, s := range p.SpecialTokens {
				kv = append(kv, checkpoint.GGUFKV{Key: "tokenizer.ggml.bos_token_id", Type: checkpoint.GGUFUint32, Value: uint32(s.IDs[0])},
					checkpoint.GGUFKV{Key: "tokenizer.ggml.add_bos_token", Type: checkpoint.GGUFBool, Value: true})
			}
		}
	}
	return kv
}

// readJSONMaybeGzip reads a JSON file, gunzipping a .gz one.
func readJSONMaybeGzip(t *testing.T, path string, v any) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("%v", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		if r, err = gzip.NewReader(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := json.NewDecoder(r).Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestGGUFTokenizerBPE: the byte-level BPE tokenizers of the tokenizer
// golden cases (GPT-2, Qwen3, Qwen3 with a bos template), written to GGUF
// metadata as llama.cpp's converter writes them and read back by
// GGUFTokenizerJSON, encode every case text to the ids Hugging Face's
// tokenizers gives (with and without special tokens) and decode them back.
func TestGGUFTokenizerBPE(t *testing.T) {
	root := filepath.Join("..", "..", "shared", "golden", "tokenizers")
	for _, tc := range []struct{ dir, file, pre string }{
		{"gpt2", "tokenizer.json", "gpt-2"},
		{"qwen3", "tokenizer.json.gz", "qwen2"},
		{"qwen3_bos", "tokenizer.json.gz", "qwen2"},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			var tj map[string]any
			readJSONMaybeGzip(t, filepath.Join(root, tc.dir, tc.file), &tj)
			var cases []struct {
				Text           string `json:"text"`
				IDs            []int  `json:"ids"`
				IDsWithSpecial []int  `json:"ids_with_special"`
				Decoded        string `json:"decoded"`
			}
			readJSONMaybeGzip(t, filepath.Join(root, tc.dir, "cases.json"), &cases)
			p := filepath.Join(t.TempDir(), "tok.gguf")
			kv := append([]checkpoint.GGUFKV{{Key: "general.architecture", Type: checkpoint.GGUFString, Value: "qwen3"}}, hfTokenizerToGGUF(t, tj, tc.pre)...)
			if err := checkpoint.WriteGGUF(p, kv, nil); err != nil {
				t.Fatal(err)
			}
			g, err := checkpoint.OpenGGUF(p)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			data, err := GGUFTokenizerJSON(g)
			if err != nil {
				t.Fatal(err)
			}
			tok, err := tokenizer.FromJSON(data)
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range cases {
				ids, err := tok.Encode(c.Text, false)
				if err != nil || fmt.Sprint(ids) != fmt.Sprint(c.IDs) {
					t.Fatalf("#%d %q: ids %v, %v; want %v", i, c.Text, ids, err, c.IDs)
				}
				ids, err = tok.Encode(c.Text, true)
				if err != nil || fmt.Sprint(ids) != fmt.Sprint(c.IDsWithSpecial) {
					t.Fatalf("#%d %q: ids with special tokens %v, %v; want %v", i, c.Text, ids, err, c.IDsWithSpecial)
				}
				if dec, err := tok.Decode(c.IDs, false); err != nil || dec != c.Decoded {
					t.Fatalf("#%d: decoded %q, %v; want %q", i, dec, err, c.Decoded)
				}
			}
			t.Logf("%d cases", len(cases))
		})
	}
}

// TestGGUFTokenizerSentencePiece: Llama 2's SentencePiece tokenizer
// (tokenizer golden case mistral_sp; its tokenizer.json is installed by
// .ci/setup.sh into third_party/tokenizers), written to GGUF metadata as
// llama.cpp's converter writes a SentencePiece vocabulary — pieces with
// scores (here −rank of the first merge that makes each piece, as
// SentencePiece BPE scores are; characters below every merge), types
// unknown/control/byte/normal, no merges — and read back by
// GGUFTokenizerJSON, which rebuilds the merges from the scores, encodes
// every case text to Hugging Face's ids and decodes them back.
func TestGGUFTokenizerSentencePiece(t *testing.T) {
	var tj map[string]any
	readJSONMaybeGzip(t, filepath.Join("..", "third_party", "tokenizers", "mistral_sp", "tokenizer.json"), &tj)
	var cases []struct {
		Text           string `json:"text"`
		IDs            []int  `json:"ids"`
		IDsWithSpecial []int  `json:"ids_with_special"`
		Decoded        string `json:"decoded"`
	}
	readJSONMaybeGzip(t, filepath.Join("..", "..", "shared", "golden", "tokenizers", "mistral_sp", "cases.json"), &cases)
	model := tj["model"].(map[string]any)
	vocab := model["vocab"].(map[string]any)
	tokens := make([]string, len(vocab))
	for tok, id := range vocab {
		tokens[int(id.(float64))] = tok
	}
	rank := map[string]int{}
	for i, m := range model["merges"].([]any) {
		l, r, _ := strings.Cut(m.(string), " ")
		if _, seen := rank[l+r]; !seen {
			rank[l+r] = i
		}
	}
	scores, types := make([]float32, len(tokens)), make([]int32, len(tokens))
	for id, tok := range tokens {
		types[id], scores[id] = ggufTokNormal, float32(-len(rank)-id)
		if r, ok := rank[tok]; ok {
			scores[id] = float32(-r)
		}
		switch {
		case tok == "<unk>":
			types[id], scores[id] = ggufTokUnknown, 0
		case tok == "<s>" || tok == "</s>":
			types[id], scores[id] = ggufTokControl, 0
		case len(tok) == 6 && strings.HasPrefix(tok, "<0x") && strings.HasSuffix(tok, ">"):
			types[id], scores[id] = ggufTokByte, 0
		}
	}
	kv := []checkpoint.GGUFKV{
		{Key: "general.architecture", Type: checkpoint.GGUFString, Value: "llama"},
		{Key: "tokenizer.ggml.model", Type: checkpoint.GGUFString, Value: "llama"},
		{Key: "tokenizer.ggml.tokens", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFString, Values: tokens}},
		{Key: "tokenizer.ggml.scores", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFFloat32, Values: scores}},
		{Key: "tokenizer.ggml.token_type", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFInt32, Values: types}},
		{Key: "tokenizer.ggml.bos_token_id", Type: checkpoint.GGUFUint32, Value: uint32(1)},
		{Key: "tokenizer.ggml.eos_token_id", Type: checkpoint.GGUFUint32, Value: uint32(2)},
		{Key: "tokenizer.ggml.unknown_token_id", Type: checkpoint.GGUFUint32, Value: uint32(0)},
	}
	p := filepath.Join(t.TempDir(), "tok.gguf")
	if err := checkpoint.WriteGGUF(p, kv, nil); err != nil {
		t.Fatal(err)
	}
	g, err := checkpoint.OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	data, err := GGUFTokenizerJSON(g)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		ids, err := tok.Encode(c.Text, false)
		if err != nil || fmt.Sprint(ids) != fmt.Sprint(c.IDs) {
			t.Fatalf("#%d %q: ids %v, %v; want %v", i, c.Text, ids, err, c.IDs)
		}
		ids, err = tok.Encode(c.Text, true)
		if err != nil || fmt.Sprint(ids) != fmt.Sprint(c.IDsWithSpecial) {
			t.Fatalf("#%d %q: ids with special tokens %v, %v; want %v", i, c.Text, ids, err, c.IDsWithSpecial)
		}
		if dec, err := tok.Decode(c.IDs, false); err != nil || dec != c.Decoded {
			t.Fatalf("#%d: decoded %q, %v; want %q", i, dec, err, c.Decoded)
		}
	}
	t.Logf("%d cases", len(cases))
}
