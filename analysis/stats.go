package analysis

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"

	"github.com/filterlens/probe/analysis/results"
	"gonum.org/v1/gonum/stat/distuv"
)

// Moments is the exact summary of a set of values from which their mean and
// variance can be recovered and combined with other sets without going back
// to the values: the count N, the sum, and M2, the sum of squared deviations
// from the set's own mean. M2 is kept instead of the raw sum of squares
// because Σx² − (Σx)²/N cancels catastrophically when the spread is small
// next to the mean (n_eff and λobs sit far from 0); Combine merges two sets
// exactly (Chan, Golub and LeVeque's pairwise update), so any aggregate built
// from buckets equals the aggregate of the pooled values up to rounding.
type Moments struct {
	N   int64
	Sum float64
	M2  float64
}

// momentsOf returns the moments of x, two-pass (mean first, then centred
// squares).
func momentsOf(x []float64) Moments {
	if len(x) == 0 {
		return Moments{}
	}
	var s float64
	for _, v := range x {
		s += v
	}
	mean := s / float64(len(x))
	var m2 float64
	for _, v := range x {
		d := v - mean
		m2 += d * d
	}
	return Moments{N: int64(len(x)), Sum: s, M2: m2}
}

// Mean returns Sum/N, NaN for an empty set.
func (m Moments) Mean() float64 {
	if m.N == 0 {
		return math.NaN()
	}
	return m.Sum / float64(m.N)
}

// Std returns the standard deviation sqrt(M2/(N − ddof)); NaN when
// N ≤ ddof.
func (m Moments) Std(ddof int) float64 {
	if m.N <= int64(ddof) {
		return math.NaN()
	}
	return math.Sqrt(m.M2 / float64(m.N-int64(ddof)))
}

// Combine returns the moments of the union of the two sets.
func (m Moments) Combine(o Moments) Moments {
	switch {
	case o.N == 0:
		return m
	case m.N == 0:
		return o
	}
	n := m.N + o.N
	d := o.Sum/float64(o.N) - m.Sum/float64(m.N)
	return Moments{
		N:   n,
		Sum: m.Sum + o.Sum,
		M2:  m.M2 + o.M2 + d*d*float64(m.N)*float64(o.N)/float64(n),
	}
}

// pearson returns the Pearson correlation coefficient of x and y (two-pass,
// centred). It returns NaN when either has zero variance and an error when
// the lengths differ or fewer than two pairs are given.
func pearson(x, y []float64) (float64, error) {
	if len(x) != len(y) {
		return math.NaN(), fmt.Errorf("analysis: Pearson: %d x values, %d y values", len(x), len(y))
	}
	if len(x) < 2 {
		return math.NaN(), fmt.Errorf("analysis: Pearson: %d pairs, need at least 2", len(x))
	}
	return results.PearsonR(x, y), nil
}

// pearsonP returns the two-sided p-value of the test of zero correlation for
// a Pearson coefficient r from n pairs: t = r·sqrt(df/(1 − r²)) with
// df = n − 2 follows Student's t distribution under the null, and
// p = 2·P(T_df > |t|) (computed from the survival function, so that small
// p-values keep their digits). The paper's Fig. 4 reports r = +0.25,
// p = 1.3e-7 for 448 cells, which this reproduces for r = 0.246.
func pearsonP(r float64, n int) float64 {
	df := float64(n - 2)
	if n < 3 || math.IsNaN(r) {
		return math.NaN()
	}
	if math.Abs(r) >= 1 {
		return 0
	}
	t := math.Abs(r) * math.Sqrt(df/(1-r*r))
	return 2 * distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}.Survival(t)
}

// ranks returns the ranks (1-based) of x, ties receiving the average of the
// ranks they span (the convention of Spearman's ρ with ties).
func ranks(x []float64) []float64 {
	idx := make([]int, len(x))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return x[idx[a]] < x[idx[b]] })
	r := make([]float64, len(x))
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && x[idx[j]] == x[idx[i]] {
			j++
		}
		avg := float64(i+j+1) / 2 // mean of ranks i+1..j
		for k := i; k < j; k++ {
			r[idx[k]] = avg
		}
		i = j
	}
	return r
}

// spearman returns Spearman's rank correlation ρ: the Pearson correlation of
// the average ranks.
func spearman(x, y []float64) (float64, error) {
	if len(x) != len(y) {
		return math.NaN(), fmt.Errorf("analysis: Spearman: %d x values, %d y values", len(x), len(y))
	}
	if len(x) < 2 {
		return math.NaN(), fmt.Errorf("analysis: Spearman: %d pairs, need at least 2", len(x))
	}
	return results.PearsonR(ranks(x), ranks(y)), nil
}

// quantile returns the q-quantile of sorted data by linear interpolation
// between order statistics (Hyndman and Fan's type 7, numpy's default):
// position h = (n − 1)·q.
func quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	h := float64(n-1) * math.Max(0, math.Min(1, q))
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (h-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// bootstrapPearson resamples the pairs (x_i, y_i) with replacement
// `resamples` times with a PCG generator seeded by seed, computes Pearson's r
// of each resample and returns the percentile interval at the given level
// (type-7 quantiles of the valid resamples). Resamples in which x or y is
// constant have no r and are left out (counted in Resamples, not in Valid).
func bootstrapPearson(x, y []float64, resamples int, level float64, seed uint64) (results.BootstrapCI, error) {
	ci := results.BootstrapCI{Lo: results.Float(math.NaN()), Hi: results.Float(math.NaN()), Level: level, Resamples: resamples, Seed: seed}
	if len(x) != len(y) || len(x) < 2 {
		return ci, fmt.Errorf("analysis: bootstrap: need ≥ 2 pairs of equal length, got %d and %d", len(x), len(y))
	}
	if resamples <= 0 {
		return ci, errors.New("analysis: bootstrap: resamples must be positive")
	}
	if !(level > 0 && level < 1) {
		return ci, fmt.Errorf("analysis: bootstrap: level %v not in (0, 1)", level)
	}
	rng := rand.New(rand.NewPCG(seed, 0x626f6f74))
	n := len(x)
	bx, by := make([]float64, n), make([]float64, n)
	rs := make([]float64, 0, resamples)
	for b := 0; b < resamples; b++ {
		for i := range bx {
			k := rng.IntN(n)
			bx[i], by[i] = x[k], y[k]
		}
		if r := results.PearsonR(bx, by); !math.IsNaN(r) {
			rs = append(rs, r)
		}
	}
	ci.Valid = len(rs)
	if len(rs) == 0 {
		return ci, nil
	}
	sort.Float64s(rs)
	a := (1 - level) / 2
	ci.Lo, ci.Hi = results.Float(quantile(rs, a)), results.Float(quantile(rs, 1-a))
	return ci, nil
}
