package explore

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/tokenizer"
)

// source is the sweep's token stream, rebuilt from the manifest's source
// file (tokenized again for a text source) and accepted only when its
// digest equals the manifest's.
type source struct {
	once   sync.Once
	stream []int
	tok    *tokenizer.Tokenizer // nil for an ids source without a tokenizer
	err    error
}

// candidates lists where a file the manifest names may be now: as
// recorded (absolute, or relative to the working directory), and relative
// to the measurement folder and its parent.
func candidates(dir, p string) []string {
	if p == "" || p == "-" || p == "stdin" {
		return nil
	}
	if filepath.IsAbs(p) {
		return []string{p}
	}
	return []string{p, filepath.Join(dir, p), filepath.Join(filepath.Dir(dir), p)}
}

func firstFile(paths []string) string {
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// load rebuilds the stream once.
func (f *Folder) loadSource() (*source, error) {
	s := &f.src
	s.once.Do(func() { s.stream, s.tok, s.err = rebuild(f.Dir, f.Model, f.Source) })
	return s, s.err
}

func rebuild(dir string, info results.ModelInfo, src results.SourceInfo) ([]int, *tokenizer.Tokenizer, error) {
	path := firstFile(candidates(dir, src.File.Path))
	if path == "" {
		return nil, nil, fmt.Errorf("the sweep's token source %q is not found (looked as given, in %s and beside it): token strings and rows are unavailable", src.File.Path, dir)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if h := analysis.HashBytes(path, data); h.SHA256 != src.File.SHA256 {
		return nil, nil, fmt.Errorf("%s: sha256 %s, the sweep read %s: the file changed since the sweep; token strings and rows are unavailable", path, h.SHA256[:12], src.File.SHA256[:12])
	}
	var tok *tokenizer.Tokenizer
	tp := ""
	if src.Tokenizer != nil {
		tp = firstFile(candidates(dir, src.Tokenizer.Path))
	}
	if tp == "" {
		tp = firstFile([]string{filepath.Join(info.Dir, "tokenizer.json")})
	}
	if tp != "" {
		if tok, err = tokenizer.Load(tp); err != nil {
			return nil, nil, err
		}
	}
	var stream []int
	switch src.Kind {
	case "ids":
		if err := json.Unmarshal(data, &stream); err != nil {
			return nil, nil, fmt.Errorf("%s: not a JSON list of token ids: %w", path, err)
		}
	case "text":
		if tok == nil {
			return nil, nil, fmt.Errorf("the sweep's tokenizer %q is not found: token strings and rows are unavailable", src.Tokenizer.Path)
		}
		if stream, err = tok.Encode(string(data), src.AddSpecialTokens); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
	default:
		return nil, nil, fmt.Errorf("manifest source kind %q: want text or ids", src.Kind)
	}
	if d := analysis.TokenDigest(stream); d != src.Digest {
		return nil, nil, fmt.Errorf("%s gives %d tokens with digest %.12s, the sweep had %d with %.12s (another tokenizer?): token strings and rows are unavailable", path, len(stream), d, src.Tokens, src.Digest)
	}
	return stream, tok, nil
}

// chunk returns the manifest's chunk of pass (T, sample).
func (f *Folder) chunk(T, sample int) (results.Chunk, error) {
	for _, c := range f.Chunks {
		if c.T == T && c.Sample == sample {
			return c, nil
		}
	}
	return results.Chunk{}, fmt.Errorf("no pass T %d sample %d in the %s (lengths %v, %d samples)", T, sample, f.Kind, f.Lengths, f.Samples)
}

// passIDs returns the token ids of pass (T, sample) as the sweep ran it:
// the optional BOS token, then the chunk.
func (f *Folder) passIDs(T, sample int) ([]int, *tokenizer.Tokenizer, error) {
	c, err := f.chunk(T, sample)
	if err != nil {
		return nil, nil, err
	}
	s, err := f.loadSource()
	if err != nil {
		return nil, nil, err
	}
	if c.Start < 0 || c.End > len(s.stream) || c.Start > c.End {
		return nil, nil, fmt.Errorf("chunk [%d, %d) outside the %d-token stream", c.Start, c.End, len(s.stream))
	}
	ids := make([]int, 0, c.T)
	if b := f.BOSToken; b >= 0 {
		ids = append(ids, b)
	}
	return append(ids, s.stream[c.Start:c.End]...), s.tok, nil
}

// tokenStrings decodes each id on its own ("" and the id in brackets when
// there is no tokenizer).
func tokenStrings(tok *tokenizer.Tokenizer, ids []int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if tok == nil {
			out[i] = fmt.Sprintf("[%d]", id)
			continue
		}
		s, err := tok.Decode([]int{id}, false)
		if err != nil {
			s = fmt.Sprintf("[%d]", id)
		}
		out[i] = s
	}
	return out
}

// hasChunk says whether the manifest has pass (T, sample).
func (f *Folder) hasChunk(T, sample int) bool { _, err := f.chunk(T, sample); return err == nil }

// tokenStrings returns the ids and strings of positions [from, to) of pass
// (T, sample): from the rebuilt token stream, or for probe diag's CSV from
// its token column (ids are then null).
func (f *Folder) tokenStrings(T, sample, from, to int) ([]int, []string, error) {
	if ix, ok := f.table.(*diagIndex); ok {
		toks, err := ix.tokens(sample, from, to)
		return nil, toks, err
	}
	ids, tok, err := f.passIDs(T, sample)
	if err != nil {
		return nil, nil, err
	}
	return ids[from:to], tokenStrings(tok, ids[from:to]), nil
}

// tokensAvailable says why token strings cannot be had (nil: they can).
func (f *Folder) tokensAvailable() error {
	if ix, ok := f.table.(*diagIndex); ok {
		_, err := ix.tokens(ix.sampleList[0], 0, 1)
		return err
	}
	_, err := f.loadSource()
	return err
}
