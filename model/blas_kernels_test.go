package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/filterlens/probe/hooks"
)

// TestExpf: expf is within 2 ulp of e^x over the normal range, and falls
// back to math.Exp outside it (NaN, ±Inf, underflow, overflow).
func TestExpf(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	worst := 0.0
	var worstX float32
	check := func(x float32) {
		got := expf(x)
		want := math.Exp(float64(x))
		ulp := float64(math.Nextafter32(float32(want), float32(math.Inf(1))) - float32(want))
		if e := math.Abs(float64(got)-want) / ulp; e > worst {
			worst, worstX = e, x
		}
	}
	for i := 0; i < 2_000_000; i++ {
		check(float32(rng.Float64()*(88.3+87.3) - 87.3))
	}
	for i := 0; i < 200_000; i++ {
		check(float32(rng.Float64()*2 - 1)) // softmax rows live near 0
	}
	for _, x := range []float32{0, -0, 1, -1, 88.3, -87.3, 1e-30, -1e-30} {
		check(x)
	}
	t.Logf("expf: worst error %.2f ulp at x = %v", worst, worstX)
	if worst > 2 {
		t.Errorf("expf: error %.2f ulp at x = %v, want ≤ 2", worst, worstX)
	}
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 100, -100, -1000} {
		got, want := expf(x), float32(math.Exp(float64(x)))
		if !(got == want || (got != got && want != want)) {
			t.Errorf("expf(%v) = %v, want %v", x, got, want)
		}
	}
}

// momentsRecorder checks every tile's moments against float64 two-pass
// sums over the tile's own weights and values.
type momentsRecorder struct {
	t                    *testing.T
	tiles, rows          int
	worstSum, worstE     float64
	worstS, worstEntropy float64
}

func (m *momentsRecorder) ConsumeAttn(*hooks.AttnTile) error {
	m.t.Error("ConsumeAttn called on a finite tile")
	return nil
}

func (m *momentsRecorder) ConsumeMoments(am *AttnMoments) error {
	a := am.Tile
	d := a.DHead
	m.tiles++
	e := make([]float64, d)
	for r := 0; r < a.Rows; r++ {
		m.rows++
		alpha := a.Row(r)
		var s1, s2, h, scale float64
		clear(e)
		for j, x := range alpha {
			xf := float64(x)
			s1 += xf
			s2 += xf * xf
			if x != 0 {
				h -= xf * math.Log(xf)
			}
			for i, v := range a.Value(j) {
				e[i] += xf * float64(v)
			}
		}
		for i := range e {
			var s, abs float64
			for j, x := range alpha {
				v := float64(a.Value(j)[i])
				s += float64(x) * (v - e[i]) * (v - e[i])
				abs += float64(x) * math.Abs(v)
				scale = math.Max(scale, float64(x)*v*v)
			}
			m.worstE = math.Max(m.worstE, math.Abs(am.E[r*d+i]-e[i])/abs)
			// S: relative, beside an absolute floor of 1e-13 of the
			// largest weighted square (see AttnMoments).
			m.worstS = math.Max(m.worstS, math.Abs(am.S[r*d+i]-s)/(s+1e-7*scale))
		}
		m.worstSum = math.Max(m.worstSum, math.Abs(am.SumAlpha[r]-s1)/s1)
		m.worstSum = math.Max(m.worstSum, math.Abs(am.SumSq[r]-s2)/s2)
		m.worstEntropy = math.Max(m.worstEntropy, math.Abs(math.Exp(am.Entropy[r])-math.Exp(h))/math.Exp(h))
	}
	return nil
}

// TestAttentionMoments: the moments that causalAttention hands to a
// MomentsConsumer match float64 two-pass sums over the tile's weights
// (AttnMoments' stated accuracy), with and without a sliding window, for
// tiles that do and do not divide T, on values with a large common offset
// and a sink key.
func TestAttentionMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const B, T, H, KV, dh = 2, 150, 4, 2, 16
	randn := func(n int, sd, offset float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64()*sd + offset)
		}
		return x
	}
	for _, tc := range []struct {
		name         string
		tile, window int
	}{{"tile7", 7, 0}, {"tile64", 64, 0}, {"window", 16, 40}} {
		t.Run(tc.name, func(t *testing.T) {
			q, k := randn(B*T*H*dh, 1, 0), randn(B*T*KV*dh, 1, 0)
			v := randn(B*T*KV*dh, 0.1, 30) // S ≪ e²: the case two-pass sums exist for
			for b := 0; b < B; b++ {       // key 0 is a sink: large q·k0 for every query
				for i := 0; i < KV*dh; i++ {
					k[b*T*KV*dh+i] = 4
				}
				for r := 0; r < T; r++ {
					for i := 0; i < H*dh; i++ {
						q[(b*T+r)*H*dh+i] += 0.5
					}
				}
			}
			rec := &momentsRecorder{t: t}
			a := &attnArgs{batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: 0.25, window: tc.window,
				q: q, k: k, v: v, z: make([]float32, B*T*H*dh), consumers: []hooks.AttnConsumer{rec},
				tileRows: tc.tile, threads: 1}
			if err := causalAttention(a); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d tiles, %d rows: worst rel. error Σα/Σα² %.2g, e %.2g, S %.2g, exp(entropy) %.2g",
				rec.tiles, rec.rows, rec.worstSum, rec.worstE, rec.worstS, rec.worstEntropy)
			if rec.rows != B*H*T {
				t.Errorf("%d rows seen, want %d", rec.rows, B*H*T)
			}
			if rec.worstSum > 1e-13 || rec.worstE > 1e-13 || rec.worstS > 1e-9 || rec.worstEntropy > 1e-6 {
				t.Errorf("moments outside their stated accuracy")
			}
		})
	}
}
