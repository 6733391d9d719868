package analysis

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/parquet-go/parquet-go"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/probes"
)

// BucketRow is one row of the tidy per-bucket table: the exact summary of
// one metric over the queries [QLo, QHi) of one (T, sample, layer, head).
// N counts the queries whose value is finite, Sum is their sum and M2 the
// sum of their squared deviations from the bucket mean Sum/N (the raw sum
// of squares is M2 + Sum²/N); NonFinite counts the queries of the bucket
// whose value is NaN or ±Inf (only possible under --on-nonfinite flag).
// Every aggregate of App. I is a combination of these rows (see Moments),
// so it is exact, not a mean of bucket means.
type BucketRow struct {
	T         int64   `parquet:"T"`
	Sample    int64   `parquet:"sample"`
	Layer     int64   `parquet:"layer"`
	Head      int64   `parquet:"head"`
	QLo       int64   `parquet:"q_lo"`
	QHi       int64   `parquet:"q_hi"`
	Metric    string  `parquet:"metric,dict"`
	N         int64   `parquet:"n"`
	Sum       float64 `parquet:"sum"`
	M2        float64 `parquet:"m2"`
	NonFinite int64   `parquet:"nonfinite"`
}

// Moments returns the row's statistics as Moments.
func (r *BucketRow) Moments() Moments { return Moments{N: r.N, Sum: r.Sum, M2: r.M2} }

// windowStart returns the first query of the window "the last fraction f of
// the queries" of a length-T pass: T − ⌊f·T⌋ (so "the last 25 %" of 1000
// queries is t ∈ [750, 1000), and "the second half" (f = 0.5) is t ≥ ⌈T/2⌉).
func windowStart(T int, f float64) int {
	n := int(math.Floor(f*float64(T) + 1e-9))
	return T - min(max(n, 0), T)
}

// BucketEdges returns the query bucket boundaries of a length-T pass:
// multiples of size, plus the starts of the windows and the sliding-window
// cuts (so that no bucket straddles a window edge or the first query that
// cannot see position 0, and window aggregates stay exact), plus 0 and T.
func bucketEdges(T, size int, windowStarts ...int) []int {
	edges := []int{0, T}
	for q := size; q < T; q += size {
		edges = append(edges, q)
	}
	for _, s := range windowStarts {
		if s > 0 && s < T {
			edges = append(edges, s)
		}
	}
	slices.Sort(edges)
	return slices.Compact(edges)
}

// passMetrics are the per-cell Collector metrics stored for every pass, in
// table order (gate only for gated models, sink_mass only for models with
// learned attention sinks; reductions (ii) and (iii) unless reductions is
// "mean", see ProbeOptions.Reductions: "" is a manifest from before the
// option, which stored all).
func passMetrics(gated, sinks bool, reductions string) []string {
	red, ok := probes.ParseReductions(reductions)
	if !ok {
		red = probes.AllReductions
	}
	m := []string{results.MetricNEff, results.MetricNEffEntropy, results.MetricSumAlpha, results.MetricSMean,
		results.MetricLambdaObs, results.MetricK, results.MetricLambdaObsDimMean, results.MetricKDimMean,
		results.MetricLambdaObsHarmonic, results.MetricBOSMass, results.MetricENorm}
	m = slices.DeleteFunc(m, func(n string) bool { return !red.Stores(n) })
	if sinks { // beside the first-token mass
		i := slices.Index(m, results.MetricBOSMass)
		m = slices.Insert(m, i+1, results.MetricSinkMass)
	}
	if gated {
		m = append(m, results.MetricGate)
	}
	return m
}

// bucketRows summarizes batch entry b of a Collector into bucket rows for
// pass (T, sample): every layer, head and metric over the buckets between
// edges. The collector's T must be at least the last edge.
func bucketRows(c *probes.Collector, b, T, sample int, edges []int, gated, sinks bool, layers []int) []BucketRow {
	metrics := passMetrics(gated, sinks, c.Options().Reductions.String())
	if layers == nil {
		layers = make([]int, c.L)
		for l := range layers {
			layers[l] = l
		}
	}
	rows := make([]BucketRow, 0, len(layers)*c.H*len(metrics)*(len(edges)-1))
	buf := make([]float64, 0, T)
	for _, l := range layers {
		for h := 0; h < c.H; h++ {
			base := c.Index(b, l, h, 0)
			for _, name := range metrics {
				x, _ := c.Metric(name)
				for i := 0; i+1 < len(edges); i++ {
					lo, hi := edges[i], edges[i+1]
					buf = buf[:0]
					for _, v := range x[base+lo : base+hi] {
						if v := float64(v); !math.IsNaN(v) && !math.IsInf(v, 0) {
							buf = append(buf, v)
						}
					}
					m := momentsOf(buf)
					rows = append(rows, BucketRow{T: int64(T), Sample: int64(sample), Layer: int64(l), Head: int64(h),
						QLo: int64(lo), QHi: int64(hi), Metric: name, N: m.N, Sum: m.Sum, M2: m.M2,
						NonFinite: int64(hi-lo) - m.N})
				}
			}
		}
	}
	return rows
}

// windowCuts returns the distinct positive sliding windows of windows,
// ascending (nil when none).
func windowCuts(windows []int) []int {
	var cuts []int
	for _, w := range windows {
		if w > 0 {
			cuts = append(cuts, w)
		}
	}
	slices.Sort(cuts)
	return slices.Compact(cuts)
}

// TokenDigest returns the hex sha256 of ids as little-endian int32.
func TokenDigest(ids []int) string {
	h := sha256.New()
	var b [4]byte
	for _, id := range ids {
		binary.LittleEndian.PutUint32(b[:], uint32(int32(id)))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// NonFiniteInfo records the non-finite activations met in a pass run
// under --on-nonfinite flag.
type NonFiniteInfo struct {
	Layer int    `json:"layer"`
	Head  int    `json:"head"`
	Query int    `json:"query"`
	Where string `json:"where"` // "attention weights" or "values"
	Rows  int64  `json:"rows"`  // attention rows with non-finite inputs
	// Aborted holds the forward pass's error when it stopped early (the
	// model refuses to continue past a non-finite residual stream); the
	// cells of the layers it did not reach are counted as non-finite.
	Aborted string `json:"aborted,omitempty"`
}

// passMetaKey is the Parquet footer key of a pass file's record
// (StreamPass).
const passMetaKey = "probe.pass"

// errIncomplete is wrapped by errors about pass files that are not whole
// (no valid Parquet footer, no pass record, fewer rows than recorded, or
// rows that cannot be read back, such as a page failing its CRC).
var errIncomplete = errors.New("incomplete pass file")

// openPassFile opens a pass file (the sweep's or a stream command's) and
// decodes the record in its footer (passMetaKey) into rec. A file that is
// not whole fails with an error wrapping errIncomplete. The caller closes
// the returned file, which the Parquet file reads from.
func openPassFile(path string, rec any) (*os.File, *parquet.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil {
		var pf *parquet.File
		if pf, err = parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true)); err != nil {
			err = fmt.Errorf("%s: %w: %v", path, errIncomplete, err)
		} else if meta, ok := pf.Lookup(passMetaKey); !ok {
			err = fmt.Errorf("%s: %w: no %q footer entry", path, errIncomplete, passMetaKey)
		} else if err = json.Unmarshal([]byte(meta), rec); err != nil {
			err = fmt.Errorf("%s: %w: footer entry %q: %v", path, errIncomplete, passMetaKey, err)
		} else {
			return f, pf, nil
		}
	}
	f.Close()
	return nil, nil, err
}
