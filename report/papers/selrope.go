package papers

import (
	"fmt"
	"math"
	"sort"

	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/analytic"
)

// SelectiveRoPE returns Figs. 2 and 3 of "Selective RoPE".
func SelectiveRoPE() (*report.Report, error) {
	return &report.Report{
		Title:    "Selective RoPE — analytic figures",
		Subtitle: "Fig. 2 (phase-temperature distributions) and Fig. 3 (windowing and spectral leakage), recomputed from App. A.3.1 and §3.2/App. A.4.",
		Manifest: []report.Option{
			{Name: "paper", Value: "papers/002 (Selective RoPE), App. A.3, A.3.1, A.4", Source: "shared/papers"},
			{Name: "axes and signal", Value: "not recoverable from the paper text; chosen as in notes 002 §C", Source: "notes 002 §C Figs. 2–3"},
		},
		Figures: []*report.Figure{selropeTemps(), selropeLeakage()},
	}, nil
}

func descNormalized(v []float64) (x, y []float64) {
	s := append([]float64(nil), v...)
	sort.Sort(sort.Reverse(sort.Float64Slice(s)))
	mx := s[0]
	for n, t := range s {
		if t <= 0 {
			continue // Θ = 0 (a non-rotating pair) has no place on a log axis
		}
		x = append(x, float64(n)/float64(len(s)))
		y = append(y, t/mx)
	}
	return x, y
}

// histogram returns a step outline of the density histogram of vals over
// [lo, hi] in nb bins.
func histogram(vals []float64, lo, hi float64, nb int) (x, y []float64) {
	counts := make([]float64, nb)
	n := 0
	w := (hi - lo) / float64(nb)
	for _, v := range vals {
		if v < lo || v > hi || math.IsInf(v, 0) || math.IsNaN(v) {
			continue
		}
		i := min(int((v-lo)/w), nb-1)
		counts[i]++
		n++
	}
	x, y = append(x, lo), append(y, 0)
	for i, c := range counts {
		d := c / float64(n) / w
		x = append(x, lo+float64(i)*w, lo+float64(i+1)*w)
		y = append(y, d, d)
	}
	return append(x, hi), append(y, 0)
}

func log10All(v []float64) []float64 {
	out := make([]float64, 0, len(v))
	for _, t := range v {
		if t > 0 {
			out = append(out, math.Log10(t))
		}
	}
	return out
}

func selropeTemps() *report.Figure {
	const d = 128
	epsA, epsB := 1.0/500000, 1.0/10000
	var lines []report.Series
	add := func(name string, v []float64, col int, dash bool) {
		x, y := descNormalized(v)
		lines = append(lines, report.Series{Name: name, Kind: report.Line, X: x, Y: y, Color: report.Category(col), Dash: dash, Width: 2.2})
	}
	add("RoPE Θ = ε^{n/64}, ε = 1/500000", analytic.RoPETemperatures(d, epsA), 1, false)
	add("RoPE, ε = 1/10000", analytic.RoPETemperatures(d, epsB), 1, true)
	add("Selective Θ = tan(φ/2), ε = 1/500000", analytic.TanTemperatures(d, epsA), 0, false)
	add("Selective, ε = 1/10000", analytic.TanTemperatures(d, epsB), 0, true)
	add("release \"rfa\", θ = 0.995", analytic.ReleaseTanTemperatures(d, 0.995, 0.25), 2, false)

	density := func(eps float64, label string) report.Panel {
		rope, tan := log10All(analytic.RoPETemperatures(d, eps)), log10All(analytic.TanTemperatures(d, eps))
		lo := math.Floor(math.Log10(eps)) - 0.5
		hi := math.Ceil(math.Log10(1/math.Tan(eps*math.Pi/2))) + 0.5
		hx, hy := histogram(rope, lo, hi, 24)
		tx, ty := histogram(tan, lo, hi, 24)
		vs := analytic.Linspace(lo, hi, 600)
		var dr, dt []float64
		for _, v := range vs {
			dr = append(dr, analytic.RoPELog10Density(v, eps))
			dt = append(dt, analytic.TanLog10Density(v, eps))
		}
		return report.Panel{
			Title: "Densities of log10 Θ, " + label, XLabel: "log10 Θ (unnormalized)", YLabel: "density",
			Legend: report.LegendTopRight,
			Series: []report.Series{
				{Name: "RoPE: histogram of the 64 Θ_n", Kind: report.Line, X: hx, Y: hy, Color: report.Blue, Width: 1.6},
				{Name: "RoPE: log-uniform density", Kind: report.Line, X: vs, Y: dr, Color: report.Blue, Dash: true, Width: 2},
				{Name: "Selective: histogram", Kind: report.Line, X: tx, Y: ty, Color: report.Vermillion, Width: 1.6},
				{Name: "Selective: half-Cauchy density", Kind: report.Line, X: vs, Y: dt, Color: report.Vermillion, Dash: true, Width: 2},
			},
		}
	}
	tbl := report.Table{Caption: "Schedule summaries (ours)", Header: []string{"schedule", "ε", "Θ_max", "Θ_min > 0", "pairs with Θ < 0.01·Θ_max"}}
	for _, e := range []float64{epsA, epsB} {
		for _, sch := range []struct {
			name string
			v    []float64
		}{{"RoPE", analytic.RoPETemperatures(d, e)}, {"Selective (tan)", analytic.TanTemperatures(d, e)}} {
			mx, mn, small := 0.0, math.Inf(1), 0
			for _, t := range sch.v {
				mx = math.Max(mx, t)
				if t > 0 {
					mn = math.Min(mn, t)
				}
			}
			for _, t := range sch.v {
				if t < 0.01*mx {
					small++
				}
			}
			tbl.Rows = append(tbl.Rows, []string{sch.name, fmt.Sprintf("1/%.0f", 1/e), fmt.Sprintf("%.4g", mx), fmt.Sprintf("%.3g", mn), fmt.Sprint(small)})
		}
	}
	return &report.Figure{
		ID:    "selrope-fig2",
		Title: "Selective RoPE Fig. 2 — phase temperatures, RoPE vs Selective RoPE",
		Caption: "\"Sorted temperatures\": the d/2 = 64 temperatures of each schedule sorted in descending order and normalized to a maximum of 1 (log scale). " +
			"RoPE's Θ = ε^φ (φ uniform) is log-uniform on [ε, 1]; Selective RoPE's Θ = tan(φ/2) with φ uniform on [0, (1−ε)π] — the " +
			"optimal random-Fourier-feature scale σ* = tan(θ/2) of Theorem 1 on evenly spread query–key angles — has a truncated half-Cauchy " +
			"density ∝ 1/(1+Θ²). \"Densities of log10 Θ\" (one panel per ε): histograms of log10 Θ (unnormalized) with the analytic densities: the 1/Θ² tail against RoPE's 1/Θ is the " +
			"paper's \"similar, with a slightly faster decay\". Θ₀ = 0 of the tan schedule (a pair that never rotates) cannot appear on a log axis and is omitted.",
		Options: []report.Option{
			{Name: "d (head dimension)", Value: "128 → 64 temperatures", Source: "choice (notes 002 §C Fig. 2)"},
			{Name: "ε", Value: "1/500000 (release RoPE base) and 1/10000 (classic base)", Source: "App. A.3.1 (ε = 1/base); values: notes 002 §C"},
			{Name: "RoPE", Value: "Θ_n = ε^{n/(d/2)}, n = 0..63", Source: "App. A.3.1 (reconstructed; printed garbled, notes 002 §A.3)"},
			{Name: "Selective", Value: "φ = linspace(0, (1−ε)π, 64), Θ = tan(φ/2)", Source: "App. A.3.1"},
			{Name: "release \"rfa\"", Value: "ψ = linspace(0, 0.995π, 64), Θ = 0.25·tan(ψ/2)/max tan(ψ/2)", Source: "release code (notes 002 §A.3)"},
			{Name: "densities", Value: "p(log10 Θ) = 1/log10(1/ε) (RoPE); ln10·Θ·2/((1−ε)π(1+Θ²)) (tan)", Source: "derived (notes 002 §A.3 [D])"},
			{Name: "histogram", Value: "24 equal bins of log10 Θ, drawn as density outlines", Source: "choice"},
		},
		Tables: []report.Table{tbl},
		Panels: []report.Panel{
			{Title: "Sorted temperatures (normalized)", XLabel: "rank n/(d/2)", YLabel: "Θ_n / max Θ", YLog: true, Series: lines, Legend: report.LegendBottomLeft,
				Y: report.Range{Min: 1e-11, Max: 2}},
			density(epsA, "ε = 1/500000"),
			density(epsB, "ε = 1/10000"),
		},
		PanelWidth: 6, PanelHeight: 4.4,
	}
}

func selropeLeakage() *report.Figure {
	const (
		n     = 128
		f0    = 10.37
		ph0   = 0.3
		f1    = 23.0
		a1    = 0.01
		pad   = 1024
		floor = -120.0
	)
	x := analytic.Signal(n, analytic.Tone{Amp: 1, Freq: f0, Phase: ph0}, analytic.Tone{Amp: a1, Freq: f1})
	single := analytic.Signal(n, analytic.Tone{Amp: 1, Freq: f0, Phase: ph0})
	tau := analytic.Linspace(0, n-1, n)
	windows := []struct {
		name  string
		kind  string
		alpha float64
		col   int
		dash  bool
	}{
		{"rectangular (step u_t)", analytic.WindowRect, 0, 1, false},
		{"Hann", analytic.WindowHann, 0, 0, false},
		{"exponential α = 0.02 (forget gate)", analytic.WindowExp, 0.02, 2, true},
		{"exponential α = 0.05", analytic.WindowExp, 0.05, 3, true},
	}
	var spec, zoom []report.Series
	tbl := report.Table{Caption: "Leakage per window (ours; the paper gives no numbers)",
		Header: []string{"window", "peak (cycles/N)", "energy outside ±2 bins of bin 10 (single tone)", "level at f₁ = 23 (dB)"}}
	for _, w := range windows {
		win := analytic.Window(w.kind, n, w.alpha)
		sp := analytic.WindowedSpectrum(x, win, pad, floor)
		s := report.Series{Name: w.name, Kind: report.Line, X: sp.Freq, Y: sp.DB, Color: report.Category(w.col), Dash: w.dash, Width: 1.9}
		spec = append(spec, s)
		var zx, zy []float64
		for i, f := range sp.Freq {
			if f >= 5 && f <= 30 {
				zx, zy = append(zx, f), append(zy, sp.DB[i])
			}
		}
		zs := s
		zs.X, zs.Y = zx, zy
		zoom = append(zoom, zs)
		tbl.Rows = append(tbl.Rows, []string{w.name, fmt.Sprintf("%.2f", sp.Peak),
			fmt.Sprintf("%.2e", analytic.Leakage(single, win, 10, 2)), fmt.Sprintf("%.1f", sp.LevelAt(f1))})
	}
	rect := analytic.Window(analytic.WindowRect, n, 0)
	hann := analytic.Window(analytic.WindowHann, n, 0)
	mul := func(a, b []float64) []float64 {
		out := make([]float64, len(a))
		for i := range a {
			out[i] = a[i] * b[i]
		}
		return out
	}
	// Dashed grey verticals at the two true frequencies.
	marks := func(lo, hi float64) []report.Series {
		return []report.Series{
			{Name: "true f₀ = 10.37 and f₁ = 23", Kind: report.Line, X: []float64{f0, f0}, Y: []float64{lo, hi}, Color: report.Grey, Width: 1, Dash: true},
			{Kind: report.Line, X: []float64{f1, f1}, Y: []float64{lo, hi}, Color: report.Grey, Width: 1, Dash: true},
		}
	}
	return &report.Figure{
		ID:    "selrope-fig3",
		Title: "Selective RoPE Fig. 3 — windowing and spectral leakage",
		Caption: "(a) A finite sample of v_τ = sin(2πf₀τ/N + φ₀) + 0.01·sin(2πf₁τ/N) seen through the rectangular step window u_t(τ) of a rotation-only " +
			"state (eq. 22–24); (b) the same sample under a Hann window. (c) Magnitude spectra (zero-padded DFT, dB relative to a unit on-bin tone): the " +
			"rectangular window's sinc sidelobes (leakage) bury the −40 dB tone at f₁, the Hann window recovers it; the exponential (Poisson) windows of " +
			"a forget gate (eq. 25, causal form e^{−α(N−1−τ)}) lie in between — the paper's argument that decay (real part) is needed beside rotation " +
			"(imaginary part). (d) Zoom on 5–30 cycles.",
		Options: []report.Option{
			{Name: "N", Value: "128 samples", Source: "choice (notes 002 §C Fig. 3; the paper gives no signal parameters)"},
			{Name: "signal", Value: fmt.Sprintf("f₀ = %g cycles/N (off-bin, so the step window leaks), φ₀ = %g; weak tone %g at f₁ = %g", f0, ph0, a1, f1), Source: "choice (notes 002 §C)"},
			{Name: "windows", Value: "rectangular; Hann 0.5(1 − cos(2πτ/(N−1))); exponential e^{−α(N−1−τ)}, α ∈ {0.02, 0.05}", Source: "§3.2, App. A.4 (Hann: the paper's figure; exponential: eq. 25, our extension tying it to forget gates)"},
			{Name: "spectrum", Value: fmt.Sprintf("direct DFT zero-padded to %d points, 20·log10(2|V_k|/Σw), floor %g dB", pad, floor), Source: "choice"},
			{Name: "leakage", Value: "1 − Σ_{|k−10|≤2}|V_k|² / Σ_k|V_k|² on the single tone, N-point DFT", Source: "notes 002 §B.7"},
		},
		Tables: []report.Table{tbl},
		Panels: []report.Panel{
			{Title: "(a) finite sample, rectangular window", XLabel: "τ", YLabel: "v_τ·u_t(τ)", Legend: report.LegendBottomRight, Y: report.Range{Min: -1.75, Max: 1.1}, Series: []report.Series{
				{Name: "window", Kind: report.Line, X: tau, Y: rect, Color: report.Grey, Width: 1.5, Dash: true},
				{Name: "windowed sample", Kind: report.Line, X: tau, Y: mul(x, rect), Color: report.Blue, Width: 1.6},
			}},
			{Title: "(b) the same sample, Hann window", XLabel: "τ", YLabel: "v_τ·w_τ", Legend: report.LegendBottomRight, Y: report.Range{Min: -1.75, Max: 1.1}, Series: []report.Series{
				{Name: "window", Kind: report.Line, X: tau, Y: hann, Color: report.Grey, Width: 1.5, Dash: true},
				{Name: "windowed sample", Kind: report.Line, X: tau, Y: mul(x, hann), Color: report.Vermillion, Width: 1.6},
			}},
			{Title: "(c) magnitude spectra", XLabel: "frequency (cycles per N)", YLabel: "|V| (dB)", Y: report.Range{Min: -110, Max: 5},
				Legend: report.LegendOutside, Series: append(spec, marks(-110, 5)...)},
			{Title: "(d) zoom: 5–30 cycles", XLabel: "frequency (cycles per N)", YLabel: "|V| (dB)", Y: report.Range{Min: -110, Max: 5},
				Legend: report.LegendNone, Series: append(zoom, marks(-110, 5)...)},
		},
		PanelWidth: 6.2, PanelHeight: 4,
	}
}
