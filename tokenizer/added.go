package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's "added_tokens".
type addedToken struct {
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedVocab is Hugging Face's AddedVocabulary: tokens that are cut out of
// the text before the model sees it.
type addedVocab struct {
	byContent map[string]int     // content -> id
	byID      map[int]addedToken // id -> token
	special   map[string]bool    // contents of special tokens

	// Tokens in the order Hugging Face's tries are built: special tokens
	// first, then the others, each in the order they were added.
	specialList, plainList []addedToken

	raw       *byteTrie // tokens with normalized=false, matched on the raw text
	afterNorm *byteTrie // tokens with normalized=true, matched on normalized text
}

// newAddedVocab adds the tokens one by one as Hugging Face does when it loads
// tokenizer.json. The ids written in the file are not used: like Hugging
// Face, a token already in the model's vocabulary (or added before) keeps
// that id, and a new one gets the next id after the model's vocabulary size
// (the number of entries) or after the largest added id.
func newAddedVocab(tokens []addedToken, model *bpeModel, norm normalizer) (*addedVocab, error) {
	v := &addedVocab{
		byContent: map[string]int{},
		byID:      map[int]addedToken{},
		special:   map[string]bool{},
	}
	vocabSize := len(model.vocab)
	maxAdded := -1
	for _, t := range tokens {
		if t.special && t.content != "" && !v.special[t.content] {
			v.specialList = append(v.specialList, t)
			v.special[t.content] = true
		}
		if t.content == "" || v.hasIdentical(t) {
			continue
		}
		id, ok := v.byContent[t.content]
		if !ok {
			if mid, ok2 := model.vocab[t.content]; ok2 {
				id, ok = int(mid), true
			}
		}
		if !ok {
			switch {
			case maxAdded < 0:
				id = vocabSize
			case maxAdded >= vocabSize || vocabSize == 0:
				id = maxAdded + 1
			default:
				id = vocabSize
			}
		}
		v.byContent[t.content] = id
		v.byID[id] = t
		if id > maxAdded {
			maxAdded = id
		}
		if !v.special[t.content] {
			v.plainList = append(v.plainList, t)
		}
	}

	v.raw, v.afterNorm = newByteTrie(), newByteTrie()
	for _, list := range [][]addedToken{v.specialList, v.plainList} {
		for _, t := range list {
			id := v.byContent[t.content]
			if !t.normalized {
				v.raw.insert(t.content, id)
				continue
			}
			content := t.content
			if norm != nil {
				var err error
				if content, err = norm.normalize(content); err != nil {
					return nil, fmt.Errorf("added token %q: %v", t.content, err)
				}
			}
			v.afterNorm.insert(content, id)
		}
	}
	return v, nil
}

// hasIdentical reports whether a token equal in every field was added before.
func (v *addedVocab) hasIdentical(t addedToken) bool {
	for _, old := range v.byID {
		if old == t {
			return true
		}
	}
	return false
}

// segment is a piece of the input: text still to tokenize (id < 0), or an
// added token's id. lead is the text's lead (see preTokenizer).
type segment struct {
	text string
	id   int
	lead int
}

// split cuts s at the matches of trie and appends the pieces to out, as
// Hugging Face's AddedVocabulary::find_matches: leftmost-longest matches,
// dropped when single_word asks for word boundaries that are not there,
// widened over neighbouring whitespace for lstrip / rstrip. lead is the lead
// of s (see preTokenizer).
func (v *addedVocab) split(s string, lead int, trie *byteTrie, out []segment) []segment {
	if trie.empty() {
		return append(out, segment{s, -1, lead})
	}
	prevEnd := 0 // end of the previous added token
	for pos := 0; pos < len(s); {
		start, end, id, ok := trie.leftmostLongest(s, pos)
		if !ok {
			break
		}
		pos = end
		t := v.byID[id]
		if t.singleWord {
			before, _ := utf8.DecodeLastRuneInString(s[:start])
			after, _ := utf8.DecodeRuneInString(s[end:])
			if start > 0 && isRustWord(before) || end < len(s) && isRustWord(after) {
				continue
			}
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), prevEnd)
		}
		if t.rstrip {
			end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
		}
		if prevEnd < start {
			out = append(out, segment{s[prevEnd:start], -1, subLead(lead, prevEnd, start)})
		}
		out = append(out, segment{"", id, 0})
		prevEnd = max(prevEnd, end)
	}
	if prevEnd < len(s) {
		out = append(out, segment{s[prevEnd:], -1, subLead(lead, prevEnd, len(s))})
	}
	return out
}

// byteTrie is a trie over the bytes of the added tokens' contents.
type byteTrie struct {
	next  map[uint64]int32 // node<<8 | byte -> child node
	ids   []int            // per node: id of the token ending there, or -1
	first [256]bool        // bytes that start some token
}

func newByteTrie() *byteTrie {
	return &byteTrie{next: map[uint64]int32{}, ids: []int{-1}}
}

func (t *byteTrie) empty() bool { return len(t.ids) == 1 }

// insert adds s with the given id; the first id inserted for s is kept.
func (t *byteTrie) insert(s string, id int) {
	if s == "" {
		return
	}
	t.first[s[0]] = true
	node := int32(0)
	for i := 0; i < len(s); i++ {
		k := uint64(node)<<8 | uint64(s[i])
		child, ok := t.next[k]
		if !ok {
			child = int32(len(t.ids))
			t.ids = append(t.ids, -1)
			t.next[k] = child
		}
		node = child
	}
	if t.ids[node] < 0 {
		t.ids[node] = id
	}
}

// leftmostLongest finds, from pos on, the match that starts first, and the
// longest of those that start there.
func (t *byteTrie) leftmostLongest(s string, pos int) (start, end, id int, ok bool) {
	for start = pos; start < len(s); start++ {
		if !t.first[s[start]] {
			continue
		}
		node := int32(0)
		for i := start; i < len(s); i++ {
			child, found := t.next[uint64(node)<<8|uint64(s[i])]
			if !found {
				break
			}
			node = child
			if t.ids[node] >= 0 {
				end, id, ok = i+1, t.ids[node], true
			}
		}
		if ok {
			return start, end, id, true
		}
	}
	return 0, 0, 0, false
}
