package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites the text of one segment (the text between added
// tokens) before pre-tokenization. Offsets are not tracked: this package only
// returns ids.
type normalizer interface {
	normalize(s string) (string, error)
}

// unicodeNormalizer applies one of the four Unicode normalization forms.
type unicodeNormalizer struct{ form norm.Form }

func (n unicodeNormalizer) normalize(s string) (string, error) { return n.form.String(s), nil }

// lowercaseNormalizer lowercases rune by rune, as Rust's char::to_lowercase:
// the full (not the simple) mapping, without the context-dependent rules of
// SpecialCasing.txt (no final sigma). The only unconditional full mapping
// that differs from Go's simple unicode.ToLower is U+0130.
type lowercaseNormalizer struct{}

func (lowercaseNormalizer) normalize(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == 'İ' {
			b.WriteString("i\u0307")
			continue
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String(), nil
}

// stripNormalizer removes leading and/or trailing whitespace.
type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) (string, error) {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// stripAccentsNormalizer removes nonspacing marks (general category Mn).
type stripAccentsNormalizer struct{}

func (stripAccentsNormalizer) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s), nil
}

// prependNormalizer puts a fixed string in front of non-empty text.
type prependNormalizer struct{ prefix string }

func (n prependNormalizer) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return n.prefix + s, nil
}

// replaceNormalizer replaces every match of a pattern by a fixed string.
type replaceNormalizer struct {
	pattern matcher
	content string
}

func (n replaceNormalizer) normalize(s string) (string, error) {
	var b strings.Builder
	prev, matched := 0, false
	err := n.pattern.forEach(s, func(start, end int) error {
		b.WriteString(s[prev:start])
		b.WriteString(n.content)
		prev, matched = end, true
		return nil
	})
	if err != nil || !matched {
		return s, err
	}
	b.WriteString(s[prev:])
	return b.String(), nil
}

// sequenceNormalizer applies normalizers one after the other.
type sequenceNormalizer []normalizer

func (seq sequenceNormalizer) normalize(s string) (string, error) {
	var err error
	for _, n := range seq {
		if s, err = n.normalize(s); err != nil {
			return "", err
		}
	}
	return s, nil
}

// normalizeLead normalizes s and returns the lead (see preTokenizer) of the
// result, given the lead of s. Characters that n makes from the first
// characters of s keep offset 0, and so do characters it inserts in front of
// them (as Hugging Face's alignments: Prepend's text takes the alignment of
// the character after it); a left Strip that removes them leaves none.
func normalizeLead(n normalizer, s string, lead int) (string, int, error) {
	if seq, ok := n.(sequenceNormalizer); ok {
		var err error
		for _, m := range seq {
			if s, lead, err = normalizeLead(m, s, lead); err != nil {
				return "", 0, err
			}
		}
		return s, lead, nil
	}
	out, err := n.normalize(s)
	if err != nil || lead == 0 {
		return out, 0, err
	}
	if st, ok := n.(stripNormalizer); ok {
		if st.left {
			lead -= len(s) - len(strings.TrimLeftFunc(s, unicode.IsSpace))
		}
		return out, max(0, min(lead, len(out))), nil
	}
	head, err := n.normalize(s[:lead])
	return out, min(len(head), len(out)), err
}

// parseNormalizer builds the normalizer described by raw (the JSON value at
// path). A JSON null gives a nil normalizer.
func parseNormalizer(raw json.RawMessage, path string) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "NFC":
		return unicodeNormalizer{norm.NFC}, nil
	case "NFD":
		return unicodeNormalizer{norm.NFD}, nil
	case "NFKC":
		return unicodeNormalizer{norm.NFKC}, nil
	case "NFKD":
		return unicodeNormalizer{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNormalizer{}, nil
	case "StripAccents":
		return stripAccentsNormalizer{}, nil
	case "Strip":
		var v struct {
			Left  *bool `json:"strip_left"`
			Right *bool `json:"strip_right"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		return stripNormalizer{left: v.Left == nil || *v.Left, right: v.Right == nil || *v.Right}, nil
	case "Prepend":
		var v struct {
			Prepend *string `json:"prepend"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		if v.Prepend == nil {
			return nil, fmt.Errorf("%s.prepend is missing", path)
		}
		return prependNormalizer{*v.Prepend}, nil
	case "Replace":
		var v struct {
			Pattern json.RawMessage `json:"pattern"`
			Content *string         `json:"content"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		if v.Content == nil {
			return nil, fmt.Errorf("%s.content is missing", path)
		}
		m, err := parsePattern(v.Pattern, path+".pattern")
		if err != nil {
			return nil, err
		}
		return replaceNormalizer{pattern: m, content: *v.Content}, nil
	case "Sequence":
		var v struct {
			Normalizers []json.RawMessage `json:"normalizers"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		if v.Normalizers == nil {
			return nil, fmt.Errorf("%s.normalizers is missing", path)
		}
		seq := make(sequenceNormalizer, 0, len(v.Normalizers))
		for i, r := range v.Normalizers {
			n, err := parseNormalizer(r, fmt.Sprintf("%s.normalizers[%d]", path, i))
			if err != nil {
				return nil, err
			}
			if n == nil {
				return nil, fmt.Errorf("%s.normalizers[%d] is null", path, i)
			}
			seq = append(seq, n)
		}
		return seq, nil
	}
	return nil, unsupported(path, typ)
}
