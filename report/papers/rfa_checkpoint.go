package papers

// The RFA paper's diagnostic figures drawn from checkpoints rather than from
// chosen formula parameters: Figs. 3–4 from one checkpoint's learned
// per-head values, Figs. 8–10 from a series of checkpoints (or a training
// history), Figs. 11–14 from a forward pass of a long sequence. The numbers
// come from rfa_checkpoint_data.go; this file only lays them out.

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/analysis/rfatab"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/attnmap"
)

// RFALagAxis chooses the lags of the Figs. 3–4 curves.
type RFALagAxis struct {
	Max    float64 // largest lag Δt in tokens
	Points int     // number of lags (default 400)
	Log    bool    // logarithmic lag axis from 1 to Max (lag 0 in the table)
	Source string  // where Max comes from, for the option table
}

// RFACheckpointInput is what the checkpoint report draws. Each part is
// optional; at least one must be present.
type RFACheckpointInput struct {
	Model    string // checkpoint directory (captions)
	Ablation string // the authors' ablation_name (M1, M2, M2.7), if any
	RFA      bool   // the model is RFA (Figs. 3–4 and the decayed maps need it)
	Layers   int    // the model's number of layers

	// Figs. 3–4: the prior curves of layer Layer's heads at the lags of
	// Lags (analysis.RFAPriors).
	Layer  int
	Priors *rfatab.Priors
	Lags   RFALagAxis

	// Figs. 8–10.
	History *rfatab.ParamHistory

	// Figs. 11–14 and where their tokens come from.
	Maps       *attngrid.Maps
	MapsTokens string
	// MapsHeads are the mapped layer's head values (RFA only; the panel
	// titles give each head's μ).
	MapsHeads []rfatab.Head

	Manifest []report.Option
}

// RFACheckpointReport draws every figure its input allows: Figs. 3 and 4
// (Params), 8, 9 and 10 (History), and the attention maps of Figs. 11–14
// (Maps: Â^0.25, Â and, when streamed, the decayed A^0.25).
func RFACheckpointReport(in RFACheckpointInput) (*report.Report, error) {
	r := &report.Report{
		Title: "RFA — figures from checkpoints (Robust Filter Attention: Self-Attention as a Parallel State Estimator)",
		Subtitle: "Figs. 3–4, 8–10 and 11–14 of the paper computed from a checkpoint's learned values, a series of checkpoints " +
			"and a forward pass; `probe figures --paper rfa` without --model/--series/--history draws the analytic figures.",
		Manifest: in.Manifest,
	}
	if in.Priors != nil {
		f3, err := RFACheckpointFig3(in.Priors, in.Layer, in.Lags, in.Model)
		if err != nil {
			return nil, err
		}
		f4, err := RFACheckpointFig4(in.Priors, in.Layer, in.Lags, in.Model)
		if err != nil {
			return nil, err
		}
		r.Figures = append(r.Figures, f3, f4)
	}
	if in.History != nil {
		fs, err := RFAHistoryFigures(in.History)
		if err != nil {
			return nil, err
		}
		r.Figures = append(r.Figures, fs...)
	}
	if in.Maps != nil {
		r.Figures = append(r.Figures, RFAAttentionFigures(in.Maps, in.MapsHeads, rfaMapFigure(in.RFA, in.Ablation), in.Model, in.MapsTokens)...)
	}
	if len(r.Figures) == 0 {
		return nil, fmt.Errorf("papers: nothing to draw: give a checkpoint's parameters, a parameter history or attention maps")
	}
	return r, nil
}

// g3 formats v with 3 significant digits and a short exponent (3.97e-5).
func g3(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	s := strconv.FormatFloat(v, 'g', 3, 64)
	if i := strings.IndexByte(s, 'e'); i >= 0 {
		mant, exp := s[:i], s[i+1:]
		sign := ""
		if exp[0] == '-' || exp[0] == '+' {
			if exp[0] == '-' {
				sign = "-"
			}
			exp = exp[1:]
		}
		exp = strings.TrimLeft(exp, "0")
		s = mant + "e" + sign + exp
	}
	return s
}

// headPalette colours heads: Okabe–Ito (without yellow) then grey, so
// eight heads get eight colour-blind-safe colours; heads beyond eight
// repeat the colours with dashed lines.
var headPalette = append(append([]color.RGBA(nil), report.OkabeIto...), report.Grey)

// headStyle returns head h's colour and whether its line is dashed.
func headStyle(h int) (color.RGBA, bool) {
	return headPalette[h%len(headPalette)], h >= len(headPalette)
}

// regimeRows are the rows of the checkpoint Fig. 3, named as the paper's
// Fig. 3 rows: closing gates (diffusive heads, and the μ = 0 Brownian heads
// whose precision also only falls, drawn dashed as the paper's Fig. 4 draws
// μ = 0; the measure-zero boundary α = 0 goes here too) and opening gates
// (integrative heads).
var regimeRows = []struct {
	regimes        []string
	pTitle, bTitle string
}{
	{[]string{rfatab.Diffusive, rfatab.Brownian, rfatab.Boundary},
		"Closing gates: diffusive, Brownian", "Forgetting priors: diffusive, Brownian"},
	{[]string{rfatab.Integrative}, "Opening gates: integrative", "Settling priors: integrative"},
}

const (
	lagLabel = "time lag Δt (tokens)"
	pLabel   = "precision P(Δt) = 1/V(Δt)"
	bLabel   = "log-precision B(Δt) = −log V(Δt)"
)

// headLegends returns the two legend texts of a head: μ, α/β and regime
// (precision panel), σ², η², γ² (bias panel).
func headLegends(p *rfatab.Head) (string, string) {
	left := fmt.Sprintf("h%d: μ=%s, α/β=%s, %s", p.Head, g3(p.Mu), g3(p.Alpha/p.Beta), p.Regime)
	if p.Regime == rfatab.Brownian {
		left = fmt.Sprintf("h%d: μ=0, Brownian (no α/β)", p.Head)
	}
	return left, fmt.Sprintf("h%d: σ²=%s, η²=%s, γ²=%s", p.Head, g3(p.Sigma2), g3(p.Eta2), g3(p.Gamma2))
}

// lagRange pins the lag axis to the curves' lags (the interactive log axis
// would otherwise round up to the next decade).
func lagRange(lags []float64) report.Range {
	return report.Range{Min: lags[0], Max: lags[len(lags)-1]}
}

// priorTable lists every head's values and the ends of its curves.
func priorTable(pr *rfatab.Priors) report.Table {
	maxLag := pr.MaxLag
	tbl := report.Table{
		Caption: "Per-head values read from the checkpoint (after the authors' softplus transforms; μ is the decay the pass uses) and the ends of the curves",
		Header: []string{"head", "regime", "μ", "Δt₊", "σ²", "σ²/2μ", "η²", "γ²", "α", "β", "α/β", "τ_s", "ν/d",
			"P(0)", fmt.Sprintf("P(%g)", maxLag), "B(0)", fmt.Sprintf("B(%g)", maxLag), "floor −log(β+c)"},
	}
	for i := range pr.Heads {
		p := &pr.Heads[i]
		floor := -math.Log(p.Beta + pr.CovEps)
		tbl.Rows = append(tbl.Rows, []string{fmt.Sprint(p.Head), p.Regime, g3(p.Mu), g3(p.TShift), g3(p.Sigma2), g3(p.SteadyState),
			g3(p.Eta2), g3(p.Gamma2), g3(p.Alpha), g3(p.Beta), g3(p.Alpha / p.Beta), g3(p.Tau), g3(p.NuOverD),
			g3(p.P0), g3(p.PMax), g3(p.B0), g3(p.BMax), g3(floor)})
	}
	return tbl
}

// priorOptions are the options shared by the checkpoint Figs. 3 and 4.
func priorOptions(p *rfatab.Priors, layer int, ax RFALagAxis, dir string) []report.Option {
	axis := "linear, [0, %g]"
	if ax.Log {
		axis = "logarithmic, [1, %g] (lag 0, the diagonal, is in the table)"
	}
	return []report.Option{
		{Name: "checkpoint", Value: dir, Source: "--model"},
		{Name: "layer", Value: fmt.Sprint(layer), Source: "--layer (default: the last, as the paper's F.2–F.3 plots)"},
		{Name: "kernel", Value: fmt.Sprintf("V(Δt) = σ²(1 − E²)/(2μ) + η²E² + γ² + c, E = exp(clamp(−μ(Δt + Δt₊), %g, %g)), c = %g; σ²(Δt + Δt₊) + η² + γ² + c when |μ| < %g",
			p.MinExponent, p.MaxExponent, p.CovEps, p.BrownianBelow), Source: "RFA Eq. 9 as the authors' code evaluates it (model.RFAHeadParams.Kernel; notes 000 §F.5, §F.14)"},
		{Name: "P, B", Value: "P_Δt = 1/V, B_Δt = −log V (the logit adds τ_s·B_Δt)", Source: "RFA Alg. 1 steps 5, 8"},
		{Name: "α, β, regime", Value: "α = η² − σ²/2μ, β = γ² + σ²/2μ; α > 0 integrative, α < 0 diffusive, μ = 0 Brownian", Source: "RFA App. B.4.1 (model.RFAHeadParams.Regime; λ_C = 1)"},
		{Name: "lag axis", Value: fmt.Sprintf(axis, ax.Max), Source: "--max-lag (" + ax.Source + "), --lag-axis"},
		{Name: "colours", Value: "one Okabe–Ito colour per head (then grey for head 7), the same in every checkpoint figure", Source: "choice (colour-blind safe)"},
	}
}

// RFACheckpointFig3 draws RFA Fig. 3 from one layer's learned heads: the
// precision gate P_Δt (left) and the bias B_Δt (right) of every head against
// the lag, in the paper's two rows: closing gates (diffusive heads, and
// μ = 0 Brownian heads dashed) and opening gates (integrative heads); a row
// with no head is left out.
// The left legends give each head's μ, α/β and regime, the right ones its
// σ², η², γ².
func RFACheckpointFig3(pr *rfatab.Priors, layer int, ax RFALagAxis, dir string) (*report.Figure, error) {
	lags, ps := pr.Lags, pr.Heads
	if len(ps) == 0 || len(lags) == 0 {
		return nil, fmt.Errorf("papers: no heads or no lags")
	}
	var panels []report.Panel
	for _, row := range regimeRows {
		var pser, bser []report.Series
		for i := range ps {
			p := &ps[i]
			reg := p.Regime
			if !slices.Contains(row.regimes, reg) {
				continue
			}
			P, B := p.P, p.B
			col, dash := headStyle(p.Head)
			dash = dash || reg == rfatab.Brownian
			ln, rn := headLegends(p)
			pser = append(pser, report.Series{Name: ln, Kind: report.Line, X: lags, Y: P, Color: col, Dash: dash, Width: 2.4})
			bser = append(bser, report.Series{Name: rn, Kind: report.Line, X: lags, Y: B, Color: col, Dash: dash, Width: 2.4})
		}
		if len(pser) == 0 {
			continue
		}
		panels = append(panels,
			report.Panel{Title: row.pTitle, XLabel: lagLabel, YLabel: pLabel, XLog: ax.Log, X: lagRange(lags), Series: pser, Legend: report.LegendOutside},
			report.Panel{Title: row.bTitle, XLabel: lagLabel, YLabel: bLabel, XLog: ax.Log, X: lagRange(lags), Series: bser, Legend: report.LegendOutside})
	}
	return &report.Figure{
		ID:    fmt.Sprintf("rfa-ckpt-fig3-L%d", layer),
		Title: fmt.Sprintf("RFA Fig. 3 from a checkpoint — precision gate P and bias B vs lag, layer %d", layer),
		Caption: "Each head's prior precision P_Δt = 1/V(Δt) (the \"gates\" panels) and additive bias B_Δt = −log V(Δt) (the \"priors\" panels) against the lag, from the " +
			"checkpoint's learned σ², η², γ², fixed decay μ and learned shift Δt₊ — the checkpoint version of the paper's analytic Fig. 3. " +
			"Heads are grouped by regime as the paper's rows are: diffusive heads (σ̃² > η², α < 0) close their gate with lag and their bias " +
			"falls to the floor −log β (local recency); Brownian heads (μ = 0, dashed) close it without a floor, V growing as σ²Δt; " +
			"integrative heads (η² > σ̃², α > 0, the \"Opening gates\" and \"Settling priors\" panels) open it as a sigmoid in 2μΔt − ln(α/β) and their bias rises to −log β " +
			"(distant, denoised history trusted). " +
			"Legends of the gates panels: μ, α/β and regime; of the priors panels: σ², η², γ² of the same head (same colour).",
		Options:    priorOptions(pr, layer, ax, dir),
		Tables:     []report.Table{priorTable(pr)},
		Notes:      []string{"The curves include what the pass adds to the paper's Eq. 9: the learned shift Δt₊ on every lag (App. C.6), the clamp of the decay exponent and c = 0.01 on V; the regime uses the paper's α, β (without c)."},
		Panels:     panels,
		PanelWidth: 6.6, PanelHeight: 4.2,
	}, nil
}

// RFACheckpointFig4 draws RFA Fig. 4 from one layer's learned heads: every
// head's P_Δt and B_Δt on shared axes, so that the heads' decays μ can be
// compared as the paper's Fig. 4 compares μ: a larger μ saturates sooner,
// at the floor −log(β + c) (thin dashed, bias panel); μ = 0 heads have no
// floor.
func RFACheckpointFig4(pr *rfatab.Priors, layer int, ax RFALagAxis, dir string) (*report.Figure, error) {
	lags, ps := pr.Lags, pr.Heads
	if len(ps) == 0 || len(lags) == 0 {
		return nil, fmt.Errorf("papers: no heads or no lags")
	}
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	// Legend order: by μ, slowest first (Brownian heads first).
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && ps[order[j]].Mu < ps[order[j-1]].Mu; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	var pser, bser, floors []report.Series
	for _, i := range order {
		p := &ps[i]
		P, B := p.P, p.B
		col, dash := headStyle(p.Head)
		ln := fmt.Sprintf("h%d: μ=%s, 1/2μ=%s tokens", p.Head, g3(p.Mu), g3(1/(2*p.Mu)))
		rn := fmt.Sprintf("h%d: floor −log(β+c)=%s", p.Head, g3(-math.Log(p.Beta+pr.CovEps)))
		if p.Regime == rfatab.Brownian {
			ln = fmt.Sprintf("h%d: μ=0 (Brownian)", p.Head)
			rn = fmt.Sprintf("h%d: no floor (Brownian)", p.Head)
			dash = true
		} else {
			fl := -math.Log(p.Beta + pr.CovEps)
			floors = append(floors, report.Series{Kind: report.Line, X: []float64{lags[0], lags[len(lags)-1]}, Y: []float64{fl, fl},
				Color: col, Dash: true, Width: 1.2})
		}
		pser = append(pser, report.Series{Name: ln, Kind: report.Line, X: lags, Y: P, Color: col, Dash: dash, Width: 2.4})
		bser = append(bser, report.Series{Name: rn, Kind: report.Line, X: lags, Y: B, Color: col, Dash: dash, Width: 2.4})
	}
	bser = append(bser, floors...)
	return &report.Figure{
		ID:    fmt.Sprintf("rfa-ckpt-fig4-L%d", layer),
		Title: fmt.Sprintf("RFA Fig. 4 from a checkpoint — the heads' decays μ and their phase transitions, layer %d", layer),
		Caption: "Every head of the layer on shared axes, ordered by its decay μ (legends), as the paper's Fig. 4 orders curves by μ: the " +
			"transition of a head with decay μ happens around Δt ≈ 1/2μ; beyond it the bias saturates at the head's floor −log(β + c) " +
			"(thin dashed lines of the head's colour), while a μ = 0 (Brownian, thick dashed) head keeps losing precision as 1/(σ²Δt). " +
			"Regimes and the full parameter list: the checkpoint Fig. 3 and its table.",
		Options: priorOptions(pr, layer, ax, dir),
		Tables:  []report.Table{priorTable(pr)},
		Panels: []report.Panel{
			{Title: "Precision gates by decay μ", XLabel: lagLabel, YLabel: pLabel, XLog: ax.Log, X: lagRange(lags), Series: pser, Legend: report.LegendOutside},
			{Title: "Priors and their floors −log(β + c)", XLabel: lagLabel, YLabel: bLabel, XLog: ax.Log, X: lagRange(lags), Series: bser, Legend: report.LegendOutside},
		},
		PanelWidth: 6.4, PanelHeight: 4.4,
	}, nil
}

// maxDrawnPoints caps the points drawn per trajectory: longer histories
// (the authors log every optimizer step) are thinned by a constant stride,
// keeping the first and last points.
const maxDrawnPoints = 2000

// ThinIndices returns the indices of n points thinned by a constant stride
// to at most max points, always keeping the last (all of them when n ≤ max).
func ThinIndices(n, max int) []int {
	if n <= 0 {
		return nil
	}
	stride := 1
	if max > 1 && n > max {
		stride = (n - 1 + max - 2) / (max - 1) // ⌈(n−1)/(max−1)⌉
	}
	var out []int
	for i := 0; i < n; i += stride {
		out = append(out, i)
	}
	if out[len(out)-1] != n-1 {
		out = append(out, n-1)
	}
	return out
}

// LogAxisFits reports whether values (NaN ignored) are all positive and
// span at least a factor ratio, so that a logarithmic axis shows them
// better than a linear one.
func LogAxisFits(ratio float64, values ...[]float64) bool {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, vs := range values {
		for _, v := range vs {
			if math.IsNaN(v) {
				continue
			}
			if v <= 0 {
				return false
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	return hi > lo && hi/lo >= ratio
}

// historyPanel draws quantity q of every head over training, or reports
// false when no head has it. Brownian heads are left out of σ̃², α and β
// (undefined for μ = 0), as the paper's Figs. 8 and 10 leave them out.
func historyPanel(h *rfatab.ParamHistory, q rfatab.Quantity) (report.Panel, []int, bool) {
	if !h.Has(q) {
		return report.Panel{}, nil, false
	}
	idx := ThinIndices(h.Len(), maxDrawnPoints)
	x := make([]float64, len(idx))
	for i, k := range idx {
		x[i] = h.Steps[k]
	}
	derived := q == rfatab.SteadyState || q == rfatab.Alpha || q == rfatab.Beta
	var series []report.Series
	var all [][]float64
	var omitted []int
	for head := 0; head < h.Heads(); head++ {
		if derived && h.Brownian(head) {
			omitted = append(omitted, head)
			continue
		}
		full := h.Curve(q, head)
		y := make([]float64, len(idx))
		for i, k := range idx {
			y[i] = full[k]
		}
		all = append(all, y)
		col, dash := headStyle(head)
		width := 2.2
		if len(idx) > 200 {
			width = 1.2 // per-step histories: thin lines keep the noise band readable
		}
		series = append(series, report.Series{Name: fmt.Sprintf("head %d", head), Kind: report.Line, X: x, Y: y, Color: col, Dash: dash, Width: width})
		if len(idx) <= 30 {
			series = append(series, report.Series{Kind: report.Scatter, X: x, Y: y, Color: col, Radius: 3.2})
		}
	}
	if len(series) == 0 {
		return report.Panel{}, omitted, false
	}
	logY := q != rfatab.Alpha && LogAxisFits(30, all...)
	if q == rfatab.Alpha {
		series = append(series, report.Series{Name: "α = 0", Kind: report.Line,
			X: []float64{x[0], x[len(x)-1]}, Y: []float64{0, 0}, Color: report.Black, Dash: true, Width: 1.4})
	}
	ylabel := q.Symbol()
	if q == rfatab.Alpha {
		ylabel = "α  (> 0 integrative, < 0 diffusive)"
	}
	return report.Panel{Title: q.Title(), XLabel: h.XLabel, YLabel: ylabel, YLog: logY, Series: series, Legend: report.LegendOutside}, omitted, true
}

// historyTable gives every head's first and last value of each quantity.
func historyTable(h *rfatab.ParamHistory, qs []rfatab.Quantity) report.Table {
	tbl := report.Table{Caption: fmt.Sprintf("First (%s %g) and last (%s %g) value per head", h.XLabel, h.Steps[0], h.XLabel, h.Steps[h.Len()-1]),
		Header: []string{"head"}}
	var have []rfatab.Quantity
	for _, q := range qs {
		if h.Has(q) {
			have = append(have, q)
			tbl.Header = append(tbl.Header, q.Symbol()+" first", q.Symbol()+" last")
		}
	}
	for head := 0; head < h.Heads(); head++ {
		row := []string{fmt.Sprint(head)}
		for _, q := range have {
			c := h.Curve(q, head)
			row = append(row, g3(c[0]), g3(c[len(c)-1]))
		}
		tbl.Rows = append(tbl.Rows, row)
	}
	return tbl
}

// historyOptions describes a history's source for the option tables.
func historyOptions(h *rfatab.ParamHistory) []report.Option {
	layer := fmt.Sprint(h.Layer)
	if h.Layer < 0 {
		layer = "not stated by the history (the authors' history logs the last block)"
	}
	opts := []report.Option{
		{Name: "source", Value: h.Source, Source: "--series / --history"},
		{Name: "layer", Value: layer, Source: "--layer (default: the last, as the paper's Figs. 8–10)"},
		{Name: "points", Value: fmt.Sprintf("%d, %s %g … %g", h.Len(), h.XLabel, h.Steps[0], h.Steps[h.Len()-1]), Source: "the series"},
		{Name: "values", Value: "σ² = softplus(σ′), η² = softplus(η′) + ε, γ² = softplus(γ′) + ε, τ_s = softplus(τ′) + ε, ν/d = (d·softplus(ν′) + 2 + ε)/d, μ the fixed decay the pass uses",
			Source: "the authors' metadata (sigma_sq_v, eta_sq_v, gamma_sq_v, tau, nu_over_d, mu_v; notes 000 §A.8)"},
		{Name: "colours", Value: "one Okabe–Ito colour per head (then grey for head 7)", Source: "choice (colour-blind safe; the paper: one colour per head, legend at the right)"},
	}
	if n := h.Len(); n > maxDrawnPoints {
		opts = append(opts, report.Option{Name: "thinning", Value: fmt.Sprintf("every %d-th of %d points drawn (last kept)", ThinIndices(n, maxDrawnPoints)[1], n), Source: "choice (drawing size)"})
	}
	opts = append(opts, report.Option{Name: "y axes", Value: "logarithmic where every value is positive and they span ≥ 30×", Source: "choice"})
	return opts
}

// RFAHistoryFigures draws RFA Figs. 8 (γ², η², σ²/2μ and σ²), 9 (ν/d and
// τ_s) and 10 (α and β) of one layer over training, one line per head.
// Panels whose quantity the history lacks are left out, and so are figures
// with no panel.
func RFAHistoryFigures(h *rfatab.ParamHistory) ([]*report.Figure, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	specs := []struct {
		id, title, caption string
		qs                 []rfatab.Quantity
	}{
		{"fig8", "RFA Fig. 8 — measurement and process noise over training",
			"Per head, over training: the query (anchor) measurement noise variance γ², the key (historical) measurement noise variance η², " +
				"the steady-state process variance σ̃² = σ²/2μ (undefined, and omitted, for μ = 0 heads) and the process-noise intensity σ² itself. " +
				"The paper plots the last layer of M1 and M2 (App. F.2); lower-decay heads are expected to settle at lower η² and γ².",
			[]rfatab.Quantity{rfatab.Gamma2, rfatab.Eta2, rfatab.SteadyState, rfatab.Sigma2}},
		{"fig9", "RFA Fig. 9 — robustness and inverse temperature over training",
			"Per head, over training: the Student-t robustness ν/d (smaller is more robust: heavier tails, outlying keys down-weighted) and the " +
				"softmax inverse temperature τ (τ_s of Alg. 1, which multiplies the whole logit; the paper's Fig. 9 writes τ).",
			[]rfatab.Quantity{rfatab.NuOverD, rfatab.Tau}},
		{"fig10", "RFA Fig. 10 — integrative dynamics over training",
			"Per head, over training: the phase parameter α = η² − σ²/2μ (> 0 integrative: opening gate; < 0 diffusive: closing gate) and the " +
				"stationary variance β = γ² + σ²/2μ, whose −log is the bias floor. Both are undefined, and omitted, for μ = 0 heads, as in the paper.",
			[]rfatab.Quantity{rfatab.Alpha, rfatab.Beta}},
	}
	suffix := ""
	if h.Layer >= 0 {
		suffix = fmt.Sprintf("-L%d", h.Layer)
	}
	var out []*report.Figure
	for _, s := range specs {
		var panels []report.Panel
		var notes []string
		for _, q := range s.qs {
			pn, omitted, ok := historyPanel(h, q)
			if len(omitted) > 0 {
				notes = append(notes, fmt.Sprintf("%s: heads %v omitted (μ = 0, undefined).", q.Symbol(), omitted))
			}
			if !ok {
				if !h.Has(q) {
					notes = append(notes, fmt.Sprintf("%s: not in the history.", q.Symbol()))
				}
				continue
			}
			panels = append(panels, pn)
		}
		if len(panels) == 0 {
			continue
		}
		title := s.title
		if h.Layer >= 0 {
			title += fmt.Sprintf(", layer %d", h.Layer)
		}
		out = append(out, &report.Figure{
			ID: "rfa-ckpt-" + s.id + suffix, Title: title, Caption: s.caption,
			Options: historyOptions(h), Tables: []report.Table{historyTable(h, s.qs)}, Notes: notes,
			Panels: panels, PanelWidth: 6.2, PanelHeight: 4.2,
		})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("papers: the history has none of the Figs. 8–10 quantities")
	}
	return out, nil
}

// rfaMapFigure names the paper figure a checkpoint's attention maps
// correspond to: Fig. 13 for M1, Fig. 14 for SC-RFA (M2), Figs. 11–12 for
// the softmax baselines (RoPE, ALiBi).
func rfaMapFigure(rfa bool, ablation string) string {
	switch {
	case !rfa:
		return "Figs. 11–12 (baseline)"
	case ablation == "M1":
		return "Fig. 13"
	case strings.HasPrefix(ablation, "M2"):
		return "Fig. 14"
	}
	return "Figs. 13–14"
}

// linearClip is the quantile at which the colour scale of the linear Â map
// stops.
const linearClip = 0.99

// RFAAttentionFigures draws streamed attention maps as the paper's Figs.
// 11–14 show them: Â^0.25 on magma, one panel per head, query 0 at the top;
// then Â itself; then, when streamed, the decayed A^0.25 = (Â ⊙ E)^0.25.
// params (RFA only, may be nil) put each head's μ in its panel title.
func RFAAttentionFigures(maps *attngrid.Maps, params []rfatab.Head, figLabel, dir, tokens string) []*report.Figure {
	mu := map[int]float64{}
	for _, p := range params {
		mu[p.Head] = p.Mu
	}
	cols := min(len(maps.Heads), 4)
	if len(maps.Heads) == 4 {
		cols = 2
	}
	block := "none (one cell per token pair)"
	if g := maps.Hat[0]; g.Rows < g.Tq {
		block = fmt.Sprintf("%d×%d blocks of %.1f × %.1f tokens, pooled by %s (max keeps isolated sharp keys visible)", g.Rows, g.Cols,
			float64(g.Tq)/float64(g.Rows), float64(g.Tk)/float64(g.Cols), g.Pool)
	}
	build := func(grids []*attngrid.Grid, gamma float64, id, sym, what string) *report.Figure {
		f := attnmap.Figure(grids, maps.Heads, attnmap.Options{Layer: maps.Layer, Gamma: gamma, Pool: maps.Pool, MaxSize: maps.MaxSize})
		label := sym
		if gamma != 1 {
			label = fmt.Sprintf("%s^%g", sym, gamma)
		}
		clip := ""
		for i := range f.Panels {
			h := maps.Heads[i]
			if hm := f.Panels[i].Heatmap; gamma == 1 {
				// Without the contrast stretch the scale's maximum is Â[0, 0] = 1
				// and the rest of the map is black: clip at the 99th percentile.
				if q := PositiveQuantile(hm.Z, linearClip); q > 0 && q < hm.Scale.Map.Max() {
					hm.Scale.Map = report.Magma(0, q)
					clip = fmt.Sprintf(" The colour scale stops at each head's %gth percentile of the non-zero cells (brighter cells saturate), since Â[0, 0] = 1 would otherwise leave the map black.", 100*linearClip)
				}
			}
			f.Panels[i].Title = fmt.Sprintf("head %d", h)
			if m, ok := mu[h]; ok {
				f.Panels[i].Title = fmt.Sprintf("head %d (μ = %s)", h, g3(m))
			}
			f.Panels[i].XLabel, f.Panels[i].YLabel = "key position j", "query position i"
			f.Panels[i].Heatmap.Scale.Label = label
		}
		f.ID = fmt.Sprintf("rfa-ckpt-%s-L%d", id, maps.Layer)
		f.Title = fmt.Sprintf("RFA %s from a checkpoint — %s, layer %d, T = %d", figLabel, label, maps.Layer, maps.T)
		f.Caption = fmt.Sprintf("%s of every head of layer %d for one sequence of T = %d tokens (rows: queries i, columns: keys j; causal, so the "+
			"upper triangle is 0), drawn as %s on the magma colormap from 0 to each head's maximum, query 0 at the top. The rows were streamed "+
			"from the forward pass into the downsampling grid (no T×T matrix). Downsampling: %s; the exponent is applied after pooling.",
			what, maps.Layer, maps.T, label, block) + clip
		f.Options = []report.Option{
			{Name: "checkpoint", Value: dir, Source: "--model"},
			{Name: "layer", Value: fmt.Sprint(maps.Layer), Source: "--layer (default: the last; the paper: the last layer)"},
			{Name: "heads", Value: fmt.Sprint(maps.Heads), Source: "--heads (default: all)"},
			{Name: "tokens", Value: tokens, Source: "--attn-tokens, --ids, --text (the paper: one random validation sequence of L = 4096)"},
			{Name: "contrast", Value: label, Source: "RFA App. F.3 plots Â^0.25; γ = 1 is the weights themselves"},
			{Name: "downsampling", Value: block, Source: fmt.Sprintf("--max-size %d, --pool %s", maps.MaxSize, maps.Pool)},
			{Name: "colour scale", Value: "magma, 0 to each head's maximum", Source: "RFA App. F.3 (imshow, magma, per panel)"},
		}
		if clip != "" {
			f.Options[len(f.Options)-1] = report.Option{Name: "colour scale", Value: fmt.Sprintf("magma, 0 to each head's %gth percentile of the non-zero cells", 100*linearClip), Source: "choice (the linear map only)"}
		}
		f.Columns = cols
		return f
	}
	out := []*report.Figure{
		build(maps.Hat, 0.25, "attn", "Â", "The unattenuated attention Â = softmax_j(τ_s L) (hook_pattern; rows sum to 1; what the paper's attention maps show)"),
		build(maps.Hat, 1, "attn-linear", "Â", "The unattenuated attention Â (hook_pattern) without contrast stretch"),
	}
	if maps.Decayed != nil {
		out = append(out, build(maps.Decayed, 0.25, "attn-decayed", "A",
			"The decayed attention A = Â ⊙ E, E = e^{−μ(i−j+Δt₊)} (hook_pattern_decayed; the weights the values are summed with, rows sum to ≤ 1)"))
	}
	return out
}
