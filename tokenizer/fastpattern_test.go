package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// fastPatterns are the patterns that have a hand-written matcher.
var fastPatterns = []string{gpt2Pattern, llama3Pattern, qwen2Pattern, o200kPattern,
	deepseekDigitsPattern, deepseekCJKPattern, deepseekWordsPattern}

// regexp2Reference compiles pattern on regexp2 only, bypassing the
// hand-written matchers.
func regexp2Reference(t testing.TB, pattern string) matcher {
	re, err := regexp2.Compile(onigToDotNet(pattern), regexp2.Multiline)
	if err != nil {
		t.Fatal(err)
	}
	return regexMatcher{re}
}

// matcherAlphabet mixes every class the patterns care about: ASCII and
// Unicode letters, digits and other numbers, apostrophes and contraction
// letters in both cases, spaces, line breaks and other whitespace,
// punctuation, symbols, marks and astral characters.
var matcherAlphabet = []string{
	"a", "b", "Z", "é", "ß", "Ω", "中", "\U0001d518", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V",
	"m", "M", "l", "L", "d", "D", "'", "''", "’", "0", "7", "²", "Ⅻ", "٣", "\U0001d7d9",
	" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\v", "\f",
	"!", ".", ",", "-", "_", "(", "@", "$", "€", "🍕", "\u0301", "\u200d", "\ufeff", "\x00",
	"/", "ǅ", "ʰ", "ー", "あ", "ア", "龥", "龦", "가", "\u0903", "\u20dd", "`", "~", "^", "+",
}

func randomMatcherText(rng *rand.Rand) string {
	var b strings.Builder
	n := rng.IntN(30)
	for i := 0; i < n; i++ {
		b.WriteString(matcherAlphabet[rng.IntN(len(matcherAlphabet))])
	}
	return b.String()
}

// TestFastMatchers checks the hand-written matchers against regexp2 running
// the same patterns.
func TestFastMatchers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, p := range fastPatterns {
		fast, ref := fastMatcherFor(p), regexp2Reference(t, p)
		if fast == nil {
			t.Fatalf("no fast matcher for %q", p)
		}
		texts := []string{"", " ", "  ", "\n", "a", "'s", "'S", "'ll", "'LL", "'l", "'", "''s", " 's", "  a", "a  ", "a \n b", "\r\n\r\n", "  \n  \n\t\t\n   ", "123456789", "a1b22c333"}
		for i := 0; i < 20000; i++ {
			texts = append(texts, randomMatcherText(rng))
		}
		for _, s := range texts {
			got := collectMatches(t, fast, s)
			want := collectMatches(t, ref, s)
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %q on %q:\n fast    %v\n regexp2 %v", p, s, got, want)
			}
		}
	}
}

// TestFastMatcherLongS checks Oniguruma's case folding in (?i:'s): "'ſ" is a
// contraction for Hugging Face (regexp2 does not fold ſ to s).
func TestFastMatcherLongS(t *testing.T) {
	m := fastMatcherFor(qwen2Pattern)
	got := collectMatches(t, m, "it'ſx")
	want := [][2]int{{0, 2}, {2, 5}, {5, 6}}
	if !slices.Equal(got, want) {
		t.Errorf("qwen2 on \"it'ſx\" = %v; want %v", got, want)
	}
	got = collectMatches(t, fastMatcherFor(gpt2Pattern), "it'ſx")
	want = [][2]int{{0, 2}, {2, 3}, {3, 6}} // case sensitive: ' then ſx
	if !slices.Equal(got, want) {
		t.Errorf("gpt2 on \"it'ſx\" = %v; want %v", got, want)
	}
}

// FuzzFastMatchers compares the hand-written matchers with regexp2 on
// arbitrary text.
func FuzzFastMatchers(f *testing.F) {
	for _, s := range []string{"Hello, world!", "  \n\t x 'll", "a1234 ²³ 'S"} {
		f.Add(s)
	}
	refs := make([]matcher, len(fastPatterns))
	for i, p := range fastPatterns {
		refs[i] = regexp2Reference(f, p)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8ValidNoLongS(s) {
			return
		}
		for i, p := range fastPatterns {
			got := collectMatches(t, fastMatcherFor(p), s)
			want := collectMatches(t, refs[i], s)
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %q on %q:\n fast    %v\n regexp2 %v", p, s, got, want)
			}
		}
	})
}

// utf8ValidNoLongS reports whether s is valid UTF-8 without 'ſ' and
// without characters new in Unicode 15.1 or 16.0, on which the fast matchers
// follow Oniguruma rather than regexp2.
func utf8ValidNoLongS(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return r == 'ſ' || unicode16Category(r) != ""
	})
}

// TestUnicode16 checks that the fast matchers class the characters new in
// Unicode 15.1 and 16.0 as Oniguruma does in Hugging Face (from the oracle:
// DeepSeek-V3 keeps " 🫜" together, a symbol after a space; regexp2, on Go's
// Unicode 15.0 tables, sees an unassigned character and does not).
func TestUnicode16(t *testing.T) {
	for _, tc := range []struct {
		r    rune
		want string
	}{{0x1FADC, "So"}, {0x13C88, "Lo"}, {0x1C89, "Lu"}, {0x0897, "Mn"}, {0x1FADB, ""}, {'a', ""}, {0x4E00, ""}} {
		if got := unicode16Category(tc.r); got != tc.want {
			t.Errorf("unicode16Category(%U) = %q; want %q", tc.r, got, tc.want)
		}
	}
	if n := len(unicode16New); n == 0 || unicode16New[0].lo != 0x0897 {
		t.Fatalf("unicode16New starts at %v", unicode16New[:min(n, 1)])
	}
	for i := 1; i < len(unicode16New); i++ {
		if unicode16New[i].lo <= unicode16New[i-1].hi {
			t.Fatalf("unicode16New not sorted at %d", i)
		}
	}
	for _, tc := range []struct {
		pattern, text string
		want          [][2]int
	}{
		{deepseekWordsPattern, "x 🫜", [][2]int{{0, 1}, {1, 6}}},
		{deepseekWordsPattern, "x 𓲈", [][2]int{{0, 1}, {1, 6}}},
		{gpt2Pattern, "a𓲈", [][2]int{{0, 5}}},
	} {
		if got := collectMatches(t, fastMatcherFor(tc.pattern), tc.text); !slices.Equal(got, tc.want) {
			t.Errorf("%.20q… on %q = %v; want %v", tc.pattern, tc.text, got, tc.want)
		}
	}
}

// collectMatches returns the spans m finds in s.
func collectMatches(t testing.TB, m matcher, s string) [][2]int {
	t.Helper()
	var out [][2]int
	err := m.forEach(s, func(start, end int) error {
		out = append(out, [2]int{start, end})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDeepseekFusedSplits checks that DeepSeek-V3's first two Split stages,
// fused into one (deepseekDigitsCJKMatcher), cut text into the same pieces
// as the two run one after the other.
func TestDeepseekFusedSplits(t *testing.T) {
	twoStages := sequencePreTokenizer{
		splitPreTokenizer{pattern: deepseekDigitsMatcher{}, behavior: splitIsolated},
		splitPreTokenizer{pattern: deepseekCJKMatcher{}, behavior: splitIsolated},
	}
	fused := fuseDeepseekSplits(twoStages)
	if len(fused) != 1 {
		t.Fatalf("fuseDeepseekSplits kept %d stages", len(fused))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"", "1234567", "漢字かなカナ龥龦ー123", "a1漢2", "٣٣٣٣²Ⅻ中", "x\u3000ア\u30ffー\u309f"}
	for i := 0; i < 20000; i++ {
		texts = append(texts, randomMatcherText(rng))
	}
	pieces := func(p preTokenizer, s string) []string {
		var out []string
		p.each(s, 0, func(piece string, _ int) error { out = append(out, piece); return nil })
		return out
	}
	for _, s := range texts {
		if got, want := pieces(fused, s), pieces(twoStages, s); !slices.Equal(got, want) {
			t.Fatalf("%q: fused %q; two stages %q", s, got, want)
		}
	}
}

// TestFastMatchersInUse checks that the golden tokenizers' Split patterns
// all run on hand-written matchers (none on regexp2), and that DeepSeek-V3's
// first two stages are fused.
func TestFastMatchersInUse(t *testing.T) {
	for _, folder := range []string{"gpt2", "qwen3", "gptoss", "deepseek_v3"} {
		t.Run(folder, func(t *testing.T) {
			tok, _ := loadGolden(t, folder)
			stages := []preTokenizer{tok.preTok}
			if seq, ok := tok.preTok.(sequencePreTokenizer); ok {
				stages = seq
			}
			for i, p := range stages {
				var m matcher
				switch p := p.(type) {
				case splitPreTokenizer:
					m = p.pattern
				case byteLevelPreTokenizer:
					m = p.regex
				}
				if _, slow := m.(regexMatcher); slow {
					t.Errorf("stage %d runs on regexp2", i)
				}
			}
			if folder == "deepseek_v3" {
				if p, ok := stages[0].(splitPreTokenizer); !ok || p.pattern != matcher(deepseekDigitsCJKMatcher{}) || len(stages) != 3 {
					t.Errorf("DeepSeek-V3's first stages are not fused: %d stages, first %T", len(stages), stages[0])
				}
			}
		})
	}
}
