package tokenizer

import (
	"sync"
	"unicode"
	"unicode/utf8"
)

// Hand-written matchers for the pre-tokenization patterns of GPT-2, Llama 3,
// Qwen2/Qwen3, gpt-oss (o200k) and DeepSeek-V3. They give the same matches
// as Oniguruma does for these exact patterns (checked against regexp2 by
// TestFastMatchers and the fuzz tests) and are many times faster than a
// backtracking engine. Their character classes know the characters of
// Unicode 15.1 and 16.0 (unicode16.go), as Oniguruma does and Go's tables
// (Unicode 15.0) and so regexp2 do not. In all but DeepSeek's, every character starts a
// match, so the matches cover the whole text, one after the other.

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
	case o200kPattern:
		return o200kMatcher{}
	case deepseekDigitsPattern:
		return deepseekDigitsMatcher{}
	case deepseekCJKPattern:
		return deepseekCJKMatcher{}
	case deepseekWordsPattern:
		return deepseekWordsMatcher{}
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
	switch unicode16Category(r) {
	case "Lu", "Ll", "Lt", "Lm", "Lo":
		return classLetter
	case "Nd", "Nl", "No":
		return classNumber
	}
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

func (gpt2Matcher) next(s string, pos int) (start, end int) { return pos, gpt2MatchAt(s, pos) }

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

func (m llama3Matcher) next(s string, pos int) (start, end int) { return pos, m.matchAt(s, pos) }

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

// o200kPattern is the Split regex of OpenAI's o200k encoding as gpt-oss's
// tokenizer.json writes it.
const o200kPattern = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// DeepSeek-V3's three Split regexes, in the order its pre-tokenizer runs
// them (the CR and LF of the last one are literal characters in the file).
const (
	deepseekDigitsPattern = `\p{N}{1,3}`
	deepseekCJKPattern    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	deepseekWordsPattern  = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// Character properties of the o200k and DeepSeek patterns, as bit flags.
const (
	propUpper  = 1 << iota // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	propLower              // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	propLetter             // \p{L}
	propNumber             // \p{N}
	propSpace              // \s
	propPunct              // [\p{P}\p{S}]
	propMark               // \p{M}
)

var asciiProps [utf8.RuneSelf]uint8

func init() {
	for r := rune(0); r < utf8.RuneSelf; r++ {
		asciiProps[r] = slowProps(r)
	}
}

func slowProps(r rune) uint8 {
	if cat := unicode16Category(r); cat != "" {
		// New in Unicode 15.1 or 16.0 (none of them is whitespace).
		switch cat[0] {
		case 'L':
			switch cat {
			case "Lu", "Lt":
				return propLetter | propUpper
			case "Ll":
				return propLetter | propLower
			}
			return propLetter | propUpper | propLower
		case 'M':
			return propMark | propUpper | propLower
		case 'N':
			return propNumber
		case 'P', 'S':
			return propPunct
		}
		return 0
	}
	var p uint8
	switch {
	case unicode.IsLetter(r):
		p = propLetter
		switch {
		case unicode.Is(unicode.Lu, r), unicode.Is(unicode.Lt, r):
			p |= propUpper
		case unicode.Is(unicode.Ll, r):
			p |= propLower
		default: // Lm, Lo
			p |= propUpper | propLower
		}
	case unicode.IsMark(r):
		p = propMark | propUpper | propLower
	case unicode.IsNumber(r):
		p = propNumber
	}
	if unicode.IsSpace(r) {
		p |= propSpace
	}
	if unicode.IsPunct(r) || unicode.IsSymbol(r) {
		p |= propPunct
	}
	return p
}

// bmpProps holds slowProps of the Basic Multilingual Plane, built on first
// use (64 KiB) because the unicode tables are slow to ask one by one.
var (
	bmpPropsOnce sync.Once
	bmpProps     *[0x10000]uint8
)

// propsAt decodes the rune at byte offset i of s and returns its
// properties; at the end of s it returns size 0.
func propsAt(s string, i int) (r rune, size int, props uint8) {
	if i >= len(s) {
		return 0, 0, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, asciiProps[c]
	}
	r, size = utf8.DecodeRuneInString(s[i:])
	if r > 0xFFFF {
		return r, size, slowProps(r)
	}
	bmpPropsOnce.Do(func() {
		t := new([0x10000]uint8)
		for c := range t {
			t[c] = slowProps(rune(c))
		}
		bmpProps = t
	})
	return r, size, bmpProps[r]
}

// propEnd returns the end of the run of characters that have one of the
// properties in mask, starting at byte offset i.
func propEnd(s string, i int, mask uint8) int {
	for {
		_, size, p := propsAt(s, i)
		if size == 0 || p&mask == 0 {
			return i
		}
		i += size
	}
}

// propEndNot returns the end of the run of characters that have none of the
// properties in mask, starting at byte offset i.
func propEndNot(s string, i int, mask uint8) int {
	for {
		_, size, p := propsAt(s, i)
		if size == 0 || p&mask != 0 {
			return i
		}
		i += size
	}
}

// lineBreakEnd skips the line breaks (and, with slash, the '/') from i on.
func lineBreakEnd(s string, i int, slash bool) int {
	for i < len(s) && (s[i] == '\r' || s[i] == '\n' || slash && s[i] == '/') {
		i++
	}
	return i
}

// whitespaceMatch matches `\s*[\r\n]+|\s+(?!\S)|\s+` at i, where s[i] is
// whitespace: up to the run's last line break, or else as spaceMatch.
func whitespaceMatch(s string, i int) int {
	j := runEnd(s, i, classSpace)
	for k := j - 1; k >= i; k-- {
		if s[k] == '\r' || s[k] == '\n' {
			return k + 1
		}
	}
	return spaceMatch(s, i)
}

// o200kMatcher matches o200kPattern:
// [^\r\n\p{L}\p{N}]?U*L+C?|[^\r\n\p{L}\p{N}]?U+L*C?|\p{N}{1,3}|
// ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], L = [\p{Ll}\p{Lm}\p{Lo}\p{M}]
// and C the contractions (case-insensitive). Every character starts a match.
type o200kMatcher struct{}

func (m o200kMatcher) forEach(s string, fn func(start, end int) error) error {
	return forEachNext(m, s, fn)
}

func (o200kMatcher) next(s string, pos int) (start, end int) { return pos, o200kMatchAt(s, pos) }

func o200kMatchAt(s string, i int) int {
	r, size, p := propsAt(s, i)
	// Backtracking order: each word alternative with its optional first
	// character, then without it. An attempt can only succeed where the
	// word starts on a character of U or L.
	const word = propUpper | propLower
	withPrefix := false
	if p&(propLetter|propNumber) == 0 && r != '\r' && r != '\n' {
		_, _, p2 := propsAt(s, i+size)
		withPrefix = p2&word != 0
	}
	end := -1
	if withPrefix {
		end = o200kWordLower(s, i+size)
	}
	if end < 0 && p&word != 0 {
		end = o200kWordLower(s, i)
	}
	if end < 0 && withPrefix {
		end = o200kWordUpper(s, i+size)
	}
	if end < 0 && p&word != 0 {
		end = o200kWordUpper(s, i)
	}
	if end >= 0 {
		if end < len(s) && s[end] == '\'' {
			if e := contraction(s, end, true); e > 0 {
				return e
			}
		}
		return end
	}
	switch {
	case p&propNumber != 0:
		end := i + size
		for n := 1; n < 3; n++ {
			_, size2, p2 := propsAt(s, end)
			if p2&propNumber == 0 {
				break
			}
			end += size2
		}
		return end
	case p&propSpace == 0: // ` ?[^\s\p{L}\p{N}]+[\r\n/]*` (letters went above)
		return lineBreakEnd(s, propEndNot(s, i, propSpace|propLetter|propNumber), true)
	}
	if r == ' ' {
		if _, size2, p2 := propsAt(s, i+1); size2 > 0 && p2&(propSpace|propLetter|propNumber) == 0 {
			return lineBreakEnd(s, propEndNot(s, i+1, propSpace|propLetter|propNumber), true)
		}
	}
	return whitespaceMatch(s, i)
}

// o200kWordLower matches U*L+ at j (greedy, with backtracking) and returns
// its end, or -1.
func o200kWordLower(s string, j int) int {
	lastL := -1 // end of the last character of the U run that is also in L
	k := j
	for {
		_, size, p := propsAt(s, k)
		if size == 0 || p&propUpper == 0 {
			break
		}
		k += size
		if p&propLower != 0 {
			lastL = k
		}
	}
	if _, size, p := propsAt(s, k); size > 0 && p&propLower != 0 {
		return propEnd(s, k, propLower)
	}
	// Give back the U run down to its last character in L, which is then
	// all of L+ (the characters after it are in neither).
	return lastL
}

// o200kWordUpper matches U+L* at j and returns its end, or -1.
func o200kWordUpper(s string, j int) int {
	k := propEnd(s, j, propUpper)
	if k == j {
		return -1
	}
	return propEnd(s, k, propLower)
}

// deepseekDigitsMatcher matches `\p{N}{1,3}`.
type deepseekDigitsMatcher struct{}

func (m deepseekDigitsMatcher) forEach(s string, fn func(start, end int) error) error {
	return forEachNext(m, s, fn)
}

func (deepseekDigitsMatcher) next(s string, i int) (start, end int) {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf && (c < '0' || c > '9') {
			i++
			continue
		}
		_, size, p := propsAt(s, i)
		if p&propNumber == 0 {
			i += size
			continue
		}
		end := i + size
		for n := 1; n < 3; n++ {
			_, size2, p2 := propsAt(s, end)
			if p2&propNumber == 0 {
				break
			}
			end += size2
		}
		return i, end
	}
	return -1, -1
}

// deepseekCJKMatcher matches deepseekCJKPattern: runs of CJK ideographs
// U+4E00–U+9FA5, hiragana U+3040–U+309F and katakana U+30A0–U+30FF.
type deepseekCJKMatcher struct{}

func isDeepseekCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FA5 || r >= 0x3040 && r <= 0x30FF
}

func (m deepseekCJKMatcher) forEach(s string, fn func(start, end int) error) error {
	return forEachNext(m, s, fn)
}

func (deepseekCJKMatcher) next(s string, pos int) (start, end int) {
	// The characters of the class are encoded in 3 bytes led by 0xE3
	// (kana) to 0xE9 (ideographs); other bytes are skipped undecoded.
	start = -1
	for i := pos; i < len(s); {
		if c := s[i]; c < 0xE3 || c > 0xE9 {
			if start >= 0 {
				return start, i
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch in := isDeepseekCJK(r); {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			return start, i
		}
		i += size
	}
	if start >= 0 {
		return start, len(s)
	}
	return -1, -1
}

// deepseekDigitsCJKMatcher stands for DeepSeek-V3's first two Split stages
// (both Isolated): `\p{N}{1,3}` on the text, then deepseekCJKPattern on
// what lies between those matches. As no character is both a number and in
// the CJK ranges, the two give the pieces that one split does whose matches
// are the digit groups and the CJK runs of the whole text.
type deepseekDigitsCJKMatcher struct{}

func (m deepseekDigitsCJKMatcher) forEach(s string, fn func(start, end int) error) error {
	return forEachNext(m, s, fn)
}

func (deepseekDigitsCJKMatcher) next(s string, i int) (start, end int) {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= '0' && c <= '9' {
				return deepseekDigitsMatcher{}.next(s, i)
			}
			i++
			continue
		}
		r, size, p := propsAt(s, i)
		switch {
		case isDeepseekCJK(r):
			return deepseekCJKMatcher{}.next(s, i)
		case p&propNumber != 0:
			return deepseekDigitsMatcher{}.next(s, i)
		}
		i += size
	}
	return -1, -1
}

// fuseDeepseekSplits replaces DeepSeek-V3's first two Split stages by one
// (see deepseekDigitsCJKMatcher).
func fuseDeepseekSplits(seq sequencePreTokenizer) sequencePreTokenizer {
	if len(seq) < 2 {
		return seq
	}
	a, ok1 := seq[0].(splitPreTokenizer)
	b, ok2 := seq[1].(splitPreTokenizer)
	if !ok1 || !ok2 || a.pattern != matcher(deepseekDigitsMatcher{}) || b.pattern != matcher(deepseekCJKMatcher{}) ||
		a.behavior != splitIsolated || b.behavior != splitIsolated || a.invert || b.invert {
		return seq
	}
	fused := splitPreTokenizer{pattern: deepseekDigitsCJKMatcher{}, behavior: splitIsolated}
	return append(sequencePreTokenizer{fused}, seq[2:]...)
}

// deepseekWordsMatcher matches deepseekWordsPattern:
// [ASCII punctuation][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+|
// ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Some characters (a number or a control character not followed by a
// letter) start no match; the search goes on at the next one.
type deepseekWordsMatcher struct{}

func (m deepseekWordsMatcher) forEach(s string, fn func(start, end int) error) error {
	return forEachNext(m, s, fn)
}

func (deepseekWordsMatcher) next(s string, i int) (start, end int) {
	for i < len(s) {
		end, size := deepseekWordsMatchAt(s, i)
		if end >= 0 {
			return i, end
		}
		i += size
	}
	return -1, -1
}

// deepseekWordsMatchAt returns the end of the match at i, or -1, and the
// size of the character at i.
func deepseekWordsMatchAt(s string, i int) (end, size int) {
	r, size, p := propsAt(s, i)
	if r < utf8.RuneSelf && p&propPunct != 0 && i+1 < len(s) && isASCIILetter(s[i+1]) {
		end := i + 2
		for end < len(s) && isASCIILetter(s[end]) {
			end++
		}
		return end, size
	}
	const letterOrMark = propLetter | propMark
	if p&(propLetter|propPunct) == 0 && r != '\r' && r != '\n' {
		if _, size2, p2 := propsAt(s, i+size); size2 > 0 && p2&letterOrMark != 0 {
			return propEnd(s, i+size, letterOrMark), size
		}
	}
	if p&letterOrMark != 0 {
		return propEnd(s, i, letterOrMark), size
	}
	punctStart := -1
	if p&propPunct != 0 {
		punctStart = i
	} else if r == ' ' {
		if _, _, p2 := propsAt(s, i+1); p2&propPunct != 0 {
			punctStart = i + 1
		}
	}
	if punctStart >= 0 {
		return lineBreakEnd(s, propEnd(s, punctStart, propPunct), false), size
	}
	if p&propSpace != 0 {
		return whitespaceMatch(s, i), size
	}
	return -1, size
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

// unicode16Range is a run of characters of one general category (see
// unicode16New).
type unicode16Range struct {
	lo, hi rune
	cat    string
}

// unicode16Category returns the general category of r if Unicode 15.1 or
// 16.0 assigned it (Go's tables are Unicode 15.0; Hugging Face's Oniguruma
// knows 16.0), or "".
func unicode16Category(r rune) string {
	i, j := 0, len(unicode16New)
	for i < j {
		h := int(uint(i+j) >> 1)
		if unicode16New[h].hi < r {
			i = h + 1
		} else {
			j = h
		}
	}
	if i < len(unicode16New) && unicode16New[i].lo <= r {
		return unicode16New[i].cat
	}
	return ""
}
