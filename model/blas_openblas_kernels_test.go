//go:build openblas

package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

func init() {
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		tileImpls = append(tileImpls, tileImpl{"softmaxTileAVX2 (C)", softmaxTileAVX2, nil})
	}
}

// TestSoftmaxTileAVX2: the OpenBLAS build's C softmax tile caps its
// scores as the Go kernels do, bit for bit (checkSoftcap), and with the
// soft-cap and a window its weights are softmaxTileGo's on the Go row
// kernel within 4 ulp (fused multiply-adds, summation order; below
// e^−87.3 the C kernel gives 0, Go a subnormal), its Σα, Σα², entropy and
// g = Σα·w within 1e-6 (relative, of 2 + H for the entropy, of Σα|w| for g).
func TestSoftmaxTileAVX2(t *testing.T) {
	if !cpu.X86.HasAVX2 || !cpu.X86.HasFMA {
		t.Skip("this CPU has no AVX2+FMA: the build has no use for the C softmax tile")
	}
	checkSoftcap(t, "softmaxTileAVX2", softmaxTileAVX2)

	row := softmaxRowStats
	defer func() { softmaxRowStats = row }()
	softmaxRowStats = softmaxRowStatsGo
	rng := rand.New(rand.NewPCG(23, 24))
	worst := 0.0
	for _, softcap := range []float32{0, 50, 2.5} {
		for _, window := range []int{0, 7} {
			for _, q0 := range []int{0, 64} {
				const rows = 37 // every tail length of the 8-lane loops
				ncol := q0 + rows
				src := make([]float32, rows*ncol)
				for i := range src {
					src[i] = float32(rng.NormFloat64() * 8)
				}
				w := make([]float32, ncol)
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
				type result struct {
					s              []float32
					s1, s2, ent, g []float64
				}
				run := func(tile softmaxTileFunc) result {
					res := result{append([]float32(nil), src...), make([]float64, rows), make([]float64, rows), make([]float64, rows), make([]float64, rows)}
					tile(res.s, rows, ncol, q0, window, softcap, noSink, nil, res.s1, res.s2, res.ent, w, res.g)
					return res
				}
				got, want := run(softmaxTileAVX2), run(softmaxTileGo)
				for i, x := range want.s {
					if x < 1e-30 { // near or below e^−87.3: subnormal in Go, 0 in C
						if math.Abs(float64(got.s[i]-x)) > 1e-36 {
							t.Fatalf("softcap %v window %d q0 %d: weight %d = %v, Go %v", softcap, window, q0, i, got.s[i], x)
						}
						continue
					}
					worst = max(worst, math.Abs(float64(got.s[i]-x))/float64(math.Nextafter32(x, 2)-x))
				}
				for r := 0; r < rows; r++ {
					var mag float64
					for j, a := range want.s[r*ncol : (r+1)*ncol] {
						mag += float64(a) * math.Abs(float64(w[j]))
					}
					if math.Abs(got.s1[r]-want.s1[r]) > 1e-6 || math.Abs(got.s2[r]-want.s2[r]) > 1e-6*want.s2[r] ||
						math.Abs(got.ent[r]-want.ent[r]) > 1e-6*(2+want.ent[r]) || math.Abs(got.g[r]-want.g[r]) > 1e-6*mag {
						t.Fatalf("softcap %v window %d q0 %d row %d: Σα, Σα², entropy, g %v %v %v %v, Go %v %v %v %v", softcap, window, q0, r,
							got.s1[r], got.s2[r], got.ent[r], got.g[r], want.s1[r], want.s2[r], want.ent[r], want.g[r])
					}
				}
			}
		}
	}
	t.Logf("worst weight error %.2f ulp", worst)
	if worst > 4 {
		t.Errorf("C softmax tile: weights %.2f ulp from the Go ones, want ≤ 4", worst)
	}
}
