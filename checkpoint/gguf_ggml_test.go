package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// llama.cpp's own library is the referee of these tests: npm
// @node-llama-cpp/linux-x64@3.21.1 (installed by .ci/setup.sh into
// third_party/node-llama-cpp), called through scripts/gguf/ggml_ref.py.

// ggmlLibDir returns the folder of libggml-base.so and libllama, or skips
// the test saying how to install it.
func ggmlLibDir(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs("../third_party/node-llama-cpp/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
	if _, err := os.Stat(filepath.Join(dir, "libggml-base.so")); err != nil {
		t.Skipf("llama.cpp's library is not installed (%v): bash .ci/setup.sh installs npm @node-llama-cpp/linux-x64@3.21.1 into third_party/node-llama-cpp", err)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed: it calls llama.cpp's library (scripts/gguf/ggml_ref.py)")
	}
	return dir
}

// ggmlJob is one run of ggml's to_float: n values of type typ stored in src.
type ggmlJob struct {
	typ GGMLType
	n   int64
	src []byte
}

// ggmlDequant widens every job with ggml_get_type_traits(type)->to_float
// in one run of the referee script.
func ggmlDequant(t *testing.T, lib string, jobs []ggmlJob) [][]float32 {
	t.Helper()
	tmp := t.TempDir()
	var lines strings.Builder
	for i, j := range jobs {
		in := filepath.Join(tmp, fmt.Sprintf("%d.in", i))
		if err := os.WriteFile(in, j.src, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&lines, "%d %d %s %s.out\n", j.typ, j.n, in, in)
	}
	cmd := exec.Command("python3", "../scripts/gguf/ggml_ref.py", lib, "dequant")
	cmd.Stdin = strings.NewReader(lines.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ggml_ref.py dequant: %v\n%s", err, out)
	}
	res := make([][]float32, len(jobs))
	for i, j := range jobs {
		raw, err := os.ReadFile(filepath.Join(tmp, fmt.Sprintf("%d.in.out", i)))
		if err != nil || int64(len(raw)) != 4*j.n {
			t.Fatalf("job %d (%v): read %d bytes, %v", i, j.typ, len(raw), err)
		}
		res[i] = make([]float32, j.n)
		for k := range res[i] {
			res[i][k] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*k:]))
		}
	}
	return res
}

// sameBits reports the first index where got and want differ in their
// bits; two NaNs count as equal whatever their payloads (ggml's and Go's
// float arithmetic may propagate different NaN payloads).
func sameBits(got, want []float32) (int, bool) {
	for i := range want {
		g, w := got[i], want[i]
		if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
			return i, false
		}
	}
	return -1, true
}

// scaleFields lists where each type's f16 scales sit in its block (Q8_K's
// float32 d and MXFP4's E8M0 byte are covered by random bytes).
var scaleFields = map[GGMLType][]int{
	GGMLQ4_0: {0}, GGMLQ5_0: {0}, GGMLQ8_0: {0}, GGMLQ4_1: {0, 2}, GGMLQ5_1: {0, 2},
	GGMLQ2_K: {80, 82}, GGMLQ3_K: {108}, GGMLQ4_K: {0, 2}, GGMLQ5_K: {0, 2}, GGMLQ6_K: {208},
}

// extremeF16 are scale values at the edges: ±max, ±smallest subnormal, ±0,
// ±Inf, 1, a NaN.
var extremeF16 = []uint16{0x7bff, 0xfbff, 0x0001, 0x8001, 0x0000, 0x8000, 0x7c00, 0xfc00, 0x3c00, 0x7e01}

// TestDequantizeMatchesGGML: for every supported type, random blocks and
// blocks with every scale field at each extreme value widen bit for bit as
// ggml's own to_float (ggml_get_type_traits(type)->to_float of
// libggml-base) widens them.
func TestDequantizeMatchesGGML(t *testing.T) {
	lib := ggmlLibDir(t)
	rng := rand.New(rand.NewSource(30))
	var jobs []ggmlJob
	var types []GGMLType
	for _, ty := range []GGMLType{GGMLF32, GGMLF16, GGMLBF16, GGMLQ8_0, GGMLQ4_0, GGMLQ4_1, GGMLQ5_0, GGMLQ5_1,
		GGMLQ2_K, GGMLQ3_K, GGMLQ4_K, GGMLQ5_K, GGMLQ6_K, GGMLQ8_K, GGMLMXFP4} {
		bs, size := ty.BlockSize(), ty.TypeSize()
		nblk := 256
		if bs == 1 {
			nblk = 1 << 16 // every F16/BF16 bit pattern at least once in expectation
		}
		src := make([]byte, nblk*size)
		rng.Read(src)
		for b := 0; b < 64 && bs > 1; b++ { // 64 blocks with sane scales (|d| ≈ 1e-3…1)
			for _, off := range scaleFields[ty] {
				binary.LittleEndian.PutUint16(src[b*size+off:], Float32ToF16(float32(rng.NormFloat64()*0.05)))
			}
		}
		for e, v := range extremeF16 { // blocks 64.. with each extreme scale
			for _, off := range scaleFields[ty] {
				binary.LittleEndian.PutUint16(src[(64+e)*size+off:], v)
			}
		}
		if ty == GGMLMXFP4 {
			for e := 0; e < 256; e++ {
				src[e*size] = byte(e) // every E8M0 exponent
			}
		}
		if ty == GGMLF16 {
			for h := 0; h < 1<<16; h++ {
				binary.LittleEndian.PutUint16(src[2*h:], uint16(h)) // every half
			}
		}
		jobs = append(jobs, ggmlJob{ty, int64(nblk * bs), src})
		types = append(types, ty)
	}
	want := ggmlDequant(t, lib, jobs)
	for i, j := range jobs {
		got := make([]float32, j.n)
		if err := DequantizeRow(j.typ, got, j.src); err != nil {
			t.Fatal(err)
		}
		if k, ok := sameBits(got, want[i]); !ok {
			bs := int(j.typ.BlockSize())
			t.Errorf("%v: value %d (block %d) = %g (%#08x), ggml %g (%#08x)", types[i], k, k/bs, got[k], math.Float32bits(got[k]), want[i][k], math.Float32bits(want[i][k]))
		}
	}
}

// goldenGGUF lists the shared GGUF fixtures (golden/gguf/*/model.gguf).
func goldenGGUF(t *testing.T) []string {
	dir := goldenDir(t, "gguf")
	files, _ := filepath.Glob(filepath.Join(dir, "*", "model.gguf"))
	if len(files) == 0 {
		t.Skipf("no %s/*/model.gguf", dir)
	}
	return files
}

// checkAgainstGGML widens every tensor of a GGUF file with DequantizeRow and
// with ggml's to_float and requires the same bits; it returns the count of
// tensors of each type.
func checkAgainstGGML(t *testing.T, lib, path string) map[GGMLType]int {
	t.Helper()
	g, err := OpenGGUF(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var jobs []ggmlJob
	count := map[GGMLType]int{}
	for _, ti := range g.Tensors {
		raw, err := g.TensorData(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, ggmlJob{ti.Type, ti.Numel(), raw})
		count[ti.Type]++
	}
	want := ggmlDequant(t, lib, jobs)
	for i, ti := range g.Tensors {
		got, err := g.Dequantize(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if k, ok := sameBits(got, want[i]); !ok {
			t.Errorf("%s: %s (%v %v): element %d = %g, ggml %g", path, ti.Name, ti.Type, ti.Dims, k, got[k], want[i][k])
		}
	}
	return count
}

// TestGGUFGoldenMatchesGGML: every tensor of the shared fixtures (written
// and quantized by llama.cpp) dequantizes to ggml's own values, and the
// files hold the types their README lists.
func TestGGUFGoldenMatchesGGML(t *testing.T) {
	lib := ggmlLibDir(t)
	wantTypes := map[string]map[GGMLType]int{
		"llama_q4_k_m": {GGMLF32: 9, GGMLQ4_K: 25, GGMLQ6_K: 5},
		"qwen3_q8_0":   nil, // checked for values only
		"qwen3_q4_k_m": nil,
		"gemma3_q8_0":  nil,
	}
	for _, p := range goldenGGUF(t) {
		name := filepath.Base(filepath.Dir(p))
		t.Run(name, func(t *testing.T) {
			count := checkAgainstGGML(t, lib, p)
			if w := wantTypes[name]; w != nil && fmt.Sprint(w) != fmt.Sprint(count) {
				t.Errorf("tensor types %v, README lists %v", count, w)
			}
			t.Logf("%v", count)
		})
	}
}

// llamaF32GGUF writes a small llama-shaped F32 GGUF as llama.cpp's
// converter lays one out (the tensor names, hyper-parameter keys and a
// placeholder byte-level tokenizer of `<tN>` tokens), with seeded random
// weights: the input of llama_model_quantize. It returns each tensor's
// values by name.
func llamaF32GGUF(t *testing.T, path string) map[string][]float32 {
	const layers, d, heads, kvHeads, dHead, ffn, vocab = 2, 256, 4, 2, 64, 512, 512
	rng := rand.New(rand.NewSource(7))
	tokens := make([]string, vocab)
	types := make([]int32, vocab)
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("<t%d>", i), 1
	}
	kv := []GGUFKV{
		{"general.architecture", GGUFString, "llama"},
		{"general.name", GGUFString, "probe-gguf-test"},
		{"general.alignment", GGUFUint32, uint32(32)},
		{"general.file_type", GGUFUint32, uint32(0)},
		{"llama.context_length", GGUFUint32, uint32(2048)},
		{"llama.embedding_length", GGUFUint32, uint32(d)},
		{"llama.block_count", GGUFUint32, uint32(layers)},
		{"llama.feed_forward_length", GGUFUint32, uint32(ffn)},
		{"llama.attention.head_count", GGUFUint32, uint32(heads)},
		{"llama.attention.head_count_kv", GGUFUint32, uint32(kvHeads)},
		{"llama.attention.key_length", GGUFUint32, uint32(dHead)},
		{"llama.attention.value_length", GGUFUint32, uint32(dHead)},
		{"llama.attention.layer_norm_rms_epsilon", GGUFFloat32, float32(1e-6)},
		{"llama.rope.freq_base", GGUFFloat32, float32(10000)},
		{"llama.rope.dimension_count", GGUFUint32, uint32(dHead)},
		{"llama.vocab_size", GGUFUint32, uint32(vocab)},
		{"tokenizer.ggml.model", GGUFString, "gpt2"},
		{"tokenizer.ggml.pre", GGUFString, "default"},
		{"tokenizer.ggml.tokens", GGUFArrayT, GGUFArray{GGUFString, tokens}},
		{"tokenizer.ggml.token_type", GGUFArrayT, GGUFArray{GGUFInt32, types}},
		{"tokenizer.ggml.merges", GGUFArrayT, GGUFArray{GGUFString, []string{"< t"}}},
		{"tokenizer.ggml.bos_token_id", GGUFUint32, uint32(vocab - 1)},
		{"tokenizer.ggml.eos_token_id", GGUFUint32, uint32(vocab - 1)},
	}
	values := map[string][]float32{}
	var ts []ggufTestTensor
	add := func(name string, dims ...int64) {
		n := int64(1)
		for _, v := range dims {
			n *= v
		}
		v := make([]float32, n)
		raw := make([]byte, 4*n)
		for i := range v {
			if len(dims) == 1 {
				v[i] = 1 + float32(rng.NormFloat64()*0.1) // a norm's weight
			} else {
				v[i] = float32(rng.NormFloat64() * 0.05)
			}
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v[i]))
		}
		values[name] = v
		ts = append(ts, ggufTestTensor{name: name, typ: GGMLF32, dims: dims, data: raw, offset: -1})
	}
	add("token_embd.weight", d, vocab)
	for l := 0; l < layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		add(p+"attn_norm.weight", d)
		add(p+"attn_q.weight", d, heads*dHead)
		add(p+"attn_k.weight", d, kvHeads*dHead)
		add(p+"attn_v.weight", d, kvHeads*dHead)
		add(p+"attn_output.weight", heads*dHead, d)
		add(p+"ffn_norm.weight", d)
		add(p+"ffn_gate.weight", d, ffn)
		add(p+"ffn_up.weight", d, ffn)
		add(p+"ffn_down.weight", ffn, d)
	}
	add("output_norm.weight", d)
	add("output.weight", d, vocab)
	if err := os.WriteFile(path, encodeGGUF(3, kv, ts, 32), 0o644); err != nil {
		t.Fatal(err)
	}
	return values
}

// TestGGUFQuantizedByLlamaCpp: an F32 GGUF of ours, quantized by llama.cpp's
// own llama_model_quantize to each file type (F16, BF16, Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, Q2_K, Q3_K_M, Q3_K_L, Q4_K_S, Q5_K_M, Q6_K), reads back
// with the types llama.cpp chose, every tensor bit for bit as ggml's
// to_float widens it and close to the F32 weights it came from (relative
// RMS error within the type's bound: a misread layout would be far off).
func TestGGUFQuantizedByLlamaCpp(t *testing.T) {
	lib := ggmlLibDir(t)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "f32.gguf")
	orig := llamaF32GGUF(t, src)
	checkAgainstGGML(t, lib, src) // our writer's F32 file reads back as written
	for _, tc := range []struct {
		ftype  int // enum llama_ftype
		name   string
		main   GGMLType // the type of most weight matrices
		relRMS float64  // bound on ‖w − w_q‖ / ‖w‖ over each quantized matrix
	}{
		{1, "F16", GGMLF16, 1e-3},
		{32, "BF16", GGMLBF16, 5e-3},
		{7, "Q8_0", GGMLQ8_0, 0.01},
		{2, "Q4_0", GGMLQ4_0, 0.15},
		{3, "Q4_1", GGMLQ4_1, 0.15},
		{8, "Q5_0", GGMLQ5_0, 0.08},
		{9, "Q5_1", GGMLQ5_1, 0.08},
		{10, "Q2_K", GGMLQ2_K, 0.45},
		{12, "Q3_K_M", GGMLQ3_K, 0.25},
		{13, "Q3_K_L", GGMLQ3_K, 0.25},
		{14, "Q4_K_S", GGMLQ4_K, 0.12},
		{17, "Q5_K_M", GGMLQ5_K, 0.08},
		{18, "Q6_K", GGMLQ6_K, 0.04},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst := filepath.Join(tmp, tc.name+".gguf")
			cmd := exec.Command("python3", "../scripts/gguf/ggml_ref.py", lib, "quantize", src, dst, fmt.Sprint(tc.ftype))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("llama_model_quantize %s: %v\n%s", tc.name, err, out)
			}
			count := checkAgainstGGML(t, lib, dst)
			if count[tc.main] == 0 {
				t.Errorf("no %v tensors in the %s file: %v", tc.main, tc.name, count)
			}
			g, err := OpenGGUF(dst)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			for _, ti := range g.Tensors {
				got, err := g.Dequantize(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				want := orig[ti.Name]
				if len(want) != len(got) {
					t.Fatalf("%s: %d values, wrote %d", ti.Name, len(got), len(want))
				}
				var num, den float64
				for i, w := range want {
					num += float64(got[i]-w) * float64(got[i]-w)
					den += float64(w) * float64(w)
				}
				if r := math.Sqrt(num / den); r > tc.relRMS {
					t.Errorf("%s (%v): relative RMS error %.3g against the F32 weights, bound %g", ti.Name, ti.Type, r, tc.relRMS)
				}
			}
			t.Logf("%s: %v", tc.name, count)
		})
	}
}
