package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the successive, non-overlapping matches of a pattern.
type matcher interface {
	// forEach calls fn with the byte span [start, end) of every match in
	// s, in order, and stops at the first error fn returns. s is valid UTF-8.
	forEach(s string, fn func(start, end int) error) error
}

// nextMatcher is the cheaper upgrade of a matcher that can find its matches
// one at a time without state (as io.WriterTo beside io.Reader): next
// returns the first match that starts at or after pos, or start < 0. Its
// matches are never empty. splitString type-asserts it.
type nextMatcher interface {
	matcher
	next(s string, pos int) (start, end int)
}

// forEachNext is forEach for a nextMatcher.
func forEachNext(m nextMatcher, s string, fn func(start, end int) error) error {
	for pos := 0; pos < len(s); {
		start, end := m.next(s, pos)
		if start < 0 {
			return nil
		}
		if err := fn(start, end); err != nil {
			return err
		}
		pos = end
	}
	return nil
}

// literalMatcher matches a fixed string (a Split or Replace "String" pattern).
type literalMatcher struct{ lit string }

func (m literalMatcher) forEach(s string, fn func(start, end int) error) error {
	return forEachNext(m, s, fn)
}

func (m literalMatcher) next(s string, pos int) (start, end int) {
	if m.lit == "" { // matches nothing, as Hugging Face's empty String pattern
		return -1, -1
	}
	i := strings.Index(s[pos:], m.lit)
	if i < 0 {
		return -1, -1
	}
	return pos + i, pos + i + len(m.lit)
}

// regexMatcher runs a regular expression with github.com/dlclark/regexp2, a
// backtracking engine that, unlike Go's regexp, has lookaround, as the
// Oniguruma engine Hugging Face uses.
type regexMatcher struct{ re *regexp2.Regexp }

// compileRegex compiles an Oniguruma (Ruby syntax) pattern as Hugging Face
// writes them: the well-known pre-tokenization patterns get a hand-written
// matcher; others run on regexp2 after onigToDotNet.
func compileRegex(pattern string) (matcher, error) {
	if m := fastMatcherFor(pattern); m != nil {
		return m, nil
	}
	if posixBracket.MatchString(pattern) {
		return nil, errors.New("POSIX bracket expressions are not supported")
	}
	// Multiline: in Ruby syntax ^ and $ match at every line start and end.
	re, err := regexp2.Compile(onigToDotNet(pattern), regexp2.Multiline)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = regexTimeout
	return regexMatcher{re}, nil
}

// posixBracket finds Oniguruma's POSIX bracket expressions ([:alpha:] in a
// class), which .NET syntax would read as plain characters.
var posixBracket = regexp.MustCompile(`\[:\^?(alnum|alpha|ascii|blank|cntrl|digit|graph|lower|print|punct|space|upper|xdigit|word):\]`)

// regexTimeout bounds one regexp2 match attempt. A backtracking engine can
// take exponential time on some patterns; Oniguruma gives up after a number
// of steps too (its retry limit), and so does Encode, with an error.
var regexTimeout = 5 * time.Second

// onigWordClass is the body of a character class for Oniguruma's Unicode
// \w, as measured on Hugging Face's build: Alphabetic, Mark, Decimal_Number
// and Connector_Punctuation, plus the Latin-1 numbers ² ³ ¹ ¼ ½ ¾ (its
// Latin-1 table). .NET's \w (regexp2's) differs.
const onigWordClass = `\p{L}\p{Nl}\p{Other_Alphabetic}\p{M}\p{Nd}\p{Pc}\u00B2\u00B3\u00B9\u00BC-\u00BE`

// onigToDotNet rewrites the Oniguruma constructs whose meaning differs in
// regexp2's .NET syntax: \w, \W, \b and \B (see onigWordClass) and
// \x{HHHH}.
// Everything else is passed through.
func onigToDotNet(p string) string {
	const w = "[" + onigWordClass + "]"
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			i++
			switch e := p[i]; {
			case e == 'w' && inClass:
				b.WriteString(onigWordClass)
			case e == 'w':
				b.WriteString(w)
			case e == 'W' && !inClass:
				b.WriteString("[^" + onigWordClass + "]")
			case e == 'b' && !inClass:
				b.WriteString("(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))")
			case e == 'B' && !inClass:
				b.WriteString("(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))")
			case e == 'x' && i+1 < len(p) && p[i+1] == '{':
				end := strings.IndexByte(p[i:], '}')
				var r uint64
				var err error
				if end > 2 {
					r, err = strconv.ParseUint(p[i+2:i+end], 16, 32)
				}
				if end <= 2 || err != nil || r > unicode.MaxRune {
					b.WriteString("\\x") // leave it for regexp2 to reject
					continue
				}
				if r <= 0xFFFF {
					fmt.Fprintf(&b, "\\u%04X", r)
				} else {
					b.WriteRune(rune(r)) // no \u form for it; a literal is fine
				}
				i += end
			default:
				b.WriteByte('\\')
				b.WriteByte(e)
			}
		case c == '[' && !inClass:
			inClass = true
			b.WriteByte(c)
			// A ']' right after '[' or '[^' is a literal.
			if i+1 < len(p) && p[i+1] == '^' {
				i++
				b.WriteByte('^')
			}
			if i+1 < len(p) && p[i+1] == ']' {
				i++
				b.WriteByte(']')
			}
		case c == ']' && inClass:
			inClass = false
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// forEach iterates like the onig crate's find_iter, which Hugging Face uses:
// an empty match right where the previous match ended is not reported, and
// the search then goes on one character further.
func (m regexMatcher) forEach(s string, fn func(start, end int) error) error {
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1) // byte offset of every rune index
	for i, r := range s {
		runes = append(runes, r)
		offs = append(offs, i)
	}
	offs = append(offs, len(s))

	lastEnd := -1
	for pos := 0; pos <= len(runes); {
		mt, err := m.re.FindRunesMatchStartingAt(runes, pos)
		if err != nil {
			return err
		}
		if mt == nil || mt.Index < pos {
			break
		}
		start, end := mt.Index, mt.Index+mt.Length
		if start == end && start == lastEnd {
			pos = start + 1
			continue
		}
		if err := fn(offs[start], offs[end]); err != nil {
			return err
		}
		lastEnd = end
		pos = end
		if start == end {
			pos++
		}
	}
	return nil
}

// forEachSpan cuts s into spans that cover it all, as Hugging Face's
// Pattern::find_matches: the matches of m and the text between them, with
// match telling which is which (swapped when invert is true).
func forEachSpan(m matcher, s string, invert bool, fn func(start, end int, match bool) error) error {
	if s == "" {
		return fn(0, 0, invert)
	}
	prev := 0
	err := m.forEach(s, func(start, end int) error {
		if prev != start {
			if err := fn(prev, start, invert); err != nil {
				return err
			}
		}
		prev = end
		return fn(start, end, !invert)
	})
	if err != nil {
		return err
	}
	if prev != len(s) {
		return fn(prev, len(s), invert)
	}
	return nil
}

// runeMatcher is a pattern that matches single characters with a predicate
// (Hugging Face's Fn(char) -> bool patterns).
type runeMatcher func(rune) bool

func (f runeMatcher) forEach(s string, fn func(start, end int) error) error {
	for i, r := range s {
		if f(r) {
			if err := fn(i, i+utf8.RuneLen(r)); err != nil {
				return err
			}
		}
	}
	return nil
}

// parsePattern reads a Split or Replace pattern: {"String": "..."} or
// {"Regex": "..."}.
func parsePattern(raw json.RawMessage, path string) (matcher, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("%s is missing", path)
	}
	var v struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	switch {
	case v.String != nil && v.Regex == nil:
		return literalMatcher{*v.String}, nil
	case v.Regex != nil && v.String == nil:
		m, err := compileRegex(*v.Regex)
		if err != nil {
			return nil, fmt.Errorf("%s.Regex %q: %v", path, *v.Regex, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s must have exactly one of \"String\" or \"Regex\"", path)
}
