package papers

import (
	"fmt"
	"math"

	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/analytic"
)

// BFT returns what the BFT paper allows without a model: its diagnostic
// Figs. 2–4 are measurements on a checkpoint (run `probe sweep`, then
// `probe report <sweep dir>`), so this report holds the one analytic
// relation behind them — the gain of Eq. 6 at λ = 1 as a function of n_eff
// and S — and the paper's published Fig. 2 values as a reference plot.
func BFT() (*report.Report, error) {
	return &report.Report{
		Title:    "BFT — what can be drawn without a model",
		Subtitle: "BFT's diagnostic Figs. 2, 3 and 4 need a sweep over a checkpoint; this page holds the analytic relation they rest on and the paper's own numbers.",
		Intro: []string{
			"Figs. 2–4 of the BFT paper (App. I) are measurements of a pretrained gated-attention model's attention over context lengths 1k–10k: " +
				"they cannot be computed from formulas. Run `probe sweep` on a checkpoint and then `probe report <sweep dir>` to draw them with the " +
				"paper's numbers beside yours. Figs. 1, 5, 6 and 7 are training or task results (notes 003 §C).",
		},
		Manifest: []report.Option{
			{Name: "paper", Value: "papers/003 (BFT), §3.1 Eq. 3 and 6, App. I", Source: "shared/papers"},
		},
		Figures: []*report.Figure{bftGain(), bftPaperFig2()},
	}, nil
}

func bftGain() *report.Figure {
	const dHead = 128
	sigma02 := 1.0 / dHead
	ns := make([]float64, 0, 200)
	for i := 0; i < 200; i++ {
		ns = append(ns, math.Pow(10, 3.3*float64(i)/199))
	}
	ss := []float64{0, 0.01, 0.05, 0.2, 1}
	cols := report.Viridis(0, 1).Samples(len(ss), 0, 0.85)
	var series []report.Series
	for i, s := range ss {
		var k []float64
		for _, n := range ns {
			k = append(k, analytic.BFTGain(analytic.BFTLambdaObs(n, s, sigma02), 1))
		}
		series = append(series, report.Series{Name: fmt.Sprintf("S = %g", s), Kind: report.Line, X: ns, Y: k, Color: cols[i], Width: 2.2})
	}
	lam := analytic.BFTLambdaObs(1, 0, sigma02)
	return &report.Figure{
		ID:    "bft-eq6",
		Title: "BFT Eq. 6 at λ = 1 — Kalman gain K vs n_eff for several dispersions S",
		Caption: "K = λobs/(1 + λobs) with λobs = (n_eff + 1)/(S̄ + σ0²) (App. I: λ̄ ≡ 1, ν = 1, σ0² = 1/d_h). Small dispersion S drives K to 1 " +
			"whatever n_eff is, which is why sink heads (attention on one token: n_eff ≈ 1 but S → 0) sit at K → 1 in Fig. 4 (notes 003 F.16). " +
			fmt.Sprintf("A one-hot row (n_eff = 1, S = 0) gives λobs = 2/σ0² = %.0f and K = %.4f.", lam, analytic.BFTGain(lam, 1)),
		Options: []report.Option{
			{Name: "σ0²", Value: "1/128 (d_h = 128 of the paper's checkpoint)", Source: "App. I; notes 003 §B.4"},
			{Name: "λ (prior precision)", Value: "1", Source: "App. I (\"K at λ = 1\")"},
			{Name: "n_eff", Value: "1 … 2000, log-spaced", Source: "choice"},
			{Name: "S̄", Value: "{0, 0.01, 0.05, 0.2, 1} (mean over head dimensions, reduction (i))", Source: "choice; reduction: notes 003 F.1"},
		},
		Panels:     []report.Panel{{XLabel: "n_eff", YLabel: "K = λobs/(1 + λobs)", XLog: true, Series: series, Legend: report.LegendBottomRight}},
		PanelWidth: 6.5, PanelHeight: 4.4,
	}
}

// bftPaperFig2 plots the values the paper prints for Fig. 2 (notes 003
// §B.6); its ±1 std bands are not printed, so only the means are drawn.
func bftPaperFig2() *report.Figure {
	T := []float64{1000, 2000, 4000, 6000, 8000, 10000}
	neff := []float64{32.5, 41.4, 55.1, 64.0, 66.0, 70.7}
	gate := []float64{0.277, 0.292, 0.303, 0.306, 0.308, 0.304}
	ratio := []float64{1.00, 1.09, 1.23, 1.28, 1.28, 1.28}
	pan := func(title, y string, v []float64) report.Panel {
		return report.Panel{Title: title, XLabel: "context length T", YLabel: y, Legend: report.LegendBottomRight, Series: []report.Series{
			{Name: "paper (App. I)", Kind: report.Line, X: T, Y: v, Color: report.Vermillion, Width: 1.6, Dash: true},
			{Kind: report.Scatter, X: T, Y: v, Color: report.Vermillion, Shape: report.Diamond, Radius: 4.5},
		}}
	}
	tbl := report.Table{Caption: "The paper's Fig. 2 values (mean over 5 samples × 7 deep layers × last-25 % queries)",
		Header: []string{"T", "1k", "2k", "4k", "6k", "8k", "10k"}}
	row := func(name string, v []float64, prec int) []string {
		out := []string{name}
		for _, x := range v {
			out = append(out, fmt.Sprintf("%.*f", prec, x))
		}
		return out
	}
	tbl.Rows = [][]string{row("n_eff", neff, 1), row("gate", gate, 3), row("λobs(T)/λobs(1k)", ratio, 2)}
	return &report.Figure{
		ID:    "bft-fig2-paper",
		Title: "BFT Fig. 2 as published — the reference a sweep is compared with",
		Caption: "The paper's printed values for QwQZh/gated_attention/1B_gate_headwise on WikiText-103 validation (5 samples per length). These are " +
			"the paper's numbers, not ours: `probe report <sweep dir>` draws a sweep's measurements beside them.",
		Options: []report.Option{{Name: "values", Value: "copied from App. I / Fig. 2", Source: "notes 003 §B.6"},
			{Name: "T unit", Value: "1k drawn as 1000 tokens (the paper does not say 1000 or 1024)", Source: "notes 003 F.1.6"}},
		Tables:  []report.Table{tbl},
		Panels:  []report.Panel{pan("(a) n_eff", "n_eff", neff), pan("(b) gate", "gate σ(XW_θ)", gate), pan("(c) λobs(T)/λobs(T_min)", "ratio", ratio)},
		Columns: 3, PanelWidth: 4.6, PanelHeight: 3.8,
	}
}
