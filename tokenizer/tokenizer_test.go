package tokenizer

import (
	"compress/gzip"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tiny builds a minimal tokenizer.json around a model with vocabulary a, b,
// ab and the merge "a b"; extra holds more top-level fields, as JSON text.
func tiny(extra string) string {
	s := `{"version":"1.0","added_tokens":[],"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]}`
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"empty", ``, "malformed JSON"},
		{"truncated", `{"version":"1.0",`, "malformed JSON"},
		{"not an object", `[1,2]`, "JSON array"},
		{"no model", `{"version":"1.0"}`, "model is missing"},
		{"version", `{"version":"2.0","model":{"type":"BPE","vocab":{},"merges":[]}}`, `version "2.0" is not supported`},
		{"pre-tokenizer type", tiny(`"pre_tokenizer":{"type":"UnicodeScripts"}`),
			`tokenizer: tokenizer.json: pre_tokenizer.type "UnicodeScripts" is not supported`},
		{"nested pre-tokenizer type", tiny(`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"ByteLevel"},{"type":"Punctuation"}]}`),
			`pre_tokenizer.pretokenizers[1].type "Punctuation" is not supported`},
		{"normalizer type", tiny(`"normalizer":{"type":"Precompiled","precompiled_charsmap":""}`), `normalizer.type "Precompiled" is not supported`},
		{"nested normalizer type", tiny(`"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"BertNormalizer"}]}`),
			`normalizer.normalizers[1].type "BertNormalizer" is not supported`},
		{"null in normalizer sequence", tiny(`"normalizer":{"type":"Sequence","normalizers":[null]}`), `normalizer.normalizers[0] is null`},
		{"decoder type", tiny(`"decoder":{"type":"WordPiece","prefix":"##"}`), `decoder.type "WordPiece" is not supported`},
		{"nested decoder type", tiny(`"decoder":{"type":"Sequence","decoders":[{"type":"ByteLevel"},{"type":"CTC"}]}`),
			`decoder.decoders[1].type "CTC" is not supported`},
		{"metaspace prepend scheme", tiny(`"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"sometimes"}`),
			`pre_tokenizer.prepend_scheme "sometimes" is not one of "always", "first", "never"`},
		{"metaspace replacement of two chars", tiny(`"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Metaspace","replacement":"__"}]}`),
			`pre_tokenizer.pretokenizers[0].replacement "__" must be exactly one character`},
		{"metaspace replacement missing", tiny(`"decoder":{"type":"Metaspace","prepend_scheme":"always"}`), `decoder.replacement is missing`},
		{"metaspace add_prefix_space contradicts", tiny(`"pre_tokenizer":{"type":"Metaspace","replacement":"▁","add_prefix_space":false}`),
			`pre_tokenizer.add_prefix_space false does not match prepend_scheme "always"`},
		{"metaspace split not a bool", tiny(`"pre_tokenizer":{"type":"Metaspace","replacement":"▁","split":"yes"}`), `pre_tokenizer: split: JSON string`},
		{"strip decoder missing stop", tiny(`"decoder":{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Strip","content":" ","start":1}]}`),
			`decoder.decoders[1] needs content, start and stop`},
		{"strip decoder content", tiny(`"decoder":{"type":"Strip","content":"","start":1,"stop":0}`), `decoder.content "" must be exactly one character`},
		{"strip decoder negative", tiny(`"decoder":{"type":"Strip","content":" ","start":-1,"stop":0}`), `decoder: start -1 and stop 0 must not be negative`},
		{"replace decoder content", tiny(`"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"}}]}`),
			`decoder.decoders[0].content is missing`},
		{"replace decoder pattern", tiny(`"decoder":{"type":"Replace","pattern":{"Regex":"(▁"},"content":" "}`), `decoder.pattern.Regex "(▁"`},
		{"post-processor type", tiny(`"post_processor":{"type":"Frobnicate"}`), `post_processor.type "Frobnicate" is not supported`},
		{"model type", `{"model":{"type":"WordPiece","vocab":{"a":0},"unk_token":"a"}}`, `model.type "WordPiece" is not supported`},
		{"model without type or merges", `{"model":{"vocab":[["a",0.0]]}}`, `model.type is missing`},
		{"component without type", tiny(`"normalizer":{"lowercase":true}`), `normalizer.type is missing`},
		{"merge with unknown token", `{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a c"]}}`,
			`model.merges[0]: token "c" is not in the vocabulary`},
		{"merge pair with unknown token", `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":[["a","b"],["x","b"]]}}`,
			`model.merges[1]: token "x" is not in the vocabulary`},
		{"merged token missing", `{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]}}`,
			`model.merges[0]: merged token "ab" is not in the vocabulary`},
		{"merge of three tokens", `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b c"]}}`,
			`model.merges[0] "a b c" must be two tokens`},
		{"merge pair of one", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[["a"]]}}`, `model.merges[0] must have exactly 2 tokens`},
		{"merges not a list", `{"model":{"type":"BPE","vocab":{"a":0},"merges":"a b"}}`, `model.merges must be a list`},
		{"prefix longer than token", `{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"],"continuing_subword_prefix":"##"}}`,
			`cannot cut continuing_subword_prefix`},
		{"negative id", `{"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}}`, `id -1 of "a" is not a u32`},
		{"fractional id", `{"model":{"type":"BPE","vocab":{"a":1.5},"merges":[]}}`, `model.vocab`},
		{"dropout", `{"model":{"type":"BPE","vocab":{"a":0},"merges":[],"dropout":0.1}}`, `model.dropout 0.1 is not supported`},
		{"split behavior", tiny(`"pre_tokenizer":{"type":"Split","pattern":{"String":"-"},"behavior":"Foo","invert":false}`),
			`pre_tokenizer.behavior "Foo" is not supported`},
		{"split pattern kind", tiny(`"pre_tokenizer":{"type":"Split","pattern":{"Glob":"*"},"behavior":"Isolated"}`),
			`pre_tokenizer.pattern must have exactly one of "String" or "Regex"`},
		{"bad regex", tiny(`"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a"},"behavior":"Isolated"}`),
			`pre_tokenizer.pattern.Regex "(a"`},
		{"template special token missing", tiny(`"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{}}`),
			`post_processor: missing special_tokens for <s>`},
		{"template sequence B", tiny(`"post_processor":{"type":"TemplateProcessing","single":[{"Sequence":{"id":"B","type_id":0}}],"special_tokens":{}}`),
			`sequence "B" in a single-sequence template`},
		{"added token without content", tiny(`"added_tokens":[{"id":3,"special":true}]`), `added_tokens[0].content is missing`},
		{"added tokens not a list", tiny(`"added_tokens":{"id":3}`), `added_tokens`},
		{"truncation", tiny(`"truncation":{"max_length":-1}`), `truncation.max_length must be a non-negative integer`},
		{"padding strategy", tiny(`"padding":{"strategy":"Longest"}`), `padding.strategy must be`},
		{"padding too long", tiny(`"padding":{"strategy":{"Fixed":1000000000000}}`), `padding.strategy.Fixed 1000000000000 is out of range`},
		{"POSIX bracket", tiny(`"pre_tokenizer":{"type":"Split","pattern":{"Regex":"[[:alpha:]]+"},"behavior":"Isolated"}`), `POSIX bracket expressions are not supported`},
		{"regex syntax regexp2 lacks", tiny(`"pre_tokenizer":{"type":"Split","pattern":{"Regex":"a++"},"behavior":"Isolated"}`), `pre_tokenizer.pattern.Regex "a++"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := FromJSON([]byte(tc.json))
			if err == nil {
				t.Fatalf("FromJSON(%s) succeeded; want an error containing %q", tc.json, tc.want)
			}
			if tok != nil {
				t.Errorf("FromJSON returned a tokenizer with its error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "tokenizer: tokenizer.json: ") {
				t.Errorf("error %q; want it to start with \"tokenizer: tokenizer.json: \" and contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadFiles(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: ") {
		t.Errorf("Load(missing) = %v; want a tokenizer: error", err)
	}
	// The same file, plain and gzipped (detected by magic bytes, whatever
	// the name), loads the same.
	dir := t.TempDir()
	plain := filepath.Join(dir, "tokenizer.json")
	if err := os.WriteFile(plain, []byte(tiny("")), 0o644); err != nil {
		t.Fatal(err)
	}
	zipped := filepath.Join(dir, "tokenizer-without-gz-suffix")
	f, err := os.Create(zipped)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	zw.Write([]byte(tiny("")))
	zw.Close()
	f.Close()
	// A bad field: the error names the file and the field's JSON path.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(tiny(`"decoder":{"type":"Sequence","decoders":[{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":"x"}]}`)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), "tokenizer: "+bad+": decoder.decoders[1]: stop: JSON string") {
		t.Errorf("Load(bad.json) = %v; want an error naming %s and decoder.decoders[1]: stop", err, bad)
	}
	for _, p := range []string{plain, zipped} {
		tok, err := Load(p)
		if err != nil {
			t.Fatalf("Load(%s): %v", p, err)
		}
		if ids, _ := tok.Encode("abba", false); !slices.Equal(ids, []int{2, 1, 0}) {
			t.Errorf("Load(%s).Encode(abba) = %v; want [2 1 0]", p, ids)
		}
	}
	bad = filepath.Join(dir, "bad.gz")
	os.WriteFile(bad, []byte{0x1f, 0x8b, 1, 2, 3}, 0o644)
	if _, err := Load(bad); err == nil {
		t.Error("Load of a corrupt gzip succeeded")
	}
}

func TestDecodeErrors(t *testing.T) {
	tok, err := FromJSON([]byte(tiny(`"decoder":{"type":"ByteLevel"}`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{3, -1, math.MaxInt} {
		_, err := tok.Decode([]int{0, id, 1}, false)
		if err == nil || !strings.Contains(err.Error(), "id "+strconv.Itoa(id)+" is not in the vocabulary") {
			t.Errorf("Decode with id %d: %v; want an error naming the id", id, err)
		}
	}
	if s, err := tok.Decode(nil, false); err != nil || s != "" {
		t.Errorf("Decode(nil) = %q, %v", s, err)
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tok, err := FromJSON([]byte(tiny("")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Encode("a\xffb", false); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("Encode(invalid UTF-8) = %v; want an error", err)
	}
}

// TestAddedTokenIDs checks that added-token ids are assigned as Hugging Face
// does when it loads a file (the ids written in the file are not used), as
// the oracle reported for testdata/hf/added_flags.json.
func TestAddedTokenIDs(t *testing.T) {
	tok, err := Load(filepath.Join("testdata", "hf", "added_flags.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"[A]": 293, "[B]": 294, "[C]": 295, "[D]": 296, "Hello": 292, "WORLD": 297,
		"the": 287, "<|x|>": 298, "<|y|>": 299, "<gap>": 300, "#": 35}
	for content, id := range want {
		if got, ok := tok.TokenToID(content); !ok || got != id {
			t.Errorf("TokenToID(%q) = %d, %v; want %d", content, got, ok, id)
		}
		if got, ok := tok.IDToToken(id); !ok || got != content {
			t.Errorf("IDToToken(%d) = %q, %v; want %q", id, got, ok, content)
		}
	}
	if _, ok := tok.TokenToID(""); ok {
		t.Error("the empty added token got an id")
	}
	if got := tok.VocabSize(); got != 301 {
		t.Errorf("VocabSize = %d; want 301", got)
	}
	if !tok.IsSpecial(300) || tok.IsSpecial(293) || tok.IsSpecial(0) {
		t.Error("IsSpecial is wrong for <gap> (special), [A] (not) or id 0 (model)")
	}
	if got := tok.SpecialTokens(); !slices.Equal(got, []string{"#", "<gap>", "<|x|>", "<|y|>", "[B]", "[C]"}) {
		t.Errorf("SpecialTokens = %q", got)
	}
}

func TestGoldenVocabulary(t *testing.T) {
	for _, tc := range []struct {
		folder    string
		vocabSize int
		tok       string
		id        int
	}{
		{"gpt2", 50257, "<|endoftext|>", 50256},
		{"gpt2", 50257, "Ġthe", 262},
		{"qwen3", 151669, "<|im_start|>", 151644},
		{"qwen3", 151669, "</think>", 151668},
		// Values from Hugging Face's tokenizers 0.22.2 (get_vocab_size with
		// added tokens, token_to_id).
		{"mistral_sp", 32000, "▁Hello", 22557},
		{"mistral_sp", 32000, "<s>", 1},
		{"gemma3", 262145, "<start_of_turn>", 105},
		{"gemma3", 262145, "▁the", 506},
		{"gptoss", 200019, "<|start|>", 200006},
		{"gptoss", 200019, "Ġthe", 290},
		{"deepseek_v3", 128815, "<｜begin▁of▁sentence｜>", 0},
		{"deepseek_v3", 128815, "Ġthe", 270},
	} {
		t.Run(tc.folder+"/"+tc.tok, func(t *testing.T) { checkVocabulary(t, tc.folder, tc.vocabSize, tc.tok, tc.id) })
	}
}

// checkVocabulary checks VocabSize, TokenToID, IDToToken and Tokens of one
// golden tokenizer on one token.
func checkVocabulary(t *testing.T, folder string, vocabSize int, token string, id int) {
	tok, _ := loadGolden(t, folder)
	if got := tok.VocabSize(); got != vocabSize {
		t.Errorf("%s: VocabSize = %d; want %d", folder, got, vocabSize)
	}
	if got, ok := tok.TokenToID(token); !ok || got != id {
		t.Errorf("%s: TokenToID(%q) = %d, %v; want %d", folder, token, got, ok, id)
	}
	if s, ok := tok.IDToToken(id); !ok || s != token {
		t.Errorf("%s: IDToToken(%d) = %q, %v; want %q", folder, id, s, ok, token)
	}
	if got := tok.Tokens([]int{id, -5}); !slices.Equal(got, []string{token, ""}) {
		t.Errorf("%s: Tokens = %q", folder, got)
	}
}

// TestLossyUTF8 checks the replacement of invalid UTF-8 (one U+FFFD per
// maximal ill-formed subpart, as Rust's from_utf8_lossy).
func TestLossyUTF8(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe2\x82", "\uFFFD"},   // truncated 3-byte sequence: one
		{"\xe2\x82a", "\uFFFDa"}, // same, followed by ASCII
		{"\xe2\x82\xe2\x82\xac", "\uFFFD€"},
		{"\xff\xfe", "\uFFFD\uFFFD"},           // bytes that never start a sequence
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // surrogate: ED then two strays
		{"\xf0\x9f\x8d", "\uFFFD"},             // truncated emoji
		{"\xf0\x9f\x8d\x95", "🍕"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"}, // above U+10FFFF
		{"\xc0\xaf", "\uFFFD\uFFFD"},                     // overlong
		{"\x80", "\uFFFD"},
	} {
		if got := lossyUTF8([]byte(tc.in)); got != tc.want {
			t.Errorf("lossyUTF8(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestOnigToDotNet(t *testing.T) {
	w := "[" + onigWordClass + "]"
	for _, tc := range []struct{ in, want string }{
		{`\s+(?!\S)`, `\s+(?!\S)`},
		{`\w+`, w + `+`},
		{`[\w-]`, `[` + onigWordClass + `-]`},
		{`\W`, `[^` + onigWordClass + `]`},
		{`[\b]`, `[\b]`},
		{`\\w`, `\\w`},
		{`\x{41}\x{1F355}`, `\u0041🍕`},
		{`[]w]`, `[]w]`},
		{`\p{L}`, `\p{L}`},
	} {
		if got := onigToDotNet(tc.in); got != tc.want {
			t.Errorf("onigToDotNet(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestConcurrentEncode runs one tokenizer from several goroutines (run with
// -race to check the BPE cache's locking).
func TestConcurrentEncode(t *testing.T) {
	tok, cases := loadGolden(t, "gpt2")
	done := make(chan bool)
	for g := 0; g < 4; g++ {
		go func() {
			defer func() { done <- true }()
			for i, c := range cases {
				if i%4 == g {
					continue
				}
				if got, err := tok.Encode(c.Text, false); err != nil || !slices.Equal(got, c.IDs) {
					t.Errorf("case %d: %v, %v", i, got, err)
				}
			}
		}()
	}
	for g := 0; g < 4; g++ {
		<-done
	}
}

// TestRegexTimeout checks that a pattern that backtracks exponentially makes
// Encode fail instead of running for ages (Oniguruma has a step limit too).
func TestRegexTimeout(t *testing.T) {
	defer func(d time.Duration) { regexTimeout = d }(regexTimeout)
	regexTimeout = 20 * time.Millisecond
	tok, err := FromJSON([]byte(tiny(`"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(a|aa)+$"},"behavior":"Isolated"}`)))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = tok.Encode(strings.Repeat("a", 60)+"!", false)
	if err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("Encode = %v; want a timeout error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Encode took %v", d)
	}
}

// TestTruncationPadding checks edge cases of truncation and padding against
// what Hugging Face's tokenizers 0.22.2 gave for them.
func TestTruncationPadding(t *testing.T) {
	bert := `"post_processor":{"type":"BertProcessing","sep":["[SEP]",4],"cls":["[CLS]",3]}`
	model := `"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"[CLS]":3,"[SEP]":4},"merges":["a b"]}`
	for _, tc := range []struct {
		name, extra   string
		plain, withSp []int
	}{
		{"fixed 0 rounds nothing", `"padding":{"strategy":{"Fixed":0},"pad_to_multiple_of":4,"pad_id":9}`, []int{2, 1, 0, 2}, []int{2, 1, 0, 2}},
		{"fixed 7 left", `"padding":{"strategy":{"Fixed":7},"direction":"Left","pad_id":9}`, []int{9, 9, 9, 2, 1, 0, 2}, []int{9, 9, 9, 2, 1, 0, 2}},
		{"longest to multiple", `"padding":{"strategy":"BatchLongest","pad_to_multiple_of":3,"pad_id":9},` + bert, []int{2, 1, 0, 2, 9, 9}, []int{3, 2, 1, 0, 2, 4}},
		{"max below specials", `"truncation":{"max_length":1,"strategy":"LongestFirst"},` + bert, []int{2}, []int{3, 2, 1, 0, 2, 4}},
		{"left only first", `"truncation":{"direction":"Left","max_length":3,"strategy":"OnlyFirst"},` + bert, []int{1, 0, 2}, []int{3, 2, 4}},
		{"max 0", `"truncation":{"max_length":0}`, []int{}, []int{}},
	} {
		tok, err := FromJSON([]byte("{" + model + "," + tc.extra + "}"))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, add := range []bool{false, true} {
			want := tc.plain
			if add {
				want = tc.withSp
			}
			if got, err := tok.Encode("abbaab", add); err != nil || !slices.Equal(got, want) {
				t.Errorf("%s: Encode(abbaab, %v) = %v, %v; want %v", tc.name, add, got, err, want)
			}
		}
	}
}
