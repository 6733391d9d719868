package analysis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/stat"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// smallSweep is the sweep most tests run: a gated 3-layer model, lengths
// 24 and 40, 3 samples, buckets of 7 queries (which divide neither window).
func smallSweep(t testing.TB) (dir string, stream []int, opts results.SweepOptions, agg results.AggOptions) {
	dir = genModel(t, model.ArchGated, 3, 32, 4, 2, 101, 512, nil)
	stream = randomStream(400, 0, 101, 5)
	opts = DefaultSweepOptions()
	opts.LengthsArg, opts.Samples, opts.Bucket = "24,40", 3, 7
	agg = DefaultAggOptions()
	agg.LastLayers, agg.DDOF, agg.Bootstrap = 2, 1, 300
	return
}

// naive recomputes the App. I aggregates straight from per-query values,
// with none of the package's bucket or moment machinery: it runs every
// pass again with a fresh Collector and pools plain slices.
type naive struct {
	sw   *Sweep
	cols map[[2]int]*probes.Collector
	used []int
	ddof int
}

func newNaive(t *testing.T, sw *Sweep, chunks []results.Chunk, used []int, ddof int) *naive {
	n := &naive{sw: sw, cols: map[[2]int]*probes.Collector{}, used: used, ddof: ddof}
	c := &sw.Model.Config
	for _, ch := range chunks {
		col, err := probes.NewCollector(1, c.Layers, c.Heads, ch.T, c.DHead, probes.CollectorOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sw.Model.Forward([][]int{sw.passIDs(ch)}, model.Options{Hooks: col.Hooks(c)}); err != nil {
			t.Fatal(err)
		}
		n.cols[[2]int{ch.T, ch.Sample}] = col
	}
	return n
}

func meanStd(x []float64, ddof int) (float64, float64) {
	var s float64
	for _, v := range x {
		s += v
	}
	m := s / float64(len(x))
	var ss float64
	for _, v := range x {
		ss += (v - m) * (v - m)
	}
	return m, math.Sqrt(ss / float64(len(x)-ddof))
}

// values lists metric m of (T, sample, layer, head) for queries t ≥ from,
// widened to float64.
func (n *naive) values(T, s, l, h int, m string, from int) []float64 {
	col := n.cols[[2]int{T, s}]
	x, _ := col.Metric(m)
	i := col.Index(0, l, h, 0)
	v := make([]float64, 0, T-from)
	for _, xi := range x[i+from : i+T] {
		v = append(v, float64(xi))
	}
	return v
}

func (n *naive) pool(T int, m string) (mean, std, umean, ustd float64) {
	var all, units []float64
	from := windowStart(T, n.sw.Options.LastFrac)
	for s := 0; s < n.sw.Options.Samples; s++ {
		for _, l := range n.used {
			var unit []float64
			for h := 0; h < n.sw.Model.Heads; h++ {
				unit = append(unit, n.values(T, s, l, h, m, from)...)
			}
			all = append(all, unit...)
			um, _ := meanStd(unit, 0)
			units = append(units, um)
		}
	}
	mean, std = meanStd(all, n.ddof)
	umean, ustd = meanStd(units, n.ddof)
	return
}

func TestSweepAggregatesAreExact(t *testing.T) {
	dir, stream, opts, agg := smallSweep(t)
	opts.Probe.Reductions = "all" // every metric, (ii) and (iii) included
	out := t.TempDir()
	sw := newSweep(t, dir, stream, out, opts, agg)
	man, res, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	if !man.Complete || len(man.Passes) != 6 || !slices.Equal(man.LayersUsed, []int{1, 2}) {
		t.Fatalf("manifest: complete %v, %d passes, layers %v", man.Complete, len(man.Passes), man.LayersUsed)
	}
	nv := newNaive(t, sw, man.Chunks, []int{1, 2}, 1)
	check := func(what string, got, want float64) {
		t.Helper()
		if e := relErr(got, want); e > 1e-12 || math.IsNaN(e) {
			t.Errorf("%s = %.17g, naive %.17g (rel %.2g)", what, got, want, e)
		}
	}
	// A std far below its mean (Σα ≈ 1 ± 1e-8) has only the digits that
	// the values carry beyond the mean: allow rounding relative to the mean.
	checkStd := func(what string, got, want, mean float64) {
		t.Helper()
		if d := math.Abs(got - want); d > 1e-12*want+1e-14*math.Abs(mean) || math.IsNaN(d) {
			t.Errorf("%s = %.17g, naive %.17g (mean %.3g)", what, got, want, mean)
		}
	}

	// Fig. 2: every metric under both conventions.
	f2 := map[string]results.Fig2Row{}
	for _, r := range res.Fig2 {
		f2[fmt.Sprint(r.T, r.Metric)] = r
	}
	for _, T := range []int{24, 40} {
		for _, m := range passMetrics(true, false, "all") {
			r := f2[fmt.Sprint(T, m)]
			mean, std, um, us := nv.pool(T, m)
			check(fmt.Sprintf("fig2 T=%d %s mean", T, m), r.Mean, mean)
			checkStd(fmt.Sprintf("fig2 T=%d %s std_pooled", T, m), r.StdPooled, std, mean)
			check(fmt.Sprintf("fig2 T=%d %s mean_units", T, m), r.MeanUnits, um)
			checkStd(fmt.Sprintf("fig2 T=%d %s std_units", T, m), r.StdUnits, us, um)
			if r.N != int64(3*2*4*(T-windowStart(T, 0.25))) || r.Units != 6 {
				t.Errorf("fig2 T=%d %s: n %d units %d", T, m, r.N, r.Units)
			}
		}
		lam, _, _, _ := nv.pool(T, results.MetricLambdaObs)
		lam0, _, _, _ := nv.pool(24, results.MetricLambdaObs)
		check(fmt.Sprintf("T=%d ratio of means", T), f2[fmt.Sprint(T, "lambda_obs_ratio/"+results.RatioOfMeans)].Mean, lam/lam0)
		var ratios []float64
		for _, l := range []int{1, 2} {
			for h := 0; h < 4; h++ {
				var a, b []float64
				for s := 0; s < 3; s++ {
					a = append(a, nv.values(T, s, l, h, results.MetricLambdaObs, windowStart(T, 0.25))...)
					b = append(b, nv.values(24, s, l, h, results.MetricLambdaObs, windowStart(24, 0.25))...)
				}
				ma, _ := meanStd(a, 0)
				mb, _ := meanStd(b, 0)
				ratios = append(ratios, ma/mb)
			}
		}
		mr, _ := meanStd(ratios, 0)
		check(fmt.Sprintf("T=%d mean of ratios", T), f2[fmt.Sprint(T, "lambda_obs_ratio/"+results.MeanOfRatios)].Mean, mr)
		k, _, _, _ := nv.pool(T, results.MetricK)
		k0, _, _, _ := nv.pool(24, results.MetricK)
		check(fmt.Sprintf("T=%d ratio from K", T), f2[fmt.Sprint(T, "lambda_obs_ratio/"+results.RatioFromK)].Mean, (k/(1-k))/(k0/(1-k0)))
	}

	// Fig. 3: closed-form λ at Tmin, Eq. 6 from the pooled n_eff and S_mean.
	dh := 8.0
	n0, _, _, _ := nv.pool(24, results.MetricNEff)
	s0, _, _, _ := nv.pool(24, results.MetricSMean)
	k0, _, _, _ := nv.pool(24, results.MetricK)
	lamFit := (n0 + 1) / (s0 + 1/dh) * (1 - k0) / k0
	check("fig3 lambda fit", float64(res.Summary.LambdaFit), lamFit)
	for _, r := range res.Fig3 {
		T := int(r.T)
		n, _, _, _ := nv.pool(T, results.MetricNEff)
		s, _, _, _ := nv.pool(T, results.MetricSMean)
		k, _, _, _ := nv.pool(T, results.MetricK)
		lam := (n + 1) / (s + 1/dh)
		kOpt := lam / (lamFit + lam)
		check(fmt.Sprintf("fig3 T=%d K_opt", T), r.KOpt, kOpt)
		check(fmt.Sprintf("fig3 T=%d rel err", T), r.RelErr+1, math.Abs(kOpt-k)/k+1)
		check(fmt.Sprintf("fig3 T=%d K_meas", T), r.KMeas, k)
	}
	if res.Fig3[0].RelErr > 1e-15 {
		t.Errorf("fig3 at the anchor: rel err %g, want 0", res.Fig3[0].RelErr)
	}

	// Fig. 4: every (layer, head) cell over all lengths (4k/8k absent),
	// both weightings, and the correlation.
	var xs, ys, gs []float64
	for _, r := range res.Fig4 {
		l, h := int(r.Layer), int(r.Head)
		var kp, bp, kq, bq, gp []float64
		for _, T := range []int{24, 40} {
			for s := 0; s < 3; s++ {
				k := nv.values(T, s, l, h, results.MetricK, windowStart(T, 0.25))
				b := nv.values(T, s, l, h, results.MetricBOSMass, windowStart(T, 0.5))
				mk, _ := meanStd(k, 0)
				mb, _ := meanStd(b, 0)
				mg, _ := meanStd(nv.values(T, s, l, h, results.MetricGate, windowStart(T, 0.25)), 0)
				kp, bp, kq, bq, gp = append(kp, mk), append(bp, mb), append(kq, k...), append(bq, b...), append(gp, mg)
			}
		}
		for _, c := range []struct {
			name      string
			got, want []float64
		}{{"K_passes", []float64{r.KPasses, r.K}, kp}, {"bos_passes", []float64{r.BOSPasses, r.BOS}, bp},
			{"K_queries", []float64{r.KQueries}, kq}, {"bos_queries", []float64{r.BOSQueries}, bq}, {"gate", []float64{r.Gate}, gp}} {
			w, _ := meanStd(c.want, 0)
			for _, g := range c.got {
				check(fmt.Sprintf("fig4 (%d,%d) %s", l, h, c.name), g, w)
			}
		}
		xs, ys = append(xs, r.K), append(ys, r.BOS)
		gs = append(gs, r.Gate)
	}
	if len(res.Fig4) != 12 || res.Summary.Fig4.Cells != 12 || res.Summary.Fig4.DF != 10 {
		t.Errorf("fig4: %d rows, %d cells", len(res.Fig4), res.Summary.Fig4.Cells)
	}
	check("fig4 r", float64(res.Summary.Fig4.R), stat.Correlation(xs, ys, nil))
	check("fig4 p", float64(res.Summary.Fig4.P), pearsonP(stat.Correlation(xs, ys, nil), 12))
	if g := res.Summary.Fig4.Gate; g == nil || g.Cells != 12 {
		t.Errorf("fig4 gate in place of K: %+v, want 12 cells", g)
	} else {
		check("fig4 gate r", float64(g.R), stat.Correlation(gs, ys, nil))
	}
	if !strings.Contains(strings.Join(res.Summary.Notes, "\n"), "4k and 8k are not both in the sweep") {
		t.Errorf("notes %q should say that Fig. 4 fell back to all lengths", res.Summary.Notes)
	}

	// Heads table: every row against the naive pooled values.
	if len(res.Heads) != 2*3*4*len(passMetrics(true, false, "all"))*3 {
		t.Fatalf("heads: %d rows", len(res.Heads))
	}
	for _, r := range res.Heads {
		T, from := int(r.T), 0
		switch r.Window {
		case windowLast:
			from = windowStart(T, 0.25)
		case windowBOS:
			from = windowStart(T, 0.5)
		}
		var x []float64
		for s := 0; s < 3; s++ {
			x = append(x, nv.values(T, s, int(r.Layer), int(r.Head), r.Metric, from)...)
		}
		m, sd := meanStd(x, 1)
		check(fmt.Sprintf("heads %+v mean", r), r.Mean, m)
		checkStd(fmt.Sprintf("heads %+v std", r), r.Std, sd, m)
		if r.N != int64(len(x)) {
			t.Errorf("heads %+v: n %d, want %d", r, r.N, len(x))
		}
	}

	// The tables on disk are what Run returned.
	f3, err := results.ReadTable[results.Fig3Row](filepath.Join(out, "fig3.parquet"))
	if err != nil || fmt.Sprint(f3) != fmt.Sprint(res.Fig3) {
		t.Errorf("fig3.parquet = %v, %v; want %v", f3, err, res.Fig3)
	}
	buckets, err := results.ReadTable[BucketRow](filepath.Join(out, "buckets.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range buckets {
		if r.NonFinite != 0 || r.N != r.QHi-r.QLo || (r.QLo%7 != 0 && r.QLo != int64(windowStart(int(r.T), 0.25)) &&
			r.QLo != int64(windowStart(int(r.T), 0.5))) {
			t.Fatalf("bucket row %+v", r)
		}
	}
}

func TestBucketSizeDoesNotChangeAggregates(t *testing.T) {
	dir, stream, opts, agg := smallSweep(t)
	var results []*results.Results
	for _, b := range []int{1, 5, 64} {
		o := opts
		o.Bucket = b
		_, res, err := newSweep(t, dir, stream, t.TempDir(), o, agg).Run()
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	for i, res := range results[1:] {
		for j, r := range res.Fig2 {
			w := results[0].Fig2[j]
			stdOK := func(a, b float64) bool {
				return (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) <= 1e-11*b+1e-14*math.Abs(w.Mean)
			}
			if relErr(r.Mean, w.Mean) > 1e-13 || !stdOK(r.StdPooled, w.StdPooled) || !stdOK(r.StdUnits, w.StdUnits) {
				t.Errorf("bucket size #%d: fig2 %+v, with bucket 1 %+v", i+1, r, w)
			}
		}
	}
}

// files returns the regular files under dir (relative path → bytes),
// skipping the manifests, which hold timings.
func files(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || strings.HasPrefix(e.Name(), "manifest") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = b
	}
	return out
}

func TestShardsMergeToTheUnshardedTables(t *testing.T) {
	dir, stream, opts, agg := smallSweep(t)
	formats := []string{FormatParquet, FormatCSV, FormatJSONL}
	whole := t.TempDir()
	sw := newSweep(t, dir, stream, whole, opts, agg)
	sw.Formats = formats
	if _, _, err := sw.Run(); err != nil {
		t.Fatal(err)
	}
	var shards []string
	for i := 0; i < 4; i++ {
		d := t.TempDir()
		sw := newSweep(t, dir, stream, d, opts, agg)
		sw.Shard = results.Shard{Index: i, Count: 4}
		man, res, err := sw.Run()
		if err != nil {
			t.Fatal(err)
		}
		if res != nil || len(man.Passes) != len(man.Chunks)/4+boolInt(i < len(man.Chunks)%4) {
			t.Fatalf("shard %d: %d passes of %d", i, len(man.Passes), len(man.Chunks))
		}
		if _, err := os.Stat(filepath.Join(d, fmt.Sprintf("manifest-shard-%d-of-4.json", i))); err != nil {
			t.Fatal(err)
		}
		shards = append(shards, d)
	}

	_, err := MergeStream(shards[:3], t.TempDir(), MergeOptions{})
	if err == nil || !strings.Contains(err.Error(), "1 of 6 passes have no complete files") || !strings.Contains(err.Error(), "T=40 sample 0 (shard 3/4)") {
		t.Errorf("merge without shard 3: %v", err)
	}

	merged := t.TempDir()
	mm, err := MergeStream(shards, merged, MergeOptions{Formats: formats})
	if err != nil {
		t.Fatal(err)
	}
	if man := mm.(*results.Manifest); !man.Complete || len(man.Passes) != 6 || len(man.MergedFrom) != 4 {
		t.Errorf("merged manifest: %+v", man)
	}
	want, got := files(t, whole), files(t, merged)
	if len(want) != 16 {
		t.Errorf("unsharded run wrote %d table files, want 16", len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s differs between the unsharded run and the merge of its shards", name)
		}
	}
	// The pass files hold their own timings; their rows must agree.
	for name := range files(t, filepath.Join(whole, "passes")) {
		if !strings.HasSuffix(name, ".buckets.parquet") {
			continue
		}
		_, wr, err1 := readBucketPass(filepath.Join(whole, "passes", name))
		_, gr, err2 := readBucketPass(filepath.Join(merged, "passes", name))
		if err1 != nil || err2 != nil || !slices.Equal(wr, gr) {
			t.Errorf("pass %s: rows differ (%v, %v)", name, err1, err2)
		}
	}

	// Shards of another sweep do not merge.
	other := t.TempDir()
	o := opts
	o.Bucket = 9
	sw = newSweep(t, dir, stream, other, o, agg)
	sw.Shard = results.Shard{Index: 0, Count: 4}
	if _, _, err := sw.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := MergeStream([]string{shards[0], other}, t.TempDir(), MergeOptions{}); err == nil || !strings.Contains(err.Error(), "not shards of one run") ||
		!strings.Contains(err.Error(), "sweep.bucket") {
		t.Errorf("merging different sweeps: %v", err)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestResumeSkipsOnlyCompletePasses(t *testing.T) {
	dir, stream, opts, agg := smallSweep(t)
	out := t.TempDir()
	if _, _, err := newSweep(t, dir, stream, out, opts, agg).Run(); err != nil {
		t.Fatal(err)
	}
	first := files(t, out)
	p0 := sweepPass(out, 24, 1)
	p1 := sweepPass(out, 40, 2)
	whole, _ := os.ReadFile(p0)

	// A second run reuses everything and rewrites identical tables.
	man, _, err := newSweep(t, dir, stream, out, opts, agg).Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Reused) != 6 {
		t.Errorf("re-run reused %d passes, want 6", len(man.Reused))
	}
	for name, b := range files(t, out) {
		if !bytes.Equal(first[name], b) {
			t.Errorf("%s changed on a re-run that ran nothing", name)
		}
	}

	// A truncated file (no footer) and a file with a damaged footer are
	// not complete: they are run again, the others are kept.
	if err := os.WriteFile(p0, whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	bad, _ := os.ReadFile(p1)
	bad[len(bad)-10] ^= 0xff
	os.WriteFile(p1, bad, 0o644)
	if _, err := readStreamPass(p0, "buckets"); !errors.Is(err, errIncomplete) {
		t.Errorf("truncated pass file: %v, want errIncomplete", err)
	}
	man, _, err = newSweep(t, dir, stream, out, opts, agg).Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Reused) != 4 || !strings.Contains(strings.Join(man.Notes, "\n"), "was incomplete") {
		t.Errorf("after damaging 2 files: reused %v, notes %q", man.Reused, man.Notes)
	}
	for _, name := range []string{"fig2.parquet", "fig3.parquet", "fig4.parquet", "heads.parquet", "summary.json"} {
		b, _ := os.ReadFile(filepath.Join(out, name))
		if !bytes.Equal(first[name], b) {
			t.Errorf("%s differs after re-running the damaged passes", name)
		}
	}

	// Another plan is refused, naming the field that differs; with Force,
	// a pass file made with other options is not taken, and not
	// overwritten.
	o := opts
	o.BOSToken = 3
	_, _, err = newSweep(t, dir, stream, out, o, agg).Run()
	if err == nil || !strings.Contains(err.Error(), "holds a probe sweep run (manifest.json) with another plan") ||
		!strings.Contains(err.Error(), "sweep.bos_token (3 here, -1 in the folder)") {
		t.Errorf("another plan into the same folder: %v", err)
	}
	forced := newSweep(t, dir, stream, out, o, agg)
	forced.Force = true
	_, _, err = forced.Run()
	if err == nil || !strings.Contains(err.Error(), "T24-s0.buckets.parquet was made from another model, text or options") ||
		!strings.Contains(err.Error(), "bos_token (3 here, -1 in the file)") {
		t.Errorf("other options into the same folder: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "fig2.parquet")); !bytes.Equal(b, first["fig2.parquet"]) {
		t.Error("the failed run changed the tables")
	}
	// The finished sweep's manifest stays; the failure is recorded beside it.
	if m, err := ReadManifest(filepath.Join(out, "manifest.json")); err != nil || !m.Complete {
		t.Errorf("manifest after the failed run: %v", err)
	}
	m, err := ReadManifest(filepath.Join(out, "manifest.failed.json"))
	if err != nil || m.Complete || !strings.Contains(m.Error, "another model") {
		t.Errorf("manifest.failed.json: %v, %+v", err, m)
	}
}

// poisonToken makes the embedding of token id 0 NaN: any pass whose chunk
// holds it meets NaN attention at layer 0 from that position on.
func poisonToken(ts []checkpoint.Tensor) {
	for _, t := range ts {
		if t.Name == "model.embed_tokens.weight" {
			d := t.Data.([]float32)
			for i := 0; i < t.Shape[1]; i++ {
				d[i] = float32(math.NaN())
			}
		}
	}
}

func TestNonFiniteStopAndFlag(t *testing.T) {
	dir := genModel(t, model.ArchGated, 3, 32, 4, 2, 101, 512, poisonToken)
	stream := randomStream(400, 1, 101, 5) // no token 0 …
	stream[24+24+10] = 0                   // … but one in (T=24, sample 2) at query 10
	opts := DefaultSweepOptions()
	opts.LengthsArg, opts.Samples = "24,40", 3
	agg := DefaultAggOptions()
	agg.Bootstrap = 0

	out := t.TempDir()
	_, _, err := newSweep(t, dir, stream, out, opts, agg).Run()
	if err == nil || !strings.Contains(err.Error(), "T=24 sample 2: stream tokens [48,72): non-finite") ||
		!strings.Contains(err.Error(), "in layer 0, head") || !strings.Contains(err.Error(), "query 10") {
		t.Fatalf("stop: %v", err)
	}
	for _, s := range []int{0, 1} {
		if _, err := readStreamPass(sweepPass(out, 24, s), "buckets"); err != nil {
			t.Errorf("the pass finished before the failure was lost: %v", err)
		}
	}

	opts.OnNonFinite = NonFiniteFlag
	man, res, err := newSweep(t, dir, stream, out, opts, agg).Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Reused) != 2 || len(man.Flags) != 1 || !strings.Contains(man.Flags[0], "pass T=24 sample 2") ||
		!strings.Contains(man.Flags[0], "first at layer 0") || !strings.Contains(man.Flags[0], "query 10") {
		t.Errorf("flag: reused %v, flags %q", man.Reused, man.Flags)
	}
	nf, err := readPassRows[NonFiniteInfo](out, "nonfinite", man, sweepKeyOptions(man.Model, man.Sweep), results.Chunk{T: 24, Sample: 2, Start: 48, End: 72})
	if err != nil || len(nf) != 1 || nf[0].Query != 10 || nf[0].Layer != 0 || nf[0].Rows != 4*14 {
		t.Errorf("the pass's nonfinite table: %v %+v", err, nf)
	}
	// Layer 0: every metric but the gate (8 under the default reduction
	// "mean") of 14 NaN rows × 4 heads, plus the gate of the poisoned
	// position in 4 heads; layers 1–2 were never reached (every metric × 2
	// layers × 4 heads × 24 queries).
	nm := int64(len(passMetrics(true, false, "mean")))
	if want := (nm-1)*14*4 + 4 + nm*2*4*24; res.Summary.NonFinite != want {
		t.Errorf("summary counts %d non-finite values, want %d", res.Summary.NonFinite, want)
	}
	for _, r := range res.Fig2 {
		// 6 window queries × 4 heads × 3 layers × 3 samples, less the flagged pass's 72
		if r.T == 24 && r.Metric == results.MetricNEff && (r.N != 144 || math.IsNaN(r.Mean)) {
			t.Errorf("fig2 n_eff at T=24 should leave the flagged values out: %+v", r)
		}
	}
}

func TestSweepRefusesBadOptions(t *testing.T) {
	dir, stream, opts, agg := smallSweep(t)
	for _, c := range []struct {
		edit func(*results.SweepOptions, *results.AggOptions)
		msg  string
	}{
		{func(o *results.SweepOptions, _ *results.AggOptions) { o.LengthsArg = "24,24" }, "duplicate length"},
		{func(o *results.SweepOptions, _ *results.AggOptions) { o.Samples = 0 }, "samples = 0"},
		{func(o *results.SweepOptions, _ *results.AggOptions) { o.LengthsArg = "1k" }, "exceeds the model's max_position_embeddings 512"},
		{func(o *results.SweepOptions, _ *results.AggOptions) { o.LengthsArg = "300" }, "the token stream has 400 tokens"},
		{func(o *results.SweepOptions, _ *results.AggOptions) { o.OnNonFinite = "ignore" }, `on-nonfinite "ignore"`},
		{func(o *results.SweepOptions, _ *results.AggOptions) { o.BOSToken = 101 }, "bos-token 101"},
		{func(o *results.SweepOptions, _ *results.AggOptions) { o.Probe.Form = "mle" }, `lambda form "mle"`},
		{func(_ *results.SweepOptions, a *results.AggOptions) { a.DDOF = 2 }, "ddof = 2"},
		{func(_ *results.SweepOptions, a *results.AggOptions) { a.Fig4Pool = "cells" }, `fig4-pool "cells"`},
	} {
		o, a := opts, agg
		c.edit(&o, &a)
		out := t.TempDir()
		_, _, err := newSweep(t, dir, stream, out, o, a).Run()
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("error %v, want one containing %q", err, c.msg)
		}
	}
	// A stream token outside the vocabulary is named by its position.
	bad := slices.Clone(stream)
	bad[30] = 5000
	_, _, err := newSweep(t, dir, bad, t.TempDir(), opts, agg).Run()
	if err == nil || !strings.Contains(err.Error(), "token 5000 at stream position 30") {
		t.Errorf("token outside the vocabulary: %v", err)
	}
	// Extrapolation is allowed on request.
	o := opts
	o.LengthsArg, o.Samples, o.AllowExtrapolation = "520", 1, true
	long := randomStream(600, 0, 101, 2)
	if _, _, err := newSweep(t, dir, long, t.TempDir(), o, agg).Run(); err != nil {
		t.Errorf("--allow-extrapolation: %v", err)
	}
}

// TestSweepChecksMemoryFirst: a sweep whose longest pass cannot fit with
// its diagnostics' results (here 48 layers × 48 heads × 4M queries of
// metrics, hundreds of GiB) is refused before its first pass, by
// model.Model.CheckMemory, and the manifest records why; no pass file is
// written, although the shorter length would fit.
func TestSweepChecksMemoryFirst(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the available memory is read from /proc (Linux)")
	}
	dir := genModel(t, model.ArchQwen3, 48, 96, 48, 48, 101, 512, nil)
	const long = 1 << 22
	stream := randomStream(long+64, 0, 101, 7)
	opts := DefaultSweepOptions()
	opts.LengthsArg, opts.Samples, opts.AllowExtrapolation = "64,4194304", 1, true
	out := t.TempDir()
	man, _, err := newSweep(t, dir, stream, out, opts, DefaultAggOptions()).Run()
	if man == nil {
		t.Fatalf("no manifest; error %v", err)
	}
	refusedForMemory(t, err, "the longest pass (T=4194304", man.Error, len(man.Passes), out)
}

// refusedForMemory checks a run refused for its longest pass's memory:
// err names the pass (what) and the memory available, the manifest
// records err (manErr) and no pass (passes), and out holds no pass file.
func refusedForMemory(t *testing.T, err error, what, manErr string, passes int, out string) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "are available") {
		t.Fatalf("error %v, want %q refused for its memory", err, what)
	}
	if manErr != err.Error() || passes != 0 {
		t.Errorf("manifest: error %q and %d passes, want the run's error and none", manErr, passes)
	}
	if files, _ := filepath.Glob(filepath.Join(out, "passes", "*")); len(files) != 0 {
		t.Errorf("pass files written before the refusal: %v", files)
	}
}

// TestSweepProgress: a sweep reports through the engine's progress — each
// pass at its start, after each layer its forward pass reaches (the last
// layer's resid_post is past the diagnostics' readers: the watch does not
// run the pass further), and done, its work growing to the whole sweep's
// (the T² attention cost in passCost) — and a re-run reports every pass as
// already finished, with no work.
func TestSweepProgress(t *testing.T) {
	dir, stream, opts, agg := smallSweep(t)
	opts.Samples = 2
	out := t.TempDir()
	var got []Progress
	sw := newSweep(t, dir, stream, out, opts, agg)
	sw.Progress = func(p Progress) { got = append(got, p) }
	if _, _, err := sw.Run(); err != nil {
		t.Fatal(err)
	}
	const layers, passes = 3, 4
	pass, layer := 0, 0
	for i, p := range got {
		if p.Layer == 0 && !p.Done { // a pass's start
			pass, layer = pass+1, 0
		}
		if p.Pass != pass || p.Passes != passes || p.Layers != layers || p.Reused || p.Label != "" {
			t.Fatalf("report %d: %+v, want pass %d of %d, %d layers", i, p, pass, passes, layers)
		}
		if p.Layer < layer || (p.Layer == layer && p.Layer > 0) || (p.Done && p.Layer != layers) || (!p.Done && p.Layer == layers) {
			t.Fatalf("report %d: layer %d after %d, done %v", i, p.Layer, layer, p.Done)
		}
		layer = p.Layer
		if i > 0 && p.Work < got[i-1].Work {
			t.Fatalf("report %d: work %v fell from %v", i, p.Work, got[i-1].Work)
		}
	}
	if pass != passes || !got[len(got)-1].Done || len(got) < passes*(2+layers-1) {
		t.Fatalf("%d reports of %d passes, want %d passes each reported at its start, per layer and done", len(got), pass, passes)
	}
	last := got[len(got)-1]
	if total := got[0].Work + got[0].WorkLeft; math.Abs(last.Work-total) > 1e-9*total || math.Abs(last.WorkLeft) > 1e-9*total || last.Tokens != 24+24+40+40 {
		t.Errorf("last report %+v: want work %v, none left, 128 tokens", last, total)
	}
	if c := newSweep(t, dir, stream, out, opts, agg).Model.Config; got[0].WorkLeft != passCost(&c, 24)*2+passCost(&c, 40)*2 {
		t.Errorf("first report's work left %v, want passCost's sum", got[0].WorkLeft)
	}

	got = nil
	if _, _, err := sw.Run(); err != nil {
		t.Fatal(err)
	}
	if len(got) != passes || !got[passes-1].Reused || !got[passes-1].Done || got[passes-1].Work != 0 || got[passes-1].WorkLeft > 1e-9 {
		t.Errorf("re-run reports %+v, want %d reused passes and no work", got, passes)
	}
}

// TestSweepRefusesFolderOfOldForm: a sweep folder written before the sweep
// ran on the run engine (a manifest without kind, pass files
// passes/T<T>-s<s>.parquet) is refused by a run, by ReadManifest (report,
// explore, summarize) and by merge, each saying how to convert it; the
// folder is left as it was, and --force runs there anyway.
func TestSweepRefusesFolderOfOldForm(t *testing.T) {
	dir, stream, opts, agg := smallSweep(t)
	out := t.TempDir()
	old := map[string]any{"tool": results.ToolInfo{Format: formatVersion}, "complete": true, "shard": results.Shard{Index: 0, Count: 1}, "sweep": opts,
		"passes": []map[string]any{{"key": map[string]any{"T": 24, "sample": 0}, "hash": "x", "file": "T24-s0.parquet", "rows": 3}}}
	b, _ := json.Marshal(old)
	manifest := filepath.Join(out, "manifest.json")
	os.MkdirAll(filepath.Join(out, "passes"), 0o755)
	os.WriteFile(manifest, b, 0o644)
	os.WriteFile(filepath.Join(out, "passes", "T24-s0.parquet"), []byte("PAR1"), 0o644)

	convert := "re-run the sweep with a new --out"
	_, _, err := newSweep(t, dir, stream, out, opts, agg).Run()
	if err == nil || !strings.Contains(err.Error(), "--out "+out+" holds a sweep written before the sweep ran on the run engine") ||
		!strings.Contains(err.Error(), convert) {
		t.Errorf("run into the old folder: %v", err)
	}
	if now, _ := os.ReadFile(manifest); !bytes.Equal(now, b) {
		t.Error("the refused run changed the old manifest")
	}
	if _, err := ReadManifest(manifest); !errors.Is(err, errOldSweep) || !strings.Contains(err.Error(), manifest) {
		t.Errorf("ReadManifest of the old form: %v", err)
	}
	if _, err := MergeStream([]string{out}, t.TempDir(), MergeOptions{}); !errors.Is(err, errOldSweep) {
		t.Errorf("merge of the old form: %v", err)
	}
	sw := newSweep(t, dir, stream, out, opts, agg)
	sw.Force = true
	if man, _, err := sw.Run(); err != nil || !man.Complete || len(man.Passes) != 6 {
		t.Fatalf("--force into the old folder: %v", err)
	}
	if _, err := ReadManifest(manifest); err != nil {
		t.Errorf("the forced run's manifest: %v", err)
	}
}
