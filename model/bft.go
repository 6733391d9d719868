package model

// Bayesian Filtering Transformer (BFT): B. Long, D. Agarwal,
// J. Markovic-Voronov, Y. Wang, L. Li, "Precision Tracked Transformer via
// Kalman Filtering, Kriging and Process Noise" (paper 003). Each token t
// carries a precision vector λ_t ∈ R^D; a layer is one step of an extended
// Kalman filter. Algorithm 1 (App. C), as this pass runs it on a Llama-style
// pre-norm decoder (layout and options: bft_config.go):
//
//	λ⁰_t = τ_{id_t}·1_D                                      (Eq. 10 or 11; "constant": τ_base)
//	per layer, with h the residual stream and λ the precision:
//	  1 Observe   x = Norm1(h); q, k, v = projections of x (QK-norm, RoPE as Llama/Qwen3)
//	              α̃_tj = softmax_j(q_t·k_j/√dh + log λ̄_j),  λ̄_j = mean_i λ_j,i   (Eq. 2, Remark 1, App. C)
//	              e_t = Σ_j α̃_tj v_j                          per head, v of the head's KV group
//	  2           λobs_t,i = (n_eff,t + ν)/(S_t,i + ν·σ0²),  S_t,i = Σ_j α̃_tj (v_j,i − e_t,i)²  (Eq. 6, 7)
//	              (or Eq. 13's sandwich), capped at λ_max
//	  3           e, λobs concatenated over heads: coordinate h·dh + i
//	  4 Update    K = λobs ⊘ (λ + λobs);  h' = h + K ⊙ e  (or h + W_O(K ⊙ e) + b_O with output_proj);
//	              λ' = λ + λobs (capped)                                          (Eq. 3)
//	  5 Predict   y = Norm2(h');  h'' = h' + W_down(act(W_gate y) ⊙ W_up y)     (Eq. 4)
//	              J_i = Σ_k W_down[i,k]·(act'(g_k)·W_gate[k,i]·u_k + act(g_k)·W_up[k,i])  (diagonal
//	                    Jacobian of the SwiGLU FFN at y; notes §F.3.23; the norm's Jacobian is
//	                    ignored, App. G)
//	              λ'' = ( clip((1+J)²) ⊘ λ' + Q )⁻¹,  Q = softplus(q_logits)·Q_max   (Eq. 8, 9)
//	  return (h'', λ'')
//	logits = lm_head(Norm(h))
//
// Remark 3: with λ ≡ 1 entering a layer, Q = 0 and λobs → ∞ the layer is
// the standard pre-norm layer (α̃ = α, K = 1); TestBFTReducesToPreNorm
// checks this against Forward of the same Llama/Qwen3 weights.
//
// Hook points (hooks.Points), with BFT's meaning:
//
//	hook_embed                       token embedding (MLP_τ's input)
//	bft.hook_tau                     τ_t [batch,pos], the layer-0 precision of each token
//	blocks.{l}.hook_resid_pre        h entering layer l
//	blocks.{l}.bft.hook_lambda       λ entering layer l [batch,pos,d_model] (writing here changes λ̄ and K)
//	blocks.{l}.ln1.hook_normalized, attn.hook_q/k/v, hook_rot_q/k   as Llama/Qwen3
//	blocks.{l}.attn.hook_pattern     α̃ [batch,head,query,key]: the kriging weights the layer uses
//	                                 (softmax with the log λ̄ bias; rows sum to 1)
//	blocks.{l}.bft.hook_lambda_obs   λobs [batch,pos,head,d_head]
//	blocks.{l}.bft.hook_gain         K [batch,pos,head,d_head]; then attn.hook_gate on the same buffer
//	blocks.{l}.attn.hook_z           K ⊙ e [batch,pos,head,d_head], what o_proj (or the residual) reads
//	blocks.{l}.hook_attn_out         the update added to h;  hook_resid_mid = h'
//	blocks.{l}.bft.hook_lambda_post  λ' [batch,pos,d_model]
//	blocks.{l}.ln2.hook_normalized, mlp.hook_pre (gate projection), mlp.hook_post, hook_mlp_out
//	blocks.{l}.bft.hook_jacobian     J_FFN [batch,pos,d_model]
//	blocks.{l}.bft.hook_q_noise      Q [head,d_head]
//	blocks.{l}.bft.hook_lambda_pred  λ'' [batch,pos,d_model] (λ of layer l+1)
//	blocks.{l}.hook_resid_post, ln_final.hook_normalized, logits
//
// Streaming: consumers receive the rows of α̃ with the head's KV values v_j
// (hooks.AttnTile), so probes.Collector computes n_eff, S and λobs on the
// weights BFT uses (with its default options, λobs of Eq. 6 as the layer
// computes it).

import (
	"fmt"
	"math"
	"strings"

	"github.com/filterlens/probe/hooks"
)

// bftWeights holds the BFT tensors beyond the Llama Layer fields.
type bftWeights struct {
	QLogits  [][]float32 // per layer [D]
	RhoLogit [][]float32 // per layer [1] (recency_decay)

	TauLogits    []float32 // [V] (table)
	TauBase      []float32 // [V] (tau_base_per_token)
	TauW1, TauB1 []float32 // [hid, D], [hid] (mlp)
	TauW2, TauB2 []float32 // [1, hid], [1]
	TauRange     []float32 // [1]
}

// loadBFT reads the Llama module tree (loadDecoder) and the BFT tensors
// (names in bft_config.go).
func loadBFT(m *Model, ld *loader) {
	c := &m.Config
	bc := c.BFT
	D, V := c.DModel, c.Vocab
	// The gate of a BFT model is computed (K), not projected: loadDecoder
	// must not look for gate rows in q_proj.
	c.Gate = GateNone
	loadDecoder(m, ld)
	c.Gate = GateElementwise
	if !bc.OutputProj {
		dropOProj(m, ld)
	}
	w := &bftWeights{QLogits: make([][]float32, c.Layers)}
	m.ext = w
	for l := range m.Layers {
		p := fmt.Sprintf("model.layers.%d.bft.", l)
		w.QLogits[l] = ld.get(p+"q_logits", D)
		if bc.RecencyDecay {
			w.RhoLogit = append(w.RhoLogit, ld.get(p+"rho_logit", 1))
		}
	}
	switch bc.InitialPrecision {
	case "table":
		w.TauLogits = ld.get("model.bft.tau_logits", V)
	case "mlp":
		hid := bc.TauHidden
		w.TauW1, w.TauB1 = ld.get("model.bft.tau_mlp.0.weight", hid, D), ld.get("model.bft.tau_mlp.0.bias", hid)
		w.TauW2, w.TauB2 = ld.get("model.bft.tau_mlp.2.weight", 1, hid), ld.get("model.bft.tau_mlp.2.bias", 1)
		w.TauRange = ld.get("model.bft.tau_range", 1)
	}
	if bc.TauBasePerToken {
		w.TauBase = ld.get("model.bft.tau_base", V)
	}
}

// dropOProj removes the o_proj tensors that loadDecoder asked for from a
// model in the paper's no-W_O layout: a generated model does not make
// them, a missing one is not an error, and a stored one is reported as
// unexpected.
func dropOProj(m *Model, ld *loader) {
	isO := func(n string) bool { return strings.Contains(n, ".self_attn.o_proj.") }
	for l := range m.Layers {
		L := &m.Layers[l]
		for _, t := range []struct {
			part     string
			n, bytes int
		}{{"weight", L.Wo.Rows * L.Wo.Cols, int(L.Wo.residentBytes())}, {"bias", len(L.Bo), 4 * len(L.Bo)}} {
			name := fmt.Sprintf("model.layers.%d.self_attn.o_proj.%s", l, t.part)
			if ld.used[name] {
				ld.params -= int64(t.n) // read, but not part of the model
				ld.bytes -= int64(t.bytes)
			}
			delete(ld.used, name)
		}
		L.Wo, L.Bo = Weight{}, nil
	}
	if ld.gen != nil {
		kept := ld.gen.tensors[:0]
		for _, t := range ld.gen.tensors {
			if !isO(t.Name) {
				kept = append(kept, t)
			}
		}
		ld.gen.tensors = kept
		return
	}
	kept := ld.missing[:0]
	for _, n := range ld.missing {
		if !isO(n) {
			kept = append(kept, n)
		}
	}
	ld.missing = kept
}

// activationSlopes maps the activations BFT supports to their
// derivatives (for the FFN Jacobian).
var activationSlopes = map[string]func(float32) float64{
	"silu": siluSlope, "swish": siluSlope,
	"gelu":     geluErfSlope,
	"gelu_new": geluTanhSlope, "gelu_pytorch_tanh": geluTanhSlope, "gelu_fast": geluTanhSlope,
	"relu": func(x float32) float64 {
		if x > 0 {
			return 1
		}
		return 0
	},
}

// siluSlope is d/dx x·σ(x) = σ(x)·(1 + x·(1 − σ(x))).
func siluSlope(x float32) float64 {
	v := float64(x)
	s := 1 / (1 + math.Exp(-v))
	return s * (1 + v*(1-s))
}

// geluErfSlope is d/dx 0.5·x·(1 + erf(x/√2)) = Φ(x) + x·φ(x).
func geluErfSlope(x float32) float64 {
	v := float64(x)
	return 0.5*(1+math.Erf(v/math.Sqrt2)) + v*math.Exp(-0.5*v*v)/math.Sqrt(2*math.Pi)
}

// geluTanhSlope is the derivative of 0.5·x·(1 + tanh(u)),
// u = √(2/π)·(x + 0.044715·x³).
func geluTanhSlope(x float32) float64 {
	v := float64(x)
	c := math.Sqrt(2 / math.Pi)
	th := math.Tanh(c * (v + 0.044715*v*v*v))
	return 0.5*(1+th) + 0.5*v*(1-th*th)*c*(1+3*0.044715*v*v)
}

// IsBFT reports whether the model is a Bayesian Filtering Transformer.
func (m *Model) IsBFT() bool { return m.bft() != nil }

// BFTProcessNoise returns Q = softplus(q_logits)·Q_max of layer l (Eq. 9),
// one value per residual dimension (head h owns [h·dh, (h+1)·dh)).
func (m *Model) BFTProcessNoise(l int) ([]float64, error) {
	if m.bft() == nil {
		return nil, fmt.Errorf("model: %s is a %s checkpoint, not BFT (config.json \"model_type\": %q)", m.Dir, m.Arch, bftModelType)
	}
	if l < 0 || l >= len(m.Layers) {
		return nil, fmt.Errorf("model: layer %d out of range (model has %d layers)", l, len(m.Layers))
	}
	q := make([]float64, m.DModel)
	for i, x := range m.bft().QLogits[l] {
		q[i] = softplus(x) * m.BFT.QMax
	}
	return q, nil
}

// BFTInitialPrecision returns τ of token id (Eq. 10 or the τ_base of the
// "constant" mode). For the "mlp" mode (Eq. 11) τ depends on the token's
// embedding through MLP_τ and is computed the same way.
func (m *Model) BFTInitialPrecision(id int) (float64, error) {
	if m.bft() == nil {
		return 0, fmt.Errorf("model: not a BFT model")
	}
	if id < 0 || id >= m.Vocab {
		return 0, fmt.Errorf("model: token id %d outside the vocabulary [0, %d)", id, m.Vocab)
	}
	tau := make([]float32, 1)
	e := make([]float32, m.DModel)
	m.Embed.widenRow(e, id)
	m.bftTau(tau, []int{id}, e)
	return float64(tau[0]), nil
}

// bftTau computes τ for each token of ids (embeddings x [len(ids), D]).
func (m *Model) bftTau(tau []float32, ids []int, x []float32) {
	bc, w, D := m.BFT, m.bft(), m.DModel
	hidden := make([]float32, bc.TauHidden)
	out := make([]float32, 1)
	for r, id := range ids {
		base := bc.TauBase
		if w.TauBase != nil {
			base = float64(w.TauBase[id])
		}
		switch bc.InitialPrecision {
		case "constant":
			tau[r] = float32(base)
		case "table":
			tau[r] = float32(base + softplus(w.TauLogits[id]))
		case "mlp":
			linear(hidden, x[r*D:(r+1)*D], 1, D, f32Weight(w.TauW1, D), bc.TauHidden, w.TauB1)
			for i, u := range hidden {
				hidden[i] = geluErf(u)
			}
			linear(out, hidden, 1, bc.TauHidden, f32Weight(w.TauW2, bc.TauHidden), 1, w.TauB2)
			tau[r] = float32(float64(w.TauRange[0])*base + softplus(out[0]))
		}
	}
}

// capAt applies the λ_max cap when on.
func capAt(x float64, on bool, lmax float64) float64 {
	if on && lmax > 0 && x > lmax {
		return lmax
	}
	return x
}

// forwardBFT is Forward for ArchBFT (the algorithm and hook points are in
// the comment at the top of this file).
func (m *Model) forwardBFT(ids [][]int, opt Options) (*Output, error) {
	T, err := m.checkIDs(ids, opt)
	if err != nil {
		return nil, err
	}
	c, bc, w, hs := &m.Config, m.BFT, m.bft(), opt.Hooks
	B, D, H, KV, dh, F := len(ids), c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP
	n := B * T
	run := func(point string, l int, x []float32, shape ...int) {
		if err == nil {
			err = hs.Run(point, l, x, shape...)
		}
	}
	threads := threadCount(opt.Threads)

	x := make([]float32, n*D)   // residual stream h
	h := make([]float32, n*D)   // normalized sub-block input
	lam := make([]float32, n*D) // precision λ (per token and dimension)
	q, k, v := make([]float32, n*H*dh), make([]float32, n*KV*dh), make([]float32, n*KV*dh)
	e, lamObs, gain := make([]float32, n*D), make([]float32, n*D), make([]float32, n*D)
	neff := make([]float32, n*H)
	z, out := make([]float32, n*D), make([]float32, n*D)
	g, u, a := make([]float32, n*F), make([]float32, n*F), make([]float32, n*F)
	jac, qNoise := make([]float32, n*D), make([]float32, D)
	var cGate, cUp []float32 // W_down ⊙ W_gateᵀ, W_down ⊙ W_upᵀ [D, F] of the current layer
	if bc.Jacobian == "exact" {
		cGate, cUp = make([]float32, D*F), make([]float32, D*F)
	}
	var logLamBar []float32
	if bc.Kriging == "mean_precision" {
		logLamBar = make([]float32, n)
	}
	act, slope := activations[c.Act], activationSlopes[c.Act]

	// Token embedding; layer-0 precision λ⁰_t = τ_t·1 (Eq. 10/11).
	flat := make([]int, 0, n)
	for b, seq := range ids {
		for t, id := range seq {
			m.Embed.widenRow(x[(b*T+t)*D:(b*T+t+1)*D], id)
		}
		flat = append(flat, seq...)
	}
	run(hooks.Embed, -1, x, B, T, D)
	tau := make([]float32, n)
	m.bftTau(tau, flat, x)
	run(hooks.BFTTau, -1, tau, B, T)
	for r, tv := range tau {
		for i := 0; i < D; i++ {
			lam[r*D+i] = tv
		}
	}
	rope := newRopeTable(c.RoPE, dh, T)

	for l := range m.Layers {
		L := &m.Layers[l]
		run(hooks.ResidPre, l, x, B, T, D)
		run(hooks.BFTLambda, l, lam, B, T, D)

		// 1 Observe: projections, QK-norm, RoPE as the Llama/Qwen3 pass.
		rmsNorm(h, x, D, L.Norm1W, c.NormEps)
		run(hooks.LN1Normalized, l, h, B, T, D)
		linear(q, h, n, D, L.Wq, H*dh, L.Bq)
		linear(k, h, n, D, L.Wk, KV*dh, L.Bk)
		linear(v, h, n, D, L.Wv, KV*dh, L.Bv)
		run(hooks.AttnQ, l, q, B, T, H, dh)
		run(hooks.AttnK, l, k, B, T, KV, dh)
		run(hooks.AttnV, l, v, B, T, KV, dh)
		if L.QNorm != nil {
			rmsNorm(q, q, dh, L.QNorm, c.NormEps)
			rmsNorm(k, k, dh, L.KNorm, c.NormEps)
		}
		for r := 0; r < n; r++ {
			for i := 0; i < H; i++ {
				rope.apply(q[(r*H+i)*dh:(r*H+i+1)*dh], r%T)
			}
			for i := 0; i < KV; i++ {
				rope.apply(k[(r*KV+i)*dh:(r*KV+i+1)*dh], r%T)
			}
		}
		run(hooks.AttnRotQ, l, q, B, T, H, dh)
		run(hooks.AttnRotK, l, k, B, T, KV, dh)
		if err != nil {
			return nil, err
		}

		// Kriging weights α̃ (Eq. 2 in the log-bias form of Remark 1), the
		// estimate e and its precision λobs (Eq. 6/13), streamed in tiles.
		if logLamBar != nil {
			if r := logMeanPrecision(logLamBar, lam, D); r >= 0 {
				return nil, fmt.Errorf("model: layer %d: mean precision λ̄ of batch %d position %d is not a positive finite number (check writes at blocks.%d.bft.hook_lambda)",
					l, r/T, r%T, l)
			}
		}
		obs := newBFTObserver(bc, B, T, H, KV, dh, threads, v, e, lamObs, neff)
		var logRho float64
		if bc.RecencyDecay {
			logRho = -math.Log1p(math.Exp(-float64(w.RhoLogit[l][0]))) // log sigmoid(rho_logit)
		}
		args := &attnArgs{
			layer: l, batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: float32(1 / math.Sqrt(float64(dh))),
			q: q, k: k, v: v, logits: bftLogits(T, logLamBar, logRho), observe: obs.row,
			consumers: hs.Consumers(l), tileRows: opt.TileRows, threads: threads,
		}
		if err := attend(args, hs, run); err != nil {
			return nil, err
		}
		for i, x := range lamObs {
			lamObs[i] = float32(capAt(float64(x), bc.CapObs, bc.LambdaMax))
		}
		run(hooks.BFTLambdaObs, l, lamObs, B, T, H, dh)

		// 4 Update (Eq. 3): K = λobs/(λ + λobs), h' = h + K ⊙ e, λ' = λ + λobs.
		for i, lo := range lamObs {
			gain[i] = float32(1 / (1 + float64(lam[i])/float64(lo)))
		}
		run(hooks.BFTGain, l, gain, B, T, H, dh)
		run(hooks.AttnGate, l, gain, B, T, H, dh)
		for i := range z {
			z[i] = gain[i] * e[i]
		}
		run(hooks.AttnZ, l, z, B, T, H, dh)
		if err == nil {
			err = headFault(z, l, T, H, dh)
		}
		if L.Wo.present() {
			linear(out, z, n, H*dh, L.Wo, D, L.Bo)
		} else {
			copy(out, z)
		}
		run(hooks.AttnOut, l, out, B, T, D)
		addTo(x, out)
		run(hooks.ResidMid, l, x, B, T, D)
		for i, lo := range lamObs {
			lam[i] = float32(capAt(float64(lam[i])+float64(lo), bc.CapPosterior, bc.LambdaMax))
		}
		run(hooks.BFTLambdaPost, l, lam, B, T, D)

		// 5 Predict (Eq. 4): h'' = h' + FFN(Norm2(h')).
		rmsNorm(h, x, D, L.Norm2W, c.NormEps)
		run(hooks.LN2Normalized, l, h, B, T, D)
		linear(g, h, n, D, L.WGate, F, L.BGate)
		run(hooks.MLPPre, l, g, B, T, F)
		linear(u, h, n, D, L.WUp, F, L.BUp)
		for i, gi := range g {
			a[i] = act(gi) * u[i]
		}
		run(hooks.MLPPost, l, a, B, T, F)
		linear(out, a, n, F, L.WDown, D, L.BDown)
		run(hooks.MLPOut, l, out, B, T, D)
		addTo(x, out)
		run(hooks.ResidPost, l, x, B, T, D)

		// Precision through the FFN (Eq. 8, 9): the diagonal Jacobian at y,
		// then λ'' = (clip((1+J)²)/λ' + Q)⁻¹.
		// J_i = Σ_k W_down[i,k]·(act'(g_k)·u_k·W_gate[k,i] + act(g_k)·W_up[k,i]), i.e.
		// J = (act'(g) ⊙ u)·CGateᵀ + act(g)·CUpᵀ with C = W_down ⊙ W_{gate,up}ᵀ
		// (§3.2's C = W2 ⊙ W1ᵀ for the two branches of SwiGLU).
		if bc.Jacobian == "exact" {
			wDown, wGate, wUp := L.WDown.widened(), L.WGate.widened(), L.WUp.widened()
			for i := 0; i < D; i++ {
				for kk := 0; kk < F; kk++ {
					cGate[i*F+kk] = wDown[i*F+kk] * wGate[kk*D+i]
					cUp[i*F+kk] = wDown[i*F+kk] * wUp[kk*D+i]
				}
			}
			for i, gi := range g {
				a[i] = float32(slope(gi) * float64(u[i])) // a is free again: act'(g) ⊙ u
				u[i] = act(gi)                            // and u: act(g)
			}
			linear(jac, a, n, F, f32Weight(cGate, F), D, nil)
			linear(out, u, n, F, f32Weight(cUp, F), D, nil)
			addTo(jac, out)
		} else {
			clear(jac)
		}
		run(hooks.BFTJacobian, l, jac, B, T, D)
		for i, ql := range w.QLogits[l] {
			qNoise[i] = float32(softplus(ql) * bc.QMax)
		}
		run(hooks.BFTQNoise, l, qNoise, H, dh)
		for r := 0; r < n; r++ {
			for i := 0; i < D; i++ {
				o := r*D + i
				f := 1 + float64(jac[o])
				var d float64
				if bc.JacobianClip == "abs" {
					d = max(math.Abs(f), bc.JacobianEps)
					d *= d
				} else {
					d = max(f*f, bc.JacobianEps)
				}
				lam[o] = float32(capAt(1/(d/float64(lam[o])+float64(qNoise[i])), bc.CapPredicted, bc.LambdaMax))
			}
		}
		run(hooks.BFTLambdaPred, l, lam, B, T, D)
		if err != nil {
			return nil, err
		}
		if err := residualFault(x, l, T, D); err != nil {
			return nil, err
		}
	}

	rmsNorm(h, x, D, m.FinalW, c.NormEps)
	run(hooks.LNFinalNormalized, -1, h, B, T, D)
	res := m.logits(h, nil, opt.Compute, B, T, opt, run)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// bft returns the model's BFT state, or nil for another family.
func (m *Model) bft() *bftWeights { w, _ := m.ext.(*bftWeights); return w }

func (*bftWeights) forward(m *Model, ids [][]int, opt Options) (*Output, error) {
	return m.forwardBFT(ids, opt)
}
