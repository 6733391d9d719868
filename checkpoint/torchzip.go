package checkpoint

import (
	"archive/zip"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Resource bounds for PyTorch zip checkpoints.
const (
	maxPickleSize  = 1 << 30 // data.pkl
	maxInflated    = 1 << 30 // one deflate-compressed storage entry, uncompressed
	maxDeflateRate = 1100    // deflate cannot expand more than ~1032×
	// A view may hold more elements than its storage (stride-0 broadcasts)
	// only up to this many elements.
	maxBroadcastElems = 1 << 24
	maxExtraDepth     = 64
	maxExtraNodes     = 1 << 20
)

// openTorchZip parses a torch.save zip archive (torch >= 1.6) held by r.
func openTorchZip(path string, r io.ReaderAt, size int64) (*Checkpoint, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: %s", path, fmt.Sprintf(format, args...))
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fail("not a readable zip archive: %v", err)
	}
	entries := make(map[string]*zip.File, len(zr.File))
	var pkls []string
	for _, f := range zr.File {
		if _, dup := entries[f.Name]; dup {
			return nil, fail("archive holds %q twice", f.Name)
		}
		entries[f.Name] = f
		if dir, file, ok := strings.Cut(f.Name, "/"); ok && file == "data.pkl" && dir != "" {
			pkls = append(pkls, dir)
		}
	}
	switch len(pkls) {
	case 0:
		return nil, fail("not a PyTorch checkpoint: the zip archive has no <folder>/data.pkl")
	case 1:
	default:
		sort.Strings(pkls)
		return nil, fail("the zip archive has data.pkl in %d top folders (%s); expected one", len(pkls), strings.Join(pkls, ", "))
	}
	prefix := pkls[0] + "/"

	if f := entries[prefix+"byteorder"]; f != nil {
		b, err := readEntry(f, 64, size)
		if err != nil {
			return nil, fail("%s: %v", f.Name, err)
		}
		if order := strings.TrimSpace(string(b)); order != "little" {
			return nil, fail("%s is %q; only little-endian checkpoints are supported", f.Name, order)
		}
	}

	pklEntry := entries[prefix+"data.pkl"]
	pkl, err := readEntry(pklEntry, maxPickleSize, size)
	if err != nil {
		return nil, fail("data.pkl: %v", err)
	}

	ar := &archive{r: r, size: size, entries: entries, prefix: prefix, storages: make(map[string]*pyStorage)}
	root, err := unpickle(pkl, ar.loadStorage)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: data.pkl: %w", path, err)
	}
	c := &Checkpoint{format: FormatPyTorch, files: []string{path}}
	if err := c.collect(path, root); err != nil {
		return nil, err
	}
	c.finish()
	return c, nil
}

// readEntry reads a whole zip entry of at most limit bytes, trusting the
// declared size only after checking it.
func readEntry(f *zip.File, limit, archiveSize int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("entry declares %d bytes (limit %d)", f.UncompressedSize64, limit)
	}
	switch f.Method {
	case zip.Store:
		if f.CompressedSize64 != f.UncompressedSize64 {
			return nil, fmt.Errorf("stored entry has compressed size %d but size %d", f.CompressedSize64, f.UncompressedSize64)
		}
	case zip.Deflate:
		if f.UncompressedSize64 > f.CompressedSize64*maxDeflateRate+1024 {
			return nil, fmt.Errorf("entry declares %d bytes from %d compressed bytes, more than deflate can produce", f.UncompressedSize64, f.CompressedSize64)
		}
	default:
		return nil, fmt.Errorf("unsupported compression method %d", f.Method)
	}
	off, err := f.DataOffset()
	if err != nil {
		return nil, err
	}
	if off < 0 || off > archiveSize || f.CompressedSize64 > uint64(archiveSize-off) {
		return nil, fmt.Errorf("entry data [%d, +%d) lie beyond the end of the file (%d bytes)", off, f.CompressedSize64, archiveSize)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := make([]byte, f.UncompressedSize64)
	if _, err := io.ReadFull(rc, buf); err != nil {
		return nil, err
	}
	// Read on to EOF so that archive/zip checks the CRC and the size.
	var one [1]byte
	if n, err := rc.Read(one[:]); n != 0 || (err != nil && err != io.EOF) {
		if err == nil {
			err = errors.New("entry holds more bytes than it declares")
		}
		return nil, err
	}
	return buf, nil
}

// archive is an opened torch zip archive.
type archive struct {
	r        io.ReaderAt
	size     int64
	entries  map[string]*zip.File
	prefix   string // "<folder>/"
	storages map[string]*pyStorage
}

// loadStorage resolves torch's persistent id
// ('storage', storage_type, key, location, numel) to a storage backed by the
// archive entry data/<key>, checking the entry against the declared size.
func (ar *archive) loadStorage(pid any) (any, error) {
	cls, key, numel, err := parsePersistentID(pid)
	if err != nil {
		return nil, err
	}
	name := ar.prefix + "data/" + key
	if st, ok := ar.storages[key]; ok {
		if st.dtype != cls.dtype || st.numel != numel {
			return nil, fmt.Errorf("storage %q is loaded twice with different types (%s × %d, %s × %d)", key, st.dtype, st.numel, cls.dtype, numel)
		}
		return st, nil
	}
	es := int64(dtypeSize(cls.dtype))
	_, nbytes, ok := mulShape([]int64{numel}, es)
	if !ok {
		return nil, fmt.Errorf("storage %q: %d elements of %s overflow int64 bytes", key, numel, cls.dtype)
	}
	f, fileSize := ar.entries[name], ar.size
	if f == nil {
		return nil, fmt.Errorf("storage %q: archive entry %s is missing", key, name)
	}
	if f.UncompressedSize64 != uint64(nbytes) {
		return nil, fmt.Errorf("storage %q: archive entry %s holds %d bytes but the pickle declares %d elements of %s (%d bytes)",
			key, name, f.UncompressedSize64, numel, cls.dtype, nbytes)
	}
	st := &pyStorage{key: key, dtype: cls.dtype, numel: numel, name: name}
	switch f.Method {
	case zip.Store:
		if f.CompressedSize64 != f.UncompressedSize64 {
			return nil, fmt.Errorf("storage %q: stored entry %s has compressed size %d but size %d", key, name, f.CompressedSize64, f.UncompressedSize64)
		}
		off, err := f.DataOffset()
		if err != nil {
			return nil, fmt.Errorf("storage %q: entry %s: %v", key, name, err)
		}
		if off < 0 || off > fileSize || nbytes > fileSize-off {
			return nil, fmt.Errorf("storage %q: entry %s data [%d, +%d) lies beyond the end of the file (%d bytes)", key, name, off, nbytes, fileSize)
		}
		st.src = sectionSource{r: ar.r, base: off, n: nbytes}
	case zip.Deflate:
		if nbytes > maxInflated {
			return nil, fmt.Errorf("storage %q: compressed entry %s declares %d bytes uncompressed (limit %d for compressed entries)", key, name, nbytes, maxInflated)
		}
		if f.UncompressedSize64 > f.CompressedSize64*maxDeflateRate+1024 {
			return nil, fmt.Errorf("storage %q: compressed entry %s declares %d bytes from %d compressed bytes, more than deflate can produce", key, name, nbytes, f.CompressedSize64)
		}
		st.src = inflateSource{f: f, n: nbytes}
	default:
		return nil, fmt.Errorf("storage %q: entry %s uses unsupported compression method %d", key, name, f.Method)
	}
	ar.storages[key] = st
	return st, nil
}

// parsePersistentID checks torch's storage persistent id
// ('storage', storage_type, key, location, numel).
func parsePersistentID(pid any) (cls *pyGlobal, key string, numel int64, err error) {
	t, ok := pid.(pyTuple)
	if !ok || len(t) != 5 {
		return nil, "", 0, fmt.Errorf("persistent id is %s, not a 5-tuple ('storage', type, key, location, numel)", typeName(pid))
	}
	if s, _ := t[0].(string); s != "storage" {
		return nil, "", 0, fmt.Errorf("persistent id kind is %s, not 'storage'", typeName(t[0]))
	}
	cls, ok = t[1].(*pyGlobal)
	if !ok || cls.kind != gStorageClass {
		return nil, "", 0, fmt.Errorf("persistent id storage type is %s, not a storage class", typeName(t[1]))
	}
	key, ok = t[2].(string)
	if !ok {
		return nil, "", 0, fmt.Errorf("persistent id key is %s, not a str", typeName(t[2]))
	}
	numel, ok = t[4].(int64)
	if !ok || numel < 0 {
		return nil, "", 0, fmt.Errorf("storage %q: numel is %s, not a non-negative int", key, typeName(t[4]))
	}
	return cls, key, numel, nil
}

// collect finds the state dict in the unpickled root object and turns its
// tensors into named, bounds-checked tensors; other entries go to Extra.
func (c *Checkpoint) collect(path string, root any) error {
	top, ok := root.(*pyDict)
	if !ok {
		return fmt.Errorf("checkpoint: %s: data.pkl: top-level object is %s, not a dict of tensors", path, typeName(root))
	}
	sd, wrapper := top, -1
	if !hasTensor(top) {
		var found []int
		for i, v := range top.vals {
			if d, ok := v.(*pyDict); ok && hasTensor(d) {
				found = append(found, i)
			}
		}
		if len(found) > 1 {
			var names []string
			for _, i := range found {
				names = append(names, fmt.Sprint(top.keys[i]))
			}
			return fmt.Errorf("checkpoint: %s: data.pkl: several dicts of tensors (%s); cannot tell which is the state dict", path, strings.Join(names, ", "))
		}
		if len(found) == 1 {
			wrapper = found[0]
			sd = top.vals[wrapper].(*pyDict)
		}
	}
	c.tensors = make(map[string]*tensor)
	conv := &converter{file: path, budget: maxExtraNodes}
	for i, k := range sd.keys {
		pt, ok := sd.vals[i].(*pyTensor)
		if !ok {
			if err := c.addExtra(conv, k, sd.vals[i]); err != nil {
				return err
			}
			continue
		}
		name, ok := k.(string)
		if !ok {
			return fmt.Errorf("checkpoint: %s: data.pkl: tensor key %v is %s, not a str", path, k, typeName(k))
		}
		t, err := newTorchTensor(path, name, pt)
		if err != nil {
			return err
		}
		c.tensors[name] = t
	}
	if wrapper >= 0 {
		for i, k := range top.keys {
			if i != wrapper {
				if err := c.addExtra(conv, k, top.vals[i]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// hasTensor reports whether d holds a tensor value.
func hasTensor(d *pyDict) bool {
	for _, v := range d.vals {
		if _, ok := v.(*pyTensor); ok {
			return true
		}
	}
	return false
}

// addExtra records a non-tensor entry; the first entry of a key wins.
func (c *Checkpoint) addExtra(conv *converter, k, v any) error {
	key, ok := k.(string)
	if !ok {
		key = fmt.Sprint(k)
	}
	gv, err := conv.toGo(v, 0)
	if err != nil {
		return fmt.Errorf("checkpoint: %s: data.pkl: entry %q: %v", c.files[0], key, err)
	}
	if c.extra == nil {
		c.extra = make(map[string]any)
	}
	if _, dup := c.extra[key]; !dup {
		c.extra[key] = gv
	}
	return nil
}

// newTorchTensor checks a rebuilt tensor's view against its storage.
func newTorchTensor(path, name string, pt *pyTensor) (*tensor, error) {
	st := pt.storage
	fail := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: tensor %q: %s", path, name, fmt.Sprintf(format, args...))
	}
	if pt.offset < 0 {
		return nil, fail("storage_offset %d is negative", pt.offset)
	}
	shape := make([]int, len(pt.shape))
	for i, d := range pt.shape {
		if d < 0 || d > math.MaxInt {
			return nil, fail("size[%d] = %d is not a valid dimension", i, d)
		}
		shape[i] = int(d)
		if pt.stride[i] < 0 {
			return nil, fail("stride[%d] = %d is negative", i, pt.stride[i])
		}
	}
	es := int64(dtypeSize(st.dtype))
	numel, _, ok := mulShape(pt.shape, es)
	if !ok {
		return nil, fail("size %v of %s overflows int64 bytes", pt.shape, st.dtype)
	}
	view := fmt.Sprintf("view (offset %d, size %v, stride %v)", pt.offset, pt.shape, pt.stride)
	if numel > 0 {
		// Largest element index the view touches, overflow-checked.
		last := pt.offset
		for i, d := range pt.shape {
			s := pt.stride[i]
			if s != 0 && d-1 > (math.MaxInt64-last)/s {
				return nil, fail("%s overflows int64 element indices", view)
			}
			last += (d - 1) * s
		}
		if last >= st.numel {
			return nil, fail("%s needs %d elements but storage %s holds %d %s elements",
				view, last+1, st.name, st.numel, st.dtype)
		}
		if numel > st.numel && numel > maxBroadcastElems {
			return nil, fail("%s has %d elements, more than its storage %s (%d) and more than %d",
				view, numel, st.name, st.numel, maxBroadcastElems)
		}
	}
	t := &tensor{
		info:     Info{Name: name, DType: st.dtype, Shape: shape, File: path},
		elemSize: es,
		numel:    numel,
		src:      st.src,
		srcName:  st.name,
		offset:   pt.offset,
	}
	// Keep strides only for views that are not plain row-major.
	want := int64(1)
	for i := len(pt.shape) - 1; i >= 0; i-- {
		if pt.shape[i] != 1 && pt.stride[i] != want {
			t.stride = append([]int64(nil), pt.stride...)
			break
		}
		want *= pt.shape[i]
	}
	return t, nil
}

// converter turns VM values into plain Go values for Extra, bounded in depth
// and size (shared references are converted once per reference).
type converter struct {
	file   string
	budget int
}

func (cv *converter) toGo(v any, depth int) (any, error) {
	if depth > maxExtraDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels (or cyclic)", maxExtraDepth)
	}
	if cv.budget--; cv.budget < 0 {
		return nil, fmt.Errorf("non-tensor values hold more than %d items", maxExtraNodes)
	}
	switch t := v.(type) {
	case nil, bool, int64, float64, string:
		return t, nil
	case []byte:
		return append([]byte{}, t...), nil
	case pyTuple:
		return cv.list(t, depth)
	case *pyList:
		return cv.list(t.items, depth)
	case *pyDict:
		m := make(map[string]any, len(t.keys))
		for i, k := range t.keys {
			ks, ok := k.(string)
			if !ok {
				kv, err := cv.toGo(k, depth+1)
				if err != nil {
					return nil, err
				}
				ks = fmt.Sprint(kv)
			}
			gv, err := cv.toGo(t.vals[i], depth+1)
			if err != nil {
				return nil, err
			}
			if _, dup := m[ks]; !dup {
				m[ks] = gv
			}
		}
		return m, nil
	case *pyGlobal:
		return t.module + "." + t.name, nil
	case *pyStorage:
		return fmt.Sprintf("storage %s (%d %s elements)", t.name, t.numel, t.dtype), nil
	case *pyTensor:
		shape := make([]int, len(t.shape))
		for i, d := range t.shape {
			shape[i] = int(d)
		}
		return Info{DType: t.storage.dtype, Shape: shape, File: cv.file}, nil
	}
	return nil, fmt.Errorf("cannot convert %s", typeName(v))
}

func (cv *converter) list(items []any, depth int) ([]any, error) {
	out := make([]any, len(items))
	for i, it := range items {
		gv, err := cv.toGo(it, depth+1)
		if err != nil {
			return nil, err
		}
		out[i] = gv
	}
	return out, nil
}

// inflateSource is a deflate-compressed zip entry, inflated on every read
// (archive/zip refuses entries that inflate past their declared size).
type inflateSource struct {
	f *zip.File
	n int64
}

func (s inflateSource) readAt(p []byte, off int64) error {
	if off < 0 || off > s.n || int64(len(p)) > s.n-off {
		return fmt.Errorf("read of %d bytes at %d is outside the %d-byte entry", len(p), off, s.n)
	}
	rc, err := s.f.Open()
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.CopyN(io.Discard, rc, off); err != nil {
		return err
	}
	_, err = io.ReadFull(rc, p)
	return err
}

// inflateStream reads an inflateSource front to back with one
// decompressor, for contiguous reads at growing offsets.
type inflateStream struct {
	rc  io.ReadCloser
	pos int64 // next byte offset
	n   int64
}

// stream opens s for reading from byte off on.
func (s inflateSource) stream(off int64) (*inflateStream, error) {
	if off < 0 || off > s.n {
		return nil, fmt.Errorf("read at %d is outside the %d-byte entry", off, s.n)
	}
	rc, err := s.f.Open()
	if err != nil {
		return nil, err
	}
	if _, err := io.CopyN(io.Discard, rc, off); err != nil {
		rc.Close()
		return nil, err
	}
	return &inflateStream{rc: rc, pos: off, n: s.n}, nil
}

// readAt fills p from byte offset off, which must be where the previous
// read ended.
func (s *inflateStream) readAt(p []byte, off int64) error {
	if off != s.pos || int64(len(p)) > s.n-off {
		return fmt.Errorf("read of %d bytes at %d: the entry is read sequentially, at %d of %d bytes", len(p), off, s.pos, s.n)
	}
	if _, err := io.ReadFull(s.rc, p); err != nil {
		return err
	}
	s.pos += int64(len(p))
	return nil
}

func (s *inflateStream) close() { s.rc.Close() }
