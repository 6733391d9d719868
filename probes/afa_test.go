package probes

import (
	"math"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestAFAPriorDiagnostics: notes 001 §B.2–B.3. A flat prior (a = 0, σ = 0)
// gives n_eff^prior(i) = i + 1; the noise ratio ρ = σ²/(2aη²) decides
// whether the prior precision falls (ρ > 1) or rises (ρ < 1) with lag
// (§F.16); σ_V²(0) = η².
func TestAFAPriorDiagnostics(t *testing.T) {
	p := model.AFAHeadParams{D: 4, Eta2: 0.5, TauS: 1.3, S: []float64{0.2, 0.4, 0.6, 0.8}, Dt: 1, Epsilon: 1e-6,
		KernelForm: "exact", MinExponent: -50}
	if n := AFAPriorNEff(&p, 9); math.Abs(n-10) > 1e-9 {
		t.Fatalf("flat prior: n_eff %v, want 10", n)
	}
	if l := AFAObservationPrecision(&p); l != 2 || AFAPriorPrecision(&p, 0) != 2 {
		t.Fatalf("λobs = 1/η² = 2, got %v, P(0) = %v", l, AFAPriorPrecision(&p, 0))
	}
	p.A = 0.1
	for _, tc := range []struct {
		sigma2 float64
		rises  bool
	}{{0.02, true}, {0.5, false}} {
		p.Sigma2 = tc.sigma2
		rises := AFAPriorPrecision(&p, 8) > AFAPriorPrecision(&p, 0)
		if rises != tc.rises || (AFANoiseRatio(&p) < 1) != tc.rises {
			t.Fatalf("σ² = %v: ρ = %v, P(8) > P(0) is %v, want %v", tc.sigma2, AFANoiseRatio(&p), rises, tc.rises)
		}
	}
	if g := AFAGain(&p, 1); g != 1 {
		t.Fatalf("A_ii = 1 must give gain 1, got %v", g)
	}
	if g := AFAGain(&p, 0); math.Abs(g-0.5) > 1e-15 {
		t.Fatalf("A_ii = 0, s̄ = 0.5: gain %v, want 0.5", g)
	}
}

// TestAFACollector: the streamed rows' self weight and decayed mass equal
// hook_pattern's diagonal and hook_pattern_decayed's row sums.
func TestAFACollector(t *testing.T) {
	m := smallModel(t, model.ArchAFA, model.Size{Layers: 2, DModel: 16, Heads: 2, KVHeads: 2, Vocab: 37, MaxPos: 64}, 5)
	cfg := m.Config
	ps, err := m.AFAParams()
	if err != nil {
		t.Fatal(err)
	}
	B, T := 2, 17
	col, err := NewAFACollector(B, T, &m.Config, ps, CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Stream(-1, col)
	c := hs.Capture("blocks.*.attn.hook_pattern", "blocks.*.attn.hook_pattern_decayed")
	if _, err := m.Forward(bftIDs(B, T, cfg.Vocab), model.Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	H := cfg.Heads
	for l := 0; l < cfg.Layers; l++ {
		pat := c.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
		dec := c.Get(hooks.Name("blocks.{l}.attn.hook_pattern_decayed", l)).Data().([]float32)
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for i := 0; i < T; i++ {
					row := ((b*H+h)*T + i) * T
					var m float64
					for _, x := range dec[row : row+i+1] {
						m += float64(x)
					}
					k := col.Index(b, l, h, i)
					if math.Abs(col.DecayedMass[k]-m) > 1e-5 || col.SelfWeight[k] != float64(pat[row+i]) {
						t.Fatalf("(%d,%d,%d,%d): decayed mass %v vs %v, self weight %v vs %v", b, l, h, i, col.DecayedMass[k], m, col.SelfWeight[k], pat[row+i])
					}
					if g := col.Gain[k]; !(g > 0 && g <= 1) || col.Gate[k] != float32(g) {
						t.Fatalf("gain %v, gate %v", g, col.Gate[k])
					}
				}
			}
		}
	}
}
