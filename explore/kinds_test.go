package explore

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// zooGPTOSS is the zoo's gpt-oss-style checkpoint (learned sinks, sliding
// and full layers, 4 experts, top 2).
const zooGPTOSS = "../zoo/checkpoints/gpt_oss_tiny"

// zooStream writes 600 random token ids of the zoo model's vocabulary as
// an ids file in a new folder and returns the folder, the stream and its
// source record.
func zooStream(t *testing.T) (string, []int, results.SourceInfo) {
	t.Helper()
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(5, 9))
	stream := make([]int, 600)
	for i := range stream {
		stream[i] = rng.IntN(2048)
	}
	data, _ := json.Marshal(stream)
	p := filepath.Join(root, "stream.json")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return root, stream, results.SourceInfo{Kind: "ids", File: analysis.HashBytes(p, data), Tokens: len(stream), Digest: analysis.TokenDigest(stream)}
}

// checkGrid compares /api/grid's cells with the mean and std over the
// table's rows of (T, layer, column) computed here.
func checkGrid[R any](t *testing.T, get1 func(string, any) (int, string), table string, T int, metric string, key func(R) (int, int, int), val func(R) float64) {
	t.Helper()
	rows, err := results.ReadTable[R](table)
	if err != nil {
		t.Fatal(err)
	}
	type acc struct{ n, s, sq float64 }
	want := map[[2]int]*acc{}
	for _, r := range rows {
		rt, l, c := key(r)
		if x := val(r); rt == T && !math.IsNaN(x) {
			a := want[[2]int{l, c}]
			if a == nil {
				a = &acc{}
				want[[2]int{l, c}] = a
			}
			a.n, a.s, a.sq = a.n+1, a.s+x, a.sq+x*x
		}
	}
	var g struct {
		Mean, Std [][]*float64
		Columns   string
	}
	path := fmt.Sprintf("/api/grid?T=%d&metric=%s", T, metric)
	if code, body := get1(path, &g); code != 200 {
		t.Fatalf("%s: %d %s", path, code, body)
	}
	if len(want) == 0 {
		t.Fatalf("%s: no rows in %s", path, table)
	}
	for k, a := range want {
		m := a.s / a.n
		sd := math.Sqrt(max(a.sq/a.n-m*m, 0))
		got, gotSD := g.Mean[k[0]][k[1]], g.Std[k[0]][k[1]]
		if got == nil || math.Abs(*got-m) > 1e-12*max(1, math.Abs(m)) || math.Abs(*gotSD-sd) > 1e-9*max(1, math.Abs(m)) {
			t.Errorf("%s: layer %d %s %d: %v ± %v, table %v ± %v", path, k[0], g.Columns, k[1], got, gotSD, m, sd)
		}
	}
}

// streamFolders runs probe sinks (T = 96, 160), massive (T = 96, top 4)
// and experts (T = 96, 160), 2 samples each, on the zoo's gpt-oss
// checkpoint over a random ids stream, and returns the stream and the
// three folders.
func streamFolders(t *testing.T) (stream []int, sinks, massive, experts string) {
	t.Helper()
	root, stream, src := zooStream(t)
	fm := []string{analysis.FormatParquet}
	so := analysis.DefaultSinksOptions()
	so.Lengths, so.Samples = []int{96, 160}, 2
	sinks = filepath.Join(root, "sinks")
	if _, _, _, err := (&analysis.SinksRun{RunSpec: analysis.RunSpec{Dir: zooGPTOSS, Source: src, Stream: stream, Out: sinks, Formats: fm, Threads: 2}, Options: so}).Run(); err != nil {
		t.Fatal(err)
	}
	mo := analysis.DefaultMassiveOptions()
	mo.Lengths, mo.Samples, mo.TopK = []int{96}, 2, 4
	massive = filepath.Join(root, "massive")
	if _, _, _, err := (&analysis.MassiveRun{RunSpec: analysis.RunSpec{Dir: zooGPTOSS, Source: src, Stream: stream, Out: massive, Formats: fm, Threads: 2}, Options: mo}).Run(); err != nil {
		t.Fatal(err)
	}
	eo := analysis.DefaultExpertsRunOptions()
	eo.Lengths, eo.Samples = []int{96, 160}, 2
	experts = filepath.Join(root, "experts")
	if _, _, _, err := (&analysis.ExpertsRun{RunSpec: analysis.RunSpec{Dir: zooGPTOSS, Source: src, Stream: stream, Out: experts, Formats: fm, Threads: 2}, Options: eo}).Run(); err != nil {
		t.Fatal(err)
	}
	return stream, sinks, massive, experts
}

// TestStreamKindFolders: the folders of probe sinks, massive and experts
// (run on the zoo's gpt-oss checkpoint) open; their grid is their table's
// mean over samples per (layer, column), with the column axis each names;
// they have no series; a sinks folder gives rows of its heads equal to
// hook_pattern's, massive and experts none.
func TestStreamKindFolders(t *testing.T) {
	stream, sinks, massive, experts := streamFolders(t)
	for _, c := range []struct {
		dir, kind, columns string
		lengths            int
		rows               bool
	}{{sinks, "sinks", "head", 2, true}, {massive, "massive", "rank", 1, false}, {experts, "experts", "expert", 2, false}} {
		_, ts := newTestServer(t, c.dir, Options{})
		get1 := func(p string, out any) (int, string) { return get(t, ts, p, out) }
		var in Info
		get1("/api/info", &in)
		if in.Kind != c.kind || in.Columns != c.columns || in.Series || len(in.Lengths) != c.lengths || in.Samples != 2 || !in.Tokens || in.Rows != c.rows || len(in.Metrics) == 0 {
			t.Errorf("%s info: %+v", c.kind, in)
		}
		if want := map[string]string{"sinks": "bos_mass", "massive": "ratio", "experts": "load"}[c.kind]; in.Metric != want {
			t.Errorf("%s: default metric %q, want %q", c.kind, in.Metric, want)
		}
		var g Grid
		if code, body := get1("/api/grid", &g); code != 200 || g.Metric != in.Metric {
			t.Errorf("%s: grid without metric=: %d %.200s", c.kind, code, body)
		}
		if code, body := get1("/api/series?layer=0&head=0&metric="+in.Metrics[0], nil); code != 400 || !strings.Contains(body, "no per-position table") {
			t.Errorf("%s series: %d %s", c.kind, code, body)
		}
		code, body := get1("/api/row?layer=1&head=1&query=50", nil)
		if !c.rows && (code != 422 || !strings.Contains(body, c.columns+"s, not attention heads")) {
			t.Errorf("%s row: %d %s", c.kind, code, body)
		}
	}
	_, ts := newTestServer(t, sinks, Options{})
	get1 := func(p string, out any) (int, string) { return get(t, ts, p, out) }
	for _, m := range []string{"bos_mass", "sink_mass", "neff", "max_weight"} {
		checkGrid(t, get1, filepath.Join(sinks, "sinks_heads.parquet"), 160, m,
			func(r results.SinkHeadRow) (int, int, int) { return r.T, r.Layer, r.Head },
			func(r results.SinkHeadRow) float64 { return sinkMetric(r, m) })
	}
	var row Row
	if code, body := get1("/api/row?T=160&sample=1&layer=1&head=2&query=150", &row); code != 200 || len(row.Weights) != 151 {
		t.Fatalf("sinks row: %d %.300s", code, body)
	}
	var ids []int
	for _, ch := range mustOpen(t, sinks).Chunks {
		if ch.T == 160 && ch.Sample == 1 {
			ids = stream[ch.Start:ch.End]
		}
	}
	want := patternRow(t, zooGPTOSS, ids, 1, 2, 150)
	for j := range want {
		if d := math.Abs(float64(row.Weights[j] - want[j])); d > 1e-6*max(math.Abs(float64(want[j])), 1e-6) {
			t.Errorf("sinks row key %d: %v, hook_pattern %v", j, row.Weights[j], want[j])
		}
	}
	_, ts = newTestServer(t, massive, Options{})
	checkGrid(t, func(p string, out any) (int, string) { return get(t, ts, p, out) }, filepath.Join(massive, "massive_top.parquet"), 96, "ratio",
		func(r results.MassiveTopRow) (int, int, int) { return r.T, r.Layer, r.Rank },
		func(r results.MassiveTopRow) float64 { return r.Ratio })
	_, ts = newTestServer(t, experts, Options{})
	checkGrid(t, func(p string, out any) (int, string) { return get(t, ts, p, out) }, filepath.Join(experts, "experts_load.parquet"), 160, "load",
		func(r results.ExpertLoadRow) (int, int, int) { return r.T, r.Layer, r.Expert },
		func(r results.ExpertLoadRow) float64 { return r.Load })
}

func sinkMetric(r results.SinkHeadRow, m string) float64 {
	return map[string]float64{"bos_mass": r.BOSMass, "sink_mass": r.SinkMass, "neff": r.NEff, "max_weight": r.MaxWeight}[m]
}

func mustOpen(t *testing.T, dir string) *Folder {
	t.Helper()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestShardedStreamFolder: a sinks shard folder is refused until probe
// merge; the merged folder's grid is the unsharded run's.
func TestShardedStreamFolder(t *testing.T) {
	root, stream, src := zooStream(t)
	so := analysis.DefaultSinksOptions()
	so.Lengths, so.Samples = []int{64}, 2
	run := func(out string, sh results.Shard) {
		if _, _, _, err := (&analysis.SinksRun{RunSpec: analysis.RunSpec{Dir: zooGPTOSS, Source: src, Stream: stream, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 2, Shard: sh}, Options: so}).Run(); err != nil {
			t.Fatal(err)
		}
	}
	whole, a, b, merged := filepath.Join(root, "whole"), filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "merged")
	run(whole, results.Shard{})
	run(a, results.Shard{Index: 0, Count: 2})
	run(b, results.Shard{Index: 1, Count: 2})
	if _, err := Open(a); err == nil || !strings.Contains(err.Error(), "run probe merge first") {
		t.Errorf("shard folder: %v", err)
	}
	if _, err := analysis.MergeStream([]string{a, b}, merged, analysis.MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	var grids [2]string
	for i, dir := range []string{whole, merged} {
		_, ts := newTestServer(t, dir, Options{})
		code, body := get(t, ts, "/api/grid?metric=bos_mass", nil)
		if code != 200 {
			t.Fatalf("%s: %d %s", dir, code, body)
		}
		grids[i] = body
	}
	if grids[0] != grids[1] {
		t.Errorf("merged grid %s, unsharded %s", grids[1], grids[0])
	}
}
