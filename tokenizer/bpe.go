package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpeModel is Hugging Face's BPE model.
type bpeModel struct {
	vocab  map[string]uint32
	vocabR map[uint32]string
	// merges maps a pair of ids (left<<32 | right) to its merge.
	merges map[uint64]bpeMerge

	unkToken     string
	hasUnk       bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool

	// metaSplit: a word may be cut in front of every "▁" that follows a
	// character other than "▁" and not in metaGlue, without changing its
	// tokens (see canMetaSplit). SentencePiece-style files have no
	// pre-tokenizer, so a whole segment of text comes as one word; cut, its
	// pieces are short and go through the cache.
	metaSplit bool
	metaGlue  map[rune]bool

	// byteLevelWords: words come unmapped from a ByteLevel pre-tokenizer
	// and are mapped to the byte-level alphabet here, on a cache miss.
	byteLevelWords bool

	cacheMu sync.Mutex
	cache   map[string][]uint32
}

// bpeMerge is one merge rule: its rank (position in the merges list, lower
// merges first) and the id of the merged token.
type bpeMerge struct {
	rank  uint32
	newID uint32
}

const (
	// bpeCacheCapacity bounds the word cache; it is emptied when full.
	bpeCacheCapacity = 20000
	// bpeCacheMaxWord is the longest word (in bytes) that is cached.
	bpeCacheMaxWord = 256
)

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// parseBPE builds the BPE model described by raw (the JSON value at path).
func parseBPE(raw json.RawMessage, path string) (*bpeModel, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("%s is missing", path)
	}
	var v struct {
		Type                    *string         `json:"type"`
		Dropout                 *float64        `json:"dropout"`
		UnkToken                *string         `json:"unk_token"`
		ContinuingSubwordPrefix *string         `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string         `json:"end_of_word_suffix"`
		FuseUnk                 bool            `json:"fuse_unk"`
		ByteFallback            bool            `json:"byte_fallback"`
		IgnoreMerges            bool            `json:"ignore_merges"`
		Vocab                   json.RawMessage `json:"vocab"`
		Merges                  json.RawMessage `json:"merges"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s: %v", path, jsonErr(err))
	}
	if v.Type != nil && *v.Type != "BPE" {
		return nil, unsupported(path, *v.Type)
	}
	if v.Type == nil && isNull(v.Merges) {
		return nil, fmt.Errorf("%s.type is missing (only BPE models are supported)", path)
	}
	if v.Dropout != nil && *v.Dropout != 0 {
		if *v.Dropout < 0 || *v.Dropout > 1 {
			return nil, fmt.Errorf("%s.dropout %v is not in [0, 1]", path, *v.Dropout)
		}
		return nil, fmt.Errorf("%s.dropout %v is not supported (BPE dropout is random; only null or 0)", path, *v.Dropout)
	}
	if isNull(v.Vocab) || isNull(v.Merges) {
		return nil, fmt.Errorf("%s: missing vocab/merges", path)
	}
	m := &bpeModel{
		fuseUnk:      v.FuseUnk,
		byteFallback: v.ByteFallback,
		ignoreMerges: v.IgnoreMerges,
		cache:        make(map[string][]uint32),
	}
	if v.UnkToken != nil {
		m.unkToken, m.hasUnk = *v.UnkToken, true
	}
	if v.ContinuingSubwordPrefix != nil {
		m.prefix = *v.ContinuingSubwordPrefix
	}
	if v.EndOfWordSuffix != nil {
		m.suffix = *v.EndOfWordSuffix
	}

	var vocab map[string]int64
	if err := json.Unmarshal(v.Vocab, &vocab); err != nil {
		return nil, fmt.Errorf("%s.vocab: %v", path, jsonErr(err))
	}
	m.vocab = make(map[string]uint32, len(vocab))
	m.vocabR = make(map[uint32]string, len(vocab))
	for tok, id := range vocab {
		if id < 0 || id > math.MaxUint32 {
			return nil, fmt.Errorf("%s.vocab: id %d of %q is not a u32", path, id, tok)
		}
		m.vocab[tok] = uint32(id)
		// Two tokens with one id: keep the smaller string, to be deterministic.
		if old, ok := m.vocabR[uint32(id)]; !ok || tok < old {
			m.vocabR[uint32(id)] = tok
		}
	}

	pairs, err := parseMerges(v.Merges, path+".merges")
	if err != nil {
		return nil, err
	}
	m.merges = make(map[uint64]bpeMerge, len(pairs))
	for i, p := range pairs {
		a, ok := m.vocab[p[0]]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: token %q is not in the vocabulary", path, i, p[0])
		}
		b, ok := m.vocab[p[1]]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: token %q is not in the vocabulary", path, i, p[1])
		}
		// As Hugging Face: the merged token is a + b without the
		// continuing_subword_prefix's length of bytes at the start of b.
		if len(p[1]) < len(m.prefix) || !utf8.ValidString(p[1][len(m.prefix):]) {
			return nil, fmt.Errorf("%s.merges[%d]: cannot cut continuing_subword_prefix %q (%d bytes) off token %q", path, i, m.prefix, len(m.prefix), p[1])
		}
		merged := p[0] + p[1][len(m.prefix):]
		id, ok := m.vocab[merged]
		if !ok {
			return nil, fmt.Errorf("%s.merges[%d]: merged token %q is not in the vocabulary", path, i, merged)
		}
		// A pair listed twice keeps its last rank, as Hugging Face's map.
		m.merges[pairKey(a, b)] = bpeMerge{rank: uint32(i), newID: id}
	}
	m.metaSplit, m.metaGlue = canMetaSplit(m, pairs)
	return m, nil
}

// metaspace is SentencePiece's replacement for a space.
const metaspace = "\u2581"

// canMetaSplit decides whether words may be cut in front of a "▁", and
// after which characters they may not. Merging is left to right by rank
// over adjacent symbols, so a word cut where no merge can ever join the
// symbols on both sides gives the concatenation of its pieces' tokens. At a
// cut before "▁" that follows the character c, the left symbol ends with c
// and the right one starts with "▁": a merge (a, b) joins them only if b
// starts with "▁" and a ends with c. Those c (glue) are collected; "▁"
// itself is always glue (runs of "▁" merge). The cut is not made at all
// when a word's position matters (continuing_subword_prefix,
// end_of_word_suffix), when the whole word is looked up first
// (ignore_merges), or when "▁" is not in the vocabulary (it would be an
// unknown character that fuse_unk could join to the one before).
func canMetaSplit(m *bpeModel, pairs [][2]string) (bool, map[rune]bool) {
	if m.prefix != "" || m.suffix != "" || m.ignoreMerges {
		return false, nil
	}
	if _, ok := m.vocab[metaspace]; !ok {
		return false, nil
	}
	glue := map[rune]bool{}
	for _, p := range pairs {
		if strings.HasPrefix(p[1], metaspace) && strings.Trim(p[0], metaspace) != "" {
			c, _ := utf8.DecodeLastRuneInString(p[0])
			glue[c] = true
		}
	}
	return true, glue
}

// parseMerges reads merges written as "a b" strings (lines starting with
// "#version" are skipped, as in merges.txt) or as ["a", "b"] pairs.
func parseMerges(raw json.RawMessage, path string) ([][2]string, error) {
	trimmed := bytes.TrimLeft(raw, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '[' {
		return nil, fmt.Errorf("%s must be a list", path)
	}
	rest := bytes.TrimLeft(trimmed[1:], " \t\r\n")
	if len(rest) > 0 && rest[0] == '[' {
		var pairs [][]string
		if err := json.Unmarshal(raw, &pairs); err != nil {
			return nil, fmt.Errorf("%s: %v", path, jsonErr(err))
		}
		out := make([][2]string, len(pairs))
		for i, p := range pairs {
			if len(p) != 2 {
				return nil, fmt.Errorf("%s[%d] must have exactly 2 tokens, has %d", path, i, len(p))
			}
			out[i] = [2]string{p[0], p[1]}
		}
		return out, nil
	}
	var lines []string
	if err := json.Unmarshal(raw, &lines); err != nil {
		return nil, fmt.Errorf("%s: %v", path, jsonErr(err))
	}
	out := make([][2]string, 0, len(lines))
	for i, l := range lines {
		if strings.HasPrefix(l, "#version") {
			continue
		}
		a, b, ok := strings.Cut(l, " ")
		if !ok || strings.Contains(b, " ") {
			return nil, fmt.Errorf("%s[%d] %q must be two tokens separated by one space", path, i, l)
		}
		out = append(out, [2]string{a, b})
	}
	return out, nil
}

// tokenize appends the ids of one pre-tokenized word to dst.
func (m *bpeModel) tokenize(word string, dst []int) ([]int, error) {
	if !m.metaSplit {
		return m.tokenizeWord(word, dst)
	}
	var err error
	start := 0
	for i := 0; i < len(word); {
		j := strings.Index(word[i:], metaspace)
		if j < 0 {
			break
		}
		j += i
		if j > start {
			if c, _ := utf8.DecodeLastRuneInString(word[:j]); c != '\u2581' && !m.metaGlue[c] {
				if dst, err = m.tokenizeWord(word[start:j], dst); err != nil {
					return nil, err
				}
				start = j
			}
		}
		i = j + len(metaspace)
	}
	return m.tokenizeWord(word[start:], dst)
}

// tokenizeWord appends the ids of one word to dst.
func (m *bpeModel) tokenizeWord(word string, dst []int) ([]int, error) {
	if word == "" {
		return dst, nil
	}
	// The cache (small, hot) is asked before the vocabulary (large) that
	// ignore_merges looks the word up in; it holds the result either way.
	cacheable := len(word) <= bpeCacheMaxWord
	if cacheable {
		m.cacheMu.Lock()
		ids, ok := m.cache[word]
		m.cacheMu.Unlock()
		if ok {
			for _, id := range ids {
				dst = append(dst, int(id))
			}
			return dst, nil
		}
	}
	mapped := word
	if m.byteLevelWords {
		mapped = byteLevelEncode(word)
	}
	var ids []uint32
	if id, ok := m.vocab[mapped]; ok && m.ignoreMerges {
		ids = []uint32{id}
	} else {
		var err error
		if ids, err = m.mergeWord(mapped); err != nil {
			return nil, err
		}
	}
	if cacheable {
		key := strings.Clone(word) // word may point into a whole text
		m.cacheMu.Lock()
		if len(m.cache) >= bpeCacheCapacity {
			clear(m.cache)
		}
		m.cache[key] = ids
		m.cacheMu.Unlock()
	}
	for _, id := range ids {
		dst = append(dst, int(id))
	}
	return dst, nil
}

// bpeSymbol is one symbol of a word being merged: a doubly linked list
// threaded through a slice, as in Hugging Face's Word.
type bpeSymbol struct {
	id         uint32
	prev, next int32
	size       int32 // bytes of the word it covers; 0 once merged away
}

// bpeCandidate is a possible merge of the symbol at pos with its right
// neighbour.
type bpeCandidate struct {
	rank  uint32
	pos   int32
	newID uint32
}

func (a bpeCandidate) less(b bpeCandidate) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// mergeWord splits word into characters and applies the merges: always the
// pair of lowest rank, the leftmost one on ties, exactly as Hugging Face's
// Word::merge_all (without dropout).
func (m *bpeModel) mergeWord(word string) ([]uint32, error) {
	syms := make([]bpeSymbol, 0, len(word))
	add := func(id uint32, size int) {
		n := int32(len(syms))
		if n > 0 {
			syms[n-1].next = n
		}
		syms = append(syms, bpeSymbol{id: id, prev: n - 1, next: -1, size: int32(size)})
	}
	var (
		unkID   uint32
		unkSize int
		haveUnk bool
	)
	for i := 0; i < len(word); {
		_, size := utf8.DecodeRuneInString(word[i:])
		s := word[i : i+size]
		isFirst, isLast := i == 0, i+size == len(word)
		i += size
		if !isFirst && m.prefix != "" {
			s = m.prefix + s
		}
		if isLast && m.suffix != "" {
			s = s + m.suffix
		}
		if id, ok := m.vocab[s]; ok {
			if haveUnk {
				add(unkID, unkSize)
				haveUnk = false
			}
			add(id, size)
			continue
		}
		if m.byteFallback {
			ids := make([]uint32, 0, len(s))
			for j := 0; j < len(s); j++ {
				id, ok := m.vocab[fmt.Sprintf("<0x%02X>", s[j])]
				if !ok {
					ids = nil
					break
				}
				ids = append(ids, id)
			}
			if ids != nil {
				for _, id := range ids {
					add(id, 1)
				}
				continue
			}
		}
		if m.hasUnk {
			id, ok := m.vocab[m.unkToken]
			if !ok {
				return nil, fmt.Errorf("tokenizer: unk_token %q is not in the vocabulary", m.unkToken)
			}
			switch {
			case haveUnk && m.fuseUnk:
				unkSize += size
			case haveUnk:
				add(unkID, unkSize)
				unkID, unkSize = id, size
			default:
				unkID, unkSize, haveUnk = id, size, true
			}
		}
		// Without an unk_token, a character missing from the vocabulary
		// is dropped, as Hugging Face does.
	}
	if haveUnk {
		add(unkID, unkSize)
	}

	// Min-heap of candidate merges.
	heap := make([]bpeCandidate, 0, len(syms))
	push := func(c bpeCandidate) {
		heap = append(heap, c)
		for i := len(heap) - 1; i > 0; {
			p := (i - 1) / 2
			if !heap[i].less(heap[p]) {
				break
			}
			heap[i], heap[p] = heap[p], heap[i]
			i = p
		}
	}
	pop := func() bpeCandidate {
		top := heap[0]
		last := len(heap) - 1
		heap[0] = heap[last]
		heap = heap[:last]
		for i := 0; ; {
			l, r, smallest := 2*i+1, 2*i+2, i
			if l < len(heap) && heap[l].less(heap[smallest]) {
				smallest = l
			}
			if r < len(heap) && heap[r].less(heap[smallest]) {
				smallest = r
			}
			if smallest == i {
				break
			}
			heap[i], heap[smallest] = heap[smallest], heap[i]
			i = smallest
		}
		return top
	}
	for i := 0; i+1 < len(syms); i++ {
		if mg, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			push(bpeCandidate{rank: mg.rank, pos: int32(i), newID: mg.newID})
		}
	}
	for len(heap) > 0 {
		top := pop()
		cur := &syms[top.pos]
		if cur.size == 0 || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// Skip stale candidates: the pair at pos must still merge into newID.
		if mg, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mg.newID != top.newID {
			continue
		}
		cur.id = top.newID
		cur.size += right.size
		cur.next = right.next
		syms[nextPos].size = 0
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mg, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				push(bpeCandidate{rank: mg.rank, pos: cur.prev, newID: mg.newID})
			}
		}
		if cur.next >= 0 {
			if mg, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				push(bpeCandidate{rank: mg.rank, pos: top.pos, newID: mg.newID})
			}
		}
	}
	ids := make([]uint32, 0, len(syms))
	for _, s := range syms {
		if s.size != 0 {
			ids = append(ids, s.id)
		}
	}
	return ids, nil
}

// clearCache empties the word cache.
func (m *bpeModel) clearCache() {
	m.cacheMu.Lock()
	clear(m.cache)
	m.cacheMu.Unlock()
}
