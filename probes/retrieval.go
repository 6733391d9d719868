package probes

import (
	"fmt"
	"math"

	"github.com/filterlens/probe/hooks"
)

// Retrieval heads (Wu et al. 2024, "Retrieval Head Mechanistically
// Explains Long-Context Factuality", arXiv:2404.15574, Sec. 2): on a
// sequence in which a segment of distinct tokens appears twice, every query
// t of the second copy whose next token x[t+1] is a copy of the first
// copy's x[s] (its copy source s) is a copy step; a head retrieves at that
// step when its attention peaks on the source:
//
//	hit_h(t)        = [argmax_j α_h[t, j] = s(t)]   (first maximum on ties)
//	retrieval_h     = Σ_{t ∈ steps} hit_h(t) / |steps|
//	source mass_h   = Σ_{t ∈ steps} α_h[t, s(t)] / |steps|
//
// With distinct tokens in the segment, "the argmax lands on s(t)" is Wu et
// al.'s copy-paste condition "the most-attended token is the token the
// model generates" (no other visible position holds x[t+1]). The source
// mass is the soft version: for uniform attention over t + 1 keys it is
// 1/(t + 1). Which steps count (those the model copies, as in Wu et al.,
// or all) is the caller's choice (RetrievalCollector.Scores).

// RetrievalCollector keeps, for every query of a copy task that has a
// source, each head's argmax key and weight on the source (a
// hooks.AttnConsumer; register it with hooks.Set.Stream on the softmax
// layers). Memory is O(B·L·H·T): no T×T matrix. Workers write disjoint
// (batch, head) entries.
type RetrievalCollector struct {
	B, L, H, T int
	// Source[b·T + t] is the copy source s(t) of query t of sequence b,
	// −1 where t is not a copy query.
	Source []int

	argmax []int32   // [B, L, H, T]
	mass   []float32 // [B, L, H, T]
}

// NewRetrievalCollector returns a collector for B sequences of T tokens
// through nLayers layers of H heads with copy sources source ([B·T], −1:
// no copy query; each source s(t) must satisfy 0 ≤ s(t) ≤ t).
func NewRetrievalCollector(B, nLayers, H, T int, source []int) (*RetrievalCollector, error) {
	if B <= 0 || nLayers <= 0 || H <= 0 || T <= 0 {
		return nil, fmt.Errorf("probes: retrieval collector needs B, layers, heads, T > 0 (got %d, %d, %d, %d)", B, nLayers, H, T)
	}
	if len(source) != B*T {
		return nil, fmt.Errorf("probes: retrieval collector: %d copy sources for B·T = %d queries", len(source), B*T)
	}
	for i, s := range source {
		if s < -1 || s > i%T {
			return nil, fmt.Errorf("probes: retrieval collector: query %d of sequence %d has copy source %d (want −1 or 0 … %d)", i%T, i/T, s, i%T)
		}
	}
	n := B * nLayers * H * T
	c := &RetrievalCollector{B: B, L: nLayers, H: H, T: T, Source: source, argmax: make([]int32, n), mass: make([]float32, n)}
	for i := range c.argmax {
		c.argmax[i] = -1
	}
	return c, nil
}

// ConsumeAttn records the argmax key and the source weight of the tile's
// copy queries (one walk over each such row).
func (c *RetrievalCollector) ConsumeAttn(tile *hooks.AttnTile) error {
	if tile.Batch >= c.B || tile.Layer >= c.L || tile.Head >= c.H || tile.T != c.T {
		return fmt.Errorf("probes: retrieval collector sized for B=%d, %d layers, %d heads, T=%d got a tile of batch %d, layer %d, head %d, T=%d",
			c.B, c.L, c.H, c.T, tile.Batch, tile.Layer, tile.Head, tile.T)
	}
	base := ((tile.Batch*c.L+tile.Layer)*c.H + tile.Head) * c.T
	for r := 0; r < tile.Rows; r++ {
		t := tile.Q0 + r
		s := c.Source[tile.Batch*c.T+t]
		if s < 0 {
			continue
		}
		row := tile.Row(r)
		best := 0
		for j, x := range row {
			if x > row[best] {
				best = j
			}
		}
		c.argmax[base+t], c.mass[base+t] = int32(best), row[s]
	}
	return nil
}

// Query returns what c recorded for query t of sequence b at (layer l,
// head h): the argmax key and the weight on its copy source; ok is false
// for a query without a source or one never streamed.
func (c *RetrievalCollector) Query(b, l, h, t int) (argmax int, mass float32, ok bool) {
	i := ((b*c.L+l)*c.H+h)*c.T + t
	if c.Source[b*c.T+t] < 0 || c.argmax[i] < 0 {
		return -1, 0, false
	}
	return int(c.argmax[i]), c.mass[i], true
}

// RetrievalHead is one head's retrieval score over the counted copy
// steps: Hits of Steps, Score = Hits/Steps, SourceMass the mean weight on
// the source (both NaN without steps).
type RetrievalHead struct {
	Layer, Head int
	Steps, Hits int64
	Score       float64
	SourceMass  float64
}

// Scores returns the retrieval score of every head of the given layers
// over the copy queries with counted[b·T + t] set (nil: every copy query),
// pooled over the batch (Wu et al.'s retrieval score, see above).
func (c *RetrievalCollector) Scores(layers []int, counted []bool) ([]RetrievalHead, error) {
	if counted != nil && len(counted) != c.B*c.T {
		return nil, fmt.Errorf("probes: retrieval scores: %d counted flags for B·T = %d queries", len(counted), c.B*c.T)
	}
	var out []RetrievalHead
	for _, l := range layers {
		if l < 0 || l >= c.L {
			return nil, fmt.Errorf("probes: retrieval scores: layer %d outside [0, %d)", l, c.L)
		}
		for h := 0; h < c.H; h++ {
			rh := RetrievalHead{Layer: l, Head: h}
			var mass float64
			for b := 0; b < c.B; b++ {
				base := ((b*c.L+l)*c.H + h) * c.T
				for t := 0; t < c.T; t++ {
					s := c.Source[b*c.T+t]
					if s < 0 || (counted != nil && !counted[b*c.T+t]) {
						continue
					}
					if c.argmax[base+t] < 0 {
						return nil, fmt.Errorf("probes: retrieval scores: layer %d head %d query %d of sequence %d was never streamed (register the collector on layer %d)", l, h, t, b, l)
					}
					rh.Steps++
					if int(c.argmax[base+t]) == s {
						rh.Hits++
					}
					mass += float64(c.mass[base+t])
				}
			}
			rh.Score, rh.SourceMass = math.NaN(), math.NaN()
			if rh.Steps > 0 {
				rh.Score, rh.SourceMass = float64(rh.Hits)/float64(rh.Steps), mass/float64(rh.Steps)
			}
			out = append(out, rh)
		}
	}
	return out, nil
}

// CopySources returns the copy sources of one sequence of T tokens in
// which tokens [first, first+n) repeat at [second, second+n)
// (second ≥ first + n): query second + i − 1 copies from first + i for
// i = 1 … n − 1 (its next token, x[second+i], is the copy of x[first+i]);
// every other query gets −1.
func CopySources(T, first, second, n int) ([]int, error) {
	if n < 2 || first < 0 || second < first+n || second+n > T {
		return nil, fmt.Errorf("probes: copy task: segment of %d tokens at %d and %d does not fit two disjoint copies of ≥ 2 tokens in %d", n, first, second, T)
	}
	src := make([]int, T)
	for i := range src {
		src[i] = -1
	}
	for i := 1; i < n; i++ {
		src[second+i-1] = first + i
	}
	return src, nil
}
