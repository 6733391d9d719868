package probes

import (
	"fmt"
	"math"
	"runtime"

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
// once (ssmGroupGrams); then blocks of a group's heads run in parallel,
// each block's state norms in float64 chunks with one matrix product per
// chunk for all its heads (ssmStateNorms). A group's heads are split into
// as many blocks as make at least two per thread: larger blocks make
// larger products, more blocks keep the threads busy.
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
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			at := f.Index(b, s, h, 0)
			for t := 0; t < T; t++ {
				r := (b*T+t)*H + h
				a, g := float64(decay[r]), float64(dt[r])
				f.Beta[at+t], f.Decay[at+t], f.Horizon[at+t] = g, a, 1/(1-a)
			}
		}
	}
	C := min(ssmNormChunk, T)
	chunks := (T + C - 1) / C
	per := T*N + chunks*N*C + chunks*C*C // one group's B [T, N], Bᵀ and Gram blocks [chunks, N, C], [chunks, C, C]
	f.ssmGroups = grow(f.ssmGroups, B*G*per)
	threads := f.Opt.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	eachHead(B*G, threads, func() func(j int) {
		return func(j int) {
			b, g := j/G, j%G
			grp := f.ssmGroups[j*per : (j+1)*per]
			ssmGroupGrams(grp[:T*N], grp[T*N:T*N+chunks*N*C], grp[T*N+chunks*N*C:], bb[(b*T*G+g)*N:], T, G*N, N, C)
		}
	})
	rep := H / G
	nb := min(rep, (2*threads+B*G-1)/(B*G)) // blocks per group
	hb := (rep + nb - 1) / nb               // heads per block
	nb = (rep + hb - 1) / hb
	eachHead(B*G*nb, threads, func() func(j int) {
		ws := newSSMNormScratch(C, hb, P, N)
		return func(j int) {
			b, g, k := j/(G*nb), j/nb%G, j%nb
			h0 := g*rep + k*hb
			nh := min(hb, (g+1)*rep-h0)
			grp := f.ssmGroups[(b*G+g)*per:][:per]
			r0 := b*T*H + h0
			ssmStateNorms(f.StateNorm[f.Index(b, s, h0, 0):][:nh*T], x[r0*P:], grp[:T*N], grp[T*N:T*N+chunks*N*C], grp[T*N+chunks*N*C:], dt[r0:], decay[r0:], T, H*P, H, nh, P, N, ws)
		}
	})
	return nil
}

// ssmNormChunk is the rows per chunk of ssmStateNorms.
const ssmNormChunk = 64

// ssmNormScratch is ssmStateNorms' float64 scratch for chunks of up to C
// rows of up to nh heads of width P and state size N.
type ssmNormScratch struct {
	C   int
	S   []float64 // [N, nh·P] the heads' states at the chunk's start, transposed
	X   []float64 // [C, nh·P]: x of the heads, row by row
	Xt  []float64 // [nh·P, C]: its transpose
	U   []float64 // [C, nh·P]: B·Sᵀ
	XW  []float64 // [C, nh·P]: diag(w)·x of each head for the state update
	Gx  []float64 // [C, C]: one head's x·xᵀ
	w   []float64 // [C]: one head's current weights
	u   []float64 // [C]: one head's x_jᵀ·S·B_j
	nrm []float64 // [nh]: ‖S‖² of each head at the chunk's start
}

func newSSMNormScratch(C, nh, P, N int) *ssmNormScratch {
	return &ssmNormScratch{C: C, S: make([]float64, nh*P*N), X: make([]float64, C*nh*P), Xt: make([]float64, C*nh*P), U: make([]float64, C*nh*P),
		XW: make([]float64, nh*P*C), Gx: make([]float64, C*C), w: make([]float64, C), u: make([]float64, C), nrm: make([]float64, nh)}
}

// ssmGroupGrams writes one sequence's B of one group (row t at t·ldb, N
// wide) into Bm [T, N] in float64 and, per chunk k of C rows (c = min(C,
// T − k·C)), its transpose B_kᵀ [N, c] at Bt[k·N·C:] and its Gram matrix
// B_k·B_kᵀ [c, c] at Gb[k·C·C:]: the part of ssmStateNorms that the heads
// of a group share.
func ssmGroupGrams(Bm, Bt, Gb []float64, bb []float32, T, ldb, N, C int) {
	for t := 0; t < T; t++ {
		for k, v := range bb[t*ldb:][:N] {
			Bm[t*N+k] = float64(v)
		}
	}
	impl := blas64.Implementation()
	for t0, k := 0, 0; t0 < T; t0, k = t0+C, k+1 {
		c := min(C, T-t0)
		Bk, Btk := Bm[t0*N:(t0+c)*N], Bt[k*N*C:][:N*c]
		for j := 0; j < c; j++ {
			for n, v := range Bk[j*N : (j+1)*N] {
				Btk[n*c+j] = v
			}
		}
		impl.Dgemm(blas.NoTrans, blas.NoTrans, c, c, N, 1, Bk, N, Btk, c, 0, Gb[k*C*C:][:c*c], c)
	}
}

// ssmStateNorms sets, for nh heads that share one group's B, dst[i·T + t]
// = ‖S_t‖_F of head i's state S_t = a_t S_{t−1} + dt_t x_t B_tᵀ (S_{−1} =
// 0) over one sequence: row t of x (the heads' nh·P values, head i's at
// i·P) at t·ldx, of dt and a (nh values) at t·ldd, and the group's B in
// float64 with the transposes and Gram matrices of its chunks of ws.C rows
// (Bm, Bt, Gb: ssmGroupGrams). In float64, without forming S_t: per chunk
// of c rows with S the state at its start, b_i = Π_{r≤i} a_r and w_j =
// Π_{j<r≤i} a_r·dt_j,
//
//	‖S_i‖² = b_i²‖S‖² + 2 b_i Σ_j w_j (x_jᵀ S B_j) + Σ_{j,k} w_j w_k (x_j·x_k)(B_j·B_k)
//
// the last two sums advanced row by row (L_i = a_i L_{i−1} + dt_i u_i;
// Q_i = a_i² Q_{i−1} + 2 a_i dt_i Σ_{j<i} w_j M_ij + dt_i² M_ii), then
// S ← b_{c−1} S + (diag(w) X)ᵀ B. The states are kept transposed, Sᵀ
// [N, nh·P], so that B·Sᵀ and the update are one product per chunk for
// all nh heads ([c, N]·[N, nh·P] and Bᵀ·diag(w)X, [N, c]·[c, nh·P]) and
// x's Gram matrix one per head (X·Xᵀ), all of untransposed operands on
// the project's float64 matrix kernels (a transposed operand runs at half
// their rate or falls back to gonum's): 2·P·N + c·P multiply-adds per row
// and head, B's Gram matrix c·N per row and group, O(P·N/c + c) per row
// otherwise. The step-by-step recurrence's 2·P·N per row in scalar loops
// gives the same values to float64 rounding
// (TestSSMStateNormsEqualRecurrence).
func ssmStateNorms(dst []float64, x []float32, Bm, Bt, Gb []float64, dt, a []float32, T, ldx, ldd, nh, P, N int, ws *ssmNormScratch) {
	impl := blas64.Implementation()
	W := nh * P
	S := ws.S[:N*W]
	clear(S)
	for t0, k := 0, 0; t0 < T; t0, k = t0+ws.C, k+1 {
		c := min(ws.C, T-t0)
		X, Xt, U, XW, u, w, nrm := ws.X[:c*W], ws.Xt[:W*c], ws.U[:c*W], ws.XW[:c*W], ws.u[:c], ws.w[:c], ws.nrm[:nh]
		Bk, Btk, Gx, Gbk := Bm[t0*N:(t0+c)*N], Bt[k*N*ws.C:][:N*c], ws.Gx[:c*c], Gb[k*ws.C*ws.C:][:c*c]
		for j := 0; j < c; j++ {
			for p, v := range x[(t0+j)*ldx:][:W] {
				f := float64(v)
				X[j*W+p] = f
				Xt[p*c+j] = f
			}
		}
		clear(nrm)
		for n := 0; n < N; n++ {
			for hd := range nrm {
				var s float64
				for _, v := range S[n*W+hd*P : n*W+(hd+1)*P] {
					s += v * v
				}
				nrm[hd] += s
			}
		}
		impl.Dgemm(blas.NoTrans, blas.NoTrans, c, W, N, 1, Bk, N, S, W, 0, U, W) // B·Sᵀ of every head
		for hd := 0; hd < nh; hd++ {
			for j := 0; j < c; j++ {
				var d float64
				for p, v := range X[j*W+hd*P : j*W+(hd+1)*P] {
					d += v * U[j*W+hd*P+p]
				}
				u[j] = d
			}
			impl.Dgemm(blas.NoTrans, blas.NoTrans, c, c, P, 1, X[hd*P:], W, Xt[hd*P*c:], c, 0, Gx, c)
			bprod, L, Q := 1.0, 0.0, 0.0
			for i := 0; i < c; i++ {
				ai, di := float64(a[(t0+i)*ldd+hd]), float64(dt[(t0+i)*ldd+hd])
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
				dst[hd*T+t0+i] = math.Sqrt(max(0, bprod*bprod*nrm[hd]+2*bprod*L+Q))
			}
			// diag(w)·X of the head, and its state scaled by b_{c−1}
			for j := 0; j < c; j++ {
				for p, v := range X[j*W+hd*P : j*W+(hd+1)*P] {
					XW[j*W+hd*P+p] = w[j] * v
				}
			}
			for n := 0; n < N; n++ {
				row := S[n*W+hd*P : n*W+(hd+1)*P]
				for p, v := range row {
					row[p] = bprod * v
				}
			}
		}
		impl.Dgemm(blas.NoTrans, blas.NoTrans, N, W, c, 1, Btk, c, XW, W, 1, S, W) // Sᵀ ← b·Sᵀ + Bᵀ·diag(w)X
	}
}
