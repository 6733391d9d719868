package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// decoder turns token strings back into text (Hugging Face's decode_chain:
// a list of tokens in, a list of strings out, joined at the end).
type decoder interface {
	decodeChain(tokens []string) []string
}

// byteLevelDecoder maps the byte-level alphabet back to bytes and reads them
// as UTF-8, replacing invalid sequences as Rust's String::from_utf8_lossy.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decodeChain(tokens []string) []string {
	var buf []byte
	for _, t := range tokens {
		buf = byteLevelDecodeToken(buf, t)
	}
	return []string{lossyUTF8(buf)}
}

// sequenceDecoder applies decoders one after the other.
type sequenceDecoder []decoder

func (seq sequenceDecoder) decodeChain(tokens []string) []string {
	for _, d := range seq {
		tokens = d.decodeChain(tokens)
	}
	return tokens
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
