package model

// The AFA toy filters of zoo/train/afa_toy.py: P. Racioppo, "Attention as an
// Adaptive Filter" (paper 001) §4.2, one isotropic AFA layer (Algorithm 1,
// the attention of afa.go) predicting the next noisy measurement of a 2-D
// linear system, and the standard-attention baseline of the paper's Fig. 3.
// Inputs are real state-plane vectors, not tokens:
//
//	e_t = R·P_u z_t                  embedding: embed.weight [d_e, 2] = first columns of R (I or random orthogonal)
//	AFA:     y_t = Re(L_P(e^{λΔt} ⊙ ((1 − s)Z_v + s·Z̄_v)))_t   Algorithm 1 steps 2–18 on e (no norm, no residual, no FFN)
//	softmax: h = W_in e + PE;  h += Attn(LN(h));  h += FFN(LN(h)) per block;  y = W_out LN(h)
//	prediction of z_{t+1}: (Rᵀ y_t)[:2] = embed.weightᵀ·y_t
//
// config.json ("model_type": "afa_toy"): layer ("afa" or "softmax"),
// state_dim (2), embed_dim (d_e), seq_len, embedding, embedding_seed, the
// simulation options (data) and the training recipe (training), which the
// pass does not read; for "afa": num_heads, head_dim (2d reals per head,
// a multiple of 4), qkv_bias, o_bias and the "afa" object of afa_config.go
// (qk_source must be "values"); for "softmax": a "softmax" object with
// num_layers, num_heads, ffn_dim, positional ("sinusoidal", "rope",
// "none"), rope_theta, layer_norm_eps. Tensors of an AFA filter:
//
//	embed.weight                         [d_e, 2]
//	afa.v_proj.weight_{real,imag}        [H·d, d_e]   L_V
//	afa.v_proj.bias_{real,imag}          [H·d]        (qkv_bias)
//	afa.{q,k}_proj.weight_{real,imag}    [H, d, d]    per-head L_Q, L_K of Z_v
//	afa.{q,k}_proj.bias_{real,imag}      [H, d]       (qkv_bias)
//	afa.o_proj.weight_{real,imag}        [d_e, H·d]   L_P
//	afa.o_proj.bias_{real,imag}          [d_e]        (o_bias; Im cannot reach the output)
//	afa.alpha, afa.sigma, afa.eta, afa.tau_s [H]; afa.omega [H, d/2]; afa.delta [H, d]   as afa_config.go
//
// and of a softmax baseline (nn.Linear and nn.LayerNorm layouts):
// embed.weight, in_proj.{weight,bias}, layers.{l}.ln1.*, layers.{l}.attn.{q,k,v,o}_proj.*,
// layers.{l}.ln2.*, layers.{l}.mlp.fc1.*, layers.{l}.mlp.fc2.*, norm.*, out_proj.*.

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/filterlens/probe/checkpoint"
)

// ArchAFAToy names the toy-system filters of zoo/train/afa_toy.py.
const ArchAFAToy Arch = "afa_toy"

const afaToyModelType = "afa_toy"

// AFAToyConfig is the config.json of an AFA toy checkpoint.
type AFAToyConfig struct {
	// Layer is "afa" (one Algorithm 1 layer) or "softmax" (the Fig. 3 baseline).
	Layer    string
	StateDim int // dimension of the measured state (2)
	EmbedDim int // d_e
	SeqLen   int // input tokens the filter was trained on
	// Embedding is "identity" or "random_orthogonal" (R of e = R·P_u z;
	// embed.weight holds its first StateDim columns either way).
	Embedding string

	// AFA ("afa" only): heads, reals per head (2d), affine projections and
	// the options of afa_config.go.
	Heads, DHead   int
	QKVBias, OBias bool
	AFA            AFAConfig
	Softmax        SoftmaxToyConfig // "softmax" only
	Data           AFAToyDataOptions
}

// SoftmaxToyConfig describes the standard-attention baseline.
type SoftmaxToyConfig struct {
	Layers, Heads, FFN int
	// Positional is "sinusoidal" (additive, Vaswani et al.; the paper's
	// "additive positional embedding"), "rope" (rotate-half) or "none".
	Positional string
	RoPETheta  float64
	LNEps      float64
}

// AFAToyDataOptions are the simulation options of the checkpoint's data
// (notes 001 §C.0), as config.json "data" records them.
type AFAToyDataOptions struct {
	A         [][]float64 `json:"A"`
	Dt        float64     `json:"dt"`     // Euler step
	Stride    int         `json:"stride"` // Euler steps per measurement
	Steps     int         `json:"steps"`  // Euler steps simulated
	Sigma     float64     `json:"sigma"`  // process noise (Fig. 1 caption's σ² number)
	Eta       float64     `json:"eta"`    // measurement noise (caption's η² number)
	Noise     string      `json:"noise"`  // "std": the numbers multiply randn; "variance": their roots do
	R0        []float64   `json:"r0"`     // initial radius range
	Setting   string      `json:"setting"`
	TrainN    int         `json:"train_trajectories"`
	TestN     int         `json:"test_trajectories"`
	TrainSeed int         `json:"train_seed"`
	TestSeed  int         `json:"test_seed"`
}

// NoiseStd returns the standard deviations of the process and measurement
// noise the simulator used.
func (d *AFAToyDataOptions) NoiseStd() (sigma, eta float64) {
	if d.Noise == "variance" {
		return math.Sqrt(d.Sigma), math.Sqrt(d.Eta)
	}
	return d.Sigma, d.Eta
}

// AFAToy is a loaded toy filter.
type AFAToy struct {
	Config AFAToyConfig
	Dir    string
	Embed  []float32 // [d_e, StateDim]

	afa *Model // the AFA layer as an AFA Model (Layers[0] and afa weights), "afa" only
	sm  *softmaxToyWeights
}

type softmaxToyWeights struct {
	InW, InB, NormW, NormB, OutW, OutB []float32
	Layers                             []softmaxToyLayer
}

type softmaxToyLayer struct {
	LN1W, LN1B, LN2W, LN2B []float32
	Wq, Bq, Wk, Bk, Wv, Bv []float32
	Wo, Bo                 []float32
	W1, B1, W2, B2         []float32
}

// ReadAFAToyConfig reads and checks dir/config.json.
func ReadAFAToyConfig(dir string) (*AFAToyConfig, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := parseAFAToyConfig(data)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %v", path, err)
	}
	return c, nil
}

func parseAFAToyConfig(data []byte) (*AFAToyConfig, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if !modelTypeIs(raw, afaToyModelType) {
		return nil, fmt.Errorf("model_type is not %q", afaToyModelType)
	}
	c := &AFAToyConfig{}
	str := func(name string, dst *string) error {
		if raw[name] == nil {
			return fmt.Errorf("field %s is required", name)
		}
		if err := json.Unmarshal(raw[name], dst); err != nil {
			return fmt.Errorf("field %s: %v", name, err)
		}
		return nil
	}
	num := func(name string, dst *int, min int) error {
		if raw[name] == nil {
			return fmt.Errorf("field %s is required", name)
		}
		if err := json.Unmarshal(raw[name], dst); err != nil {
			return fmt.Errorf("field %s: %v", name, err)
		}
		if *dst < min {
			return fmt.Errorf("field %s = %d must be ≥ %d", name, *dst, min)
		}
		return nil
	}
	flag := func(name string, dst *bool) error {
		if raw[name] == nil {
			return fmt.Errorf("field %s is required", name)
		}
		if err := json.Unmarshal(raw[name], dst); err != nil {
			return fmt.Errorf("field %s: %v", name, err)
		}
		return nil
	}
	for _, err := range []error{str("layer", &c.Layer), str("embedding", &c.Embedding),
		num("state_dim", &c.StateDim, 1), num("embed_dim", &c.EmbedDim, 1), num("seq_len", &c.SeqLen, 1)} {
		if err != nil {
			return nil, err
		}
	}
	if c.Embedding != "identity" && c.Embedding != "random_orthogonal" {
		return nil, fmt.Errorf("field embedding = %q is not one of [identity random_orthogonal]", c.Embedding)
	}
	if c.StateDim > c.EmbedDim {
		return nil, fmt.Errorf("state_dim %d exceeds embed_dim %d", c.StateDim, c.EmbedDim)
	}
	if raw["data"] != nil {
		if err := json.Unmarshal(raw["data"], &c.Data); err != nil {
			return nil, fmt.Errorf("field data: %v", err)
		}
	}
	switch c.Layer {
	case "afa":
		for _, err := range []error{num("num_heads", &c.Heads, 1), num("head_dim", &c.DHead, 4),
			flag("qkv_bias", &c.QKVBias), flag("o_bias", &c.OBias)} {
			if err != nil {
				return nil, err
			}
		}
		if c.DHead%4 != 0 {
			return nil, fmt.Errorf("head_dim %d must be a multiple of 4: d = head_dim/2 complex channels in conjugate pairs (±ω)", c.DHead)
		}
		if err := parseAFAOptions(raw["afa"], &c.AFA); err != nil {
			return nil, err
		}
		if c.AFA.QKSource != "values" {
			return nil, fmt.Errorf("field afa.qk_source = %q: the toy filter computes Z_q, Z_k from Z_v (\"values\", Algorithm 1 step 3) only", c.AFA.QKSource)
		}
	case "softmax":
		var s struct {
			Layers     *int     `json:"num_layers"`
			Heads      *int     `json:"num_heads"`
			FFN        *int     `json:"ffn_dim"`
			Positional *string  `json:"positional"`
			RoPETheta  *float64 `json:"rope_theta"`
			LNEps      *float64 `json:"layer_norm_eps"`
		}
		if err := decodeStrict(raw["softmax"], &s, "softmax"); err != nil {
			return nil, err
		}
		if s.Layers == nil || s.Heads == nil || s.FFN == nil || s.Positional == nil {
			return nil, fmt.Errorf("field softmax needs num_layers, num_heads, ffn_dim and positional")
		}
		c.Softmax = SoftmaxToyConfig{Layers: *s.Layers, Heads: *s.Heads, FFN: *s.FFN, RoPETheta: 10000, LNEps: 1e-5}
		if err := choice(&c.Softmax.Positional, s.Positional, "softmax.positional", "sinusoidal", "rope", "none"); err != nil {
			return nil, err
		}
		if s.RoPETheta != nil {
			c.Softmax.RoPETheta = *s.RoPETheta
		}
		if s.LNEps != nil {
			c.Softmax.LNEps = *s.LNEps
		}
		sm := &c.Softmax
		if sm.Layers < 1 || sm.Heads < 1 || sm.FFN < 1 || c.EmbedDim%sm.Heads != 0 {
			return nil, fmt.Errorf("field softmax: num_layers %d, num_heads %d (must divide embed_dim %d), ffn_dim %d must be ≥ 1",
				sm.Layers, sm.Heads, c.EmbedDim, sm.FFN)
		}
		if sm.Positional == "rope" && (c.EmbedDim/sm.Heads)%2 != 0 {
			return nil, fmt.Errorf("field softmax.positional = \"rope\" needs an even head width, have %d", c.EmbedDim/sm.Heads)
		}
		if !(sm.RoPETheta > 0) || !(sm.LNEps >= 0) {
			return nil, fmt.Errorf("field softmax: rope_theta %v must be > 0 and layer_norm_eps %v ≥ 0", sm.RoPETheta, sm.LNEps)
		}
	default:
		return nil, fmt.Errorf("field layer = %q is not one of [afa softmax]", c.Layer)
	}
	return c, nil
}

// LoadAFAToy reads dir/config.json and dir/model.safetensors.
func LoadAFAToy(dir string) (*AFAToy, error) {
	cfg, err := ReadAFAToyConfig(dir)
	if err != nil {
		return nil, err
	}
	ck, err := checkpoint.OpenFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	m := &AFAToy{Config: *cfg, Dir: dir}
	ld := newLoader(ck, filepath.Join(dir, "model.safetensors"))
	ld.guard(func() {
		m.Embed = ld.get("embed.weight", cfg.EmbedDim, cfg.StateDim)
		if cfg.Layer == "afa" {
			m.loadAFA(ld)
		} else {
			m.loadSoftmax(ld)
		}
	})
	if err := ld.finish(false); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *AFAToy) loadAFA(ld *loader) {
	c := &m.Config
	De, H, d := c.EmbedDim, c.Heads, c.DHead/2
	inner := &Model{Config: Config{Arch: ArchAFA, ModelType: afaToyModelType, Layers: 1, DModel: De, Heads: H, KVHeads: H,
		DHead: c.DHead, QKVBias: c.QKVBias, OBias: c.OBias, AFA: &c.AFA}, Dir: m.Dir}
	w := &afaWeights{Layers: make([]afaLayer, 1)}
	inner.ext, inner.Layers = w, make([]Layer, 1)
	L, P := &inner.Layers[0], &w.Layers[0]
	cplx := func(name string, shape ...int) (re, im []float32) {
		return ld.get(name+"_real", shape...), ld.get(name+"_imag", shape...)
	}
	re, im := cplx("afa.v_proj.weight", H*d, De)
	L.Wv = f32Weight(complexRows(re, im, De), De)
	for _, qk := range []struct {
		W    *Weight
		B    *[]float32
		name string
	}{{&L.Wq, &L.Bq, "afa.q_proj"}, {&L.Wk, &L.Bk, "afa.k_proj"}} {
		re, im := cplx(qk.name+".weight", H, d, d)
		*qk.W = f32Weight(complexBlocks(re, im, H, d), 2*d)
		if c.QKVBias {
			re, im = cplx(qk.name+".bias", H, d)
			*qk.B = complexRows(re, im, 1)
		}
	}
	if c.QKVBias {
		re, im = cplx("afa.v_proj.bias", H*d)
		L.Bv = complexRows(re, im, 1)
	}
	re, im = cplx("afa.o_proj.weight", De, H*d)
	L.Wo = f32Weight(complexToReal(re, im, De, H*d), 2*H*d)
	if c.OBias {
		L.Bo, _ = cplx("afa.o_proj.bias", De) // Im(b) cannot reach Re(L_P z)
	}
	P.Alpha, P.Sigma, P.Eta, P.TauS = ld.get("afa.alpha", H), ld.get("afa.sigma", H), ld.get("afa.eta", H), ld.get("afa.tau_s", H)
	P.Omega, P.Delta = ld.get("afa.omega", H, d/2), ld.get("afa.delta", H, d)
	m.afa = inner
}

func (m *AFAToy) loadSoftmax(ld *loader) {
	c := &m.Config
	D, F := c.EmbedDim, c.Softmax.FFN
	w := &softmaxToyWeights{Layers: make([]softmaxToyLayer, c.Softmax.Layers)}
	w.InW, w.InB = ld.get("in_proj.weight", D, D), ld.get("in_proj.bias", D)
	for l := range w.Layers {
		L := &w.Layers[l]
		p := fmt.Sprintf("layers.%d.", l)
		L.LN1W, L.LN1B = ld.get(p+"ln1.weight", D), ld.get(p+"ln1.bias", D)
		L.LN2W, L.LN2B = ld.get(p+"ln2.weight", D), ld.get(p+"ln2.bias", D)
		L.Wq, L.Bq = ld.get(p+"attn.q_proj.weight", D, D), ld.get(p+"attn.q_proj.bias", D)
		L.Wk, L.Bk = ld.get(p+"attn.k_proj.weight", D, D), ld.get(p+"attn.k_proj.bias", D)
		L.Wv, L.Bv = ld.get(p+"attn.v_proj.weight", D, D), ld.get(p+"attn.v_proj.bias", D)
		L.Wo, L.Bo = ld.get(p+"attn.o_proj.weight", D, D), ld.get(p+"attn.o_proj.bias", D)
		L.W1, L.B1 = ld.get(p+"mlp.fc1.weight", F, D), ld.get(p+"mlp.fc1.bias", F)
		L.W2, L.B2 = ld.get(p+"mlp.fc2.weight", D, F), ld.get(p+"mlp.fc2.bias", D)
	}
	w.NormW, w.NormB = ld.get("norm.weight", D), ld.get("norm.bias", D)
	w.OutW, w.OutB = ld.get("out_proj.weight", D, D), ld.get("out_proj.bias", D)
	m.sm = w
}

// AFAParams returns the AFA layer's head parameters (a = α², ω, σ², η², τ_s,
// s, Δt) as the pass uses them.
func (m *AFAToy) AFAParams() ([]AFAHeadParams, error) {
	if m.afa == nil {
		return nil, fmt.Errorf("model: %s is a %q toy checkpoint, not AFA", m.Dir, m.Config.Layer)
	}
	return m.afa.AFAParams()
}

// AFAToyOutput is what a toy forward pass returns.
type AFAToyOutput struct {
	Batch, T int
	Out      []float32 // [B, T, d_e]: the model output in the embedding space
	Pred     []float32 // [B, T, StateDim]: the prediction of z_{t+1}, embed.weightᵀ·Out
	// Patterns holds the attention of each layer [B, H, T, T] (rows sum to
	// 1): the AFA filter's A = softmax_j(τ_s L), or each softmax layer's.
	Patterns [][]float32
	// Decayed is the AFA filter's Â = E ⊙ A [B, H, T, T], the weights its
	// values are summed with (rows sum to ≤ 1); nil for the baseline.
	Decayed []float32
	// Heads is H of Patterns.
	Heads int
}

// checkInput validates x [B, T, StateDim].
func (m *AFAToy) checkInput(x []float32, B, T int) error {
	if B < 1 || T < 1 || len(x) != B*T*m.Config.StateDim {
		return fmt.Errorf("model: toy input has %d values, want batch %d × %d positions × state dim %d", len(x), B, T, m.Config.StateDim)
	}
	if i := firstNonFinite(x); i >= 0 {
		return fmt.Errorf("model: non-finite toy input %v at batch %d position %d", x[i], i/m.Config.StateDim/T, (i/m.Config.StateDim)%T)
	}
	return nil
}

// embed returns e = embed.weight·z per row: [B·T, d_e].
func (m *AFAToy) embed(x []float32, n int) []float32 {
	e := make([]float32, n*m.Config.EmbedDim)
	linear(e, x, n, m.Config.StateDim, f32Weight(m.Embed, m.Config.StateDim), m.Config.EmbedDim, nil)
	return e
}

// project returns embed.weightᵀ·y per row: [n, StateDim].
func (m *AFAToy) project(y []float32, n int) []float32 {
	S, De := m.Config.StateDim, m.Config.EmbedDim
	out := make([]float32, n*S)
	for r := 0; r < n; r++ {
		for s := 0; s < S; s++ {
			var acc float64
			for k := 0; k < De; k++ {
				acc += float64(y[r*De+k]) * float64(m.Embed[k*S+s])
			}
			out[r*S+s] = float32(acc)
		}
	}
	return out
}

// Forward runs the filter on measurements x [B, T, StateDim] (row-major).
// Sequences longer than the training length are allowed (the pass has no
// position limit) but extrapolate.
func (m *AFAToy) Forward(x []float32, B, T int) (*AFAToyOutput, error) {
	if err := m.checkInput(x, B, T); err != nil {
		return nil, err
	}
	e := m.embed(x, B*T)
	var out *AFAToyOutput
	var err error
	if m.afa != nil {
		out, err = m.forwardAFA(e, B, T)
	} else {
		out, err = m.forwardSoftmax(e, B, T)
	}
	if err != nil {
		return nil, err
	}
	if i := firstNonFinite(out.Out); i >= 0 {
		return nil, fmt.Errorf("model: %s: non-finite output %v at batch %d position %d", m.Dir, out.Out[i], i/m.Config.EmbedDim/T, (i/m.Config.EmbedDim)%T)
	}
	out.Pred = m.project(out.Out, B*T)
	return out, nil
}

// valueProjections computes Z_v = L_V(e) and, with qk, Z_q, Z_k = L_Q,K(Z_v)
// ([B·T, H·2d], (re, im) interleaved).
func (m *AFAToy) valueProjections(e []float32, n int, qk bool) (v, q, k []float32) {
	c, L := &m.afa.Config, &m.afa.Layers[0]
	W := c.Heads * c.DHead
	v = make([]float32, n*W)
	linear(v, e, n, c.DModel, L.Wv, W, L.Bv)
	if qk {
		q, k = make([]float32, n*W), make([]float32, n*W)
		headLinear(q, v, n, c.Heads, c.DHead, L.Wq.F32, L.Bq)
		headLinear(k, v, n, c.Heads, c.DHead, L.Wk.F32, L.Bk)
	}
	return v, q, k
}

// forwardAFA is Algorithm 1 steps 2–18 on the embedded inputs with the
// attention code of afa.go (afaAttention: steps 11–15).
func (m *AFAToy) forwardAFA(e []float32, B, T int) (*AFAToyOutput, error) {
	am := m.afa
	c, ac, L := &am.Config, am.AFA, &am.Layers[0]
	H, dw := c.Heads, c.DHead
	d, W, n := dw/2, H*dw, B*T
	v, q, k := m.valueProjections(e, n, true)
	if ac.NormalizeQK {
		norms := make([]float32, n*H)
		l2Normalize(q, dw, norms)
		l2Normalize(k, dw, norms)
	}
	qn2, kn2 := make([]float32, n*H), make([]float32, n*H)
	for r := 0; r < n*H; r++ {
		qn2[r] = float32(sqNorm(q[r*dw : (r+1)*dw]))
		kn2[r] = float32(sqNorm(k[r*dw : (r+1)*dw]))
	}
	params := make([]AFAHeadParams, H)
	omegaDt := make([]float64, H*d)
	for h := range params {
		params[h] = am.afaHead(0, h)
		for i, om := range params[h].Omega {
			omegaDt[h*d+i] = om * ac.Dt
		}
	}
	qt, kt, vt := make([]float32, n*W), make([]float32, n*W), make([]float32, n*W)
	rotateComplex(qt, q, omegaDt, T, -1)
	rotateComplex(kt, k, omegaDt, T, -1)
	rotateComplex(vt, v, omegaDt, T, -1)
	agg := make([]float32, n*W)
	args := &attnArgs{batch: B, T: T, heads: H, kvHeads: H, dHead: dw, scale: 1, q: qt, k: kt, v: vt, z: agg,
		pattern: make([]float32, B*H*T*T)}
	args.logits, args.decay = afaLogits(params, T, qn2, kn2, make([]float32, n*H))
	if err := causalAttention(args); err != nil {
		return nil, fmt.Errorf("model: %s: AFA attention: %w", m.Dir, err)
	}
	res := &AFAToyOutput{Batch: B, T: T, Heads: H, Patterns: [][]float32{append([]float32(nil), args.pattern...)}}
	decayPattern(args) // Â = E ⊙ A
	res.Decayed = args.pattern
	patternTimesV(args)
	rotateComplex(agg, agg, omegaDt, T, +1) // Z̄_v = e^{iωt} ⊙ Σ_j Â_ij Z̃_v,j
	// Steps 16–17: Z⁺ = e^{(−a + iω)Δt} ⊙ ((1 − s)Z_v + s·Z̄_v).
	for r := 0; r < n; r++ {
		for h := range params {
			p := &params[h]
			dec := p.Decay(1)
			for i, om := range p.Omega {
				o := (r*H+h)*dw + 2*i
				s := p.S[i]
				re := (1-s)*float64(v[o]) + s*float64(agg[o])
				im := (1-s)*float64(v[o+1]) + s*float64(agg[o+1])
				sn, cs := math.Sincos(om * p.Dt)
				agg[o] = float32(dec * (re*cs - im*sn))
				agg[o+1] = float32(dec * (re*sn + im*cs))
			}
		}
	}
	if err := headFault(agg, 0, T, H, dw); err != nil {
		return nil, err
	}
	res.Out = make([]float32, n*c.DModel)
	linear(res.Out, agg, n, W, L.Wo, c.DModel, L.Bo) // step 18: Re(L_P(Z⁺))
	return res, nil
}

// PulledForward returns Fig. 2's pulled-forward estimates of target i for
// every sequence of x [B, T, StateDim]: for j = 0..i the value of source j
// carried to time t_i by the learned dynamics and read out,
// embed.weightᵀ·Re(L_P(e^{λ(i−j)Δt} ⊙ Z_v,j)) (no prediction step, no
// residual mixing; notes 001 §C.2), as [B, i+1, StateDim].
func (m *AFAToy) PulledForward(x []float32, B, T, i int) ([]float32, error) {
	if m.afa == nil {
		return nil, fmt.Errorf("model: %s: pulled-forward estimates need an AFA filter, not %q", m.Dir, m.Config.Layer)
	}
	if err := m.checkInput(x, B, T); err != nil {
		return nil, err
	}
	if i < 0 || i >= T {
		return nil, fmt.Errorf("model: pulled-forward target %d outside [0, %d)", i, T)
	}
	am := m.afa
	c, L := &am.Config, &am.Layers[0]
	H, dw := c.Heads, c.DHead
	W := H * dw
	v, _, _ := m.valueProjections(m.embed(x, B*T), B*T, false)
	params, _ := am.AFAParams()
	p := make([]float32, B*(i+1)*W)
	for b := 0; b < B; b++ {
		for j := 0; j <= i; j++ {
			lag := float64(i - j)
			for h := range params {
				ph := &params[h]
				dec := ph.Decay(lag)
				for ch, om := range ph.Omega {
					o := h*dw + 2*ch
					src, dst := v[(b*T+j)*W+o:], p[(b*(i+1)+j)*W+o:]
					sn, cs := math.Sincos(om * ph.Dt * lag)
					re, im := float64(src[0]), float64(src[1])
					dst[0] = float32(dec * (re*cs - im*sn))
					dst[1] = float32(dec * (re*sn + im*cs))
				}
			}
		}
	}
	y := make([]float32, B*(i+1)*c.DModel)
	linear(y, p, B*(i+1), W, L.Wo, c.DModel, L.Bo)
	return m.project(y, B*(i+1)), nil
}

// SinusoidalEncoding returns Vaswani et al.'s additive position encoding
// [T, D]: pe[p, 2k] = sin(p/10000^{2k/D}), pe[p, 2k+1] = cos(p/10000^{2k/D}),
// evaluated in float64.
func SinusoidalEncoding(T, D int) []float32 {
	pe := make([]float32, T*D)
	for p := 0; p < T; p++ {
		for k := 0; 2*k < D; k++ {
			a := float64(p) / math.Pow(10000, float64(2*k)/float64(D))
			pe[p*D+2*k] = float32(math.Sin(a))
			if 2*k+1 < D {
				pe[p*D+2*k+1] = float32(math.Cos(a))
			}
		}
	}
	return pe
}

// ropeRotateHalf applies rotate-half RoPE to rows of width dh (one head
// slice per position, stride between positions) in place: angle
// p·θ^{−2k/dh} on the pair (k, k + dh/2).
func ropeRotateHalf(x []float32, T, dh, stride int, theta float64) {
	half := dh / 2
	for p := 0; p < T; p++ {
		row := x[p*stride : p*stride+dh]
		for k := 0; k < half; k++ {
			s, c := math.Sincos(float64(p) * math.Pow(theta, -float64(2*k)/float64(dh)))
			a, b := float64(row[k]), float64(row[k+half])
			row[k], row[k+half] = float32(a*c-b*s), float32(b*c+a*s)
		}
	}
}

// forwardSoftmax is the Fig. 3 baseline (see the top of this file).
func (m *AFAToy) forwardSoftmax(e []float32, B, T int) (*AFAToyOutput, error) {
	c, w := &m.Config, m.sm
	D, H, F := c.EmbedDim, c.Softmax.Heads, c.Softmax.FFN
	dh, n := D/H, B*T
	h := make([]float32, n*D)
	linear(h, e, n, D, f32Weight(w.InW, D), D, w.InB)
	if c.Softmax.Positional == "sinusoidal" {
		pe := SinusoidalEncoding(T, D)
		for b := 0; b < B; b++ {
			addTo(h[b*T*D:(b+1)*T*D], pe)
		}
	}
	u := make([]float32, n*D)
	q, k, v, z := make([]float32, n*D), make([]float32, n*D), make([]float32, n*D), make([]float32, n*D)
	f, o := make([]float32, n*F), make([]float32, n*D)
	res := &AFAToyOutput{Batch: B, T: T, Heads: H}
	scale := 1 / math.Sqrt(float64(dh))
	row := make([]float64, T)
	for l := range w.Layers {
		L := &w.Layers[l]
		layerNorm(u, h, D, L.LN1W, L.LN1B, c.Softmax.LNEps)
		linear(q, u, n, D, f32Weight(L.Wq, D), D, L.Bq)
		linear(k, u, n, D, f32Weight(L.Wk, D), D, L.Bk)
		linear(v, u, n, D, f32Weight(L.Wv, D), D, L.Bv)
		if c.Softmax.Positional == "rope" {
			for b := 0; b < B; b++ {
				for hh := 0; hh < H; hh++ {
					ropeRotateHalf(q[b*T*D+hh*dh:], T, dh, D, c.Softmax.RoPETheta)
					ropeRotateHalf(k[b*T*D+hh*dh:], T, dh, D, c.Softmax.RoPETheta)
				}
			}
		}
		pat := make([]float32, B*H*T*T)
		clear(z)
		for b := 0; b < B; b++ {
			for hh := 0; hh < H; hh++ {
				for i := 0; i < T; i++ {
					qi := q[(b*T+i)*D+hh*dh:][:dh]
					mx := math.Inf(-1)
					for j := 0; j <= i; j++ {
						kj := k[(b*T+j)*D+hh*dh:][:dh]
						var s float64
						for x := range qi {
							s += float64(qi[x]) * float64(kj[x])
						}
						row[j] = s * scale
						mx = max(mx, row[j])
					}
					var sum float64
					for j := 0; j <= i; j++ {
						row[j] = math.Exp(row[j] - mx)
						sum += row[j]
					}
					pr := pat[((b*H+hh)*T+i)*T:][:T]
					zi := z[(b*T+i)*D+hh*dh:][:dh]
					acc := make([]float64, dh)
					for j := 0; j <= i; j++ {
						a := row[j] / sum
						pr[j] = float32(a)
						vj := v[(b*T+j)*D+hh*dh:][:dh]
						for x := range acc {
							acc[x] += a * float64(vj[x])
						}
					}
					for x := range zi {
						zi[x] = float32(acc[x])
					}
				}
			}
		}
		res.Patterns = append(res.Patterns, pat)
		linear(o, z, n, D, f32Weight(L.Wo, D), D, L.Bo)
		addTo(h, o)
		layerNorm(u, h, D, L.LN2W, L.LN2B, c.Softmax.LNEps)
		linear(f, u, n, D, f32Weight(L.W1, D), F, L.B1)
		for i, x := range f {
			f[i] = max(x, 0)
		}
		linear(o, f, n, F, f32Weight(L.W2, F), D, L.B2)
		addTo(h, o)
		if i := firstNonFinite(h); i >= 0 {
			return nil, fmt.Errorf("model: %s: non-finite value %v after softmax layer %d at batch %d position %d", m.Dir, h[i], l, i/D/T, (i/D)%T)
		}
	}
	layerNorm(u, h, D, w.NormW, w.NormB, c.Softmax.LNEps)
	res.Out = make([]float32, n*D)
	linear(res.Out, u, n, D, f32Weight(w.OutW, D), D, w.OutB)
	return res, nil
}

// AFAToyData holds the trajectories stored beside a toy checkpoint
// (data.safetensors): N sequences of M measurements (inputs are the first
// seq_len, targets the next), the true states at the measured times, and
// the true states on the simulator's fine grid.
type AFAToyData struct {
	N, M, Fine, StateDim int
	Measurements         []float32 // [N, M, StateDim]
	States               []float32 // [N, M, StateDim]
	StatesFine           []float32 // [N, Fine, StateDim]
}

// ReadAFAToyData reads a data.safetensors file of zoo/train/afa_toy.py.
func ReadAFAToyData(path string) (*AFAToyData, error) {
	ck, err := checkpoint.OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	get := func(name string) ([]float32, []int, error) {
		info, ok := ck.Info(name)
		if !ok {
			return nil, nil, fmt.Errorf("model: %s: tensor %q is missing", path, name)
		}
		if len(info.Shape) != 3 {
			return nil, nil, fmt.Errorf("model: %s: tensor %q has shape %v, want [N, steps, state_dim]", path, name, info.Shape)
		}
		v, err := ck.Float32(name)
		return v, info.Shape, err
	}
	d := &AFAToyData{}
	var sm, ss, sf []int
	if d.Measurements, sm, err = get("measurements"); err != nil {
		return nil, err
	}
	if d.States, ss, err = get("states"); err != nil {
		return nil, err
	}
	if d.StatesFine, sf, err = get("states_fine"); err != nil {
		return nil, err
	}
	if !equalShape(sm, ss) || sf[0] != sm[0] || sf[2] != sm[2] {
		return nil, fmt.Errorf("model: %s: measurements %v, states %v and states_fine %v disagree", path, sm, ss, sf)
	}
	d.N, d.M, d.StateDim, d.Fine = sm[0], sm[1], sm[2], sf[1]
	return d, nil
}

// Inputs returns the first T measurements of every sequence [N, T, StateDim].
func (d *AFAToyData) Inputs(T int) ([]float32, error) {
	if T > d.M {
		return nil, fmt.Errorf("model: toy data has %d measurements per sequence, %d inputs asked", d.M, T)
	}
	S := d.StateDim
	x := make([]float32, d.N*T*S)
	for b := 0; b < d.N; b++ {
		copy(x[b*T*S:(b+1)*T*S], d.Measurements[b*d.M*S:])
	}
	return x, nil
}
