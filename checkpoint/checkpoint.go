// Package checkpoint reads Hugging Face / PyTorch checkpoints safely and
// writes safetensors files.
//
// It reads safetensors files (single or sharded with
// model.safetensors.index.json) and PyTorch zip checkpoints written by
// torch.save since torch 1.6 (single pytorch_model.bin or sharded with
// pytorch_model.bin.index.json). Opening a checkpoint validates every header
// and every tensor's byte range against the file before anything is
// allocated for it, and keeps the files open (memory-mapped where the
// platform allows, see mmap.go): tensor data is read only when a tensor is
// asked for, and float32 tensors of a mapped file are not copied at all.
//
// PyTorch's data.pkl is interpreted by a small pickle virtual machine written
// for state dicts. It never executes anything: the only globals it accepts are
// collections.OrderedDict, torch's tensor and parameter rebuild functions, the
// storage classes and dtype objects, each implemented in Go; any other global
// (os.system, builtins.eval, ...) makes Open fail with ErrForbiddenGlobal.
//
// Errors never panic, also on hostile input, and name the file and, where
// relevant, the tensor and the offending field.
package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
)

// Info describes one stored tensor.
type Info struct {
	Name  string
	DType string // safetensors spelling: "F64","F32","F16","BF16","I64","I32","I16","I8","U8","BOOL"
	Shape []int
	File  string // path of the file that holds it
}

// Format names returned by Checkpoint.Format.
const (
	FormatSafetensors        = "safetensors"
	FormatSafetensorsSharded = "safetensors-sharded"
	FormatPyTorch            = "pytorch"
	FormatPyTorchSharded     = "pytorch-sharded"
)

// ErrForbiddenGlobal is wrapped by the error Open returns when a pickle names
// a global outside the allowlist (anything but tensor, storage, dtype and
// OrderedDict globals).
var ErrForbiddenGlobal = errors.New("forbidden pickle global")

// ErrLegacyFormat is wrapped by the error Open returns for torch.save files
// written in the pre-1.6 (non-zip) format.
var ErrLegacyFormat = errors.New("legacy torch.save format is not supported; re-save with torch>=1.6")

// Checkpoint is an opened checkpoint. Its methods are safe for concurrent use;
// tensor data is read from the open files on demand until Close.
type Checkpoint struct {
	format   string
	files    []string
	closers  []io.Closer
	tensors  map[string]*tensor
	names    []string
	metadata map[string]string
	extra    map[string]any
	closed   atomic.Bool
}

// tensor is one stored tensor: a view into a byte source.
type tensor struct {
	info     Info
	elemSize int64
	numel    int64
	src      byteSource
	srcName  string  // the source, for errors: the file or "file: data/<key>"
	offset   int64   // element offset of the view into src
	stride   []int64 // element strides; nil means contiguous row-major
}

// Open opens a checkpoint directory as Hugging Face saves it. It looks for,
// in this order, model.safetensors.index.json (sharded safetensors),
// model.safetensors, pytorch_model.bin.index.json (sharded torch) and
// pytorch_model.bin, and opens the first one present. Given a file instead
// of a directory, Open is OpenFile.
func Open(dir string) (*Checkpoint, error) {
	candidates := []struct {
		name   string
		format string
	}{
		{"model.safetensors.index.json", FormatSafetensorsSharded},
		{"model.safetensors", FormatSafetensors},
		{"pytorch_model.bin.index.json", FormatPyTorchSharded},
		{"pytorch_model.bin", FormatPyTorch},
	}
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("checkpoint: %v", err)
	} else if st.Mode().IsRegular() {
		return OpenFile(dir)
	}
	for _, cand := range candidates {
		p := filepath.Join(dir, cand.name)
		st, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("checkpoint: %s: %v", p, err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		switch cand.format {
		case FormatSafetensorsSharded:
			return openSharded(dir, p, FormatSafetensors)
		case FormatPyTorchSharded:
			return openSharded(dir, p, FormatPyTorch)
		default:
			c, err := OpenFile(p)
			if err == nil && c.format != cand.format {
				c.Close()
				return nil, fmt.Errorf("checkpoint: %s: holds a %s checkpoint, not %s", p, c.format, cand.format)
			}
			return c, err
		}
	}
	if g, _ := filepath.Glob(filepath.Join(dir, "*.gguf")); len(g) > 0 {
		return nil, fmt.Errorf("checkpoint: %s: no Hugging Face checkpoint found, but GGUF files (%s): open one with OpenGGUF (model.Load and --model read a GGUF file, or a folder holding one and no config.json)", dir, strings.Join(g, ", "))
	}
	return nil, fmt.Errorf("checkpoint: %s: no checkpoint found (looked for model.safetensors.index.json, model.safetensors, pytorch_model.bin.index.json, pytorch_model.bin)", dir)
}

// OpenFile opens a single .safetensors file or a single PyTorch zip file
// (.bin/.pt/.pth). The format is detected from the content, not the name.
func OpenFile(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %v", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: %s: %v", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("checkpoint: %s: not a regular file", path)
	}
	r := openMapped(f, st.Size())
	c, err := openReader(path, r, st.Size())
	if err != nil {
		r.(io.Closer).Close()
		return nil, err
	}
	c.closers = []io.Closer{r.(io.Closer)}
	return c, nil
}

// openReader detects the format of r by its first bytes and parses it.
func openReader(path string, r io.ReaderAt, size int64) (*Checkpoint, error) {
	var head [8]byte
	n, _ := r.ReadAt(head[:], 0)
	h := head[:n]
	switch {
	case len(h) >= 4 && (string(h[:4]) == "PK\x03\x04" || string(h[:4]) == "PK\x05\x06"):
		return openTorchZip(path, r, size)
	case len(h) >= 4 && h[0] == 0x80 && h[1] <= 5 && h[2] == 0x8a && h[3] == 0x0a:
		// PROTO n, LONG1 of 10 bytes: torch's legacy magic number.
		return nil, fmt.Errorf("checkpoint: %s: %w", path, ErrLegacyFormat)
	case isTar(r, size):
		return nil, fmt.Errorf("checkpoint: %s: %w (tar archive)", path, ErrLegacyFormat)
	case len(h) >= 4 && string(h[:4]) == GGUFMagic:
		return nil, fmt.Errorf("checkpoint: %s: a GGUF file, which this reader of Hugging Face checkpoints does not read: open it with OpenGGUF (model.Load and --model read it as a model)", path)
	}
	return openSafetensors(path, r, size)
}

// isTar reports whether r looks like a POSIX tar archive (torch's oldest
// save format).
func isTar(r io.ReaderAt, size int64) bool {
	if size < 512 {
		return false
	}
	var magic [5]byte
	if n, _ := r.ReadAt(magic[:], 257); n != 5 {
		return false
	}
	return string(magic[:]) == "ustar"
}

// Format returns "safetensors", "safetensors-sharded", "pytorch" or
// "pytorch-sharded".
func (c *Checkpoint) Format() string { return c.format }

// Files returns every file the checkpoint was read from, sorted: the single
// file, or the index file and every shard. Hash these to identify a
// checkpoint.
func (c *Checkpoint) Files() []string { return append([]string(nil), c.files...) }

// Names returns the sorted tensor names.
func (c *Checkpoint) Names() []string { return append([]string(nil), c.names...) }

// Info describes the named tensor; ok is false if there is none.
func (c *Checkpoint) Info(name string) (Info, bool) {
	t, ok := c.tensors[name]
	if !ok {
		return Info{}, false
	}
	info := t.info
	info.Shape = append([]int{}, info.Shape...)
	return info, true
}

// Metadata returns the safetensors __metadata__ map (nil if none). For a
// sharded checkpoint it merges the shards' maps; where shards disagree on a
// key, the first shard in sorted order wins.
func (c *Checkpoint) Metadata() map[string]string {
	if c.metadata == nil {
		return nil
	}
	m := make(map[string]string, len(c.metadata))
	for k, v := range c.metadata {
		m[k] = v
	}
	return m
}

// Extra returns the non-tensor entries of a PyTorch checkpoint's top-level
// dict (and of the wrapper dict, when the tensors sat in a
// {"state_dict": ...} or {"model": ...} wrapper), decoded to Go values: nil,
// bool, int64, float64, string, []byte, []any (lists and tuples) and
// map[string]any (dicts; non-string keys are formatted with fmt). Tensors
// nested in such values appear as Info (not loaded); globals such as
// torch.float32 appear as their dotted name. Nil for safetensors.
func (c *Checkpoint) Extra() map[string]any {
	if c.extra == nil {
		return nil
	}
	m := make(map[string]any, len(c.extra))
	for k, v := range c.extra {
		m[k] = v
	}
	return m
}

// Close closes the checkpoint's files. Tensors cannot be read afterwards;
// views that Float32View and Uint16View returned stay valid (their files stay mapped until
// the process exits).
func (c *Checkpoint) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	var first error
	for _, cl := range c.closers {
		if err := cl.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// lookup finds a tensor for reading.
func (c *Checkpoint) lookup(name string) (*tensor, error) {
	if c.closed.Load() {
		return nil, fmt.Errorf("checkpoint: tensor %q: checkpoint is closed", name)
	}
	t, ok := c.tensors[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint: no tensor %q", name)
	}
	if t.numel > int64(math.MaxInt)/8 {
		return nil, t.errorf("%d elements are too many for this platform", t.numel)
	}
	return t, nil
}

// Float32 reads the named tensor as float32 into a new slice, row-major
// and contiguous. F32, F16 and BF16 values are exact; F64 and integer
// values are rounded; BOOL reads as 0 or 1.
func (c *Checkpoint) Float32(name string) ([]float32, error) {
	t, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	return t.float32Copy()
}

// Float32View is Float32 without the copy where it can: a contiguous F32
// tensor of a memory-mapped file (mmap.go) is returned as a view of the
// mapping. The view stays valid after Close; every call returns the same
// memory; writes to it are private to this process (the file never
// changes) but seen by every view of that tensor. Other tensors are copied
// into a new slice, as Float32 does. model.Load reads weights this way, so
// that float32 weights are not copied onto the heap.
func (c *Checkpoint) Float32View(name string) ([]float32, error) {
	t, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	if v := t.float32View(); v != nil {
		return v, nil
	}
	return t.float32Copy()
}

// Releaser returns, for a tensor whose views (Float32View, Uint16View) are
// of a memory-mapped file, a function that takes the tensor's pages out of
// this process's resident set: the operating system keeps them in its page
// cache, and the next read of the view maps them again without reading the
// file. It returns nil for a tensor that is copied rather than viewed. The
// view stays valid; only this process's own writes to it would be lost,
// so release a tensor only if nothing writes to its view. model's forward
// pass releases the token embedding after it has read its rows: a pass
// reads a few of its rows, but the kernel maps the whole page-cache folio
// around each of them, which makes the whole table resident.
func (c *Checkpoint) Releaser(name string) func() {
	t, err := c.lookup(name)
	if err != nil {
		return nil
	}
	b := t.mappedBytes()
	if b == nil {
		return nil
	}
	return func() { dropPages(b) }
}

// Uint16View returns the raw bit patterns of a tensor of a 2-byte dtype
// (BF16, F16, I16), row-major, without widening them: like Float32View, a
// view of the mapping for a contiguous tensor of a memory-mapped file
// (aligned to 2 bytes), else a copy in a new slice. Other dtypes are
// refused. model.Load keeps BF16 and F16 weights this way, as stored.
func (c *Checkpoint) Uint16View(name string) ([]uint16, error) {
	t, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.elemSize != 2 {
		return nil, t.errorf("dtype %s is not a 2-byte type (BF16, F16, I16)", t.info.DType)
	}
	if v := t.uint16View(); v != nil {
		return v, nil
	}
	out := make([]uint16, t.numel)
	err = t.chunks(func(raw []byte, at int64) error {
		for i := range len(raw) / 2 {
			out[at+int64(i)] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Uint8View returns the bytes of a 1-byte tensor (U8, I8, BOOL) as
// stored, without decoding them: like Float32View, a view of the mapping
// for a contiguous tensor of a memory-mapped file, else a copy in a new
// slice. Other dtypes are refused. model.Load keeps MXFP4 expert weights
// (the `_blocks` and `_scales` of gpt-oss's release) this way.
func (c *Checkpoint) Uint8View(name string) ([]uint8, error) {
	t, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	if t.elemSize != 1 {
		return nil, t.errorf("dtype %s is not a 1-byte type (U8, I8, BOOL)", t.info.DType)
	}
	if v := t.mappedBytes(); v != nil {
		return v[:t.numel:t.numel], nil
	}
	return c.Bytes(name)
}

// float32Copy decodes the tensor into a new float32 slice.
func (t *tensor) float32Copy() ([]float32, error) {
	out := make([]float32, t.numel)
	err := t.chunks(func(raw []byte, at int64) error {
		n := int64(len(raw)) / t.elemSize
		return decodeFloat32(t.info.DType, raw, out[at:at+n])
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Float64 reads the named tensor as float64, row-major and contiguous. Every
// dtype but I64 beyond ±2^53 converts exactly.
func (c *Checkpoint) Float64(name string) ([]float64, error) {
	t, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	out := make([]float64, t.numel)
	err = t.chunks(func(raw []byte, at int64) error {
		n := int64(len(raw)) / t.elemSize
		return decodeFloat64(t.info.DType, raw, out[at:at+n])
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Int64 reads the named tensor of an integer dtype (I64, I32, I16, I8, U8 or
// BOOL) as int64, row-major and contiguous. Float dtypes are refused.
func (c *Checkpoint) Int64(name string) ([]int64, error) {
	t, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	if !dtypes[t.info.DType].integer {
		return nil, t.errorf("dtype %s is not an integer type (use Float32 or Float64)", t.info.DType)
	}
	out := make([]int64, t.numel)
	err = t.chunks(func(raw []byte, at int64) error {
		n := int64(len(raw)) / t.elemSize
		return decodeInt64(t.info.DType, raw, out[at:at+n])
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Bytes reads the named tensor's raw little-endian element bytes, row-major
// and contiguous, in its stored dtype (useful for BF16/F16 without
// conversion, or for hashing).
func (c *Checkpoint) Bytes(name string) ([]byte, error) {
	t, err := c.lookup(name)
	if err != nil {
		return nil, err
	}
	out := make([]byte, t.numel*t.elemSize)
	err = t.chunks(func(raw []byte, at int64) error {
		copy(out[at*t.elemSize:], raw)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errorf formats an error that names the tensor's file and the tensor.
func (t *tensor) errorf(format string, args ...any) error {
	return fmt.Errorf("checkpoint: %s: tensor %q: %s", t.info.File, t.info.Name, fmt.Sprintf(format, args...))
}

// chunkElems bounds the elements decoded per chunk of a contiguous read.
const chunkElems = 1 << 18

// chunks calls fn with the tensor's raw bytes in row-major order, in pieces
// that start at element index at.
func (t *tensor) chunks(fn func(raw []byte, at int64) error) error {
	if t.numel == 0 {
		return nil
	}
	if t.stride == nil {
		src := t.src
		if s, ok := src.(inflateSource); ok {
			// One decompressor for the whole tensor: reopening the entry
			// per chunk would inflate it quadratically often.
			st, err := s.stream(t.offset * t.elemSize)
			if err != nil {
				return t.errorf("reading %s: %v", t.srcName, err)
			}
			defer st.close()
			src = st
		}
		n := min(t.numel, chunkElems)
		buf := make([]byte, n*t.elemSize)
		for at := int64(0); at < t.numel; at += n {
			k := min(n, t.numel-at)
			b := buf[:k*t.elemSize]
			if err := src.readAt(b, (t.offset+at)*t.elemSize); err != nil {
				return t.errorf("reading %s: %v", t.srcName, err)
			}
			if err := fn(b, at); err != nil {
				return t.errorf("%v", err)
			}
		}
		return nil
	}
	raw, err := t.gather()
	if err != nil {
		return t.errorf("reading %s: %v", t.srcName, err)
	}
	if err := fn(raw, 0); err != nil {
		return t.errorf("%v", err)
	}
	return nil
}

// gatherSpanLimit is the largest span of a strided view that is read with one
// ReadAt; sparser views are read one run at a time.
const gatherSpanLimit = 64 << 20

// gather reads a strided view into a new contiguous row-major buffer.
func (t *tensor) gather() ([]byte, error) {
	shape := make([]int64, len(t.info.Shape))
	maxIdx := t.offset
	for i, d := range t.info.Shape {
		shape[i] = int64(d)
		maxIdx += (shape[i] - 1) * t.stride[i] // validated at Open not to overflow
	}
	es := t.elemSize
	out := make([]byte, t.numel*es)
	nd := len(shape)

	// The innermost dimension is one run when its stride is 1.
	run := int64(1)
	if nd > 0 && t.stride[nd-1] == 1 {
		run = shape[nd-1]
	}
	span := (maxIdx - t.offset + 1) * es
	var window []byte
	if span <= max(4*t.numel*es, gatherSpanLimit) {
		window = make([]byte, span)
		if err := t.src.readAt(window, t.offset*es); err != nil {
			return nil, err
		}
	}
	// Walk the index space in row-major order, one run at a time.
	outerDims := nd
	if run > 1 {
		outerDims = nd - 1
	}
	idx := make([]int64, outerDims)
	for o := int64(0); o < t.numel; o += run {
		pos := int64(0) // element offset relative to t.offset
		for i := 0; i < outerDims; i++ {
			pos += idx[i] * t.stride[i]
		}
		dst := out[o*es : (o+run)*es]
		if window != nil {
			copy(dst, window[pos*es:(pos+run)*es])
		} else if err := t.src.readAt(dst, (t.offset+pos)*es); err != nil {
			return nil, err
		}
		for i := outerDims - 1; i >= 0; i-- { // odometer increment
			idx[i]++
			if idx[i] < shape[i] {
				break
			}
			idx[i] = 0
		}
	}
	return out, nil
}

// finish sorts the names of a freshly parsed checkpoint.
func (c *Checkpoint) finish() {
	c.names = make([]string, 0, len(c.tensors))
	for name := range c.tensors {
		c.names = append(c.names, name)
	}
	sort.Strings(c.names)
	sort.Strings(c.files)
}

// byteSource is a range of bytes that backs tensors: a section of a file, or
// a deflated zip entry.
type byteSource interface {
	// readAt fills p from byte offset off of the source.
	readAt(p []byte, off int64) error
}

// sectionSource is n bytes of r starting at base.
type sectionSource struct {
	r    io.ReaderAt
	base int64
	n    int64
}

func (s sectionSource) readAt(p []byte, off int64) error {
	if off < 0 || off > s.n || int64(len(p)) > s.n-off {
		return fmt.Errorf("read of %d bytes at %d is outside the %d-byte range", len(p), off, s.n)
	}
	n, err := s.r.ReadAt(p, s.base+off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
