package analysis

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/rfatab"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

func TestRFAPriorCurvesClosedForm(t *testing.T) {
	p := testHead()
	lags := []float64{0, 0.5, 1, 3, 8}
	P, B := RFAPriorCurves(&p, lags)
	alpha, beta := 0.8, 0.3+0.01
	for i, tau := range lags {
		x := 2*p.Mu*tau - math.Log(alpha/beta)
		wantP := 1 / beta / (1 + math.Exp(-x))
		wantB := -math.Log(beta) - math.Log1p(math.Exp(-x))
		if !approx(P[i], wantP, 1e-12) || !approx(B[i], wantB, 1e-12) {
			t.Errorf("lag %g: P %g B %g, want %g %g", tau, P[i], B[i], wantP, wantB)
		}
	}
	if !approx(P[0], 1/(1+0.1+0.01), 1e-12) {
		t.Errorf("P(0) = %g, want 1/(η²+γ²+c)", P[0])
	}
	br := p
	br.Mu, br.TShift = 0, 0.7
	P, B = RFAPriorCurves(&br, []float64{0, 10})
	for i, tau := range []float64{0, 10} {
		v := 0.2*(tau+0.7) + 1 + 0.1 + 0.01
		if !approx(P[i], 1/v, 1e-12) || !approx(B[i], -math.Log(v), 1e-12) {
			t.Errorf("Brownian lag %g: P %g B %g, want V = %g", tau, P[i], B[i], v)
		}
	}
}

func TestRFAPriorCurvesGolden(t *testing.T) {
	for _, name := range []string{"rfa_m1", "rfa_m2_sc"} {
		dir := rfaGolden(t, name)
		m, err := model.Load(dir, model.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		all, err := m.RFAParams()
		if err != nil {
			t.Fatal(err)
		}
		g, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		for l := 0; l < m.Config.Layers; l++ {
			ps, err := LayerParams(all, l)
			if err != nil {
				t.Fatal(err)
			}
			vlag, err := g.Float64(fmt.Sprintf("l%d.x.V_lag", l)) // [1, N, H]
			if err != nil {
				t.Fatal(err)
			}
			H := len(ps)
			N := len(vlag) / H
			lags := make([]float64, N)
			for k := range lags {
				lags[k] = float64(k)
			}
			for h := range ps {
				_, B := RFAPriorCurves(&ps[h], lags)
				for k := range lags {
					if want := -math.Log(vlag[k*H+h]); !approx(B[k], want, 2e-6) {
						t.Fatalf("%s layer %d head %d lag %d: B = %g, the authors' −log V = %g", name, l, h, k, B[k], want)
					}
				}
			}
		}
		g.Close()
		if _, err := LayerParams(all, 7); err == nil || !strings.Contains(err.Error(), "2 layers") {
			t.Errorf("layer out of range: %v", err)
		}
	}
}

func TestRFAHistoryCurves(t *testing.T) {
	h := &rfatab.ParamHistory{Layer: 1, Steps: []float64{0, 10}, Labels: []string{"a", "b"}, BrownianBelow: 1e-5,
		Mu:     [][]float64{{0, 0.5}, {0, 0.5}},
		Sigma2: [][]float64{{0.1, 0.2}, {0.1, 0.4}},
		Eta2:   [][]float64{{1, 1}, {1, 0.3}},
		Gamma2: [][]float64{{0.5, 0.1}, {0.5, 0.2}},
	}
	if err := deriveRegimes(h); err != nil {
		t.Fatal(err)
	}
	if !h.Brownian(0) || h.Brownian(1) || h.Heads() != 2 {
		t.Errorf("Brownian(0) %v Brownian(1) %v heads %d", h.Brownian(0), h.Brownian(1), h.Heads())
	}
	// head 1: σ̃² = 0.2, 0.4; α = 0.8, −0.1; β = 0.3, 0.6.
	for _, c := range []struct {
		q    rfatab.Quantity
		want []float64
	}{{rfatab.SteadyState, []float64{0.2, 0.4}}, {rfatab.Alpha, []float64{0.8, -0.1}}, {rfatab.Beta, []float64{0.3, 0.6}}, {rfatab.Eta2, []float64{1, 0.3}}} {
		got := h.Curve(c.q, 1)
		for i := range got {
			if !approx(got[i], c.want[i], 1e-12) {
				t.Errorf("%s = %v, want %v", c.q.Symbol(), got, c.want)
			}
		}
		if c.q != rfatab.Eta2 && !math.IsNaN(h.Curve(c.q, 0)[0]) {
			t.Errorf("%s of a μ = 0 head = %v, want NaN", c.q.Symbol(), h.Curve(c.q, 0))
		}
	}
	if h.Has(rfatab.Tau) || !math.IsNaN(h.Curve(rfatab.Tau, 1)[0]) {
		t.Error("τ reported without data")
	}
	h.Steps[1] = 0
	if err := h.Validate(); err == nil {
		t.Error("non-increasing steps accepted")
	}
}

func TestReadRFAHistory(t *testing.T) {
	dir := t.TempDir()
	// The authors' history dict (unprefixed names, "sigma" = σ²), without
	// steps: points are optimizer steps 0, 1, 2; nested rows and a loss key.
	authors := writeHistoryJSON(t, filepath.Join(dir, "authors.json"), `{"loss": [3, 2, 1],
		"mu": [[0, 0.5], [0, 0.5], [0, 0.5]], "sigma": [[0.1, 0.2], [0.1, 0.3], [0.1, 0.4]],
		"eta": [[[1, 1]], [[1, 0.8]], [[1, 0.6]]], "gamma": [[0.5, 0.1], [0.5, 0.1], [0.5, null]],
		"tau": [[1, 2], [1, 2], [1, 2]], "nu_over_d": [[4, 4], [3, 3], [2, 2]]}`)
	h, err := ReadRFAHistory(authors, -1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.Steps, []float64{0, 1, 2}) || h.Layer != -1 || h.Heads() != 2 {
		t.Errorf("steps %v layer %d heads %d", h.Steps, h.Layer, h.Heads())
	}
	if a := h.Curve(rfatab.Alpha, 1); !approx(a[1], 0.8-0.3, 1e-12) || !approx(a[2], 0.6-0.4, 1e-12) {
		t.Errorf("α = %v", a)
	}
	if g := h.Curve(rfatab.Gamma2, 1); !math.IsNaN(g[2]) {
		t.Errorf("null γ² read as %v", g[2])
	}

	// Prefixed metadata names for two layers, explicit steps, no μ: μ
	// comes from the caller; the last layer is the default.
	pref := writeHistoryJSON(t, filepath.Join(dir, "pref.json"), `{"step": [100, 200],
		"l0.sigma_sq_v": [[1, 1], [1, 1]], "l0.eta_sq_v": [[1, 1], [1, 1]], "l0.gamma_sq_v": [[1, 1], [1, 1]],
		"l1.sigma_sq_v": [[0.2, 0.2], [0.1, 0.1]], "l1.eta_sq_v": [[1, 1], [2, 2]], "l1.gamma_sq_v": [[0.1, 0.1], [0.1, 0.1]]}`)
	h, err = ReadRFAHistory(pref, -1, []float64{0, 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if h.Layer != 1 || !slices.Equal(h.Steps, []float64{100, 200}) || h.Has(rfatab.Tau) {
		t.Errorf("layer %d steps %v has τ %v", h.Layer, h.Steps, h.Has(rfatab.Tau))
	}
	if ss := h.Curve(rfatab.SteadyState, 1); !approx(ss[0], 0.2, 1e-12) || !approx(ss[1], 0.1, 1e-12) || !h.Brownian(0) {
		t.Errorf("σ̃² = %v", ss)
	}
	if h, err = ReadRFAHistory(pref, 0, nil); err != nil || h.Layer != 0 || h.Has(rfatab.Alpha) {
		t.Errorf("layer 0: %v, %+v", err, h)
	}

	for name, body := range map[string]string{
		"nolayer":   `{"l0.sigma_sq_v": [[1]], "l0.eta_sq_v": [[1]], "l0.gamma_sq_v": [[1]]}`,
		"missing":   `{"sigma": [[1]], "eta": [[1]]}`,
		"steps":     `{"step": [1, 2], "sigma": [[1]], "eta": [[1]], "gamma": [[1]]}`,
		"heads":     `{"sigma": [[1], [1, 2]], "eta": [[1], [1]], "gamma": [[1], [1]]}`,
		"notnumber": `{"sigma": [["x"]], "eta": [[1]], "gamma": [[1]]}`,
		"decrease":  `{"step": [2, 1], "sigma": [[1], [1]], "eta": [[1], [1]], "gamma": [[1], [1]]}`,
		"notobject": `[1, 2]`,
	} {
		path := writeHistoryJSON(t, filepath.Join(dir, name+".json"), body)
		layer := -1
		if name == "nolayer" {
			layer = 3
		}
		if _, err := ReadRFAHistory(path, layer, nil); err == nil {
			t.Errorf("%s: accepted %s", name, body)
		}
	}
	if _, err := ReadRFAHistory(authors, -1, []float64{1}); err != nil {
		t.Errorf("μ given beside a history that has μ: %v", err) // the history's own μ wins
	}
	if _, err := ReadRFAHistory(pref, -1, []float64{1}); err == nil {
		t.Error("μ of the wrong length accepted")
	}
}

func TestRFASeriesDirs(t *testing.T) {
	root := t.TempDir()
	mk := func(name, state string) string {
		d := filepath.Join(root, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		writeHistoryJSON(t, filepath.Join(d, "config.json"), `{}`)
		if state != "" {
			writeHistoryJSON(t, filepath.Join(d, "trainer_state.json"), state)
		}
		return d
	}
	run := filepath.Join(root, "run")
	for _, n := range []string{"checkpoint-1000", "checkpoint-50", "checkpoint-200"} {
		mk(filepath.Join("run", n), "")
	}
	mk(filepath.Join("run", "checkpoint-final"), `{"global_step": 1500, "epoch": 3.0}`)
	os.MkdirAll(filepath.Join(run, "logs"), 0o755) // not a checkpoint: skipped
	pts, label, err := RFASeriesDirs([]string{run})
	if err != nil {
		t.Fatal(err)
	}
	var steps []float64
	var names []string
	for _, p := range pts {
		steps, names = append(steps, p.Step), append(names, filepath.Base(p.Dir))
	}
	if !slices.Equal(steps, []float64{50, 200, 1000, 1500}) || label != "training step" || names[3] != "checkpoint-final" ||
		pts[3].StepSource != "trainer_state.json global_step" {
		t.Errorf("steps %v names %v label %q %+v", steps, names, label, pts[3])
	}
	e2, e10 := mk("rfa_lm_epoch_10", ""), mk("rfa_lm_epoch_2", "")
	if pts, label, err = RFASeriesDirs([]string{e2, e10}); err != nil || label != "epoch" || pts[0].Step != 2 || pts[1].Step != 10 {
		t.Errorf("epochs: %v %q %+v", err, label, pts)
	}
	a, b := mk("rfa_m1", ""), mk("rfa_m2_sc", "")
	if pts, label, err = RFASeriesDirs([]string{b, a}); err != nil || !strings.Contains(label, "order given") || pts[0].Dir != b || pts[1].Step != 1 {
		t.Errorf("unnumbered: %v %q %+v", err, label, pts)
	}
	dup := mk("step_200", "")
	if _, _, err := RFASeriesDirs([]string{filepath.Join(run, "checkpoint-200"), dup}); err == nil {
		t.Error("two checkpoints at one step accepted")
	}
	if _, _, err := RFASeriesDirs([]string{filepath.Join(run, "logs")}); err == nil {
		t.Error("a folder with no checkpoints accepted")
	}
}

// A series made by perturbing a golden checkpoint's noise parameters reads
// back, sorted by step, as the authors' transforms of the raw values.
func TestLoadRFASeriesPerturbed(t *testing.T) {
	src := rfaGolden(t, "rfa_m2_sc")
	root := t.TempDir()
	// checkpoint-1000 < checkpoint-200 < checkpoint-50 as names: the series
	// must sort by the number.
	steps := []int{50, 200, 1000} // the k-th moved by k·δ
	raw := perturbedSeries(t, src, root, steps)
	h, err := LoadRFASeries([]string{root}, -1)
	if err != nil {
		t.Fatal(err)
	}
	if h.Layer != 1 || !slices.Equal(h.Steps, []float64{50, 200, 1000}) || h.XLabel != "training step" ||
		!slices.Equal(h.Labels, []string{"checkpoint-50", "checkpoint-200", "checkpoint-1000"}) {
		t.Fatalf("layer %d steps %v labels %v %q", h.Layer, h.Steps, h.Labels, h.XLabel)
	}
	const eps = 1e-5
	a := "backbone.blocks.1.attn."
	for i := range steps { // point i is the i-th written, moved by i·δ
		k := i
		for head := 0; head < h.Heads(); head++ {
			want := map[rfatab.Quantity]float64{
				rfatab.Sigma2:  softplus(raw[a+"sigma_v"][k][head]),
				rfatab.Eta2:    softplus(raw[a+"eta_v"][k][head]) + eps,
				rfatab.Gamma2:  softplus(raw[a+"gamma_v"][k][head]) + eps,
				rfatab.Tau:     softplus(raw[a+"tau_param"][k][head]) + eps,
				rfatab.NuOverD: (8*softplus(raw[a+"nu_param"][k][head]) + 2 + eps) / 8,
			}
			for q, w := range want {
				if got := h.Curve(q, head)[i]; !approx(got, w, 1e-12) {
					t.Errorf("point %d head %d %s = %g, want %g", i, head, q.Symbol(), got, w)
				}
			}
		}
	}
	// μ is a fixed buffer: constant; η² falls and σ² rises with k, so α
	// falls along the series for every μ > 0 head.
	for head := 0; head < h.Heads(); head++ {
		mu := h.Mu[0][head]
		for i := range h.Mu {
			if h.Mu[i][head] != mu {
				t.Errorf("μ of head %d changes: %v", head, h.Mu)
			}
		}
		if h.Brownian(head) != (head == 0) {
			t.Errorf("head %d Brownian = %v", head, h.Brownian(head))
		}
		if head > 0 {
			if al := h.Curve(rfatab.Alpha, head); !(al[0] > al[1] && al[1] > al[2]) {
				t.Errorf("head %d α = %v, want decreasing", head, al)
			}
		}
	}

}

// testHead is a head with round parameters: σ̃² = σ²/2μ = 0.2, α = η² − σ̃²
// = 0.8, β = γ² + σ̃² = 0.3 (integrative), with the authors' constants.
func testHead() model.RFAHeadParams {
	return model.RFAHeadParams{Mu: 0.5, Sigma2: 0.2, Eta2: 1, Gamma2: 0.1, D: 8, Nu: 32, Tau: 1.5,
		CovEps: 0.01, BrownianBelow: 1e-5, MinExponent: -10, MaxExponent: 0}
}

// The curves against the closed forms of notes 000 §B.7–8, worked by hand:
// integrative P = (1/β′)·sigmoid(2μτ − ln(α/β′)) with β′ = β + c,
// B = −log β′ − softplus(ln(α/β′) − 2μτ); Brownian V = σ²(τ+Δt₊) + η² + γ² + c.
// The curves of a loaded checkpoint reproduce the authors' own kernel: the
// golden x.V_lag recorded from their compute_covariance_matrix_LHopital.
func writeHistoryJSON(t *testing.T, path, s string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// softplus is torch's softplus on a float32 raw value.
func softplus(x float32) float64 { return math.Log1p(math.Exp(float64(x))) }

// perturbedSeries writes copies of a golden checkpoint into
// root/checkpoint-{step}, each with the raw noise parameters of every layer
// moved by k·δ for the k-th step, and returns the raw values written.
func perturbedSeries(t *testing.T, src, root string, steps []int) map[string][][]float32 {
	t.Helper()
	c, err := checkpoint.OpenFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	delta := map[string]float32{"sigma_v": 0.4, "eta_v": -0.3, "gamma_v": 0.2, "tau_param": 0.1, "nu_param": -0.25}
	raw := map[string][][]float32{}
	for k, step := range steps {
		var ts []checkpoint.Tensor
		for _, name := range c.Names() {
			info, _ := c.Info(name)
			var data any
			if info.DType == "I64" {
				data, err = c.Int64(name)
			} else {
				var v []float32
				v, err = c.Float32(name)
				if d, ok := delta[name[strings.LastIndexByte(name, '.')+1:]]; ok && strings.Contains(name, "blocks.1.") {
					for i := range v {
						v[i] += float32(k) * d
					}
					raw[name] = append(raw[name], v)
				}
				data = v
			}
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, checkpoint.Tensor{Name: name, Shape: info.Shape, Data: data})
		}
		dir := filepath.Join(root, fmt.Sprintf("checkpoint-%d", step))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, nil); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return raw
}

// TestRFARegimeNames: report/papers groups heads by rfatab's regime names,
// which must be the names model.RFAHeadParams.Regime gives.
func TestRFARegimeNames(t *testing.T) {
	for _, c := range [][2]string{
		{rfatab.Integrative, model.RegimeIntegrative}, {rfatab.Diffusive, model.RegimeDiffusive},
		{rfatab.Boundary, model.RegimeBoundary}, {rfatab.Brownian, model.RegimeBrownian},
	} {
		if c[0] != c[1] {
			t.Errorf("rfatab regime %q, model %q", c[0], c[1])
		}
	}
}
