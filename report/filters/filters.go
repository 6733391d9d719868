// Package filters draws the figures of the filter and sink measurements:
// a `probe gdn` folder (Gated DeltaNet as a filter), a `probe sinks` folder
// (first-token attention, Gu et al.'s sink rate, entropy and fading,
// output gates) and a `probe massive` folder (Sun et al.'s massive
// activations and the interventions on them). The quantities and their
// definitions are those of docs/diagnostics.md; every figure draws the
// tables the command wrote, nothing recomputed from the model.
//
// Read picks the report from the folder's manifest; GDN, Sinks and Massive
// build it from rows already in memory (the notebooks call them on the
// rows a run returns). The manifests and rows are package results' types;
// nothing here imports a package that runs a model.
package filters

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// Read returns the report of the folder dir written by probe gdn, probe
// sinks, probe massive, probe retrieval or probe experts, chosen by the manifest it holds (its "kind" must
// agree with the manifest's file name). The tables are read from their
// Parquet files.
func Read(dir string) (*report.Report, error) {
	for _, c := range []struct{ name, kind string }{
		{results.GDNManifestName, "gdn"}, {results.SinksManifestName, "sinks"}, {results.MassiveManifestName, "massive"},
		{results.RetrievalManifestName, "retrieval"}, {results.ExpertsManifestName, "experts"},
	} {
		path := filepath.Join(dir, c.name)
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var head struct {
			Kind  string `json:"kind"`
			Error string `json:"error"`
		}
		if err := json.Unmarshal(data, &head); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if head.Kind != c.kind {
			return nil, fmt.Errorf("%s: kind %q, want %q for this file name", path, head.Kind, c.kind)
		}
		if head.Error != "" {
			return nil, fmt.Errorf("%s: the run failed (%s): re-run probe %s into this folder before drawing it", path, head.Error, c.kind)
		}
		switch c.kind {
		case "gdn":
			var man results.GDNManifest
			if err := json.Unmarshal(data, &man); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			rows, err := readTable[results.GDNRow](dir, "gdn", man.Tables)
			if err != nil {
				return nil, err
			}
			heads, err := readTable[results.GDNHeadRow](dir, "gdn_heads", man.Tables)
			if err != nil {
				return nil, err
			}
			return GDN(&man, rows, heads)
		case "sinks":
			var man results.SinksManifest
			if err := json.Unmarshal(data, &man); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			heads, err := readTable[results.SinkHeadRow](dir, "sinks_heads", man.Tables)
			if err != nil {
				return nil, err
			}
			rates, err := readTable[results.SinkRateRow](dir, "sinks_rate", man.Tables)
			if err != nil {
				return nil, err
			}
			return Sinks(&man, heads, rates)
		case "experts":
			var man results.ExpertsManifest
			if err := json.Unmarshal(data, &man); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			loads, err := readTable[results.ExpertLoadRow](dir, "experts_load", man.Tables)
			if err != nil {
				return nil, err
			}
			layers, err := readTable[results.ExpertLayerRow](dir, "experts_layers", man.Tables)
			if err != nil {
				return nil, err
			}
			return Experts(&man, loads, layers)
		case "retrieval":
			var man results.RetrievalManifest
			if err := json.Unmarshal(data, &man); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			rows, err := readTable[results.RetrievalHeadRow](dir, "retrieval_heads", man.Tables)
			if err != nil {
				return nil, err
			}
			return Retrieval(&man, rows)
		default:
			var man results.MassiveManifest
			if err := json.Unmarshal(data, &man); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			top, err := readTable[results.MassiveTopRow](dir, "massive_top", man.Tables)
			if err != nil {
				return nil, err
			}
			ppl, err := readTable[results.MassivePPLRow](dir, "massive_ppl", man.Tables)
			if err != nil {
				return nil, err
			}
			return Massive(&man, top, ppl)
		}
	}
	return nil, fmt.Errorf("%s holds none of %s, %s, %s, %s, %s: not a probe gdn, sinks, massive, retrieval or experts folder", dir,
		results.GDNManifestName, results.SinksManifestName, results.MassiveManifestName, results.RetrievalManifestName, results.ExpertsManifestName)
}

// readTable reads dir/<name>.parquet, or says that the run wrote no
// Parquet copy of the table.
func readTable[T any](dir, name string, tables []string) ([]T, error) {
	path := filepath.Join(dir, name+".parquet")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s: %v (the report reads the Parquet tables; the run wrote %v: re-run it with --format parquet)", path, err, tables)
	}
	return results.ReadTable[T](path)
}

// manifestOptions are the settings every report of this package shows.
func manifestOptions(file string, tool results.ToolInfo, created string, mi results.ModelInfo, src results.SourceInfo, chunks []results.Chunk, opts any) []report.Option {
	o := []report.Option{
		{Name: "tool", Value: fmt.Sprintf("%s %s %s (%s)", tool.Name, tool.Version, tool.Revision, tool.Go), Source: file},
		{Name: "created", Value: created, Source: file},
		{Name: "model", Value: fmt.Sprintf("%s (%s): %d layers, d_model %d, %d heads, digest %.16s…", mi.Dir, mi.Arch, mi.Layers, mi.DModel, mi.Heads, mi.Digest), Source: file},
		{Name: "source", Value: fmt.Sprintf("%s, %d tokens, digest %.16s…", src.Kind, src.Tokens, src.Digest), Source: file},
		{Name: "passes", Value: fmt.Sprint(len(chunks)), Source: file},
	}
	if b, err := json.Marshal(opts); err == nil {
		o = append(o, report.Option{Name: "options", Value: string(b), Source: file})
	}
	return o
}

// finite reports whether x is neither NaN nor ±Inf.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// longest returns the largest T of the rows' lengths.
func longest(ts []int) int {
	if len(ts) == 0 {
		return 0
	}
	return slices.Max(ts)
}

// grid is a (layer, head) matrix of means over samples: rows are the
// layers in ascending order, columns the heads 0 … heads−1.
type grid struct {
	layers []int
	heads  int
	sum    []float64
	n      []float64
}

func newGrid(layers []int, heads int) *grid {
	ls := slices.Clone(layers)
	sort.Ints(ls)
	return &grid{layers: ls, heads: heads, sum: make([]float64, len(ls)*heads), n: make([]float64, len(ls)*heads)}
}

// add adds x with weight w to cell (layer, head); non-finite x is skipped.
func (g *grid) add(layer, head int, x, w float64) {
	r := slices.Index(g.layers, layer)
	if r < 0 || head < 0 || head >= g.heads || !finite(x) || w <= 0 {
		return
	}
	g.sum[r*g.heads+head] += w * x
	g.n[r*g.heads+head] += w
}

// means returns the weighted means (NaN where a cell has no value).
func (g *grid) means() []float64 {
	z := make([]float64, len(g.sum))
	for i := range z {
		z[i] = math.NaN()
		if g.n[i] > 0 {
			z[i] = g.sum[i] / g.n[i]
		}
	}
	return z
}

// heatPanel draws z (rows = layers, columns = heads) as a heatmap with
// its own viridis scale over the finite values (or [lo, hi] where lo < hi
// is given). It returns false when no cell is finite. Cells without a
// value are drawn at the scale's minimum; missing counts them.
func heatPanel(title, label string, layers []int, heads int, z []float64, lo, hi float64) (p report.Panel, missing int, ok bool) {
	mn, mx := math.Inf(1), math.Inf(-1)
	for _, v := range z {
		if finite(v) {
			mn, mx = math.Min(mn, v), math.Max(mx, v)
		}
	}
	if mn > mx {
		return p, 0, false
	}
	if lo < hi {
		mn, mx = lo, hi
	}
	zz := slices.Clone(z)
	for i, v := range zz {
		if !finite(v) {
			zz[i] = mn
			missing++
		}
	}
	rows := make([]string, len(layers))
	for i, l := range layers {
		rows[i] = fmt.Sprint(l)
	}
	return report.Panel{Title: title, XLabel: "head", YLabel: "layer", YDown: true,
		Heatmap: &report.Heatmap{Rows: len(layers), Cols: heads, Z: zz, X0: -0.5, DX: 1, Y0: 0, DY: 1, YTokens: rows,
			Scale: report.ColorScale{Label: label, Map: report.Viridis(mn, mx)}}}, missing, true
}

// bins averages (x, y) pairs into at most n bins of equal width over
// x ∈ [0, xmax): the bin centres and means (bins without a finite y are
// left out).
type bins struct {
	width      float64
	sum, count []float64
}

func newBins(xmax, n int) *bins {
	n = max(1, min(n, xmax))
	return &bins{width: float64(xmax) / float64(n), sum: make([]float64, n), count: make([]float64, n)}
}

func (b *bins) add(x int, y float64) {
	if !finite(y) {
		return
	}
	i := min(int(float64(x)/b.width), len(b.sum)-1)
	b.sum[i] += y
	b.count[i]++
}

func (b *bins) xy() (x, y []float64) {
	for i := range b.sum {
		if b.count[i] > 0 {
			x = append(x, b.centre(i))
			y = append(y, b.sum[i]/b.count[i])
		}
	}
	return x, y
}

// centre is bin i's centre in positions.
func (b *bins) centre(i int) float64 { return (float64(i)+0.5)*b.width - 0.5 }

func fmtInts(xs []int) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprint(x)
	}
	return s
}
