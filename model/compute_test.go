package model

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model/internal/kern"
)

// TestLinearBF16Weights: a bf16-compute projection gives the same bits
// whatever the stored dtype of the same values — an F32 weight rounded as
// it is packed, the BF16 weight Load keeps with LoadOptions.Compute bf16
// (roundedBF16), an F16 weight (widened, then rounded), and rows read in
// place as runs of a larger matrix (a packed q_proj) — with bias, split
// across goroutines or not; and it lies within the float32 summation bound
// of the float64 product of the bf16-rounded operands.
func TestLinearBF16Weights(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, sh := range [][3]int{{5, 7, 33}, {70, 130, 96}, {300, 65, 257}} {
		n, in, out := sh[0], sh[1], sh[2]
		x := make([]float32, n*in)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		// F16-exact values, so that the F16 weight holds the same numbers
		w32 := make([]float32, out*in)
		h16 := make([]uint16, out*in)
		for i := range w32 {
			h16[i] = checkpoint.Float32ToF16(float32(rng.NormFloat64() * 0.1))
			w32[i] = checkpoint.F16ToFloat32(h16[i])
		}
		b := make([]float32, out)
		for i := range b {
			b[i] = float32(rng.NormFloat64())
		}
		f32 := f32Weight(w32, in)
		want := make([]float32, n*out)
		linearBF16(want, x, n, in, f32, out, b)
		// the same rows as every other run of 3 rows of a 2·out-row matrix
		runs := make([]float32, 2*out*in)
		for r := 0; r < out; r++ {
			copy(runs[((r/3)*6+r%3)*in:], w32[r*in:(r+1)*in])
		}
		ws := map[string]Weight{
			"rounded": f32.roundedBF16(),
			"f16":     {Rows: out, Cols: in, DType: "F16", Bits: h16},
		}
		if out%3 == 0 {
			ws["runs"] = f32Weight(runs, in).runsOf(0, 3, 6)
		}
		for name, w := range ws {
			got := make([]float32, n*out)
			linearBF16(got, x, n, in, w, out, b)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%d×%d×%d %s: dst[%d] = %v, the F32 weight gives %v", n, in, out, name, i, got[i], want[i])
				}
			}
		}
		for r := 0; r < n; r++ {
			for o := 0; o < out; o++ {
				ref, abs := float64(b[o]), 0.0
				for i := 0; i < in; i++ {
					p := float64(checkpoint.BF16ToFloat32(kern.RoundBF16(x[r*in+i]))) * float64(checkpoint.BF16ToFloat32(kern.RoundBF16(w32[o*in+i])))
					ref += p
					abs += math.Abs(p)
				}
				bound := float64(in+1)*0x1p-24*(abs+math.Abs(float64(b[o]))) + 1e-30
				if d := math.Abs(float64(want[r*out+o]) - ref); d > bound {
					t.Fatalf("%d×%d×%d: dst[%d,%d] = %v, float64 %v: error %.3g beyond %.3g", n, in, out, r, o, want[r*out+o], ref, d, bound)
				}
			}
		}
	}
}

// TestComputeOptions: Load with Compute bf16 holds every weight matrix of a
// golden model as BF16 bits (the F32 ones rounded, WeightBytes counting 2
// bytes for them) and runs its passes in
// bf16 unless a pass asks for f32; a bf16 pass differs from the float32
// pass of the same model (it is another arithmetic) while a float32 pass
// of the bf16-loaded model equals the float32 pass on the weights rounded
// by hand; an unknown compute is refused by name.
func TestComputeOptions(t *testing.T) {
	dir := filepath.Join(goldenDir, "qwen3_gqa")
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Skipf("golden case qwen3_gqa not found at %s (it comes with ../shared in CI): %v", dir, err)
	}
	m32, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := Load(dir, LoadOptions{Compute: ComputeBF16})
	if err != nil {
		t.Fatal(err)
	}
	if mb.Compute != ComputeBF16 || mb.Layers[0].Wq.DType != "BF16" || mb.Head.DType != "BF16" || mb.Embed.DType != "BF16" {
		t.Fatalf("Compute bf16 load: Compute %q, Wq %s, head %s, embed %s; want bf16, BF16 throughout", mb.Compute,
			mb.Layers[0].Wq.DType, mb.Head.DType, mb.Embed.DType)
	}
	// the matrices in 2 bytes instead of 4; norms stay float32
	if mb.WeightBytes >= m32.WeightBytes || mb.WeightBytes <= m32.WeightBytes/2 {
		t.Errorf("WeightBytes %d after rounding, %d as stored: want the matrices' half", mb.WeightBytes, m32.WeightBytes)
	}
	ids := [][]int{{1, 5, 9, 2, 7, 3, 11, 4}}
	run := func(m *Model, c Compute) []float32 {
		out, err := m.Forward(ids, Options{Logits: true, Compute: c})
		if err != nil {
			t.Fatal(err)
		}
		return out.Logits
	}
	if equal32(run(m32, ComputeF32), run(m32, ComputeBF16)) {
		t.Error("bf16 compute gave the float32 logits bit for bit: the option does not reach the products")
	}
	// float32 compute of the bf16-loaded model = float32 on hand-rounded weights
	hand := *m32
	hand.Layers = append([]Layer(nil), m32.Layers...)
	for l := range hand.Layers {
		L := &hand.Layers[l]
		for _, w := range []*Weight{&L.Wq, &L.Wk, &L.Wv, &L.Wg, &L.Wo, &L.WGate, &L.WUp, &L.WDown} {
			*w = w.roundedBF16()
		}
	}
	hand.Embed, hand.Head = m32.Embed.roundedBF16(), m32.Head.roundedBF16()
	if def, bf := run(mb, ""), run(mb, ComputeBF16); !equal32(def, bf) {
		t.Error("a pass of the bf16-loaded model with Options.Compute \"\" is not its bf16 pass")
	}
	got, want := run(mb, ComputeF32), run(&hand, ComputeF32)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("float32 pass of the bf16-loaded model: logit %d = %v, on hand-rounded weights %v", i, got[i], want[i])
		}
	}
	// bf16-proj: the same projections, the attention in float32 from the
	// float32 q, k, v: another pass, and the bf16-loaded model's too
	if equal32(run(mb, ComputeBF16), run(mb, ComputeBF16Proj)) || equal32(run(mb, ComputeF32), run(mb, ComputeBF16Proj)) {
		t.Error("bf16-proj gave the bf16 or the float32 logits bit for bit")
	}
	if _, err := m32.Forward(ids, Options{Compute: "fp8"}); err == nil || err.Error() != `model: compute "fp8": want f32, f32-widen, bf16 or bf16-proj` {
		t.Errorf("compute fp8: error %v", err)
	}
}

// TestAttentionBF16: the softmax attention of ComputeBF16 (attnArgs.bf16)
// is, where the CPU lacks AMX, the float32 attention of q, k and v
// rounded to bfloat16, bit for bit (outputs and moments); on AMX its
// outputs lie within 1e-5 (normwise, relative) of those and its moments
// hold their stated accuracy with E within 2⁻¹⁶ (α carried to 16 bits)
// and S correspondingly looser — over tiles that do and do not divide T,
// a window, stacked query heads, values far from 0 and both moment forms.
func TestAttentionBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	const B, T = 2, 150
	rounded := func(x []float32) []float32 {
		r := append([]float32(nil), x...)
		roundBF16(r)
		return r
	}
	hasAMX := attnAMX
	defer func() { attnAMX = hasAMX }()
	for _, tc := range []struct {
		name                    string
		H, KV, dh, tile, window int
		offset                  float64
		sumOnly                 bool
	}{{"tile7", 4, 2, 64, 7, 0, 0, true}, {"tile64/perdim", 4, 2, 64, 64, 0, 0, false}, {"window", 4, 2, 32, 16, 40, 0, true},
		{"group8/dh128", 8, 1, 128, 64, 0, 0, true}, {"offset", 4, 2, 64, 32, 0, 30, true}, {"offset/perdim", 4, 2, 16, 32, 0, 30, false}} {
		t.Run(tc.name, func(t *testing.T) {
			H, KV, dh := tc.H, tc.KV, tc.dh
			q, k := randn32(rng, B*T*H*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0)
			v := randn32(rng, B*T*KV*dh, 1, tc.offset)
			run := func(bf16 bool, q, k, v []float32) ([]float32, *momentsRecorder) {
				rec := &momentsRecorder{t: t, sumOnly: tc.sumOnly, seen: map[[3]int]int{}}
				a := &attnArgs{batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: float32(1 / math.Sqrt(float64(dh))),
					window: tc.window, bf16: bf16, q: append([]float32(nil), q...), k: append([]float32(nil), k...),
					v: append([]float32(nil), v...), z: make([]float32, B*T*H*dh), consumers: []hooks.AttnConsumer{rec},
					tileRows: tc.tile, threads: 2}
				if err := causalAttention(a); err != nil {
					t.Fatal(err)
				}
				if rec.rows != B*H*T {
					t.Fatalf("%d rows seen, want %d", rec.rows, B*H*T)
				}
				return a.z, rec
			}
			want, wrec := run(false, rounded(q), rounded(k), rounded(v))
			attnAMX = func() bool { return false }
			got, grec := run(true, q, k, v)
			if !equal32(got, want) || grec.worstE != wrec.worstE || grec.worstS != wrec.worstS {
				t.Fatalf("without AMX: the bf16 attention is not the float32 attention of rounded q, k, v")
			}
			if f32, _ := run(false, q, k, v); equal32(f32, want) {
				t.Fatalf("rounding q, k, v changed no output")
			}
			attnAMX = hasAMX
			if !attnAMX() {
				t.Skip("no AMX here: the bf16 attention is the float32 one of the rounded q, k, v (checked)")
			}
			got, grec = run(true, q, k, v)
			var dmax, zmax float64
			for i := range want {
				dmax = math.Max(dmax, math.Abs(float64(got[i]-want[i])))
				zmax = math.Max(zmax, math.Abs(float64(want[i])))
			}
			t.Logf("AMX: outputs within %.2g (normwise) of float32; moments: Σα/Σα² %.2g, e %.2g, S %.2g, exp(entropy) %.2g",
				dmax/zmax, grec.worstSum, grec.worstE, grec.worstS, grec.worstEntropy)
			if dmax == 0 || dmax > 1e-5*zmax {
				t.Errorf("AMX outputs %.3g from the float32 ones (normwise), want (0, 1e-5]", dmax/zmax)
			}
			if grec.worstSum > 1e-6 || grec.worstE > 0x1p-16 || grec.worstS > 1e-3 || grec.worstEntropy > 1e-6 {
				t.Errorf("AMX moments outside their accuracy")
			}
		})
	}
}

func equal32(a, b []float32) bool {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestLinearF32AMX: ComputeF32's products of a BF16 weight on AMX
// (linearPairs on kern.GemmF32AMX) — contiguous and read as runs of rows
// (a packed q_proj), with a bias, split over goroutines by columns (at
// most amxRowsAtOnce rows) and by rows (more) — are within 3·in·2⁻²⁴ of
// Σ|x·w| of the float64 product, and the rows of a product split by rows
// are those of the same rows split by columns, bit for bit.
func TestLinearF32AMX(t *testing.T) {
	if !kern.HasAMX() {
		t.Skip("no AMX here: ComputeF32 widens the weights (TestLinearDTypes)")
	}
	rng := rand.New(rand.NewPCG(13, 14))
	const in, out, run, pitch = 96, 300, 6, 10
	x := make([]float32, 1500*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for _, runs := range []bool{false, true} {
		stored := out
		if runs {
			stored = out / run * pitch
		}
		raw := make([]float32, stored*in)
		for i := range raw {
			raw[i] = float32(rng.NormFloat64() * 0.1)
		}
		_, bits := roundTo(raw, "BF16")
		w := Weight{Rows: stored, Cols: in, DType: "BF16", Bits: bits}
		if runs {
			w = w.runsOf(1, run, pitch)
		}
		wide := w.widened() // [out, in] float32
		bias := make([]float32, out)
		for i := range bias {
			bias[i] = float32(rng.NormFloat64())
		}
		byRows := make([]float32, 1500*out)
		linearAs(ComputeF32, byRows, x, 1500, in, w, out, bias)
		for i := 0; i < 1500; i++ {
			for j := 0; j < out; j++ {
				ref, abs := float64(bias[j]), math.Abs(float64(bias[j]))
				for p := 0; p < in; p++ {
					v := float64(x[i*in+p]) * float64(wide[j*in+p])
					ref += v
					abs += math.Abs(v)
				}
				if d := math.Abs(float64(byRows[i*out+j]) - ref); d > 3*in*0x1p-24*abs {
					t.Fatalf("runs %v: out[%d,%d] = %v, float64 %v", runs, i, j, byRows[i*out+j], ref)
				}
			}
		}
		byCols := make([]float32, 1000*out)
		linearAs(ComputeF32, byCols, x, 1000, in, w, out, bias)
		for i := range byCols {
			if math.Float32bits(byCols[i]) != math.Float32bits(byRows[i]) {
				t.Fatalf("runs %v: out[%d,%d] = %v of 1000 rows (columns split), %v of 1500 (rows split)", runs, i/out, i%out, byCols[i], byRows[i])
			}
		}
	}
}
