package tokenizer

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
)

// postProcessor adds the special tokens of a template around the ids of one
// encoded sequence (Hugging Face's post_processor, for a single sequence).
type postProcessor interface {
	// addedTokens is how many ids process adds when addSpecial is true.
	addedTokens() int
	process(ids []int, addSpecial bool) []int
}

// byteLevelProcessor only trims offsets in Hugging Face; ids are unchanged.
type byteLevelProcessor struct{}

func (byteLevelProcessor) addedTokens() int                         { return 0 }
func (byteLevelProcessor) process(ids []int, addSpecial bool) []int { return ids }

// templateProcessor is TemplateProcessing's single-sequence template: a list
// of pieces, each either the sequence ($A) or the ids of a special token.
type templateProcessor struct {
	pieces [][]int // nil: the sequence; otherwise the ids of a special token
}

func (t templateProcessor) addedTokens() int {
	n := 0
	for _, p := range t.pieces {
		n += len(p)
	}
	return n
}

func (t templateProcessor) process(ids []int, addSpecial bool) []int {
	out := make([]int, 0, len(ids)+t.addedTokens())
	for _, p := range t.pieces {
		switch {
		case p == nil:
			out = append(out, ids...)
		case addSpecial:
			out = append(out, p...)
		}
	}
	return out
}

// sequenceProcessor applies processors one after the other.
type sequenceProcessor []postProcessor

func (seq sequenceProcessor) addedTokens() int {
	n := 0
	for _, p := range seq {
		n += p.addedTokens()
	}
	return n
}

func (seq sequenceProcessor) process(ids []int, addSpecial bool) []int {
	for _, p := range seq {
		ids = p.process(ids, addSpecial)
	}
	return ids
}

// parsePostProcessor builds the post-processor described by raw (the JSON
// value at path). A JSON null gives a nil post-processor.
func parsePostProcessor(raw json.RawMessage, path string) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "ByteLevel":
		return byteLevelProcessor{}, nil
	case "Sequence":
		var v struct {
			Processors []json.RawMessage `json:"processors"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		if v.Processors == nil {
			return nil, fmt.Errorf("%s.processors is missing", path)
		}
		seq := make(sequenceProcessor, 0, len(v.Processors))
		for i, r := range v.Processors {
			p, err := parsePostProcessor(r, fmt.Sprintf("%s.processors[%d]", path, i))
			if err != nil {
				return nil, err
			}
			if p == nil {
				return nil, fmt.Errorf("%s.processors[%d] is null", path, i)
			}
			seq = append(seq, p)
		}
		return seq, nil
	case "BertProcessing", "RobertaProcessing":
		// [CLS] $A [SEP] (Bert) and <s> $A </s> (Roberta): same ids.
		var v struct {
			Sep []json.RawMessage `json:"sep"`
			Cls []json.RawMessage `json:"cls"`
		}
		if err := decodeComponent(raw, path, &v); err != nil {
			return nil, err
		}
		cls, err := parseTokenIDPair(v.Cls, path+".cls")
		if err != nil {
			return nil, err
		}
		sep, err := parseTokenIDPair(v.Sep, path+".sep")
		if err != nil {
			return nil, err
		}
		return templateProcessor{pieces: [][]int{{cls}, nil, {sep}}}, nil
	case "TemplateProcessing":
		return parseTemplate(raw, path)
	}
	return nil, unsupported(path, typ)
}

// parseTokenIDPair reads a ["token", id] pair and returns the id.
func parseTokenIDPair(raw []json.RawMessage, path string) (int, error) {
	if len(raw) != 2 {
		return 0, fmt.Errorf("%s must be a [token, id] pair", path)
	}
	var id int64
	if err := json.Unmarshal(raw[1], &id); err != nil || id < 0 || id > math.MaxUint32 {
		return 0, fmt.Errorf("%s: id must be a u32", path)
	}
	return int(id), nil
}

// parseTemplate reads TemplateProcessing. Only the "single" template is
// used; "pair" is checked no further than being there.
func parseTemplate(raw json.RawMessage, path string) (postProcessor, error) {
	type seqPiece struct {
		ID string `json:"id"`
	}
	var v struct {
		Single []struct {
			Sequence     *seqPiece `json:"Sequence"`
			SpecialToken *seqPiece `json:"SpecialToken"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			ID  string  `json:"id"`
			IDs []int64 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := decodeComponent(raw, path, &v); err != nil {
		return nil, err
	}
	if v.Single == nil {
		return nil, fmt.Errorf("%s.single is missing", path)
	}
	var t templateProcessor
	var missing []string
	for i, p := range v.Single {
		switch {
		case p.Sequence != nil && p.SpecialToken == nil:
			if p.Sequence.ID != "A" {
				return nil, fmt.Errorf("%s.single[%d]: sequence %q in a single-sequence template (only \"A\")", path, i, p.Sequence.ID)
			}
			t.pieces = append(t.pieces, nil)
		case p.SpecialToken != nil && p.Sequence == nil:
			st, ok := v.SpecialTokens[p.SpecialToken.ID]
			if !ok {
				missing = append(missing, p.SpecialToken.ID)
				continue
			}
			ids := make([]int, 0, len(st.IDs))
			for _, id := range st.IDs {
				if id < 0 || id > math.MaxUint32 {
					return nil, fmt.Errorf("%s.special_tokens[%q]: id %d is not a u32", path, p.SpecialToken.ID, id)
				}
				ids = append(ids, int(id))
			}
			t.pieces = append(t.pieces, ids)
		default:
			return nil, fmt.Errorf("%s.single[%d] must be {\"Sequence\": ...} or {\"SpecialToken\": ...}", path, i)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%s: missing special_tokens for %s", path, strings.Join(missing, ", "))
	}
	return t, nil
}

// truncation is tokenizer.json's "truncation" for a single sequence: the
// model's ids are cut to max_length (less the post-processor's special
// tokens when they are added), keeping the start (direction Right) or the
// end (Left). Overflowing pieces are dropped.
type truncation struct {
	maxLength int
	keepEnd   bool // direction "Left"
}

func (tr *truncation) apply(ids []int, limit int) []int {
	if len(ids) <= limit {
		return ids
	}
	if tr.keepEnd {
		return ids[len(ids)-limit:]
	}
	return ids[:limit]
}

// padding is tokenizer.json's "padding" for a single sequence.
type padding struct {
	batchLongest bool // BatchLongest: a batch of one is its own longest
	fixed        int  // Fixed(n)
	multiple     int  // pad_to_multiple_of; 0 for none
	left         bool
	padID        int
}

// maxPadLength bounds the padded length accepted from a file (a million
// tokens, beyond any model's context), so that a corrupt file cannot make
// Encode allocate without bound.
const maxPadLength = 1 << 20

func (p *padding) apply(ids []int) []int {
	target := p.fixed
	if p.batchLongest {
		target = len(ids)
	}
	if p.multiple > 0 && target%p.multiple != 0 {
		target += p.multiple - target%p.multiple
	}
	if len(ids) >= target {
		return ids
	}
	pad := make([]int, target-len(ids))
	for i := range pad {
		pad[i] = p.padID
	}
	if p.left {
		return append(pad, ids...)
	}
	return append(ids, pad...)
}

func parseTruncation(raw json.RawMessage, path string) (*truncation, error) {
	if isNull(raw) {
		return nil, nil
	}
	var v struct {
		MaxLength *int64 `json:"max_length"`
		Strategy  string `json:"strategy"`
		Direction string `json:"direction"`
	}
	if err := decodeComponent(raw, path, &v); err != nil {
		return nil, err
	}
	if v.MaxLength == nil || *v.MaxLength < 0 {
		return nil, fmt.Errorf("%s.max_length must be a non-negative integer", path)
	}
	switch v.Strategy {
	case "", "LongestFirst", "OnlyFirst":
	default:
		return nil, fmt.Errorf("%s.strategy %q is not supported for single sequences", path, v.Strategy)
	}
	tr := &truncation{maxLength: int(min(*v.MaxLength, math.MaxInt32))}
	switch v.Direction {
	case "", "Right":
	case "Left":
		tr.keepEnd = true
	default:
		return nil, fmt.Errorf("%s.direction %q is not supported", path, v.Direction)
	}
	return tr, nil
}

func parsePadding(raw json.RawMessage, path string) (*padding, error) {
	if isNull(raw) {
		return nil, nil
	}
	var v struct {
		Strategy        json.RawMessage `json:"strategy"`
		Direction       string          `json:"direction"`
		PadToMultipleOf *int64          `json:"pad_to_multiple_of"`
		PadID           int64           `json:"pad_id"`
	}
	if err := decodeComponent(raw, path, &v); err != nil {
		return nil, err
	}
	p := &padding{}
	var s string
	var fixed struct {
		Fixed *int64 `json:"Fixed"`
	}
	switch {
	case json.Unmarshal(v.Strategy, &s) == nil && s == "BatchLongest":
		p.batchLongest = true
	case json.Unmarshal(v.Strategy, &fixed) == nil && fixed.Fixed != nil:
		if *fixed.Fixed < 0 || *fixed.Fixed > maxPadLength {
			return nil, fmt.Errorf("%s.strategy.Fixed %d is out of range", path, *fixed.Fixed)
		}
		p.fixed = int(*fixed.Fixed)
	default:
		return nil, fmt.Errorf("%s.strategy must be \"BatchLongest\" or {\"Fixed\": n}", path)
	}
	if v.PadToMultipleOf != nil {
		if *v.PadToMultipleOf < 0 || *v.PadToMultipleOf > maxPadLength {
			return nil, fmt.Errorf("%s.pad_to_multiple_of %d is out of range", path, *v.PadToMultipleOf)
		}
		p.multiple = int(*v.PadToMultipleOf)
	}
	switch v.Direction {
	case "", "Right":
	case "Left":
		p.left = true
	default:
		return nil, fmt.Errorf("%s.direction %q is not supported", path, v.Direction)
	}
	if v.PadID < 0 || v.PadID > math.MaxUint32 {
		return nil, fmt.Errorf("%s.pad_id %d is not a u32", path, v.PadID)
	}
	p.padID = int(v.PadID)
	return p, nil
}
