package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written matchers for the pre-tokenization patterns of GPT-2, Llama 3
// and Qwen2/Qwen3. They give the same matches as Oniguruma does for these
// exact patterns (checked against regexp2 by TestFastMatchers and the fuzz
// tests) and are many times faster than a backtracking engine. Every
// alternative of these patterns can start on any character, so the matches
// cover the whole text, one after the other.

// llama3Pattern is the Split regex of Llama 3 tokenizers.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// qwen2Pattern is the Split regex of Qwen2, Qwen2.5 and Qwen3 tokenizers:
// Llama 3's with single digits.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// fastMatcherFor returns a hand-written matcher for the well-known
// pre-tokenization patterns, or nil.
func fastMatcherFor(pattern string) matcher {
	switch pattern {
	case gpt2Pattern:
		return gpt2Matcher{}
	case llama3Pattern:
		return llama3Matcher{maxDigits: 3}
	case qwen2Pattern:
		return llama3Matcher{maxDigits: 1}
	}
	return nil
}

// Character classes of the patterns.
const (
	classOther  = iota // [^\s\p{L}\p{N}]
	classLetter        // \p{L}
	classNumber        // \p{N}
	classSpace         // \s (Unicode White_Space, as Oniguruma's)
)

var asciiClass [utf8.RuneSelf]uint8

func init() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		asciiClass[r] = uint8(slowClass(r))
	}
}

func slowClass(r rune) int {
	switch {
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	return classOther
}

// runeAt decodes the rune at byte offset i of s and returns its class; at
// the end of s it returns size 0 and class -1.
func runeAt(s string, i int) (r rune, size, class int) {
	if i >= len(s) {
		return 0, 0, -1
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, int(asciiClass[c])
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	return r, size, slowClass(r)
}

// runEnd returns the end of the run of characters of class cls starting at
// byte offset i.
func runEnd(s string, i, cls int) int {
	for {
		_, size, c := runeAt(s, i)
		if size == 0 || c != cls {
			return i
		}
		i += size
	}
}

// spaceMatch matches `\s+(?!\S)|\s+` at i, where s[i] is whitespace: the
// whole run if it ends the text or is one character long, else the run but
// its last character (which is left to go with what follows).
func spaceMatch(s string, i int) int {
	j := runEnd(s, i, classSpace)
	if j == len(s) {
		return j
	}
	_, last := utf8.DecodeLastRuneInString(s[:j])
	if j-last > i {
		return j - last
	}
	return j
}

// contraction matches 's 't 're 've 'm 'll 'd at i (s[i] is an apostrophe), case
// sensitively or not, and returns the end of the match or -1. Case
// insensitive matching follows Oniguruma's Unicode case folding, where 'ſ'
// (U+017F) folds to 's'.
func contraction(s string, i int, fold bool) int {
	lower := func(j int) (rune, int) {
		r, size, _ := runeAt(s, j)
		if fold {
			if r == 'ſ' {
				r = 's'
			} else if r < utf8.RuneSelf {
				r = unicode.ToLower(r)
			}
		}
		return r, size
	}
	r1, n1 := lower(i + 1)
	switch r1 {
	case 's', 't', 'm', 'd':
		return i + 1 + n1
	case 'r', 'v':
		if r2, n2 := lower(i + 1 + n1); r2 == 'e' {
			return i + 1 + n1 + n2
		}
	case 'l':
		if r2, n2 := lower(i + 1 + n1); r2 == 'l' {
			return i + 1 + n1 + n2
		}
	}
	return -1
}

// gpt2Matcher matches
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
type gpt2Matcher struct{}

func (gpt2Matcher) forEach(s string, fn func(start, end int) error) error {
	for i := 0; i < len(s); {
		end := gpt2MatchAt(s, i)
		if err := fn(i, end); err != nil {
			return err
		}
		i = end
	}
	return nil
}

func gpt2MatchAt(s string, i int) int {
	r, size, cls := runeAt(s, i)
	if r == '\'' {
		if end := contraction(s, i, false); end > 0 {
			return end
		}
	}
	if r == ' ' {
		// ` ?X+` for X = letter, number, other: the space goes with a
		// following run.
		if _, size2, cls2 := runeAt(s, i+1); size2 > 0 && cls2 != classSpace {
			return runEnd(s, i+1+size2, cls2)
		}
	}
	if cls == classSpace {
		return spaceMatch(s, i)
	}
	return runEnd(s, i+size, cls)
}

// llama3Matcher matches the Llama 3 pattern (maxDigits 3) or the Qwen2 one
// (maxDigits 1):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
type llama3Matcher struct{ maxDigits int }

func (m llama3Matcher) forEach(s string, fn func(start, end int) error) error {
	for i := 0; i < len(s); {
		end := m.matchAt(s, i)
		if err := fn(i, end); err != nil {
			return err
		}
		i = end
	}
	return nil
}

func (m llama3Matcher) matchAt(s string, i int) int {
	r, size, cls := runeAt(s, i)
	if r == '\'' {
		if end := contraction(s, i, true); end > 0 {
			return end
		}
	}
	switch cls {
	case classLetter:
		return runEnd(s, i+size, classLetter)
	case classNumber:
		end := i + size
		for n := 1; n < m.maxDigits; n++ {
			_, size2, cls2 := runeAt(s, end)
			if cls2 != classNumber {
				break
			}
			end += size2
		}
		return end
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+ with the optional character present.
	if r != '\r' && r != '\n' {
		if _, size2, cls2 := runeAt(s, i+size); cls2 == classLetter {
			return runEnd(s, i+size+size2, classLetter)
		}
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	start := -1
	if cls == classOther {
		start = i
	} else if r == ' ' {
		if _, _, cls2 := runeAt(s, i+1); cls2 == classOther {
			start = i + 1
		}
	}
	if start >= 0 {
		end := runEnd(s, start, classOther)
		for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
			end++
		}
		return end
	}
	// Whitespace: `\s*[\r\n]+` ends after the run's last line break;
	// without one, `\s+(?!\S)|\s+`.
	j := runEnd(s, i, classSpace)
	for k := j - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	return spaceMatch(s, i)
}
