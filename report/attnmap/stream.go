package attnmap

import (
	"fmt"
	"sync"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/report"
)

// FromModel runs m on one sequence of token ids and draws the attention
// maps of layer o.Layer (heads o.Heads, every head when nil), each head's
// rows streamed straight into its downsampling grid as the pass produces
// them: no T×T matrix exists, whatever the length. Softmax layers stream
// their post-softmax rows; a Gated DeltaNet layer its effective attention W
// (signed: the map then shows |W|). Options as for FromCapture (Batch is
// ignored: there is one sequence); o.Tokens labels positions.
func FromModel(m *model.Model, ids []int, o Options) (*report.Figure, error) {
	o.defaults()
	c := &m.Config
	if o.Layer < 0 || o.Layer >= c.Layers {
		return nil, fmt.Errorf("attnmap: layer %d: the model has %d layers", o.Layer, c.Layers)
	}
	heads := o.Heads
	nHeads := c.Heads
	if c.DeltaNet != nil && c.DeltaNet.Linear[o.Layer] {
		nHeads = c.DeltaNet.ValueHeads
	}
	if heads == nil {
		for h := 0; h < nHeads; h++ {
			heads = append(heads, h)
		}
	}
	T := len(ids)
	st := &gridStream{grids: map[int]*Grid{}}
	for _, h := range heads {
		if h < 0 || h >= nHeads {
			return nil, fmt.Errorf("attnmap: head %d: layer %d has %d heads", h, o.Layer, nHeads)
		}
		g, err := NewGrid(T, T, o.MaxSize, o.Pool)
		if err != nil {
			return nil, err
		}
		st.grids[h] = g
	}
	hs := &hooks.Set{}
	hs.Stream(o.Layer, st)
	if _, err := m.Forward([][]int{ids}, model.Options{Hooks: hs, AllowExtrapolation: true}); err != nil {
		return nil, err
	}
	if st.err != nil {
		return nil, st.err
	}
	grids := make([]*Grid, len(heads))
	for i, h := range heads {
		grids[i] = st.grids[h]
	}
	return Figure(grids, heads, o), nil
}

// gridStream is the attention consumer of FromModel: it adds each streamed
// row of a chosen head to the head's grid, keys beyond the row's query as
// zeros (the causal mask).
type gridStream struct {
	mu    sync.Mutex
	grids map[int]*Grid
	err   error
}

func (s *gridStream) ConsumeAttn(a *hooks.AttnTile) error { return s.add(a, false) }

func (s *gridStream) ConsumeDelta(a *hooks.AttnTile) error { return s.add(a, true) }

func (s *gridStream) add(a *hooks.AttnTile, signed bool) error {
	g := s.grids[a.Head]
	if g == nil || a.Batch != 0 {
		return nil
	}
	row := make([]float32, a.T)
	s.mu.Lock() // heads stream concurrently; their grids are separate, but AddRow is cheap beside the pass
	defer s.mu.Unlock()
	for r := 0; r < a.Rows; r++ {
		clear(row)
		for j, x := range a.Row(r) {
			if signed && x < 0 {
				x = -x
			}
			row[j] = x
		}
		if err := g.AddRow(a.Q0+r, row); err != nil {
			s.err = err
			return err
		}
	}
	return nil
}
