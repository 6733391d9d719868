package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// maxHeaderSize bounds a safetensors JSON header (the reference
// implementation's limit).
const maxHeaderSize = 100 << 20

// stEntry is one validated safetensors header entry.
type stEntry struct {
	name       string
	dtype      string
	shape      []int
	begin, end int64 // data_offsets, relative to the data section
}

// openSafetensors parses and validates a safetensors file held by r.
func openSafetensors(path string, r io.ReaderAt, size int64) (*Checkpoint, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: %s", path, fmt.Sprintf(format, args...))
	}
	if size < 8 {
		return nil, fail("file is %d bytes, too short for the 8-byte safetensors header length", size)
	}
	var lenBuf [8]byte
	if err := (sectionSource{r, 0, size}).readAt(lenBuf[:], 0); err != nil {
		return nil, fail("reading the header length: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > uint64(size-8) {
		return nil, fail("header length %d exceeds the file (%d bytes after the 8-byte length; truncated, or not a safetensors file)", n, size-8)
	}
	if n > maxHeaderSize {
		return nil, fail("header length %d exceeds the %d-byte limit", n, maxHeaderSize)
	}
	header := make([]byte, n)
	if err := (sectionSource{r, 8, int64(n)}).readAt(header, 0); err != nil {
		return nil, fail("reading the header: %v", err)
	}
	dataStart := 8 + int64(n)
	entries, meta, err := parseHeader(header, size-dataStart)
	if err != nil {
		return nil, fail("%v", err)
	}
	c := &Checkpoint{
		format:   FormatSafetensors,
		files:    []string{path},
		tensors:  make(map[string]*tensor, len(entries)),
		metadata: meta,
	}
	for _, e := range entries {
		es := int64(dtypeSize(e.dtype))
		c.tensors[e.name] = &tensor{
			info:     Info{Name: e.name, DType: e.dtype, Shape: e.shape, File: path},
			elemSize: es,
			numel:    (e.end - e.begin) / es,
			src:      sectionSource{r, dataStart + e.begin, e.end - e.begin},
			srcName:  path,
		}
	}
	c.finish()
	return c, nil
}

// parseHeader validates a safetensors JSON header against a data section of
// dataLen bytes. Errors name the tensor and the field.
func parseHeader(header []byte, dataLen int64) ([]stEntry, map[string]string, error) {
	if !utf8.Valid(header) {
		return nil, nil, fmt.Errorf("header is not valid UTF-8")
	}
	keys, vals, err := readJSONObject(header)
	if err != nil {
		return nil, nil, fmt.Errorf("header: %v", err)
	}
	var meta map[string]string
	entries := make([]stEntry, 0, len(keys))
	for i, key := range keys {
		if key == "__metadata__" {
			if meta, err = parseMetadata(vals[i]); err != nil {
				return nil, nil, fmt.Errorf("__metadata__: %v", err)
			}
			continue
		}
		e, err := parseEntry(key, vals[i], dataLen)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %q: %v", key, err)
		}
		entries = append(entries, e)
	}
	// No two tensors may share bytes: sort by start and compare neighbours.
	byStart := make([]*stEntry, 0, len(entries))
	for i := range entries {
		if entries[i].end > entries[i].begin {
			byStart = append(byStart, &entries[i])
		}
	}
	sort.Slice(byStart, func(a, b int) bool {
		if byStart[a].begin != byStart[b].begin {
			return byStart[a].begin < byStart[b].begin
		}
		return byStart[a].name < byStart[b].name
	})
	for i := 1; i < len(byStart); i++ {
		prev, cur := byStart[i-1], byStart[i]
		if cur.begin < prev.end {
			return nil, nil, fmt.Errorf("tensor %q: data_offsets [%d, %d] overlap tensor %q [%d, %d]",
				cur.name, cur.begin, cur.end, prev.name, prev.begin, prev.end)
		}
	}
	return entries, meta, nil
}

// parseEntry validates one tensor's {"dtype","shape","data_offsets"}.
func parseEntry(name string, raw json.RawMessage, dataLen int64) (stEntry, error) {
	keys, vals, err := readJSONObject(raw)
	if err != nil {
		return stEntry{}, fmt.Errorf("entry: %v", err)
	}
	var f struct {
		DType       *string
		Shape       []json.RawMessage
		DataOffsets []json.RawMessage
	}
	for i, k := range keys {
		switch k {
		case "dtype":
			if err := json.Unmarshal(vals[i], &f.DType); err != nil || f.DType == nil {
				return stEntry{}, fmt.Errorf(`"dtype" is %s, not a string`, vals[i])
			}
		case "shape":
			if err := json.Unmarshal(vals[i], &f.Shape); err != nil || f.Shape == nil {
				return stEntry{}, fmt.Errorf(`"shape" is %s, not an array`, vals[i])
			}
		case "data_offsets":
			if err := json.Unmarshal(vals[i], &f.DataOffsets); err != nil || f.DataOffsets == nil {
				return stEntry{}, fmt.Errorf(`"data_offsets" is %s, not an array`, vals[i])
			}
		}
	}
	if f.DType == nil {
		return stEntry{}, fmt.Errorf(`missing "dtype"`)
	}
	if f.Shape == nil {
		return stEntry{}, fmt.Errorf(`missing "shape"`)
	}
	if f.DataOffsets == nil {
		return stEntry{}, fmt.Errorf(`missing "data_offsets"`)
	}
	e := stEntry{name: name, dtype: *f.DType}
	es := int64(dtypeSize(e.dtype))
	if es == 0 {
		return e, fmt.Errorf("unknown dtype %q", e.dtype)
	}
	shape := make([]int64, len(f.Shape))
	e.shape = make([]int, len(f.Shape))
	for i, r := range f.Shape {
		d, err := strconv.ParseInt(string(r), 10, 64)
		if err != nil || d < 0 || d > math.MaxInt {
			return e, fmt.Errorf("shape[%d] = %s is not a non-negative int64", i, r)
		}
		shape[i], e.shape[i] = d, int(d)
	}
	if len(f.DataOffsets) != 2 {
		return e, fmt.Errorf("data_offsets has %d entries, want 2", len(f.DataOffsets))
	}
	var off [2]int64
	for i, r := range f.DataOffsets {
		v, err := strconv.ParseInt(string(r), 10, 64)
		if err != nil || v < 0 {
			return e, fmt.Errorf("data_offsets[%d] = %s is not a non-negative int64", i, r)
		}
		off[i] = v
	}
	e.begin, e.end = off[0], off[1]
	if e.begin > e.end {
		return e, fmt.Errorf("data_offsets [%d, %d] end before they begin", e.begin, e.end)
	}
	if e.end > dataLen {
		return e, fmt.Errorf("data_offsets [%d, %d] exceed the data section (%d bytes)", e.begin, e.end, dataLen)
	}
	_, nbytes, ok := mulShape(shape, es)
	if !ok {
		return e, fmt.Errorf("shape %v of %s overflows int64 bytes", e.shape, e.dtype)
	}
	if nbytes != e.end-e.begin {
		return e, fmt.Errorf("shape %v of %s needs %d bytes but data_offsets [%d, %d] span %d",
			e.shape, e.dtype, nbytes, e.begin, e.end, e.end-e.begin)
	}
	return e, nil
}

// parseMetadata decodes __metadata__, a JSON object of strings.
func parseMetadata(raw json.RawMessage) (map[string]string, error) {
	keys, vals, err := readJSONObject(raw)
	if err != nil {
		return nil, err
	}
	meta := make(map[string]string, len(keys))
	for i, k := range keys {
		var s string
		if err := json.Unmarshal(vals[i], &s); err != nil {
			return nil, fmt.Errorf("value of %q is not a string", k)
		}
		meta[k] = s
	}
	return meta, nil
}

// readJSONObject splits a JSON object into its keys and raw values, in
// order, refusing duplicate keys and anything after the closing brace but
// whitespace.
func readJSONObject(data []byte) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	var keys []string
	var vals []json.RawMessage
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("not valid JSON: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("not valid JSON: object key %v is not a string", tok)
		}
		if seen[key] {
			return nil, nil, fmt.Errorf("duplicate key %q", key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, fmt.Errorf("not valid JSON: value of %q: %v", key, err)
		}
		keys = append(keys, key)
		vals = append(vals, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("not valid JSON: data after the closing brace")
	}
	return keys, vals, nil
}
