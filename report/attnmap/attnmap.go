// Package attnmap draws attention maps — the [T, T] post-softmax attention
// of chosen heads of one layer — as magma heatmaps, downsampled for long T
// and optionally contrast-stretched as Â^γ (RFA App. F.3 shows Â^0.25).
//
// Rows stream in one at a time (Grid.AddRow), so a map never needs the full
// T×T matrix of more than one head; FromCapture feeds the rows of a
// `probe capture` file's blocks.{l}.attn.hook_pattern [batch, head, query,
// key] tensor.
package attnmap

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/report"
)

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
	acc                []float64
	cnt                []int
	rowBlock, colBlock []int
}

// NewGrid returns a grid for a [tq, tk] matrix downsampled so that no side
// exceeds maxSize blocks (maxSize ≤ 0: no downsampling).
func NewGrid(tq, tk, maxSize int, pool string) (*Grid, error) {
	if pool != PoolMax && pool != PoolMean {
		return nil, fmt.Errorf("attnmap: pooling %q: want %s or %s", pool, PoolMax, PoolMean)
	}
	if tq < 1 || tk < 1 {
		return nil, fmt.Errorf("attnmap: empty %d×%d matrix", tq, tk)
	}
	rows, cols := tq, tk
	if maxSize > 0 {
		rows, cols = min(tq, maxSize), min(tk, maxSize)
	}
	g := &Grid{Tq: tq, Tk: tk, Rows: rows, Cols: cols, Pool: pool,
		acc: make([]float64, rows*cols), cnt: make([]int, rows*cols),
		rowBlock: blocks(tq, rows), colBlock: blocks(tk, cols)}
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
		return fmt.Errorf("attnmap: row %d of length %d for a %d×%d map", q, len(row), g.Tq, g.Tk)
	}
	base := g.rowBlock[q] * g.Cols
	for k, v := range row {
		i := base + g.colBlock[k]
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

// Options choose what to draw.
type Options struct {
	Layer   int
	Heads   []int   // nil: every head
	Batch   int     // which sequence of the captured batch
	Gamma   float64 // contrast exponent: Â^γ (RFA uses 0.25); 1 draws Â itself
	Pool    string  // PoolMax or PoolMean
	MaxSize int     // largest number of blocks per side (default 128)
	// Tokens, when set, is the token string of every position of the
	// sequence (at least T of them): shown on hover (a block shows the
	// start of its text), and as the axis labels of sequences of at most
	// 40 tokens drawn one cell per token. Without it cells are labelled by
	// position only.
	Tokens []string
}

func (o *Options) defaults() {
	if o.Gamma == 0 {
		o.Gamma = 0.25
	}
	if o.Pool == "" {
		o.Pool = PoolMax
	}
	if o.MaxSize == 0 {
		o.MaxSize = 128
	}
}

// FromCapture reads layer o.Layer's pattern from a `probe capture`
// safetensors file and returns one figure with a panel per chosen head,
// labelled with the token strings the file's metadata holds (key "tokens",
// a JSON list per sequence) unless o.Tokens is set.
func FromCapture(path string, o Options) (*report.Figure, error) {
	o.defaults()
	c, err := checkpoint.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if raw, ok := c.Metadata()["tokens"]; ok && o.Tokens == nil {
		// probe capture stores the token strings of each sequence
		var toks [][]string
		if json.Unmarshal([]byte(raw), &toks) == nil && o.Batch >= 0 && o.Batch < len(toks) {
			o.Tokens = toks[o.Batch]
		}
	}
	name := hooks.Name(hooks.AttnPattern, o.Layer)
	info, ok := c.Info(name)
	if !ok {
		var have []string
		for _, n := range c.Names() {
			if hooks.Match(hooks.AttnPattern, n) {
				have = append(have, n)
			}
		}
		return nil, fmt.Errorf("attnmap: %s has no %s (it has %s); capture it with --hook 'blocks.*.attn.hook_pattern'", path, name, strings.Join(have, ", "))
	}
	if len(info.Shape) != 4 {
		return nil, fmt.Errorf("attnmap: %s has shape %v, want [batch, head, query, key]", name, info.Shape)
	}
	b, h, tq, tk := info.Shape[0], info.Shape[1], info.Shape[2], info.Shape[3]
	if o.Tokens != nil && len(o.Tokens) < max(tq, tk) {
		return nil, fmt.Errorf("attnmap: %d token strings for a %d×%d map in %s: give one per position of the captured sequence", len(o.Tokens), tq, tk, path)
	}
	if o.Batch < 0 || o.Batch >= b {
		return nil, fmt.Errorf("attnmap: batch %d out of range (the capture holds %d sequences)", o.Batch, b)
	}
	heads := o.Heads
	if heads == nil {
		for i := 0; i < h; i++ {
			heads = append(heads, i)
		}
	}
	for _, hd := range heads {
		if hd < 0 || hd >= h {
			return nil, fmt.Errorf("attnmap: head %d out of range (layer %d has %d heads)", hd, o.Layer, h)
		}
	}
	data, err := c.Float32(name)
	if err != nil {
		return nil, err
	}
	grids := make([]*Grid, len(heads))
	for i, hd := range heads {
		g, err := NewGrid(tq, tk, o.MaxSize, o.Pool)
		if err != nil {
			return nil, err
		}
		base := ((o.Batch * h) + hd) * tq * tk
		for q := 0; q < tq; q++ {
			if err := g.AddRow(q, data[base+q*tk:base+(q+1)*tk]); err != nil {
				return nil, err
			}
		}
		grids[i] = g
	}
	f := Figure(grids, heads, o)
	f.ID = fmt.Sprintf("attention-L%d-b%d", o.Layer, o.Batch)
	f.Options = append([]report.Option{
		{Name: "capture", Value: path, Source: "--capture"},
		{Name: "tensor", Value: fmt.Sprintf("%s %v (%s)", name, info.Shape, info.DType), Source: "probe capture: post-softmax, pre-gate"},
		{Name: "batch", Value: fmt.Sprint(o.Batch), Source: "--batch"},
	}, f.Options...)
	return f, nil
}

// Figure draws one panel per grid (head), with Â^γ on the magma colormap
// scaled from 0 to each panel's largest value (as imshow's default does in
// the RFA author's plots), query 0 at the top.
func Figure(grids []*Grid, heads []int, o Options) *report.Figure {
	o.defaults()
	var xTok, yTok []string
	if g := grids[0]; len(o.Tokens) >= max(g.Tq, g.Tk) {
		xTok, yTok = blockTokens(o.Tokens[:g.Tk], g.colBlock, g.Cols), blockTokens(o.Tokens[:g.Tq], g.rowBlock, g.Rows)
	}
	var panels []report.Panel
	for i, g := range grids {
		v := g.Values()
		mx := 0.0
		for j := range v {
			v[j] = math.Pow(math.Max(v[j], 0), o.Gamma)
			mx = math.Max(mx, v[j])
		}
		if mx == 0 {
			mx = 1
		}
		label := "Â"
		if o.Gamma != 1 {
			label = fmt.Sprintf("Â^%g", o.Gamma)
		}
		panels = append(panels, report.Panel{
			Title: fmt.Sprintf("layer %d, head %d", o.Layer, heads[i]), XLabel: "key position j", YLabel: "query position i", YDown: true,
			Heatmap: &report.Heatmap{Rows: g.Rows, Cols: g.Cols, Z: v, X0: -0.5, DX: float64(g.Tk) / float64(g.Cols),
				Y0: -0.5, DY: float64(g.Tq) / float64(g.Rows), Scale: report.ColorScale{Label: label, Map: report.Magma(0, mx)},
				XTokens: xTok, YTokens: yTok},
		})
	}
	g := grids[0]
	block := "none (one cell per token pair)"
	if g.Rows < g.Tq || g.Cols < g.Tk {
		block = fmt.Sprintf("%d×%d blocks of ≈%.1f queries × %.1f keys, pooled by %s", g.Rows, g.Cols,
			float64(g.Tq)/float64(g.Rows), float64(g.Tk)/float64(g.Cols), g.Pool)
	}
	cols := 2
	if len(panels) == 1 {
		cols = 1
	}
	return &report.Figure{
		ID:    fmt.Sprintf("attention-L%d", o.Layer),
		Title: fmt.Sprintf("Attention maps — layer %d (T = %d)", o.Layer, g.Tq),
		Caption: fmt.Sprintf("Post-softmax attention Â[i, j] of each head (rows: queries, columns: keys; causal, so the upper triangle is 0), drawn as "+
			"Â^%g with the magma colormap from 0 to each head's maximum, as the RFA paper's attention maps (App. F.3, Â^0.25). Downsampling: %s; the "+
			"exponent is applied after pooling. Axes are labelled in token positions%s.", o.Gamma, block, tokenNote(xTok)),
		Options: []report.Option{
			{Name: "layer", Value: fmt.Sprint(o.Layer), Source: "--layer"},
			{Name: "heads", Value: fmt.Sprint(heads), Source: "--heads"},
			{Name: "contrast γ", Value: fmt.Sprint(o.Gamma), Source: "--gamma (RFA App. F.3: 0.25)"},
			{Name: "downsampling", Value: block, Source: fmt.Sprintf("--max-size %d, --pool %s (max keeps isolated sharp keys visible; mean gives the average weight per pair, masked cells as 0)", o.MaxSize, o.Pool)},
			{Name: "colour scale", Value: "magma, 0 to each head's maximum of Â^γ", Source: "choice (imshow's default per panel in the RFA plots)"},
		},
		Panels:  panels,
		Columns: cols, PanelWidth: 5.2, PanelHeight: 4.6,
	}
}

// blockTokens is the text of each of n blocks of a sequence of tokens:
// the token itself for a block of one, else the block's tokens joined and
// cut to 24 characters.
func blockTokens(tokens []string, block []int, n int) []string {
	out := make([]string, n)
	for i, t := range tokens {
		out[block[i]] += t
	}
	for b, s := range out {
		if r := []rune(s); len(r) > 24 {
			out[b] = string(r[:23]) + "…"
		}
	}
	return out
}

// tokenNote says how the caption's map shows token strings.
func tokenNote(cells []string) string {
	switch {
	case cells == nil:
		return ""
	case len(cells) <= 40:
		return " and by token (whitespace shown as ␣ and ↵); hovering a cell shows both tokens"
	}
	return "; hovering a cell shows its tokens"
}
