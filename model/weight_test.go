package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model/internal/kern"
)

// widenCheckpoint writes the checkpoint of dir, its tensors widened to
// float32 (exactly), to a new directory with the same config.json: "the
// same checkpoint in float32".
func widenCheckpoint(t *testing.T, dir string) string {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var ts []checkpoint.Tensor
	for _, name := range ck.Names() {
		info, _ := ck.Info(name)
		x, err := ck.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, checkpoint.Tensor{Name: name, Shape: info.Shape, Data: x})
	}
	out := t.TempDir()
	cj, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), cj, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(out, "model.safetensors"), ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeStored writes a generated model's tensors rounded to dtype (BF16 or
// F16) as its family's checkpoint.
func writeStored(t *testing.T, cfg Config, tensors []checkpoint.Tensor, dtype string) string {
	t.Helper()
	conv := make([]checkpoint.Tensor, len(tensors))
	for i, x := range tensors {
		d, err := checkpoint.Convert(x.Data.([]float32), dtype)
		if err != nil {
			t.Fatal(err)
		}
		conv[i] = checkpoint.Tensor{Name: x.Name, Shape: x.Shape, Data: d}
	}
	dir := t.TempDir()
	if err := WriteHF(dir, cfg, conv); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestStoredDTypeLogits: for every family that can be generated, a model
// loaded from a BF16 or F16 checkpoint, whose matrices stay 16-bit and are
// widened inside the matrix products, gives with ComputeF32Widen the
// logits of the same checkpoint widened to float32 bit for bit (same
// summation order: the blocked AVX-512 product widens while packing its
// panels; the BLAS path widens blocks of rows before each sgemm). The
// shapes leave the products ragged (widths not multiples of 16 or 32, a
// vocabulary beyond one block of rows, enough rows to split them across
// goroutines). Plain gonum (no AVX-512, or PROBE_BLAS=gonum) is held to
// 1e-5 of the largest logit instead: its dot products peel leading
// elements until an address is 16-byte aligned, so their sums depend on
// where the rows lie in memory, for two float32 copies of the same weights
// as well. With ComputeF32 a BF16 model's products on AMX
// (kern.GemmF32AMX, 80 rows here) sum the same exact products in another
// order: within 1e-5 of the largest logit, and not bit for bit (the test
// would not see the tile unit otherwise); elsewhere ComputeF32 is
// ComputeF32Widen.
func TestStoredDTypeLogits(t *testing.T) {
	for _, f := range families {
		if f.small == nil {
			continue
		}
		for _, dtype := range []string{"BF16", "F16"} {
			t.Run(string(f.arch)+"/"+dtype, func(t *testing.T) {
				heads, kv := 2, 1
				if f.arch == ArchSelRoPE {
					kv = heads
				}
				cfg, err := SmallConfig(f.arch, Size{Layers: 2, DModel: 48, Heads: heads, KVHeads: kv, Vocab: 1100, MaxPos: 64})
				if err != nil {
					t.Fatal(err)
				}
				_, tensors, err := Generate(cfg, 5)
				if err != nil {
					t.Fatal(err)
				}
				dir := writeStored(t, cfg, tensors, dtype)
				m16, err := Load(dir, LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				m32, err := Load(widenCheckpoint(t, dir), LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(m16.DTypes, []string{dtype}) || !slices.Equal(m32.DTypes, []string{"F32"}) {
					t.Fatalf("stored dtypes %v and %v, want [%s] and [F32]", m16.DTypes, m32.DTypes, dtype)
				}
				// the research families RT, AFA and Selective RoPE widen at load
				resident := f.arch != ArchRT && f.arch != ArchAFA && f.arch != ArchSelRoPE
				if got := m16.Embed.DType; resident && got != dtype {
					t.Errorf("embedding held as %s, want %s as stored", got, dtype)
				}
				ids := seqs(2, 40, m16.Vocab)
				b, err := m32.Forward(ids, Options{Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				loose := 0.0
				for _, v := range b.Logits {
					loose = max(loose, 1e-5*math.Abs(float64(v)))
				}
				for _, c := range []Compute{ComputeF32Widen, ComputeF32} {
					a, err := m16.Forward(ids, Options{Logits: true, Compute: c})
					if err != nil {
						t.Fatal(err)
					}
					tol, same := 0.0, true
					if BLAS() == "gonum" {
						tol = loose
					}
					amx := c == ComputeF32 && dtype == "BF16" && kern.HasAMX()
					if amx {
						tol = loose
					}
					for i := range b.Logits {
						same = same && a.Logits[i] == b.Logits[i]
						if math.Float32bits(a.Logits[i]) != math.Float32bits(b.Logits[i]) && !(math.Abs(float64(a.Logits[i]-b.Logits[i])) <= tol) {
							t.Fatalf("%s (%s), compute %s: logit %d is %v with %s weights, %v with the same weights in float32",
								f.arch, BLAS(), c, i, a.Logits[i], dtype, b.Logits[i])
						}
					}
					if amx && resident && same {
						t.Errorf("%s, compute %s: the BF16 model's logits on AMX are the float32 model's bit for bit: its products did not run on the tile unit", f.arch, c)
					}
				}
			})
		}
	}
}

// roundTo returns x rounded to dtype's values (as float32) and their bits.
func roundTo(x []float32, dtype string) ([]float32, []uint16) {
	bits := make([]uint16, len(x))
	w := make([]float32, len(x))
	for i, v := range x {
		if dtype == "BF16" {
			bits[i] = checkpoint.Float32ToBF16(v)
			w[i] = checkpoint.BF16ToFloat32(bits[i])
		} else {
			bits[i] = checkpoint.Float32ToF16(v)
			w[i] = checkpoint.F16ToFloat32(bits[i])
		}
	}
	return w, bits
}

// TestLinearDTypes: linear with F32, BF16 and F16 weights, on shapes with
// tails everywhere (1×1×1, widths not multiples of 16, outputs beyond the
// kernels' 1024 columns and several of linearBlocks' blocks of rows, rows
// enough to split across goroutines), weights read as runs of rows (a packed q_proj) and
// with a bias: each output equals the float32 product of the widened
// weights bit for bit, and the float64 product within 1e-5 of Σ|x·w|;
// NaN and ±Inf in the weights or the input reach exactly the outputs whose
// float64 sums they make NaN or infinite.
func TestLinearDTypes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	type shape struct{ n, in, out, run, pitch int }
	shapes := []shape{{1, 1, 1, 0, 0}, {1, 3, 5, 0, 0}, {3, 17, 33, 0, 0}, {7, 40, 300, 0, 0}, {70, 96, 300, 0, 0},
		{5, 300, 1100, 0, 0}, {64, 33, 513, 0, 0}, {40, 48, 96, 8, 24}, {9, 20, 6, 2, 5},
		{3, 8300, 700, 0, 0}, // several blocks of linearBlocks
		{300, 40, 70, 0, 0},  // beyond kern.NarrowM rows: packed panels, rows split
		// MXFP4 rows: widths multiples of 32; the gate rows of gpt-oss's
		// interleaved gate_up (every other row); several blocks of
		// linearBlocks; packed panels
		{5, 64, 1100, 0, 0}, {40, 64, 96, 1, 2}, {3, 8320, 300, 0, 0}, {300, 96, 70, 0, 0}}
	for _, sh := range shapes {
		stored := sh.out
		if sh.run > 0 {
			stored = sh.out / sh.run * sh.pitch
		}
		for _, dtype := range []string{"F32", "BF16", "F16", "MXFP4"} {
			if dtype == "MXFP4" && sh.in%kern.MXFP4Block != 0 {
				continue
			}
			for _, poison := range []bool{false, true} {
				name := fmt.Sprintf("%s/n%d_in%d_out%d_run%d_poison%v", dtype, sh.n, sh.in, sh.out, sh.run, poison)
				x := make([]float32, sh.n*sh.in)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				raw := make([]float32, stored*sh.in)
				for i := range raw {
					raw[i] = float32(rng.NormFloat64() * 0.1)
				}
				if poison {
					x[len(x)/2] = float32(math.Inf(1))
					raw[rng.IntN(len(raw))] = float32(math.NaN())
					raw[rng.IntN(len(raw))] = float32(math.Inf(-1))
				}
				w := f32Weight(raw, sh.in)
				vals := raw
				if dtype == "MXFP4" {
					// random codes under scales 2^−6 … 2^−3 (gpt-oss's
					// range); poisoned: a block of each of three rows under
					// scale byte 255, ±Inf
					w = mxfp4Weight(stored, sh.in, make([]uint8, len(raw)/2), make([]uint8, len(raw)/kern.MXFP4Block))
					for i := range w.MX.Codes {
						w.MX.Codes[i] = uint8(rng.IntN(256))
					}
					for i := range w.MX.Scales {
						w.MX.Scales[i] = uint8(121 + rng.IntN(4))
					}
					if poison {
						for range 3 {
							at := rng.IntN(len(raw))
							w.MX.Codes[at/2] |= 0x11
							w.MX.Scales[at/kern.MXFP4Block] = 255
						}
					}
					vals = make([]float32, len(raw))
					kern.DequantMXFP4(vals, w.MX.Codes, w.MX.Scales, 0)
				} else if dtype != "F32" {
					var bits []uint16
					vals, bits = roundTo(raw, dtype)
					w = Weight{Rows: stored, Cols: sh.in, DType: dtype, Bits: bits}
				}
				if sh.run > 0 {
					w = w.runsOf(1, sh.run, sh.pitch)
				}
				wide := w.widened() // contiguous float32: the reference's weights
				bias := make([]float32, sh.out)
				for i := range bias {
					bias[i] = float32(rng.NormFloat64())
				}
				for _, b := range [][]float32{nil, bias} {
					got := make([]float32, sh.n*sh.out)
					want := make([]float32, sh.n*sh.out)
					linear(got, x, sh.n, sh.in, w, sh.out, b)
					linear(want, x, sh.n, sh.in, f32Weight(wide, sh.in), sh.out, b)
					for i := range want {
						same := math.Float32bits(got[i]) == math.Float32bits(want[i]) || got[i] != got[i] && want[i] != want[i]
						if !same && BLAS() != "gonum" { // gonum: see TestStoredDTypeLogits; the float64 check below holds
							t.Fatalf("%s bias %v (%s): output %d is %v, the float32 product of the widened weights %v",
								name, b != nil, BLAS(), i, got[i], want[i])
						}
					}
					for r := 0; r < sh.n; r++ {
						for o := 0; o < sh.out; o++ {
							var sum, mag float64
							row := wide[o*sh.in : (o+1)*sh.in]
							for k, xv := range x[r*sh.in : (r+1)*sh.in] {
								sum += float64(xv) * float64(row[k])
								mag += math.Abs(float64(xv) * float64(row[k]))
							}
							if b != nil {
								sum += float64(b[o])
								mag += math.Abs(float64(b[o]))
							}
							g := float64(got[r*sh.out+o])
							switch {
							case math.IsNaN(sum) || math.IsInf(sum, 0):
								if math.IsNaN(sum) != math.IsNaN(g) || !math.IsNaN(sum) && g != sum {
									t.Fatalf("%s: output [%d, %d] is %v, want %v", name, r, o, g, sum)
								}
							case math.Abs(g-sum) > 1e-5*mag+1e-30:
								t.Fatalf("%s: output [%d, %d] is %v, float64 %v (Σ|x·w| %v)", name, r, o, g, sum, mag)
							}
						}
					}
				}
				// the stored values are what the rows widen to
				if sh.run == 0 {
					row := make([]float32, sh.in)
					r := stored - 1
					w.widenRow(row, r)
					for k, v := range row {
						if want := vals[r*sh.in+k]; math.Float32bits(v) != math.Float32bits(want) {
							t.Fatalf("%s: widened row %d value %d is %v, want %v", name, r, k, v, want)
						}
					}
				}
			}
		}
	}
}

// TestGenerateStoredDType checks that a configuration whose dtype is
// bfloat16 or float16 generates its weight matrices in that dtype (what
// lets probe generate write an 8B model in 16 GB) with the bits that
// rounding the float32 model gives, and that the generated model runs on
// them as the loaded checkpoint does.
func TestGenerateStoredDType(t *testing.T) {
	for _, f := range families {
		if f.small == nil {
			continue
		}
		for _, dt := range []struct{ torch, stored string }{{"bfloat16", "BF16"}, {"float16", "F16"}} {
			t.Run(string(f.arch)+"/"+dt.stored, func(t *testing.T) {
				heads, kv := 2, 1
				if f.arch == ArchSelRoPE {
					kv = heads
				}
				cfg, err := SmallConfig(f.arch, Size{Layers: 2, DModel: 48, Heads: heads, KVHeads: kv, Vocab: 1100, MaxPos: 64})
				if err != nil {
					t.Fatal(err)
				}
				_, want, err := Generate(cfg, 5)
				if err != nil {
					t.Fatal(err)
				}
				cfg.DType = dt.torch
				m, got, err := Generate(cfg, 5)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(want) {
					t.Fatalf("%d tensors, want %d", len(got), len(want))
				}
				rounded := 0
				for i := range got {
					w, err := checkpoint.Convert(want[i].Data.([]float32), dt.stored)
					if err != nil {
						t.Fatal(err)
					}
					g := got[i].Data
					if x, ok := g.([]float32); ok {
						if g, err = checkpoint.Convert(x, dt.stored); err != nil {
							t.Fatal(err)
						}
					} else {
						rounded++
					}
					if got[i].Name != want[i].Name || !reflect.DeepEqual(g, w) {
						t.Fatalf("tensor %d %s: not the rounded float32 tensor %s", i, got[i].Name, want[i].Name)
					}
				}
				// the families that widen at load (RT, AFA, Selective
				// RoPE) make float32 matrices; the decoders hold dt
				if (rounded > 0) != slices.Contains(m.DTypes, dt.stored) {
					t.Fatalf("%d tensors made in %s, model dtypes %v", rounded, dt.stored, m.DTypes)
				}
				if (f.arch == ArchLlama || f.arch == ArchQwen35) && rounded == 0 {
					t.Fatalf("no tensor was made in %s", dt.stored)
				}
				// written as made (matrices in dt, the rest float32), the
				// checkpoint loads into the same model
				dir := t.TempDir()
				if err := WriteHF(dir, cfg, got); err != nil {
					t.Fatal(err)
				}
				loaded, err := Load(dir, LoadOptions{})
				if err != nil {
					t.Fatal(err)
				}
				ids := seqs(1, 24, m.Vocab)
				a, err := m.Forward(ids, Options{Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				b, err := loaded.Forward(ids, Options{Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				for i := range b.Logits {
					if math.Float32bits(a.Logits[i]) != math.Float32bits(b.Logits[i]) && BLAS() != "gonum" {
						t.Fatalf("logit %d: %v generated, %v loaded", i, a.Logits[i], b.Logits[i])
					}
				}
			})
		}
	}
}

// TestMXFP4Weight: an MXFP4 weight in the bf16 arithmetic (its values
// are bfloat16 values: packed dequantized, not rounded) gives the bits of
// the F32 weight of its dequantized values, contiguous or as every other
// row (gpt-oss's interleaved gate rows), across panels of 256 values
// (PackPairs' chunks); roundedBF16 keeps it as stored; residentBytes
// counts half a byte a value and a byte per 32.
func TestMXFP4Weight(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, sh := range [][3]int{{5, 64, 33}, {70, 128, 96}, {300, 608, 257}} {
		n, in, out := sh[0], sh[1], sh[2]
		x := make([]float32, n*in)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		all := mxfp4Weight(2*out, in, make([]uint8, out*in), make([]uint8, 2*out*in/32))
		for i := range all.MX.Codes {
			all.MX.Codes[i] = uint8(rng.IntN(256))
		}
		for i := range all.MX.Scales {
			all.MX.Scales[i] = uint8(121 + rng.IntN(4))
		}
		b := make([]float32, out)
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		for _, w := range []Weight{all.rowRange(out, 2*out), all.runsOf(1, 1, 2)} {
			if r := w.roundedBF16(); r.DType != "MXFP4" || &r.MX.Codes[0] != &w.MX.Codes[0] {
				t.Fatalf("roundedBF16 of an MXFP4 weight gave a %s weight", r.DType)
			}
			wide := w.widened()
			want, got := make([]float32, n*out), make([]float32, n*out)
			linearBF16(want, x, n, in, f32Weight(wide, in), out, b)
			linearBF16(got, x, n, in, w, out, b)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d×%d×%d (run %d): dst[%d] = %v, the F32 weight of the dequantized values gives %v", n, in, out, w.run, i, got[i], want[i])
				}
			}
		}
		if got, want := all.residentBytes(), int64(2*out*in/2+2*out*in/32); got != want {
			t.Errorf("residentBytes of a [%d, %d] MXFP4 weight = %d, want %d", 2*out, in, got, want)
		}
	}
}

// TestLoadMXFP4: the MXFP4 experts of the gpt_oss_mxfp4 golden checkpoint
// dequantize to the plain checkpoint's float32 experts (stored [E, in,
// out]: the transpose) bit for bit, as transformers' own dequantization
// did; blocks and scales whose shapes disagree with each other or with
// config.json, or of another dtype, are refused naming the tensor.
func TestLoadMXFP4(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "golden", "gpt_oss_mxfp4")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("golden case gpt_oss_mxfp4 not present: %v", err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	plain, err := checkpoint.Open(filepath.Join(dir, "..", "gpt_oss"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	const E, D, I = 4, 64, 64
	for _, c := range []struct {
		name      string
		rows, col int
	}{{"gate_up_proj", 2 * I, D}, {"down_proj", D, I}} {
		name := "model.layers.1.mlp.experts." + c.name
		ld := newLoader(ck, dir)
		ws := ld.mxfp4(name, E, c.rows, c.col)
		if len(ld.errs)+len(ld.missing) > 0 {
			t.Fatalf("%s: %v %v", name, ld.errs, ld.missing)
		}
		ref, err := plain.Float32(name) // [E, in, out]
		if err != nil {
			t.Fatal(err)
		}
		row := make([]float32, c.col)
		for e, w := range ws {
			for r := 0; r < c.rows; r++ {
				w.widenRow(row, r)
				for k, v := range row {
					if want := ref[(e*c.col+k)*c.rows+r]; math.Float32bits(v) != math.Float32bits(want) {
						t.Fatalf("%s expert %d [%d, %d] = %v, the plain checkpoint's %v", name, e, r, k, v, want)
					}
				}
			}
		}
		if ld.bytes != int64(E*c.rows*c.col/2+E*c.rows*c.col/32) || ld.params != int64(E*c.rows*c.col) {
			t.Errorf("%s: %d bytes, %d parameters counted", name, ld.bytes, ld.params)
		}
	}

	// the parameters a summary counts: the same in both checkpoints
	count := func(ck *checkpoint.Checkpoint) (n int64, types []string) {
		seen := map[string]bool{}
		for _, name := range ck.Names() {
			info, _ := ck.Info(name)
			p, dt := StoredParameters(name, info)
			n += p
			if !seen[dt] {
				seen[dt] = true
				types = append(types, dt)
			}
		}
		slices.Sort(types)
		return n, types
	}
	if n, types := count(ck); fmt.Sprint(types) != "[F32 MXFP4]" {
		t.Errorf("stored types %v, want [F32 MXFP4]", types)
	} else if p, _ := count(plain); n != p {
		t.Errorf("StoredParameters: %d in the MXFP4 checkpoint, %d in the plain one", n, p)
	}

	bad := t.TempDir()
	if err := checkpoint.WriteSafetensors(filepath.Join(bad, "model.safetensors"), []checkpoint.Tensor{
		{Name: "a_blocks", Shape: []int{2, 4, 2, 16}, Data: make([]uint8, 2*4*2*16)},
		{Name: "a_scales", Shape: []int{2, 4, 3}, Data: make([]uint8, 2*4*3)},
		{Name: "b_blocks", Shape: []int{2, 4, 2, 16}, Data: make([]float32, 2*4*2*16)},
		{Name: "b_scales", Shape: []int{2, 4, 2}, Data: make([]uint8, 2*4*2)},
	}, nil); err != nil {
		t.Fatal(err)
	}
	bk, err := checkpoint.Open(bad)
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	ld := newLoader(bk, bad)
	ld.mxfp4("a", 2, 4, 64)
	ld.mxfp4("b", 2, 4, 64)
	ld.mxfp4("c", 2, 4, 64)
	err = ld.finish(false)
	for _, want := range []string{`tensor "a_scales": expected shape [2 4 2]`, `tensor "b_blocks": MXFP4 blocks of dtype F32, want U8`, "missing tensors: c_blocks, c_scales"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("loading mismatched MXFP4 tensors: %v; want %q", err, want)
		}
	}
}

// BenchmarkLinearMXFP4 times linear on one gpt-oss-20b expert's gate_up
// matrix ([5760, 2880]) held as F32, BF16 and MXFP4, for a few tokens (the
// narrow product, no packing) and for many (packed panels).
func BenchmarkLinearMXFP4(b *testing.B) {
	const out, in = 5760, 2880
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]float32, out*in)
	for i := range raw {
		raw[i] = float32(rng.NormFloat64() * 0.02)
	}
	_, bits := roundTo(raw, "BF16")
	fp4 := mxfp4Weight(out, in, make([]uint8, out*in/2), make([]uint8, out*in/32))
	for i := range fp4.MX.Codes {
		fp4.MX.Codes[i] = uint8(rng.IntN(256))
	}
	for i := range fp4.MX.Scales {
		fp4.MX.Scales[i] = uint8(118 + rng.IntN(4))
	}
	for _, w := range []Weight{f32Weight(raw, in), {Rows: out, Cols: in, DType: "BF16", Bits: bits}, fp4} {
		for _, n := range []int{4, 512} {
			x := make([]float32, n*in)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			dst := make([]float32, n*out)
			b.Run(fmt.Sprintf("%s/n%d", w.DType, n), func(b *testing.B) {
				b.SetBytes(w.residentBytes())
				for b.Loop() {
					linear(dst, x, n, in, w, out, nil)
				}
			})
		}
	}
}
