package tokenizer

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// fuzzTexts are encoded with every tokenizer that FuzzLoad manages to load.
var fuzzTexts = []string{"", "a b", "Hello <s> wörld 123\n\n  x's", "ab-ab--1 2", "<|endoftext|><think>"}

// FuzzLoad feeds arbitrary bytes to FromJSON: it must return a tokenizer or
// an error, never panic, and a tokenizer it returns must encode and decode
// without panicking. Seeds: the small files of testdata/fuzz/FuzzLoad and
// testdata/hf.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "hf", "*.json"))
	for _, file := range files {
		if strings.HasSuffix(file, ".cases.json") {
			continue
		}
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	// A fuzzed Split pattern can backtrack exponentially: give up early.
	defer func(d time.Duration) { regexTimeout = d }(regexTimeout)
	regexTimeout = 100 * time.Millisecond
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromJSON(data)
		if err != nil {
			if tok != nil {
				t.Fatal("FromJSON returned a tokenizer with its error")
			}
			if !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		tok.VocabSize()
		tok.SpecialTokens()
		for _, s := range fuzzTexts {
			for _, add := range []bool{false, true} {
				ids, err := tok.Encode(s, add)
				if err != nil {
					continue
				}
				tok.Tokens(ids)
				// Unknown ids (a template may name one) are an error,
				// not a panic.
				tok.Decode(ids, false)
				tok.Decode(ids, true)
			}
		}
	})
}

// TestFuzzLoadSeeds checks that the hand-written seeds of FuzzLoad are
// valid tokenizers, so that the fuzzer starts from files that load.
func TestFuzzLoadSeeds(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzLoad", "*"))
	if len(files) == 0 {
		t.Fatal("no seeds in testdata/fuzz/FuzzLoad")
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		header, body, _ := strings.Cut(string(raw), "\n")
		body = strings.TrimSpace(body)
		if header != "go test fuzz v1" || !strings.HasPrefix(body, "[]byte(") || !strings.HasSuffix(body, ")") {
			continue // a corpus entry written by the fuzzer, not a seed
		}
		data, err := strconv.Unquote(body[len("[]byte(") : len(body)-1])
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		tok, err := FromJSON([]byte(data))
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(file), err)
			continue
		}
		for _, s := range fuzzTexts {
			if _, err := tok.Encode(s, true); err != nil {
				t.Errorf("%s: Encode(%q): %v", filepath.Base(file), s, err)
			}
		}
	}
}

// FuzzEncode encodes arbitrary strings with the golden tokenizers: no panic,
// an error exactly for invalid UTF-8, and decoding gives the text back
// (NFC-normalized for Qwen3, whose normalizer is NFC; Mistral's legacy
// decoder, which reads "▁" as a space and drops one after special tokens
// and at the start, is only run). Mistral and DeepSeek-V3,
// installed by .ci/setup.sh from npm, take part when they are there (the
// larger Gemma 3 and gpt-oss files would add half a minute of loading to
// every fuzz worker; their matchers are fuzzed by FuzzFastMatchers).
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"Hello, world!", "  \n\n\tx", "don't 'S", "<|endoftext|>a", "0000000", "🍕👍🏽", "e\u0301", "\xff"} {
		f.Add(s)
	}
	gpt2, _ := loadGolden(f, "gpt2")
	qwen3, _ := loadGolden(f, "qwen3")
	optional := map[string]*Tokenizer{}
	for _, folder := range []string{"mistral_sp", "deepseek_v3"} {
		if fileExists(filepath.Join("..", "third_party", "tokenizers", folder, "tokenizer.json")) {
			optional[folder], _ = loadGolden(f, folder)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		type check struct {
			name    string
			tok     *Tokenizer
			want    string
			compare bool
		}
		checks := []check{{"gpt2", gpt2, s, true}, {"qwen3", qwen3, norm.NFC.String(s), true}}
		for name, tok := range optional {
			c := check{name, tok, s, true}
			c.compare = name != "mistral_sp"
			checks = append(checks, c)
		}
		for _, c := range checks {
			ids, err := c.tok.Encode(s, false)
			if !utf8.ValidString(s) {
				if err == nil {
					t.Fatalf("%s: Encode(%q) accepted invalid UTF-8", c.name, s)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: Encode(%q): %v", c.name, s, err)
			}
			got, err := c.tok.Decode(ids, false)
			if err != nil || c.compare && got != c.want {
				t.Fatalf("%s: Decode(Encode(%q)) = %q, %v; want %q (ids %v)", c.name, s, got, err, c.want, ids)
			}
		}
	})
}
