package ppl

import (
	"math"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// synthPPL builds ppl results by hand: a gated model "gated_headwise"
// (learned, one, k, k-matched over T = 256, 512, 1024, T_train = 256) and
// an RFA model "rfa_m2_sc" (learned only).
func synthPPL() *results.PPLResults {
	lengths := []int{256, 512, 1024}
	man := &results.PPLManifest{RunRecord: results.RunRecord{Kind: "ppl", Complete: true, Source: results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "heldout.ids.json", SHA256: "abcdef0123456789"}, Tokens: 1000}},
		Options: results.PPLOptions{StreamPlan: results.StreamPlan{Lengths: lengths, Samples: 4, Disjoint: "all", Placement: "sequential"}, Positions: "all",
			CILevel: 0.95, TrainLength: 256, CalibLength: 256, CalibSamples: 1, LambdaForm: "reml",
			Variants: []string{"learned", "one", "k", "k-matched"}},
		Models: []results.PPLModel{
			{Label: "gated_headwise", Gated: true, Variants: []string{"learned", "one", "k", "k-matched"}, Info: results.ModelInfo{Arch: "gated"}},
			{Label: "rfa_m2_sc", Variants: []string{"learned"}, Info: results.ModelInfo{Arch: "rfa"}},
		}}
	res := &results.PPLResults{Manifest: man}
	// ΔNLL per variant and length, and its half-width
	d := map[string][3]float64{"learned": {math.NaN(), math.NaN(), math.NaN()}, "one": {0.2, 0.3, 0.5}, "k": {0.001, -0.02, -0.05}, "k-matched": {0.004, -0.01, 0.02}}
	base := [3]float64{4.0, 4.1, 4.4}
	for _, v := range []string{"learned", "one", "k", "k-matched"} {
		for i, T := range lengths {
			nll := base[i]
			if v != "learned" {
				nll += d[v][i]
			}
			r := results.PPLSummaryRow{Model: "gated_headwise", Variant: v, T: T, Samples: 4, N: 4 * T, NLL: nll,
				NLLLo: nll - 0.05, NLLHi: nll + 0.05, DNLL: d[v][i], DNLLLo: d[v][i] - 0.012, DNLLHi: d[v][i] + 0.008, Extrap: false, MaxPos: 4096}
			r.PPL, r.PPLLo, r.PPLHi = math.Exp(r.NLL), math.Exp(r.NLLLo), math.Exp(r.NLLHi)
			res.Summary = append(res.Summary, r)
		}
	}
	for i, T := range lengths {
		nll := 3.9 + 0.05*float64(i)
		res.Summary = append(res.Summary, results.PPLSummaryRow{Model: "rfa_m2_sc", Variant: "learned", T: T, Samples: 4, NLL: nll,
			PPL: math.Exp(nll), PPLLo: math.Exp(nll - 0.04), PPLHi: math.Exp(nll + 0.04), DNLL: math.NaN(), DNLLLo: math.NaN(), DNLLHi: math.NaN()})
	}
	return res
}

func TestExtrapolationFigure(t *testing.T) {
	f, err := ExtrapolationFigure(synthPPL())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range report.CaptionProblems(f) {
		t.Error(p)
	}
	if f.ID != "zoo-extrapolation" || !f.Panels[0].XLog || !f.Panels[1].XLog {
		t.Fatalf("figure %s, log x %v %v", f.ID, f.Panels[0].XLog, f.Panels[1].XLog)
	}
	tbl := f.Tables[0]
	if strings.Join(tbl.Header, "|") != "model|source|T = 256|T = 512|T = 1024|T = 2048|T = 4096" {
		t.Fatalf("header %v", tbl.Header)
	}
	if len(tbl.Rows) != 2+12 {
		t.Fatalf("%d rows, want 2 of ours and the paper's 12", len(tbl.Rows))
	}
	if tbl.Rows[0][0] != "gated_headwise (≈ RoPE (B1))" || tbl.Rows[1][0] != "rfa_m2_sc (≈ SC-RFA (M2))" {
		t.Fatalf("our rows %q, %q", tbl.Rows[0][0], tbl.Rows[1][0])
	}
	if got := tbl.Rows[1][2]; !strings.HasPrefix(got, "49.40 [") || tbl.Rows[1][5] != "—" {
		t.Fatalf("rfa_m2_sc at 256: %q; at 2048: %q", got, tbl.Rows[1][5])
	}
	// the paper's RoPE row: 28.48 at 512 … 72.69 at 4096, nothing at 256
	if r := tbl.Rows[2]; r[0] != "RoPE (B1)" || r[2] != "—" || r[3] != "28.48" || r[6] != "72.69" {
		t.Fatalf("paper row %v", r)
	}
	// panel (b): ours normalized at T_train (1 there), the paper at 512
	var seen int
	for _, s := range f.Panels[1].Series {
		switch s.Name {
		case "gated_headwise (ours)":
			seen++
			if s.Y[0] != 1 || math.Abs(s.Y[2]-math.Exp(0.4)) > 1e-12 {
				t.Fatalf("relative curve %v", s.Y)
			}
		case "RoPE (B1) (paper)":
			seen++
			if s.Y[0] != 1 || math.Abs(s.Y[3]-72.69/28.48) > 1e-12 {
				t.Fatalf("paper relative curve %v", s.Y)
			}
		}
	}
	if seen != 2 {
		t.Fatal("relative curves missing")
	}
	for _, want := range []string{"not comparable", "Brown corpus", "WikiText-103"} {
		if !strings.Contains(f.Caption, want) {
			t.Errorf("caption lacks %q", want)
		}
	}
	if _, err := f.SVG(); err != nil {
		t.Fatal(err)
	}
	if _, err := ExtrapolationFigure(&results.PPLResults{Manifest: &results.PPLManifest{}}); err == nil {
		t.Fatal("empty results accepted")
	}
}

func TestPrediction3Figure(t *testing.T) {
	res := synthPPL()
	v := Prediction3Verdicts(res, "gated_headwise")
	want := map[string][3]bool{"one": {false, false, false}, "k": {true, true, true}, "k-matched": {true, false, false}}
	if len(v) != 3 {
		t.Fatalf("%d verdicts", len(v))
	}
	for _, x := range v {
		w := want[x.Variant]
		if x.TRef != 256 || x.Longer != 2 || x.Match != w[0] || x.Better != w[1] || x.Monotone != w[2] {
			t.Errorf("%s: %+v, want match/better/monotone %v", x.Variant, x, w)
		}
	}
	f, err := Prediction3Figure(res, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range report.CaptionProblems(f) {
		t.Error(p)
	}
	if f.ID != "bft-prediction3" {
		t.Fatalf("id %s", f.ID)
	}
	if r := f.Tables[0].Rows[1]; r[0] != "k" || r[1] != "+0.0010 [-0.0110, +0.0090]" || r[2] != "yes" || r[3] != "yes" || r[4] != "yes" {
		t.Fatalf("k verdict row %v", r)
	}
	if r := f.Tables[1].Rows[1]; r[0] != "one" || !strings.HasSuffix(r[3], "(+0.5000)") {
		t.Fatalf("ppl table row %v", r)
	}
	if n := len(f.Panels[1].Series); n != 3*2+1 {
		t.Fatalf("ΔNLL panel has %d series, want 3 variants × (line, bars) + the zero line", n)
	}
	for _, want := range []string{"Prediction 3", "does not show", "inference", "calibration", "gated_headwise"} {
		if !strings.Contains(f.Caption, want) {
			t.Errorf("caption lacks %q", want)
		}
	}
	if _, err := f.SVG(); err != nil {
		t.Fatal(err)
	}
	if _, err := Prediction3Figure(res, "rfa_m2_sc"); err == nil {
		t.Fatal("an ungated model with one variant was accepted")
	}
	res.Manifest.Models[0].Gated = false
	if _, err := Prediction3Figure(res, ""); err == nil || !strings.Contains(err.Error(), "gated") {
		t.Fatalf("no gated model: err %v", err)
	}
	rep, err := ZooReport(synthPPL())
	if err != nil || len(rep.Figures) != 2 {
		t.Fatalf("ZooReport: %v, %d figures", err, len(rep.Figures))
	}
}

func TestPaperCounterpart(t *testing.T) {
	for _, c := range [][3]string{{"rfa_m1", "rfa", "RFA (M1)"}, {"rfa_m2_sc", "rfa", "SC-RFA (M2)"}, {"qwen3_base", "qwen3", "RoPE (B1)"},
		{"selrope", "transformer", ""}} {
		if got := PaperCounterpart(c[0], c[1]); got != c[2] {
			t.Errorf("%s (%s): %q, want %q", c[0], c[1], got, c[2])
		}
	}
}
