package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// goldenDir returns the shared golden data folder, skipping the test when it
// is missing.
func goldenDir(t testing.TB, sub ...string) string {
	t.Helper()
	dir := filepath.Join(append([]string{"..", "..", "shared", "golden"}, sub...)...)
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("golden data not available (%v); it lives in shared/golden beside the module", err)
	}
	return dir
}

// wantErr fails unless err is non-nil and its message holds every part.
func wantErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}

// pkl assembles pickle bytes opcode by opcode (a test-only writer).
type pkl struct{ bytes.Buffer }

func (p *pkl) op(b ...byte) *pkl { p.Write(b); return p }

// str writes BINUNICODE.
func (p *pkl) str(s string) *pkl {
	p.WriteByte('X')
	binary.Write(&p.Buffer, binary.LittleEndian, uint32(len(s)))
	p.WriteString(s)
	return p
}

// int writes the smallest integer opcode for n.
func (p *pkl) int(n int64) *pkl {
	switch {
	case n >= 0 && n < 256:
		p.op('K', byte(n))
	case n >= 0 && n < 65536:
		p.op('M', byte(n), byte(n>>8))
	case n >= math.MinInt32 && n <= math.MaxInt32:
		p.WriteByte('J')
		binary.Write(&p.Buffer, binary.LittleEndian, int32(n))
	default:
		p.op(0x8a, 8)
		binary.Write(&p.Buffer, binary.LittleEndian, n)
	}
	return p
}

func (p *pkl) global(module, name string) *pkl {
	p.WriteByte('c')
	p.WriteString(module + "\n" + name + "\n")
	return p
}

// tuple writes MARK, the ints, TUPLE.
func (p *pkl) ints(ns ...int64) *pkl {
	p.op('(')
	for _, n := range ns {
		p.int(n)
	}
	return p.op('t')
}

// tt describes one tensor for statePickle.
type tt struct {
	name, key, class string // class: e.g. "FloatStorage"
	numel, offset    int64
	shape, stride    []int64
}

// tensor writes _rebuild_tensor_v2(storage, offset, size, stride, False,
// OrderedDict()) as torch 1.13 does (without memo).
func (p *pkl) tensor(x tt) *pkl {
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.op('(')
	p.op('(').str("storage").global("torch", x.class).str(x.key).str("cpu").int(x.numel).op('t', 'Q')
	p.int(x.offset).ints(x.shape...).ints(x.stride...)
	p.op(0x89).global("collections", "OrderedDict").op(')', 'R')
	return p.op('t', 'R')
}

// statePickle returns a protocol-2 pickle of a plain dict of the tensors.
func statePickle(ts []tt) []byte {
	p := &pkl{}
	p.op(0x80, 2, '}', '(')
	for _, x := range ts {
		p.str(x.name).tensor(x)
	}
	p.op('u', '.')
	return p.Bytes()
}

// contiguous returns the row-major strides of shape.
func contiguous(shape ...int64) []int64 {
	st := make([]int64, len(shape))
	s := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = s
		s *= shape[i]
	}
	return st
}

// zipEntry is one file of a test zip.
type zipEntry struct {
	name string
	data []byte
	// deflate compresses the entry; rawSize, when non-zero, overrides the
	// declared uncompressed size (a lying header).
	deflate bool
	rawSize uint64
}

// writeZip writes entries as a zip file at path.
func writeZip(t *testing.T, path string, entries []zipEntry) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		if e.rawSize != 0 {
			// Compress separately and write the entry raw with a lying size.
			var comp bytes.Buffer
			cw := zip.NewWriter(&comp)
			w, _ := cw.CreateHeader(&zip.FileHeader{Name: "x", Method: zip.Deflate})
			w.Write(e.data)
			cw.Close()
			cr, err := zip.NewReader(bytes.NewReader(comp.Bytes()), int64(comp.Len()))
			if err != nil {
				t.Fatal(err)
			}
			rc, _ := cr.File[0].OpenRaw()
			var raw bytes.Buffer
			raw.ReadFrom(rc)
			fh := &zip.FileHeader{Name: e.name, Method: zip.Deflate, CRC32: cr.File[0].CRC32,
				CompressedSize64: uint64(raw.Len()), UncompressedSize64: e.rawSize}
			w, err = zw.CreateRaw(fh)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(raw.Bytes())
			continue
		}
		method := zip.Store
		if e.deflate {
			method = zip.Deflate
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(e.data)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// torchEntries lays out a torch.save archive: prefix/data.pkl, the storages
// as prefix/data/<key>, prefix/version.
func torchEntries(prefix string, pickle []byte, storages map[string][]byte) []zipEntry {
	es := []zipEntry{{name: prefix + "/data.pkl", data: pickle}}
	for k, v := range storages {
		es = append(es, zipEntry{name: prefix + "/data/" + k, data: v})
	}
	return append(es, zipEntry{name: prefix + "/version", data: []byte("3\n")})
}

// f32bytes encodes float32 values little-endian.
func f32bytes(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// iota32 returns 0, 1, ..., n-1 as float32.
func iota32(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i)
	}
	return v
}

// rawST is a tensor for writeRawSafetensors: any dtype, raw bytes.
type rawST struct {
	name, dtype string
	shape       []int
	data        []byte
}

// writeRawSafetensors writes a safetensors file from raw tensors, with
// contiguous offsets in the given order.
func writeRawSafetensors(t *testing.T, path string, ts []rawST) {
	t.Helper()
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	var data []byte
	for i, x := range ts {
		if i > 0 {
			hdr.WriteByte(',')
		}
		writeJSONString(&hdr, x.name)
		hdr.WriteString(`:{"dtype":"` + x.dtype + `","shape":[`)
		for j, d := range x.shape {
			if j > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(itoa(int64(d)))
		}
		hdr.WriteString(`],"data_offsets":[` + itoa(int64(len(data))) + "," + itoa(int64(len(data)+len(x.data))) + "]}")
		data = append(data, x.data...)
	}
	hdr.WriteByte('}')
	writeSTBytes(t, path, hdr.Bytes(), data)
}

// writeSTBytes writes length prefix, header and data verbatim.
func writeSTBytes(t *testing.T, path string, header, data []byte) {
	t.Helper()
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	b.Write(data)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
