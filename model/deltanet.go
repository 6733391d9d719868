package model

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/hooks"
)

// Gated DeltaNet (Yang, Kautz & Hatamizadeh 2024, "Gated Delta Networks:
// Improving Mamba2 with Delta Rule"), the linear-attention token mixer of
// Qwen3.5 (HF transformers Qwen3_5GatedDeltaNet). Per sequence and value
// head, with q and k L2-normalised, scale = 1/√dk and S₀ = 0, for t = 1…T:
//
//	S ← e^{g_t} S;  u_t = β_t (v_t − Sᵀk_t);  S ← S + k_t u_tᵀ;  o_t = Sᵀ(scale·q_t)
//
// S is dk × dv. The recurrence is linear in v for fixed q, k, β, g, so
// o[t] = Σ_s W[t,s] v[s] with an exact effective attention W
// (deltaRuleAttention).

// deltaChunkRows is the default number of rows per chunk of the chunked
// delta rule (the chunk of HF's torch_chunk_gated_delta_rule and fla's
// kernels). BenchmarkDeltaRule compares it with the recurrent form.
const deltaChunkRows = 64

// sgemm sets C = alpha·A·op(B) + beta·C for row-major A [m, k] (row stride
// lda), op(B) [k, n] (B [k, n] with stride ldb, or B [n, k] when transB) and
// C [m, n] (stride ldc), through the project's BLAS (the AVX-512 kernels
// where the build has them). Empty products only scale C.
func sgemm(transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			row := c[i*ldc : i*ldc+n]
			for j := range row {
				row[j] *= beta
			}
		}
		return
	}
	tb := blas.NoTrans
	if transB {
		tb = blas.Trans
	}
	blas32.Implementation().Sgemm(blas.NoTrans, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// deltaRuleRecurrent runs the gated delta rule step by step for one
// sequence and one value head: q, k [T, dk] (L2-normalised, unscaled), v
// [T, dv], beta [T], g [T] (log-decay; −∞ allowed: no memory), into o
// [T, dv]. S [dk, dv] holds the initial state on entry (zeros for a fresh
// sequence) and S_T on return. With e = e^{g_t} and S the state before
// step t, each step reads S once for Sᵀk_t and Sᵀq_t and writes it once:
//
//	u_t = β_t (v_t − e·Sᵀk_t),  o_t = scale·(e·Sᵀq_t + (q_t·k_t) u_t),  S ← e·S + k_t u_tᵀ
//
// which is the recurrence of the file comment regrouped. Cost 3·dk·dv
// multiply-adds per step, in scalar Go loops. Where dk = dv, o may be q
// itself: step t reads q_t before it writes o_t.
func deltaRuleRecurrent(o, S, q, k, v, beta, g []float32, T, dk, dv int, scale float32) {
	sk := make([]float32, 2*dv)
	sq := sk[dv:]
	sk = sk[:dv]
	for t := 0; t < T; t++ {
		qt, kt, vt, ot := q[t*dk:(t+1)*dk], k[t*dk:(t+1)*dk], v[t*dv:(t+1)*dv], o[t*dv:(t+1)*dv]
		e := float32(math.Exp(float64(g[t])))
		clear(sk)
		clear(sq)
		var qk float32
		for i := 0; i < dk; i++ {
			ki, qi := kt[i], qt[i]
			qk += qi * ki
			for j, s := range S[i*dv : (i+1)*dv] {
				sk[j] += s * ki
				sq[j] += s * qi
			}
		}
		u := sk // u_t overwrites Sᵀk_t
		for j := range u {
			u[j] = beta[t] * (vt[j] - e*sk[j])
			ot[j] = scale * (e*sq[j] + qk*u[j])
		}
		for i := 0; i < dk; i++ {
			ki := kt[i]
			row := S[i*dv : (i+1)*dv]
			for j, s := range row {
				row[j] = e*s + ki*u[j]
			}
		}
	}
}

// deltaChunk is the scratch of one chunk of c ≤ C rows (deltaChunk.prep):
// decays, the chunk's scaled scores and the inverse of its triangular
// system.
type deltaChunk struct {
	C      int
	e, b   []float64 // [C]: e^{g_i}; b_i = Π_{r≤i} e^{g_r} (decay of the chunk's initial state at row i)
	f      []float64 // [C]: f_j = Π_{j<r<c} e^{g_r} (decay from row j to the chunk's end)
	d      []float64 // [C, C]: D[i,j] = Π_{j<r≤i} e^{g_r}, j ≤ i
	kk     []float32 // [C, C]: K·Kᵀ, then L
	attn   []float32 // [C, C]: scale·D[i,j]·(q_i·k_j) for j ≤ i, 0 above
	a      []float32 // [C, C]: A = (I + L)⁻¹, L[i,j] = β_i D[i,j] (k_i·k_j), j < i
	kf     []float32 // [dk, C]: (diag(f)·K)ᵀ
	kb, qb []float32 // [C, dk]: scratch (deltaRuleAttention)
	x, u   []float32 // [C, n]: scratch (deltaRuleChunked)
}

// newDeltaChunk returns scratch for chunks of up to C rows of key
// dimension dk and n value columns.
func newDeltaChunk(C, dk, n int) *deltaChunk {
	return &deltaChunk{
		C: C, e: make([]float64, C), b: make([]float64, C), f: make([]float64, C), d: make([]float64, C*C),
		kk: make([]float32, C*C), attn: make([]float32, C*C), a: make([]float32, C*C),
		kf: make([]float32, dk*C), kb: make([]float32, C*dk), qb: make([]float32, C*dk),
		x: make([]float32, C*n), u: make([]float32, C*n),
	}
}

// prep computes, for the c rows q, k [c, dk], beta, g [c] of one chunk
// (row i of the chunk is step t0+i of the sequence), the decays e, b, f, D
// as products in float64 (so that g = −∞ gives exact zeros), attn, A and
// kf (deltaChunk's fields). With the state S₀ at the chunk's start, the
// in-chunk recurrence unrolls to S_i = b_i S₀ + Σ_{j≤i} D[i,j] k_j u_jᵀ, so
// the chunk's U [c, dv] solves (I + L)·U = diag(β)(V − diag(b) K S₀) and
// O = scale·diag(b) Q S₀ + attn·U (the WY/UT form of the delta rule).
// Cost: 2·c²·dk multiply-adds in two matrix products, c³/6 in the
// triangular inverse.
func (w *deltaChunk) prep(q, k, beta, g []float32, c, dk int, scale float32) {
	e, b, f, d := w.e[:c], w.b[:c], w.f[:c], w.d[:c*c]
	for i := range e {
		e[i] = math.Exp(float64(g[i]))
		b[i] = e[i]
		if i > 0 {
			b[i] *= b[i-1]
		}
	}
	for i := 0; i < c; i++ {
		di := d[i*c : (i+1)*c]
		clear(di)
		di[i] = 1
		for j := i; j > 0; j-- {
			di[j-1] = di[j] * e[j]
		}
	}
	copy(f, d[(c-1)*c:c*c])

	kk, attn, a := w.kk[:c*c], w.attn[:c*c], w.a[:c*c]
	sgemm(true, c, c, dk, 1, k, dk, k, dk, 0, kk, c)
	sgemm(true, c, c, dk, 1, q, dk, k, dk, 0, attn, c)
	for i := 0; i < c; i++ {
		di, ai, ki, li := d[i*c:(i+1)*c], attn[i*c:(i+1)*c], a[i*c:(i+1)*c], kk[i*c:(i+1)*c]
		for j := 0; j <= i; j++ {
			ai[j] = float32(float64(scale*ai[j]) * di[j])
			li[j] = float32(float64(beta[i]*li[j]) * di[j])
		}
		clear(ai[i+1:])
		// Row i of A = (I + L)⁻¹: A[i,:] = e_i − Σ_{m<i} L[i,m]·A[m,:]
		// (row m of A is zero beyond column m).
		clear(ki)
		ki[i] = 1
		for m := 0; m < i; m++ {
			lm := li[m]
			if lm == 0 {
				continue
			}
			for j, x := range a[m*c : m*c+m+1] {
				ki[j] -= lm * x
			}
		}
	}
	kf := w.kf[:dk*c]
	for j := 0; j < c; j++ {
		fj := float32(f[j])
		for r, x := range k[j*dk : (j+1)*dk] {
			kf[r*c+j] = fj * x
		}
	}
}

// deltaRuleChunked is deltaRuleRecurrent (same arguments and result) in
// chunks of chunk rows (the last may be shorter; chunk ≤ 0 selects
// deltaChunkRows), with scratch w (nil or too small: allocated here); per
// chunk, with the chunk's decays and A from deltaChunk.prep,
//
//	R = diag(β)(V − diag(b)·K·S),  U = A·R,  O = scale·diag(b)·Q·S + attn·U,  S ← b_c·S + (diag(f)K)ᵀ·U
//
// every product on the project's matrix kernels. Cost per row 3·dk·dv +
// 2·chunk·(dk + dv) multiply-adds plus chunk²/6 scalar ones for A. It is
// the layer's default form (gatedDeltaNet, chunk 64) because nearly all
// of its work is in matrix products while the recurrent form's 3·dk·dv per
// step runs in scalar loops: at dk = dv = 128, T = 4096 (BenchmarkDeltaRule)
// chunk 64 takes about 1/8 of the recurrent form's CPU time on the AVX-512
// kernels and about 1/5 on gonum's; chunks of 32 to 64 rows cost about the
// same, 128 about twice as much (the 2·chunk·(dk+dv) term and the c³
// inverse), so the default stays the reference implementations' 64. It
// agrees with the recurrent form to float32 rounding. As there, o may be
// q where dk = dv: a chunk's rows of q are read before its rows of o are
// written.
func deltaRuleChunked(o, S, q, k, v, beta, g []float32, T, dk, dv int, scale float32, chunk int, w *deltaChunk) {
	if chunk <= 0 {
		chunk = deltaChunkRows
	}
	if w == nil || w.C < chunk || len(w.x) < chunk*dv || len(w.kf) < dk*chunk {
		w = newDeltaChunk(chunk, dk, dv)
	}
	for t0 := 0; t0 < T; t0 += chunk {
		c := min(chunk, T-t0)
		qc, kc := q[t0*dk:(t0+c)*dk], k[t0*dk:(t0+c)*dk]
		vc, oc, bc := v[t0*dv:(t0+c)*dv], o[t0*dv:(t0+c)*dv], beta[t0:t0+c]
		w.prep(qc, kc, bc, g[t0:t0+c], c, dk, scale)
		x, u := w.x[:c*dv], w.u[:c*dv]
		sgemm(false, c, dv, dk, 1, kc, dk, S, dv, 0, x, dv) // K·S
		sgemm(false, c, dv, dk, 1, qc, dk, S, dv, 0, u, dv) // Q·S, in U's storage: o may be q's
		for i := 0; i < c; i++ {
			bi, bs := float32(w.b[i]), float32(w.b[i])*scale
			xi, vi, ui, oi := x[i*dv:(i+1)*dv], vc[i*dv:(i+1)*dv], u[i*dv:(i+1)*dv], oc[i*dv:(i+1)*dv]
			for j := range xi {
				xi[j] = bc[i] * (vi[j] - bi*xi[j])
				oi[j] = ui[j] * bs
			}
		}
		sgemm(false, c, dv, c, 1, w.a, c, x, dv, 0, u, dv)     // U = A·R
		sgemm(false, c, dv, c, 1, w.attn, c, u, dv, 1, oc, dv) // O += attn·U
		sgemm(false, dk, dv, c, 1, w.kf, c, u, dv, float32(w.b[c-1]), S, dv)
	}
}

// deltaRuleAttention streams the exact effective attention W of the gated
// delta rule for one sequence and value head (o[t] = Σ_s W[t,s] v[s]; in
// closed form W = M (I + diag(β) L)⁻¹ diag(β) with M[t,s] = scale·e^{G_t−G_s}
// q_t·k_s for s ≤ t, L[t,s] = e^{G_t−G_s} k_t·k_s for s < t, G = cumsum g)
// in tiles of query rows: fn(t0, n, width, rows) gets rows [n, width] of W,
// row r at rows[r·width:] for query t0+r, with width ≥ t0+n, zeros above the
// diagonal and nothing beyond width (W is lower triangular); rows is valid
// only during the call. q, k [T, dk], beta, g [T] are as in
// deltaRuleRecurrent. The first error of fn stops the stream.
//
// Method: the key-space representation P_t [dk, T] with S_t = P_t·V, i.e.
// the state of the delta rule run on one-hot values (P_t = e^{g_t}(I −
// β_t k_t k_tᵀ) P_{t−1} + β_t k_t e_tᵀ, W[t,:] = scale·q_tᵀ P_t), advanced a
// block of c rows at a time as deltaRuleChunked advances S. With Aβ =
// A·diag(β), Kb = diag(b)·K and P₀ = P at the block's start t0, the
// block's rows are
//
//	W[:, t0:t0+c] = attn·Aβ,  W[:, :t0] = (scale·diag(b)·Q − attn·Aβ·Kb)·P₀
//
// and P ← [(b_c·I − Kf·Aβ·Kb)·P₀ | Kf·Aβ] (Kf = (diag(f)K)ᵀ). Cost per row
// at position t about (dk + dk²/c)·t multiply-adds, all in matrix products
// on the project's kernels: (dk + dk²/c)·T²/2 per head. The dk × dk
// transition replaces the rank-c update (2·dk·c + c²)·t0 per block, which
// costs more once c > 0.41·dk. Solving the closed form's T × T triangular
// system instead costs O(t²) per row, O(T³) per head, unless it uses the
// rank-dk structure of L, which is what P does. Memory: P twice (dk·T
// each) and the block's rows (c·T); never T×T.
//
// The block c is the smallest multiple of tile ≥ chunk (chunk 0: max(64,
// dk), where the transition costs as much as the rows: 2·dk·t per row);
// each block is delivered as consecutive tiles of tile rows (the last may
// be shorter).
func deltaRuleAttention(q, k, beta, g []float32, T, dk int, scale float32, tile, chunk int, fn func(t0, n, width int, rows []float32) error) error {
	if tile <= 0 {
		return fmt.Errorf("model: delta-rule attention tile of %d rows (want ≥ 1)", tile)
	}
	if chunk <= 0 {
		chunk = max(64, dk)
	}
	C := tile * ((chunk + tile - 1) / tile)
	C = min(C, tile*((T+tile-1)/tile))
	w := newDeltaChunk(C, dk, 0)
	p, p2 := make([]float32, dk*T), make([]float32, dk*T)
	m := make([]float32, dk*dk)
	y := w.qb // Aβ·Kb reuses Q′'s scratch once Q′ is used
	rows := make([]float32, C*T)
	for t0 := 0; t0 < T; t0 += C {
		c := min(C, T-t0)
		width := t0 + c
		qc, kc, bc := q[t0*dk:(t0+c)*dk], k[t0*dk:(t0+c)*dk], beta[t0:t0+c]
		w.prep(qc, kc, bc, g[t0:t0+c], c, dk, scale)
		ab, kb, qb := w.a[:c*c], w.kb[:c*dk], w.qb[:c*dk]
		for i := 0; i < c; i++ {
			for j := 0; j <= i; j++ {
				ab[i*c+j] *= bc[j]
			}
			bi := float32(w.b[i])
			for r, x := range kc[i*dk : (i+1)*dk] {
				kb[i*dk+r] = bi * x
			}
			for r, x := range qc[i*dk : (i+1)*dk] {
				qb[i*dk+r] = scale * bi * x
			}
		}
		wr := rows[:c*width]
		sgemm(false, c, c, c, 1, w.attn, c, ab, c, 0, wr[t0:], width) // W[:, t0:] = attn·Aβ
		for i := 0; i < c; i++ {
			clear(wr[i*width+t0+i+1 : (i+1)*width])
		}
		if t0 > 0 {
			sgemm(false, c, dk, c, -1, wr[t0:], width, kb, dk, 1, qb, dk) // Q′ = scale·diag(b)Q − attn·Aβ·Kb
			sgemm(false, c, t0, dk, 1, qb, dk, p, T, 0, wr, width)        // W[:, :t0] = Q′·P₀
		}
		for r0 := 0; r0 < c; r0 += tile {
			n := min(tile, c-r0)
			if err := fn(t0+r0, n, width, wr[r0*width:(r0+n)*width]); err != nil {
				return err
			}
		}
		if width == T {
			break
		}
		if t0 > 0 {
			sgemm(false, c, dk, c, 1, ab, c, kb, dk, 0, y, dk) // Aβ·Kb
			clear(m)
			for i := 0; i < dk; i++ {
				m[i*dk+i] = float32(w.b[c-1])
			}
			sgemm(false, dk, dk, c, -1, w.kf, c, y, dk, 1, m, dk) // b_c·I − Kf·Aβ·Kb
			sgemm(false, dk, t0, dk, 1, m, dk, p, T, 0, p2, T)    // old columns
		}
		sgemm(false, dk, c, c, 1, w.kf, c, ab, c, 0, p2[t0:], T) // new columns: Kf·Aβ
		p, p2 = p2, p
	}
	return nil
}

// causalConv1dSiLU computes dst[i, ch] = silu(Σ_{j<K} w[ch, j]·x[t−K+1+j, ch])
// for the rows t = t0+i, i < rows, of one sequence x (x at negative times
// is 0): the depthwise causal convolution of Qwen3.5's Gated DeltaNet
// (nn.Conv1d with groups = C, no bias, padding K−1; conv1d.weight [C, 1,
// K] flattened to w [C, K]) followed by SiLU. win [K−1+rows, C] holds x at
// times t0−K+1 … t0+rows−1 (rows at negative times are not read). dst must
// not alias win.
func causalConv1dSiLU(dst, win []float32, t0, rows, C int, w []float32, K int) {
	for i := 0; i < rows; i++ {
		out := dst[i*C : (i+1)*C]
		clear(out)
		for j := max(0, K-1-t0-i); j < K; j++ {
			in := win[(i+j)*C : (i+j+1)*C]
			for ch, v := range in {
				out[ch] += w[ch*K+j] * v
			}
		}
		for ch, v := range out {
			out[ch] = silu(v)
		}
	}
}

// l2NormalizeEps sets dst = x·rsqrt(Σx² + 1e-6) (fla's and HF's l2norm, eps
// inside the root), the sum in float64.
func l2NormalizeEps(dst, x []float32) {
	inv := float32(1 / math.Sqrt(sumSquares(x)+1e-6))
	for i, v := range x {
		dst[i] = v * inv
	}
}

// deltaNet is one Gated DeltaNet layer: dimensions, options and weights
// (HF names of Qwen3_5GatedDeltaNet in brackets; C = 2·Hk·Dk + Hv·Dv).
type deltaNet struct {
	D      int     // model width (hidden_size)
	Hk, Dk int     // key heads and their dimension (linear_num_key_heads, linear_key_head_dim)
	Hv, Dv int     // value heads and their dimension (linear_num_value_heads, linear_value_head_dim); Hv a multiple of Hk
	K      int     // causal convolution kernel (linear_conv_kernel_dim)
	Eps    float64 // eps of the gated RMSNorm (rms_norm_eps)
	// Chunk is the number of rows per chunk of the delta rule
	// (deltaRuleChunked): 0 selects deltaChunkRows (64), a negative value
	// the recurrent form (deltaRuleRecurrent).
	Chunk int

	QKV    Weight    // [C, D] (in_proj_qkv.weight), output channels [q (Hk·Dk) | k (Hk·Dk) | v (Hv·Dv)]
	Z      Weight    // [Hv·Dv, D] (in_proj_z.weight): the output gate
	B      Weight    // [Hv, D] (in_proj_b.weight): β logits
	A      Weight    // [Hv, D] (in_proj_a.weight): decay input
	Conv   []float32 // [C, K] (conv1d.weight [C, 1, K])
	DtBias []float32 // [Hv] (dt_bias)
	ALog   []float32 // [Hv] (A_log)
	Norm   []float32 // [Dv] (norm.weight), plain weight
	Out    Weight    // [D, Hv·Dv] (out_proj.weight)
}

// check reports the first weight whose length does not fit the
// dimensions, by its HF name, or a head count that does not divide.
func (w *deltaNet) check() error {
	if w.Hk <= 0 || w.Hv%w.Hk != 0 {
		return fmt.Errorf("model: Gated DeltaNet with %d value heads and %d key heads (linear_num_value_heads must be a multiple of linear_num_key_heads)", w.Hv, w.Hk)
	}
	C := 2*w.Hk*w.Dk + w.Hv*w.Dv
	for _, c := range []struct {
		name       string
		have, want int
	}{
		{"in_proj_qkv.weight", w.QKV.values(), C * w.D}, {"in_proj_z.weight", w.Z.values(), w.Hv * w.Dv * w.D},
		{"in_proj_b.weight", w.B.values(), w.Hv * w.D}, {"in_proj_a.weight", w.A.values(), w.Hv * w.D},
		{"conv1d.weight", len(w.Conv), C * w.K}, {"dt_bias", len(w.DtBias), w.Hv}, {"A_log", len(w.ALog), w.Hv},
		{"norm.weight", len(w.Norm), w.Dv}, {"out_proj.weight", w.Out.values(), w.D * w.Hv * w.Dv},
	} {
		if c.have != c.want {
			return fmt.Errorf("model: Gated DeltaNet linear_attn.%s has %d values, want %d (D=%d, key heads %d×%d, value heads %d×%d, conv kernel %d)",
				c.name, c.have, c.want, w.D, w.Hk, w.Dk, w.Hv, w.Dv, w.K)
		}
	}
	for _, x := range []struct {
		name string
		w    *Weight
		in   int
	}{{"in_proj_qkv.weight", &w.QKV, w.D}, {"in_proj_z.weight", &w.Z, w.D}, {"in_proj_b.weight", &w.B, w.D},
		{"in_proj_a.weight", &w.A, w.D}, {"out_proj.weight", &w.Out, w.Hv * w.Dv}} {
		if x.w.Cols != x.in {
			return fmt.Errorf("model: Gated DeltaNet linear_attn.%s has rows of %d values, want %d", x.name, x.w.Cols, x.in)
		}
	}
	return nil
}

// gatedDeltaNet computes the Gated DeltaNet token mixer of layer l (HF
// Qwen3_5GatedDeltaNet.forward without cache or padding mask) for the
// normalized input x [B·T, D] into out [B·T, D]:
//
//	[q|k|v] = silu(causalconv(x·W_qkvᵀ)),  z = x·W_zᵀ,  β = σ(x·W_bᵀ),  g = −e^{A_log}·softplus(x·W_aᵀ + dt_bias)
//	q, k ← l2norm per key head, value head h reads key head h/(Hv/Hk)
//	o = delta rule(q, k, v, β, g) per (sequence, value head), scale 1/√Dk
//	out = (Norm ⊙ o·rsqrt(mean(o²) + Eps) ⊙ silu(z))·W_outᵀ   (per head of Dv)
//
// with the hooks blocks.{l}.gdn.hook_q, hook_k [B, Hv, T, Dk] (normalised,
// unscaled), hook_v [B, Hv, T, Dv], hook_beta, hook_g [B, T, Hv],
// hook_core_out [B, Hv, T, Dv] and hook_final_state [B, Hv, Dk, Dv]; what
// a hook changes flows on.
//
// q, k, v and core take their storage from scratch when it holds
// scratchFloats(B, T) values (the decoder pass lends the buffers of its
// attention layers), else from new slices.
func gatedDeltaNet(out, x, scratch []float32, B, T int, w *deltaNet, l int, run hookRun, opt Options) error {
	if err := w.check(); err != nil {
		return err
	}
	D, Hk, Dk, Hv, Dv := w.D, w.Hk, w.Dk, w.Hv, w.Dv
	n, C, rep := B*T, 2*Hk*Dk+Hv*Dv, Hv/Hk
	if len(x) != n*D || len(out) != n*D {
		return fmt.Errorf("model: Gated DeltaNet layer %d: input %d and output %d values, want B·T·D = %d·%d·%d", l, len(x), len(out), B, T, D)
	}

	// projections, convolution and split into heads, head-major (key
	// heads repeated for their value heads), blockRows rows of a sequence
	// at a time: win holds the K−1 rows before the block and the block
	beta := make([]float32, n*Hv)
	linearAs(opt.Compute, beta, x, n, D, w.B, Hv, nil)
	g := make([]float32, n*Hv)
	linearAs(opt.Compute, g, x, n, D, w.A, Hv, nil)
	need := w.scratchFloats(B, T)
	if len(scratch) < need {
		scratch = make([]float32, need)
	}
	q, k := scratch[:B*Hv*T*Dk], scratch[B*Hv*T*Dk:2*B*Hv*T*Dk]
	v, core := scratch[2*B*Hv*T*Dk:][:B*Hv*T*Dv], q
	if Dk != Dv {
		core = scratch[2*B*Hv*T*Dk+B*Hv*T*Dv:][:B*Hv*T*Dv]
	}
	R, K := blockSize(T, blockRows), w.K
	blk := scratch[need-w.blockFloats(T) : need]
	win, conv := blk[:(K-1+R)*C], blk[(K-1+R)*C:][:R*C] // rows before time 0 are never read
	for b := 0; b < B; b++ {
		for t0 := 0; t0 < T; t0 += R {
			rows := min(R, T-t0)
			if t0 > 0 {
				copy(win, win[R*C:(R+K-1)*C]) // the last K−1 rows of the previous block
			}
			linearAs(opt.Compute, win[(K-1)*C:(K-1+rows)*C], x[(b*T+t0)*D:], rows, D, w.QKV, C, nil)
			causalConv1dSiLU(conv, win, t0, rows, C, w.Conv, K)
			for i := 0; i < rows; i++ {
				row, t := conv[i*C:(i+1)*C], t0+i
				for h := 0; h < Hv; h++ {
					at, kh := ((b*Hv+h)*T+t)*Dk, h/rep
					l2NormalizeEps(q[at:at+Dk], row[kh*Dk:(kh+1)*Dk])
					l2NormalizeEps(k[at:at+Dk], row[(Hk+kh)*Dk:(Hk+kh+1)*Dk])
					copy(v[((b*Hv+h)*T+t)*Dv:][:Dv], row[2*Hk*Dk+h*Dv:][:Dv])
				}
			}
		}
	}
	for i := range beta {
		h := i % Hv
		beta[i] = sigmoid(beta[i])
		g[i] = float32(-math.Exp(float64(w.ALog[h])) * softplus(g[i]+w.DtBias[h]))
	}
	run(hooks.GDNQ, l, q, B, Hv, T, Dk)
	run(hooks.GDNK, l, k, B, Hv, T, Dk)
	run(hooks.GDNV, l, v, B, Hv, T, Dv)
	run(hooks.GDNBeta, l, beta, B, T, Hv)
	run(hooks.GDNG, l, g, B, T, Hv)
	scale := float32(1 / math.Sqrt(float64(Dk)))
	// the effective attention first: the recurrence writes its output over
	// q when the key and value dimensions are equal (scratchFloats)
	if err := deltaAttention(q, k, v, beta, g, B, T, Hv, Dk, Dv, scale, l, opt); err != nil {
		return err
	}

	state := make([]float32, B*Hv*Dk*Dv)
	chunk := w.Chunk
	if chunk == 0 {
		chunk = deltaChunkRows
	}
	parallelRows(B*Hv, T*Dk*Dv, func(lo, hi int) {
		bh := make([]float32, 2*T) // β and g of one head, [T] each
		var ws *deltaChunk
		if chunk > 0 {
			ws = newDeltaChunk(min(chunk, T), Dk, Dv)
		}
		for i := lo; i < hi; i++ {
			b, h := i/Hv, i%Hv
			for t := 0; t < T; t++ {
				bh[t], bh[T+t] = beta[(b*T+t)*Hv+h], g[(b*T+t)*Hv+h]
			}
			o, s := core[i*T*Dv:(i+1)*T*Dv], state[i*Dk*Dv:(i+1)*Dk*Dv]
			qi, ki, vi := q[i*T*Dk:(i+1)*T*Dk], k[i*T*Dk:(i+1)*T*Dk], v[i*T*Dv:(i+1)*T*Dv]
			if chunk < 0 {
				deltaRuleRecurrent(o, s, qi, ki, vi, bh[:T], bh[T:], T, Dk, Dv, scale)
			} else {
				deltaRuleChunked(o, s, qi, ki, vi, bh[:T], bh[T:], T, Dk, Dv, scale, min(chunk, T), ws)
			}
		}
	})
	run(hooks.GDNCoreOut, l, core, B, Hv, T, Dv)
	run(hooks.GDNFinalState, l, state, B, Hv, Dk, Dv)

	// gated RMSNorm per head, back to token-major [rows, Hv·Dv], and the
	// output projection, in the same blocks (z = x·W_zᵀ with them)
	y, z := conv[:R*Hv*Dv], win[:R*Hv*Dv] // C > Hv·Dv
	for b := 0; b < B; b++ {
		for t0 := 0; t0 < T; t0 += R {
			rows, r0 := min(R, T-t0), b*T+t0
			linearAs(opt.Compute, z, x[r0*D:], rows, D, w.Z, Hv*Dv, nil)
			for i := 0; i < rows; i++ {
				for h := 0; h < Hv; h++ {
					o := core[((b*Hv+h)*T+t0+i)*Dv:][:Dv]
					inv := float32(1 / math.Sqrt(sumSquares(o)/float64(Dv)+w.Eps))
					at := i*Hv*Dv + h*Dv
					yo, zo := y[at:at+Dv], z[at:at+Dv]
					for j, x := range o {
						yo[j] = w.Norm[j] * (x * inv) * silu(zo[j])
					}
				}
			}
			linearAs(opt.Compute, out[r0*D:(r0+rows)*D], y, rows, Hv*Dv, w.Out, D, nil)
		}
	}
	return nil
}

// deltaAttention streams the effective attention W of every (sequence,
// value head) of layer l (deltaRuleAttention, in tiles of opt.TileRows rows)
// to the layer's DeltaConsumers, and materializes it [B, Hv, T, T] for
// blocks.{l}.gdn.hook_eff_attn when that is hooked (a capture: changing it
// does not change the pass). Nothing is computed when neither asks. q, k
// [B, Hv, T, Dk], v [B, Hv, T, Dv], beta and g [B, T, Hv] are the layer's.
func deltaAttention(q, k, v, beta, g []float32, B, T, Hv, Dk, Dv int, scale float32, l int, opt Options) error {
	base := func(i int) hooks.AttnTile {
		return hooks.AttnTile{DHead: Dv, VStride: Dv, V: v[i*T*Dv : (i+1)*T*Dv]}
	}
	return streamEffAttn(opt, hooks.GDNEffAttn, "", l, B, Hv, T, T*T*Dk, base, func() effRows {
		bg := make([]float32, 2*T)
		return func(i, tile int, emit tileEmit) error {
			b, h := i/Hv, i%Hv
			for t := 0; t < T; t++ {
				bg[t], bg[T+t] = beta[(b*T+t)*Hv+h], g[(b*T+t)*Hv+h]
			}
			return deltaRuleAttention(q[i*T*Dk:(i+1)*T*Dk], k[i*T*Dk:(i+1)*T*Dk], bg[:T], bg[T:], T, Dk, scale, tile, 0, emit)
		}
	})
}

// tileEmit receives a tile of n effective-attention rows from row t0 on,
// each width = t0 + n wide (rows [n, width]).
type tileEmit func(t0, n, width int, rows []float32) error

// effRows computes (sequence, head) i's effective-attention rows in tiles
// of at most tile rows, handing each to emit.
type effRows func(i, tile int, emit tileEmit) error

// streamEffAttn streams the exact effective attention of layer l's H heads
// of B sequences of T tokens — Gated DeltaNet's W, Mamba-2's and RWKV-7's
// M — to the layer's hooks.DeltaConsumers, in tiles of opt.TileRows rows
// (each head's tile carrying base(i)'s values: V, DHead, VStride), and
// materializes it [B, H, T, T] for the hook hook (a capture: changing it
// does not change the pass). Nothing is computed when neither asks. Each
// worker of the pool gets its own effRows from worker (its scratch); work
// is the cost of one head for parallelRows. Errors name the layer (what,
// when set, the mixer: "Mamba-2 ").
func streamEffAttn(opt Options, hook, what string, l, B, H, T, work int, base func(i int) hooks.AttnTile, worker func() effRows) error {
	hs := opt.Hooks
	var deltas []hooks.DeltaConsumer
	for _, c := range hs.Consumers(l) {
		if d, ok := c.(hooks.DeltaConsumer); ok {
			deltas = append(deltas, d)
		}
	}
	var M []float32
	if hs.Has(hooks.Name(hook, l)) {
		M = make([]float32, B*H*T*T)
	}
	if M == nil && len(deltas) == 0 {
		return nil
	}
	tile := opt.TileRows
	if tile <= 0 {
		tile = defaultTileRows
	}
	errs := make([]error, B*H)
	parallelRows(B*H, work, func(lo, hi int) {
		rows := worker()
		for i := lo; i < hi; i++ {
			at := base(i)
			at.Batch, at.Layer, at.Head, at.T = i/H, l, i%H, T
			errs[i] = rows(i, tile, func(t0, n, width int, r []float32) error {
				if M != nil {
					for q := 0; q < n; q++ {
						copy(M[(i*T+t0+q)*T:][:width], r[q*width:(q+1)*width])
					}
				}
				at.Q0, at.Rows, at.Stride, at.Alpha = t0, n, width, r
				for _, d := range deltas {
					if err := d.ConsumeDelta(&at); err != nil {
						return err
					}
				}
				return nil
			})
		}
	})
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("model: layer %d %seffective attention: %w", l, what, err)
		}
	}
	if M != nil {
		return hs.Run(hook, l, M, B, H, T, T)
	}
	return nil
}

// mix makes a Gated DeltaNet layer the token mixer of its layer in the
// decoder pass (which then runs hook_attn_out on out).
func (w *deltaNet) mix(_ *Model, out, h, scratch []float32, l, B, T int, opt Options, run hookRun) error {
	return gatedDeltaNet(out, h, scratch, B, T, w, l, run, opt)
}

// scratchFloats is the storage of gatedDeltaNet's q, k [B, Hv, T, Dk], v
// and core [B, Hv, T, Dv] (core overwrites q where Dk = Dv: each head's
// recurrence reads a row of q before it writes that row of its output),
// then the convolution's window and output for one block of rows
// (blockFloats): scratch the decoder pass lends every layer, so that no
// layer leaves them to the collector.
func (w *deltaNet) scratchFloats(B, T int) int {
	if w.Dk == w.Dv {
		return B*w.Hv*T*(2*w.Dk+w.Dv) + w.blockFloats(T)
	}
	return B*w.Hv*T*2*(w.Dk+w.Dv) + w.blockFloats(T)
}

// blockFloats is the convolution window [K−1+R, C] and output [R, C] of
// a block of R = blockSize(T, blockRows) rows, C = 2·Hk·Dk + Hv·Dv.
func (w *deltaNet) blockFloats(T int) int {
	return (w.K - 1 + 2*blockSize(T, blockRows)) * (2*w.Hk*w.Dk + w.Hv*w.Dv)
}
