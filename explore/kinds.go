package explore

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/parquet-go/parquet-go"
)

// gridKind is how explore reads a stream command's folder whose tables
// have no per-position rows: its grid is one table, one row per (T,
// sample, layer, column), and every other numeric column is a metric.
type gridKind struct {
	Table  string // the table the grid reads
	Column string // the grid's second axis: "head", "rank" or "expert"
	// Heads says that the columns are the model's attention heads, so a
	// cell leads to the rows of that head.
	Heads  bool
	Note   string // what the grid shows, for /api/info
	Metric string // the metric shown first
}

// gridKinds are the stream kinds read as a grid only, by their manifest's
// kind. A cell is the mean over the samples of the table's rows (an
// experts table is already pooled over them), std over the samples
// (ddof 0).
var gridKinds = map[string]gridKind{
	"sinks": {Table: "sinks_heads.parquet", Column: "head", Heads: true, Metric: "bos_mass",
		Note: "probe sinks: per (layer, head) over each pass's queries (sinks_heads); no per-position table"},
	"massive": {Table: "massive_top.parquet", Column: "rank", Metric: "ratio", Note: "probe massive: the top-k activations of each layer " +
		"(massive_top), column = rank (0: the largest |value|); position and channel say where each lies"},
	"experts": {Table: "experts_load.parquet", Column: "expert", Metric: "load", Note: "probe experts: expert load per (layer, expert) " +
		"over all tokens of each length (experts_load)"},
}

// gridKeyColumns are the key columns of a grid table besides its Column;
// sample is optional (an experts table has none).
var gridKeyColumns = []string{"T", "sample", "layer"}

// openStream opens the merged folder of a stream kind in gridKinds. Its
// lengths and samples are those of the manifest's chunks.
func openStream(dir, abs, kind string) (*Folder, error) {
	gk := gridKinds[kind]
	path := filepath.Join(abs, analysis.StreamManifestName(kind, results.Shard{}))
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	var man results.RunRecord
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("explore: %s: not a %s manifest: %w", path, kind, err)
	}
	if !man.Complete {
		return nil, fmt.Errorf("explore: %s: the %s run is unfinished (%s): resume it with the same probe %s command (or probe merge its shards), then open it", dir, kind, man.Error, kind)
	}
	if !slices.Contains(man.Tables, gk.Table) {
		return nil, fmt.Errorf("explore: %s: the %s run has no %s (tables %v): re-run it with --format parquet", dir, kind, gk.Table, man.Tables)
	}
	f := &Folder{Dir: abs, Kind: kind, Model: man.Model, Source: man.Source, Chunks: man.Chunks, Bucket: 1, BOSToken: -1,
		windows: []string{"all"}, columns: gk.Column, note: gk.Note, metric: gk.Metric}
	if !gk.Heads {
		f.noHeads = fmt.Sprintf("the %s grid's columns are %ss, not attention heads", kind, gk.Column)
	}
	samples := 0
	for _, c := range man.Chunks {
		if !slices.Contains(f.Lengths, c.T) {
			f.Lengths = append(f.Lengths, c.T)
		}
		samples = max(samples, c.Sample+1)
	}
	slices.Sort(f.Lengths)
	f.Samples = samples
	tpath := filepath.Join(abs, gk.Table)
	metrics, err := tableMetrics(tpath, gk.Column)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	f.table = gridOnly{ms: metrics, ls: f.Lengths, kind: kind}
	f.grid = func(T int, metric, window string) (*Grid, error) {
		g, err := tableGrid(tpath, gk.Column, T, metric)
		if err != nil {
			return nil, err
		}
		g.Window = window
		g.padLayers(f.Model.Layers)
		return g, nil
	}
	return f, nil
}

// gridOnly is the seriesTable of a folder without per-position rows: it
// lists the grid's metrics and the run's lengths and has no series.
type gridOnly struct {
	ms   []string
	ls   []int
	kind string
}

func (g gridOnly) metrics() []string  { return g.ms }
func (g gridOnly) lengths() []int     { return g.ls }
func (g gridOnly) samples(int) []int  { return nil }
func (g gridOnly) has(seriesKey) bool { return false }
func (g gridOnly) close() error       { return nil }
func (g gridOnly) series(seriesKey) ([]bucket, error) {
	return nil, fmt.Errorf("a probe %s folder has no per-position table", g.kind)
}

// tableMetrics lists the numeric columns of a grid table other than its
// keys (T, sample, layer and column), in table order.
func tableMetrics(path, column string) ([]string, error) {
	fh, pf, _, err := openParquet(path, []string{"T", "layer", column})
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	var out []string
	for _, leaf := range pf.Schema().Columns() {
		name := leaf[len(leaf)-1]
		if len(leaf) != 1 || name == column || slices.Contains(gridKeyColumns, name) {
			continue
		}
		l, _ := pf.Schema().Lookup(leaf...)
		switch l.Node.Type().Kind() {
		case parquet.Int32, parquet.Int64, parquet.Float, parquet.Double:
			out = append(out, name)
		}
	}
	return out, nil
}

// number is a numeric Parquet value as float64 (NaN when null or not
// numeric).
func number(v parquet.Value) float64 {
	switch v.Kind() {
	case parquet.Int32, parquet.Int64:
		return float64(v.Int64())
	case parquet.Float:
		return float64(v.Float())
	case parquet.Double:
		return v.Double()
	}
	return math.NaN()
}

// tableGrid reads one metric of a grid table at length T, a row group and
// a column at a time: cell (layer, c) is the mean of the finite values of
// the rows (T, layer, c) — one per sample, or one when the table is
// pooled — and Std their standard deviation (ddof 0), N their count.
// Layers is the larger of the model's (from the caller) and the table's.
func tableGrid(path, column string, T int, metric string) (*Grid, error) {
	fh, pf, cols, err := openParquet(path, []string{"T", "layer", column})
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	leaf, ok := pf.Schema().Lookup(metric)
	if !ok {
		return nil, fmt.Errorf("%s: no column %s", path, metric)
	}
	type acc struct{ n, sum, sq float64 }
	cells := map[[2]int]*acc{}
	layers, width := 0, 0
	for g, rg := range pf.RowGroups() {
		nr := rg.NumRows()
		key := make([][3]int, nr)
		for c, name := range []string{"T", "layer", column} {
			if err := scanColumn(rg, cols[name], 0, -1, func(i int64, v parquet.Value) { key[i][c] = int(v.Int64()) }); err != nil {
				return nil, fmt.Errorf("%s: row group %d, column %s: %w", path, g, name, err)
			}
		}
		err := scanColumn(rg, leaf.ColumnIndex, 0, -1, func(i int64, v parquet.Value) {
			x := number(v)
			if key[i][0] != T || v.IsNull() || math.IsNaN(x) || math.IsInf(x, 0) {
				return
			}
			k := [2]int{key[i][1], key[i][2]}
			c := cells[k]
			if c == nil {
				c = &acc{}
				cells[k] = c
			}
			c.n, c.sum, c.sq = c.n+1, c.sum+x, c.sq+x*x
			layers, width = max(layers, k[0]+1), max(width, k[1]+1)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: column %s: %w", path, metric, err)
		}
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("no finite values for T %d, metric %q in %s", T, metric, filepath.Base(path))
	}
	g := &Grid{T: T, Metric: metric, Layers: layers, Heads: width, Columns: column}
	nan := jfloat(math.NaN())
	for range g.Layers {
		g.Mean = append(g.Mean, slices.Repeat([]jfloat{nan}, width))
		g.Std = append(g.Std, slices.Repeat([]jfloat{nan}, width))
		g.N = append(g.N, make([]int64, width))
	}
	for k, c := range cells {
		if k[0] < 0 || k[1] < 0 {
			return nil, fmt.Errorf("%s: layer %d %s %d: negative", path, k[0], column, k[1])
		}
		m := c.sum / c.n
		g.Mean[k[0]][k[1]], g.Std[k[0]][k[1]], g.N[k[0]][k[1]] = jfloat(m), jfloat(math.Sqrt(max(c.sq/c.n-m*m, 0))), int64(c.n)
		g.Samples = max(g.Samples, int64(c.n))
	}
	return g, nil
}
