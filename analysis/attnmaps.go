package analysis

import (
	"fmt"

	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// AttnMapSpec chooses the attention maps StreamAttentionMaps draws.
type AttnMapSpec struct {
	Layer int
	// Heads are the heads drawn (nil: every head of Layer). On a Gated
	// DeltaNet layer a head is a value head.
	Heads []int
	// MaxSize is the largest number of blocks per side of a grid (≤ 0: one
	// cell per token pair).
	MaxSize int
	// Pool is attngrid.PoolMax or attngrid.PoolMean.
	Pool string
	// Decayed also streams A = Â ⊙ E, with E(τ) of model.RFAHeadParams.Kernel
	// at lag τ = i − j: the weights an RFA layer sums its values with (RFA
	// models only).
	Decayed bool
}

// StreamAttentionMaps runs one forward pass of the token ids and streams
// the attention rows of s.Layer's heads into downsampling grids: no T×T
// matrix exists, whatever T, only O(T) memory per head beyond the grids.
// Keys beyond a row's query count as 0 (the causal mask); a Gated DeltaNet
// layer's signed effective attention W enters as |W|. The stream is
// registered on opt.Hooks when it is set (its other hooks run in the same
// pass), else on a fresh set. report/attnmap draws the result.
func StreamAttentionMaps(m *model.Model, ids []int, s AttnMapSpec, opt model.Options) (*attngrid.Maps, error) {
	T := len(ids)
	if T == 0 {
		return nil, fmt.Errorf("attention maps: no tokens")
	}
	c := &m.Config
	if s.Layer < 0 || s.Layer >= c.Layers {
		return nil, fmt.Errorf("attention maps: layer %d out of range (the model has %d layers)", s.Layer, c.Layers)
	}
	nHeads := c.Heads
	if c.DeltaNet != nil && c.DeltaNet.Linear[s.Layer] {
		nHeads = c.DeltaNet.ValueHeads
	}
	heads := s.Heads
	if heads == nil {
		for h := 0; h < nHeads; h++ {
			heads = append(heads, h)
		}
	}
	var params []model.RFAHeadParams
	if s.Decayed {
		all, err := m.RFAParams()
		if err != nil {
			return nil, fmt.Errorf("attention maps: the decayed attention A = Â ⊙ E exists for RFA models only: %w", err)
		}
		if params, err = LayerParams(all, s.Layer); err != nil {
			return nil, err
		}
	}
	st := &attnMapStream{index: map[int]int{}}
	for i, h := range heads {
		if h < 0 || h >= nHeads {
			return nil, fmt.Errorf("attention maps: head %d out of range (layer %d has %d heads)", h, s.Layer, nHeads)
		}
		if _, dup := st.index[h]; dup {
			return nil, fmt.Errorf("attention maps: head %d given twice", h)
		}
		st.index[h] = i
		g, err := attngrid.NewGrid(T, T, s.MaxSize, s.Pool)
		if err != nil {
			return nil, err
		}
		st.hat = append(st.hat, g)
		st.scratch = append(st.scratch, make([]float32, T))
		if s.Decayed {
			g, _ := attngrid.NewGrid(T, T, s.MaxSize, s.Pool)
			st.dec = append(st.dec, g)
			E := make([]float64, T)
			for lag := range E {
				_, E[lag] = params[h].Kernel(float64(lag))
			}
			st.decay = append(st.decay, E)
		}
	}
	hs := opt.Hooks
	if hs == nil {
		hs = &hooks.Set{}
		opt.Hooks = hs
	}
	hs.Stream(s.Layer, st)
	if _, err := m.Forward([][]int{ids}, opt); err != nil {
		return nil, err
	}
	return &attngrid.Maps{Layer: s.Layer, T: T, Heads: heads, Hat: st.hat, Decayed: st.dec, Pool: s.Pool, MaxSize: s.MaxSize}, nil
}

// attnMapStream is the hooks.DeltaConsumer behind StreamAttentionMaps: each
// streamed row of a wanted head of sequence 0 goes into that head's grids.
// Different heads may arrive concurrently (never the same head), so each
// has its own grids and row buffer.
type attnMapStream struct {
	index   map[int]int // head → position in Heads
	hat     []*attngrid.Grid
	dec     []*attngrid.Grid
	decay   [][]float64 // per position: E(lag), lag 0..T−1 (decayed maps only)
	scratch [][]float32
}

func (s *attnMapStream) ConsumeAttn(t *hooks.AttnTile) error { return s.add(t, false) }

func (s *attnMapStream) ConsumeDelta(t *hooks.AttnTile) error { return s.add(t, true) }

// add adds the tile's rows, keys beyond the query as 0 and |w| for signed
// rows, to the head's grids.
func (s *attnMapStream) add(t *hooks.AttnTile, signed bool) error {
	i, ok := s.index[t.Head]
	if !ok || t.Batch != 0 {
		return nil
	}
	buf := s.scratch[i]
	for r := 0; r < t.Rows; r++ {
		q := t.Q0 + r
		row := t.Row(r)
		copy(buf, row)
		clear(buf[len(row):])
		if signed {
			for j, x := range buf[:len(row)] {
				if x < 0 {
					buf[j] = -x
				}
			}
		}
		if err := s.hat[i].AddRow(q, buf); err != nil {
			return err
		}
		if s.dec != nil && !signed {
			E := s.decay[i]
			for j := range row {
				buf[j] = float32(float64(row[j]) * E[q-j])
			}
			if err := s.dec[i].AddRow(q, buf); err != nil {
				return err
			}
		}
	}
	return nil
}
