package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestGoldenSafetensorsVsPyTorch checks that the torch.save file and the
// safetensors file of the same state dict read bit for bit identical.
func TestGoldenSafetensorsVsPyTorch(t *testing.T) {
	dir := goldenDir(t, "qwen3_gate_headwise")
	st, err := OpenFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pt, err := OpenFile(filepath.Join(dir, "pytorch_model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer pt.Close()
	if st.Format() != FormatSafetensors || pt.Format() != FormatPyTorch {
		t.Fatalf("formats %q, %q", st.Format(), pt.Format())
	}
	if !reflect.DeepEqual(st.Names(), pt.Names()) {
		t.Fatalf("names differ:\n%v\n%v", st.Names(), pt.Names())
	}
	if len(st.Names()) != 35 {
		t.Fatalf("%d tensors, want 35", len(st.Names()))
	}
	total := 0
	for _, name := range st.Names() {
		a, _ := st.Info(name)
		b, _ := pt.Info(name)
		if a.DType != "F32" || b.DType != "F32" || !reflect.DeepEqual(a.Shape, b.Shape) {
			t.Fatalf("%s: info %+v vs %+v", name, a, b)
		}
		x, err := st.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		y, err := pt.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				t.Fatalf("%s[%d]: %v vs %v", name, i, x[i], y[i])
			}
		}
		rb, _ := st.Bytes(name)
		pb, _ := pt.Bytes(name)
		if !bytes.Equal(rb, pb) {
			t.Fatalf("%s: raw bytes differ", name)
		}
		total += len(x)
	}
	if total != 144672 {
		t.Fatalf("%d parameters, want 144672 (README)", total)
	}
	if m := st.Metadata(); m["format"] != "pt" {
		t.Fatalf("metadata %v", m)
	}
	if pt.Metadata() != nil || pt.Extra() != nil {
		t.Fatalf("pytorch metadata %v extra %v, want nil", pt.Metadata(), pt.Extra())
	}
	if got := pt.Files(); len(got) != 1 || got[0] != filepath.Join(dir, "pytorch_model.bin") {
		t.Fatalf("Files() = %v", got)
	}
}

// TestOpenDir checks the detection order of Open.
func TestOpenDir(t *testing.T) {
	dir := goldenDir(t, "qwen3_gate_headwise")
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.Format() != FormatSafetensors || c.Files()[0] != filepath.Join(dir, "model.safetensors") {
		t.Fatalf("Open picked %s %v", c.Format(), c.Files())
	}
	c.Close()

	// Only pytorch_model.bin present.
	tmp := t.TempDir()
	data, err := os.ReadFile(filepath.Join(dir, "pytorch_model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(tmp, "pytorch_model.bin"), data, 0o644)
	c, err = Open(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if c.Format() != FormatPyTorch {
		t.Fatalf("format %s", c.Format())
	}
	c.Close()

	_, err = Open(t.TempDir())
	wantErr(t, err, "no checkpoint found", "model.safetensors.index.json", "model.safetensors,", "pytorch_model.bin.index.json", "pytorch_model.bin)")
	_, err = Open(filepath.Join(tmp, "nope"))
	wantErr(t, err, "nope")
	c, err = Open(filepath.Join(tmp, "pytorch_model.bin")) // a file: OpenFile
	if err != nil || c.Format() != FormatPyTorch {
		t.Fatalf("Open(file): %v", err)
	}
	c.Close()
}

// TestGoldenBF16 checks that the BF16 file holds the F32 weights rounded to
// nearest even.
func TestGoldenBF16(t *testing.T) {
	dir := goldenDir(t, "qwen3_gate_headwise")
	f32, err := OpenFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	bf, err := OpenFile(filepath.Join(dir, "model.bf16.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer bf.Close()
	for _, name := range bf.Names() {
		info, _ := bf.Info(name)
		if info.DType != "BF16" {
			t.Fatalf("%s: dtype %s", name, info.DType)
		}
		want, err := f32.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := bf.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := bf.Bytes(name)
		for i := range want {
			r := Float32ToBF16(want[i])
			if math.Float32bits(got[i]) != math.Float32bits(BF16ToFloat32(r)) || binary.LittleEndian.Uint16(raw[2*i:]) != r {
				t.Fatalf("%s[%d]: got %v, want bf16(%v) = %v", name, i, got[i], want[i], BF16ToFloat32(r))
			}
		}
		g64, _ := bf.Float64(name)
		if float32(g64[0]) != got[0] {
			t.Fatalf("Float64 disagrees with Float32")
		}
	}
}

// TestGoldenDTypes reads the I64, F32 and F64 golden tensors.
func TestGoldenDTypes(t *testing.T) {
	dir := goldenDir(t, "qwen3_gate_headwise")
	g, err := OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	info, ok := g.Info("input_ids")
	if !ok || info.DType != "I64" || !reflect.DeepEqual(info.Shape, []int{2, 48}) {
		t.Fatalf("input_ids: %+v", info)
	}
	ids, err := g.Int64("input_ids")
	if err != nil {
		t.Fatal(err)
	}
	fids, _ := g.Float32("input_ids")
	for i, id := range ids {
		if id < 0 || id >= 512 || float32(id) != fids[i] {
			t.Fatalf("input_ids[%d] = %d (float %v)", i, id, fids[i])
		}
	}
	logits, err := g.Float32("logits")
	if err != nil || len(logits) != 2*48*512 {
		t.Fatalf("logits: %d values, %v", len(logits), err)
	}
	_, err = g.Int64("logits")
	wantErr(t, err, "golden.safetensors", `tensor "logits"`, "F32 is not an integer type")
	_, err = g.Float32("nope")
	wantErr(t, err, `no tensor "nope"`)

	d, err := OpenFile(filepath.Join(dir, "diagnostics.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	info, _ = d.Info("neff")
	if info.DType != "F64" {
		t.Fatalf("neff dtype %s", info.DType)
	}
	neff, err := d.Float64("neff")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range neff {
		if !(v >= 1) { // 1/sum a^2 >= 1 for a probability row
			t.Fatalf("neff %v < 1", v)
		}
	}
	n32, _ := d.Float32("neff")
	if n32[5] != float32(neff[5]) {
		t.Fatalf("F64→F32 conversion: %v vs %v", n32[5], neff[5])
	}
}

// TestF16 writes F16 specials and reads them back.
func TestF16(t *testing.T) {
	bits := []uint16{
		0x0000, 0x8000, // ±0
		0x0001, 0x03ff, 0x8001, // subnormals
		0x0400, 0x3c00, 0xbc00, 0x7bff, 0x3555, // normals
		0x7c00, 0xfc00, // ±Inf
		0x7e00, 0x7c01, 0xfe00, // NaNs
	}
	want := []float32{
		0, float32(math.Copysign(0, -1)),
		float32(math.Ldexp(1, -24)), float32(math.Ldexp(1023, -24)), -float32(math.Ldexp(1, -24)),
		float32(math.Ldexp(1, -14)), 1, -1, 65504, 0.333251953125,
		float32(math.Inf(1)), float32(math.Inf(-1)),
	}
	raw := make([]byte, 2*len(bits))
	for i, b := range bits {
		binary.LittleEndian.PutUint16(raw[2*i:], b)
	}
	path := filepath.Join(t.TempDir(), "f16.safetensors")
	writeRawSafetensors(t, path, []rawST{{"h", "F16", []int{len(bits)}, raw}})
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Float32("h")
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		if math.Float32bits(got[i]) != math.Float32bits(w) {
			t.Errorf("half %#04x: got %v (%#08x), want %v", bits[i], got[i], math.Float32bits(got[i]), w)
		}
	}
	for i := len(want); i < len(bits); i++ {
		if !math.IsNaN(float64(got[i])) || math.Signbit(float64(got[i])) != (bits[i]&0x8000 != 0) {
			t.Errorf("half %#04x: got %v, want a NaN of the same sign", bits[i], got[i])
		}
	}
	g64, _ := c.Float64("h")
	if g64[2] != math.Ldexp(1, -24) || !math.Signbit(g64[1]) {
		t.Errorf("Float64: %v", g64[:3])
	}
}

// TestF16Exhaustive checks every half value against an independent formula
// and the round trip through Float32ToF16.
func TestF16Exhaustive(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := F16ToFloat32(uint16(h))
		exp, mant := (h>>10)&0x1f, h&0x3ff
		var want float64
		switch {
		case exp == 0x1f && mant != 0:
			if !math.IsNaN(float64(f)) {
				t.Fatalf("%#04x: %v, want NaN", h, f)
			}
			continue
		case exp == 0x1f:
			want = math.Inf(1)
		case exp == 0:
			want = math.Ldexp(float64(mant), -24)
		default:
			want = math.Ldexp(1+float64(mant)/1024, exp-15)
		}
		if h&0x8000 != 0 {
			want = -want
		}
		if float64(f) != want || math.Signbit(float64(f)) != (h&0x8000 != 0) {
			t.Fatalf("%#04x: %v, want %v", h, f, want)
		}
		if back := Float32ToF16(f); back != uint16(h) {
			t.Fatalf("%#04x: round trip gives %#04x", h, back)
		}
	}
	// Rounding: ties to even, overflow to Inf, underflow to zero.
	cases := []struct {
		f    float32
		want uint16
	}{
		{1 + 1.0/2048, 0x3c00},             // tie, even stays
		{1 + 3.0/2048, 0x3c02},             // tie, odd rounds up
		{1 + 1.0/2048 + 1.0/65536, 0x3c01}, // above the tie
		{65520, 0x7c00},                    // rounds to Inf
		{65519, 0x7bff},
		{float32(math.Ldexp(1, -25)), 0x0000},      // tie with 0: even
		{float32(math.Ldexp(1.5, -25)), 0x0001},    // above the tie
		{float32(math.Ldexp(3, -25)), 0x0002},      // 1.5 ulp: tie, to even
		{-float32(math.Ldexp(1, -30)), 0x8000},     // -0
		{float32(math.Ldexp(1023.5, -24)), 0x0400}, // subnormal rounds into the first normal
	}
	for _, c := range cases {
		if got := Float32ToF16(c.f); got != c.want {
			t.Errorf("Float32ToF16(%v) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}

// TestBF16Rounding checks Float32ToBF16's round-to-nearest-even.
func TestBF16Rounding(t *testing.T) {
	cases := []struct {
		bits uint32
		want uint16
	}{
		{0x3f808000, 0x3f80}, // tie, even stays
		{0x3f818000, 0x3f82}, // tie, odd rounds up
		{0x3f808001, 0x3f81},
		{0x3f807fff, 0x3f80},
		{0x7f7fffff, 0x7f80}, // max float rounds to Inf
		{0xff800000, 0xff80}, // -Inf
	}
	for _, c := range cases {
		if got := Float32ToBF16(math.Float32frombits(c.bits)); got != c.want {
			t.Errorf("Float32ToBF16(%#08x) = %#04x, want %#04x", c.bits, got, c.want)
		}
	}
	if !math.IsNaN(float64(BF16ToFloat32(Float32ToBF16(float32(math.NaN()))))) {
		t.Error("NaN did not stay NaN")
	}
	if got := Float32ToBF16(math.Float32frombits(0x7f800001)); got&0x7f != 0x40 && got&0x7fff <= 0x7f80 {
		t.Errorf("signalling NaN with low payload became %#04x", got)
	}
}

// TestWriteSafetensors round-trips F32, F64, I64 and I32 with metadata.
func TestWriteSafetensors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.safetensors")
	f32 := []float32{1.5, float32(math.Inf(-1)), -0, 3e-42}
	f64 := []float64{math.Pi, -1e300, math.SmallestNonzeroFloat64}
	i64 := []int64{math.MinInt64, -1, 0, math.MaxInt64, 7, 8}
	i32 := []int32{math.MinInt32, 5}
	tensors := []Tensor{
		{Name: "z.f32", Shape: []int{2, 2}, Data: f32},
		{Name: "a.f64", Shape: []int{3}, Data: f64},
		{Name: "m.i64", Shape: []int{2, 1, 3}, Data: i64},
		{Name: "b.i32", Shape: []int{2}, Data: i32},
		{Name: "scalar", Shape: []int{}, Data: []float32{42}},
		{Name: "empty", Shape: []int{0, 3}, Data: []float32(nil)},
		{Name: `odd "<name>" ü`, Shape: []int{1}, Data: []bool{true}},
	}
	meta := map[string]string{"format": "pt", "note": `quote " and <tag>`}
	for round := 0; round < 2; round++ { // the second round overwrites
		if err := WriteSafetensors(path, tensors, meta); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries after writing, want 1 (temp file left behind?)", len(ents))
	}
	raw, _ := os.ReadFile(path)
	hlen := binary.LittleEndian.Uint64(raw)
	if (8+hlen)%8 != 0 || !bytes.HasPrefix(raw[8:], []byte(`{"__metadata__":`)) {
		t.Fatalf("header length %d, header %q", hlen, raw[8:40])
	}
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wantNames := []string{"a.f64", "b.i32", "empty", "m.i64", `odd "<name>" ü`, "scalar", "z.f32"}
	if !reflect.DeepEqual(c.Names(), wantNames) {
		t.Fatalf("names %q", c.Names())
	}
	if !reflect.DeepEqual(c.Metadata(), meta) {
		t.Fatalf("metadata %v", c.Metadata())
	}
	// Data are in sorted-name order.
	var prevEnd int64
	for _, n := range wantNames {
		info, _ := c.Info(n)
		src := c.tensors[n].src.(sectionSource)
		if src.base < prevEnd {
			t.Fatalf("%s stored before the previous tensor", info.Name)
		}
		prevEnd = src.base + src.n
	}
	gf32, _ := c.Float32("z.f32")
	for i := range f32 {
		if math.Float32bits(gf32[i]) != math.Float32bits(f32[i]) {
			t.Fatalf("f32 %v vs %v", gf32, f32)
		}
	}
	if g, _ := c.Float64("a.f64"); !reflect.DeepEqual(g, f64) {
		t.Fatalf("f64 %v", g)
	}
	if g, _ := c.Int64("m.i64"); !reflect.DeepEqual(g, i64) {
		t.Fatalf("i64 %v", g)
	}
	if g, _ := c.Int64("b.i32"); !reflect.DeepEqual(g, []int64{math.MinInt32, 5}) {
		t.Fatalf("i32 %v", g)
	}
	if info, _ := c.Info("m.i64"); info.DType != "I64" || !reflect.DeepEqual(info.Shape, []int{2, 1, 3}) {
		t.Fatalf("info %+v", info)
	}
	if g, _ := c.Float32("scalar"); len(g) != 1 || g[0] != 42 {
		t.Fatalf("scalar %v", g)
	}
	if g, err := c.Float32("empty"); err != nil || len(g) != 0 {
		t.Fatalf("empty %v %v", g, err)
	}
	if g, _ := c.Int64(`odd "<name>" ü`); g[0] != 1 {
		t.Fatalf("bool %v", g)
	}

	// Errors leave nothing behind and name the tensor.
	bad := [][]Tensor{
		{{Name: "x", Shape: []int{3}, Data: []float32{1, 2}}},
		{{Name: "x", Shape: []int{1}, Data: []string{"a"}}},
		{{Name: "x", Shape: []int{1}, Data: []float32{1}}, {Name: "x", Shape: []int{1}, Data: []float32{1}}},
		{{Name: "x", Shape: []int{-1}, Data: []float32{1}}},
		{{Name: "__metadata__", Shape: []int{1}, Data: []float32{1}}},
	}
	for _, ts := range bad {
		p := filepath.Join(dir, "bad.safetensors")
		wantErr(t, WriteSafetensors(p, ts, nil), "bad.safetensors", ts[0].Name)
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("bad file was written")
		}
	}
	ents, _ = os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("failed writes left %d entries", len(ents))
	}
	wantErr(t, WriteSafetensors(filepath.Join(dir, "no", "dir.safetensors"), tensors, nil), "no")
}

// TestBadSafetensors feeds broken files; each error must name the file and,
// where relevant, the tensor and the field.
func TestBadSafetensors(t *testing.T) {
	dir := t.TempDir()
	goodHeader := `{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`
	data16 := make([]byte, 16)
	cases := []struct {
		name   string
		header string
		data   []byte
		raw    []byte // whole file, instead of header+data
		want   []string
	}{
		{name: "tiny", raw: []byte{1, 2, 3}, want: []string{"3 bytes, too short"}},
		{name: "header beyond file", raw: append([]byte{0xff, 0xff, 0, 0, 0, 0, 0, 0}, `{}`...), want: []string{"header length 65535 exceeds the file (2 bytes"}},
		{name: "truncated", header: goodHeader, data: data16[:10], want: []string{`tensor "a"`, "data_offsets [0, 16] exceed the data section (10 bytes)"}},
		{name: "not json", header: `{"a": {"dtype":`, want: []string{"header: not valid JSON"}},
		{name: "not object", header: `[1, 2]`, want: []string{"header: not a JSON object"}},
		{name: "trailing", header: `{} x`, want: []string{"header: not valid JSON"}},
		{name: "bad utf8", header: "{\"\xff\":1}", want: []string{"not valid UTF-8"}},
		{name: "duplicate", header: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, data: make([]byte, 8), want: []string{`duplicate key "a"`}},
		{name: "entry not object", header: `{"a":[1]}`, want: []string{`tensor "a"`, "entry: not a JSON object"}},
		{name: "dtype not string", header: `{"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, `"dtype" is 4, not a string`}},
		{name: "shape not array", header: `{"a":{"dtype":"F32","shape":{},"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, `"shape" is {}, not an array`}},
		{name: "missing dtype", header: `{"a":{"shape":[1],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, `missing "dtype"`}},
		{name: "missing shape", header: `{"a":{"dtype":"F32","data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, `missing "shape"`}},
		{name: "missing offsets", header: `{"a":{"dtype":"F32","shape":[1]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, `missing "data_offsets"`}},
		{name: "unknown dtype", header: `{"a":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, `unknown dtype "F8_E4M3"`}},
		{name: "negative dim", header: `{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, "shape[0] = -1 is not a non-negative int64"}},
		{name: "float dim", header: `{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, "shape[0] = 1.0"}},
		{name: "string dim", header: `{"a":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, `shape[0] = "1"`}},
		{name: "shape overflow", header: `{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}`, data: make([]byte, 4), want: []string{`tensor "a"`, "shape [4294967296 4294967296] of F32 overflows int64"}},
		{name: "shape mismatch", header: `{"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}}`, data: data16, want: []string{`tensor "a"`, "shape [2 3] of F32 needs 24 bytes but data_offsets [0, 16] span 16"}},
		{name: "offsets count", header: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, data: data16, want: []string{`tensor "a"`, "data_offsets has 1 entries"}},
		{name: "negative offset", header: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}}`, data: data16, want: []string{`tensor "a"`, "data_offsets[0] = -4"}},
		{name: "reversed offsets", header: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}}`, data: data16, want: []string{`tensor "a"`, "data_offsets [8, 4] end before they begin"}},
		{name: "huge offset", header: `{"a":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551616]}}`, data: data16, want: []string{`tensor "a"`, "data_offsets[0] = 18446744073709551612"}},
		{name: "out of range", header: `{"model.layers.0.q_proj.weight":{"dtype":"F32","shape":[1024],"data_offsets":[100,4196]}}`, data: make([]byte, 4000),
			want: []string{`tensor "model.layers.0.q_proj.weight": data_offsets [100, 4196] exceed the data section (4000 bytes)`}},
		{name: "overlap", header: `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`, data: data16,
			want: []string{`tensor "b": data_offsets [4, 12] overlap tensor "a" [0, 8]`}},
		{name: "metadata not string", header: `{"__metadata__":{"n":1}}`, want: []string{"__metadata__", `value of "n" is not a string`}},
		{name: "metadata not object", header: `{"__metadata__":"x"}`, want: []string{"__metadata__", "not a JSON object"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".safetensors")
			if c.raw != nil {
				os.WriteFile(path, c.raw, 0o644)
			} else {
				writeSTBytes(t, path, []byte(c.header), c.data)
			}
			_, err := OpenFile(path)
			wantErr(t, err, append([]string{"checkpoint: " + path + ": "}, c.want...)...)
			t.Log(err)
		})
	}

	// A header length over the 100 MB limit in a (sparse) file that is big
	// enough for it.
	path := filepath.Join(dir, "huge_header.safetensors")
	f, _ := os.Create(path)
	binary.Write(f, binary.LittleEndian, uint64(maxHeaderSize+1))
	f.Truncate(maxHeaderSize + 64)
	f.Close()
	_, err := OpenFile(path)
	wantErr(t, err, path, "header length 104857601 exceeds the 104857600-byte limit")

	// Every truncation of a real file is refused (or, cut inside the data
	// section, still refused by the offsets check).
	gold := filepath.Join("..", "..", "shared", "golden", "qwen3_gate_headwise", "model.safetensors")
	if full, err := os.ReadFile(gold); err == nil {
		for _, n := range []int{0, 7, 8, 100, 7000, len(full) - 1} {
			p := filepath.Join(dir, "cut.safetensors")
			os.WriteFile(p, full[:n], 0o644)
			if _, err := OpenFile(p); err == nil {
				t.Fatalf("file cut to %d of %d bytes was accepted", n, len(full))
			}
		}
	}
}

// TestLegacyTorch refuses pre-1.6 torch.save files.
func TestLegacyTorch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.bin")
	os.WriteFile(path, []byte("\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19.\x80\x02M\xe9\x03."), 0o644)
	_, err := OpenFile(path)
	wantErr(t, err, path, "legacy torch.save format is not supported; re-save with torch>=1.6")
	if !errors.Is(err, ErrLegacyFormat) {
		t.Fatal("not ErrLegacyFormat")
	}
}

// TestClosed checks reads after Close.
func TestClosed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	if err := WriteSafetensors(path, []Tensor{{Name: "x", Shape: []int{1}, Data: []float32{1}}}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	_, err = c.Float32("x")
	wantErr(t, err, `tensor "x": checkpoint is closed`)
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// TestLazyOpen opens a (sparse) 3.4 GB BF16 file: Open must read only the
// header, and tensors are read when asked for.
func TestLazyOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.safetensors")
	const big = 1700 << 20 // BF16 elements: 3.4 GB
	hdr := []byte(`{"big":{"dtype":"BF16","shape":[1700,1048576],"data_offsets":[0,3565158400]},"tail":{"dtype":"BF16","shape":[2],"data_offsets":[3565158400,3565158404]}}`)
	for len(hdr)%8 != 0 {
		hdr = append(hdr, ' ')
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	binary.Write(f, binary.LittleEndian, uint64(len(hdr)))
	f.Write(hdr)
	if err := f.Truncate(int64(8 + len(hdr) + 2*big + 4)); err != nil {
		t.Skipf("cannot make a sparse file: %v", err)
	}
	f.WriteAt([]byte{0x80, 0x3f, 0x00, 0xc0}, int64(8+len(hdr)+2*big)) // 1, -2
	f.Close()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, err := OpenFile(path)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Fatalf("Open allocated %d bytes", alloc)
	}
	if got, err := c.Float32("tail"); err != nil || got[0] != 1 || got[1] != -2 {
		t.Fatalf("tail = %v, %v", got, err)
	}
	if info, _ := c.Info("big"); !reflect.DeepEqual(info.Shape, []int{1700, 1048576}) {
		t.Fatalf("info %+v", info)
	}
}
