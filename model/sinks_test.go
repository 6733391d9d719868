package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// softmaxTileFunc is the signature of the softmax tile implementations
// (softmaxTile).
type softmaxTileFunc = func(s []float32, rows, ncol, q0, window int, softcap, sink float32, sm []float32, s1, s2, ent []float64, w []float32, g []float64)

// rowKernelFunc is the signature of the row kernels (softmaxRowStats).
type rowKernelFunc = func(row []float32, lo int, softcap, sink float32, stats bool, w []float32) (s1, s2, ent, g float64, sm float32)

// tileImpl is one softmax implementation under test: a tile function on a
// row kernel (nil: the one this build dispatches).
type tileImpl struct {
	name string
	tile softmaxTileFunc
	row  rowKernelFunc
}

// tileImpls are the softmax implementations of this build and CPU: the Go
// tile on the Go row, on the AVX-512 row (kern_amd64_test.go) and the
// OpenBLAS build's C tile (blas_openblas_kernels_test.go) where the CPU
// runs them.
var tileImpls = []tileImpl{{"softmaxTileGo on softmaxRowStatsGo", softmaxTileGo, softmaxRowStatsGo}}

// with runs f with softmaxRowStats set to the implementation's row kernel.
func (im tileImpl) with(f func()) {
	row := softmaxRowStats
	defer func() { softmaxRowStats = row }()
	if im.row != nil {
		softmaxRowStats = im.row
	}
	f()
}

// refSinkRow is the float64 reference of one attention row with a sink
// column: the scores x (already capped; −Inf where masked), the sink logit
// s (−Inf: none); it returns α_j = e^(x_j−m)/Z, σ = e^(s−m)/Z with m =
// max(max x, s), Z = Σ e^(x_j−m) + e^(s−m), and the statistics of α.
func refSinkRow(x []float64, s float64, w []float32) (alpha []float64, sigma, s1, s2, ent, g float64) {
	m := s
	for _, v := range x {
		m = math.Max(m, v)
	}
	z := math.Exp(s - m)
	for _, v := range x {
		z += math.Exp(v - m)
	}
	alpha = make([]float64, len(x))
	for j, v := range x {
		a := math.Exp(v-m) / z
		alpha[j] = a
		s1 += a
		s2 += a * a
		if a > 0 {
			ent -= a * math.Log(a)
		}
		if w != nil {
			g += a * float64(w[j])
		}
	}
	return alpha, math.Exp(s-m) / z, s1, s2, ent, g
}

// TestSoftmaxSinks: every softmax implementation of this build (Go tile
// on the Go row, on the AVX-512 row, the OpenBLAS build's C tile) against
// the float64 softmax with the sink column (checkSinkTile), and against
// each other (the same weights within their rounding).
func TestSoftmaxSinks(t *testing.T) {
	for _, im := range tileImpls {
		im.with(func() { checkSinkTile(t, im.name, im.tile) })
	}
}

// checkSinkTile checks a softmaxTile implementation with sink logits on
// random tiles of 37 rows (every tail length of the lanes), for windows
// none, 1 and 5, query offsets 0 and 40, soft-cap off and 2.5, and sink
// logits from none to far above the scores:
//   - each weight and the sink mass σ are the float64 softmax's with the
//     extra column (refSinkRow on the float32-capped scores) within
//     1.2e-7·(4 + |x − m|) relative (the float32 rounding of x − m enters
//     e^(x−m) as |x − m|·2⁻²⁴), and each row's Σα + σ is 1;
//   - Σα, Σα², the entropy of the returned rows and g = Σα·w are the
//     reference's within the same relative bound (the entropy relative to
//     Σα·(1 + max|x − m| + log n) + H);
//   - the weights without statistics are the same bits, the weights outside
//     a row's keys are 0, the sink is not capped;
//   - a sink of −200 (its e^(s−m) below float32's range) gives the weights
//     and statistics of no sink bit for bit and σ = 0.
func checkSinkTile(t *testing.T, name string, tile softmaxTileFunc) {
	t.Helper()
	rng := rand.New(rand.NewPCG(31, 32))
	const rows = 37
	for _, softcap := range []float32{0, 2.5} {
		for _, window := range []int{0, 1, 5} {
			for _, q0 := range []int{0, 40} {
				for _, sink := range []float32{noSink, -200, -30, -3, 0.4, 6, 30} {
					ncol := q0 + rows
					src := make([]float32, rows*ncol)
					for i := range src {
						src[i] = float32(rng.NormFloat64() * 4)
					}
					w := make([]float32, ncol)
					for i := range w {
						w[i] = float32(rng.NormFloat64())
					}
					res := make([]float32, len(src))
					copy(res, src)
					sm := make([]float32, rows)
					s1, s2, ent, g := make([]float64, rows), make([]float64, rows), make([]float64, rows), make([]float64, rows)
					tile(res, rows, ncol, q0, window, softcap, sink, sm, s1, s2, ent, w, g)
					bare := append([]float32(nil), src...)
					bsm := make([]float32, rows)
					tile(bare, rows, ncol, q0, window, softcap, sink, bsm, nil, nil, nil, nil, nil)
					where := fmt.Sprintf("%s softcap=%v window=%d q0=%d sink=%v", name, softcap, window, q0, sink)
					for r := 0; r < rows; r++ {
						tq := q0 + r
						lo := 0
						if window > 0 && tq-window+1 > 0 {
							lo = tq - window + 1
						}
						x := make([]float64, tq+1-lo)
						m := float64(sink)
						for j := range x {
							v := src[r*ncol+lo+j]
							if softcap > 0 {
								v = float32(math.Tanh(float64(v/softcap))) * softcap
							}
							x[j] = float64(v)
							m = math.Max(m, x[j])
						}
						alpha, sigma, r1, r2, rent, rg := refSinkRow(x, float64(sink), w[lo:])
						dmax := 0.0
						for _, v := range x {
							dmax = math.Max(dmax, m-v)
						}
						if sink > noSink {
							dmax = math.Max(dmax, m-float64(sink))
						}
						tol := func(d float64) float64 { return 1.2e-7 * (4 + d) }
						row := res[r*ncol : (r+1)*ncol]
						var sum float64
						for j, a := range row {
							if j < lo || j > tq {
								if a != 0 {
									t.Fatalf("%s: row %d key %d outside the row's keys has weight %v", where, r, j, a)
								}
								continue
							}
							want := alpha[j-lo]
							if math.Abs(float64(a)-want) > tol(m-x[j-lo])*want+1e-36 {
								t.Fatalf("%s: row %d key %d weight %v, float64 reference %v", where, r, j, a, want)
							}
							if math.Float32bits(bare[r*ncol+j]) != math.Float32bits(a) {
								t.Fatalf("%s: row %d key %d weight %v without statistics, %v with", where, r, j, bare[r*ncol+j], a)
							}
							sum += float64(a)
						}
						if math.Abs(float64(sm[r])-sigma) > tol(m-float64(sink))*sigma+1e-36 || bsm[r] != sm[r] {
							t.Fatalf("%s: row %d sink mass %v (%v without statistics), float64 reference %v", where, r, sm[r], bsm[r], sigma)
						}
						if math.Abs(sum+float64(sm[r])-1) > 1e-6 {
							t.Fatalf("%s: row %d: Σα + σ = %v + %v, want 1", where, r, sum, sm[r])
						}
						b := max(tol(dmax), 1e-6)
						var mag float64
						for j, a := range alpha {
							mag += a * math.Abs(float64(w[lo+j]))
						}
						if math.Abs(s1[r]-r1) > b*r1 || math.Abs(s2[r]-r2) > 2*b*r2 ||
							math.Abs(ent[r]-rent) > b*(rent+r1*(1+dmax+math.Log(float64(len(x)+1)))) || math.Abs(g[r]-rg) > b*mag {
							t.Fatalf("%s: row %d: Σα, Σα², entropy, g = %v %v %v %v, float64 reference %v %v %v %v",
								where, r, s1[r], s2[r], ent[r], g[r], r1, r2, rent, rg)
						}
					}
					if sink != -200 {
						continue
					}
					// far below the scores: exactly no sink
					none := append([]float32(nil), src...)
					n1, n2, ne, ng := make([]float64, rows), make([]float64, rows), make([]float64, rows), make([]float64, rows)
					tile(none, rows, ncol, q0, window, softcap, noSink, nil, n1, n2, ne, w, ng)
					if !equal32(none, res) {
						t.Fatalf("%s: the weights differ from those without a sink", where)
					}
					for r := 0; r < rows; r++ {
						if sm[r] != 0 || n1[r] != s1[r] || n2[r] != s2[r] || ne[r] != ent[r] || ng[r] != g[r] {
							t.Fatalf("%s: row %d: σ %v, statistics %v %v %v %v; without a sink %v %v %v %v",
								where, r, sm[r], s1[r], s2[r], ent[r], g[r], n1[r], n2[r], ne[r], ng[r])
						}
					}
				}
			}
		}
	}
}

// TestSoftmaxSinksAgree: the implementations give the same weights and
// sink masses as the Go tile on the Go row within 4 ulp (above 1e-30:
// below e^−87.3 the vector kernels give 0, Go a subnormal), on the same
// tiles with a sink logit.
func TestSoftmaxSinksAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	const rows, q0, window = 37, 30, 9
	ncol := q0 + rows
	src := make([]float32, rows*ncol)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * 6)
	}
	run := func(im tileImpl, sink float32) ([]float32, []float32) {
		s, sm := append([]float32(nil), src...), make([]float32, rows)
		im.with(func() { im.tile(s, rows, ncol, q0, window, 0, sink, sm, nil, nil, nil, nil, nil) })
		return s, sm
	}
	// ulps returns the largest distance of got from want in ulp of want,
	// +Inf where a value below 1e-30 differs by more than 1e-36
	ulps := func(got, want []float32) float64 {
		worst := 0.0
		for i, x := range want {
			if x < 1e-30 {
				if math.Abs(float64(got[i]-x)) > 1e-36 {
					return math.Inf(1)
				}
				continue
			}
			worst = max(worst, math.Abs(float64(got[i]-x))/float64(math.Nextafter32(x, 2)-x))
		}
		return worst
	}
	if len(tileImpls) < 2 {
		t.Skip("this build and CPU have only the Go softmax")
	}
	for _, sink := range []float32{-4, 1.5, 20} {
		want, wsm := run(tileImpls[0], sink)
		for _, im := range tileImpls[1:] {
			got, gsm := run(im, sink)
			worst := max(ulps(got, want), ulps(gsm, wsm))
			t.Logf("%s sink %v: worst %.2f ulp from the Go tile", im.name, sink, worst)
			if worst > 4 {
				t.Errorf("%s sink %v: %.2f ulp from the Go tile, want ≤ 4", im.name, sink, worst)
			}
		}
	}
}

// sinkRecorder keeps every streamed tile's sink masses and row sums.
type sinkRecorder struct {
	mu   sync.Mutex
	sink map[[3]int]float32 // (batch, head, query) → σ
	sum  map[[3]int]float64 // Σα of the row
	bare int                // tiles without Sink
}

func (s *sinkRecorder) ConsumeAttn(a *hooks.AttnTile) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a.Sink == nil {
		s.bare++
	}
	for r := 0; r < a.Rows; r++ {
		var sum float64
		for _, x := range a.Row(r) {
			sum += float64(x)
		}
		key := [3]int{a.Batch, a.Head, a.Q0 + r}
		s.sink[key], s.sum[key] = a.SinkMass(r), sum
	}
	return nil
}

// TestAttentionSinks: attend with learned sink logits (one head's −Inf:
// no sink) equals the float64 attention with the extra softmax column —
// hook_pattern, hook_sink_mass and z within 1e-5 of each tensor's max —
// for tiles that do and do not divide T, grouped heads, a window and a
// soft-cap; each pattern row sums to 1 − σ; the tiles streamed to the
// consumers carry the hook's σ bit for bit, and the moments' Σα is 1 − σ
// (momentsRecorder checks all moments on the raw rows); z is the same
// with the pattern hooked or not (within 1e-6). Sinks all −Inf give the
// output of no sinks bit for bit and issue hook_sink_mass; without sinks it
// is not issued and tiles carry no Sink.
func TestAttentionSinks(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	const B, T, H, KV, dh = 2, 150, 4, 2, 16
	sinks := []float32{0.5, -1, 3, noSink}
	for _, tc := range []struct {
		name    string
		tile    int
		window  int
		softcap float32
	}{{"tile7", 7, 0, 0}, {"tile64", 64, 0, 0}, {"window", 16, 40, 0}, {"softcap", 32, 0, 5}, {"window/softcap", 64, 24, 5}} {
		t.Run(tc.name, func(t *testing.T) {
			q, k, v := randn32(rng, B*T*H*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0.3)
			const scale = 0.4
			type result struct {
				z, pattern, sm []float32
				rec            *sinkRecorder
				mom            *momentsRecorder
			}
			run := func(sinks []float32, hooked bool) result {
				rec := &sinkRecorder{sink: map[[3]int]float32{}, sum: map[[3]int]float64{}}
				mom := &momentsRecorder{t: t, seen: map[[3]int]int{}}
				a := &attnArgs{batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: scale, window: tc.window, softcap: tc.softcap,
					sinks: sinks, q: append([]float32(nil), q...), k: append([]float32(nil), k...), v: append([]float32(nil), v...),
					z: make([]float32, B*T*H*dh), consumers: []hooks.AttnConsumer{rec, mom}, tileRows: tc.tile, threads: 2}
				hs := &hooks.Set{}
				var c *hooks.Capture
				if hooked {
					c = hs.Capture("blocks.0.attn.hook_pattern", "blocks.0.attn.hook_sink_mass")
				}
				var err error
				hookRun := func(point string, l int, x []float32, shape ...int) {
					if err == nil {
						err = hs.Run(point, l, x, shape...)
					}
				}
				if e := attend(a, hs, hookRun); e != nil || err != nil {
					t.Fatal(e, err)
				}
				res := result{z: a.z, rec: rec, mom: mom}
				if hooked {
					if p := c.Get("blocks.0.attn.hook_pattern"); p != nil {
						res.pattern = p.Data().([]float32)
					}
					if s := c.Get("blocks.0.attn.hook_sink_mass"); s != nil {
						res.sm = s.Data().([]float32)
						if sh := s.Shape(); len(sh) != 3 || sh[0] != B || sh[1] != H || sh[2] != T {
							t.Fatalf("hook_sink_mass shape %v, want [%d %d %d]", sh, B, H, T)
						}
					}
				}
				return res
			}
			got := run(sinks, true)
			if got.pattern == nil || got.sm == nil {
				t.Fatal("hook_pattern or hook_sink_mass not issued")
			}
			// float64 reference
			wantP, wantS, wantZ := make([]float32, B*H*T*T), make([]float32, B*H*T), make([]float32, B*T*H*dh)
			for b := 0; b < B; b++ {
				for h := 0; h < H; h++ {
					kvh := h / (H / KV)
					for tq := 0; tq < T; tq++ {
						lo := 0
						if tc.window > 0 && tq-tc.window+1 > 0 {
							lo = tq - tc.window + 1
						}
						x := make([]float64, tq+1-lo)
						for j := range x {
							var d float64
							for i := 0; i < dh; i++ {
								d += float64(q[(b*T+tq)*H*dh+h*dh+i]) * float64(k[(b*T+lo+j)*KV*dh+kvh*dh+i])
							}
							d *= scale
							if tc.softcap > 0 {
								d = float64(tc.softcap) * math.Tanh(d/float64(tc.softcap))
							}
							x[j] = d
						}
						alpha, sigma, _, _, _, _ := refSinkRow(x, float64(sinks[h]), nil)
						wantS[(b*H+h)*T+tq] = float32(sigma)
						for j, a := range alpha {
							wantP[((b*H+h)*T+tq)*T+lo+j] = float32(a)
							for i := 0; i < dh; i++ {
								wantZ[(b*T+tq)*H*dh+h*dh+i] += float32(a * float64(v[(b*T+lo+j)*KV*dh+kvh*dh+i]))
							}
						}
					}
				}
			}
			for _, c := range []struct {
				what      string
				got, want []float32
			}{{"hook_pattern", got.pattern, wantP}, {"hook_sink_mass", got.sm, wantS}, {"z", got.z, wantZ}} {
				rel, i := relErr(c.got, c.want)
				t.Logf("%s: rel. error %.2g", c.what, rel)
				if rel > 1e-5 || math.IsNaN(rel) {
					t.Errorf("%s: rel. error %.3g > 1e-5 at %d: %v, float64 reference %v", c.what, rel, i, c.got[i], c.want[i])
				}
			}
			for b := 0; b < B; b++ {
				for h := 0; h < H; h++ {
					for tq := 0; tq < T; tq++ {
						key := [3]int{b, h, tq}
						sm := got.sm[(b*H+h)*T+tq]
						var sum float64
						for _, x := range got.pattern[((b*H+h)*T+tq)*T:][:T] {
							sum += float64(x)
						}
						if math.Abs(sum+float64(sm)-1) > 1e-6 || (sinks[h] == noSink && sm != 0) {
							t.Fatalf("b %d head %d query %d: pattern row sums to %v, σ %v", b, h, tq, sum, sm)
						}
						if got.rec.sink[key] != sm || math.Abs(got.rec.sum[key]-sum) > 1e-6 {
							t.Fatalf("b %d head %d query %d: tile σ %v Σα %v, hooks %v %v", b, h, tq, got.rec.sink[key], got.rec.sum[key], sm, sum)
						}
					}
				}
			}
			if got.rec.bare != 0 {
				t.Errorf("%d tiles without Sink", got.rec.bare)
			}
			if got.mom.rows != B*H*T || got.mom.worstSum > 1e-6 || got.mom.worstE > 2e-6 || got.mom.worstS > 1e-5 || got.mom.worstEntropy > 1e-6 {
				t.Errorf("moments on sink rows: %d rows, worst Σα/Σα² %.2g, e %.2g, S %.2g, entropy %.2g",
					got.mom.rows, got.mom.worstSum, got.mom.worstE, got.mom.worstS, got.mom.worstEntropy)
			}
			unhooked := run(sinks, false)
			if rel, i := relErr(unhooked.z, got.z); rel > 1e-6 {
				t.Errorf("z with the pattern hooked and not: rel. error %.3g at %d", rel, i)
			}
			// −Inf everywhere is no sink: the output of nil sinks, bit for bit
			none := run(nil, true)
			inf := run([]float32{noSink, noSink, noSink, noSink}, true)
			if !equal32(none.z, inf.z) || !equal32(none.pattern, inf.pattern) {
				t.Errorf("sinks all −Inf: z or pattern differ from no sinks")
			}
			if none.sm != nil || none.rec.bare == 0 || inf.sm == nil {
				t.Errorf("hook_sink_mass issued %v without sinks, %v with −Inf sinks; %d tiles without Sink", none.sm != nil, inf.sm != nil, none.rec.bare)
			}
			// far below the scores: no sink
			low := run([]float32{-200, -200, -200, -200}, false)
			plain := run(nil, false)
			if !equal32(low.z, plain.z) {
				t.Errorf("sinks −200: z differs from no sinks")
			}
		})
	}
}

// TestSinksRefused: sink logits that are not one per query head, NaN or
// +Inf fail the layer with a message naming self_attn.sinks and the
// layer.
func TestSinksRefused(t *testing.T) {
	const B, T, H, KV, dh = 1, 5, 4, 2, 16
	rng := rand.New(rand.NewPCG(37, 38))
	for _, c := range []struct {
		sinks []float32
		want  string
	}{{[]float32{1, 2, 3}, "holds 3 sink logits, want one per query head (4)"},
		{[]float32{1, float32(math.NaN()), 3, 4}, "head 1 is NaN"},
		{[]float32{1, 2, 3, float32(math.Inf(1))}, "head 3 is +Inf"}} {
		a := &attnArgs{layer: 2, batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: 0.25, sinks: c.sinks,
			q: randn32(rng, B*T*H*dh, 1, 0), k: randn32(rng, B*T*KV*dh, 1, 0), v: randn32(rng, B*T*KV*dh, 1, 0),
			z: make([]float32, B*T*H*dh), threads: 1}
		err := attend(a, nil, func(string, int, []float32, ...int) {})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "self_attn.sinks") ||
			!strings.Contains(err.Error(), "layer 2") {
			t.Errorf("sinks %v: error %v, want one naming layer 2, self_attn.sinks and %q", c.sinks, err, c.want)
		}
	}
}

// sinkGoldenCases lists the golden cases whose golden.safetensors holds
// sink_mass.{l} (the sink models; hidden variants are picked up too).
func sinkGoldenCases(t *testing.T) []string {
	entries, err := os.ReadDir(goldenDir)
	if err != nil {
		t.Skipf("golden data not found at %s: %v", goldenDir, err)
	}
	var cases []string
	for _, e := range entries {
		ck, err := checkpoint.OpenFile(filepath.Join(goldenDir, e.Name(), "golden.safetensors"))
		if err != nil {
			continue
		}
		if _, ok := ck.Info("sink_mass.0"); ok {
			cases = append(cases, e.Name())
		}
		ck.Close()
	}
	if len(cases) == 0 {
		t.Skip("no golden case with sink_mass.{l}")
	}
	return cases
}

// TestGoldenSinkRows: on every golden sink case (gpt_oss), in every layer,
// Hugging Face's rows attn.{l} and the dropped column sink_mass.{l} sum to
// 1 (within 1e-6); the scores they imply, x_j = s_h + log(α_j/σ) with the
// case's own sink logits model.layers.{l}.self_attn.sinks, through the
// softmax tile with s_h as its sink give attn.{l} and sink_mass.{l} back
// (within 3e-5, the README's absolute guide) — masked keys outside the
// sliding window given as −Inf — and through the tile without a sink give
// the renormalised rows attn/Σα = attn/(1 − σ) (within 1e-5), which sum to 1.
func TestGoldenSinkRows(t *testing.T) {
	for _, name := range sinkGoldenCases(t) {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(goldenDir, name)
			g := openGolden(t, dir)
			wts, err := checkpoint.OpenFile(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer wts.Close()
			B, T := g.B, g.T
			for l := 0; g.has(fmt.Sprintf("sink_mass.%d", l)); l++ {
				attn, sm := g.f32(t, fmt.Sprintf("attn.%d", l)), g.f32(t, fmt.Sprintf("sink_mass.%d", l))
				sinks, err := wts.Float32(fmt.Sprintf("model.layers.%d.self_attn.sinks", l))
				if err != nil {
					t.Fatal(err)
				}
				H := len(sinks)
				if len(sm) != B*H*T || len(attn) != B*H*T*T {
					t.Fatalf("layer %d: sink_mass %d, attn %d values; want [%d,%d,%d] and [%d,%d,%d,%d] for %d sink logits",
						l, len(sm), len(attn), B, H, T, B, H, T, T, H)
				}
				if err := checkSinks(sinks, H); err != nil {
					t.Fatal(err)
				}
				got, gotSM := make([]float32, len(attn)), make([]float32, len(sm))
				renorm := make([]float32, len(attn))
				var worstSum, worstRenorm float64
				for b := 0; b < B; b++ {
					for h := 0; h < H; h++ {
						o := (b*H + h) * T
						scores := make([]float32, T*T)
						for tq := 0; tq < T; tq++ {
							row := attn[(o+tq)*T:][:T]
							var sum float64
							for j, a := range row {
								sum += float64(a)
								x := math.Inf(-1) // outside the causal mask or the window
								if j <= tq && a > 0 {
									x = float64(sinks[h]) + math.Log(float64(a)/float64(sm[o+tq]))
								}
								scores[tq*T+j] = float32(x)
							}
							worstSum = math.Max(worstSum, math.Abs(sum+float64(sm[o+tq])-1))
						}
						s := append([]float32(nil), scores...)
						softmaxTile(s, T, T, 0, 0, 0, sinks[h], gotSM[o:o+T], nil, nil, nil, nil, nil)
						copy(got[o*T:], s)
						softmaxTile(scores, T, T, 0, 0, 0, noSink, nil, nil, nil, nil, nil, nil)
						copy(renorm[o*T:], scores)
						for tq := 0; tq < T; tq++ {
							var sum, own float64
							for j := range T {
								sum += float64(renorm[(o+tq)*T+j])
								own += float64(attn[(o+tq)*T+j])
							}
							for j, a := range renorm[(o+tq)*T:][:T] {
								// divided by the row's own sum (the README's renorm.*),
								// which is 1 − σ within 1e-6 (worstSum)
								want := float64(attn[(o+tq)*T+j]) / own
								worstRenorm = math.Max(worstRenorm, math.Abs(float64(a)-want))
							}
							worstSum = math.Max(worstSum, math.Abs(sum-1))
						}
					}
				}
				for _, c := range []struct {
					what      string
					got, want []float32
				}{{"attn", got, attn}, {"sink_mass", gotSM, sm}} {
					rel, i := relErr(c.got, c.want)
					t.Logf("layer %d %s: rel. error %.2g", l, c.what, rel)
					if rel > 3e-5 || math.IsNaN(rel) {
						t.Errorf("layer %d %s: rel. error %.3g > 3e-5 at %d: %v, golden %v", l, c.what, rel, i, c.got[i], c.want[i])
					}
				}
				t.Logf("layer %d: rows + sink and renormalised rows within %.2g of 1; renormalised rows within %.2g of attn/Σα", l, worstSum, worstRenorm)
				if worstSum > 1e-6 || worstRenorm > 1e-5 {
					t.Errorf("layer %d: row sums off by %.3g, renormalised rows off by %.3g from attn/Σα", l, worstSum, worstRenorm)
				}
			}
		})
	}
}
