package model

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/checkpoint"
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
	if _, err := m32.Forward(ids, Options{Compute: "fp8"}); err == nil || err.Error() != `model: compute "fp8": want f32 or bf16` {
		t.Errorf("compute fp8: error %v", err)
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
