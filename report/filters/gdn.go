package filters

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// tokenBins is the largest number of position bins of a per-token curve.
const tokenBins = 256

// GDN returns the report of a probe gdn run: per-head summaries (heat maps
// over (layer, value head)), the filter quantities against token position,
// and the learned gain β against BFT's K^W and against the forgetting e^g.
// Every figure is drawn at the run's longest length, over all its samples.
func GDN(man *results.GDNManifest, rows []results.GDNRow, heads []results.GDNHeadRow) (*report.Report, error) {
	if len(heads) == 0 || len(rows) == 0 {
		return nil, fmt.Errorf("gdn report: the gdn and gdn_heads tables are empty (%d and %d rows)", len(rows), len(heads))
	}
	T := longest(man.Options.Lengths)
	// Falcon-H1's softmax heads (mixer attention) are drawn beside the
	// SSM heads in their own figure, not mixed into the recurrent ones'
	rows = slices.DeleteFunc(slices.Clone(rows), func(r results.GDNRow) bool { return r.Mixer == results.MixerAttention })
	var attnHeads []results.GDNHeadRow
	heads = slices.DeleteFunc(slices.Clone(heads), func(h results.GDNHeadRow) bool {
		if h.Mixer == results.MixerAttention {
			attnHeads = append(attnHeads, h)
			return true
		}
		return false
	})
	nh := 0
	for _, h := range heads {
		nh = max(nh, h.Head+1)
	}
	samples := 0
	for _, c := range man.Chunks {
		if c.T == T {
			samples++
		}
	}
	where := fmt.Sprintf("T = %d, %d sample(s)", T, samples)
	kind := mixerNames(heads)
	figs := []*report.Figure{gdnHeads(kind, man.Layers, nh, heads, T, where)}
	if f := gdnTokens(kind, man.Layers, rows, T, where); f != nil {
		figs = append(figs, f)
	}
	if f := gdnGain(man.Layers, heads, T, where); f != nil {
		figs = append(figs, f)
	}
	if f := gdnSideBySide(man.Layers, nh, heads, attnHeads, T, where); f != nil {
		figs = append(figs, f)
	}
	return &report.Report{
		Title:    kind + " as a filter — gain, forgetting, innovation and the effective-attention rows",
		Subtitle: fmt.Sprintf("Model: %s (%s); %s layers %s; %d value heads each.", man.Model.Dir, man.Model.Arch, kind, fmtInts(man.Layers), nh),
		Intro: []string{"Per (layer, value head, token) of every " + kind + " layer, as `probe gdn` wrote them (definitions: docs/diagnostics.md, " +
			"\"Gated DeltaNet as a filter\"). β_t is the learned gain of the delta-rule update, e^{g_t} the forgetting of the memory, " +
			"1/(1 − e^{g_t}) its horizon in tokens; n_eff^W, the first-token share and K^W are computed on the exact effective-attention row W[t, ·]."},
		Manifest: manifestOptions(results.GDNManifestName, man.Tool, man.Created, man.Model, man.Source, man.Chunks, man.Options),
		Figures:  figs,
	}, nil
}

// mixerNames names the recurrent mixers of heads as a reader knows them
// ("Gated DeltaNet", "Mamba-2", "RWKV-7", joined with " and "), in the
// order they first appear.
func mixerNames(heads []results.GDNHeadRow) string {
	names := map[string]string{results.MixerGatedDeltaNet: "Gated DeltaNet", results.MixerMamba2: "Mamba-2", results.MixerRWKV7: "RWKV-7"}
	var seen []string
	for _, h := range heads {
		n, ok := names[h.Mixer]
		if !ok {
			n = h.Mixer
		}
		if !slices.Contains(seen, n) {
			seen = append(seen, n)
		}
	}
	if len(seen) == 0 {
		return "Gated DeltaNet"
	}
	return strings.Join(seen, " and ")
}

// gdnQuantity is one column of the gdn tables drawn by the figures.
type gdnQuantity struct {
	title, label string
	head         func(results.GDNHeadRow) float64
	token        func(results.GDNRow) float64
	lo, hi       float64 // fixed colour range where lo < hi
	ylog         bool
}

var gdnQuantities = []gdnQuantity{
	{"gain β", "β", func(r results.GDNHeadRow) float64 { return r.Beta }, func(r results.GDNRow) float64 { return r.Beta }, 0, 1, false},
	{"forgetting e^g", "e^g", func(r results.GDNHeadRow) float64 { return r.Decay }, func(r results.GDNRow) float64 { return r.Decay }, 0, 1, false},
	{"horizon (median, log10 tokens)", "log10 1/(1−e^g)", func(r results.GDNHeadRow) float64 { return math.Log10(r.HorizonMedian) }, nil, 0, 0, false},
	{"innovation ‖r_t‖", "‖r‖", func(r results.GDNHeadRow) float64 { return r.Innovation }, func(r results.GDNRow) float64 { return r.Innovation }, 0, 0, false},
	{"state norm ‖S_t‖_F", "‖S‖_F", func(r results.GDNHeadRow) float64 { return r.StateNorm }, func(r results.GDNRow) float64 { return r.StateNorm }, 0, 0, false},
	{"n_eff^W", "n_eff^W", func(r results.GDNHeadRow) float64 { return r.NEffW }, func(r results.GDNRow) float64 { return r.NEffW }, 0, 0, true},
	{"first-token share", "|W_0|/Σ|W|", func(r results.GDNHeadRow) float64 { return r.FirstShare }, func(r results.GDNRow) float64 { return r.FirstShare }, 0, 0, false},
	{"K^W (BFT gain of the W row)", "K^W", func(r results.GDNHeadRow) float64 { return r.KW }, func(r results.GDNRow) float64 { return r.KW }, 0, 1, false},
}

// gdnHeads is one heat map per quantity: each (layer, value head) cell
// the mean over samples of the head's mean over tokens.
func gdnHeads(kind string, layers []int, nh int, heads []results.GDNHeadRow, T int, where string) *report.Figure {
	var panels []report.Panel
	missing := 0
	for _, q := range gdnQuantities {
		g := newGrid(layers, nh)
		for _, h := range heads {
			if h.T == T {
				g.add(h.Layer, h.Head, q.head(h), 1)
			}
		}
		p, m, ok := heatPanel(q.title, q.label, g.layers, nh, g.means(), q.lo, q.hi)
		if ok {
			panels = append(panels, p)
			missing += m
		}
	}
	f := &report.Figure{
		ID:    "gdn-heads",
		Title: kind + " filter quantities per (layer, value head)",
		Caption: "Each cell is one value head of one " + kind + " layer (rows: model layer index; columns: value head): the mean over the " +
			"head's tokens (finite values; the horizon is the median over tokens, drawn as log10 of tokens) of each quantity, averaged over the " +
			"samples (" + where + "). β, e^g and K^W are drawn on [0, 1]; the other maps on their own range. Quantities the run did not compute " +
			"(without --w-rows, or with --no-dispersion) are not drawn.",
		Panels:     panels,
		Columns:    2,
		PanelWidth: 5.4, PanelHeight: max(3.4, 1.6+0.28*float64(len(layers))),
	}
	if missing > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%d cells have no finite value and are drawn at their map's minimum.", missing))
	}
	return f
}

// gdnTokens draws each quantity against token position: one line per
// layer, the mean over value heads and samples within position bins.
func gdnTokens(kind string, layers []int, rows []results.GDNRow, T int, where string) *report.Figure {
	var panels []report.Panel
	width := 0.0
	for _, q := range gdnQuantities {
		if q.token == nil {
			continue
		}
		var ss []report.Series
		for li, l := range layers {
			b := newBins(T, tokenBins)
			width = b.width
			for _, r := range rows {
				if r.T == T && r.Layer == l {
					b.add(r.Token, q.token(r))
				}
			}
			x, y := b.xy()
			if q.ylog {
				x, y = positive(x, y)
			}
			if len(x) == 0 {
				continue
			}
			ss = append(ss, report.Series{Name: fmt.Sprintf("layer %d", l), Kind: report.Line, X: x, Y: y, Color: report.Category(li), Width: 1.6})
		}
		if len(ss) == 0 {
			continue
		}
		if q.ylog { // n_eff^W ≤ t + 1: its mean over a bin is at most the bin centre + 1
			b := newBins(T, tokenBins)
			bx, by := make([]float64, len(b.sum)), make([]float64, len(b.sum))
			for i := range bx {
				bx[i] = b.centre(i)
				by[i] = bx[i] + 1
			}
			ss = append(ss, report.Series{Name: "bound t + 1", Kind: report.Line, X: bx, Y: by, Color: report.Grey, Dash: true, Width: 1.2})
		}
		p := report.Panel{Title: q.title, XLabel: "token position t", YLabel: q.label, YLog: q.ylog, Series: ss, Legend: report.LegendNone}
		if len(panels) == 0 {
			p.Legend = report.LegendOutside
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil
	}
	return &report.Figure{
		ID:    "gdn-tokens",
		Title: kind + " filter quantities vs token position",
		Caption: fmt.Sprintf("Per "+kind+" layer (one line each, legend), the mean over its value heads and the samples (%s) of each "+
			"quantity, within bins of %.4g consecutive positions, against the position t. On the n_eff^W panel (log scale) the dashed grey "+
			"line is the largest possible value, t + 1 (a row spread evenly over every past token), at the bin centres.", where, width),
		Panels:     panels,
		Columns:    2,
		PanelWidth: 5.6, PanelHeight: 3.6,
	}
}

// positive keeps the points with y > 0 (for a log axis).
func positive(x, y []float64) (xs, ys []float64) {
	for i := range x {
		if y[i] > 0 {
			xs, ys = append(xs, x[i]), append(ys, y[i])
		}
	}
	return xs, ys
}

// gdnGain compares per head the learned gain β with the BFT gain K^W of the
// head's effective-attention rows, and with the forgetting e^g.
func gdnGain(layers []int, heads []results.GDNHeadRow, T int, where string) *report.Figure {
	var beta, kw, decay, layer []float64
	for _, h := range heads {
		if h.T != T || !finite(h.Beta) {
			continue
		}
		beta, kw, decay, layer = append(beta, h.Beta), append(kw, h.KW), append(decay, h.Decay), append(layer, float64(h.Layer))
	}
	if len(beta) == 0 {
		return nil
	}
	lo, hi := float64(slices.Min(layers)), float64(slices.Max(layers))
	if hi == lo {
		hi = lo + 1
	}
	colors := &report.ColorScale{Label: "layer ℓ", Map: report.Viridis(lo, hi), Integer: true}
	scatter := func(x []float64) []report.Series {
		var xs, ys, vs []float64
		for i := range x {
			if finite(x[i]) {
				xs, ys, vs = append(xs, x[i]), append(ys, beta[i]), append(vs, layer[i])
			}
		}
		if len(xs) == 0 {
			return nil
		}
		return []report.Series{
			{Name: "y = x", Kind: report.Line, X: []float64{0, 1}, Y: []float64{0, 1}, Color: report.Black, Dash: true, Width: 1.2},
			{Name: "(layer, head, sample)", Kind: report.Scatter, X: xs, Y: ys, Values: vs, Radius: 3.4, Alpha: 0.9},
		}
	}
	var panels []report.Panel
	if ss := scatter(kw); ss != nil {
		panels = append(panels, report.Panel{Title: "learned gain β vs BFT gain K^W", XLabel: "K^W (mean over tokens)", YLabel: "β (mean over tokens)",
			X: report.Range{Min: 0, Max: 1}, Y: report.Range{Min: 0, Max: 1}, Series: ss, Colors: colors, Legend: report.LegendNone})
	}
	if ss := scatter(decay); ss != nil {
		panels = append(panels, report.Panel{Title: "gain β vs forgetting e^g", XLabel: "e^g (mean over tokens)", YLabel: "β (mean over tokens)",
			X: report.Range{Min: 0, Max: 1}, Y: report.Range{Min: 0, Max: 1}, Series: ss, Colors: colors, Legend: report.LegendNone})
	}
	return &report.Figure{
		ID:    "gdn-gain",
		Title: "Gain of the delta rule against BFT's K^W and against forgetting",
		Caption: "One point per (layer, value head, sample) (" + where + "), coloured by layer (viridis): the head's mean β over tokens against " +
			"its mean K^W = λobs^W/(λ + λobs^W) (BFT Eq. 6 on the weights of its W rows), and against its mean forgetting e^g. The dashed black line " +
			"is y = x. K^W rests on an i.i.d.-average reading of the read-out that a delta-rule memory does not satisfy (docs/diagnostics.md); " +
			"the comparison asks whether the learned gain tracks the precision of what the head reads.",
		Panels:     panels,
		PanelWidth: 5.2, PanelHeight: 4.4,
	}
}

// gdnSideBySide draws, for a model whose SSM runs beside softmax attention
// in every layer (Falcon-H1, probe gdn --w-rows), the attention heads'
// n_eff and the SSM heads' n_eff^W of the same layers as two heat maps on
// one colour range (log10); nil without attention rows.
func gdnSideBySide(layers []int, nh int, ssm, attn []results.GDNHeadRow, T int, where string) *report.Figure {
	na := 0
	for _, h := range attn {
		na = max(na, h.Head+1)
	}
	if na == 0 {
		return nil
	}
	ga, gs := newGrid(layers, na), newGrid(layers, nh)
	for _, h := range attn {
		if h.T == T {
			ga.add(h.Layer, h.Head, math.Log10(h.NEffW), 1)
		}
	}
	for _, h := range ssm {
		if h.T == T {
			gs.add(h.Layer, h.Head, math.Log10(h.NEffW), 1)
		}
	}
	za, zs := ga.means(), gs.means()
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range append(slices.Clone(za), zs...) {
		if finite(v) {
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if !(lo < hi) {
		lo, hi = 0, 0
	}
	var panels []report.Panel
	for _, p := range []struct {
		title string
		heads int
		z     []float64
	}{{"softmax heads: n_eff", na, za}, {"SSM heads: n_eff^W", nh, zs}} {
		if pan, _, ok := heatPanel(p.title, "log10 n_eff", ga.layers, p.heads, p.z, lo, hi); ok {
			panels = append(panels, pan)
		}
	}
	return &report.Figure{
		ID:    "gdn-side-by-side",
		Title: "Attention and SSM heads of the same layers: effective number of tokens",
		Caption: "Each row is one layer, whose softmax attention (\"softmax heads\": Kish's n_eff of each softmax row) and Mamba-2 (\"SSM " +
			"heads\": n_eff^W of its exact effective-attention row) read the same normalized input; each cell the mean over the head's tokens, averaged over the " +
			"samples (" + where + "), on one log10 colour range.",
		Panels:     panels,
		Columns:    2,
		PanelWidth: 5.4, PanelHeight: max(3.4, 1.6+0.28*float64(len(layers))),
	}
}
