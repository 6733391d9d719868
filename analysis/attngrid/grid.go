// Package attngrid holds Grid, an attention matrix streamed by query rows
// into at most Rows×Cols pooled blocks: the data that analysis streams out
// of a forward pass (analysis.StreamAttentionMaps) or a capture, and that
// report/attnmap draws. It imports nothing of the module, so that report
// packages can take grids without depending on model.
package attngrid

import "fmt"

// Pooling modes of a downsampled block.
const (
	// PoolMax keeps the largest weight in the block: a single sharp key
	// (a sink, an induction target) stays visible however long T is.
	PoolMax = "max"
	// PoolMean averages every cell of the block, masked (future) cells
	// counted as 0: the mean attention weight per (query, key) pair, whose
	// block sums are attention mass.
	PoolMean = "mean"
)

// Grid accumulates one attention matrix, streamed by query rows, into at
// most Rows×Cols blocks: block (r, c) covers queries [⌊r·Tq/Rows⌋,
// ⌊(r+1)·Tq/Rows⌋) and keys [⌊c·Tk/Cols⌋, ⌊(c+1)·Tk/Cols⌋).
type Grid struct {
	Tq, Tk, Rows, Cols int
	Pool               string
	// RowBlock[q] is the block row of query q, ColBlock[k] the block
	// column of key k.
	RowBlock, ColBlock []int
	acc                []float64
	cnt                []int
}

// NewGrid returns a grid for a [tq, tk] matrix downsampled so that no side
// exceeds maxSize blocks (maxSize ≤ 0: no downsampling).
func NewGrid(tq, tk, maxSize int, pool string) (*Grid, error) {
	if pool != PoolMax && pool != PoolMean {
		return nil, fmt.Errorf("attngrid: pooling %q: want %s or %s", pool, PoolMax, PoolMean)
	}
	if tq < 1 || tk < 1 {
		return nil, fmt.Errorf("attngrid: empty %d×%d matrix", tq, tk)
	}
	rows, cols := tq, tk
	if maxSize > 0 {
		rows, cols = min(tq, maxSize), min(tk, maxSize)
	}
	g := &Grid{Tq: tq, Tk: tk, Rows: rows, Cols: cols, Pool: pool,
		acc: make([]float64, rows*cols), cnt: make([]int, rows*cols),
		RowBlock: blocks(tq, rows), ColBlock: blocks(tk, cols)}
	return g, nil
}

// blocks maps each of t positions to its block when t positions are split
// into n blocks of near-equal size (sizes differ by at most one).
func blocks(t, n int) []int {
	out := make([]int, t)
	for b := 0; b < n; b++ {
		for i := b * t / n; i < (b+1)*t/n; i++ {
			out[i] = b
		}
	}
	return out
}

// AddRow adds query row q (len Tk).
func (g *Grid) AddRow(q int, row []float32) error {
	if q < 0 || q >= g.Tq || len(row) != g.Tk {
		return fmt.Errorf("attngrid: row %d of length %d for a %d×%d map", q, len(row), g.Tq, g.Tk)
	}
	base := g.RowBlock[q] * g.Cols
	for k, v := range row {
		i := base + g.ColBlock[k]
		x := float64(v)
		if g.Pool == PoolMax {
			if g.cnt[i] == 0 || x > g.acc[i] {
				g.acc[i] = x
			}
		} else {
			g.acc[i] += x
		}
		g.cnt[i]++
	}
	return nil
}

// Values returns the pooled blocks, row-major; blocks no row reached are 0.
func (g *Grid) Values() []float64 {
	out := make([]float64, len(g.acc))
	for i, v := range g.acc {
		if g.cnt[i] == 0 {
			continue
		}
		if g.Pool == PoolMean {
			v /= float64(g.cnt[i])
		}
		out[i] = v
	}
	return out
}

// Maps holds the attention maps of one layer's heads, one grid per head
// (analysis.StreamAttentionMaps streams them out of a forward pass).
type Maps struct {
	Layer int
	T     int
	Heads []int
	// Hat holds, per head of Heads, Â (hook_pattern, rows sum to 1) on a
	// softmax layer, or |W| (hook_eff_attn) on a Gated DeltaNet layer.
	// Decayed holds A = Â ⊙ E when they were asked for (RFA
	// models only).
	Hat, Decayed []*Grid
	Pool         string
	MaxSize      int
}
