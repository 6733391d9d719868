// Package attnmap draws attention maps — the [T, T] post-softmax attention
// of chosen heads of one layer — as magma heatmaps, downsampled for long T
// and optionally contrast-stretched as Â^γ (RFA App. F.3 shows Â^0.25).
//
// It draws pooled grids (analysis/attngrid), whose rows stream in one at a
// time, so a map never needs the full T×T matrix of more than one head:
// FromCapture feeds the rows of a `probe capture` file's
// blocks.{l}.attn.hook_pattern [batch, head, query, key] tensor;
// analysis.StreamAttentionMaps feeds those of a forward pass.
package attnmap

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/report"
)

// Options choose what to draw.
type Options struct {
	Layer   int
	Heads   []int   // nil: every head
	Batch   int     // which sequence of the captured batch
	Gamma   float64 // contrast exponent: Â^γ (RFA uses 0.25); 1 draws Â itself
	Pool    string  // attngrid.PoolMax or attngrid.PoolMean
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
		o.Pool = attngrid.PoolMax
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
	grids := make([]*attngrid.Grid, len(heads))
	for i, hd := range heads {
		g, err := attngrid.NewGrid(tq, tk, o.MaxSize, o.Pool)
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
func Figure(grids []*attngrid.Grid, heads []int, o Options) *report.Figure {
	o.defaults()
	var xTok, yTok []string
	if g := grids[0]; len(o.Tokens) >= max(g.Tq, g.Tk) {
		xTok, yTok = blockTokens(o.Tokens[:g.Tk], g.ColBlock, g.Cols), blockTokens(o.Tokens[:g.Tq], g.RowBlock, g.Rows)
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
