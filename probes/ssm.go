package probes

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
)

// Mamba-2 read as a filter (Dao & Gu 2024; the mamba2 family's layers and
// Falcon-H1's SSM branch). Per head, with state S ∈ ℝ^{P×N},
//
//	S_t = a_t S_{t−1} + dt_t x_t B_tᵀ,   y_t = S_t C_t + D x_t,   a_t = exp(dt_t A)
//
// a time-varying linear predictor: forget (a_t), write the input with gain
// dt_t along B_t, read out along C_t. It has no innovation (nothing is
// compared with a prediction before the write). A GDNFilter measures it
// per (layer, head, token) into the same columns as Gated DeltaNet's:
//
//	Beta        dt_t          the input gain (the write's step)
//	Decay       a_t           forgetting; Horizon 1/(1 − a_t) tokens
//	Innovation  NaN           not defined for Mamba-2
//	StateNorm   ‖S_t‖_F       after step t (float64 recurrence on the hooked x, B, dt, decay)
//
// and from the exact effective attention rows M[t, 0..t] (y_t − D x_t =
// Σ_s M[t,s] x_s; the model streams them as hooks.DeltaConsumer tiles with
// the head's x as values) the W-row columns, exactly as for Gated
// DeltaNet. Build it with NewGDNFilter(B, T, nLayers, layers, heads,
// state size N, head width P, opt) and RegisterSSM.

// RegisterSSM adds f to hs for Mamba-2 layers: the effective-attention
// stream of every measured layer (unless Opt.NoRows) and functions at
// blocks.{l}.ssm.hook_x, hook_B, hook_dt and hook_decay. The state
// recurrence runs at hook_decay, which the model issues after the other
// three; f reads their buffers as they then are. In a layer that also has
// softmax attention (Falcon-H1's) the softmax rows go to attn when it is
// not nil — a GDNFilter over the attention heads (Hv the heads, Dv their
// width) whose W-row columns then hold each softmax row's n_eff (Kish's,
// which n_eff^W is on the simplex), first-token mass and dispersion, the
// per-token columns staying NaN — and are ignored otherwise.
func (f *GDNFilter) RegisterSSM(hs *hooks.Set, attn *GDNFilter) {
	for _, l := range f.Layers {
		if !f.Opt.NoRows {
			hs.Stream(l, ssmRows{f, attn})
		}
		var x, bb, dt []float32
		keep := func(dst *[]float32) hooks.Func {
			return func(_ string, _ int, t *tensor.Dense) error {
				*dst = t.Data().([]float32)
				return nil
			}
		}
		hs.Add(hooks.Name(hooks.SSMX, l), keep(&x))
		hs.Add(hooks.Name(hooks.SSMB, l), keep(&bb))
		hs.Add(hooks.Name(hooks.SSMDt, l), keep(&dt))
		hs.Add(hooks.Name(hooks.SSMDecay, l), func(name string, _ int, t *tensor.Dense) error {
			if x == nil || bb == nil || dt == nil {
				return fmt.Errorf("probes: Mamba-2 filter: %s issued before hook_x, hook_B and hook_dt of layer %d", name, l)
			}
			err := f.SetSSMLayer(l, x, bb, dt, t.Data().([]float32))
			x, bb, dt = nil, nil, nil
			return err
		})
	}
}

// ssmRows passes a Mamba-2 layer's effective-attention rows to its
// GDNFilter f and the softmax rows of the same layer (Falcon-H1's
// attention beside the SSM) to attn, or drops them when attn is nil.
type ssmRows struct{ f, attn *GDNFilter }

func (r ssmRows) ConsumeAttn(tile *hooks.AttnTile) error {
	if r.attn == nil {
		return nil
	}
	return r.attn.ConsumeDelta(tile)
}

func (r ssmRows) ConsumeDelta(tile *hooks.AttnTile) error { return r.f.ConsumeDelta(tile) }

// SetSSMLayer records dt (Beta), the decay a (Decay, Horizon) and the state
// norm ‖S_t‖_F of every (sequence, head) of Mamba-2 layer l from the
// layer's hook values x [B, T, H, P], B [B, T, H, N], dt and decay
// [B, T, H] (f's Dk is N, Dv is P); Innovation stays NaN. The heads run in
// parallel, each a float64 recurrence of P·N state.
func (f *GDNFilter) SetSSMLayer(l int, x, bb, dt, decay []float32) error {
	B, T, H, N, P := f.B, f.T, f.Hv, f.Dk, f.Dv
	if l < 0 || l >= len(f.slot) || f.slot[l] < 0 {
		return fmt.Errorf("probes: Mamba-2 filter: layer %d is not one of the measured layers %v", l, f.Layers)
	}
	if len(x) != B*T*H*P || len(bb) != B*T*H*N || len(dt) != B*T*H || len(decay) != B*T*H {
		return fmt.Errorf("probes: Mamba-2 filter layer %d: x %d, B %d, dt %d, decay %d values, want [B=%d, T=%d, H=%d] × P %d / N %d",
			l, len(x), len(bb), len(dt), len(decay), B, T, H, P, N)
	}
	s := f.slot[l]
	threads := f.Opt.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	var next sync.Mutex
	i := 0
	var wg sync.WaitGroup
	for w := 0; w < min(threads, B*H); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			S := make([]float64, P*N)
			for {
				next.Lock()
				j := i
				i++
				next.Unlock()
				if j >= B*H {
					return
				}
				b, h := j/H, j%H
				at := f.Index(b, s, h, 0)
				clear(S)
				for t := 0; t < T; t++ {
					r := (b*T+t)*H + h
					a, g := float64(decay[r]), float64(dt[r])
					f.Beta[at+t], f.Decay[at+t], f.Horizon[at+t] = g, a, 1/(1-a)
					xt, bt := x[r*P:(r+1)*P], bb[r*N:(r+1)*N]
					var norm float64
					for p, xv := range xt {
						u := g * float64(xv)
						row := S[p*N : (p+1)*N]
						for k, bv := range bt {
							v := a*row[k] + u*float64(bv)
							row[k] = v
							norm += v * v
						}
					}
					f.StateNorm[at+t] = math.Sqrt(norm)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}
