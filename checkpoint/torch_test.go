package checkpoint

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// goldenPickle returns data.pkl of the golden pytorch_model.bin.
func goldenPickle(t testing.TB) []byte {
	t.Helper()
	path := filepath.Join(goldenDir(t, "qwen3_gate_headwise"), "pytorch_model.bin")
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	st, _ := os.Stat(path)
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/data.pkl") {
			b, err := readEntry(f, maxPickleSize, st.Size())
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatal("no data.pkl")
	return nil
}

// TestGoldenPickleGlobals records exactly which globals torch 1.13 wrote.
func TestGoldenPickleGlobals(t *testing.T) {
	data := goldenPickle(t)
	var globals []string
	for i := 0; i < len(data); {
		j := bytes.Index(data[i:], []byte("c"))
		if j < 0 {
			break
		}
		i += j + 1
		if rest := data[i:]; bytes.HasPrefix(rest, []byte("torch")) || bytes.HasPrefix(rest, []byte("collections")) {
			parts := bytes.SplitN(rest, []byte("\n"), 3)
			globals = append(globals, string(parts[0])+"."+string(parts[1]))
		}
	}
	want := []string{"torch._utils._rebuild_tensor_v2", "torch.FloatStorage", "collections.OrderedDict"}
	if !reflect.DeepEqual(globals, want) {
		t.Fatalf("golden data.pkl globals %v, want %v", globals, want)
	}
	if data[0] != 0x80 || data[1] != 2 {
		t.Fatalf("protocol %d, want 2", data[1])
	}
}

// openTorch writes a torch zip with the given pickle and storages and opens it.
func openTorch(t *testing.T, pickle []byte, storages map[string][]byte) (*Checkpoint, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pytorch_model.bin")
	writeZip(t, path, torchEntries("archive", pickle, storages))
	c, err := OpenFile(path)
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, path, err
}

// TestTorchViews checks non-contiguous views, shared storages, broadcasts,
// scalars, offsets and empty tensors crafted in Go.
func TestTorchViews(t *testing.T) {
	base := iota32(24) // storage "0": 0..23
	ts := []tt{
		{name: "plain", key: "0", class: "FloatStorage", numel: 24, shape: []int64{2, 3, 4}, stride: contiguous(2, 3, 4)},
		{name: "transposed", key: "0", class: "FloatStorage", numel: 24, shape: []int64{4, 6}, stride: []int64{1, 4}},
		{name: "permuted", key: "0", class: "FloatStorage", numel: 24, shape: []int64{4, 2, 3}, stride: []int64{1, 12, 4}},
		{name: "column", key: "0", class: "FloatStorage", numel: 24, offset: 2, shape: []int64{6}, stride: []int64{4}},
		{name: "row", key: "0", class: "FloatStorage", numel: 24, offset: 8, shape: []int64{4}, stride: []int64{1}},
		{name: "rows", key: "0", class: "FloatStorage", numel: 24, offset: 1, shape: []int64{3, 2}, stride: []int64{8, 1}},
		{name: "expanded", key: "0", class: "FloatStorage", numel: 24, offset: 4, shape: []int64{3, 2}, stride: []int64{0, 1}},
		{name: "scalar", key: "0", class: "FloatStorage", numel: 24, offset: 23},
		{name: "empty", key: "0", class: "FloatStorage", numel: 24, offset: 0, shape: []int64{0, 5}, stride: []int64{5, 1}},
		{name: "ones", key: "0", class: "FloatStorage", numel: 24, offset: 5, shape: []int64{1, 3, 1}, stride: []int64{99, 1, 7}},
		{name: "ints", key: "1", class: "LongStorage", numel: 3, shape: []int64{3}, stride: []int64{1}},
	}
	ints := make([]byte, 24)
	for i, v := range []int64{-5, 1 << 60, 7} {
		binary.LittleEndian.PutUint64(ints[8*i:], uint64(v))
	}
	c, _, err := openTorch(t, statePickle(ts), map[string][]byte{"0": f32bytes(base...), "1": ints})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{
		"plain":      base,
		"transposed": {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23},
		"permuted":   {0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23},
		"column":     {2, 6, 10, 14, 18, 22},
		"row":        {8, 9, 10, 11},
		"rows":       {1, 2, 9, 10, 17, 18},
		"expanded":   {4, 5, 4, 5, 4, 5},
		"scalar":     {23},
		"empty":      {},
		"ones":       {5, 6, 7},
		"ints":       {-5, 1 << 60, 7},
	}
	for name, w := range want {
		got, err := c.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s: got %v, want %v", name, got, w)
		}
		g64, _ := c.Float64(name)
		for i := range w {
			if float32(g64[i]) != w[i] {
				t.Errorf("%s: Float64 %v", name, g64)
				break
			}
		}
	}
	if got, _ := c.Int64("ints"); !reflect.DeepEqual(got, []int64{-5, 1 << 60, 7}) {
		t.Errorf("ints: %v", got)
	}
	if raw, _ := c.Bytes("transposed"); !bytes.Equal(raw, f32bytes(want["transposed"]...)) {
		t.Errorf("Bytes of a transposed view")
	}
	if info, _ := c.Info("permuted"); !reflect.DeepEqual(info.Shape, []int{4, 2, 3}) || info.DType != "F32" {
		t.Errorf("info %+v", info)
	}
	if info, _ := c.Info("scalar"); len(info.Shape) != 0 {
		t.Errorf("scalar shape %v", info.Shape)
	}
	if c.tensors["ones"].stride != nil || c.tensors["row"].stride != nil || c.tensors["transposed"].stride == nil {
		t.Errorf("contiguity detection is off")
	}
}

// TestTorchSparseView reads a strided view too sparse for one window.
func TestTorchSparseView(t *testing.T) {
	n := int64(gatherSpanLimit/4 + 1024)
	ts := []tt{{name: "corners", key: "0", class: "FloatStorage", numel: n, shape: []int64{2, 2}, stride: []int64{n - 2, 1}}}
	st := make([]float32, n)
	st[0], st[1], st[n-2], st[n-1] = 1, 2, 3, 4
	c, _, err := openTorch(t, statePickle(ts), map[string][]byte{"0": f32bytes(st...)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Float32("corners")
	if err != nil || !reflect.DeepEqual(got, []float32{1, 2, 3, 4}) {
		t.Fatalf("got %v %v", got, err)
	}
}

// TestTorchDTypes reads every storage class.
func TestTorchDTypes(t *testing.T) {
	type sc struct {
		class, dtype string
		raw          []byte
		want         []float64
	}
	h := make([]byte, 4)
	binary.LittleEndian.PutUint16(h, Float32ToF16(1.5))
	binary.LittleEndian.PutUint16(h[2:], Float32ToF16(-0.25))
	bf := make([]byte, 4)
	binary.LittleEndian.PutUint16(bf, Float32ToBF16(3))
	binary.LittleEndian.PutUint16(bf[2:], Float32ToBF16(-1e20))
	d := make([]byte, 16)
	binary.LittleEndian.PutUint64(d, math.Float64bits(math.Pi))
	binary.LittleEndian.PutUint64(d[8:], math.Float64bits(-2))
	i32 := make([]byte, 8)
	binary.LittleEndian.PutUint32(i32, uint32(0xffffffff))
	binary.LittleEndian.PutUint32(i32[4:], 9)
	cases := []sc{
		{"HalfStorage", "F16", h, []float64{1.5, -0.25}},
		{"BFloat16Storage", "BF16", bf, []float64{3, float64(BF16ToFloat32(Float32ToBF16(-1e20)))}},
		{"DoubleStorage", "F64", d, []float64{math.Pi, -2}},
		{"IntStorage", "I32", i32, []float64{-1, 9}},
		{"ShortStorage", "I16", []byte{0xfe, 0xff, 3, 0}, []float64{-2, 3}},
		{"CharStorage", "I8", []byte{0x80, 5}, []float64{-128, 5}},
		{"ByteStorage", "U8", []byte{0x80, 5}, []float64{128, 5}},
		{"BoolStorage", "BOOL", []byte{1, 0}, []float64{1, 0}},
	}
	var ts []tt
	storages := map[string][]byte{}
	for i, c := range cases {
		key := string(rune('a' + i))
		ts = append(ts, tt{name: c.dtype, key: key, class: c.class, numel: 2, shape: []int64{2}, stride: []int64{1}})
		storages[key] = c.raw
	}
	ck, _, err := openTorch(t, statePickle(ts), storages)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		info, _ := ck.Info(c.dtype)
		if info.DType != c.dtype {
			t.Errorf("%s: dtype %s", c.class, info.DType)
		}
		got, err := ck.Float64(c.dtype)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v %v, want %v", c.class, got, err, c.want)
		}
		_, err = ck.Int64(c.dtype)
		if dtypes[c.dtype].integer != (err == nil) {
			t.Errorf("%s: Int64 error %v", c.class, err)
		}
	}
}

// TestTorchStructure covers what surrounds the tensors: an OrderedDict with
// _metadata (as HF's state_dict() pickles it), a wrapper dict with extras,
// parameters, protocol-4 opcodes.
func TestTorchStructure(t *testing.T) {
	storages := map[string][]byte{"0": f32bytes(1, 2, 3, 4)}
	w := tt{key: "0", class: "FloatStorage", numel: 4, shape: []int64{2, 2}, stride: []int64{2, 1}}

	t.Run("OrderedDict with _metadata", func(t *testing.T) {
		p := &pkl{}
		p.op(0x80, 2).global("collections", "OrderedDict").op('q', 0, ')', 'R', 'q', 1, '(')
		p.str("w").tensor(w)
		p.str("n").int(7)
		p.op('u')
		// BUILD {'_metadata': OrderedDict({'': {'version': 1}})}
		p.op('}').str("_metadata").op('h', 0, ')', 'R').str("").op('}').str("version").int(1).op('s', 's', 's', 'b', '.')
		c, _, err := openTorch(t, p.Bytes(), storages)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := c.Float32("w"); !reflect.DeepEqual(got, []float32{1, 2, 3, 4}) {
			t.Fatalf("w = %v", got)
		}
		if !reflect.DeepEqual(c.Extra(), map[string]any{"n": int64(7)}) {
			t.Fatalf("extra %v", c.Extra())
		}
	})

	t.Run("wrapper", func(t *testing.T) {
		build := func(big bool) []byte {
			p := &pkl{}
			p.op(0x80, 2, '}', '(')
			p.str("state_dict").op('}', '(')
			p.str("model.w").tensor(w)
			p.str("model.p").global("torch._utils", "_rebuild_parameter").op('(').tensor(w).op(0x88).global("collections", "OrderedDict").op(')', 'R', 't', 'R')
			p.op('u')
			p.str("epoch").int(3)
			p.str("lr").op('G').Write(binary.BigEndian.AppendUint64(nil, math.Float64bits(0.5)))
			p.str("history").op('}').str("loss").op(']', '(', 'G').Write(binary.BigEndian.AppendUint64(nil, math.Float64bits(1.5)))
			p.op('N', 0x88, 'e', 's')
			p.str("dtype").global("torch", "float16")
			p.str("opt").op('}').int(0).op('}').str("exp_avg").tensor(w).op('s', 's')
			if big { // LONG1 of 9 bytes: beyond int64
				p.str("big").op(0x8a, 9, 0, 0, 0, 0, 0, 0, 0, 0x80, 0)
			}
			p.op('u', '.')
			return p.Bytes()
		}
		_, _, err := openTorch(t, build(true), storages)
		wantErr(t, err, "9-byte integer does not fit in int64")
		c, _, err := openTorch(t, build(false), storages)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(c.Names(), []string{"model.p", "model.w"}) {
			t.Fatalf("names %v", c.Names())
		}
		want := map[string]any{
			"epoch":   int64(3),
			"lr":      0.5,
			"history": map[string]any{"loss": []any{1.5, nil, true}},
			"dtype":   "torch.float16",
			"opt":     map[string]any{"0": map[string]any{"exp_avg": Info{DType: "F32", Shape: []int{2, 2}, File: c.Files()[0]}}},
		}
		if !reflect.DeepEqual(c.Extra(), want) {
			t.Fatalf("extra\n%#v\nwant\n%#v", c.Extra(), want)
		}
	})

	t.Run("protocol 4", func(t *testing.T) {
		sg := func(p *pkl, m, n string) {
			p.op(0x8c, byte(len(m))).WriteString(m)
			p.op(0x94, 0x8c, byte(len(n))).WriteString(n)
			p.op(0x94, 0x93, 0x94)
		}
		p := &pkl{}
		p.op(0x80, 4, 0x95, 0, 0, 0, 0, 0, 0, 0, 0)
		sg(p, "collections", "OrderedDict")
		p.op(')', 'R', 0x94, '(')
		p.op(0x8c, 1, 'w', 0x94)
		sg(p, "torch._tensor", "_rebuild_from_type_v2")
		p.op('(')
		sg(p, "torch._utils", "_rebuild_tensor_v2")
		sg(p, "torch", "Tensor")
		p.op('(', '(', 0x8c, 7).WriteString("storage")
		sg(p, "torch", "FloatStorage")
		p.op(0x8c, 1, '0', 0x8c, 3).WriteString("cpu")
		p.op('K', 4, 't', 'Q', 'K', 0, 'K', 2, 'K', 2, 0x86, 'K', 1, 'K', 2, 0x86, 0x89)
		p.op('h', 2, ')', 'R', 't', '}', 't', 'R')
		p.op('u', '.')
		c, _, err := openTorch(t, p.Bytes(), storages)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := c.Float32("w"); !reflect.DeepEqual(got, []float32{1, 3, 2, 4}) {
			t.Fatalf("w = %v", got)
		}
	})

	t.Run("two state dicts", func(t *testing.T) {
		p := &pkl{}
		p.op(0x80, 2, '}', '(')
		p.str("model").op('}').str("w").tensor(w).op('s')
		p.str("ema").op('}').str("w").tensor(w).op('s')
		p.op('u', '.')
		_, path, err := openTorch(t, p.Bytes(), storages)
		wantErr(t, err, path, "several dicts of tensors (model, ema)")
	})
}

// TestTorchForbiddenGlobals checks that pickles reaching for code are refused
// with the global named.
func TestTorchForbiddenGlobals(t *testing.T) {
	cases := []struct {
		global string
		pickle []byte
	}{
		{"os.system", []byte("\x80\x02cos\nsystem\nq\x00X\x02\x00\x00\x00lsq\x01\x85q\x02Rq\x03.")},
		{"builtins.eval", []byte("\x80\x02cbuiltins\neval\nX\x06\x00\x00\x00print(1\x85R.")},
		{"subprocess.Popen", []byte("\x80\x02csubprocess\nPopen\nX\x02\x00\x00\x00ls\x85R.")},
		{"posix.system", []byte("\x80\x02cposix\nsystem\nX\x02\x00\x00\x00ls\x85R.")},
		{"builtins.getattr", []byte("\x80\x02cbuiltins\ngetattr\n.")},
		{"__builtin__.exec", []byte("\x80\x02}X\x01\x00\x00\x00xc__builtin__\nexec\nX\x01\x00\x00\x001\x85Rs.")},
		{"torch.load", []byte("\x80\x04\x8c\x05torch\x8c\x04load\x93.")},
		{"torch._utils._rebuild_tensor_v2x", []byte("\x80\x02ctorch._utils\n_rebuild_tensor_v2x\n.")},
	}
	for _, c := range cases {
		t.Run(c.global, func(t *testing.T) {
			_, path, err := openTorch(t, c.pickle, nil)
			wantErr(t, err, "checkpoint: "+path+": data.pkl: forbidden pickle global \""+c.global+"\" (only tensor and OrderedDict globals are allowed)")
			if !errors.Is(err, ErrForbiddenGlobal) {
				t.Fatal("not ErrForbiddenGlobal")
			}
		})
	}
	// A forbidden global hidden in a tensor's position.
	p := &pkl{}
	p.op(0x80, 2, '}').str("w").global("torch._utils", "_rebuild_tensor_v2").op('(').global("os", "system").op('t', 'R', 's', '.')
	_, _, err := openTorch(t, p.Bytes(), nil)
	wantErr(t, err, `forbidden pickle global "os.system"`)
	// Allowed globals still cannot be called where they are not functions.
	p = &pkl{}
	p.op(0x80, 2).global("torch", "FloatStorage").op(')', 'R', '.')
	_, _, err = openTorch(t, p.Bytes(), nil)
	wantErr(t, err, `global "torch.FloatStorage" cannot be called at byte 23 (opcode REDUCE 0x52)`)
}

// TestTorchBadInput feeds broken archives and pickles.
func TestTorchBadInput(t *testing.T) {
	good := []tt{{name: "w", key: "0", class: "FloatStorage", numel: 4, shape: []int64{2, 2}, stride: []int64{2, 1}}}
	st := map[string][]byte{"0": f32bytes(1, 2, 3, 4)}
	gp := statePickle(good)

	t.Run("truncated pickle", func(t *testing.T) {
		_, path, err := openTorch(t, gp[:len(gp)-1], st)
		wantErr(t, err, path, "data.pkl: truncated pickle")
		_, _, err = openTorch(t, gp[:40], st)
		wantErr(t, err, "data.pkl: truncated pickle")
	})
	t.Run("every truncation of the golden pickle", func(t *testing.T) {
		data := goldenPickle(t)
		for n := 0; n < len(data); n++ {
			if _, err := unpickle(data[:n], fakeStorages); err == nil {
				t.Fatalf("pickle cut to %d bytes accepted", n)
			}
		}
		if _, err := unpickle(data, fakeStorages); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unknown opcode", func(t *testing.T) {
		_, path, err := openTorch(t, []byte("\x80\x02}\xff."), st)
		wantErr(t, err, path, "data.pkl: unsupported pickle opcode at byte 3 (opcode 0xff)")
	})
	t.Run("unsupported opcode", func(t *testing.T) {
		_, _, err := openTorch(t, []byte("\x80\x02(cos\nsystem\nS'ls'\ni."), st)
		wantErr(t, err, "forbidden")
		_, _, err = openTorch(t, []byte("\x80\x02I1\n."), st)
		wantErr(t, err, "unsupported pickle opcode at byte 2 (opcode INT 0x49)")
	})
	t.Run("storage too small", func(t *testing.T) {
		bad := []tt{{name: "w", key: "0", class: "FloatStorage", numel: 4, offset: 1, shape: []int64{2, 2}, stride: []int64{2, 1}}}
		_, path, err := openTorch(t, statePickle(bad), st)
		wantErr(t, err, path, `tensor "w": view (offset 1, size [2 2], stride [2 1]) needs 5 elements but storage archive/data/0 holds 4 F32 elements`)
		bad = []tt{{name: "w", key: "0", class: "FloatStorage", numel: 4, shape: []int64{3, 2}, stride: []int64{1, 3}}}
		_, _, err = openTorch(t, statePickle(bad), st)
		wantErr(t, err, `tensor "w"`, "needs 6 elements")
	})
	t.Run("entry size disagrees", func(t *testing.T) {
		bad := []tt{{name: "w", key: "0", class: "FloatStorage", numel: 5, shape: []int64{2, 2}, stride: []int64{2, 1}}}
		_, path, err := openTorch(t, statePickle(bad), st)
		wantErr(t, err, path, `storage "0": archive entry archive/data/0 holds 16 bytes but the pickle declares 5 elements of F32 (20 bytes)`)
	})
	t.Run("missing storage", func(t *testing.T) {
		_, _, err := openTorch(t, gp, nil)
		wantErr(t, err, `storage "0": archive entry archive/data/0 is missing`)
	})
	t.Run("negative stride", func(t *testing.T) {
		bad := []tt{{name: "w", key: "0", class: "FloatStorage", numel: 4, offset: 3, shape: []int64{4}, stride: []int64{-1}}}
		_, _, err := openTorch(t, statePickle(bad), st)
		wantErr(t, err, `tensor "w": stride[0] = -1 is negative`)
	})
	t.Run("index overflow", func(t *testing.T) {
		bad := []tt{{name: "w", key: "0", class: "FloatStorage", numel: 4, shape: []int64{2, 2}, stride: []int64{math.MaxInt64, 1}}}
		_, _, err := openTorch(t, statePickle(bad), st)
		wantErr(t, err, `tensor "w"`, "overflows int64 element indices")
	})
	t.Run("broadcast bomb", func(t *testing.T) {
		bad := []tt{{name: "w", key: "0", class: "FloatStorage", numel: 4, shape: []int64{1 << 40}, stride: []int64{0}}}
		_, _, err := openTorch(t, statePickle(bad), st)
		wantErr(t, err, `tensor "w"`, "more than its storage")
	})
	t.Run("zip bomb storage", func(t *testing.T) {
		huge := int64(1) << 38 // elements: 1 TiB of F32
		bad := []tt{{name: "w", key: "0", class: "FloatStorage", numel: huge, shape: []int64{huge}, stride: []int64{1}}}
		path := filepath.Join(t.TempDir(), "bomb.bin")
		writeZip(t, path, []zipEntry{
			{name: "archive/data.pkl", data: statePickle(bad)},
			{name: "archive/data/0", data: make([]byte, 1<<20), rawSize: uint64(huge) * 4},
		})
		_, err := OpenFile(path)
		wantErr(t, err, path, `storage "0": compressed entry archive/data/0 declares 1099511627776 bytes uncompressed (limit 1073741824`)
	})
	t.Run("zip bomb ratio", func(t *testing.T) {
		n := int64(64 << 20)
		bad := []tt{{name: "w", key: "0", class: "FloatStorage", numel: n / 4, shape: []int64{n / 4}, stride: []int64{1}}}
		path := filepath.Join(t.TempDir(), "bomb.bin")
		writeZip(t, path, []zipEntry{
			{name: "archive/data.pkl", data: statePickle(bad)},
			{name: "archive/data/0", data: make([]byte, 16), rawSize: uint64(n)},
		})
		_, err := OpenFile(path)
		wantErr(t, err, path, "more than deflate can produce")
	})
	t.Run("zip bomb lying size", func(t *testing.T) {
		// Declares 16 bytes, inflates to 1 MiB: the read stops at 16 and
		// archive/zip notices the lie when it reaches the declared end.
		path := filepath.Join(t.TempDir(), "lie.bin")
		writeZip(t, path, []zipEntry{
			{name: "archive/data.pkl", data: gp},
			{name: "archive/data/0", data: make([]byte, 1<<20), rawSize: 16},
		})
		c, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got, err := c.Float32("w"); err != nil || len(got) != 4 {
			t.Fatalf("%v %v", got, err)
		}
	})
	t.Run("huge data.pkl", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bomb.bin")
		writeZip(t, path, []zipEntry{{name: "archive/data.pkl", data: make([]byte, 1<<16), rawSize: 2 << 30}})
		_, err := OpenFile(path)
		wantErr(t, err, path, "data.pkl: entry declares 2147483648 bytes (limit 1073741824)")
	})
	t.Run("deflated storage", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "deflated.bin")
		writeZip(t, path, []zipEntry{
			{name: "archive/data.pkl", data: gp, deflate: true},
			{name: "archive/data/0", data: st["0"], deflate: true},
		})
		c, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got, _ := c.Float32("w"); !reflect.DeepEqual(got, []float32{1, 2, 3, 4}) {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("byteorder", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "big.bin")
		writeZip(t, path, append(torchEntries("archive", gp, st), zipEntry{name: "archive/byteorder", data: []byte("big")}))
		_, err := OpenFile(path)
		wantErr(t, err, path, `archive/byteorder is "big"; only little-endian`)
		writeZip(t, path, append(torchEntries("archive", gp, st), zipEntry{name: "archive/byteorder", data: []byte("little")}))
		c, err := OpenFile(path)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
	t.Run("no data.pkl", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "x.bin")
		writeZip(t, path, []zipEntry{{name: "data.pkl", data: gp}})
		_, err := OpenFile(path)
		wantErr(t, err, path, "no <folder>/data.pkl")
	})
	t.Run("two data.pkl", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "x.bin")
		writeZip(t, path, []zipEntry{{name: "a/data.pkl", data: gp}, {name: "b/data.pkl", data: gp}})
		_, err := OpenFile(path)
		wantErr(t, err, path, "data.pkl in 2 top folders (a, b)")
	})
	t.Run("not a dict", func(t *testing.T) {
		_, _, err := openTorch(t, []byte("\x80\x02]."), st)
		wantErr(t, err, "top-level object is a list, not a dict of tensors")
	})
	t.Run("storage type clash", func(t *testing.T) {
		bad := []tt{good[0], {name: "v", key: "0", class: "IntStorage", numel: 4, shape: []int64{4}, stride: []int64{1}}}
		_, _, err := openTorch(t, statePickle(bad), st)
		wantErr(t, err, `storage "0" is loaded twice with different types`)
	})
	t.Run("cyclic extra", func(t *testing.T) {
		// l = []; l.append(l); {"w": tensor, "l": l}
		p := &pkl{}
		p.op(0x80, 2, '}', '(').str("w").tensor(good[0]).str("l").op(']', 'q', 0, 'h', 0, 'a', 'u', '.')
		_, _, err := openTorch(t, p.Bytes(), st)
		wantErr(t, err, `entry "l"`, "nested deeper than 64 levels (or cyclic)")
	})
	t.Run("exponential extra", func(t *testing.T) {
		// l0 = [1]; l(i+1) = [li, li]: 2^40 leaves by reference.
		p := &pkl{}
		p.op(0x80, 2, '}', '(').str("w").tensor(good[0]).str("l").op(']', 'K', 1, 'a')
		for i := 0; i < 40; i++ {
			p.op('q', 0, '0', '(', 'h', 0, 'h', 0, 'l')
		}
		p.op('u', '.')
		_, _, err := openTorch(t, p.Bytes(), st)
		wantErr(t, err, `entry "l"`, "more than 1048576 items")
	})
}

// fakeStorages resolves persistent ids to zero-filled in-memory storages
// that allocate nothing (for pickle-only tests and fuzzing).
func fakeStorages(pid any) (any, error) {
	cls, key, numel, err := parsePersistentID(pid)
	if err != nil {
		return nil, err
	}
	n := numel * int64(dtypeSize(cls.dtype))
	if numel > 1<<24 || n > 1<<24 {
		return nil, errors.New("fake storage too big")
	}
	return &pyStorage{key: key, dtype: cls.dtype, numel: numel, src: zeroSource(n), name: "data/" + key}, nil
}

// zeroSource is n zero bytes.
type zeroSource int64

func (z zeroSource) readAt(p []byte, off int64) error {
	if off < 0 || off+int64(len(p)) > int64(z) {
		return errors.New("zeroSource: read out of range")
	}
	clear(p)
	return nil
}

// TestTorchWithPython compares against files written by real torch when
// python3 with torch is installed (skipped otherwise).
func TestTorchWithPython(t *testing.T) {
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import torch").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Skip("no python3 with torch installed (apt-get install python3-torch)")
	}
	dir := t.TempDir()
	script := `
import torch, collections, json, sys
d = sys.argv[1]
torch.manual_seed(0)
a = torch.randn(5, 7)
lin = torch.nn.Linear(3, 4)
sd = collections.OrderedDict()
sd['t'] = a.t()
sd['row'] = a[2]
sd['col'] = a[:, 3]
sd['sub'] = a[1:4, 2:6]
sd['perm'] = torch.randn(2, 3, 4).permute(2, 0, 1)
sd['bf'] = torch.randn(3, 2).to(torch.bfloat16)
sd['h'] = torch.tensor([1.5, -2.25, 6e-8, 65504., float('inf')], dtype=torch.float16)
sd['i'] = torch.tensor([[1, -2], [3, 2**31 - 1]], dtype=torch.int32)
sd['l'] = torch.tensor([-(2**62), 5])
sd['b'] = torch.tensor([True, False, True])
sd['u8'] = torch.tensor([255, 1], dtype=torch.uint8)
sd['i8'] = torch.tensor([-128, 1], dtype=torch.int8)
sd['s16'] = torch.tensor([-3, 1], dtype=torch.int16)
sd['d'] = torch.randn(2, 2, dtype=torch.float64).t()
sd['e'] = torch.arange(3.).expand(2, 3)
sd['p'] = torch.nn.Parameter(torch.randn(2))
sd['scalar'] = torch.tensor(3.0)
sd['empty'] = torch.zeros(0, 5)
sd.update(lin.state_dict())
want = {k: {'shape': list(v.shape), 'values': v.detach().double().contiguous().view(-1).tolist()} for k, v in sd.items()}
json.dump(want, open(d + '/want.json', 'w'))
torch.save(sd, d + '/p2.bin')
torch.save(sd, d + '/p4.pt', pickle_protocol=4)
torch.save({'state_dict': lin.state_dict(), 'epoch': 3, 'dt': torch.float16, 'hist': [1.5, None]}, d + '/wrapped.pth')
torch.save(sd, d + '/legacy.bin', _use_new_zipfile_serialization=False)
`
	if out, err := exec.Command(python, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var want map[string]struct {
		Shape  []int
		Values []any // numbers, or "inf"-like strings never occur: json.dump writes Infinity
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "want.json"))
	raw = bytes.ReplaceAll(raw, []byte("Infinity"), []byte(`"inf"`))
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"p2.bin", "p4.pt"} {
		c, err := OpenFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Names()) != len(want) {
			t.Fatalf("%s: %d tensors, want %d", file, len(c.Names()), len(want))
		}
		for name, w := range want {
			info, ok := c.Info(name)
			if !ok || !reflect.DeepEqual(info.Shape, w.Shape) {
				t.Fatalf("%s %s: info %+v, want shape %v", file, name, info, w.Shape)
			}
			got, err := c.Float64(name)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range w.Values {
				wv := math.Inf(1)
				if f, ok := v.(float64); ok {
					wv = f
				}
				if got[i] != wv {
					t.Fatalf("%s %s[%d] = %v, want %v", file, name, i, got[i], wv)
				}
			}
		}
		c.Close()
	}
	c, err := OpenFile(filepath.Join(dir, "wrapped.pth"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Names(), []string{"bias", "weight"}) {
		t.Fatalf("wrapped names %v", c.Names())
	}
	if ex := c.Extra(); ex["epoch"] != int64(3) || ex["dt"] != "torch.float16" || !reflect.DeepEqual(ex["hist"], []any{1.5, nil}) {
		t.Fatalf("extra %v", ex)
	}
	c.Close()
	_, err = OpenFile(filepath.Join(dir, "legacy.bin"))
	if !errors.Is(err, ErrLegacyFormat) {
		t.Fatalf("legacy: %v", err)
	}
}

// TestConcurrentReads reads one checkpoint from several goroutines (run with
// -race).
func TestConcurrentReads(t *testing.T) {
	c, err := OpenFile(filepath.Join(goldenDir(t, "qwen3_gate_headwise"), "pytorch_model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	want := map[string][]float32{}
	for _, n := range c.Names() {
		want[n], _ = c.Float32(n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, n := range c.Names() {
				got, err := c.Float32(n)
				if err != nil || !reflect.DeepEqual(got, want[n]) {
					errs <- fmt.Errorf("%s: %v", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
