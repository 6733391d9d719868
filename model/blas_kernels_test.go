package model

import (
	"math"
	"math/rand/v2"
	"sync"
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
// sums over the tile's own weights and values, and counts the rows it sees
// per (batch, head, query).
type momentsRecorder struct {
	t                    *testing.T
	sumOnly              bool // ask for hooks.AttnMoments.SSum instead of S
	mu                   sync.Mutex
	seen                 map[[3]int]int
	tiles, rows          int
	worstSum, worstE     float64
	worstS, worstEntropy float64
}

func (m *momentsRecorder) ConsumeAttn(*hooks.AttnTile) error {
	m.t.Error("ConsumeAttn called on a finite tile")
	return nil
}

func (m *momentsRecorder) MomentsSumOnly() bool { return m.sumOnly }

func (m *momentsRecorder) ConsumeMoments(am *hooks.AttnMoments) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := am.Tile
	d := a.DHead
	if (am.S == nil) != m.sumOnly || (am.SSum == nil) != !m.sumOnly {
		m.t.Fatalf("sumOnly %v: got S %v, SSum %v", m.sumOnly, am.S != nil, am.SSum != nil)
	}
	m.tiles++
	for r := 0; r < a.Rows; r++ {
		m.seen[[3]int{a.Batch, a.Head, a.Q0 + r}]++
	}
	e := make([]float64, d)
	for r := 0; r < a.Rows; r++ {
		m.rows++
		alpha := a.Row(r)
		var s1, s2, h float64
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
		var sSum float64
		for i := range e {
			var s, abs float64
			for j, x := range alpha {
				v := float64(a.Value(j)[i])
				s += float64(x) * (v - e[i]) * (v - e[i])
				abs += float64(x) * math.Abs(v)
			}
			m.worstE = math.Max(m.worstE, math.Abs(am.E[r*d+i]-e[i])/abs)
			// S: relative to the two-pass value (the guarded matrix-product
			// form, see hooks.AttnMoments), absolute only where S is 0.
			sSum += s
			if !m.sumOnly {
				m.worstS = math.Max(m.worstS, math.Abs(am.S[r*d+i]-s)/math.Max(s, 1e-300))
			}
		}
		if m.sumOnly {
			m.worstS = math.Max(m.worstS, math.Abs(am.SSum[r]-sSum)/math.Max(sSum, 1e-300))
		}
		m.worstSum = math.Max(m.worstSum, math.Abs(am.SumAlpha[r]-s1)/s1)
		m.worstSum = math.Max(m.worstSum, math.Abs(am.SumSq[r]-s2)/s2)
		m.worstEntropy = math.Max(m.worstEntropy, math.Abs(math.Exp(am.Entropy[r])-math.Exp(h))/math.Exp(h))
	}
	return nil
}

// randn32 returns n normal float32 values of standard deviation sd around
// offset.
func randn32(rng *rand.Rand, n int, sd, offset float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64()*sd + offset)
	}
	return x
}

// TestAttentionMoments: the moments that causalAttention hands to a
// hooks.MomentsConsumer match float64 two-pass sums over the tile's weights
// (hooks.AttnMoments' stated accuracy), with and without a sliding window, for
// tiles that do and do not divide T, grouped and ungrouped heads, with a
// sink key, on values centred at 0 (the product form) and with a common
// offset 300 times their spread (rows recomputed by two passes); and the
// output z is the same as without consumers, bit for bit. Each case runs
// twice: S per dimension, and Σ_i S_i alone (hooks.SumOnlyConsumer), also at a
// head dimension the assembly norms do not take (dh = 24).
func TestAttentionMoments(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const B, T = 2, 150
	for _, tc := range []struct {
		name                string
		H, KV, tile, window int
		sd, offset          float64 // of the values
	}{{"tile7", 4, 2, 7, 0, 1, 0}, {"tile64", 4, 2, 64, 0, 1, 0}, {"window", 4, 2, 16, 40, 1, 0}, {"mha", 3, 3, 32, 0, 1, 0},
		{"group8", 8, 1, 64, 0, 1, 0}, // the 8 query heads of the KV head in two stacks of 4
		{"offset/tile7", 4, 2, 7, 0, 0.1, 30}, {"offset/tile64", 4, 2, 64, 0, 0.1, 30}, {"offset/window", 4, 2, 16, 40, 0.1, 30},
		{"offset/group8", 8, 1, 64, 0, 0.1, 30}} {
		for _, mode := range []struct {
			name    string
			sumOnly bool
			dh      int
		}{{"perdim", false, 16}, {"sum", true, 16}, {"sum/dh24", true, 24}} {
			t.Run(tc.name+"/"+mode.name, func(t *testing.T) {
				H, KV, dh := tc.H, tc.KV, mode.dh
				q, k := randn32(rng, B*T*H*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0)
				v := randn32(rng, B*T*KV*dh, tc.sd, tc.offset)
				for b := 0; b < B; b++ { // key 0 is a sink: large q·k0 for every query
					for i := 0; i < KV*dh; i++ {
						k[b*T*KV*dh+i] = 4
					}
					for r := 0; r < T; r++ {
						for i := 0; i < H*dh; i++ {
							q[(b*T+r)*H*dh+i] += 0.5
						}
					}
				}
				rec := &momentsRecorder{t: t, sumOnly: mode.sumOnly, seen: map[[3]int]int{}}
				a := &attnArgs{batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: 0.25, window: tc.window,
					q: q, k: k, v: v, z: make([]float32, B*T*H*dh), consumers: []hooks.AttnConsumer{rec},
					tileRows: tc.tile, threads: 2}
				if err := causalAttention(a); err != nil {
					t.Fatal(err)
				}
				// Consumers only observe: z is the same without them, bit for bit.
				plain := *a
				plain.consumers, plain.z = nil, make([]float32, len(a.z))
				if err := causalAttention(&plain); err != nil {
					t.Fatal(err)
				}
				for i := range a.z {
					if a.z[i] != plain.z[i] {
						t.Fatalf("z[%d] = %v with a moments consumer, %v without", i, a.z[i], plain.z[i])
					}
				}
				t.Logf("%d tiles, %d rows: worst rel. error Σα/Σα² %.2g, e %.2g, S %.2g, exp(entropy) %.2g",
					rec.tiles, rec.rows, rec.worstSum, rec.worstE, rec.worstS, rec.worstEntropy)
				if rec.rows != B*H*T || len(rec.seen) != B*H*T {
					t.Errorf("%d rows seen (%d distinct), want each of the %d once", rec.rows, len(rec.seen), B*H*T)
				}
				if rec.worstSum > 1e-6 || rec.worstE > 2e-6 || rec.worstS > 1e-5 || rec.worstEntropy > 1e-6 {
					t.Errorf("moments outside their stated accuracy")
				}
			})
		}
	}
}

// TestSwiGLU: swiglu equals act(gate)·up element by element (within 8 ulp
// of the float64 silu·u, absolute 1e-37 where that underflows), for lengths that do and do not fill its chunks, and keeps
// NaN and the limit of silu at +Inf.
func TestSwiGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{1, 7, 8, 4097, 100_003} {
		g := make([]float32, n)
		u := make([]float32, n)
		for i := range g {
			g[i] = float32(rng.NormFloat64() * 4)
			u[i] = float32(rng.NormFloat64())
		}
		if n > 8 {
			copy(g, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 100, -100, 88.5, -88.5, 0})
		}
		orig := append([]float32(nil), g...)
		swiglu(g, u, "silu")
		worst := 0.0
		for i, x := range orig {
			want := float64(x) / (1 + math.Exp(-float64(x))) * float64(u[i])
			got := float64(g[i])
			switch {
			case math.IsNaN(float64(x)) || math.IsInf(float64(x), -1):
				// NaN in, NaN out; silu(−Inf) = −0·u or NaN (−Inf/Inf): either is accepted
				if math.IsNaN(float64(x)) && !math.IsNaN(got) {
					t.Errorf("n=%d: silu(NaN)·u = %v, want NaN", n, got)
				}
				continue
			case math.IsInf(want, 0):
				if got != want {
					t.Errorf("n=%d: silu(%v)·%v = %v, want %v", n, x, u[i], got, want)
				}
				continue
			}
			// ulps of the result, with 1e-37 as the floor (silu(x) for x ≲ −85
			// is below it and underflows to −0 once e^−x overflows)
			ulp := float64(math.Nextafter32(float32(math.Abs(want)), float32(math.Inf(1))) - float32(math.Abs(want)))
			if e := math.Abs(got-want) / math.Max(ulp, 1e-37); e > worst {
				worst = e
			}
		}
		if worst > 8 {
			t.Errorf("n=%d (%s): worst error %.1f ulp, want ≤ 8", n, BLAS(), worst)
		}
	}
}

// TestSoftmaxSoftcap: softmaxTile as this build dispatches it, and
// softmaxTileGo on the Go row kernel, cap exactly the scores a row sees
// (keys max(0, t−window+1) … t), to the bits of the float32 formula
// c·tanh(x/c) (checkSoftcap).
func TestSoftmaxSoftcap(t *testing.T) {
	checkSoftcap(t, "softmaxTile", softmaxTile)
	row := softmaxRowStats
	defer func() { softmaxRowStats = row }()
	softmaxRowStats = softmaxRowStatsGo
	checkSoftcap(t, "softmaxTileGo on softmaxRowStatsGo", softmaxTileGo)
}

// checkSoftcap checks a softmaxTile implementation's soft-cap: on random
// tiles (windows none, 1, 5; query offsets 0 and 40; scores of standard
// deviation 6, with ±1e4, ±Inf and a NaN among them), its weights and
// statistics with soft-cap c equal, bit for bit, its own output with
// soft-cap 0 on scores capped beforehand by float32(math.Tanh(float64(x/c)))·c
// on the keys each row sees (PyTorch's roundings of Gemma 2's soft-cap);
// without statistics the weights are the same; the cap changes the
// weights; the weights outside a row's keys are 0.
func checkSoftcap(t *testing.T, name string, tile softmaxTileFunc) {
	t.Helper()
	rng := rand.New(rand.NewPCG(21, 22))
	const rows, c = 19, float32(2.5)
	for _, q0 := range []int{0, 40} {
		for _, window := range []int{0, 1, 5} {
			ncol := q0 + rows
			src := make([]float32, rows*ncol)
			for i := range src {
				src[i] = float32(rng.NormFloat64() * 6)
			}
			for i, x := range []float32{1e4, -1e4, float32(math.Inf(1)), float32(math.Inf(-1))} {
				src[(3+4*i)*ncol+q0+2] = x // rows 3, 7, 11, 15 see key q0+2
			}
			src[18*ncol+q0+17] = float32(math.NaN())
			w := make([]float32, ncol)
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			capped := append([]float32(nil), src...)
			for r := 0; r < rows; r++ {
				tq := q0 + r
				for j := 0; j <= tq; j++ {
					if window == 0 || tq-j < window {
						x := capped[r*ncol+j]
						capped[r*ncol+j] = float32(math.Tanh(float64(x/c))) * c
					}
				}
			}
			type result struct {
				s              []float32
				s1, s2, ent, g []float64
			}
			run := func(in []float32, softcap float32) result {
				res := result{append([]float32(nil), in...), make([]float64, rows), make([]float64, rows), make([]float64, rows), make([]float64, rows)}
				tile(res.s, rows, ncol, q0, window, softcap, noSink, nil, res.s1, res.s2, res.ent, w, res.g)
				return res
			}
			got, want, plain := run(src, c), run(capped, 0), run(src, 0)
			bare := append([]float32(nil), src...) // without statistics
			tile(bare, rows, ncol, q0, window, c, noSink, nil, nil, nil, nil, nil, nil)
			same := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b) }
			changed := false
			for i := range got.s {
				r, j := i/ncol, i%ncol
				if tq := q0 + r; (j > tq || (window > 0 && tq-j >= window)) && got.s[i] != 0 {
					t.Fatalf("%s q0=%d window=%d: row %d key %d outside the row's keys has weight %v", name, q0, window, r, j, got.s[i])
				}
				if !same(got.s[i], want.s[i]) || !same(bare[i], got.s[i]) {
					t.Fatalf("%s q0=%d window=%d: row %d key %d weight %v with the soft-cap (%v without statistics), %v on capped scores",
						name, q0, window, r, j, got.s[i], bare[i], want.s[i])
				}
				changed = changed || !same(got.s[i], plain.s[i])
			}
			for r := 0; r < rows; r++ {
				for _, p := range [][2]float64{{got.s1[r], want.s1[r]}, {got.s2[r], want.s2[r]}, {got.ent[r], want.ent[r]}, {got.g[r], want.g[r]}} {
					if math.Float64bits(p[0]) != math.Float64bits(p[1]) && !(p[0] != p[0] && p[1] != p[1]) {
						t.Fatalf("%s q0=%d window=%d: row %d statistics %v, %v, %v, %v with the soft-cap, %v, %v, %v, %v on capped scores",
							name, q0, window, r, got.s1[r], got.s2[r], got.ent[r], got.g[r], want.s1[r], want.s2[r], want.ent[r], want.g[r])
					}
				}
			}
			if !changed && window != 1 {
				t.Fatalf("%s q0=%d window=%d: the soft-cap %v changes no weight", name, q0, window, c)
			}
		}
	}
}
