package explore

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/filterlens/probe/analysis/results"
	"github.com/parquet-go/parquet-go"
)

// gdnKeyColumns are the key columns of gdn.parquet; every other column
// but token is a per-token metric.
var gdnKeyColumns = []string{"T", "sample", "layer", "head", "token"}

// openGDN opens a probe gdn folder: gdn_manifest.json, gdn.parquet (one
// row per (T, sample, layer, value head, token), one column per metric)
// and gdn_heads.parquet (per (T, sample, layer, head) means).
func openGDN(dir, abs string) (*Folder, error) {
	path := filepath.Join(abs, results.GDNManifestName)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	var man results.GDNManifest
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("explore: %s: not a gdn manifest: %w", path, err)
	}
	if !man.Complete {
		return nil, fmt.Errorf("explore: %s: the gdn run is unfinished (%s): resume it with the same probe gdn command (or probe merge its shards), then open it", dir, man.Error)
	}
	if !slices.Contains(man.Tables, "gdn.parquet") {
		return nil, fmt.Errorf("explore: %s: the gdn run has no gdn.parquet (tables %v): re-run it with --format parquet", dir, man.Tables)
	}
	f := &Folder{Dir: abs, Kind: "gdn", Model: man.Model, Source: man.Source, Chunks: man.Chunks, Lengths: man.Options.Lengths,
		Samples: man.Options.Samples, Bucket: 1, BOSToken: -1, windows: []string{"all"}, columns: "head"}
	if f.table, err = indexWide(filepath.Join(abs, "gdn.parquet")); err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	f.grid = f.gdnGrid
	return f, nil
}

// wideIndex indexes a per-token table with one column per metric: which
// rows hold each (T, sample, layer, head).
type wideIndex struct {
	path    string
	file    *os.File
	pf      *parquet.File
	cols    map[string]int
	spans   map[[4]int]span
	Metrics []string
	Samples map[int][]int
	Lengths []int
}

func (ix *wideIndex) metrics() []string   { return ix.Metrics }
func (ix *wideIndex) lengths() []int      { return ix.Lengths }
func (ix *wideIndex) samples(T int) []int { return ix.Samples[T] }
func (ix *wideIndex) has(k seriesKey) bool {
	_, ok := ix.spans[[4]int{k.T, k.Sample, k.Layer, k.Head}]
	return ok && slices.Contains(ix.Metrics, k.Metric)
}
func (ix *wideIndex) close() error { return ix.file.Close() }

// indexWide reads the key columns of a per-token table once, a page at a
// time, keeping only where each (T, sample, layer, head) run starts.
func indexWide(path string) (*wideIndex, error) {
	fh, pf, cols, err := openParquet(path, gdnKeyColumns)
	if err != nil {
		return nil, err
	}
	ix := &wideIndex{path: path, file: fh, pf: pf, cols: cols, spans: map[[4]int]span{}, Samples: map[int][]int{}}
	for _, leaf := range pf.Schema().Columns() {
		name := leaf[len(leaf)-1]
		if slices.Contains(gdnKeyColumns, name) || name == "nonfinite" {
			continue
		}
		// Numeric columns only: a label column (a layer's mixer, say) is not a metric.
		l, _ := pf.Schema().Lookup(leaf...)
		switch l.Node.Type().Kind() {
		case parquet.Int32, parquet.Int64, parquet.Float, parquet.Double:
			cols[name] = l.ColumnIndex
			ix.Metrics = append(ix.Metrics, name)
		}
	}
	for g, rg := range pf.RowGroups() {
		nr := rg.NumRows()
		keys := make([][4]int, nr) // 4 ints a row of this row group, dropped after it
		for c, name := range gdnKeyColumns[:4] {
			if err := scanColumn(rg, cols[name], 0, -1, func(i int64, v parquet.Value) { keys[i][c] = int(v.Int64()) }); err != nil {
				fh.Close()
				return nil, fmt.Errorf("%s: row group %d, column %s: %w", path, g, name, err)
			}
		}
		for i := int64(0); i < nr; {
			j := i
			for j < nr && keys[j] == keys[i] {
				j++
			}
			k := keys[i]
			if _, dup := ix.spans[k]; dup {
				fh.Close()
				return nil, fmt.Errorf("%s: rows of T %d sample %d layer %d head %d are not consecutive", path, k[0], k[1], k[2], k[3])
			}
			ix.spans[k] = span{rg: g, start: i, n: j - i}
			if !slices.Contains(ix.Lengths, k[0]) {
				ix.Lengths = append(ix.Lengths, k[0])
			}
			if !slices.Contains(ix.Samples[k[0]], k[1]) {
				ix.Samples[k[0]] = append(ix.Samples[k[0]], k[1])
			}
			i = j
		}
	}
	slices.Sort(ix.Lengths)
	return ix, nil
}

// series reads the token and metric columns of one series: one stored
// "bucket" per token (n = 0 where the value is NaN).
func (ix *wideIndex) series(k seriesKey) ([]bucket, error) {
	sp, ok := ix.spans[[4]int{k.T, k.Sample, k.Layer, k.Head}]
	if !ok || !slices.Contains(ix.Metrics, k.Metric) {
		return nil, fmt.Errorf("no rows for T %d sample %d layer %d head %d metric %s", k.T, k.Sample, k.Layer, k.Head, k.Metric)
	}
	rg := ix.pf.RowGroups()[sp.rg]
	out := make([]bucket, sp.n)
	err := scanColumn(rg, ix.cols["token"], sp.start, sp.n, func(i int64, v parquet.Value) {
		t := v.Int64()
		out[i-sp.start].lo, out[i-sp.start].hi = t, t+1
	})
	if err == nil {
		err = scanColumn(rg, ix.cols[k.Metric], sp.start, sp.n, func(i int64, v parquet.Value) {
			if x := number(v); !v.IsNull() && !math.IsNaN(x) && !math.IsInf(x, 0) {
				out[i-sp.start].n, out[i-sp.start].sum = 1, x
			}
		})
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ix.path, err)
	}
	return out, nil
}

// gdnGrid is the mean over samples of gdn_heads.parquet's per-pass means
// of one metric (its horizon column is horizon_median), std over the
// samples (ddof 0): tableGrid over the value heads, one row per layer of
// the model (null for its softmax layers).
func (f *Folder) gdnGrid(T int, metric, window string) (*Grid, error) {
	path := filepath.Join(f.Dir, "gdn_heads.parquet")
	col := metric
	if m, err := tableMetrics(path, "head"); err == nil && !slices.Contains(m, col) {
		col = metric + "_median"
	}
	g, err := tableGrid(path, "head", T, col)
	if err != nil {
		return nil, err
	}
	if g.Layers > f.Model.Layers {
		return nil, fmt.Errorf("%s: layer %d outside the model's %d", path, g.Layers-1, f.Model.Layers)
	}
	g.Metric, g.Window, g.Samples = metric, window, int64(f.Samples)
	g.padLayers(f.Model.Layers)
	return g, nil
}
