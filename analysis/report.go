package analysis

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/filterlens/probe/analysis/results"
)

// LoadResults reads a finished sweep folder (its manifest.json and pass
// files) and aggregates it again, with agg overriding the manifest's
// aggregation options when non-nil. Nothing is written.
func LoadResults(dir string, agg *results.AggOptions) (*results.Manifest, *results.Results, error) {
	man, res, _, err := loadResults(dir, agg, false)
	return man, res, err
}

// LoadPartialResults is LoadResults that also reads an unfinished sweep
// (interrupted, failed, or still running). Passes run in (T, sample)
// order, so it aggregates the lengths whose every sample has a complete
// pass file or, when no length is complete yet, the first length's
// samples 0..j−1 that are; it returns the chunks left out, in manifest
// order. The results then describe that subset (Summary.Lengths and
// Summary.Samples say which).
func LoadPartialResults(dir string, agg *results.AggOptions) (*results.Manifest, *results.Results, []results.Chunk, error) {
	return loadResults(dir, agg, true)
}

func loadResults(dir string, agg *results.AggOptions, partial bool) (*results.Manifest, *results.Results, []results.Chunk, error) {
	path := filepath.Join(dir, "manifest.json")
	man, err := ReadManifest(path)
	if errors.Is(err, os.ErrNotExist) {
		if shards, _ := filepath.Glob(filepath.Join(dir, "manifest-shard-*.json")); len(shards) > 0 {
			return nil, nil, nil, fmt.Errorf("%s holds shard results only: combine them with probe merge first", dir)
		}
		return nil, nil, nil, fmt.Errorf("%s: no manifest.json (not a probe sweep folder)", dir)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if !man.Complete && !partial {
		return nil, nil, nil, fmt.Errorf("%s: the sweep did not finish (%s); run it again to complete it", path, man.Error)
	}
	if agg != nil {
		man.Analysis = *agg
	}
	sw, chunks, missing := man.Sweep, man.Chunks, []results.Chunk(nil)
	if !man.Complete {
		if sw, chunks, missing, err = finishedSubset(dir, man); err != nil {
			return nil, nil, nil, err
		}
	}
	a, err := newAggregator(shapeOf(man.Model), sw, man.Sweep.Probe, man.Analysis)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, c := range chunks {
		rows, err := readBuckets(dir, man, c)
		if err != nil {
			return nil, nil, nil, err
		}
		if err := a.Add(rows); err != nil {
			return nil, nil, nil, err
		}
	}
	res, err := a.Results()
	if err != nil {
		return nil, nil, nil, err
	}
	man.LayersUsed = res.Summary.LayersUsed
	return man, res, missing, nil
}

// finishedSubset returns the part of an unfinished sweep that
// LoadPartialResults aggregates: its options restricted to that subset,
// its chunks, and the chunks left out.
func finishedSubset(dir string, man *results.Manifest) (results.SweepOptions, []results.Chunk, []results.Chunk, error) {
	done := map[[2]int]bool{}
	for _, c := range man.Chunks {
		if _, err := readStreamPass(streamPassPath(dir, "buckets", c), "buckets"); err == nil {
			done[[2]int{c.T, c.Sample}] = true
		}
	}
	sw := man.Sweep
	sw.Lengths = nil
	for _, T := range man.Sweep.Lengths {
		all := true
		for s := 0; s < sw.Samples; s++ {
			all = all && done[[2]int{T, s}]
		}
		if all {
			sw.Lengths = append(sw.Lengths, T)
		}
	}
	if len(sw.Lengths) == 0 {
		T := man.Sweep.Lengths[0]
		n := 0
		for n < sw.Samples && done[[2]int{T, n}] {
			n++
		}
		if n == 0 {
			return sw, nil, nil, fmt.Errorf("%s: the sweep did not finish and no pass of its first length (T=%d, sample 0) is finished in %s yet",
				dir, T, filepath.Join(dir, "passes"))
		}
		sw.Lengths, sw.Samples = []int{T}, n
	}
	var use, missing []results.Chunk
	for _, c := range man.Chunks {
		if slices.Contains(sw.Lengths, c.T) && c.Sample < sw.Samples {
			use = append(use, c)
		} else {
			missing = append(missing, c)
		}
	}
	return sw, use, missing, nil
}

// num writes x with prec decimals, or its reportNonFinite spelling.
func num(x float64, prec int) string {
	if s, ok := reportNonFinite.spell(x); ok {
		return s
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func pct(x float64) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.3f%%", 100*x)
}

func layerRange(ls []int) string {
	if len(ls) == 0 {
		return "none"
	}
	if len(ls) == 1 {
		return fmt.Sprint(ls[0])
	}
	return fmt.Sprintf("%d–%d", ls[0], ls[len(ls)-1])
}

func series(xs []float64, prec int) string {
	var s []string
	for _, x := range xs {
		s = append(s, num(x, prec))
	}
	return strings.Join(s, " → ")
}

// fig2Lookup indexes the Fig2Rows of layer group layers by (T, metric).
func fig2Lookup(rows []results.Fig2Row, layers string) func(T int, m string) results.Fig2Row {
	idx := map[string]results.Fig2Row{}
	for _, r := range rows {
		if r.Layers == layers {
			idx[fmt.Sprint(r.T, "/", r.Metric)] = r
		}
	}
	return func(T int, m string) results.Fig2Row {
		if r, ok := idx[fmt.Sprint(T, "/", m)]; ok {
			return r
		}
		nan := math.NaN()
		return results.Fig2Row{Mean: nan, StdPooled: nan, StdUnits: nan, MeanUnits: nan, Paper: nan}
	}
}

// WriteReport prints the Fig. 2, 3 and 4 numbers of a sweep as text tables
// beside the paper's published values (Paper).
func WriteReport(w io.Writer, man *results.Manifest, res *results.Results) error {
	sw, s := man.Sweep, res.Summary
	unit := sw.KUnit
	L := func(T int) string { return formatLength(T, unit) }
	var lengths []string
	for _, T := range sw.Lengths {
		lengths = append(lengths, L(T))
	}
	bos := "none"
	if sw.BOSToken >= 0 {
		bos = fmt.Sprintf("token %d prepended (counts in T)", sw.BOSToken)
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("Sweep of %s (%s, %d layers × %d heads, d_head %d, gate %s)\n", man.Model.Dir, man.Model.Arch, man.Model.Layers,
		man.Model.Heads, man.Model.DHead, man.Model.Gate)
	p("  text: %s (%d tokens); T = %s (k = %d); %d samples per length; chunks disjoint %s, %s; BOS: %s\n",
		man.Source.File.Path, man.Source.Tokens, strings.Join(lengths, ", "), unit, sw.Samples, sw.Disjoint, sw.Placement, bos)
	p("  λobs: %s, ν = %g, σ0² = %g, K at λ = %g, reduction (i) (S̄ = mean_i S_i)\n", sw.Probe.Form, sw.Probe.Nu,
		sw.Probe.Sigma02, sw.Probe.LambdaPrior)
	p("  paper: %s; lengths 1k…10k, 5 samples\n", results.Paper.Model)
	for _, g := range s.Groups {
		writeGroup(w, man, res, g, len(s.Groups) > 1)
	}
	if s.NonFinite > 0 || len(man.Flags) > 0 {
		p("\nWARNING: %d non-finite metric values were left out of every statistic:\n", s.NonFinite)
		for _, fl := range man.Flags {
			p("  %s\n", fl)
		}
	}
	if len(s.Notes) > 0 {
		p("\nNotes:\n")
		for _, n := range s.Notes {
			p("  %s\n", n)
		}
	}
	return nil
}

// writeGroup prints Figs. 2–4 of one layer group (headed by its name
// when the sweep has several).
func writeGroup(w io.Writer, man *results.Manifest, res *results.Results, g results.GroupSummary, named bool) {
	sw, agg, s := man.Sweep, man.Analysis, res.Summary
	unit := sw.KUnit
	L := func(T int) string { return formatLength(T, unit) }
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("\n")
	if named {
		p("== %s layers ==\n", g.Layers)
	}
	p("  Figs. 2–3 pool: last %g of queries × layers %s (last %d) × all heads × samples; std ddof = %d\n\n",
		sw.LastFrac, layerRange(g.LayersUsed), len(g.LayersUsed), agg.DDOF)

	get := fig2Lookup(res.Fig2, g.Layers)
	p("Fig. 2 — mean ± std: pooled (sample, layer, head, query) elements | (sample, layer) means\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "T\tn_eff\t± pooled\t± units\tpaper\t\tgate\t± pooled\t± units\tpaper\t\tλobs ratio\tpaper\tmean of ratios\tfrom K\t")
	for _, T := range sw.Lengths {
		n, g := get(T, results.MetricNEff), get(T, results.MetricGate)
		rm, mr, fk := get(T, "lambda_obs_ratio/"+results.RatioOfMeans), get(T, "lambda_obs_ratio/"+results.MeanOfRatios), get(T, "lambda_obs_ratio/"+results.RatioFromK)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\t%s\t%s\t%s\t%s\t\t%s\t%s\t%s\t%s\t\n", L(T),
			num(n.Mean, 2), num(n.StdPooled, 2), num(n.StdUnits, 2), num(paperValue(results.Paper.NEff, T, unit), 1),
			num(g.Mean, 3), num(g.StdPooled, 3), num(g.StdUnits, 3), num(paperValue(results.Paper.Gate, T, unit), 3),
			num(rm.Mean, 3), num(paperValue(results.Paper.LambdaRatio, T, unit), 2), num(mr.Mean, 3), num(fk.Mean, 3))
	}
	tw.Flush()
	if len(sw.Lengths) > 1 {
		first, last := sw.Lengths[0], sw.Lengths[len(sw.Lengths)-1]
		n0, n1 := get(first, results.MetricNEff).Mean, get(last, results.MetricNEff).Mean
		g0, g1 := get(first, results.MetricGate).Mean, get(last, results.MetricGate).Mean
		p("  n_eff ×%s from %s to %s (paper ×2.18); gate drift %s (paper +0.027, within-length std %g); λobs ratio ×%s (paper ×1.28)\n",
			num(n1/n0, 2), L(first), L(last), num(g1-g0, 3), results.Paper.GateSpread,
			num(get(last, "lambda_obs_ratio/"+results.RatioOfMeans).Mean, 2))
	}
	p("  paper at T = 1k…10k: n_eff %s; gate %s; λobs ratio %s\n", series(results.Paper.NEff, 1), series(results.Paper.Gate, 3), series(results.Paper.LambdaRatio, 2))
	p("  (the first λobs-ratio column is the ratio of means; also stored: the mean over (layer, head) cells of their ratios, and λ recovered from mean K as λ·K/(1−K))\n\n")

	var fig3 []results.Fig3Row
	for _, r := range res.Fig3 {
		if r.Layers == g.Layers {
			fig3 = append(fig3, r)
		}
	}
	p("Fig. 3 — λ anchored at T = %s in closed form: λ = λobs(Tmin)(1 − K_meas)/K_meas = %s\n", L(s.TMin), num(float64(g.LambdaFit), 5))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "T\tn_eff\tS_mean\tλobs predicted\tK_meas\tK_opt\trel. error\tpaper\tK_opt − K_meas\tK_meas − K_meas(Tmin)\t")
	for _, r := range fig3 {
		rel := pct(r.RelErr)
		if int(r.T) == s.TMin {
			rel = "(anchor)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", L(int(r.T)), num(r.NEff, 2), num(r.SMean, 5),
			num(r.LambdaPred, 3), num(r.KMeas, 5), num(r.KOpt, 5), rel, pct(r.PaperRelErr), num(r.DeltaK, 6), num(r.KChange, 6))
	}
	tw.Flush()
	p("  max relative error %s (paper 0.28%%); K moves by %s over the sweep, so compare the errors with that change\n\n",
		pct(float64(g.Fig3MaxRelErr)), func() string {
			if len(fig3) == 0 {
				return "—"
			}
			return num(fig3[len(fig3)-1].KChange, 5)
		}())

	f := g.Fig4
	var fl []string
	for _, T := range f.Lengths {
		fl = append(fl, L(T))
	}
	p("Fig. 4 — %d (layer, head) cells over T ∈ {%s} × %d samples, weighting %s; K over the last %g, BOS mass over the last %g of queries\n",
		f.Cells, strings.Join(fl, ", "), sw.Samples, f.Pool, sw.LastFrac, sw.BOSFrac)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\tthis sweep\tpaper\t\n")
	fmt.Fprintf(tw, "cells\t%d\t%d\t\n", f.Cells, results.Paper.Fig4Cells)
	fmt.Fprintf(tw, "Pearson r\t%s  (%g%% bootstrap CI [%s, %s], %d resamples)\t+%.2f\t\n", num(float64(f.R), 3),
		100*f.CI.Level, num(float64(f.CI.Lo), 3), num(float64(f.CI.Hi), 3), f.CI.Resamples, results.Paper.Fig4R)
	fmt.Fprintf(tw, "p (two-sided, t with df = %d)\t%.3g\t%.2g\t\n", f.DF, float64(f.P), results.Paper.Fig4P)
	fmt.Fprintf(tw, "Spearman ρ\t%s\t—\t\n", num(float64(f.Spearman), 3))
	fmt.Fprintf(tw, "max BOS mass\t%s\tbelow %g\t\n", num(float64(f.MaxBOS), 4), results.Paper.MaxBOS)
	sinkL := "—"
	if f.SinkHeads > 0 {
		sinkL = fmt.Sprintf("%d–%d", f.SinkLayers[0], f.SinkLayers[1])
	}
	fmt.Fprintf(tw, "heads with BOS mass > %g\t%d, min K %s, layers %s\tall K > %g, layers %d–%d\t\n", results.Paper.BOSSinkMass,
		f.SinkHeads, num(float64(f.SinkMinK), 4), sinkL, results.Paper.BOSSinkK, results.Paper.SinkLayers[0], results.Paper.SinkLayers[1])
	fmt.Fprintf(tw, "heads with BOS mass > %g\t%d\t0\t\n", results.Paper.MaxBOS, f.HeadsOver03)
	fmt.Fprintf(tw, "last layers (%s): K range, mean BOS\t[%s, %s], %s\tK ∈ [%g, %g], BOS ≈ 0 (layers > 20)\t\n",
		layerRange(g.LayersUsed), num(float64(f.LastLayersK[0]), 3), num(float64(f.LastLayersK[1]), 3),
		num(float64(f.LastLayersBOS), 4), results.Paper.LateK[0], results.Paper.LateK[1])
	if f.BOSLeftOut > 0 {
		fmt.Fprintf(tw, "BOS queries left out (position 0 outside the sliding window)\t%d\t—\t\n", f.BOSLeftOut)
	}
	if gc := f.Gate; gc != nil {
		fmt.Fprintf(tw, "gate in place of K: Pearson r (gate, BOS mass)\t%s over %d cells (p %.3g, Spearman ρ %s, CI [%s, %s])\t—\t\n",
			num(float64(gc.R), 3), gc.Cells, float64(gc.P), num(float64(gc.Spearman), 3), num(float64(gc.CI.Lo), 3), num(float64(gc.CI.Hi), 3))
	}
	tw.Flush()
}
