package explore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"

	"github.com/parquet-go/parquet-go"
)

// seriesKey names one metric of one (T, sample, layer, head): a run of
// consecutive rows of the buckets table, one per query bucket.
type seriesKey struct {
	T, Sample, Layer, Head int
	Metric                 string
}

// span is where a series' rows lie: rows [start, start+n) of row group rg.
type span struct {
	rg       int
	start, n int64
}

// bucketIndex is the row-range index of buckets.parquet: which rows hold
// which series, built by reading the key columns once, one page at a time.
type bucketIndex struct {
	path    string
	file    *os.File
	pf      *parquet.File
	cols    map[string]int
	spans   map[seriesKey]span
	Metrics []string      // in table order
	Samples map[int][]int // per T, the samples present
	Lengths []int         // ascending
}

func (ix *bucketIndex) metrics() []string    { return ix.Metrics }
func (ix *bucketIndex) lengths() []int       { return ix.Lengths }
func (ix *bucketIndex) samples(T int) []int  { return ix.Samples[T] }
func (ix *bucketIndex) has(k seriesKey) bool { _, ok := ix.spans[k]; return ok }

// bucketColumns are the columns of the buckets table explore reads.
var bucketColumns = []string{"T", "sample", "layer", "head", "q_lo", "q_hi", "metric", "n", "sum"}

// openParquet opens path and maps each wanted column name to its leaf
// index, naming the file and column when one is missing.
func openParquet(path string, want []string) (*os.File, *parquet.File, map[string]int, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := fh.Stat()
	if err != nil {
		fh.Close()
		return nil, nil, nil, err
	}
	pf, err := parquet.OpenFile(fh, st.Size())
	if err != nil {
		fh.Close()
		return nil, nil, nil, fmt.Errorf("%s: not a readable Parquet file: %w", path, err)
	}
	cols := map[string]int{}
	for _, name := range want {
		leaf, ok := pf.Schema().Lookup(name)
		if !ok {
			fh.Close()
			return nil, nil, nil, fmt.Errorf("%s: no column %q (is it a sweep's table?)", path, name)
		}
		cols[name] = leaf.ColumnIndex
	}
	return fh, pf, cols, nil
}

// scanColumn calls fn with the values of rows [start, start+n) of one
// column of a row group (n < 0: to the end), reading one page at a time.
func scanColumn(rg parquet.RowGroup, col int, start, n int64, fn func(i int64, v parquet.Value)) error {
	pages := rg.ColumnChunks()[col].Pages()
	defer pages.Close()
	if start > 0 {
		if err := pages.SeekToRow(start); err != nil {
			return err
		}
	}
	if n < 0 {
		n = rg.NumRows() - start
	}
	buf := make([]parquet.Value, 1024)
	var i int64
	for i < n {
		p, err := pages.ReadPage()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		vr := p.Values()
		for i < n {
			k, err := vr.ReadValues(buf[:min(int64(len(buf)), n-i)])
			for _, v := range buf[:k] {
				fn(start+i, v)
				i++
			}
			if errors.Is(err, io.EOF) || k == 0 {
				break
			}
			if err != nil {
				parquet.Release(p)
				return err
			}
		}
		parquet.Release(p)
	}
	if i < n {
		return fmt.Errorf("column %d: %d rows from row %d, want %d", col, i, start, n)
	}
	return nil
}

// run is a stretch of equal values of a column from row start on: val for
// a byte-array column, num for an integer one.
type run struct {
	start int64
	val   string
	num   int
}

// columnRuns returns where the values of one column of a row group change.
// A page whose column index gives equal min and max (integer columns: a
// byte array's min and max may be truncated) is one run without decoding;
// other pages are decoded, their values compared without allocating.
func columnRuns(rg parquet.RowGroup, col int, isBytes bool) ([]run, error) {
	cc := rg.ColumnChunks()[col]
	var runs []run
	var last []byte
	add := func(i int64, v parquet.Value) {
		if isBytes {
			b := v.ByteArray()
			if len(runs) == 0 || !bytes.Equal(b, last) {
				last = append(last[:0], b...)
				runs = append(runs, run{start: i, val: string(b)})
			}
			return
		}
		if x := int(v.Int64()); len(runs) == 0 || runs[len(runs)-1].num != x {
			runs = append(runs, run{start: i, num: x})
		}
	}
	ci, err1 := cc.ColumnIndex()
	oi, err2 := cc.OffsetIndex()
	if isBytes || err1 != nil || err2 != nil || ci == nil || oi == nil || ci.NumPages() == 0 || ci.NumPages() != oi.NumPages() {
		return runs, scanColumn(rg, col, 0, -1, add)
	}
	n := oi.NumPages()
	for p := range n {
		first, end := oi.FirstRowIndex(p), rg.NumRows()
		if p+1 < n {
			end = oi.FirstRowIndex(p + 1)
		}
		if lo, hi := ci.MinValue(p), ci.MaxValue(p); ci.NullCount(p) == 0 && !lo.IsNull() && lo.Int64() == hi.Int64() {
			add(first, lo)
			continue
		}
		if err := scanColumn(rg, col, first, end-first, add); err != nil {
			return nil, err
		}
	}
	return runs, nil
}

// indexBuckets reads the T, sample, layer, head and metric columns of
// buckets.parquet once and records where each series' rows are. The
// sweep writes a series' buckets consecutively (pass, layer, head, metric,
// then query order), which the index checks: a key seen twice apart is an
// error naming the file.
func indexBuckets(path string) (*bucketIndex, error) {
	fh, pf, cols, err := openParquet(path, bucketColumns)
	if err != nil {
		return nil, err
	}
	ix := &bucketIndex{path: path, file: fh, pf: pf, cols: cols, spans: map[seriesKey]span{}, Samples: map[int][]int{}}
	for g, rg := range pf.RowGroups() {
		nr := rg.NumRows()
		keys := make([]seriesKey, 0, 1024)
		// Read the key columns into one run list per column: the runs are
		// few (one per series), so this is small whatever T is.
		runsOf := func(name string) ([]run, error) { return columnRuns(rg, cols[name], name == "metric") }
		all := map[string][]run{}
		for _, name := range []string{"T", "sample", "layer", "head", "metric"} {
			if all[name], err = runsOf(name); err != nil {
				fh.Close()
				return nil, fmt.Errorf("%s: row group %d, column %s: %w", path, g, name, err)
			}
		}
		// Merge the runs: a new series starts wherever any column's run does.
		var starts []int64
		for _, rs := range all {
			for _, r := range rs {
				starts = append(starts, r.start)
			}
		}
		slices.Sort(starts)
		starts = slices.Compact(starts)
		pos := map[string]int{}
		for i, s := range starts {
			var k seriesKey
			for name, rs := range all {
				for pos[name]+1 < len(rs) && rs[pos[name]+1].start <= s {
					pos[name]++
				}
				r := rs[pos[name]]
				switch name {
				case "T":
					k.T = r.num
				case "sample":
					k.Sample = r.num
				case "layer":
					k.Layer = r.num
				case "head":
					k.Head = r.num
				case "metric":
					k.Metric = r.val
				}
			}
			end := nr
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			if _, dup := ix.spans[k]; dup {
				fh.Close()
				return nil, fmt.Errorf("%s: rows of T %d sample %d layer %d head %d %s are not consecutive (not a table probe sweep wrote)", path, k.T, k.Sample, k.Layer, k.Head, k.Metric)
			}
			ix.spans[k] = span{rg: g, start: s, n: end - s}
			keys = append(keys, k)
		}
		for _, k := range keys {
			if !slices.Contains(ix.Metrics, k.Metric) {
				ix.Metrics = append(ix.Metrics, k.Metric)
			}
			if !slices.Contains(ix.Lengths, k.T) {
				ix.Lengths = append(ix.Lengths, k.T)
			}
			if !slices.Contains(ix.Samples[k.T], k.Sample) {
				ix.Samples[k.T] = append(ix.Samples[k.T], k.Sample)
			}
		}
	}
	slices.Sort(ix.Lengths)
	return ix, nil
}

func (ix *bucketIndex) close() error { return ix.file.Close() }

// bucket is one stored bucket row: queries [lo, hi), n finite values with
// the given sum.
type bucket struct {
	lo, hi, n int64
	sum       float64
}

// series reads the stored buckets of one series in query order.
func (ix *bucketIndex) series(k seriesKey) ([]bucket, error) {
	sp, ok := ix.spans[k]
	if !ok {
		return nil, fmt.Errorf("no rows for T %d sample %d layer %d head %d metric %s", k.T, k.Sample, k.Layer, k.Head, k.Metric)
	}
	rg := ix.pf.RowGroups()[sp.rg]
	out := make([]bucket, sp.n)
	set := map[string]func(b *bucket, v parquet.Value){
		"q_lo": func(b *bucket, v parquet.Value) { b.lo = v.Int64() },
		"q_hi": func(b *bucket, v parquet.Value) { b.hi = v.Int64() },
		"n":    func(b *bucket, v parquet.Value) { b.n = v.Int64() },
		"sum":  func(b *bucket, v parquet.Value) { b.sum = v.Double() },
	}
	for name, f := range set {
		err := scanColumn(rg, ix.cols[name], sp.start, sp.n, func(i int64, v parquet.Value) { f(&out[i-sp.start], v) })
		if err != nil {
			return nil, fmt.Errorf("%s: column %s: %w", ix.path, name, err)
		}
	}
	return out, nil
}

// Envelope is a series reduced to pixel buckets: bucket i covers the
// queries [Lo[i], Hi[i]); Min and Max are the smallest and largest stored
// bucket mean overlapping it, Mean the mean of its queries' values
// (Σ sum / Σ n, a stored bucket that straddles pixel buckets counted in
// each in proportion to its overlap, as if its values were spread evenly);
// NaN (null in JSON) where no finite value falls in the bucket.
// Resolution is the stored bucket width (the sweep's --bucket): with 1,
// Min and Max are the per-query extremes.
type Envelope struct {
	From       int       `json:"from"`
	To         int       `json:"to"`
	Resolution int       `json:"resolution"`
	Lo         []int     `json:"lo"`
	Hi         []int     `json:"hi"`
	Min        []jfloat  `json:"min"`
	Max        []jfloat  `json:"max"`
	Mean       []jfloat  `json:"mean"`
	N          []float64 `json:"n"`
}

// envelope reduces stored buckets to nb pixel buckets over [from, to):
// pixel i covers [from + ⌈i·W/nb⌉, from + ⌈(i+1)·W/nb⌉), W = to − from
// (nb is lowered to W when W < nb).
func envelope(rows []bucket, from, to, nb, resolution int) Envelope {
	w := to - from
	nb = min(nb, w)
	e := Envelope{From: from, To: to, Resolution: resolution, Lo: make([]int, nb), Hi: make([]int, nb),
		Min: make([]jfloat, nb), Max: make([]jfloat, nb), Mean: make([]jfloat, nb), N: make([]float64, nb)}
	sums := make([]float64, nb)
	for i := range nb {
		e.Lo[i] = from + (i*w+nb-1)/nb
		e.Hi[i] = from + ((i+1)*w+nb-1)/nb
		e.Min[i], e.Max[i] = jfloat(math.Inf(1)), jfloat(math.Inf(-1))
	}
	pixel := func(p int) int { return (p - from) * nb / w }
	for _, b := range rows {
		lo, hi := max(int(b.lo), from), min(int(b.hi), to)
		if lo >= hi || b.n == 0 {
			continue
		}
		mean := b.sum / float64(b.n)
		width := float64(b.hi - b.lo)
		for i := pixel(lo); i <= pixel(hi-1); i++ {
			ov := float64(min(hi, e.Hi[i]) - max(lo, e.Lo[i]))
			e.N[i] += float64(b.n) * ov / width
			sums[i] += b.sum * ov / width
			e.Min[i] = min(e.Min[i], jfloat(mean))
			e.Max[i] = max(e.Max[i], jfloat(mean))
		}
	}
	for i := range nb {
		if e.N[i] == 0 {
			e.Min[i], e.Max[i], e.Mean[i] = jfloat(math.NaN()), jfloat(math.NaN()), jfloat(math.NaN())
			continue
		}
		e.Mean[i] = jfloat(sums[i] / e.N[i])
	}
	return e
}

// jfloat is a float64 that marshals NaN and ±Inf as JSON null.
type jfloat float64

func (f jfloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return []byte("null"), nil
	}
	return []byte(fmt.Sprint(x)), nil
}
