package model

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/filterlens/probe/hooks"
)

// The Mamba-2 mixer (Dao & Gu 2024, "Transformers are SSMs"; HF
// transformers Mamba2Mixer.torch_forward, FalconH1Mixer.torch_forward), the
// token mixer of the mamba2 family (mamba2.go) and the second token mixer
// of every Falcon-H1 layer (falcon_h1.go). Per sequence and head h, with
// state S ∈ ℝ^{P×N} (P the head width, N the state size) and S₀ = 0:
//
//	S_t = exp(dt_t·A_h)·S_{t−1} + dt_t·x_t·B_tᵀ,   y_t = S_t·C_t + D_h·x_t
//
// a time-varying linear filter: decay exp(dt·A) ∈ (0, 1), input gain dt,
// readout C. The recurrence is linear in x for fixed dt, B, C, so
// y_t = Σ_{s≤t} M[t,s]·x_s + D·x_t with the exact effective attention
//
//	M[t,s] = (C_t·B_s)·Π_{r=s+1..t} exp(dt_r·A)·dt_s    (ssmAttention)
//
// the "1-semiseparable" matrix of the paper's SSD view.

// SSMConfig holds the Mamba-2 mixers' settings of a model (config.json of
// mamba2: num_heads, head_dim, state_size, n_groups, conv_kernel,
// chunk_size, time_step_limit; of falcon_h1: the mamba_* fields and the
// µP multipliers of the mixer).
type SSMConfig struct {
	// Heads, HeadDim: the SSM heads and their width P; Inner = Heads·HeadDim
	// is the mixer's width I (Mamba-2: expand·hidden_size).
	Heads, HeadDim, Inner int
	// State is the state size N; Groups the groups of B and C (n_groups):
	// head h reads group h/(Heads/Groups).
	State, Groups int
	// ConvKernel is the causal depthwise convolution's width (conv_kernel).
	ConvKernel int
	// Chunk is the release's chunk_size (SSD's chunk). The pass runs the
	// recurrence, which the chunked scan equals (chunk invariance); the
	// value is kept for WriteHF and must be ≥ 1.
	Chunk int
	// DtMin, DtMax: time_step_limit, the clamp of dt after the softplus
	// (0, +Inf: none).
	DtMin, DtMax float64
	// ConvBias: conv1d has a bias (use_conv_bias); ProjBias: in_proj and
	// out_proj have biases (use_bias, Falcon-H1 mamba_proj_bias).
	ConvBias, ProjBias bool
	// NormGroups is the number of groups of the gated RMSNorm: 1 normalizes
	// the whole I (Mamba2's MambaRMSNormGated), n_groups each I/n_groups
	// channels (Falcon-H1's FalconH1RMSNormGated).
	NormGroups int
	// Eps is the gated RMSNorm's epsilon.
	Eps float64
	// InScale multiplies the mixer's input and OutScale its output
	// (Falcon-H1's ssm_in_multiplier, ssm_out_multiplier; 0: 1). Mup
	// multiplies in_proj's output per section [z | x | B | C | dt]
	// (Falcon-H1's ssm_multipliers, its mup_vector; nil: none).
	InScale, OutScale float32
	Mup               []float32
	// Attention says that every layer also has softmax attention beside
	// the mixer (Falcon-H1); otherwise the mixer is the layer's only token
	// mixer (Mamba-2).
	Attention bool
}

// convDim is the width of the convolved channels [x | B | C]: I + 2·G·N.
func (sc *SSMConfig) convDim() int { return sc.Inner + 2*sc.Groups*sc.State }

// projDim is in_proj's output width [z | x | B | C | dt]: 2·I + 2·G·N + H.
func (sc *SSMConfig) projDim() int { return sc.Inner + sc.convDim() + sc.Heads }

// check refuses settings the mixer cannot run, naming the config.json
// field (names as Mamba2Config's; the family's parse prefixes its own).
func (sc *SSMConfig) check() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"num_heads", sc.Heads}, {"head_dim", sc.HeadDim}, {"state_size", sc.State}, {"n_groups", sc.Groups},
		{"conv_kernel", sc.ConvKernel}, {"chunk_size", sc.Chunk}, {"norm groups", sc.NormGroups}} {
		if f.v <= 0 {
			return fmt.Errorf("field %s = %d must be positive", f.name, f.v)
		}
	}
	if sc.Heads*sc.HeadDim != sc.Inner {
		return fmt.Errorf("num_heads %d × head_dim %d = %d, but the mixer width (expand × hidden_size) is %d", sc.Heads, sc.HeadDim, sc.Heads*sc.HeadDim, sc.Inner)
	}
	if sc.Heads%sc.Groups != 0 {
		return fmt.Errorf("num_heads %d is not a multiple of n_groups %d (head h reads group h/(num_heads/n_groups))", sc.Heads, sc.Groups)
	}
	if sc.Inner%sc.NormGroups != 0 {
		return fmt.Errorf("the gated norm's %d groups do not divide the mixer width %d (n_groups)", sc.NormGroups, sc.Inner)
	}
	if sc.Mup != nil && len(sc.Mup) != 5 {
		return fmt.Errorf("field ssm_multipliers has %d values, want 5 (z, x, B, C, dt)", len(sc.Mup))
	}
	if math.IsNaN(sc.DtMin) || math.IsNaN(sc.DtMax) || sc.DtMin < 0 || sc.DtMin > sc.DtMax {
		return fmt.Errorf("field time_step_limit [%v, %v]: want 0 ≤ min ≤ max", sc.DtMin, sc.DtMax)
	}
	for _, p := range []struct {
		what string
		a, b int
	}{{"in_proj (2·I + 2·n_groups·state_size + num_heads rows)", sc.projDim(), 1}, {"state (num_heads × head_dim × state_size)", sc.Inner, sc.State}} {
		if p.a <= 0 || p.b <= 0 || p.a > maxConfigElems/p.b {
			return fmt.Errorf("%s = %d × %d elements exceeds %d", p.what, p.a, p.b, maxConfigElems)
		}
	}
	return nil
}

// ssmMixer is one layer's Mamba-2 mixer: settings and weights (HF names of
// Mamba2Mixer in brackets; P = projDim, Cv = convDim).
type ssmMixer struct {
	*SSMConfig
	D     int       // model width
	In    Weight    // [P, D] (in_proj.weight): [z | x | B | C | dt]
	InB   []float32 // [P] (in_proj.bias) or nil
	Conv  []float32 // [Cv, K] (conv1d.weight [Cv, 1, K])
	ConvB []float32 // [Cv] (conv1d.bias) or nil
	DtB   []float32 // [H] (dt_bias)
	ALog  []float32 // [H] (A_log)
	Skip  []float32 // [H] (D)
	Norm  []float32 // [I] (norm.weight)
	Out   Weight    // [D, I] (out_proj.weight)
	OutB  []float32 // [D] (out_proj.bias) or nil
	// Scan is the number of rows per chunk of the chunked scan
	// (ssmChunked): 0 selects ssmChunkRows (64), a negative value the
	// recurrence (ssmRecurrent). Both give the same values to float32
	// rounding; the release's chunk_size is not a numerical choice.
	Scan int
}

// readSSM reads one layer's Mamba-2 tensors under prefix p (…mixer. or
// …mamba.).
func readSSM(ld *loader, p string, D int, sc *SSMConfig) *ssmMixer {
	H, I, Cv, P, K := sc.Heads, sc.Inner, sc.convDim(), sc.projDim(), sc.ConvKernel
	w := &ssmMixer{SSMConfig: sc, D: D,
		In: ld.weight(p+"in_proj.weight", P, D), Conv: ld.get(p+"conv1d.weight", Cv, 1, K),
		DtB: ld.get(p+"dt_bias", H), ALog: ld.get(p+"A_log", H), Skip: ld.get(p+"D", H),
		Norm: ld.get(p+"norm.weight", I), Out: ld.weight(p+"out_proj.weight", D, I)}
	if sc.ConvBias {
		w.ConvB = ld.get(p+"conv1d.bias", Cv)
	}
	if sc.ProjBias {
		w.InB = ld.get(p+"in_proj.bias", P)
		w.OutB = ld.get(p+"out_proj.bias", D)
	}
	return w
}

// ssmBuffers are the mixer's per-pass values, token-major as the hooks
// show them (n = B·T rows).
type ssmBuffers struct {
	// proj is in_proj's output [n, P] (× InScale·Mup); once the
	// convolution and dt have read it, z [n, I] is packed into its first
	// n·I values and y [n, I] takes the next n·I (P ≥ 2·I), so that z and
	// y cost no storage of their own
	proj    []float32
	z, x, y []float32 // [n, I]
	// bb, c hold B and C [n, G, N] per group, or [n, H, N] repeated per
	// head when their hooks are registered (perHead; the hooks show, and
	// an intervention changes, each head's); bg, cg are the per-group
	// values the convolution writes (bb, c themselves unless perHead)
	bb, c   []float32
	bg, cg  []float32
	perHead bool
	G, H, N int
	dt      []float32 // [n, H]
	decay   []float32 // [n, H]
	a       []float32 // [H]
	state   []float32 // [B, H, P, N]
}

// scratchFloats is the storage of ssmBuffers for B sequences of T tokens,
// which the decoder pass lends from its arena: n·(P + I + 2·G·N + 2·H) +
// H + B·I·N floats (in_proj's output, which z and y reuse; x; B and C per
// group; dt and the decay; A; the final states).
func (w *ssmMixer) scratchFloats(B, T int) int {
	n, sc := B*T, w.SSMConfig
	return n*(sc.projDim()+sc.Inner+2*sc.Groups*sc.State+2*sc.Heads) + sc.Heads + B*sc.Inner*sc.State
}

// bOff returns the offset of head hd's B and C at row r, and ldb the
// distance between rows.
func (bf *ssmBuffers) bOff(r, hd int) (off, ldb int) {
	if bf.perHead {
		return (r*bf.H + hd) * bf.N, bf.H * bf.N
	}
	return (r*bf.G + hd/(bf.H/bf.G)) * bf.N, bf.G * bf.N
}

func (w *ssmMixer) buffers(scratch []float32, B, T int, perHead bool) *ssmBuffers {
	if need := w.scratchFloats(B, T); len(scratch) < need {
		scratch = make([]float32, need)
	}
	n, sc := B*T, w.SSMConfig
	take := func(k int) []float32 {
		s := scratch[:k:k]
		scratch = scratch[k:]
		return s
	}
	GN := sc.Groups * sc.State
	bf := &ssmBuffers{proj: take(n * sc.projDim()), x: take(n * sc.Inner),
		bb: take(n * GN), c: take(n * GN), dt: take(n * sc.Heads), decay: take(n * sc.Heads), a: take(sc.Heads),
		state: take(B * sc.Inner * sc.State), perHead: perHead, G: sc.Groups, H: sc.Heads, N: sc.State}
	bf.z, bf.y = bf.proj[:n*sc.Inner:n*sc.Inner], bf.proj[n*sc.Inner:2*n*sc.Inner:2*n*sc.Inner]
	bf.bg, bf.cg = bf.bb, bf.c
	if perHead {
		bf.bb, bf.c = make([]float32, n*sc.Heads*sc.State), make([]float32, n*sc.Heads*sc.State)
	}
	return bf
}

// mix runs the Mamba-2 mixer of layer l on the normalized input h [B·T, D]
// into out [B·T, D] (HF Mamba2Mixer.torch_forward without cache or mask):
//
//	[z | xBC | dt_raw] = (s_in·h)·W_inᵀ ⊙ mup,   xBC ← silu(causalconv(xBC) + b_conv),   [x | B | C] = xBC
//	dt = clamp(softplus(dt_raw + dt_bias), time_step_limit),   A = −exp(A_log),   decay = exp(dt·A)
//	y = SSM(x, dt, decay, B, C) + D·x  (per head; B, C of group h/(H/G))
//	out = s_out·(rmsnorm_g(y ⊙ silu(z)) ⊙ w_norm)·W_outᵀ   (RMS over NormGroups groups of I)
//
// with the hooks blocks.{l}.ssm.hook_z, hook_x, hook_B, hook_C, hook_dt,
// hook_A, hook_decay, hook_y, hook_final_state, hook_eff_attn (when
// hooked) and hook_out (before s_out); what a hook changes flows on (the
// recurrence reads decay, not A). The effective attention M streams to the
// layer's hooks.DeltaConsumers (ssmAttention). out may be h's storage: h is
// read only by in_proj.
func (w *ssmMixer) mix(m *Model, out, h, scratch []float32, l, B, T int, opt Options, run hookRun) error {
	sc := w.SSMConfig
	D, H, P, N, G, I, K := w.D, sc.Heads, sc.HeadDim, sc.State, sc.Groups, sc.Inner, sc.ConvKernel
	n, Pr, Cv := B*T, sc.projDim(), sc.convDim()
	if len(h) != n*D || len(out) != n*D {
		return fmt.Errorf("model: Mamba-2 layer %d: input %d and output %d values, want B·T·D = %d·%d·%d", l, len(h), len(out), B, T, D)
	}
	perHead := opt.Hooks.Has(hooks.Name(hooks.SSMB, l)) || opt.Hooks.Has(hooks.Name(hooks.SSMC, l))
	bf := w.buffers(scratch, B, T, perHead)

	// in_proj of s_in·h, times the per-section µP vector:
	// ((W·h)·s_in + b)·mup
	if sc.InScale == 0 && sc.Mup == nil {
		linearAs(opt.Compute, bf.proj, h, n, D, w.In, Pr, w.InB)
	} else {
		linearAs(opt.Compute, bf.proj, h, n, D, w.In, Pr, nil)
		sIn := sc.InScale
		if sIn == 0 {
			sIn = 1
		}
		mup, bias := make([]float32, Pr), make([]float32, Pr)
		ends := []int{I, 2 * I, 2*I + G*N, 2*I + 2*G*N, Pr}
		for j, sec := 0, 0; j < Pr; j++ {
			for j >= ends[sec] {
				sec++
			}
			mup[j] = 1
			if sc.Mup != nil {
				mup[j] = sc.Mup[sec]
			}
			if w.InB != nil {
				bias[j] = w.InB[j]
			}
		}
		parallelRows(n, Pr, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				row := bf.proj[r*Pr : (r+1)*Pr]
				for j, v := range row {
					row[j] = (v*sIn + bias[j]) * mup[j]
				}
			}
		})
	}
	// causal depthwise convolution (left zero padding) + bias, SiLU, one
	// row at a time, split into [x | B | C] per group
	rep := H / G
	parallelRows(n, Cv*K, func(lo, hi int) {
		o := make([]float32, Cv)
		for r := lo; r < hi; r++ {
			t := r % T
			if w.ConvB != nil {
				copy(o, w.ConvB)
			} else {
				clear(o)
			}
			for j := max(0, K-1-t); j < K; j++ {
				in := bf.proj[(r-(K-1-j))*Pr+I:][:Cv]
				for ch, v := range in {
					o[ch] += w.Conv[ch*K+j] * v
				}
			}
			for ch, v := range o {
				o[ch] = silu(v)
			}
			copy(bf.x[r*I:(r+1)*I], o[:I])
			copy(bf.bg[r*G*N:(r+1)*G*N], o[I:I+G*N])
			copy(bf.cg[r*G*N:(r+1)*G*N], o[I+G*N:])
		}
	})
	// dt = clamp(softplus(dt_raw + dt_bias)), A = −exp(A_log), decay = exp(dt·A)
	lo, hi := sc.DtMin, sc.DtMax
	for r := 0; r < n; r++ {
		raw := bf.proj[r*Pr+I+Cv:][:H]
		for hd, v := range raw {
			bf.dt[r*H+hd] = float32(min(max(float64(float32(softplus(v+w.DtB[hd]))), lo), hi))
		}
	}
	// in_proj's output is read: z packed into its first n·I values (row r
	// moves down from r·P to r·I, in row order, so that no row is
	// overwritten before it moves)
	for r := 0; r < n; r++ {
		copy(bf.z[r*I:(r+1)*I], bf.proj[r*Pr:r*Pr+I])
	}
	run(hooks.SSMZ, l, bf.z, B, T, I)
	// x and B per group; then, for their hooks, B and C repeated to the
	// heads of their group
	run(hooks.SSMX, l, bf.x, B, T, H, P)
	run(hooks.SSMBGroup, l, bf.bg, B, T, G, N)
	if perHead {
		parallelRows(n, H*N, func(lo, hi int) {
			for r := lo; r < hi; r++ {
				for hd := 0; hd < H; hd++ {
					g := hd / rep
					copy(bf.bb[(r*H+hd)*N:][:N], bf.bg[(r*G+g)*N:][:N])
					copy(bf.c[(r*H+hd)*N:][:N], bf.cg[(r*G+g)*N:][:N])
				}
			}
		})
		run(hooks.SSMB, l, bf.bb, B, T, H, N)
		run(hooks.SSMC, l, bf.c, B, T, H, N)
	}

	for hd := range bf.a {
		bf.a[hd] = float32(-math.Exp(float64(w.ALog[hd])))
	}
	run(hooks.SSMDt, l, bf.dt, B, T, H)
	run(hooks.SSMA, l, bf.a, H)
	for i, v := range bf.dt {
		bf.decay[i] = expf(v * bf.a[i%H])
	}
	run(hooks.SSMDecay, l, bf.decay, B, T, H)
	if err := ssmAttention(bf, B, T, H, P, N, l, opt); err != nil {
		return err
	}

	// the scan, per (sequence, head): chunked (default) or the recurrence
	chunk := cmp.Or(opt.SSMScan, w.Scan, ssmChunkRows)
	parallelRows(B*H, T*P*N, func(lo, hi int) {
		var sc *ssmChunk
		if chunk > 0 {
			sc = newSSMChunk(min(chunk, T), P)
		}
		for i := lo; i < hi; i++ {
			b, hd := i/H, i%H
			S := bf.state[i*P*N : (i+1)*P*N]
			clear(S)
			r0 := b * T
			x, y := bf.x[r0*I+hd*P:], bf.y[r0*I+hd*P:]
			off, ldb := bf.bOff(r0, hd)
			bb, cc := bf.bb[off:], bf.c[off:]
			dt, a := bf.dt[r0*H+hd:], bf.decay[r0*H+hd:]
			if chunk < 0 {
				ssmRecurrent(y, S, x, bb, cc, dt, a, T, I, ldb, H, P, N, w.Skip[hd])
			} else {
				ssmChunked(y, S, x, bb, cc, dt, a, T, I, ldb, H, P, N, w.Skip[hd], sc)
			}
		}
	})
	run(hooks.SSMY, l, bf.y, B, T, H, P)
	run(hooks.SSMFinalState, l, bf.state, B, H, P, N)

	// gated RMSNorm: (y ⊙ silu(z)) normalized over each of NormGroups
	// groups, times the weight; into y's storage, then out_proj
	gs := I / sc.NormGroups
	parallelRows(n, I, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			y, z := bf.y[r*I:(r+1)*I], bf.z[r*I:(r+1)*I]
			for j := range y {
				y[j] *= silu(z[j])
			}
			for g := 0; g < I; g += gs {
				yg := y[g : g+gs]
				inv := float32(1 / math.Sqrt(sumSquares(yg)/float64(gs)+sc.Eps))
				for j, v := range yg {
					yg[j] = w.Norm[g+j] * (v * inv)
				}
			}
		}
	})
	linearAs(opt.Compute, out, bf.y, n, I, w.Out, D, w.OutB)
	run(hooks.SSMOut, l, out, B, T, D)
	if s := sc.OutScale; s != 0 {
		for i := range out {
			out[i] *= s
		}
	}
	return nil
}

// ssmChunkRows is the default number of rows per chunk of the chunked
// scan (ssmChunked); BenchmarkSSMScan compares it with the recurrence.
const ssmChunkRows = 64

// ssmRecurrent runs the SSM of one sequence and head step by step: for
// t < T, with row t of x and y at t·ldx, of B and C at t·ldb, of dt and
// the decay a at t·ldd,
//
//	S ← a_t·S + dt_t·x_t·B_tᵀ,   y_t = S·C_t + d·x_t
//
// S [P, N] holds the initial state on entry and S_T on return. Cost
// 2·P·N multiply-adds per step in scalar loops.
func ssmRecurrent(y, S, x, bb, cc, dt, a []float32, T, ldx, ldb, ldd, P, N int, d float32) {
	for t := 0; t < T; t++ {
		at, u0 := a[t*ldd], dt[t*ldd]
		xt, yt := x[t*ldx:][:P], y[t*ldx:][:P]
		bt, ct := bb[t*ldb:][:N], cc[t*ldb:][:N]
		for p, xv := range xt {
			u := u0 * xv
			row := S[p*N : (p+1)*N]
			var acc float32
			for k, s := range row {
				s = at*s + u*bt[k]
				row[k] = s
				acc += s * ct[k]
			}
			yt[p] = acc + d*xv
		}
	}
}

// ssmChunk is the scratch of one chunk of up to C rows (ssmChunked).
type ssmChunk struct {
	C   int
	dec []float64 // [C, C]: D[i,j] = Π_{j<r≤i} a_r, j ≤ i
	g   []float32 // [C, C]: (C_i·B_j)·D[i,j]·dt_j, 0 above the diagonal
	tmp []float32 // [C, P]: C·Sᵀ
	xt  []float32 // [P, C]: (diag(D[c−1,·]·dt)·X)ᵀ
}

func newSSMChunk(C, P int) *ssmChunk {
	return &ssmChunk{C: C, dec: make([]float64, C*C), g: make([]float32, C*C), tmp: make([]float32, C*P), xt: make([]float32, P*C)}
}

// ssmChunked is ssmRecurrent (same arguments and result) in chunks of
// w.C rows (the SSD form of Dao & Gu, §6): per chunk of c rows with S the
// state at its start, b_i = D[i,−1] = Π_{r≤i} a_r the decay of S to row i,
//
//	G = (C·Bᵀ) ⊙ D ⊙ dtᵀ (lower triangular),   Y = G·X + diag(b)·C·Sᵀ + d·X
//	S ← b_{c−1}·S + (diag(D[c−1,·] ⊙ dt)·X)ᵀ·B
//
// the decays as products in float64 (a decay of 0 gives exact zeros),
// every product on the project's matrix kernels. Cost per row
// c·(N + P) + 2·P·N multiply-adds in products, against the recurrence's
// 2·P·N in scalar loops. It equals the recurrence to float32 rounding
// (TestSSMChunkedEqualsRecurrent) for any chunk (HF's SSD is the same
// computation with the chunk of chunk_size).
func ssmChunked(y, S, x, bb, cc, dt, a []float32, T, ldx, ldb, ldd, P, N int, d float32, w *ssmChunk) {
	for t0 := 0; t0 < T; t0 += w.C {
		c := min(w.C, T-t0)
		xc, yc := x[t0*ldx:], y[t0*ldx:]
		bc, ccc := bb[t0*ldb:], cc[t0*ldb:]
		dec, g := w.dec[:c*c], w.g[:c*c]
		for i := 0; i < c; i++ {
			di := dec[i*c : (i+1)*c]
			clear(di)
			di[i] = 1
			for j := i; j > 0; j-- {
				di[j-1] = di[j] * float64(a[(t0+j)*ldd])
			}
		}
		sgemm(true, c, c, N, 1, ccc, ldb, bc, ldb, 0, g, c) // C·Bᵀ
		for i := 0; i < c; i++ {
			gi, di := g[i*c:(i+1)*c], dec[i*c:(i+1)*c]
			for j := 0; j <= i; j++ {
				gi[j] = float32(float64(gi[j]) * di[j] * float64(dt[(t0+j)*ldd]))
			}
			clear(gi[i+1:])
		}
		sgemm(false, c, P, c, 1, g, c, xc, ldx, 0, yc, ldx) // Y = G·X
		tmp := w.tmp[:c*P]
		sgemm(true, c, P, N, 1, ccc, ldb, S, N, 0, tmp, P) // C·Sᵀ
		for i := 0; i < c; i++ {
			bi := float32(dec[i*c] * float64(a[t0*ldd])) // Π_{0≤r≤i} a_r
			yi, xi, ti := yc[i*ldx:][:P], xc[i*ldx:][:P], tmp[i*P:(i+1)*P]
			for p := range yi {
				yi[p] += bi*ti[p] + d*xi[p]
			}
		}
		last := dec[(c-1)*c : c*c]
		xt := w.xt[:P*c]
		for j := 0; j < c; j++ {
			f := float32(last[j] * float64(dt[(t0+j)*ldd]))
			for p, v := range xc[j*ldx:][:P] {
				xt[p*c+j] = f * v
			}
		}
		bl := float32(last[0] * float64(a[t0*ldd]))
		sgemm(false, P, N, c, 1, xt, c, bc, ldb, bl, S, N) // S ← b·S + Xᵀ·B
	}
}

// ssmAttention streams the exact effective attention M of every (sequence,
// head) of layer l, M[t,s] = (C_t·B_s)·Π_{r=s+1..t} decay_r·dt_s for s ≤ t
// (y_t = Σ_s M[t,s]·x_s + D·x_t; the D skip is not part of M), in tiles of
// opt.TileRows query rows to the layer's hooks.DeltaConsumers (V: the
// head's x), and materializes it [B, H, T, T] for blocks.{l}.ssm.hook_eff_attn
// when that is hooked (a capture: changing it does not change the pass).
// Nothing is computed when neither asks. Each row walks s from t down to 0
// with the decay product in float64: T·(N + 2) multiply-adds per row,
// T²·(N + 2)/2 per head; memory one tile of rows per worker, never T×T
// unless captured.
func ssmAttention(bf *ssmBuffers, B, T, H, P, N, l int, opt Options) error {
	I := H * P
	base := func(i int) hooks.AttnTile {
		return hooks.AttnTile{DHead: P, VStride: I, V: bf.x[(i/H)*T*I+(i%H)*P:]}
	}
	return streamEffAttn(opt, hooks.SSMEffAttn, "Mamba-2 ", l, B, H, T, T*T*N, base, func() effRows {
		var rows []float32 // one tile of rows, the worker's
		return func(i, tile int, emit tileEmit) error {
			if len(rows) < tile*T {
				rows = make([]float32, tile*T)
			}
			b, hd := i/H, i%H
			for t0 := 0; t0 < T; t0 += tile {
				nr := min(tile, T-t0)
				width := t0 + nr
				for k := 0; k < nr; k++ {
					t := t0 + k
					row := rows[k*width : (k+1)*width]
					clear(row[t+1:])
					co, _ := bf.bOff(b*T+t, hd)
					ct := bf.c[co:][:N]
					prod := 1.0 // Π_{r=s+1..t} decay_r
					for s := t; s >= 0; s-- {
						r := b*T + s
						bo, _ := bf.bOff(r, hd)
						bs := bf.bb[bo:][:N]
						var cb float32
						for j, v := range ct {
							cb += v * bs[j]
						}
						row[s] = float32(float64(cb) * prod * float64(bf.dt[r*H+hd]))
						prod *= float64(bf.decay[r*H+hd])
					}
				}
				if err := emit(t0, nr, width, rows[:nr*width]); err != nil {
					return err
				}
			}
			return nil
		}
	})
}

// timeStepLimit is time_step_limit as config.json holds it: [min, max],
// with a max of +∞ written as the largest float32 (JSON has no infinity).
func timeStepLimit(sc *SSMConfig) []float64 {
	hi := sc.DtMax
	if math.IsInf(hi, 1) {
		hi = math.MaxFloat32
	}
	return []float64{sc.DtMin, hi}
}

// ssmGenerated moves a generated Mamba-2 mixer's parameters into the
// released models' working ranges: A_log so that A = −exp(A_log) ∈
// [−16, −1] (Mamba2's A_init_range), dt_bias so that softplus(dt_bias)
// spans dt ∈ [1e-3, 0.1] log-uniformly (time_step_min/max), D = 1.
func ssmGenerated(rng *rand.Rand) func(string, []float32) {
	return func(name string, x []float32) {
		switch {
		case strings.HasSuffix(name, ".A_log"):
			for i := range x {
				x[i] = float32(math.Log(1 + 15*rng.Float64()))
			}
		case strings.HasSuffix(name, ".dt_bias"):
			for i := range x {
				dt := math.Exp(math.Log(1e-3) + rng.Float64()*(math.Log(0.1)-math.Log(1e-3)))
				x[i] = float32(invSoftplus(dt))
			}
		case strings.HasSuffix(name, "mixer.D") || strings.HasSuffix(name, "mamba.D"):
			for i := range x {
				x[i] = 1
			}
		}
	}
}
