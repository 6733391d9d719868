package probes

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
)

// synth is a synthetic attention layer: causal softmax rows [B,H,T,T] and
// per-query-head values [B,H,T,d], like the golden files.
type synth struct {
	B, H, T, D int
	attn, v    []float32
}

func newSynth(rng *rand.Rand, B, H, T, D int) *synth {
	s := &synth{B: B, H: H, T: T, D: D, attn: make([]float32, B*H*T*T), v: make([]float32, B*H*T*D)}
	for bh := 0; bh < B*H; bh++ {
		for t := 0; t < T; t++ {
			row := softmaxRow(rng, t+1, []float64{0.3, 2, 6}[(bh+t)%3])
			copy(s.attn[(bh*T+t)*T:], row)
		}
	}
	for i := range s.v {
		s.v[i] = float32(0.2 + rng.NormFloat64())
	}
	return s
}

// tiles cuts head (b, h) of layer l into tiles of at most rows query rows.
// Alpha is copied with a padded stride and NaN beyond each causal row, V
// with a padded stride and NaN padding: the consumer must read neither.
func tiles(attn, v []float32, B, H, T, D, b, l, h, rows int) []*hooks.AttnTile {
	const padA, padV = 5, 3
	nan := float32(math.NaN())
	bh := b*H + h
	V := make([]float32, T*(D+padV))
	for j := 0; j < T; j++ {
		for i := 0; i < D+padV; i++ {
			if i < D {
				V[j*(D+padV)+i] = v[(bh*T+j)*D+i]
			} else {
				V[j*(D+padV)+i] = nan
			}
		}
	}
	var out []*hooks.AttnTile
	for q0 := 0; q0 < T; q0 += rows {
		n := min(rows, T-q0)
		stride := T + padA
		A := make([]float32, n*stride)
		for r := 0; r < n; r++ {
			t := q0 + r
			for j := 0; j < stride; j++ {
				if j <= t {
					A[r*stride+j] = attn[(bh*T+t)*T+j]
				} else {
					A[r*stride+j] = nan
				}
			}
		}
		out = append(out, &hooks.AttnTile{Batch: b, Layer: l, Head: h, Q0: q0, Rows: n, Stride: stride, Alpha: A,
			T: T, DHead: D, VStride: D + padV, V: V})
	}
	return out
}

func feed(t *testing.T, c *Collector, s *synth, l, rows int) {
	t.Helper()
	for b := 0; b < s.B; b++ {
		for h := 0; h < s.H; h++ {
			for _, tile := range tiles(s.attn, s.v, s.B, s.H, s.T, s.D, b, l, h, rows) {
				if err := c.ConsumeAttn(tile); err != nil {
					t.Fatalf("ConsumeAttn(b=%d l=%d h=%d q0=%d): %v", b, l, h, tile.Q0, err)
				}
			}
		}
	}
}

// TestCollectorMatchesRowFunctions: every stored metric equals the per-row
// functions applied to the same row.
func TestCollectorMatchesRowFunctions(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const B, L, H, T, D = 2, 2, 3, 20, 8
	for _, form := range []LambdaForm{REMLPrior, REMLNaive, Sandwich} {
		c, err := NewCollector(B, L, H, T, D, CollectorOptions{Lambda: LambdaOptions{Form: form}, KeepPerDim: true})
		if err != nil {
			t.Fatal(err)
		}
		layers := []*synth{newSynth(rng, B, H, T, D), newSynth(rng, B, H, T, D)}
		for l, s := range layers {
			feed(t, c, s, l, 7)
		}
		for l, s := range layers {
			for b := 0; b < B; b++ {
				for h := 0; h < H; h++ {
					bh := b*H + h
					v := rowsOf(s.v[bh*T*D:(bh+1)*T*D], D, D)
					for q := 0; q < T; q++ {
						want, S, dim := rowWant(s.attn[(bh*T+q)*T:(bh*T+q)*T+q+1], v, D, form)
						for name, w := range want {
							got := cell(t, c, name, b, l, h, q)
							if !storedFrom(got, w, 1e-10*math.Abs(w)) {
								t.Errorf("%v %s[b=%d l=%d h=%d t=%d] = %.17g, want %.17g", form, name, b, l, h, q, got, w)
							}
						}
						for i := 0; i < D; i++ {
							if got := cellDim(t, c, results.MetricS, b, l, h, q, i); !storedFrom(got, S[i], 1e-13) {
								t.Errorf("%v S[b=%d l=%d h=%d t=%d i=%d] = %.17g, want %.17g", form, b, l, h, q, i, got, S[i])
							}
							if got := cellDim(t, c, results.MetricLambdaObsDim, b, l, h, q, i); !storedFrom(got, dim[i], 1e-10*math.Abs(dim[i])) {
								t.Errorf("%v lambda_obs_dim[b=%d l=%d h=%d t=%d i=%d] = %.17g, want %.17g", form, b, l, h, q, i, got, dim[i])
							}
						}
					}
				}
			}
		}
	}
}

// rowWant returns the per-cell metrics of one row from the per-row
// functions in float64 (gain prior λ = 1), with the row's S and λobs_i.
func rowWant(alpha []float32, v func(int) []float32, D int, form LambdaForm) (want map[string]float64, S, dim []float64) {
	e, S, Bm, dim := make([]float64, D), make([]float64, D), make([]float64, D), make([]float64, D)
	Moments(e, S, alpha, v, TwoPass)
	SandwichMeat(Bm, e, alpha, v)
	st := RowStats{NEff: NEff(alpha), SumAlpha: SumAlpha(alpha), S: S, B: Bm}
	o := LambdaOptions{Form: form}
	o.LambdaDim(dim, st)
	lam := o.Lambda(st)
	return map[string]float64{
		results.MetricNEff:              NEff(alpha),
		results.MetricNEffEntropy:       NEffEntropy(alpha),
		results.MetricSumAlpha:          SumAlpha(alpha),
		results.MetricSMean:             Mean(S),
		results.MetricLambdaObs:         lam,
		results.MetricK:                 KalmanGain(lam, 1),
		results.MetricLambdaObsDimMean:  LambdaOptions{Form: form, Reduction: PerDimMean}.Lambda(st),
		results.MetricKDimMean:          KDimMean(dim, 1),
		results.MetricLambdaObsHarmonic: LambdaOptions{Form: form, Reduction: Harmonic}.Lambda(st),
		results.MetricBOSMass:           BOSMass(alpha),
		results.MetricENorm:             Norm2(e),
	}, S, dim
}

// TestCollectorRoundsOnce: a stored cell is the float32 nearest the
// float64 value of the row's formula — rounded once, at the store, never
// from float32 intermediates (those would be off by ~1e-7) — on both paths
// (ConsumeAttn walking the rows; ConsumeMoments given float64 moments, as
// MatrixKernel is), and Get and GetDim widen it without changing it.
func TestCollectorRoundsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	const T, D = 9, 4
	s := newSynth(rng, 1, 1, T, D)
	v := rowsOf(s.v, D, D)
	byRows, _ := NewCollector(1, 1, 1, T, D, CollectorOptions{Kernel: RowKernel, KeepPerDim: true})
	feed(t, byRows, s, 0, T)
	byMoments, _ := NewCollector(1, 1, 1, T, D, CollectorOptions{KeepPerDim: true})
	am := &hooks.AttnMoments{Tile: tiles(s.attn, s.v, 1, 1, T, D, 0, 0, 0, T)[0], SumAlpha: make([]float64, T),
		SumSq: make([]float64, T), Entropy: make([]float64, T), E: make([]float64, T*D), S: make([]float64, T*D)}
	for q := 0; q < T; q++ {
		alpha := s.attn[q*T : q*T+q+1]
		Moments(am.E[q*D:(q+1)*D], am.S[q*D:(q+1)*D], alpha, v, TwoPass)
		am.SumAlpha[q], am.SumSq[q], am.Entropy[q] = SumAlpha(alpha), 1/NEff(alpha), math.Log(NEffEntropy(alpha))
	}
	if err := byMoments.ConsumeMoments(am); err != nil {
		t.Fatal(err)
	}
	rounded := 0 // values float32 cannot hold: the check is not vacuous
	for _, c := range []struct {
		name string
		c    *Collector
	}{{"ConsumeAttn", byRows}, {"ConsumeMoments", byMoments}} {
		for q := 0; q < T; q++ {
			want, S, dim := rowWant(s.attn[q*T:q*T+q+1], v, D, REMLPrior)
			for name, w := range want {
				x, _ := c.c.Metric(name)
				if got := cell(t, c.c, name, 0, 0, 0, q); !storedFrom(got, w, 1e-13*math.Abs(w)) || got != float64(x[q]) {
					t.Errorf("%s: %s[t=%d] = %.17g (stored %.9g), want float32(%.17g) = %.9g", c.name, name, q, got, x[q], w, float32(w))
				}
				if float64(float32(w)) != w {
					rounded++
				}
			}
			for i := 0; i < D; i++ {
				for _, m := range []struct {
					name string
					w    float64
				}{{results.MetricS, S[i]}, {results.MetricLambdaObsDim, dim[i]}} {
					if got := cellDim(t, c.c, m.name, 0, 0, 0, q, i); !storedFrom(got, m.w, 1e-13*math.Abs(m.w)) {
						t.Errorf("%s: %s[t=%d i=%d] = %.17g, want float32(%.17g) = %.9g", c.name, m.name, q, i, got, m.w, float32(m.w))
					}
				}
			}
		}
	}
	if rounded == 0 {
		t.Fatal("every expected value is a float32: the test cannot tell one rounding from none")
	}
}

func allMetrics(c *Collector) map[string][]float32 {
	m := map[string][]float32{}
	for _, name := range c.Metrics() {
		x, _ := c.Metric(name)
		m[name] = x
	}
	return m
}

// TestCollectorTileSizesAgree: the result does not depend on how the rows
// are tiled, nor on concurrent consumption of different (batch, head).
func TestCollectorTileSizesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const B, L, H, T, D = 2, 1, 4, 33, 16
	s := newSynth(rng, B, H, T, D)
	ref, _ := NewCollector(B, L, H, T, D, CollectorOptions{KeepPerDim: true})
	feed(t, ref, s, 0, T)
	for _, rows := range []int{1, 7, 32} {
		c, _ := NewCollector(B, L, H, T, D, CollectorOptions{KeepPerDim: true})
		feed(t, c, s, 0, rows)
		compareCollectors(t, "tiles of "+strconv.Itoa(rows), c, ref)
	}
	// Concurrent: one goroutine per (batch, head), tiles of 5 rows.
	c, _ := NewCollector(B, L, H, T, D, CollectorOptions{KeepPerDim: true})
	var wg sync.WaitGroup
	errs := make(chan error, B*H)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			wg.Add(1)
			go func(b, h int) {
				defer wg.Done()
				for _, tile := range tiles(s.attn, s.v, B, H, T, D, b, 0, h, 5) {
					if err := c.ConsumeAttn(tile); err != nil {
						errs <- err
						return
					}
				}
			}(b, h)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent ConsumeAttn: %v", err)
	}
	compareCollectors(t, "concurrent", c, ref)
}

func compareCollectors(t *testing.T, name string, c, ref *Collector) {
	t.Helper()
	want := allMetrics(ref)
	for m, got := range allMetrics(c) {
		for i, g := range got {
			w := want[m][i]
			if g != w && !(math.IsNaN(float64(g)) && math.IsNaN(float64(w))) {
				t.Errorf("%s: %s[%d] = %.17g, want %.17g (identical to the single-tile run)", name, m, i, g, w)
				break
			}
		}
	}
}

func TestCollectorUnfilledCellsAreNaN(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	s := newSynth(rng, 1, 1, 10, 4)
	c, _ := NewCollector(1, 2, 1, 12, 4, CollectorOptions{})
	feed(t, c, s, 1, 3) // layer 1, queries 0..9 of 12
	for _, x := range []struct {
		l, q   int
		filled bool
	}{{1, 0, true}, {1, 9, true}, {1, 10, false}, {1, 11, false}, {0, 0, false}} {
		if got := cell(t, c, results.MetricNEff, 0, x.l, 0, x.q); math.IsNaN(got) == x.filled {
			t.Errorf("neff[l=%d t=%d] = %g, filled=%v", x.l, x.q, got, x.filled)
		}
	}
	if g := cell(t, c, results.MetricGate, 0, 1, 0, 0); !math.IsNaN(g) {
		t.Errorf("gate never set = %g, want NaN", g)
	}
}

func TestCollectorNonFinite(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	const T, D = 12, 4
	cases := []struct {
		name      string
		poison    func(s *synth) // makes rows ≥ 5 of head 1, batch 0 bad
		wantQuery int
		wantWhere string
	}{
		{"NaN weight at query 5", func(s *synth) { s.attn[((0*2+1)*T+5)*T+2] = float32(math.NaN()) }, 5, "attention weights"},
		{"+Inf weight at query 5", func(s *synth) { s.attn[((0*2+1)*T+5)*T+5] = float32(math.Inf(1)) }, 5, "attention weights"},
		{"Inf value at key 5", func(s *synth) { s.v[((0*2+1)*T+5)*D+3] = float32(math.Inf(-1)) }, 5, "values"},
		{"NaN value at key 5 under zero weight", func(s *synth) {
			s.v[((0*2+1)*T+5)*D] = float32(math.NaN())
			for q := 5; q < T; q++ { // α_5 = 0 exactly in every row: 0·NaN is still NaN
				row := s.attn[((0*2+1)*T+q)*T:]
				row[0] += row[5]
				row[5] = 0
			}
		}, 5, "values"},
	}
	for _, tc := range cases {
		for _, cont := range []bool{false, true} {
			s := newSynth(rng, 1, 2, T, D)
			tc.poison(s)
			c, _ := NewCollector(1, 3, 2, T, D, CollectorOptions{ContinueOnNonFinite: cont})
			var firstErr error
			for h := 0; h < 2; h++ {
				for _, tile := range tiles(s.attn, s.v, 1, 2, T, D, 0, 2, h, 4) {
					if err := c.ConsumeAttn(tile); err != nil && firstErr == nil {
						firstErr = err
					}
				}
			}
			bad, ok := c.FirstNonFinite()
			if !ok || bad.Layer != 2 || bad.Head != 1 || bad.Query != tc.wantQuery || bad.Where != tc.wantWhere {
				t.Errorf("%s (continue=%v): FirstNonFinite = %+v, %v; want layer 2 head 1 query %d %q",
					tc.name, cont, bad, ok, tc.wantQuery, tc.wantWhere)
			}
			if cont {
				if firstErr != nil {
					t.Errorf("%s (continue): ConsumeAttn returned %v, want nil", tc.name, firstErr)
				}
				if n := c.NonFiniteRows(); n == 0 {
					t.Errorf("%s (continue): NonFiniteRows = 0", tc.name)
				}
				if x := cell(t, c, results.MetricNEff, 0, 2, 0, T-1); math.IsNaN(x) {
					t.Errorf("%s (continue): clean head 0 not stored", tc.name)
				}
				continue
			}
			var nf *NonFiniteError
			if !errors.As(firstErr, &nf) {
				t.Fatalf("%s: ConsumeAttn error = %v, want *NonFiniteError", tc.name, firstErr)
			}
			msg := firstErr.Error()
			for _, want := range []string{"layer 2", "head 1", "query " + strconv.Itoa(tc.wantQuery)} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s: error %q does not name %q", tc.name, msg, want)
				}
			}
			if x := cell(t, c, results.MetricNEff, 0, 2, 1, tc.wantQuery-1); math.IsNaN(x) {
				t.Errorf("%s: row before the bad one not stored", tc.name)
			}
		}
	}
}

func TestCollectorTileShapeErrors(t *testing.T) {
	const T, D = 8, 4
	good := func() *hooks.AttnTile {
		return &hooks.AttnTile{Batch: 0, Layer: 0, Head: 0, Q0: 4, Rows: 4, Stride: T, Alpha: make([]float32, 4*T),
			T: T, DHead: D, VStride: D, V: make([]float32, T*D)}
	}
	cases := []struct {
		name   string
		change func(a *hooks.AttnTile)
	}{
		{"batch out of range", func(a *hooks.AttnTile) { a.Batch = 2 }},
		{"layer out of range", func(a *hooks.AttnTile) { a.Layer = -1 }},
		{"head out of range", func(a *hooks.AttnTile) { a.Head = 3 }},
		{"DHead mismatch", func(a *hooks.AttnTile) { a.DHead = 5 }},
		{"queries beyond T", func(a *hooks.AttnTile) { a.Q0 = 5 }},
		{"stride shorter than last row", func(a *hooks.AttnTile) { a.Stride = 7 }},
		{"Alpha too short", func(a *hooks.AttnTile) { a.Alpha = a.Alpha[:3*T+7] }},
		{"V too short", func(a *hooks.AttnTile) { a.V = a.V[:7*D+3] }},
		{"VStride < DHead", func(a *hooks.AttnTile) { a.VStride = 3 }},
		{"tile T shorter than queries", func(a *hooks.AttnTile) { a.T = 7 }},
	}
	c, _ := NewCollector(1, 1, 2, T, D, CollectorOptions{})
	if err := c.ConsumeAttn(good()); err != nil {
		t.Fatalf("good tile: %v", err)
	}
	for _, tc := range cases {
		a := good()
		tc.change(a)
		if err := c.ConsumeAttn(a); !errors.Is(err, ErrTileShape) {
			t.Errorf("%s: ConsumeAttn = %v, want an ErrTileShape error", tc.name, err)
		}
	}
	if _, err := NewCollector(1, 0, 1, 1, 1, CollectorOptions{}); err == nil {
		t.Errorf("NewCollector with 0 layers: no error")
	}
	if _, err := NewCollector(1, 1, 1, 1, 1, CollectorOptions{Lambda: LambdaOptions{Nu: -1}}); err == nil {
		t.Errorf("NewCollector with ν = -1: no error")
	}
}

func TestCollectorGates(t *testing.T) {
	const B, L, H, T, D = 2, 2, 3, 5, 4
	c, _ := NewCollector(B, L, H, T, D, CollectorOptions{})
	head := make([]float32, B*T*H) // [B,T,H]
	elem := make([]float32, B*T*H*D)
	for i := range head {
		head[i] = float32(i) / 100
		for k := 0; k < D; k++ {
			elem[i*D+k] = float32(i)/100 + float32(k-1)/1000 // mean over k: i/100 + 0.0005
		}
	}
	if err := c.SetLayerGates(0, head, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.SetLayerGates(1, elem, D); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < B; b++ {
		for q := 0; q < T; q++ {
			for h := 0; h < H; h++ {
				i := (b*T+q)*H + h
				if got, want := cell(t, c, results.MetricGate, b, 0, h, q), float64(head[i]); got != want {
					t.Errorf("headwise gate[b=%d t=%d h=%d] = %g, want %g", b, q, h, got, want)
				}
				if got, want := cell(t, c, results.MetricGate, b, 1, h, q), float64(float32(GateMean(elem[i*D:(i+1)*D]))); got != want {
					t.Errorf("elementwise gate[b=%d t=%d h=%d] = %g, want %g", b, q, h, got, want)
				}
			}
		}
	}
	c.SetGate(1, 1, 4, 2, 0.75)
	if got := cell(t, c, results.MetricGate, 1, 1, 2, 4); got != 0.75 {
		t.Errorf("SetGate(1,1,4,2): gate = %g, want 0.75", got)
	}
	c.SetGateVector(0, 0, 3, 1, []float32{0.5, 1})
	if got := cell(t, c, results.MetricGate, 0, 0, 1, 3); got != 0.75 {
		t.Errorf("SetGateVector: gate = %g, want 0.75", got)
	}
	if err := c.SetLayerGates(0, head[:7], 1); err == nil {
		t.Errorf("SetLayerGates with 7 values: no error")
	}
	if err := c.SetLayerGates(2, head, 1); err == nil {
		t.Errorf("SetLayerGates on layer 2 of 2: no error")
	}
}

func TestCollectorBOSKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	s := newSynth(rng, 1, 1, 6, 2)
	c, _ := NewCollector(1, 1, 1, 6, 2, CollectorOptions{BOSKeys: []int{0, 1}})
	feed(t, c, s, 0, 6)
	for q := 0; q < 6; q++ {
		row := s.attn[q*6 : q*6+q+1]
		if got, want := cell(t, c, results.MetricBOSMass, 0, 0, 0, q), float64(float32(ColumnMass(row, []int{0, 1}))); got != want {
			t.Errorf("bos_mass with keys {0,1} at t=%d = %g, want %g", q, got, want)
		}
	}
}

// TestCollectorNoAllocPerRow: ConsumeAttn allocates nothing once its
// scratch pool is warm.
func TestCollectorNoAllocPerRow(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	s := newSynth(rng, 1, 1, 64, 16)
	c, _ := NewCollector(1, 1, 1, 64, 16, CollectorOptions{KeepPerDim: true})
	tile := tiles(s.attn, s.v, 1, 1, 64, 16, 0, 0, 0, 64)[0]
	if err := c.ConsumeAttn(tile); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() { _ = c.ConsumeAttn(tile) }); n > 0 {
		t.Errorf("ConsumeAttn of 64 rows: %g allocations per call, want 0", n)
	}
}

// cell is Collector.Get, failing the test on an error.
func cell(t *testing.T, c *Collector, metric string, b, l, h, q int) float64 {
	t.Helper()
	x, err := c.Get(metric, b, l, h, q)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// cellDim is Collector.GetDim, failing the test on an error.
func cellDim(t *testing.T, c *Collector, metric string, b, l, h, q, i int) float64 {
	t.Helper()
	x, err := c.GetDim(metric, b, l, h, q, i)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestCollectorGetErrors: an unknown metric, a per-dimension one through
// Get, and an index out of range are errors that name what is held.
func TestCollectorGetErrors(t *testing.T) {
	c, err := NewCollector(1, 2, 2, 4, 8, CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		metric     string
		b, l, h, q int
		want       string
	}{
		{"k_bft", 0, 0, 0, 0, `"k_bft" is not a per-cell metric of this Collector (it holds neff,`},
		{results.MetricS, 0, 0, 0, 0, "is not a per-cell metric"},
		{results.MetricK, 0, 2, 0, 0, "out of range"},
	} {
		if _, err := c.Get(tc.metric, tc.b, tc.l, tc.h, tc.q); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Get(%q, %d, %d, %d, %d): %v, want an error containing %q", tc.metric, tc.b, tc.l, tc.h, tc.q, err, tc.want)
		}
	}
	if _, err := c.GetDim(results.MetricS, 0, 0, 0, 0, 0); err == nil || !strings.Contains(err.Error(), "KeepPerDim") {
		t.Errorf("GetDim without KeepPerDim: %v", err)
	}
}
