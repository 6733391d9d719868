// Package tokenizer loads Hugging Face tokenizer.json files for BPE models,
// byte-level (GPT-2, Qwen2/Qwen3, Llama 3, gpt-oss, DeepSeek-V3 and the
// like) and SentencePiece-style with byte fallback (Mistral, Llama 2, Gemma),
// and encodes and decodes text with them, giving the same ids and text as
// Hugging Face's tokenizers library (checked against tokenizers 0.22.2).
//
// The pipeline is Hugging Face's: added tokens are cut out of the raw text
// first; each remaining segment is normalized, pre-tokenized into words, and
// each word is split into tokens by the BPE model; then the post-processor
// adds its special tokens, and truncation and padding are applied if the
// file asks for them.
//
// Supported components: normalizers NFC, NFD, NFKC, NFKD, Lowercase, Strip,
// StripAccents, Prepend, Replace and Sequence; pre-tokenizers Split, ByteLevel,
// Metaspace (prepend_scheme always, first or never; split or not), Digits,
// Whitespace, WhitespaceSplit and Sequence; the BPE model (unk_token,
// fuse_unk, byte_fallback, ignore_merges, continuing_subword_prefix,
// end_of_word_suffix); added tokens with their single_word, lstrip, rstrip,
// normalized and special flags; the post-processors ByteLevel,
// TemplateProcessing, BertProcessing, RobertaProcessing and Sequence; the
// decoders ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip and
// Sequence. Any other component, or a bad field, makes Load fail with an
// error that names the file and the field's JSON path.
//
// Regular expressions: the pre-tokenization patterns of GPT-2, Llama 3,
// Qwen2/Qwen3, gpt-oss (o200k) and DeepSeek-V3 run on hand-written
// matchers; any other Split or Replace
// pattern runs on github.com/dlclark/regexp2, a backtracking engine with
// lookaround like the Oniguruma engine Hugging Face uses, after Oniguruma's
// \w, \W, \b, \B and \x{...} are rewritten to mean what they mean there, and
// with ^ and $ matching at line ends as in Oniguruma's Ruby syntax.
//
// Differences from Hugging Face:
//   - Encode refuses text that is not valid UTF-8 (a Rust &str cannot hold
//     it), and Decode fails on an id that is in neither vocabulary (Hugging
//     Face skips it silently).
//   - In patterns that run on regexp2, case-insensitive matching folds only
//     simple case pairs (Oniguruma also folds 'ſ' to 's' and 'ß' to "ss");
//     Oniguruma-only syntax (possessive quantifiers, POSIX brackets) is
//     refused at load time; a match that backtracks for more than 5 s fails
//     (Oniguruma has a step limit instead).
//   - Normalization, the regexp2 patterns and the other character classes
//     use Go's Unicode 15.0 tables (with Go 1.26); the Oniguruma of
//     tokenizers 0.22.2 knows Unicode 16.0, so characters new in 15.1 or
//     16.0 are classified differently there. The hand-written matchers know
//     them (unicode16.go, generated from golang.org/x/text's tables).
//   - Load is stricter in places where Hugging Face fails later or panics (a
//     TemplateProcessing without one of its special tokens, a
//     continuing_subword_prefix that cannot be cut from a merge) or is
//     random (BPE dropout other than 0 is refused), and more lenient in
//     others (missing flags of added tokens and ByteLevel options take the
//     usual defaults). The Strip decoder cuts what it can where Hugging
//     Face panics (a stop count that reaches the start of a token, an empty
//     token included).
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"unicode/utf8"
)

// Tokenizer is a loaded tokenizer.json.
type Tokenizer struct {
	added      *addedVocab
	normalizer normalizer    // nil: none
	preTok     preTokenizer  // nil: none
	model      *bpeModel     // never nil
	post       postProcessor // nil: none
	decoder    decoder       // nil: tokens joined with spaces
	needLead   bool          // the pre-tokenizer has a Metaspace with prepend_scheme "first"
	truncation *truncation   // nil: none
	padding    *padding      // nil: none
	vocabSize  int
}

// maxJSONSize bounds a tokenizer.json, plain or gunzipped (released ones
// are tens of MiB at most), so that a gzip bomb cannot make Load allocate
// without bound. A variable so that tests can lower it.
var maxJSONSize int64 = 256 << 20

// Load reads a tokenizer.json file, or a gzip of one (detected by its magic
// bytes, whatever the file name), of at most 256 MiB (uncompressed). Its
// errors name the file and the JSON path of the field at fault.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if st.Size() > maxJSONSize {
		return nil, fmt.Errorf("tokenizer: %s: %d bytes, more than the %d a tokenizer.json may have", path, st.Size(), maxJSONSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		// The trailer's size (mod 2^32) refuses an honest bomb before
		// inflating; the limited read stops a lying one.
		if n := len(data); n >= 18 && int64(binary.LittleEndian.Uint32(data[n-4:])) > maxJSONSize {
			return nil, fmt.Errorf("tokenizer: %s: the gzip trailer declares %d bytes uncompressed, more than the %d a tokenizer.json may have",
				path, binary.LittleEndian.Uint32(data[n-4:]), maxJSONSize)
		}
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		data, err = io.ReadAll(io.LimitReader(zr, maxJSONSize+1))
		if err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
		}
		if int64(len(data)) > maxJSONSize {
			return nil, fmt.Errorf("tokenizer: %s: inflates to more than the %d bytes a tokenizer.json may have", path, maxJSONSize)
		}
	}
	t, err := fromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return t, nil
}

// FromJSON parses the contents of a tokenizer.json file.
func FromJSON(data []byte) (*Tokenizer, error) {
	t, err := fromJSON(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: tokenizer.json: %w", err)
	}
	return t, nil
}

func fromJSON(data []byte) (*Tokenizer, error) {
	var raw struct {
		Version       *string         `json:"version"`
		Truncation    json.RawMessage `json:"truncation"`
		Padding       json.RawMessage `json:"padding"`
		AddedTokens   json.RawMessage `json:"added_tokens"`
		Normalizer    json.RawMessage `json:"normalizer"`
		PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
		PostProcessor json.RawMessage `json:"post_processor"`
		Decoder       json.RawMessage `json:"decoder"`
		Model         json.RawMessage `json:"model"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, jsonErr(err)
	}
	if raw.Version != nil && *raw.Version != "1.0" {
		return nil, fmt.Errorf("version %q is not supported (only \"1.0\")", *raw.Version)
	}
	t := &Tokenizer{}
	var err error
	if t.model, err = parseBPE(raw.Model, "model"); err != nil {
		return nil, err
	}
	if t.normalizer, err = parseNormalizer(raw.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if t.preTok, err = parsePreTokenizer(raw.PreTokenizer, "pre_tokenizer"); err != nil {
		return nil, err
	}
	t.needLead = needsLead(t.preTok)
	if t.preTok, t.model.byteLevelWords = deferByteLevel(t.preTok); t.model.byteLevelWords {
		t.model.metaSplit = false // words are not in the vocabulary's alphabet
	}
	if t.post, err = parsePostProcessor(raw.PostProcessor, "post_processor"); err != nil {
		return nil, err
	}
	if t.decoder, err = parseDecoder(raw.Decoder, "decoder"); err != nil {
		return nil, err
	}
	if t.truncation, err = parseTruncation(raw.Truncation, "truncation"); err != nil {
		return nil, err
	}
	if t.padding, err = parsePadding(raw.Padding, "padding"); err != nil {
		return nil, err
	}
	tokens, err := parseAddedTokens(raw.AddedTokens, "added_tokens")
	if err != nil {
		return nil, err
	}
	if t.added, err = newAddedVocab(tokens, t.model, t.normalizer); err != nil {
		return nil, fmt.Errorf("added_tokens: %w", err)
	}
	for id := range t.model.vocabR {
		t.vocabSize = max(t.vocabSize, int(id)+1)
	}
	for id := range t.added.byID {
		t.vocabSize = max(t.vocabSize, id+1)
	}
	return t, nil
}

// parseAddedTokens reads the "added_tokens" list. Missing flags take the
// defaults of Hugging Face's AddedToken::from(content, special): all false,
// except normalized, which is !special.
func parseAddedTokens(raw json.RawMessage, path string) ([]addedToken, error) {
	if isNull(raw) {
		return nil, nil
	}
	var list []struct {
		Content    *string `json:"content"`
		SingleWord bool    `json:"single_word"`
		Lstrip     bool    `json:"lstrip"`
		Rstrip     bool    `json:"rstrip"`
		Normalized *bool   `json:"normalized"`
		Special    bool    `json:"special"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%s: %v", path, jsonErr(err))
	}
	out := make([]addedToken, len(list))
	for i, a := range list {
		if a.Content == nil {
			return nil, fmt.Errorf("%s[%d].content is missing", path, i)
		}
		out[i] = addedToken{
			content:    *a.Content,
			singleWord: a.SingleWord,
			lstrip:     a.Lstrip,
			rstrip:     a.Rstrip,
			normalized: !a.Special,
			special:    a.Special,
		}
		if a.Normalized != nil {
			out[i].normalized = *a.Normalized
		}
	}
	return out, nil
}

// Encode tokenizes text. addSpecial applies the post-processor's template
// (Hugging Face's add_special_tokens). Added tokens written in the text, the
// special ones included, are matched whatever addSpecial is, as in Hugging
// Face.
func (t *Tokenizer) Encode(text string, addSpecial bool) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, errors.New("tokenizer: Encode: text is not valid UTF-8")
	}
	ids, err := t.encodeSequence(text)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: Encode: %w", err)
	}
	if t.truncation != nil {
		limit := t.truncation.maxLength
		if addSpecial && t.post != nil {
			if n := t.post.addedTokens(); n > 0 {
				// Hugging Face subtracts in usize arithmetic; a wrap-around
				// there means no truncation.
				limit -= n
				if limit < 0 {
					limit = math.MaxInt
				}
			}
		}
		ids = t.truncation.apply(ids, limit)
	}
	if t.post != nil {
		ids = t.post.process(ids, addSpecial)
	}
	if t.padding != nil {
		ids = t.padding.apply(ids)
	}
	return ids, nil
}

// encodeSequence runs the pipeline up to the model on one text.
func (t *Tokenizer) encodeSequence(text string) ([]int, error) {
	// 1. Added tokens with normalized=false, on the raw text. The lead (see
	// preTokenizer) is only followed when a pre-tokenizer needs it.
	lead := 0
	if t.needLead {
		_, lead = utf8.DecodeRuneInString(text)
	}
	segs := t.added.split(text, lead, t.added.raw, nil)
	// 2. Normalize what is left, then cut out the normalized added tokens.
	if t.normalizer != nil || !t.added.afterNorm.empty() {
		var next []segment
		for _, s := range segs {
			if s.id >= 0 {
				next = append(next, s)
				continue
			}
			txt, lead := s.text, s.lead
			if t.normalizer != nil {
				var err error
				if txt, lead, err = normalizeLead(t.normalizer, txt, lead); err != nil {
					return nil, err
				}
			}
			next = t.added.split(txt, lead, t.added.afterNorm, next)
		}
		segs = next
	}
	// 3. Pre-tokenize and run the model on each word.
	ids := make([]int, 0, len(text)/3+1)
	model := func(word string, _ int) error {
		var err error
		ids, err = t.model.tokenize(word, ids)
		return err
	}
	for _, s := range segs {
		switch {
		case s.id >= 0:
			ids = append(ids, s.id)
		case s.text == "":
		case t.preTok == nil:
			if err := model(s.text, 0); err != nil {
				return nil, err
			}
		default:
			if err := t.preTok.each(s.text, s.lead, model); err != nil {
				return nil, err
			}
		}
	}
	return ids, nil
}

// Decode turns ids back into text. skipSpecial leaves out the special added
// tokens. An id in neither the model's vocabulary nor the added tokens is an
// error (Hugging Face skips it).
func (t *Tokenizer) Decode(ids []int, skipSpecial bool) (string, error) {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.IDToToken(id)
		if !ok {
			return "", fmt.Errorf("tokenizer: Decode: id %d is not in the vocabulary", id)
		}
		if skipSpecial && t.added.special[tok] {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.decoder == nil {
		return strings.Join(tokens, " "), nil
	}
	out, err := t.decoder.decodeChain(tokens)
	if err != nil {
		return "", fmt.Errorf("tokenizer: Decode: %w", err)
	}
	return strings.Join(out, ""), nil
}

// VocabSize returns the largest id of the model's vocabulary and of the
// added tokens, plus one.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenToID returns the id of a token string (added tokens first, then the
// model's vocabulary, as Hugging Face).
func (t *Tokenizer) TokenToID(tok string) (int, bool) {
	if id, ok := t.added.byContent[tok]; ok {
		return id, true
	}
	if id, ok := t.model.vocab[tok]; ok {
		return int(id), true
	}
	return 0, false
}

// IDToToken returns the token string of an id (added tokens first, then the
// model's vocabulary). Model tokens are in the vocabulary's alphabet ("Ġ"
// for a space in byte-level files, "▁" in SentencePiece-style ones).
func (t *Tokenizer) IDToToken(id int) (string, bool) {
	if tok, ok := t.added.byID[id]; ok {
		return tok.content, true
	}
	if id < 0 || int64(id) > math.MaxUint32 {
		return "", false
	}
	tok, ok := t.model.vocabR[uint32(id)]
	return tok, ok
}

// Tokens returns the token string of every id ("" for an unknown id).
func (t *Tokenizer) Tokens(ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i], _ = t.IDToToken(id)
	}
	return out
}

// SpecialTokens returns the contents of the special added tokens, sorted.
func (t *Tokenizer) SpecialTokens() []string {
	out := make([]string, 0, len(t.added.special))
	for s := range t.added.special {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// IsSpecial reports whether id is a special added token (one that Decode
// leaves out when skipSpecial is true).
func (t *Tokenizer) IsSpecial(id int) bool {
	tok, ok := t.IDToToken(id)
	return ok && t.added.special[tok]
}

// --- JSON helpers shared by the component parsers ---

// isNull reports whether raw is absent or the JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || bytes.Equal(raw, []byte("null"))
}

// componentType reads the "type" field of a component.
func componentType(raw json.RawMessage, path string) (string, error) {
	var v struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("%s: %v", path, jsonErr(err))
	}
	if v.Type == nil {
		return "", fmt.Errorf("%s.type is missing", path)
	}
	return *v.Type, nil
}

// decodeComponent unmarshals a component's fields into v.
func decodeComponent(raw json.RawMessage, path string, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s: %v", path, jsonErr(err))
	}
	return nil
}

// unsupported is the error for a component type this package does not have.
func unsupported(path, typ string) error {
	return fmt.Errorf("%s.type %q is not supported", path, typ)
}

// jsonErr words encoding/json's errors a little more plainly.
func jsonErr(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("malformed JSON at byte %d: %v", se.Offset, err)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			field = "value"
		}
		return fmt.Errorf("%s: JSON %s where %s was expected", field, te.Value, te.Type)
	}
	return err
}
