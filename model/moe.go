package model

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/filterlens/probe/hooks"
)

// The mixture-of-experts channel mixer (Layer.ffn) of Mixtral, Qwen3-MoE,
// OLMoE and gpt-oss. For each token h (a row of the normalized input, [D]):
//
//	z = h·W_rᵀ (+ b_r)                        router logits over E experts (hook_router_logits)
//	softmax-first (Mixtral, Qwen3-MoE, OLMoE):
//	  p = softmax(z); S = top-k(p); w_e = p_e, e ∈ S; w ← w/Σw when Normalize
//	top-k-first (gpt-oss):
//	  S = top-k(z); w = softmax(z_S)
//	y = Σ_{e∈S} w_e · down_e(act(gate_e(h)) ⊙ up_e(h))   (hook_expert_indices, hook_expert_weights)
//
// The order of softmax and top-k is the family's (MoEConfig.Order), as is
// the renormalisation (Normalize: Mixtral always, Qwen3-MoE and OLMoE by
// norm_topk_prob). Ties in the top-k go to the lower expert id and S is in
// descending order of weight, as torch.topk returns it. Each expert's MLP
// runs only on the tokens routed to it: the rows are gathered per expert so
// that every product is a matrix product, the outputs scaled by their
// routing weights and added into y, experts in increasing id (the order of
// Hugging Face's eager loop).

// MoEConfig holds a mixture-of-experts model's channel mixer settings
// (Config.MoE).
type MoEConfig struct {
	// Experts is the number of experts E per sparse layer
	// (num_local_experts, num_experts), TopK the experts per token k
	// (num_experts_per_tok), DExpert each expert's hidden width
	// (moe_intermediate_size; intermediate_size where the family has no
	// dense layers).
	Experts, TopK, DExpert int
	// Order says whether the router's softmax comes before the top-k
	// (RouteSoftmaxTopK, the default "") or after it (RouteTopKSoftmax).
	Order RouterOrder
	// Normalize divides the k weights by their sum (norm_topk_prob;
	// Mixtral always). Only with RouteSoftmaxTopK: after RouteTopKSoftmax
	// the weights sum to 1 already.
	Normalize bool
	// RouterBias says that the router has a bias b_r (gpt-oss), stored
	// beside its weight (….bias for ….weight).
	RouterBias bool
	// SwiGLULimit, when positive, makes the experts' activation gpt-oss's
	// clamped SwiGLU (clampedSwiGLU: swiglu_limit, 7 in the release) with
	// gain SwiGLUAlpha (swiglu_alpha, 1.702) in place of act(gate)·up.
	SwiGLULimit, SwiGLUAlpha float32
	// Dense marks, per layer, the layers whose channel mixer is the dense
	// MLP of width DMLP instead of the experts (Qwen3-MoE's
	// mlp_only_layers and decoder_sparse_step); nil: every layer sparse.
	Dense []bool
	// MXFP4 says that config.json declares the experts' matrices stored in
	// MXFP4 (gpt-oss's quantization_config, quant_method mxfp4: the
	// `*_blocks`/`*_scales` tensors). A checkpoint's experts load by the
	// tensors present; Generate makes them in MXFP4 when it is set.
	MXFP4 bool
}

// RouterOrder is the order of the router's softmax and top-k selection.
type RouterOrder string

// The router orders.
const (
	// RouteSoftmaxTopK: softmax over all E logits, then the k largest
	// probabilities (Mixtral, Qwen3-MoE, OLMoE).
	RouteSoftmaxTopK RouterOrder = ""
	// RouteTopKSoftmax: the k largest logits, then a softmax over those k
	// (gpt-oss).
	RouteTopKSoftmax RouterOrder = "topk-softmax"
)

// sparse reports whether layer l's channel mixer is the experts.
func (mc *MoEConfig) sparse(l int) bool { return l >= len(mc.Dense) || !mc.Dense[l] }

// moeLayer is one layer's mixture of experts (a channelMixer).
type moeLayer struct {
	cfg     *MoEConfig
	act     string    // the experts' activation: act(gate)·up (activations)
	router  Weight    // W_r [E, D]
	routerB []float32 // b_r [E], nil: none
	experts []moeExpert
}

// moeExpert is one expert's gated MLP: down(act(gate(x)) ⊙ up(x)), each
// projection in its stored dtype with an optional bias (gpt-oss).
type moeExpert struct {
	gate, up, down    Weight // [F, D], [F, D], [D, F]
	bGate, bUp, bDown []float32
}

// moeScratch is a pass's buffers for the mixture of experts, reused from
// layer to layer and pass to pass (moeKept): float32 values and the token
// lists.
type moeScratch struct {
	f   []float32
	ids []int32
}

// moeKept holds the mixture of experts' buffers between layers and passes:
// a bounded list (one per concurrent pass, up to GOMAXPROCS), not a
// sync.Pool, which drops its buffers at every collection — at a low GOGC
// that is between two layers, and each layer then allocated its tens of
// MiB again while the dropped ones were still garbage (TestPeakMemoryFormula's
// Mixtral peaked 12–14 MiB above the formula in about one run in three).
var moeKept struct {
	sync.Mutex
	list []*moeScratch
}

// getMoEScratch takes a kept buffer set, or a new one.
func getMoEScratch() *moeScratch {
	moeKept.Lock()
	defer moeKept.Unlock()
	if n := len(moeKept.list); n > 0 {
		s := moeKept.list[n-1]
		moeKept.list = moeKept.list[:n-1]
		return s
	}
	return new(moeScratch)
}

// putMoEScratch keeps s for the next layer or pass, up to GOMAXPROCS sets.
func putMoEScratch(s *moeScratch) {
	moeKept.Lock()
	defer moeKept.Unlock()
	if len(moeKept.list) < runtime.GOMAXPROCS(0) {
		moeKept.list = append(moeKept.list, s)
	}
}

// scratchFloats is the size of mixChannels' buffers for n = B·T tokens,
// r = min(n, blockRows) rows of one expert at a time: logits n·E, indices
// and weights 2·n·k, the output sum n·D, an expert's gathered input,
// hidden values and output r·(2D + 2F); and the token lists n·k
// + 2E + 1 (int32, counted as floats).
func (e *moeLayer) scratchFloats(B, T int) int {
	n, c := B*T, e.cfg
	r := min(n, blockRows)
	return n*(c.Experts+3*c.TopK+e.router.Cols) + r*(2*e.router.Cols+2*c.DExpert) + 2*c.Experts + 1
}

// mixChannels computes the mixture of experts of the n = B·T rows of h
// [n, D] into out [n, D] (out may be h: the sum is kept apart until every
// expert has read its rows), issuing hook_router_logits,
// hook_expert_indices and hook_expert_weights of layer l; the products
// are in the arithmetic opt.Compute.
func (e *moeLayer) mixChannels(m *Model, out, h []float32, l, B, T int, opt Options, run hookRun) error {
	c := e.cfg
	n, D, E, K, F := B*T, e.router.Cols, c.Experts, c.TopK, c.DExpert
	rows := min(n, blockRows)
	s := getMoEScratch()
	defer putMoEScratch(s)
	need := n*(E+2*K+D) + rows*(2*D+2*F)
	if len(s.f) < need {
		s.f = make([]float32, need)
	}
	if len(s.ids) < n*K+2*E+1 {
		s.ids = make([]int32, n*K+2*E+1)
	}
	f := s.f
	take := func(k int) []float32 { x := f[:k:k]; f = f[k:]; return x }
	z, idx, w, sum := take(n*E), take(n*K), take(n*K), take(n*D)
	xs, a1, a2, ys := take(rows*D), take(rows*F), take(rows*F), take(rows*D)

	// router logits z = h·W_rᵀ (+ b_r), then the routing
	linearAs(opt.Compute, z, h, n, D, e.router, E, e.routerB)
	run(hooks.MLPRouterLogits, l, z, B, T, E)
	if err := e.route(z, idx, w, n, l, T); err != nil {
		return err
	}
	run(hooks.MLPExpertIndices, l, idx, B, T, K)
	run(hooks.MLPExpertWeights, l, w, B, T, K)

	// the tokens of each expert, in token order (a counting sort of the
	// n·k assignments; a hook may have changed the ids: each must still be
	// one)
	start, order := s.ids[:E+1], s.ids[E+1:E+1+n*K]
	clear(start)
	for i, v := range idx {
		id := int(v)
		if float32(id) != v || id < 0 || id >= E {
			return fmt.Errorf("model: %s: value %v at batch %d position %d (slot %d) is not an expert id in 0…%d",
				hooks.Name(hooks.MLPExpertIndices, l), v, i/K/T, (i/K)%T, i%K, E-1)
		}
		start[id+1]++
	}
	for x := 0; x < E; x++ {
		start[x+1] += start[x]
	}
	cursor := s.ids[E+1+n*K:][:E]
	copy(cursor, start[:E])
	for i, v := range idx {
		id := int(v)
		order[cursor[id]] = int32(i) // assignment i = token·K + slot
		cursor[id]++
	}

	// each expert on its tokens only, rows gathered into matrices
	clear(sum)
	for x := 0; x < E; x++ {
		ex := &e.experts[x]
		list := order[start[x]:start[x+1]]
		for r0 := 0; r0 < len(list); r0 += rows {
			part := list[r0:min(r0+rows, len(list))]
			k := len(part)
			for j, a := range part {
				tok := int(a) / K
				copy(xs[j*D:(j+1)*D], h[tok*D:(tok+1)*D])
			}
			linearAs(opt.Compute, a1[:k*F], xs[:k*D], k, D, ex.gate, F, ex.bGate)
			linearAs(opt.Compute, a2[:k*F], xs[:k*D], k, D, ex.up, F, ex.bUp)
			e.activate(a1[:k*F], a2[:k*F])
			linearAs(opt.Compute, ys[:k*D], a1[:k*F], k, F, ex.down, D, ex.bDown)
			// y[token] += w · expert(x)
			for j, a := range part {
				tok, wt := int(a)/K, w[a]
				dst, src := sum[tok*D:(tok+1)*D], ys[j*D:(j+1)*D]
				for i, v := range src {
					dst[i] += v * wt
				}
			}
		}
	}
	copy(out[:n*D], sum)
	return nil
}

// activate sets gate to the experts' gated activation of gate and up:
// act(gate)·up, or gpt-oss's clamped SwiGLU where MoEConfig.SwiGLULimit is
// set.
func (e *moeLayer) activate(gate, up []float32) {
	if c := e.cfg; c.SwiGLULimit > 0 {
		clampedSwiGLU(gate, up, c.SwiGLULimit, c.SwiGLUAlpha)
		return
	}
	swiglu(gate, up, e.act)
}

// clampedSwiGLU is gpt-oss's expert activation (Hugging Face
// GptOssExperts), elementwise with limit ℓ and gain α:
//
//	g = min(gate, ℓ),  u = clamp(up, −ℓ, ℓ)
//	gate ← (u + 1) · g · σ(α·g)
//
// in float32 as PyTorch rounds it (α·g rounded, σ in float64 then
// rounded; a NaN gate stays NaN). The gate and up values arrive as the
// separate products of the fused gate_up_proj's even and odd columns.
func clampedSwiGLU(gate, up []float32, limit, alpha float32) {
	const chunk = 4096
	n := len(gate)
	up = up[:n]
	parallelRows((n+chunk-1)/chunk, chunk, func(lo, hi int) {
		g, u := gate[lo*chunk:min(hi*chunk, n)], up[lo*chunk:min(hi*chunk, n)]
		for i, x := range g {
			x = min(x, limit) // NaN stays NaN (Go's min propagates it, as torch.clamp)
			v := max(min(u[i], limit), -limit)
			g[i] = (v + 1) * (x * sigmoid(x*alpha))
		}
	})
}

// route fills idx [n, k] (expert ids as float32) and w [n, k] (their
// weights) from the router logits z [n, E] in the configured order (see
// the file comment); a non-finite logit is an error naming layer l and
// the token.
func (e *moeLayer) route(z, idx, w []float32, n, l, T int) error {
	c := e.cfg
	E, K := c.Experts, c.TopK
	if i := firstNonFinite(z[:n*E]); i >= 0 {
		return fmt.Errorf("model: non-finite router logit %v in layer %d at batch %d position %d (expert %d)",
			z[i], l, i/E/T, (i/E)%T, i%E)
	}
	parallelRows(n, E*K, func(lo, hi int) {
		p := make([]float32, E) // one row's probabilities (softmax first)
		sel := make([]int, K)
		for r := lo; r < hi; r++ {
			zr, ir, wr := z[r*E:(r+1)*E], idx[r*K:(r+1)*K], w[r*K:(r+1)*K]
			if c.Order == RouteTopKSoftmax {
				topK(sel, zr)
				for j, x := range sel {
					wr[j] = zr[x]
				}
				softmaxRow(wr)
			} else {
				copy(p, zr)
				softmaxRow(p)
				topK(sel, p)
				var s float32
				for j, x := range sel {
					wr[j] = p[x]
					s += p[x]
				}
				if c.Normalize {
					for j := range wr {
						wr[j] /= s
					}
				}
			}
			for j, x := range sel {
				ir[j] = float32(x)
			}
		}
	})
	return nil
}

// topK sets sel to the indices of the len(sel) largest values of v in
// descending order of value, ties to the lower index (torch.topk's order
// on CPU).
func topK(sel []int, v []float32) {
	for j := range sel {
		best := -1
		for i, x := range v {
			if (best < 0 || x > v[best]) && !chosen(sel[:j], i) {
				best = i
			}
		}
		sel[j] = best
	}
}

// chosen reports whether i is among sel.
func chosen(sel []int, i int) bool {
	for _, s := range sel {
		if s == i {
			return true
		}
	}
	return false
}

// moeRaw holds the config.json fields of a mixture of experts.
type moeRaw struct {
	NumLocalExperts *int  `json:"num_local_experts"`
	NumExperts      *int  `json:"num_experts"`
	TopK            *int  `json:"num_experts_per_tok"`
	MoEInter        *int  `json:"moe_intermediate_size"`
	NormTopK        *bool `json:"norm_topk_prob"`
	MLPOnly         []int `json:"mlp_only_layers"`
	SparseStep      *int  `json:"decoder_sparse_step"`
}

// moeSpec says which config.json fields a family's mixture of experts
// reads (parseMoE).
type moeSpec struct {
	// normalize: the k weights always sum to 1 (Mixtral); otherwise
	// norm_topk_prob says, false when absent (the config classes'
	// default).
	normalize bool
	// expertWidth: each expert's width is moe_intermediate_size
	// (Qwen3-MoE), not intermediate_size.
	expertWidth bool
	// denseLayers: mlp_only_layers and decoder_sparse_step choose dense
	// layers (Qwen3-MoE).
	denseLayers bool
}

// parseMoE fills c.MoE from config.json after fromDecoder (which set the
// sizes), with the fields spec names, refusing what does not fit: k larger
// than the expert count, non-positive sizes, layer lists out of range.
func parseMoE(c *Config, cf *configFile, spec moeSpec) error {
	var r moeRaw
	if err := json.Unmarshal(cf.data, &r); err != nil {
		return err
	}
	mc := &MoEConfig{DExpert: c.DMLP, Normalize: spec.normalize}
	experts, field := r.NumLocalExperts, "num_local_experts"
	if r.NumExperts != nil {
		if experts != nil && *experts != *r.NumExperts {
			return fmt.Errorf("fields num_experts %d and num_local_experts %d disagree", *r.NumExperts, *experts)
		}
		experts, field = r.NumExperts, "num_experts"
	}
	var err error
	if mc.Experts, err = need(field, experts); err != nil {
		return err
	}
	if mc.TopK, err = need("num_experts_per_tok", r.TopK); err != nil {
		return err
	}
	if mc.TopK > mc.Experts {
		return fmt.Errorf("field num_experts_per_tok %d exceeds the %d experts (%s)", mc.TopK, mc.Experts, field)
	}
	if spec.expertWidth {
		if mc.DExpert, err = need("moe_intermediate_size", r.MoEInter); err != nil {
			return err
		}
	}
	if !spec.normalize && r.NormTopK != nil {
		mc.Normalize = *r.NormTopK
	}
	if elems := float64(mc.Experts) * float64(mc.DExpert) * float64(c.DModel); elems > maxConfigElems {
		return fmt.Errorf("the experts' matrices (%s %d × width %d × hidden_size %d) exceed %d elements", field, mc.Experts, mc.DExpert, c.DModel, maxConfigElems)
	}
	if spec.denseLayers {
		step := 1
		if r.SparseStep != nil {
			if step, err = need("decoder_sparse_step", r.SparseStep); err != nil {
				return err
			}
		}
		mc.Dense = make([]bool, c.Layers)
		for l := range mc.Dense {
			mc.Dense[l] = (l+1)%step != 0
		}
		for _, l := range r.MLPOnly {
			if l < 0 || l >= c.Layers {
				return fmt.Errorf("field mlp_only_layers: layer %d is not in 0…%d", l, c.Layers-1)
			}
			mc.Dense[l] = true
		}
	}
	c.MoE = mc
	return nil
}

// moeHFConfig adds the mixture of experts' fields to a family's
// config.json: the expert count under expertsField, k, norm_topk_prob
// where the family reads it, and Qwen3-MoE's expert width and dense
// layers.
func moeHFConfig(m map[string]any, c *Config, expertsField string, spec moeSpec) map[string]any {
	mc := c.MoE
	m[expertsField], m["num_experts_per_tok"] = mc.Experts, mc.TopK
	if !spec.normalize {
		m["norm_topk_prob"] = mc.Normalize
	}
	if spec.expertWidth {
		m["moe_intermediate_size"] = mc.DExpert
	}
	if spec.denseLayers {
		only := []int{}
		for l, d := range mc.Dense {
			if d {
				only = append(only, l)
			}
		}
		m["mlp_only_layers"], m["decoder_sparse_step"] = only, 1
	}
	return m
}

// expertLayout is one way checkpoints store a layer's experts: the router
// and the per-expert projections under the layer's module, %d the expert
// (empty gate: the fused [E, 2F, D] gate_up and [E, D, F] down tensors of
// transformers 5, rows [gate | up]).
type expertLayout struct {
	module, router        string
	gate, up, down, fused string
}

// expertLayouts lists the stored forms, the first that a layer has wins:
// transformers 5's fused tensors, the per-expert modules of earlier
// Qwen3-MoE and OLMoE checkpoints, and Mixtral's as released.
var expertLayouts = []expertLayout{
	{module: "mlp.", router: "gate.weight", fused: "experts.gate_up_proj", down: "experts.down_proj"},
	{module: "mlp.", router: "gate.weight", gate: "experts.%d.gate_proj.weight", up: "experts.%d.up_proj.weight", down: "experts.%d.down_proj.weight"},
	{module: "block_sparse_moe.", router: "gate.weight", gate: "experts.%d.w1.weight", up: "experts.%d.w3.weight", down: "experts.%d.w2.weight"},
}

// loadExperts reads the router and experts of the layer whose tensors
// are under prefix (model.layers.{l}.) in the first of expertLayouts the
// checkpoint holds; none is an error naming the layer and the names
// looked for.
func loadExperts(ld *loader, c *Config, prefix string) *moeLayer {
	mc, D := c.MoE, c.DModel
	E, F := mc.Experts, mc.DExpert
	e := &moeLayer{cfg: mc, act: c.Act, experts: make([]moeExpert, E)}
	var tried []string
	for _, lay := range expertLayouts {
		p := prefix + lay.module
		probe := p + lay.fused
		if lay.fused == "" {
			probe = p + fmt.Sprintf(lay.gate, 0)
		}
		if !ld.has(probe) {
			tried = append(tried, probe)
			continue
		}
		e.router = ld.weight(p+lay.router, E, D)
		if mc.RouterBias {
			e.routerB = ld.get(p+strings.TrimSuffix(lay.router, "weight")+"bias", E)
		}
		if lay.fused != "" {
			gu, down := ld.stacked(p+lay.fused, E, 2*F, D), ld.stacked(p+lay.down, E, D, F)
			for x := range e.experts {
				ex := &e.experts[x]
				ex.gate, ex.up = gu.rowRange(2*x*F, (2*x+1)*F), gu.rowRange((2*x+1)*F, (2*x+2)*F)
				ex.down = down.rowRange(x*D, (x+1)*D)
			}
			return e
		}
		for x := range e.experts {
			ex := &e.experts[x]
			ex.gate = ld.weight(p+fmt.Sprintf(lay.gate, x), F, D)
			ex.up = ld.weight(p+fmt.Sprintf(lay.up, x), F, D)
			ex.down = ld.weight(p+fmt.Sprintf(lay.down, x), D, F)
		}
		return e
	}
	ld.errs = append(ld.errs, fmt.Sprintf("%s: no experts in a known layout (looked for %s)", prefix, list(tried)))
	return nil
}

// loadMoEDecoder reads a Llama-layout decoder whose channel mixers are
// mixtures of experts (Mixtral, Qwen3-MoE, OLMoE): attention as
// loadDecoder's (QK-norm per head, or over the whole projection when
// fullQKNorm: OLMoE), each sparse layer's experts (loadExperts), each
// dense layer's MLP (Qwen3-MoE's mlp_only_layers).
func loadMoEDecoder(m *Model, ld *loader, fullQKNorm bool) {
	c := &m.Config
	D, H, KV, dh, F, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP, c.Vocab
	p := "model."
	if !ld.has(p+"embed_tokens.weight") && ld.has("embed_tokens.weight") {
		p = ""
	}
	bias := func(on bool, name string, n int) []float32 {
		if !on {
			return nil
		}
		return ld.get(name, n)
	}
	qn, kn := dh, dh
	if fullQKNorm {
		qn, kn = H*dh, KV*dh
	}
	ld.ignore("rotary_emb.inv_freq")
	m.Embed = ld.weight(p+"embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		lp := fmt.Sprintf("%slayers.%d.", p, l)
		a := lp + "self_attn."
		L.Norm1W = ld.get(lp+"input_layernorm.weight", D)
		L.Norm2W = ld.get(lp+"post_attention_layernorm.weight", D)
		L.Wq, L.Bq = ld.weight(a+"q_proj.weight", H*dh, D), bias(c.QKVBias, a+"q_proj.bias", H*dh)
		L.Wk, L.Bk = ld.weight(a+"k_proj.weight", KV*dh, D), bias(c.QKVBias, a+"k_proj.bias", KV*dh)
		L.Wv, L.Bv = ld.weight(a+"v_proj.weight", KV*dh, D), bias(c.QKVBias, a+"v_proj.bias", KV*dh)
		L.Wo, L.Bo = ld.weight(a+"o_proj.weight", D, H*dh), bias(c.OBias, a+"o_proj.bias", D)
		if c.QKNorm {
			L.QNorm, L.KNorm = ld.get(a+"q_norm.weight", qn), ld.get(a+"k_norm.weight", kn)
		}
		if c.MoE.sparse(l) {
			if e := loadExperts(ld, c, lp); e != nil {
				L.ffn = e
			}
			continue
		}
		L.WGate = ld.weight(lp+"mlp.gate_proj.weight", F, D)
		L.WUp = ld.weight(lp+"mlp.up_proj.weight", F, D)
		L.WDown = ld.weight(lp+"mlp.down_proj.weight", D, F)
	}
	m.FinalW = ld.get(p+"norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}
