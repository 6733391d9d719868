package probes

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestKGateK: the default mapping is K_BFT of App. I: Eq. 6 with ν = 1,
// σ0² = 1/d_head on S̄, λ = 1; a one-hot row gives 2·d_head/(2·d_head + 1).
func TestKGateK(t *testing.T) {
	g, err := NewKGate(KGateOptions{}, 2, 3, 128)
	if err != nil {
		t.Fatal(err)
	}
	if g.Options.Mapping != MapK || g.Options.Prior != 1 || g.Options.Lambda.Nu != 1 || g.Options.Lambda.Sigma02 != 1.0/128 {
		t.Fatalf("defaults not resolved: %+v", g.Options)
	}
	if got, want := g.Gate(GateRow{NEff: 1, SBar: 0}), 256.0/257; math.Abs(got-want) > 1e-15 {
		t.Fatalf("one-hot row: K = %v, want %v", got, want)
	}
	for _, c := range []struct{ n, s float64 }{{3, 0.2}, {40.5, 0.013}, {1000, 2}} {
		lam := (c.n + 1) / (c.s + 1.0/128)
		if got, want := g.Gate(GateRow{Layer: 1, Head: 2, NEff: c.n, SBar: c.s}), lam/(1+lam); math.Abs(got-want) > 1e-15 {
			t.Fatalf("n_eff %v S̄ %v: K = %v, want %v", c.n, c.s, got, want)
		}
	}
	// Eq. 5 with its singularity: n_eff = 1 is λobs = +Inf, K = 1.
	g5, err := NewKGate(KGateOptions{Lambda: LambdaOptions{Form: REMLNaive}, Prior: 2}, 1, 1, 16)
	if err != nil {
		t.Fatal(err)
	}
	if got := g5.K(1, 0); got != 1 {
		t.Fatalf("Eq. 5 at n_eff = 1: K = %v, want 1", got)
	}
	if got, want := g5.K(5, 0.5), 8.0/(2+8); math.Abs(got-want) > 1e-15 {
		t.Fatalf("Eq. 5 at n_eff 5, S̄ 0.5, λ 2: K = %v, want %v", got, want)
	}
}

// TestKGateRefusals: options the gate cannot honour are errors.
func TestKGateRefusals(t *testing.T) {
	for _, c := range []struct {
		o    KGateOptions
		want string
	}{
		{KGateOptions{Mapping: "sigmoid"}, "gate mapping"},
		{KGateOptions{Lambda: LambdaOptions{Form: Sandwich}}, "sandwich"},
		{KGateOptions{Lambda: LambdaOptions{Reduction: PerDimMean}}, "per-dim-mean"},
		{KGateOptions{Prior: -1}, "prior"},
		{KGateOptions{Lambda: LambdaOptions{Nu: -1}}, "Nu"},
	} {
		if _, err := NewKGate(c.o, 1, 1, 8); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want one mentioning %q", c.o, err, c.want)
		}
	}
	g, _ := NewKGate(KGateOptions{Mapping: MapKMatched}, 1, 1, 8)
	defer func() {
		if recover() == nil {
			t.Fatal("an uncalibrated k-matched gate did not panic")
		}
	}()
	g.Gate(GateRow{NEff: 2, SBar: 1})
}

// calibRows makes synthetic calibration rows for a 2×2 model: n_eff in
// [1, 60], S̄ log-uniform, learned gate around a per-cell level.
func calibRows(n int) []GateRow {
	rng := rand.New(rand.NewPCG(4, 5))
	var rows []GateRow
	for l := 0; l < 2; l++ {
		for t := 0; t < n; t++ {
			for h := 0; h < 2; h++ {
				level := 0.2 + 0.25*float64(2*l+h)
				rows = append(rows, GateRow{Layer: l, Head: h, Query: t,
					NEff: 1 + 59*rng.Float64(), SBar: math.Exp(-6 + 6*rng.Float64()),
					Learned: level + 0.05*rng.NormFloat64()})
			}
		}
	}
	return rows
}

// TestKGateCalibration: after calibration every cell's mean gate over the
// calibration rows equals the learned gate's mean (k-matched exactly up to
// rounding, k-lambda to the bisection tolerance, mean trivially), and
// Observe passes the learned gate through.
func TestKGateCalibration(t *testing.T) {
	rows := calibRows(300)
	for _, mp := range []GateMapping{MapKMatched, MapKLambda, MapMean} {
		g, err := NewKGate(KGateOptions{Mapping: mp}, 2, 2, 32)
		if err != nil {
			t.Fatal(err)
		}
		cal := g.Calibrator()
		for _, r := range rows {
			if got := cal.Observe(r); got != r.Learned {
				t.Fatalf("Observe returned %v, learned %v", got, r.Learned)
			}
		}
		if err := cal.Finish(); err != nil {
			t.Fatal(err)
		}
		sum := make([]float64, 4)
		for _, r := range rows {
			sum[r.Layer*2+r.Head] += g.Gate(r)
		}
		for i, c := range g.Cells {
			if c.Rows != 300 {
				t.Fatalf("%s cell %d: %d rows, want 300", mp, i, c.Rows)
			}
			if got := sum[i] / 300; math.Abs(got-c.MeanGate) > 1e-9 {
				t.Fatalf("%s layer %d head %d: mean gate %v over the calibration rows, learned mean %v", mp, c.Layer, c.Head, got, c.MeanGate)
			}
			if mp == MapKLambda && !(c.Lambda > 0) {
				t.Fatalf("k-lambda cell %d: λ = %v", i, c.Lambda)
			}
			if mp != MapKLambda && !math.IsNaN(c.Lambda) {
				t.Fatalf("%s cell %d: λ = %v, want NaN (not fitted)", mp, i, c.Lambda)
			}
		}
	}
}

// TestKGateFitPriorRange: a learned mean K cannot reach is an error naming
// the cell.
func TestKGateFitPriorRange(t *testing.T) {
	g, _ := NewKGate(KGateOptions{Mapping: MapKLambda, Lambda: LambdaOptions{Form: REMLNaive}}, 1, 2, 8)
	cal := g.Calibrator()
	for t := 0; t < 4; t++ {
		cal.Observe(GateRow{Head: 0, NEff: 3, SBar: 0.5, Learned: 0.3})
		// head 1: every row one-hot (λobs = +Inf under Eq. 5), so K ≡ 1
		cal.Observe(GateRow{Head: 1, NEff: 1, SBar: 0, Learned: 0.3})
	}
	err := cal.Finish()
	if err == nil || !strings.Contains(err.Error(), "layer 0 head 1") {
		t.Fatalf("err = %v, want a failure naming layer 0 head 1", err)
	}
	if got, err := fitPrior([]float64{1, 3, 9}, 0.5); err != nil || math.Abs(meanGain([]float64{1, 3, 9}, got)-0.5) > 1e-12 {
		t.Fatalf("fitPrior: λ %v (err %v), mean gain %v", got, err, meanGain([]float64{1, 3, 9}, got))
	}
}

// TestKGateOnModel: on a generated gated checkpoint the calibration pass
// is the plain pass bit for bit, and each mapping runs and changes the
// logits.
func TestKGateOnModel(t *testing.T) {
	m := smallModel(t, model.ArchGated, model.Size{Layers: 2, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 53, MaxPos: 128}, 21)
	cfg := m.Config
	ids := [][]int{make([]int, 48)}
	for i := range ids[0] {
		ids[0][i] = (i*i + 3*i) % 53
	}
	plain, err := m.Forward(ids, model.Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, mp := range []GateMapping{MapK, MapKMatched, MapKLambda, MapMean} {
		g, err := NewKGate(KGateOptions{Mapping: mp}, cfg.Layers, cfg.Heads, cfg.DHead)
		if err != nil {
			t.Fatal(err)
		}
		if mp.Calibrated() {
			cal := g.Calibrator()
			out, err := gatePass(m, ids, RowGate(cal.Observe))
			if err != nil {
				t.Fatal(err)
			}
			for i := range out.Logits {
				if out.Logits[i] != plain.Logits[i] {
					t.Fatalf("%s: the calibration pass changed logit %d: %v, plain %v", mp, i, out.Logits[i], plain.Logits[i])
				}
			}
			if err := cal.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		out, err := gatePass(m, ids, RowGate(g.Gate))
		if err != nil {
			t.Fatal(err)
		}
		diff := 0.0
		for i := range out.Logits {
			diff = max(diff, math.Abs(float64(out.Logits[i]-plain.Logits[i])))
		}
		if diff == 0 {
			t.Fatalf("%s: logits unchanged", mp)
		}
	}
}

// gatePass runs m on ids with the override g and the logits.
func gatePass(m *model.Model, ids [][]int, g *GateOverride) (*model.Output, error) {
	hs := &hooks.Set{}
	if err := g.Register(hs, &m.Config, len(ids), len(ids[0])); err != nil {
		return nil, err
	}
	return m.Forward(ids, model.Options{Logits: true, Hooks: hs})
}
