package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer cuts normalized text into the pieces ("words") that the model
// tokenizes one by one. It may also rewrite them (ByteLevel maps bytes to its
// alphabet).
type preTokenizer interface {
	// each calls emit with every piece made from s, in order, and stops at
	// the first error emit returns. Empty pieces are dropped, as Hugging
	// Face does.
	//
	// lead is how many bytes at the start of s come from the first
	// character of the input text (or were inserted in front of it): their
	// offset in the original text is 0, which is what Metaspace's
	// prepend_scheme "first" asks of a piece. emit gets the same count for
	// each piece.
	each(s string, lead int, emit emitFunc) error
}

// emitFunc receives the pieces of a pre-tokenizer and their lead (see
// preTokenizer).
type emitFunc func(piece string, lead int) error

// subLead is the lead of the piece s[start:end] of a string whose lead is
// lead.
func subLead(lead, start, end int) int {
	return max(0, min(lead-start, end-start))
}

// splitBehavior says what Split does with the matches of its pattern.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            splitRemoved,
	"Isolated":           splitIsolated,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// splitString cuts s with m as Hugging Face's NormalizedString::split and
// calls emit with the non-empty pieces.
//
// Hugging Face computes the pieces as folds over the list of spans (for
// MergedWithNext, a fold from the end); here they are made in one pass
// forward, holding back at most one piece. A nextMatcher is driven without
// closures, so that splitting allocates nothing.
func splitString(s string, lead int, m matcher, invert bool, behavior splitBehavior, emit emitFunc) error {
	nm, ok := m.(nextMatcher)
	if !ok {
		sp := &splitter{s: s, lead: lead, behavior: behavior, emit: emit}
		if err := forEachSpan(m, s, invert, sp.span); err != nil {
			return err
		}
		return sp.finish()
	}
	if behavior == splitIsolated {
		// Every span is a piece: the matches and the text between them.
		prev := 0
		for prev < len(s) {
			start, end := nm.next(s, prev)
			if start < 0 {
				break
			}
			if prev < start {
				if err := emit(s[prev:start], subLead(lead, prev, start)); err != nil {
					return err
				}
			}
			if err := emit(s[start:end], subLead(lead, start, end)); err != nil {
				return err
			}
			prev = end
		}
		if prev < len(s) {
			return emit(s[prev:], subLead(lead, prev, len(s)))
		}
		return nil
	}
	sp := splitter{s: s, lead: lead, behavior: behavior, emit: emit}
	if s == "" {
		if err := sp.span(0, 0, invert); err != nil {
			return err
		}
		return sp.finish()
	}
	prev := 0
	for prev < len(s) {
		start, end := nm.next(s, prev)
		if start < 0 {
			break
		}
		if prev != start {
			if err := sp.span(prev, start, invert); err != nil {
				return err
			}
		}
		if err := sp.span(start, end, !invert); err != nil {
			return err
		}
		prev = end
	}
	if prev != len(s) {
		if err := sp.span(prev, len(s), invert); err != nil {
			return err
		}
	}
	return sp.finish()
}

// splitter turns the spans of forEachSpan into the pieces of one split.
type splitter struct {
	s        string
	lead     int
	behavior splitBehavior
	emit     emitFunc

	held               bool // a piece is held back: [heldStart, heldEnd)
	heldStart, heldEnd int
	prevMatch          bool
}

func (sp *splitter) out(start, end int) error {
	if end > start {
		return sp.emit(sp.s[start:end], subLead(sp.lead, start, end))
	}
	return nil
}

// span takes the next span: a match of the pattern or the text before one.
func (sp *splitter) span(start, end int, match bool) error {
	switch sp.behavior {
	case splitIsolated:
		return sp.out(start, end)
	case splitRemoved:
		if match {
			return nil
		}
		return sp.out(start, end)
	case splitContiguous, splitMergedWithPrevious:
		// Contiguous glues a span to the previous piece when both are
		// matches or both are not; MergedWithPrevious glues a match
		// that follows a non-match.
		glue := match == sp.prevMatch
		if sp.behavior == splitMergedWithPrevious {
			glue = match && !sp.prevMatch
		}
		sp.prevMatch = match
		if sp.held && glue {
			sp.heldEnd = end
			return nil
		}
		var err error
		if sp.held {
			err = sp.out(sp.heldStart, sp.heldEnd)
		}
		sp.held, sp.heldStart, sp.heldEnd = true, start, end
		return err
	default: // splitMergedWithNext: a match is glued to a following non-match
		if sp.held {
			sp.held = false
			if !match {
				return sp.out(sp.heldStart, end)
			}
			if err := sp.out(sp.heldStart, sp.heldEnd); err != nil {
				return err
			}
		}
		if match {
			sp.held, sp.heldStart, sp.heldEnd = true, start, end
			return nil
		}
		return sp.out(start, end)
	}
}

// finish emits the piece held back, if any.
func (sp *splitter) finish() error {
	if sp.held {
		sp.held = false
		return sp.out(sp.heldStart, sp.heldEnd)
	}
	return nil
}

// splitPreTokenizer is the Split pre-tokenizer.
type splitPreTokenizer struct {
	pattern  matcher
	behavior splitBehavior
	invert   bool
}

func (p splitPreTokenizer) each(s string, lead int, emit emitFunc) error {
	return splitString(s, lead, p.pattern, p.invert, p.behavior, emit)
}

// byteLevelPreTokenizer is the ByteLevel pre-tokenizer: optionally adds a
// leading space, optionally splits with the GPT-2 regex (Isolated), then maps
// every byte to the byte-level alphabet.
//
// When it is the last stage before the model, its pieces go to the model
// unmapped (raw) and the model maps them on a cache miss (see
// deferByteLevel): the cache is then looked up with a piece of the text,
// and a cached word costs no allocation.
type byteLevelPreTokenizer struct {
	addPrefixSpace bool
	regex          matcher // nil when use_regex is false
	raw            bool    // emit pieces unmapped
}

// encode maps a piece to the byte-level alphabet, unless p.raw.
func (p byteLevelPreTokenizer) encode(s string) string {
	if p.raw {
		return s
	}
	return byteLevelEncode(s)
}

// deferByteLevel makes the last stage of p, if it is a ByteLevel
// pre-tokenizer, emit raw pieces, and reports whether it did: the model
// must then map its words itself.
func deferByteLevel(p preTokenizer) (preTokenizer, bool) {
	switch q := p.(type) {
	case byteLevelPreTokenizer:
		q.raw = true
		return q, true
	case sequencePreTokenizer:
		if len(q) == 0 {
			return p, false
		}
		last, ok := deferByteLevel(q[len(q)-1])
		if !ok {
			return p, false
		}
		seq := append(sequencePreTokenizer(nil), q...)
		seq[len(seq)-1] = last
		return seq, true
	}
	return p, false
}

func (p byteLevelPreTokenizer) each(s string, lead int, emit emitFunc) error {
	if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
		if lead > 0 { // the space is aligned with the character after it
			lead++
		}
	}
	if p.regex == nil {
		if s == "" {
			return nil
		}
		return emit(p.encode(s), len(p.encode(s[:lead])))
	}
	piece := func(start, end int) error {
		if end <= start {
			return nil
		}
		l := subLead(lead, start, end)
		if l > 0 {
			l = len(p.encode(s[start : start+l]))
		}
		return emit(p.encode(s[start:end]), l)
	}
	nm, ok := p.regex.(nextMatcher)
	if !ok {
		return forEachSpan(p.regex, s, false, func(start, end int, _ bool) error { return piece(start, end) })
	}
	// Every span is a piece (Isolated): the matches and the text between.
	prev := 0
	for prev < len(s) {
		start, end := nm.next(s, prev)
		if start < 0 {
			break
		}
		if err := piece(prev, start); err != nil {
			return err
		}
		if err := piece(start, end); err != nil {
			return err
		}
		prev = end
	}
	return piece(prev, len(s))
}

// digitsPreTokenizer is the Digits pre-tokenizer: numeric characters are
// split off one by one (individual_digits) or in runs.
type digitsPreTokenizer struct{ individual bool }

func (p digitsPreTokenizer) each(s string, lead int, emit emitFunc) error {
	behavior := splitContiguous
	if p.individual {
		behavior = splitIsolated
	}
	return splitString(s, lead, runeMatcher(unicode.IsNumber), false, behavior, emit)
}

// isRustWord reports whether r is a word character (\w) for Rust's regex
// crate, which the Whitespace pre-tokenizer and single_word use: Alphabetic,
// Mark, Decimal_Number, Connector_Punctuation or Join_Control. (Oniguruma's
// \w, in Split patterns, is another set: see onigWordClass.)
func isRustWord(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || r == 0x200C || r == 0x200D
}

// wordsMatcher matches `\w+|[^\w\s]+` (Rust regex classes), the pattern of
// the Whitespace pre-tokenizer.
type wordsMatcher struct{}

func (wordsMatcher) forEach(s string, fn func(start, end int) error) error {
	start, kind := -1, 0 // kind 1: word run, 2: punctuation run
	for i, r := range s {
		k := 0
		switch {
		case isRustWord(r):
			k = 1
		case !unicode.IsSpace(r):
			k = 2
		}
		if k != kind {
			if kind != 0 {
				if err := fn(start, i); err != nil {
					return err
				}
			}
			start, kind = i, k
		}
	}
	if kind != 0 {
		return fn(start, len(s))
	}
	return nil
}

// prependScheme says when Metaspace puts the replacement in front of a piece.
type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst                // only on the piece that begins the input text
	prependNever
)

var prependSchemes = map[string]prependScheme{"always": prependAlways, "first": prependFirst, "never": prependNever}

// metaspacePreTokenizer is the Metaspace pre-tokenizer: every space becomes
// the replacement character (usually "▁"), the replacement is put in front
// of a piece that does not start with it (as prepend says), and with split
// the piece is cut in front of every replacement (MergedWithNext).
//
// "first" prepends to a piece whose offset in the original text is 0: one
// that starts with the input's first character or with characters inserted
// in front of it (see preTokenizer's lead). A piece whose text a normalizer
// stripped from the start is not "first", as in Hugging Face.
type metaspacePreTokenizer struct {
	replacement rune
	repl        string // the replacement as a string
	prepend     prependScheme
	split       bool
}

func (p metaspacePreTokenizer) each(s string, lead int, emit emitFunc) error {
	if s == "" {
		return nil
	}
	if lead > 0 {
		lead = len(strings.ReplaceAll(s[:lead], " ", p.repl))
	}
	s = strings.ReplaceAll(s, " ", p.repl)
	if (p.prepend == prependAlways || p.prepend == prependFirst && lead > 0) && !strings.HasPrefix(s, p.repl) {
		s = p.repl + s
		if lead > 0 { // the replacement is aligned with the character after it
			lead += len(p.repl)
		}
	}
	if !p.split {
		return emit(s, lead)
	}
	return splitString(s, lead, literalMatcher{p.repl}, false, splitMergedWithNext, emit)
}

// needsLead reports whether p has a Metaspace with prepend_scheme "first",
// the only pre-tokenizer that looks at the lead of its input.
func needsLead(p preTokenizer) bool {
	switch p := p.(type) {
	case metaspacePreTokenizer:
		return p.prepend == prependFirst
	case sequencePreTokenizer:
		for _, q := range p {
			if needsLead(q) {
				return true
			}
		}
	}
	return false
}

// parseMetaspace reads the fields of a Metaspace pre-tokenizer or decoder.
// As Hugging Face: prepend_scheme defaults to "always", split to true, and
// the legacy add_prefix_space false means "never" (and contradicts any other
// scheme written beside it).
func parseMetaspace(raw json.RawMessage, path string) (metaspacePreTokenizer, error) {
	var v struct {
		Replacement    *string `json:"replacement"`
		PrependScheme  *string `json:"prepend_scheme"`
		Split          *bool   `json:"split"`
		AddPrefixSpace *bool   `json:"add_prefix_space"`
	}
	if err := decodeComponent(raw, path, &v); err != nil {
		return metaspacePreTokenizer{}, err
	}
	if v.Replacement == nil {
		return metaspacePreTokenizer{}, fmt.Errorf("%s.replacement is missing", path)
	}
	r, err := oneChar(*v.Replacement, path+".replacement")
	if err != nil {
		return metaspacePreTokenizer{}, err
	}
	p := metaspacePreTokenizer{replacement: r, repl: string(r), prepend: prependAlways, split: v.Split == nil || *v.Split}
	if v.PrependScheme != nil {
		var ok bool
		if p.prepend, ok = prependSchemes[*v.PrependScheme]; !ok {
			return metaspacePreTokenizer{}, fmt.Errorf("%s.prepend_scheme %q is not one of \"always\", \"first\", \"never\"", path, *v.PrependScheme)
		}
	}
	if v.AddPrefixSpace != nil && !*v.AddPrefixSpace {
		if p.prepend != prependNever {
			return metaspacePreTokenizer{}, fmt.Errorf("%s.add_prefix_space false does not match prepend_scheme %q (write \"never\", or leave add_prefix_space out)", path, schemeName(v.PrependScheme))
		}
	}
	return p, nil
}

func schemeName(s *string) string {
	if s == nil {
		return "always"
	}
	return *s
}

// oneChar reads a JSON string that must hold exactly one character (a Rust
// char field).
func oneChar(s, path string) (rune, error) {
	r, size := utf8.DecodeRuneInString(s)
	if s == "" || size != len(s) {
		return 0, fmt.Errorf("%s %q must be exactly one character", path, s)
	}
	return r, nil
}

// sequencePreTokenizer applies pre-tokenizers one after the other.
type sequencePreTokenizer []preTokenizer

func (seq sequencePreTokenizer) each(s string, lead int, emit emitFunc) error {
	if len(seq) == 0 {
		if s == "" {
			return nil
		}
		return emit(s, lead)
	}
	if len(seq) == 1 {
		return seq[0].each(s, lead, emit)
	}
	// One closure per stage for the whole text, not one per piece.
	next := emit
	for k := len(seq) - 1; k >= 1; k-- {
		p, after := seq[k], next
		next = func(piece string, lead int) error { return p.each(piece, lead, after) }
	}
	return seq[0].each(s, lead, next)
}

// gpt2Regex is the compiled GPT-2 pattern, shared by ByteLevel pre-tokenizers.
var gpt2Regex matcher

func init() {
	m, err := compileRegex(gpt2Pattern)
	if err != nil {
		panic("tokenizer: GPT-2 pattern: " + err.Error())
	}
	gpt2Regex = m
}

// parsePreTokenizer builds the pre-tokenizer described by raw (the JSON
// value at path). A JSON null gives a nil pre-tokenizer.
func parsePreTokenizer(raw json.RawMessage, path string) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "Sequence":
		var v struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		if v.PreTokenizers == nil {
			return nil, fmt.Errorf("%s.pretokenizers is missing", path)
		}
		seq := make(sequencePreTokenizer, 0, len(v.PreTokenizers))
		for i, r := range v.PreTokenizers {
			p, err := parsePreTokenizer(r, fmt.Sprintf("%s.pretokenizers[%d]", path, i))
			if err != nil {
				return nil, err
			}
			if p == nil {
				return nil, fmt.Errorf("%s.pretokenizers[%d] is null", path, i)
			}
			seq = append(seq, p)
		}
		return fuseDeepseekSplits(seq), nil
	case "Split":
		var v struct {
			Pattern  json.RawMessage `json:"pattern"`
			Behavior *string         `json:"behavior"`
			Invert   bool            `json:"invert"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		m, err := parsePattern(v.Pattern, path+".pattern")
		if err != nil {
			return nil, err
		}
		if v.Behavior == nil {
			return nil, fmt.Errorf("%s.behavior is missing", path)
		}
		b, ok := splitBehaviors[*v.Behavior]
		if !ok {
			return nil, fmt.Errorf("%s.behavior %q is not supported", path, *v.Behavior)
		}
		return splitPreTokenizer{pattern: m, behavior: b, invert: v.Invert}, nil
	case "ByteLevel":
		var v struct {
			AddPrefixSpace *bool `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		p := byteLevelPreTokenizer{addPrefixSpace: v.AddPrefixSpace == nil || *v.AddPrefixSpace}
		if v.UseRegex == nil || *v.UseRegex {
			p.regex = gpt2Regex
		}
		return p, nil
	case "Digits":
		var v struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		return digitsPreTokenizer{individual: v.IndividualDigits}, nil
	case "Metaspace":
		return parseMetaspace(raw, path)
	case "Whitespace":
		// `\w+|[^\w\s]+`, keeping the matches and removing the rest.
		return splitPreTokenizer{pattern: wordsMatcher{}, invert: true, behavior: splitRemoved}, nil
	case "WhitespaceSplit":
		return splitPreTokenizer{pattern: runeMatcher(unicode.IsSpace), behavior: splitRemoved}, nil
	}
	return nil, unsupported(path, typ)
}
