package analysis

import (
	"bytes"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
)

// handRows builds the bucket rows of a one-sample sweep of a 2-layer,
// 1-head model at T = 1000 and 2000 in which every query of a window has
// the same value: BOS window [T/2, 3T/4) and last window [3T/4, T).
func handRows(vals map[int]map[string][2]float64) []BucketRow {
	var rows []BucketRow
	for T, ms := range vals {
		for l := 0; l < 2; l++ {
			for m, v := range ms {
				for _, b := range []struct {
					lo, hi int
					x      float64
				}{{0, T / 2, v[0]}, {T / 2, 3 * T / 4, v[0]}, {3 * T / 4, T, v[1]}} {
					x := b.x * float64(l+1) // layer 1 doubles layer 0
					n := int64(b.hi - b.lo)
					rows = append(rows, BucketRow{T: int64(T), Layer: int64(l), QLo: int64(b.lo), QHi: int64(b.hi), Metric: m,
						N: n, Sum: x * float64(n)})
				}
			}
		}
	}
	return rows
}

func TestReportPrintsPaperBeside(t *testing.T) {
	rows := handRows(map[int]map[string][2]float64{
		1000: {results.MetricNEff: {20, 16}, results.MetricSMean: {0.25, 0.25}, results.MetricK: {0.4, 0.45},
			results.MetricLambdaObs: {40, 40}, results.MetricBOSMass: {0.01, 0.03}},
		2000: {results.MetricNEff: {30, 24}, results.MetricSMean: {0.3, 0.3}, results.MetricK: {0.45, 0.475},
			results.MetricLambdaObs: {50, 50}, results.MetricBOSMass: {0.01, 0.05}},
	})
	sw := results.SweepOptions{Lengths: []int{1000, 2000}, KUnit: 1000, Samples: 1, LastFrac: 0.25, BOSFrac: 0.5}
	probe := results.ProbeOptions{Form: "reml", Nu: 1, Sigma02: 1.0 / 128, LambdaPrior: 1}
	agg := DefaultAggOptions()
	agg.LastLayers, agg.Bootstrap = 1, 0
	res, err := aggregate(rows, Shape{Layers: 2, Heads: 1}, sw, probe, agg)
	if err != nil {
		t.Fatal(err)
	}
	// Layer 1 alone (doubled values): n_eff 32 and 48; λ ratio 100/80.
	get := fig2Lookup(res.Fig2, results.LayersAll)
	if r := get(1000, results.MetricNEff); r.Mean != 32 || r.N != 250 || r.Paper != 32.5 || r.StdPooled != 0 {
		t.Errorf("fig2 n_eff at 1k: %+v", r)
	}
	if r := get(2000, "lambda_obs_ratio/"+results.RatioOfMeans); r.Mean != 1.25 || r.Paper != 1.09 {
		t.Errorf("fig2 ratio at 2k: %+v", r)
	}
	// Fig. 3 by hand: λobs = (n + 1)/(S + 1/128); λ = λobs(1k)(1 − K)/K.
	lam1, lam2 := 33/(0.5+1.0/128), 49/(0.6+1.0/128)
	fit := lam1 * (1 - 0.9) / 0.9
	if f := res.Fig3[1]; relErr(f.LambdaFit, fit) > 1e-15 || relErr(f.KOpt, lam2/(fit+lam2)) > 1e-15 || f.PaperRelErr != 0.0013 {
		t.Errorf("fig3 at 2k: %+v (λ fit %v)", f, fit)
	}
	// Fig. 4, equal weight per pass: layer 0 K = (0.45 + 0.475)/2, BOS =
	// (0.02 + 0.03)/2; pooling queries weighs 2k twice: K = (250·0.45 + 500·0.475)/750.
	if c := res.Fig4[0]; relErr(c.K, 0.4625) > 1e-15 || relErr(c.BOS, 0.025) > 1e-15 || c.Passes != 2 ||
		relErr(c.KQueries, 350.0/750) > 1e-15 || relErr(c.BOSQueries, 0.02/0.75) > 1e-15 {
		t.Errorf("fig4 layer 0: %+v", c)
	}
	var b bytes.Buffer
	man := &results.Manifest{Sweep: sw, Analysis: agg, RunRecord: results.RunRecord{Model: results.ModelInfo{Dir: "m", Layers: 2, Heads: 1, DHead: 128}}}
	man.Sweep.Probe = probe
	if err := WriteReport(&b, man, res); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"1k  32.00", "32.5", "2k  48.00", "41.4", // n_eff beside the paper's
		"1.250", "1.09", // λobs ratio
		"Fig. 3 — λ anchored at T = 1k", "(anchor)", "0.130%", // paper's Fig. 3 error at 2k
		"Pearson r", "+0.25", "1.3e-07", "448",
		"paper at T = 1k…10k: n_eff 32.5 → 41.4 → 55.1 → 64.0 → 66.0 → 70.7",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestAggregateRefusesMisalignedBuckets(t *testing.T) {
	rows := []BucketRow{{T: 100, QLo: 0, QHi: 80, Metric: results.MetricK, N: 80, Sum: 40}}
	sw := results.SweepOptions{Lengths: []int{100}, KUnit: 1000, Samples: 1, LastFrac: 0.25, BOSFrac: 0.5}
	_, err := aggregate(rows, Shape{Layers: 1, Heads: 1}, sw, results.ProbeOptions{Form: "reml", Nu: 1, Sigma02: 1, LambdaPrior: 1}, DefaultAggOptions())
	if err == nil || !strings.Contains(err.Error(), "straddles the window start 75") {
		t.Errorf("misaligned bucket: %v", err)
	}
	sw.Samples = 2
	rows[0].QHi = 50
	_, err = aggregate(rows, Shape{Layers: 1, Heads: 1}, sw, results.ProbeOptions{Form: "reml", Nu: 1, Sigma02: 1, LambdaPrior: 1}, DefaultAggOptions())
	if err == nil || !strings.Contains(err.Error(), "no rows for pass (T=100, sample 1)") {
		t.Errorf("missing pass: %v", err)
	}
}

// TestPaperTable checks the transcribed App. I numbers against the
// paper's own statements about them (notes §B.6).
func TestPaperTable(t *testing.T) {
	p := results.Paper
	if len(p.LengthsK) != 6 || len(p.NEff) != 6 || len(p.Gate) != 6 || len(p.LambdaRatio) != 6 || len(p.Fig3RelErr) != 5 {
		t.Fatalf("series lengths: %+v", p)
	}
	if r := p.NEff[5] / p.NEff[0]; r < 2.15 || r > 2.25 { // "×2.2"
		t.Errorf("n_eff rise ×%v", r)
	}
	if d := p.Gate[5] - p.Gate[0]; relErr(d, 0.027) > 1e-9 { // "Δ = 0.027"
		t.Errorf("gate drift %v", d)
	}
	if p.LambdaRatio[0] != 1 || p.LambdaRatio[5] != 1.28 {
		t.Errorf("λ ratio %v", p.LambdaRatio)
	}
	maxErr := 0.0
	for _, e := range p.Fig3RelErr {
		maxErr = max(maxErr, e)
	}
	if maxErr != 0.0028 { // "maximum relative error of 0.28%"
		t.Errorf("Fig. 3 max error %v", maxErr)
	}
	// r = +0.25 is rounded: r = 0.246 over 448 cells gives the reported p.
	if pv := pearsonP(0.246, p.Fig4Cells); relErr(pv, p.Fig4P) > 0.05 {
		t.Errorf("p(0.246, %d) = %v, paper %v", p.Fig4Cells, pv, p.Fig4P)
	}
	if paperIndex(4096, 1024) != 2 || paperIndex(4000, 1000) != 2 || paperIndex(4000, 1024) != -1 {
		t.Error("paperIndex")
	}
}
