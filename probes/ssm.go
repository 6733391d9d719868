package probes

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"
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
// blocks.{l}.ssm.hook_x, hook_B_group, hook_dt and hook_decay. The state
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
		hs.Add(hooks.Name(hooks.SSMBGroup, l), keep(&bb)) // per group: hook_B would make the pass repeat B and C per head
		hs.Add(hooks.Name(hooks.SSMDt, l), keep(&dt))
		hs.Add(hooks.Name(hooks.SSMDecay, l), func(name string, _ int, t *tensor.Dense) error {
			if x == nil || bb == nil || dt == nil {
				return fmt.Errorf("probes: Mamba-2 filter: %s issued before hook_x, hook_B_group and hook_dt of layer %d", name, l)
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
// layer's hook values x [B, T, H, P], B [B, T, G, N] per group of H/G
// heads (hook_B_group; G = H, hook_B's repetition per head, is accepted
// too), dt and decay [B, T, H] (f's Dk is N, Dv is P); Innovation stays
// NaN. Each group's B in float64 and its chunk Gram matrices are formed
// once (ssmGroupGrams), then the heads run in parallel, each in float64
// chunks (ssmStateNorms).
func (f *GDNFilter) SetSSMLayer(l int, x, bb, dt, decay []float32) error {
	B, T, H, N, P := f.B, f.T, f.Hv, f.Dk, f.Dv
	if l < 0 || l >= len(f.slot) || f.slot[l] < 0 {
		return fmt.Errorf("probes: Mamba-2 filter: layer %d is not one of the measured layers %v", l, f.Layers)
	}
	G := len(bb) / max(1, B*T*N)
	if len(x) != B*T*H*P || G < 1 || len(bb) != B*T*G*N || H%G != 0 || len(dt) != B*T*H || len(decay) != B*T*H {
		return fmt.Errorf("probes: Mamba-2 filter layer %d: x %d, B %d, dt %d, decay %d values, want [B=%d, T=%d, H=%d] × P %d, [B, T, groups dividing H] × N %d, [B, T, H]",
			l, len(x), len(bb), len(dt), len(decay), B, T, H, P, N)
	}
	s := f.slot[l]
	C := min(ssmNormChunk, T)
	chunks := (T + C - 1) / C
	per := T*N + chunks*C*C // one group's B [T, N] and Gram blocks [chunks, C, C]
	f.ssmGroups = grow(f.ssmGroups, B*G*per)
	eachHead(B*G, f.Opt.Threads, func() func(j int) {
		return func(j int) {
			b, g := j/G, j%G
			grp := f.ssmGroups[j*per : (j+1)*per]
			ssmGroupGrams(grp[:T*N], grp[T*N:], bb[(b*T*G+g)*N:], T, G*N, N, C)
		}
	})
	eachHead(B*H, f.Opt.Threads, func() func(j int) {
		ws := newSSMNormScratch(C, P, N)
		return func(j int) {
			b, h := j/H, j%H
			at := f.Index(b, s, h, 0)
			for t := 0; t < T; t++ {
				r := (b*T+t)*H + h
				a, g := float64(decay[r]), float64(dt[r])
				f.Beta[at+t], f.Decay[at+t], f.Horizon[at+t] = g, a, 1/(1-a)
			}
			grp := f.ssmGroups[(b*G+h/(H/G))*per:][:per]
			r0 := b*T*H + h
			ssmStateNorms(f.StateNorm[at:at+T], x[r0*P:], grp[:T*N], grp[T*N:], dt[r0:], decay[r0:], T, H*P, H, P, N, ws)
		}
	})
	return nil
}

// ssmNormChunk is the rows per chunk of ssmStateNorms.
const ssmNormChunk = 64

// ssmNormScratch is ssmStateNorms' float64 scratch for chunks of up to C
// rows of head width P and state size N.
type ssmNormScratch struct {
	C     int
	S     []float64 // [P, N] the state at the chunk's start
	X, U  []float64 // [C, P]: x; B·Sᵀ
	XW    []float64 // [P, C]: (diag(w)·x)ᵀ for the state update
	Gx, w []float64 // [C, C]: x·xᵀ; [C] the current weights
	u     []float64 // [C]: x_jᵀ·S·B_j
}

func newSSMNormScratch(C, P, N int) *ssmNormScratch {
	return &ssmNormScratch{C: C, S: make([]float64, P*N), X: make([]float64, C*P), U: make([]float64, C*P), XW: make([]float64, C*P),
		Gx: make([]float64, C*C), w: make([]float64, C), u: make([]float64, C)}
}

// ssmGroupGrams writes one sequence's B of one group (row t at t·ldb, N
// wide) into Bm [T, N] in float64 and, per chunk k of C rows (c = min(C,
// T − k·C)), its Gram matrix B_k·B_kᵀ [c, c] at Gb[k·C·C:]: the part of
// ssmStateNorms that the heads of a group share.
func ssmGroupGrams(Bm, Gb []float64, bb []float32, T, ldb, N, C int) {
	for t := 0; t < T; t++ {
		for k, v := range bb[t*ldb:][:N] {
			Bm[t*N+k] = float64(v)
		}
	}
	impl := blas64.Implementation()
	for t0, k := 0, 0; t0 < T; t0, k = t0+C, k+1 {
		c := min(C, T-t0)
		Bk := Bm[t0*N : (t0+c)*N]
		impl.Dgemm(blas.NoTrans, blas.Trans, c, c, N, 1, Bk, N, Bk, N, 0, Gb[k*C*C:][:c*c], c)
	}
}

// ssmStateNorms sets dst[t] = ‖S_t‖_F for the state S_t = a_t S_{t−1} +
// dt_t x_t B_tᵀ (S_{−1} = 0) of one sequence and head, with row t of x at
// t·ldx, of dt and a at t·ldd, and its group's B in float64 with the Gram
// matrices of its chunks of ws.C rows (Bm, Gb: ssmGroupGrams), in float64
// without forming S_t: per chunk of c rows with S the state at its start,
// b_i = Π_{r≤i} a_r and w_j = Π_{j<r≤i} a_r·dt_j,
//
//	‖S_i‖² = b_i²‖S‖² + 2 b_i Σ_j w_j (x_jᵀ S B_j) + Σ_{j,k} w_j w_k (x_j·x_k)(B_j·B_k)
//
// the last two sums advanced row by row (L_i = a_i L_{i−1} + dt_i u_i;
// Q_i = a_i² Q_{i−1} + 2 a_i dt_i Σ_{j<i} w_j M_ij + dt_i² M_ii), then
// S ← b_{c−1} S + (diag(w) X)ᵀ B. The products (B·Sᵀ, x's Gram matrix,
// the update: 3·P·N + c·P multiply-adds per row; B's Gram matrix c·N per
// row and group) run on the project's float64 matrix kernels, O(c) per
// row otherwise; the step-by-step recurrence's 2·P·N per row in scalar
// loops gives the same values to float64 rounding
// (TestSSMStateNormsEqualRecurrence).
func ssmStateNorms(dst []float64, x []float32, Bm, Gb []float64, dt, a []float32, T, ldx, ldd, P, N int, ws *ssmNormScratch) {
	impl := blas64.Implementation()
	S := ws.S
	clear(S)
	for t0, k := 0, 0; t0 < T; t0, k = t0+ws.C, k+1 {
		c := min(ws.C, T-t0)
		X, U, u, w := ws.X[:c*P], ws.U[:c*P], ws.u[:c], ws.w[:c]
		Bk, Gx, Gbk := Bm[t0*N:(t0+c)*N], ws.Gx[:c*c], Gb[k*ws.C*ws.C:][:c*c]
		for j := 0; j < c; j++ {
			for p, v := range x[(t0+j)*ldx:][:P] {
				X[j*P+p] = float64(v)
			}
		}
		var n0 float64
		for _, v := range S {
			n0 += v * v
		}
		impl.Dgemm(blas.NoTrans, blas.Trans, c, P, N, 1, Bk, N, S, N, 0, U, P) // B·Sᵀ
		for j := 0; j < c; j++ {
			var d float64
			for p, v := range X[j*P : (j+1)*P] {
				d += v * U[j*P+p]
			}
			u[j] = d
		}
		impl.Dgemm(blas.NoTrans, blas.Trans, c, c, P, 1, X, P, X, P, 0, Gx, c)
		bprod, L, Q := 1.0, 0.0, 0.0
		for i := 0; i < c; i++ {
			ai, di := float64(a[(t0+i)*ldd]), float64(dt[(t0+i)*ldd])
			var cross float64
			for j := 0; j < i; j++ {
				cross += w[j] * Gx[i*c+j] * Gbk[i*c+j]
			}
			Q = ai*ai*Q + 2*ai*di*cross + di*di*Gx[i*c+i]*Gbk[i*c+i]
			L = ai*L + di*u[i]
			bprod *= ai
			for j := 0; j < i; j++ {
				w[j] *= ai
			}
			w[i] = di
			dst[t0+i] = math.Sqrt(max(0, bprod*bprod*n0+2*bprod*L+Q))
		}
		// (diag(w)X)ᵀ formed transposed [P, c], so that the update is a
		// product of untransposed operands (the project's kernels run
		// only those; a transposed A falls back to gonum's, 4–5× slower)
		XWt := ws.XW[:P*c]
		for j := 0; j < c; j++ {
			for p, v := range X[j*P : (j+1)*P] {
				XWt[p*c+j] = w[j] * v
			}
		}
		impl.Dgemm(blas.NoTrans, blas.NoTrans, P, N, c, 1, XWt, c, Bk, N, bprod, S, N) // S ← b·S + (diag(w)X)ᵀ·B
	}
}
