package sweep

import (
	"fmt"
	"math"
	"sort"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// Std conventions of the Fig. 2 bands (the paper's is ambiguous, notes
// 003 §B.5): StdUnits is the std of the (sample, layer) unit means, with
// their mean; StdPooled the std over pooled (sample, layer, head, query)
// elements, with the pooled mean.
const (
	StdUnits  = "units"
	StdPooled = "pooled"
)

// FromAnalysis fills an Input from a sweep folder's manifest and its
// aggregated results (as analysis.LoadResults returns them). std picks the Fig. 2 band
// convention (StdUnits or StdPooled). The figures show the first layer
// group (the global layers when the model also has sliding-window layers
// aggregated apart; the notes say where the other group's rows are).
func FromAnalysis(man *results.Manifest, res *results.Results, std string) (*Input, error) {
	if std != StdUnits && std != StdPooled {
		return nil, fmt.Errorf("sweep: --std %q: want %s or %s", std, StdUnits, StdPooled)
	}
	group := results.GroupSummary{Layers: results.LayersAll, LayersUsed: res.Summary.LayersUsed, Fig4: res.Summary.Fig4}
	if len(res.Summary.Groups) > 0 {
		group = res.Summary.Groups[0]
	}
	rows := map[string]results.Fig2Row{}
	key := func(T int64, m string) string { return fmt.Sprint(T, "/", m) }
	for _, r := range res.Fig2 {
		if r.Layers == group.Layers {
			rows[key(r.T, r.Metric)] = r
		}
	}
	stat := func(T int, m string) Stat {
		r, ok := rows[key(int64(T), m)]
		if !ok {
			return Stat{math.NaN(), math.NaN()}
		}
		if std == StdUnits && !math.IsNaN(r.MeanUnits) {
			return Stat{r.MeanUnits, r.StdUnits}
		}
		return Stat{r.Mean, r.StdPooled}
	}
	paper := func(T int, m string) float64 {
		if r, ok := rows[key(int64(T), m)]; ok {
			return r.Paper
		}
		return math.NaN()
	}
	ratio := "lambda_obs_ratio/" + man.Analysis.LambdaRatio
	if man.Analysis.LambdaRatio == "" {
		ratio = "lambda_obs_ratio/" + results.RatioOfMeans
	}
	in := &Input{
		Model:     fmt.Sprintf("%s (%s, %d layers × %d heads, d_head %d)", man.Model.Dir, man.Model.Arch, man.Model.Layers, man.Model.Heads, man.Model.DHead),
		LambdaFit: float64(res.Summary.LambdaFit),
		Spearman:  float64(group.Fig4.Spearman),
		CI:        [2]float64{math.NaN(), math.NaN()},
		Notes:     append(append([]string{}, res.Summary.Notes...), man.Flags...),
		Gated:     group.Fig4.Gate != nil,
	}
	for _, g := range res.Summary.Groups[min(1, len(res.Summary.Groups)):] {
		in.Notes = append(in.Notes, fmt.Sprintf("The figures show the %s layers; the %s layers' Figs. 2–4 are the rows with layers = %s of fig2, fig3 and fig4 (Fig. 4: r = %.3f over %d cells, %d BOS queries left out).",
			group.Layers, g.Layers, g.Layers, float64(g.Fig4.R), g.Fig4.Cells, g.Fig4.BOSLeftOut))
	}
	for _, T := range man.Sweep.Lengths {
		in.Lengths = append(in.Lengths, Length{T: T,
			NEff: stat(T, results.MetricNEff), Gate: stat(T, results.MetricGate), LambdaRatio: stat(T, ratio),
			PaperNEff: paper(T, results.MetricNEff), PaperGate: paper(T, results.MetricGate), PaperLRRatio: paper(T, ratio)})
	}
	for _, r := range res.Fig3 {
		if r.Layers != group.Layers {
			continue
		}
		in.Fig3 = append(in.Fig3, Fig3Point{T: int(r.T), KMeas: r.KMeas, KOpt: r.KOpt, RelErr: r.RelErr, PaperRel: r.PaperRelErr})
	}
	for _, c := range res.Fig4 {
		if c.Layers == group.Layers {
			in.Cells = append(in.Cells, Cell{Layer: int(c.Layer), Head: int(c.Head), K: c.K, BOS: c.BOS, Gate: c.Gate})
		}
	}
	if ci := group.Fig4.CI; ci.Resamples > 0 {
		in.CI = [2]float64{float64(ci.Lo), float64(ci.Hi)}
	}
	p := results.Paper
	in.Paper = Paper{Cells: p.Fig4Cells, R: p.Fig4R, P: p.Fig4P, SinkBOS: p.BOSSinkMass, SinkK: p.BOSSinkK,
		SinkLayers: p.SinkLayers, LateK: p.LateK, MaxBOS: p.MaxBOS, Model: p.Model}
	sw, ag := man.Sweep, man.Analysis
	stdText := map[string]string{StdUnits: "the std of the (sample, layer) unit means (--std units)", StdPooled: "the std over pooled (sample, layer, head, query) elements (--std pooled)"}
	in.Fig2Std = stdText[std]
	in.Fig2Ratio = map[string]string{
		results.RatioOfMeans: "the ratio of pooled means λ̄obs(T)/λ̄obs(T_min), band scaled by λ̄obs(T_min)",
		results.MeanOfRatios: "the mean over last-layer (layer, head) cells of the cell ratios",
		results.RatioFromK:   "λobs recovered from the mean gain, λK̄/(1 − K̄), as a ratio (no band)",
	}[ag.LambdaRatio]
	if in.Fig2Ratio == "" {
		in.Fig2Ratio = "the ratio of pooled means"
	}
	in.Fig2Pool = fmt.Sprintf("%d samples × layers %s × all heads × the last %g of the queries", sw.Samples, joinInts(group.LayersUsed), sw.LastFrac)
	in.Fig4Pool = fmt.Sprintf("the last %g of the queries; BOS mass over the last %g; lengths %s; weighting %s", sw.LastFrac, sw.BOSFrac,
		joinInts(group.Fig4.Lengths), ag.Fig4Pool)
	if group.Fig4.BOSLeftOut > 0 {
		in.Fig4Pool += fmt.Sprintf("; %d BOS queries without position 0 in their sliding window left out", group.Fig4.BOSLeftOut)
	}
	add := func(name, value, source string) {
		in.Manifest = append(in.Manifest, report.Option{Name: name, Value: value, Source: source})
	}
	add("tool", fmt.Sprintf("%s %s %s (%s)", man.Tool.Name, man.Tool.Version, man.Tool.Revision, man.Tool.Go), "manifest.json")
	add("created", man.Created, "manifest.json")
	add("model", in.Model, "manifest.json")
	add("weights", fmt.Sprintf("stored %v, computed %s, gate %s, digest %.16s…", man.Model.DTypes, man.Model.Compute, man.Model.Gate, man.Model.Digest), "manifest.json")
	add("source", fmt.Sprintf("%s, %d tokens, digest %.16s…", man.Source.Kind, man.Source.Tokens, man.Source.Digest), "manifest.json")
	add("lengths", fmt.Sprintf("%v (k = %d)", sw.Lengths, sw.KUnit), "--lengths")
	add("samples per length", fmt.Sprint(sw.Samples), "--samples (paper: 5)")
	add("chunks", fmt.Sprintf("disjoint %s, placement %s, seed %d, offset %d", sw.Disjoint, sw.Placement, sw.Seed, sw.Offset), "sweep options")
	add("BOS token", fmt.Sprint(sw.BOSToken), "−1: none prepended (notes 003 F.1.3)")
	add("windows", fmt.Sprintf("last %g of queries (Figs. 2–3, K of Fig. 4); BOS mass over the last %g", sw.LastFrac, sw.BOSFrac), "App. I")
	sigma := fmt.Sprintf("%g", sw.Probe.Sigma02)
	if sw.Probe.Sigma02 == 0 { // a model whose layers differ in head width
		sigma = "1/d_head of each layer"
	}
	add("λobs", fmt.Sprintf("form %s, σ0² = %s, ν = %g, λ = %g, cap %g, moments %s", sw.Probe.Form, sigma, sw.Probe.Nu,
		sw.Probe.LambdaPrior, sw.Probe.LambdaMax, sw.Probe.Moments), "App. I, Eq. 6")
	add("aggregation", fmt.Sprintf("last %d layers (used: %s), ddof %d, Fig. 2(c) %s, Fig. 4 pool %s, local layers %s (shown: %s)", ag.LastLayers,
		joinInts(group.LayersUsed), ag.DDOF, ag.LambdaRatio, ag.Fig4Pool, res.Summary.Agg.LocalLayers, group.Layers), "analysis options")
	add("Fig. 2 std", std, "report --std")
	var keys []string
	for k := range man.Conventions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		add("convention: "+k, man.Conventions[k], "manifest.json")
	}
	return in, nil
}
