package explore

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"

	"github.com/filterlens/probe/analysis/results"
	"github.com/parquet-go/parquet-go"
)

// Grid is one metric of every (layer, head) at one context length over one
// query window, pooled over the samples: the heads table's mean and std
// (null where the table has no row: a layer without softmax rows).
type Grid struct {
	T       int        `json:"T"`
	Metric  string     `json:"metric"`
	Window  string     `json:"window"`
	Layers  int        `json:"layers"`
	Heads   int        `json:"heads"`
	Columns string     `json:"columns"` // what Heads counts: "head", "rank" (massive) or "expert"
	Mean    [][]jfloat `json:"mean"`    // [layer][head]
	Std     [][]jfloat `json:"std"`
	N       [][]int64  `json:"n"`
	Samples int64      `json:"samples"`
}

// Windows of the heads table a grid may pool over.
var gridWindows = []string{"all", "last", "bos"}

// headsGrid reads a sweep's heads.parquet in batches of rows and keeps
// the rows of one (T, metric, window).
func (f *Folder) headsGrid(T int, metric, window string) (*Grid, error) {
	if !slices.Contains(gridWindows, window) {
		return nil, fmt.Errorf("window %q: want one of %v", window, gridWindows)
	}
	info := f.Model
	g := &Grid{T: T, Metric: metric, Window: window, Layers: info.Layers, Heads: info.Heads, Columns: "head"}
	nan := jfloat(math.NaN())
	for range info.Layers {
		g.Mean = append(g.Mean, slices.Repeat([]jfloat{nan}, info.Heads))
		g.Std = append(g.Std, slices.Repeat([]jfloat{nan}, info.Heads))
		g.N = append(g.N, make([]int64, info.Heads))
	}
	path := filepath.Join(f.Dir, "heads.parquet")
	fh, pf, _, err := openParquet(path, []string{"T", "layer", "head", "metric", "window", "mean", "std", "n", "samples"})
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	r := parquet.NewGenericReader[results.HeadRow](pf)
	defer r.Close()
	buf := make([]results.HeadRow, 512)
	found := false
	for {
		n, err := r.Read(buf)
		for _, row := range buf[:n] {
			if int(row.T) != T || row.Metric != metric || row.Window != window {
				continue
			}
			l, h := int(row.Layer), int(row.Head)
			if l < 0 || l >= info.Layers || h < 0 || h >= info.Heads {
				return nil, fmt.Errorf("%s: layer %d head %d outside the model's %d × %d", path, l, h, info.Layers, info.Heads)
			}
			g.Mean[l][h], g.Std[l][h], g.N[l][h], g.Samples = jfloat(row.Mean), jfloat(row.Std), row.N, row.Samples
			found = true
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if !found {
		return nil, fmt.Errorf("no rows for T %d, metric %q, window %s in heads.parquet (lengths %v, metrics %v)", T, metric, window, f.table.lengths(), f.table.metrics())
	}
	return g, nil
}

// padLayers appends null rows until the grid has n layers (a table holds
// no rows for layers it does not measure).
func (g *Grid) padLayers(n int) {
	nan := jfloat(math.NaN())
	for ; g.Layers < n; g.Layers++ {
		g.Mean = append(g.Mean, slices.Repeat([]jfloat{nan}, g.Heads))
		g.Std = append(g.Std, slices.Repeat([]jfloat{nan}, g.Heads))
		g.N = append(g.N, make([]int64, g.Heads))
	}
}
