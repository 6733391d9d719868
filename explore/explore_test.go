package explore

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"gorgonia.org/tensor"
)

// testSweep is a finished sweep folder made here from a generated model.
type testSweep struct {
	dir, modelDir string
	stream        []int
	man           *results.Manifest
}

// makeSweep generates a small model of arch, writes a token stream as a
// JSON ids file and runs a sweep (lengths 24 and 40, 2 samples, buckets
// of 5 queries) into a new folder.
func makeSweep(t testing.TB, arch model.Arch, layers, dModel, heads, kv int) testSweep {
	t.Helper()
	const vocab = 128
	cfg, err := model.SmallConfig(arch, model.Size{Layers: layers, DModel: dModel, Heads: heads, KVHeads: kv, Vocab: vocab, MaxPos: 512})
	if err != nil {
		t.Fatal(err)
	}
	_, tensors, err := model.Generate(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.MkdirTemp(tmpRoot, "sweep")
	if err != nil {
		t.Fatal(err)
	}
	mdir := filepath.Join(root, "model")
	if err := model.WriteHF(mdir, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 1))
	stream := make([]int, 300)
	for i := range stream {
		stream[i] = rng.IntN(vocab)
	}
	data, _ := json.Marshal(stream)
	idsPath := filepath.Join(root, "stream.json")
	if err := os.WriteFile(idsPath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(mdir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := analysis.DescribeModel(m)
	if err != nil {
		t.Fatal(err)
	}
	opts := analysis.DefaultSweepOptions()
	opts.LengthsArg, opts.Samples, opts.Bucket = "24,40", 2, 5
	agg := analysis.DefaultAggOptions()
	agg.LastLayers, agg.Bootstrap = 1, 50
	src := results.SourceInfo{Kind: "ids", File: analysis.HashBytes(idsPath, data), Tokens: len(stream), Digest: analysis.TokenDigest(stream)}
	out := filepath.Join(root, "sweep")
	sw := &analysis.Sweep{RunSpec: analysis.RunSpec{Source: src, Stream: stream, Out: out, Threads: 2}, Model: m, Info: info, Options: opts, Agg: agg}
	man, _, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	return testSweep{dir: out, modelDir: mdir, stream: stream, man: man}
}

// tmpRoot holds the sweeps shared by the tests (removed by TestMain).
var tmpRoot string

func TestMain(m *testing.M) {
	var err error
	if tmpRoot, err = os.MkdirTemp("", "explore-test"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(tmpRoot)
	os.Exit(code)
}

var (
	gatedOnce, hybridOnce sync.Once
	gatedSweep, hybrid    testSweep
)

// sweeps are made once per test binary (each is a few passes).
func gated(t testing.TB) testSweep {
	gatedOnce.Do(func() { gatedSweep = makeSweep(t, model.ArchGated, 3, 32, 4, 2) })
	return gatedSweep
}

func hybridSweep(t testing.TB) testSweep {
	hybridOnce.Do(func() { hybrid = makeSweep(t, model.ArchQwen35, 4, 64, 2, 1) })
	return hybrid
}

func newTestServer(t testing.TB, dir string, o Options) (*Server, *httptest.Server) {
	t.Helper()
	f, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s, err := NewServer(f, o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

// get fetches path and decodes its JSON into out (when not nil), returning
// the status and the body.
func get(t testing.TB, ts *httptest.Server, path string, out any) (int, string) {
	t.Helper()
	resp, err := http.Get(ts.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %.200s", path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

// TestGridIsTheHeadsTable: the grid of each metric equals the heads
// table's rows of that (T, metric, window).
func TestGridIsTheHeadsTable(t *testing.T) {
	sw := gated(t)
	_, ts := newTestServer(t, sw.dir, Options{})
	rows, err := results.ReadTable[results.HeadRow](filepath.Join(sw.dir, "heads.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for _, T := range []int{24, 40} {
		for _, metric := range []string{"neff", "bos_mass", "gate"} {
			var g struct {
				Mean [][]*float64 `json:"mean"`
			}
			if code, body := get(t, ts, fmt.Sprintf("/api/grid?T=%d&metric=%s&window=last", T, metric), &g); code != 200 {
				t.Fatalf("grid T %d %s: %d %s", T, metric, code, body)
			}
			n := 0
			for _, r := range rows {
				if int(r.T) != T || r.Metric != metric || r.Window != "last" {
					continue
				}
				n++
				if got := g.Mean[r.Layer][r.Head]; got == nil || *got != r.Mean {
					t.Errorf("T %d %s layer %d head %d: grid %v, heads table %v", T, metric, r.Layer, r.Head, got, r.Mean)
				}
			}
			if n != 3*4 {
				t.Errorf("T %d %s: %d heads rows, want 12", T, metric, n)
			}
		}
	}
}

// TestSeriesEnvelopes: over the whole range with one pixel per stored
// bucket the series is the buckets table's rows; the mean of a coarser
// envelope is the exact mean of its queries where pixels align with
// buckets, min ≤ mean ≤ max everywhere, and a zoom reads the same values.
func TestSeriesEnvelopes(t *testing.T) {
	sw := gated(t)
	_, ts := newTestServer(t, sw.dir, Options{})
	rows, err := results.ReadTable[analysis.BucketRow](filepath.Join(sw.dir, "buckets.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	var want []analysis.BucketRow
	for _, r := range rows {
		if r.T == 40 && r.Sample == 1 && r.Layer == 2 && r.Head == 3 && r.Metric == "neff" {
			want = append(want, r)
		}
	}
	var e Envelope
	if code, body := get(t, ts, "/api/series?T=40&sample=1&layer=2&head=3&metric=neff&from=0&to=40&buckets=40", &e); code != 200 {
		t.Fatalf("series: %d %s", code, body)
	}
	for _, r := range want {
		for q := r.QLo; q < r.QHi; q++ {
			if m := r.Sum / float64(r.N); math.Abs(float64(e.Mean[q])-m) > 1e-12*m {
				t.Fatalf("query %d: mean %v, bucket [%d, %d) mean %v", q, e.Mean[q], r.QLo, r.QHi, m)
			}
		}
	}
	// Pixels of 10 queries: buckets of 5 (and window cuts at 20 and 30) align.
	var c Envelope
	get(t, ts, "/api/series?T=40&sample=1&layer=2&head=3&metric=neff&buckets=4", &c)
	for i := range 4 {
		var s float64
		var n int64
		for _, r := range want {
			if int(r.QLo) >= c.Lo[i] && int(r.QHi) <= c.Hi[i] {
				s, n = s+r.Sum, n+r.N
			}
		}
		if m := s / float64(n); math.Abs(float64(c.Mean[i])-m) > 1e-12*m || c.Min[i] > c.Mean[i] || c.Mean[i] > c.Max[i] {
			t.Errorf("pixel %d [%d, %d): mean %v want %v, min %v max %v", i, c.Lo[i], c.Hi[i], c.Mean[i], m, c.Min[i], c.Max[i])
		}
	}
	var z Envelope
	get(t, ts, "/api/series?T=40&sample=1&layer=2&head=3&metric=neff&from=10&to=15&buckets=100", &z)
	if len(z.Lo) != 5 || z.Lo[0] != 10 || z.Mean[2] != e.Mean[12] {
		t.Errorf("zoom [10, 15): lo %v, mean %v; whole-range mean at 12 %v", z.Lo, z.Mean, e.Mean[12])
	}
}

// patternRow is probe capture's reference: the full pass with
// hook_pattern materialized, row query of head h.
func patternRow(t *testing.T, mdir string, ids []int, layer, h, query int) []float32 {
	m, err := model.Load(mdir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set := &hooks.Set{}
	var row []float32
	set.Add(hooks.Name(hooks.AttnPattern, layer), func(_ string, _ int, x *tensor.Dense) error {
		sh := x.Shape() // [batch, head, query, key]
		d := x.Data().([]float32)
		off := (h*sh[2] + query) * sh[3]
		row = append([]float32(nil), d[off:off+query+1]...)
		return nil
	})
	if _, err := m.Forward([][]int{ids}, model.Options{Hooks: set}); err != nil {
		t.Fatal(err)
	}
	return row
}

// passIDs is the pass (T, sample) as the sweep ran it (no BOS token).
func passIDs(sw testSweep, T, sample int) []int {
	for _, c := range sw.man.Chunks {
		if c.T == T && c.Sample == sample {
			return sw.stream[c.Start:c.End]
		}
	}
	return nil
}

// TestRowEqualsHookPattern: /api/row equals the hook_pattern row of a full
// pass (≤ 1e-6), with the pass's token strings; the second ask comes from
// the cache, which is the only thing written into the folder.
func TestRowEqualsHookPattern(t *testing.T) {
	sw := gated(t)
	before := snapshot(t, sw.dir)
	_, ts := newTestServer(t, sw.dir, Options{})
	for _, q := range []struct{ T, sample, layer, head, query int }{{40, 1, 2, 3, 37}, {24, 0, 0, 1, 5}, {40, 0, 1, 0, 0}} {
		want := patternRow(t, sw.modelDir, passIDs(sw, q.T, q.sample), q.layer, q.head, q.query)
		for _, cached := range []bool{false, true} {
			var row Row
			path := fmt.Sprintf("/api/row?T=%d&sample=%d&layer=%d&head=%d&query=%d", q.T, q.sample, q.layer, q.head, q.query)
			if code, body := get(t, ts, path, &row); code != 200 {
				t.Fatalf("%s: %d %s", path, code, body)
			}
			if row.Cached != cached || len(row.Weights) != q.query+1 || len(row.Tokens) != q.query+1 || row.Kind != "softmax" {
				t.Fatalf("%s: cached %v, %d weights, %d tokens, kind %s", path, row.Cached, len(row.Weights), len(row.Tokens), row.Kind)
			}
			for j := range want {
				if d := math.Abs(float64(row.Weights[j] - want[j])); d > 1e-6*max(math.Abs(float64(want[j])), 1e-30) && d > 1e-12 {
					t.Errorf("%s key %d: %v, hook_pattern %v", path, j, row.Weights[j], want[j])
				}
			}
		}
	}
	if after := snapshot(t, sw.dir); after != before {
		t.Errorf("the folder changed outside %s:\nbefore %s\nafter  %s", CacheDir, before, after)
	}
}

// snapshot lists every file of dir outside CacheDir with its size and
// modification time.
func snapshot(t testing.TB, dir string) string {
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == CacheDir {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil // a folder's time changes when the cache folder is made in it
		}
		st, _ := d.Info()
		fmt.Fprintf(&b, "%s %d %d; ", p, st.Size(), st.ModTime().UnixNano())
		return nil
	})
	return b.String()
}

// TestSeriesOverlay: /api/series with lists of layers and heads answers
// one envelope per (layer, head) pair, each the single request's; a list
// of one is repeated; mismatched or overlong lists get a 400.
func TestSeriesOverlay(t *testing.T) {
	sw := gated(t)
	_, ts := newTestServer(t, sw.dir, Options{})
	var many struct {
		Metric string
		Series []SeriesOf
	}
	path := "/api/series?T=40&sample=1&layer=2,0,1&head=3,0,2&metric=bos_mass&from=5&to=37&buckets=7"
	if code, body := get(t, ts, path, &many); code != 200 || len(many.Series) != 3 || many.Metric != "bos_mass" {
		t.Fatalf("%s: %d %.300s", path, code, body)
	}
	for i, lh := range [][2]int{{2, 3}, {0, 0}, {1, 2}} {
		var one Envelope
		p := fmt.Sprintf("/api/series?T=40&sample=1&layer=%d&head=%d&metric=bos_mass&from=5&to=37&buckets=7", lh[0], lh[1])
		get(t, ts, p, &one)
		got := many.Series[i]
		if got.Layer != lh[0] || got.Head != lh[1] || fmt.Sprint(got.Envelope) != fmt.Sprint(one) {
			t.Errorf("series %d: layer %d head %d %v, single request %v", i, got.Layer, got.Head, got.Envelope.Mean, one.Mean)
		}
	}
	if code, body := get(t, ts, "/api/series?T=40&layer=1&head=0,1,2,3", &many); code != 200 || len(many.Series) != 4 || many.Series[3].Layer != 1 || many.Series[3].Head != 3 {
		t.Errorf("one layer, four heads: %d %.200s", code, body)
	}
	for _, c := range []struct{ path, msg string }{
		{"/api/series?layer=0,1&head=0,1,2", "2 layers and 3 heads"},
		{"/api/series?layer=0&head=" + strings.Repeat("0,", 16) + "0", "at most 16"},
		{"/api/series?layer=0,x&head=0", "comma-separated list"},
		{"/api/series?layer=0,1&head=0,9", "head 9"},
	} {
		if code, body := get(t, ts, c.path, nil); code != 400 || !strings.Contains(body, c.msg) {
			t.Errorf("%s: %d %s, want 400 with %q", c.path, code, body, c.msg)
		}
	}
}
