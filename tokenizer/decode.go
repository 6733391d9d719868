package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// decoder turns token strings back into text (Hugging Face's decode_chain:
// a list of tokens in, a list of strings out, joined at the end). Only a
// Replace pattern on regexp2 can fail (its match timeout).
type decoder interface {
	decodeChain(tokens []string) ([]string, error)
}

// byteLevelDecoder maps the byte-level alphabet back to bytes and reads them
// as UTF-8, replacing invalid sequences as Rust's String::from_utf8_lossy.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) ([]string, error) {
	var buf []byte
	for _, t := range tokens {
		buf = byteLevelDecodeToken(buf, t)
	}
	return []string{lossyUTF8(buf)}, nil
}

// replaceDecoder replaces every match of a pattern by a fixed string in each
// token (the Replace normalizer used as a decoder).
type replaceDecoder struct{ replaceNormalizer }

func (d replaceDecoder) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		var err error
		if out[i], err = d.normalize(t); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// byteFallbackDecoder turns each run of byte tokens "<0xAB>" into the text
// those bytes spell, or into one U+FFFD per byte when the run is not valid
// UTF-8 as a whole (not lossy decoding: Hugging Face's ByteFallback).
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, 0, len(tokens))
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, t := range tokens {
		if b, ok := byteFallbackByte(t); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out, nil
}

// byteFallbackByte reads a byte token: 6 bytes, "<0x", two characters that
// Rust's u8::from_str_radix(_, 16) accepts (hex digits of either case, or
// '+' and one hex digit), ">".
func byteFallbackByte(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	hi, lo := t[3], t[4]
	if hi == '+' {
		hi = '0'
	}
	h, ok1 := hexDigit(hi)
	l, ok2 := hexDigit(lo)
	return h<<4 | l, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// fuseDecoder joins all tokens into one string.
type fuseDecoder struct{}

func (fuseDecoder) decodeChain(tokens []string) ([]string, error) {
	return []string{strings.Join(tokens, "")}, nil
}

// stripDecoder removes up to start leading and up to stop trailing copies of
// the character content from each token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		lo := 0
		for n := 0; n < d.start && lo < len(t); n++ {
			r, size := utf8.DecodeRuneInString(t[lo:])
			if r != d.content {
				break
			}
			lo += size
		}
		// Hugging Face panics when stop reaches past the token's start
		// or the two cuts cross; here the token just becomes shorter.
		hi := len(t)
		for n := 0; n < d.stop && hi > lo; n++ {
			r, size := utf8.DecodeLastRuneInString(t[lo:hi])
			if r != d.content {
				break
			}
			hi -= size
		}
		out[i] = t[lo:hi]
	}
	return out, nil
}

// metaspaceDecoder turns the replacement character back into spaces; in the
// first token it is dropped instead (every occurrence, as Hugging Face does)
// unless the prepend scheme is "never".
type metaspaceDecoder struct {
	replacement rune
	dropFirst   bool
}

func (d metaspaceDecoder) decodeChain(tokens []string) ([]string, error) {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		drop := i == 0 && d.dropFirst
		out[i] = strings.Map(func(r rune) rune {
			switch {
			case r != d.replacement:
				return r
			case drop:
				return -1
			}
			return ' '
		}, t)
	}
	return out, nil
}

// sequenceDecoder applies decoders one after the other.
type sequenceDecoder []decoder

func (seq sequenceDecoder) decodeChain(tokens []string) ([]string, error) {
	var err error
	for _, d := range seq {
		if tokens, err = d.decodeChain(tokens); err != nil {
			return nil, err
		}
	}
	return tokens, nil
}

// lossyUTF8 converts b to a string, replacing each maximal subpart of an
// ill-formed sequence by one U+FFFD (the Unicode "best practice" that Rust's
// String::from_utf8_lossy follows; Go's strings.ToValidUTF8 would merge runs
// of them into one, and utf8.DecodeRune gives one per byte).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		if r, size := utf8.DecodeRune(b[i:]); r != utf8.RuneError || size > 1 {
			out = append(out, b[i:i+size]...)
			i += size
			continue
		}
		// Invalid: skip the lead byte and the continuation bytes that
		// could still have followed it in a valid sequence.
		i += 1 + validPrefixAfterLead(c, b[i+1:])
		out = append(out, "\uFFFD"...)
	}
	return string(out)
}

// validPrefixAfterLead returns how many bytes of rest continue the sequence
// started by lead without making it ill-formed yet (0 for a byte that cannot
// start a sequence).
func validPrefixAfterLead(lead byte, rest []byte) int {
	var need int
	lo, hi := byte(0x80), byte(0xBF) // allowed range of the first continuation
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead >= 0xE1 && lead <= 0xEC, lead == 0xEE, lead == 0xEF:
		need = 2
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	case lead == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 0
	}
	n := 0
	for n < need && n < len(rest) {
		c := rest[n]
		if n == 0 && (c < lo || c > hi) || n > 0 && (c < 0x80 || c > 0xBF) {
			break
		}
		n++
	}
	return n
}

// parseDecoder builds the decoder described by raw (the JSON value at path).
// A JSON null gives a nil decoder.
func parseDecoder(raw json.RawMessage, path string) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "Replace":
		n, err := parseNormalizer(raw, path)
		if err != nil {
			return nil, err
		}
		return replaceDecoder{n.(replaceNormalizer)}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Strip":
		var v struct {
			Content *string `json:"content"`
			Start   *int    `json:"start"`
			Stop    *int    `json:"stop"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		if v.Content == nil || v.Start == nil || v.Stop == nil {
			return nil, fmt.Errorf("%s needs content, start and stop", path)
		}
		c, err := oneChar(*v.Content, path+".content")
		if err != nil {
			return nil, err
		}
		if *v.Start < 0 || *v.Stop < 0 {
			return nil, fmt.Errorf("%s: start %d and stop %d must not be negative", path, *v.Start, *v.Stop)
		}
		return stripDecoder{content: c, start: *v.Start, stop: *v.Stop}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw, path)
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{replacement: m.replacement, dropFirst: m.prepend != prependNever}, nil
	case "Sequence":
		var v struct {
			Decoders []json.RawMessage `json:"decoders"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		if v.Decoders == nil {
			return nil, fmt.Errorf("%s.decoders is missing", path)
		}
		seq := make(sequenceDecoder, 0, len(v.Decoders))
		for i, r := range v.Decoders {
			d, err := parseDecoder(r, fmt.Sprintf("%s.decoders[%d]", path, i))
			if err != nil {
				return nil, err
			}
			if d == nil {
				return nil, fmt.Errorf("%s.decoders[%d] is null", path, i)
			}
			seq = append(seq, d)
		}
		return seq, nil
	}
	return nil, unsupported(path, typ)
}
