package model

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// selropeGoldenCases lists the golden folders whose config.json says
// "architecture": "selective_rope_softmax_attention_layer" (one layer of
// the authors' code), so hidden variants are picked up without naming them.
func selropeGoldenCases(t *testing.T) []string {
	t.Helper()
	cases, err := findSelRoPEGoldenCases()
	if err != nil {
		t.Skipf("golden data not found at %s (it comes with ../shared in CI): %v", goldenDir, err)
	}
	if len(cases) == 0 {
		t.Skipf("no Selective-RoPE golden cases (architecture %q) in %s", selropeLayerArchitecture, goldenDir)
	}
	return cases
}

// findSelRoPEGoldenCases returns the Selective-RoPE layer cases in
// goldenDir (folder names).
func findSelRoPEGoldenCases() ([]string, error) {
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		return nil, err
	}
	var cases []string
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(goldenDir, e.Name(), "config.json"))
		if err != nil {
			continue
		}
		var c struct {
			Architecture string `json:"architecture"`
		}
		if json.Unmarshal(data, &c) == nil && c.Architecture == selropeLayerArchitecture {
			cases = append(cases, e.Name())
		}
	}
	return cases, nil
}

// relErr64 is relErr against a float64 reference.
func relErr64(got []float32, ref []float64) (float64, int) {
	var maxRef, maxDiff float64
	worst := 0
	for i := range ref {
		maxRef = math.Max(maxRef, math.Abs(ref[i]))
		d := math.Abs(float64(got[i]) - ref[i])
		if d > maxDiff || math.IsNaN(d) {
			maxDiff, worst = d, i
		}
	}
	if maxRef == 0 {
		return maxDiff, worst
	}
	return maxDiff / maxRef, worst
}

// TestSelRoPEGoldenParity: one Selective-RoPE attention layer equals the
// authors' code (selective-rope @ d12e825, run on CPU under torch 1.13) on
// every golden tensor — output, the whole angle pipeline, rotated q/k and
// the attention pattern — at max|got − ref|/max|ref| ≤ 1e-4 per tensor,
// against both their float32 run and their float64 run (f64.*).
func TestSelRoPEGoldenParity(t *testing.T) {
	for _, name := range selropeGoldenCases(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(goldenDir, name)
			layer, err := LoadSelRoPELayer(dir)
			if err != nil {
				t.Fatal(err)
			}
			ck, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			info, ok := ck.Info("x")
			if !ok || len(info.Shape) != 3 {
				t.Fatalf("%s: golden.safetensors has no [B,T,D] x", dir)
			}
			x, err := ck.Float32("x")
			if err != nil {
				t.Fatal(err)
			}
			out, err := layer.Forward(x, info.Shape[0], info.Shape[1])
			if err != nil {
				t.Fatal(err)
			}
			temp := layer.Rotary.Temp
			got := map[string][]float32{
				"y": out.Y, "l0.xn": out.XN, "l0.q": out.Q, "l0.k": out.K, "l0.v": out.V,
				"l0.u": out.U, "l0.conv": out.Conv, "l0.dphi": out.DPhi, "l0.phi_tilde": out.PhiTilde,
				"l0.angles": out.Angle, "l0.temperature": temp, "l0.q_rot": out.QRot, "l0.k_rot": out.KRot,
				"l0.attn": out.Attn, "l0.attn_out": out.Z, "l0.phase_gate": out.Gate,
			}
			compared := 0
			for _, key := range ck.Names() {
				base, f64 := key, false
				if len(key) > 4 && key[:4] == "f64." {
					base, f64 = key[4:], true
				}
				g, ok := got[base]
				if !ok {
					continue // x, and tensors of options this case does not use
				}
				if g == nil {
					t.Errorf("%s: the golden file has %s, the layer produced none (option mismatch?)", name, key)
					continue
				}
				ref, err := ck.Float64(key)
				if err != nil {
					t.Fatal(err)
				}
				if len(ref) != len(g) {
					t.Errorf("%s: %d values, golden has %d", key, len(g), len(ref))
					continue
				}
				rel, i := relErr64(g, ref)
				t.Logf("%-18s rel. error %.2g", key, rel)
				if rel > parityTol || math.IsNaN(rel) {
					t.Errorf("%s: rel. error %.3g > %.0e (worst at flat index %d: got %v, want %v)", key, rel, parityTol, i, g[i], ref[i])
				}
				if !f64 && base != "l0.temperature" {
					compared++
				}
			}
			if compared < 12 {
				t.Errorf("%s: only %d float32 tensors compared; the golden layout changed?", name, compared)
			}
			// The stored upper triangle is exactly zero.
			T := info.Shape[1]
			for bh := 0; bh < len(out.Attn)/(T*T); bh++ {
				for q := 0; q < T; q++ {
					for k := q + 1; k < T; k++ {
						if v := out.Attn[(bh*T+q)*T+k]; v != 0 {
							t.Fatalf("attention above the diagonal: [%d,%d,%d] = %v", bh, q, k, v)
						}
					}
				}
			}
		})
	}
}
