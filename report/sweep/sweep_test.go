package sweep

import (
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/reporttest"
)

// SyntheticInput is a deterministic stand-in for a 28-layer × 16-head sweep
// over the paper's lengths, shaped like the paper's numbers.
func SyntheticInput() *Input {
	in := &Input{Model: "synthetic", Fig2Std: "units", Fig2Ratio: "ratio of means", Fig2Pool: "synthetic pool", Fig4Pool: "synthetic",
		LambdaFit: 1.2, Spearman: 0.2, CI: [2]float64{0.15, 0.33}, Gated: true}
	paperN := []float64{32.5, 41.4, 55.1, 64.0, 66.0, 70.7}
	paperG := []float64{0.277, 0.292, 0.303, 0.306, 0.308, 0.304}
	paperR := []float64{1.00, 1.09, 1.23, 1.28, 1.28, 1.28}
	paperE := []float64{math.NaN(), 0.0013, 0.0028, 0.0015, 0.0005, 0.0006}
	for i, T := range []int{1000, 2000, 4000, 6000, 8000, 10000} {
		in.Lengths = append(in.Lengths, Length{T: T,
			NEff: Stat{paperN[i] * 0.95, 6}, Gate: Stat{paperG[i] + 0.01, 0.07}, LambdaRatio: Stat{paperR[i] * 1.02, 0.1},
			PaperNEff: paperN[i], PaperGate: paperG[i], PaperLRRatio: paperR[i]})
		k := 0.9 + 0.01*float64(i)
		in.Fig3 = append(in.Fig3, Fig3Point{T: T, KMeas: k, KOpt: k * (1 + 0.002*float64(i)), RelErr: 0.002 * float64(i), PaperRel: paperE[i]})
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for l := 0; l < 28; l++ {
		for h := 0; h < 16; h++ {
			k := 0.6 + 0.38*rng.Float64()
			bos := math.Max(0, (k-0.8)*0.3*rng.Float64())
			in.Cells = append(in.Cells, Cell{Layer: l, Head: h, K: k, BOS: bos, Gate: 0.1 + 0.8*rng.Float64()*k})
		}
	}
	in.Paper = Paper{Cells: 448, R: 0.25, P: 1.3e-7, SinkBOS: 0.05, SinkK: 0.94, SinkLayers: [2]int{6, 18}, LateK: [2]float64{0.6, 0.85}, MaxBOS: 0.3, Model: "paper model"}
	return in
}

func TestBuild(t *testing.T) {
	r, err := Build(SyntheticInput())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Figures) != 4 || r.Figures[3].ID != "bft-fig4-gate" {
		t.Fatalf("%d figures", len(r.Figures))
	}
	for _, f := range r.Figures {
		if err := f.Validate(); err != nil {
			t.Error(err)
		}
	}
	for _, p := range report.CaptionProblems(r.Figures...) {
		t.Error(p)
	}
	// Fig. 2's bands stay inside each quantity's range, even where the
	// spread is wider than the mean.
	wide := SyntheticInput()
	wide.Lengths[0].NEff = Stat{Mean: 1.5, Std: 3}
	wide.Lengths[0].Gate = Stat{Mean: 0.9, Std: 0.5}
	wide.Lengths[0].LambdaRatio = Stat{Mean: 0.2, Std: 1}
	rw, err := Build(wide)
	if err != nil {
		t.Fatal(err)
	}
	if b := rw.Figures[0].Panels[0].Series[0]; b.Kind != report.Band || b.Lo[0] != 1 || b.Hi[0] != 4.5 {
		t.Errorf("n_eff band at T_min: [%g, %g], want [1, 4.5]", b.Lo[0], b.Hi[0])
	}
	if b := rw.Figures[0].Panels[1].Series[0]; b.Lo[0] != 0.4 || b.Hi[0] != 1 {
		t.Errorf("gate band at T_min: [%g, %g], want [0.4, 1]", b.Lo[0], b.Hi[0])
	}
	if !strings.Contains(rw.Figures[0].Caption, "clipped to its quantity's range") {
		t.Error("Fig. 2's caption does not say that the bands are clipped")
	}
	for i, floor := range []float64{1, 0, 0} {
		for _, s := range r.Figures[0].Panels[i].Series {
			for _, lo := range s.Lo {
				if lo < floor {
					t.Errorf("Fig. 2 panel %d: band down to %g, below %g", i, lo, floor)
				}
			}
		}
	}
	if !r.Figures[2].Panels[0].Colors.Integer {
		t.Error("Fig. 4's colour bar (layers) is not integer")
	}
	// The report reads well in a browser (interactive when echarts is
	// installed, else static).
	_, err = report.LocateECharts()
	dir := t.TempDir()
	if d := os.Getenv("PROBE_KEEP_REPORT"); d != "" {
		dir = d
	}
	w, werr := r.Write(dir, report.WriteOptions{Static: err != nil, DPI: 40})
	if werr != nil {
		t.Fatal(werr)
	}
	want := 3 + 2 + 1 + 1
	if err != nil {
		want = 4
	}
	reporttest.Check(t, reporttest.Browser(t), w.HTML, want)
	f4 := r.Figures[2]
	if !strings.Contains(f4.Title, "r = +") || f4.Tables[0].Rows[0][2] != "448" {
		t.Errorf("Fig. 4: %s %v", f4.Title, f4.Tables[0].Rows[0])
	}
	// Paper values sit beside ours in the Fig. 2 table.
	if row := r.Figures[0].Tables[0].Rows[0]; row[1] != "32.5" || row[3] != "0.277" || row[5] != "1.00" {
		t.Errorf("Fig. 2 row %v", row)
	}
	if fg := r.Figures[3]; !strings.Contains(fg.Title, "gate in place of K") || fg.Tables[0].Rows[0][1] != "448" {
		t.Errorf("Fig. 4 with the gate: %s %v", fg.Title, fg.Tables[0].Rows[0])
	}
	// Without a gate (or with fewer than 3 gated cells) there is no such figure.
	ungated := SyntheticInput()
	ungated.Gated = false
	if ru, err := Build(ungated); err != nil || len(ru.Figures) != 3 {
		t.Errorf("ungated input: %v, %d figures", err, len(ru.Figures))
	}
	if _, err := Build(&Input{}); err == nil {
		t.Error("empty input accepted")
	}
}
