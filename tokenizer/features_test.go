package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestFeatureCases runs the small hand-made tokenizers of testdata/hf (one
// per feature: added-token flags, Split behaviours, normalizers, BPE options,
// post-processors, truncation and padding) against the outputs that Hugging
// Face's tokenizers 0.22.2 gave for them (testdata/hf/gen/README.md).
func TestFeatureCases(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "hf", "*.cases.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/hf/*.cases.json (%v)", err)
	}
	for _, cf := range files {
		name := strings.TrimSuffix(filepath.Base(cf), ".cases.json")
		t.Run(name, func(t *testing.T) {
			tok, err := Load(filepath.Join("testdata", "hf", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var cases []goldenCase
			data, err := os.ReadFile(cf)
			if err == nil {
				err = json.Unmarshal(data, &cases)
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, c := range cases {
				got, err := tok.Encode(c.Text, false)
				if err != nil || !slices.Equal(got, c.IDs) {
					t.Errorf("#%d %q: Encode(false) = %v, %v; want %v\n got tokens %q", i, c.Text, got, err, c.IDs, tok.Tokens(got))
				}
				got, err = tok.Encode(c.Text, true)
				if err != nil || !slices.Equal(got, c.IDsWithSpecial) {
					t.Errorf("#%d %q: Encode(true) = %v, %v; want %v", i, c.Text, got, err, c.IDsWithSpecial)
				}
				if id, ok := firstUnknownID(tok, c.IDsWithSpecial); ok {
					// Hugging Face skips ids it does not know (here: ids that
					// a template names but the vocabulary lacks); Decode
					// refuses them.
					if _, err := tok.Decode(c.IDsWithSpecial, true); err == nil {
						t.Errorf("#%d: Decode with unknown id %d: no error", i, id)
					}
					continue
				}
				dec, err := tok.Decode(c.IDs, false)
				if err != nil || dec != c.Decoded {
					t.Errorf("#%d %q: Decode(ids, false) = %q, %v; want %q", i, c.Text, dec, err, c.Decoded)
				}
				dec, err = tok.Decode(c.IDsWithSpecial, true)
				if err != nil || dec != c.DecodedSkipSpecial {
					t.Errorf("#%d %q: Decode(ids_with_special, true) = %q, %v; want %q", i, c.Text, dec, err, c.DecodedSkipSpecial)
				}
			}
		})
	}
}

// firstUnknownID returns the first id that tok cannot turn into a token.
func firstUnknownID(tok *Tokenizer, ids []int) (int, bool) {
	for _, id := range ids {
		if _, ok := tok.IDToToken(id); !ok {
			return id, true
		}
	}
	return 0, false
}

// TestMetaSplit checks that cutting words in front of "▁" (bpeModel's
// metaSplit) gives the tokens of the uncut word, on long texts, and that
// the merges that join across a "▁" keep their characters glued.
func TestMetaSplit(t *testing.T) {
	texts := []string{benchText(20000), "wow! b x!▁y hello all wx hi! xx all world", "▁▁ ▁x ! ! x  l w lw l▁w"}
	toks := map[string]*Tokenizer{}
	for _, name := range []string{"sp_mistral_like", "sp_gemma_like", "sp_metaspace_first"} {
		tok, err := Load(filepath.Join("testdata", "hf", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		toks[name] = tok
	}
	for _, folder := range []string{"mistral_sp", "gemma3"} {
		if file := filepath.Join("..", "third_party", "tokenizers", folder, "tokenizer.json"); fileExists(file) {
			tok, _ := loadGolden(t, folder)
			toks[folder] = tok
		}
	}
	for name, tok := range toks {
		if !tok.model.metaSplit {
			t.Errorf("%s: metaSplit is off", name)
			continue
		}
		for _, s := range texts {
			cut, err := tok.Encode(s, false)
			if err != nil {
				t.Fatal(err)
			}
			tok.model.metaSplit = false
			tok.model.clearCache()
			whole, err := tok.Encode(s, false)
			tok.model.metaSplit = true
			tok.model.clearCache()
			if err != nil || !slices.Equal(cut, whole) {
				t.Errorf("%s: Encode(%.40q…) with metaSplit differs from the uncut word (%d vs %d ids)", name, s, len(cut), len(whole))
			}
		}
	}
	m := toks["sp_mistral_like"].model
	if !m.metaGlue['!'] || !m.metaGlue['l'] || len(m.metaGlue) != 2 {
		t.Errorf("sp_mistral_like: metaGlue = %v; want ! and l (merges \"! ▁\" and \"l ▁w\")", m.metaGlue)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
