package explore

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/filterlens/probe/analysis/results"
)

// diagKeyColumns are the first columns of probe diag's CSV; every later
// column but token is a metric.
var diagKeyColumns = []string{"sample", "layer", "head", "query"}

// diagIndex indexes probe diag's CSV (one row per (sample, layer, head,
// query), written in that order): the byte range of each (sample, layer,
// head)'s rows, and the per-sample means of every metric over its
// queries, both gathered in one streaming read when the file is opened.
// A series re-reads only its byte range.
type diagIndex struct {
	path       string
	file       *os.File
	header     []string
	metricAt   map[string]int // metric → field index
	tokenAt    int            // field index of token (−1: none)
	spans      map[[3]int]csvSpan
	means      map[[3]int][]moments // per (sample, layer, head), per metric: over its queries
	Metrics    []string
	T          int   // queries per sample (the largest query + 1)
	sampleList []int // ascending
	layers     int
	heads      int
}

// csvSpan is the byte range [off, off+size) of n rows of the CSV.
type csvSpan struct {
	off, size int64
	n         int
}

// moments are the count and sum of a metric's finite values.
type moments struct{ n, sum float64 }

func (ix *diagIndex) metrics() []string { return ix.Metrics }
func (ix *diagIndex) lengths() []int    { return []int{ix.T} }
func (ix *diagIndex) samples(T int) []int {
	if T != ix.T {
		return nil
	}
	return ix.sampleList
}
func (ix *diagIndex) has(k seriesKey) bool {
	_, ok := ix.spans[[3]int{k.Sample, k.Layer, k.Head}]
	return ok && k.T == ix.T && ix.metricAt[k.Metric] > 0
}
func (ix *diagIndex) close() error { return ix.file.Close() }

// isDiagCSV says whether path starts with probe diag's header.
func isDiagCSV(path string) bool {
	fh, err := os.Open(path)
	if err != nil {
		return false
	}
	defer fh.Close()
	rec, err := csv.NewReader(bufio.NewReader(io.LimitReader(fh, 4096))).Read()
	return err == nil && len(rec) > len(diagKeyColumns) && slices.Equal(rec[:len(diagKeyColumns)], diagKeyColumns)
}

// openDiag opens probe diag's CSV. It records neither the model nor the
// token ids, so rows are unavailable; the token strings are those of its
// token column when it was written with --tokens.
func openDiag(abs string) (*Folder, error) {
	ix, err := indexDiag(abs)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	f := &Folder{Dir: filepath.Dir(abs), Kind: "diag", Lengths: []int{ix.T}, Samples: len(ix.sampleList), Bucket: 1, BOSToken: -1,
		Model:   results.ModelInfo{Arch: "probe diag CSV", Layers: ix.layers, Heads: ix.heads},
		windows: []string{"all"}, columns: "head", table: ix, only: filepath.Base(abs),
		note:   "probe diag: one row per (sample, layer, head, query) of " + filepath.Base(abs),
		noRows: "probe diag's CSV records neither the model nor the token ids it ran on: rows need a probe sweep folder (probe explore --model … --text … runs one)"}
	f.grid = func(T int, metric, window string) (*Grid, error) { return ix.grid(T, metric, window) }
	return f, nil
}

// indexDiag reads the CSV once, a record at a time.
func indexDiag(path string) (*diagIndex, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	ix := &diagIndex{path: path, file: fh, metricAt: map[string]int{}, tokenAt: -1, spans: map[[3]int]csvSpan{}, means: map[[3]int][]moments{}}
	fail := func(err error) (*diagIndex, error) { fh.Close(); return nil, fmt.Errorf("%s: %w", path, err) }
	r := csv.NewReader(bufio.NewReaderSize(fh, 1<<20))
	r.ReuseRecord = true
	hdr, err := r.Read()
	if err != nil {
		return fail(fmt.Errorf("no header: %w", err))
	}
	if len(hdr) <= len(diagKeyColumns) || !slices.Equal(hdr[:len(diagKeyColumns)], diagKeyColumns) {
		return fail(fmt.Errorf("header %q: want probe diag's (sample,layer,head,query,…)", truncate(fmt.Sprint(hdr), 80)))
	}
	ix.header = slices.Clone(hdr)
	for i, name := range ix.header[len(diagKeyColumns):] {
		if name == "token" {
			ix.tokenAt = len(diagKeyColumns) + i
			continue
		}
		ix.metricAt[name] = len(diagKeyColumns) + i
		ix.Metrics = append(ix.Metrics, name)
	}
	var cur [3]int
	var sp csvSpan
	off := r.InputOffset()
	flush := func() error {
		if sp.n == 0 {
			return nil
		}
		if _, dup := ix.spans[cur]; dup {
			return fmt.Errorf("rows of sample %d layer %d head %d are not consecutive (not a CSV probe diag wrote)", cur[0], cur[1], cur[2])
		}
		ix.spans[cur] = sp
		return nil
	}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(err)
		}
		var k [4]int
		for i := range k {
			if k[i], err = strconv.Atoi(rec[i]); err != nil || k[i] < 0 {
				return fail(fmt.Errorf("line %d, %s %q: want an integer ≥ 0", line, diagKeyColumns[i], truncate(rec[i], 20)))
			}
		}
		key := [3]int{k[0], k[1], k[2]}
		end := r.InputOffset()
		if key != cur || sp.n == 0 {
			if err := flush(); err != nil {
				return fail(err)
			}
			cur, sp = key, csvSpan{off: off}
		}
		sp.n++
		sp.size = end - sp.off
		off = end
		m := ix.means[key]
		if m == nil {
			m = make([]moments, len(ix.Metrics))
			ix.means[key] = m
		}
		for i, name := range ix.Metrics {
			x, err := strconv.ParseFloat(rec[ix.metricAt[name]], 64)
			if err == nil && !math.IsNaN(x) && !math.IsInf(x, 0) {
				m[i].n++
				m[i].sum += x
			}
		}
		ix.T = max(ix.T, k[3]+1)
		ix.layers, ix.heads = max(ix.layers, k[1]+1), max(ix.heads, k[2]+1)
		if !slices.Contains(ix.sampleList, k[0]) {
			ix.sampleList = append(ix.sampleList, k[0])
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	if len(ix.spans) == 0 {
		return fail(errors.New("no rows"))
	}
	slices.Sort(ix.sampleList)
	return ix, nil
}

// rows reads the records of one span.
func (ix *diagIndex) rows(sp csvSpan, fn func(rec []string) error) error {
	r := csv.NewReader(bufio.NewReader(io.NewSectionReader(ix.file, sp.off, sp.size)))
	r.ReuseRecord = true
	r.FieldsPerRecord = len(ix.header)
	for range sp.n {
		rec, err := r.Read()
		if err != nil {
			return fmt.Errorf("%s: at byte %d: %w", ix.path, sp.off, err)
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
	return nil
}

// series reads one (sample, layer, head)'s rows: one stored bucket per
// query (n = 0 where the value is not finite).
func (ix *diagIndex) series(k seriesKey) ([]bucket, error) {
	sp, ok := ix.spans[[3]int{k.Sample, k.Layer, k.Head}]
	col := ix.metricAt[k.Metric]
	if !ok || col == 0 || k.T != ix.T {
		return nil, fmt.Errorf("no rows for T %d sample %d layer %d head %d metric %s", k.T, k.Sample, k.Layer, k.Head, k.Metric)
	}
	out := make([]bucket, 0, sp.n)
	err := ix.rows(sp, func(rec []string) error {
		q, err := strconv.Atoi(rec[3])
		if err != nil {
			return fmt.Errorf("%s: query %q: %w", ix.path, rec[3], err)
		}
		b := bucket{lo: int64(q), hi: int64(q) + 1}
		if x, err := strconv.ParseFloat(rec[col], 64); err == nil && !math.IsNaN(x) && !math.IsInf(x, 0) {
			b.n, b.sum = 1, x
		}
		out = append(out, b)
		return nil
	})
	return out, err
}

// tokens returns the token column's strings of queries [from, to) of a
// sample (from its first layer and head's rows).
func (ix *diagIndex) tokens(sample, from, to int) ([]string, error) {
	if ix.tokenAt < 0 {
		return nil, errors.New("the CSV has no token column (probe diag --tokens writes one)")
	}
	var sp csvSpan
	found := false
	for k, s := range ix.spans {
		if k[0] == sample && (!found || s.off < sp.off) {
			sp, found = s, true
		}
	}
	if !found {
		return nil, fmt.Errorf("no sample %d in the CSV (samples %v)", sample, ix.sampleList)
	}
	out := make([]string, to-from)
	err := ix.rows(sp, func(rec []string) error {
		if q, err := strconv.Atoi(rec[3]); err == nil && q >= from && q < to {
			out[q-from] = rec[ix.tokenAt]
		}
		return nil
	})
	return out, err
}

// grid is the mean over the samples of each (layer, head)'s mean over its
// queries, and the std of those per-sample means (ddof 0).
func (ix *diagIndex) grid(T int, metric, window string) (*Grid, error) {
	i := slices.Index(ix.Metrics, metric)
	if T != ix.T || i < 0 {
		return nil, fmt.Errorf("no rows for T %d, metric %q in %s (T %d, metrics %v)", T, metric, filepath.Base(ix.path), ix.T, ix.Metrics)
	}
	g := &Grid{T: T, Metric: metric, Window: window, Heads: ix.heads, Columns: "head", Samples: int64(len(ix.sampleList))}
	g.padLayers(ix.layers)
	cells := map[[2]int][]float64{}
	for k, m := range ix.means {
		if m[i].n > 0 {
			cells[[2]int{k[1], k[2]}] = append(cells[[2]int{k[1], k[2]}], m[i].sum/m[i].n)
		}
	}
	for k, xs := range cells {
		var s, sq float64
		for _, x := range xs {
			s, sq = s+x, sq+x*x
		}
		n := float64(len(xs))
		g.Mean[k[0]][k[1]], g.Std[k[0]][k[1]], g.N[k[0]][k[1]] = jfloat(s/n), jfloat(math.Sqrt(max(sq/n-s*s/n/n, 0))), int64(n)
	}
	return g, nil
}
