package probes

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
)

// goldenCases are the shared golden folders that carry diagnostics.safetensors.
var goldenCases = []string{"qwen3_gqa", "qwen3_gate_headwise", "qwen3_gate_elementwise", "llama_gqa", "qwen2_bias", "gpt2", "gemma2", "gemma3_text"}

func goldenDir() string { return filepath.Join("..", "..", "shared", "golden") }

// goldenCase is one case's golden attention, values, gates and reference
// diagnostics.
type goldenCase struct {
	B, L, H, T, D int
	attn, v, gate [][]float32 // per layer: [B,H,T,T], [B,H,T,D], [B,T,H(,D)] or nil
	gatePerHead   int
	diag          map[string][]float64
}

func loadGolden(t *testing.T, name string) *goldenCase {
	t.Helper()
	dir := filepath.Join(goldenDir(), name)
	gpath, dpath := filepath.Join(dir, "golden.safetensors"), filepath.Join(dir, "diagnostics.safetensors")
	for _, p := range []string{gpath, dpath} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("golden data missing (%v): the shared golden folder is expected at %s", err, goldenDir())
		}
	}
	g, err := checkpoint.OpenFile(gpath)
	if err != nil {
		t.Fatalf("%s: %v", gpath, err)
	}
	defer g.Close()
	d, err := checkpoint.OpenFile(dpath)
	if err != nil {
		t.Fatalf("%s: %v", dpath, err)
	}
	defer d.Close()

	c := &goldenCase{diag: map[string][]float64{}}
	info, ok := d.Info("neff")
	if !ok || len(info.Shape) != 4 {
		t.Fatalf("%s: neff missing or not [B,L,H,T]: %+v", dpath, info)
	}
	c.B, c.L, c.H, c.T = info.Shape[0], info.Shape[1], info.Shape[2], info.Shape[3]
	for l := 0; l < c.L; l++ {
		ai, ok := g.Info(fmt.Sprintf("attn.%d", l))
		vi, ok2 := g.Info(fmt.Sprintf("v.%d", l))
		if !ok || !ok2 || len(vi.Shape) != 4 {
			t.Fatalf("%s: attn.%d / v.%d missing", gpath, l, l)
		}
		c.D = vi.Shape[3]
		want := []int{c.B, c.H, c.T, c.T}
		if fmt.Sprint(ai.Shape) != fmt.Sprint(want) {
			t.Fatalf("%s: attn.%d shape %v, want %v", gpath, l, ai.Shape, want)
		}
		a, err := g.Float32(ai.Name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := g.Float32(vi.Name)
		if err != nil {
			t.Fatal(err)
		}
		c.attn, c.v = append(c.attn, a), append(c.v, v)
		if gi, ok := g.Info(fmt.Sprintf("gate.%d", l)); ok {
			gv, err := g.Float32(gi.Name)
			if err != nil {
				t.Fatal(err)
			}
			c.gate = append(c.gate, gv)
			c.gatePerHead = 1
			if len(gi.Shape) == 4 {
				c.gatePerHead = gi.Shape[3]
			}
		}
	}
	for _, m := range []string{"neff", "S_mean", "lambda_obs", "K", "K_dim_mean", "bos_mass", "S", "lambda_obs_dim"} {
		x, err := d.Float64(m)
		if err != nil {
			t.Fatalf("%s: %s: %v", dpath, m, err)
		}
		c.diag[m] = x
	}
	return c
}

// maxErr compares got with the golden want: relative error where want ≠ 0,
// absolute where want = 0 (S at t = 0). It returns the worst of each and
// the index of the worst relative one.
func maxErr(got []float32, want []float64) (rel, abs0 float64, at int) {
	at = -1
	for i, w := range want {
		g := float64(got[i])
		if w == 0 {
			abs0 = math.Max(abs0, math.Abs(g))
			continue
		}
		if r := math.Abs(g-w) / math.Abs(w); r > rel || math.IsNaN(r) {
			rel, at = r, i
			if math.IsNaN(r) {
				rel = math.Inf(1)
			}
		}
	}
	return rel, abs0, at
}

// TestGoldenDiagnostics feeds each golden case's attention and values
// through a Collector, as tiles of 1, 7 and T rows (padded strides, NaN
// beyond each causal row), and compares every diagnostic with
// diagnostics.safetensors (numpy float64 from the same float32 inputs):
// relative error ≤ 1e-6, absolute ≤ 1e-9 where the golden value is 0.
func TestGoldenDiagnostics(t *testing.T) {
	const relTol, absTol = 1e-6, 1e-9
	metricOf := map[string]string{ // golden name → Collector metric
		"neff": results.MetricNEff, "S_mean": results.MetricSMean, "lambda_obs": results.MetricLambdaObs, "K": results.MetricK,
		"K_dim_mean": results.MetricKDimMean, "bos_mass": results.MetricBOSMass, "S": results.MetricS, "lambda_obs_dim": results.MetricLambdaObsDim,
	}
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			g := loadGolden(t, name)
			worstRel, worstAbs0 := map[string]float64{}, map[string]float64{}
			for _, rows := range []int{1, 7, g.T} {
				c, err := NewCollector(g.B, g.L, g.H, g.T, g.D, CollectorOptions{KeepPerDim: true})
				if err != nil {
					t.Fatal(err)
				}
				for l := 0; l < g.L; l++ {
					for b := 0; b < g.B; b++ {
						for h := 0; h < g.H; h++ {
							for _, tile := range tiles(g.attn[l], g.v[l], g.B, g.H, g.T, g.D, b, l, h, rows) {
								if err := c.ConsumeAttn(tile); err != nil {
									t.Fatalf("tiles of %d: ConsumeAttn(b=%d l=%d h=%d q0=%d): %v", rows, b, l, h, tile.Q0, err)
								}
							}
						}
					}
				}
				for _, gm := range []string{"neff", "S_mean", "lambda_obs", "K", "K_dim_mean", "bos_mass", "S", "lambda_obs_dim"} {
					got, _ := c.Metric(metricOf[gm])
					rel, abs0, at := maxErr(got, g.diag[gm])
					worstRel[gm], worstAbs0[gm] = math.Max(worstRel[gm], rel), math.Max(worstAbs0[gm], abs0)
					if rel > relTol || abs0 > absTol {
						t.Errorf("tiles of %d rows: %s: max rel err %.3g at flat index %d (got %.17g, golden %.17g); max |got| where golden is 0: %.3g",
							rows, gm, rel, at, got[max(at, 0)], g.diag[gm][max(at, 0)], abs0)
					}
				}
				// Identity on real rows: t = 0 is one-hot, so λobs = 2·d_head and
				// K = 2d/(2d+1) exactly.
				for b := 0; b < g.B; b++ {
					for l := 0; l < g.L; l++ {
						for h := 0; h < g.H; h++ {
							if lam := cell(t, c, results.MetricLambdaObs, b, l, h, 0); lam != 2*float64(g.D) {
								t.Errorf("lambda_obs[b=%d l=%d h=%d t=0] = %.17g, want 2·d_head = %d", b, l, h, lam, 2*g.D)
							}
						}
					}
				}
			}
			for _, gm := range []string{"neff", "S_mean", "lambda_obs", "K", "K_dim_mean", "bos_mass", "S", "lambda_obs_dim"} {
				t.Logf("%-14s max rel err %.2e, max |got| where golden = 0: %.1e (tiles of 1, 7, %d rows)",
					gm, worstRel[gm], worstAbs0[gm], g.T)
			}
			if g.gate != nil {
				checkGoldenGates(t, g)
			}
		})
	}
}

// checkGoldenGates stores the golden gates with SetLayerGates and checks the
// per-(b, l, h, t) value: the gate itself (head-wise) or its mean over d_head
// (element-wise), rounded to float32 once.
func checkGoldenGates(t *testing.T, g *goldenCase) {
	c, err := NewCollector(g.B, g.L, g.H, g.T, g.D, CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for l := 0; l < g.L; l++ {
		if err := c.SetLayerGates(l, g.gate[l], g.gatePerHead); err != nil {
			t.Fatalf("SetLayerGates(layer %d, perHead %d): %v", l, g.gatePerHead, err)
		}
	}
	var mean float64
	for l := 0; l < g.L; l++ {
		for b := 0; b < g.B; b++ {
			for q := 0; q < g.T; q++ {
				for h := 0; h < g.H; h++ {
					o := ((b*g.T+q)*g.H + h) * g.gatePerHead
					var want float64
					for k := 0; k < g.gatePerHead; k++ {
						want += float64(g.gate[l][o+k])
					}
					want /= float64(g.gatePerHead)
					got := cell(t, c, results.MetricGate, b, l, h, q)
					if !storedFrom(got, want, 1e-15) || !(got > 0 && got < 1) {
						t.Fatalf("gate[b=%d l=%d h=%d t=%d] = %.17g, want %.17g in (0,1)", b, l, h, q, got, want)
					}
					mean += got
				}
			}
		}
	}
	t.Logf("gates: %d per head, mean %.4f over all (b, l, h, t)", g.gatePerHead, mean/float64(g.B*g.L*g.H*g.T))
}
