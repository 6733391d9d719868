package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/filterlens/probe/hooks"
)

// Falcon-H1 (model_type falcon_h1, FalconH1ForCausalLM) runs softmax
// attention and a Mamba-2 mixer (ssm.go) side by side in every layer, on
// the same normalized input, then a SwiGLU MLP, with the µP multipliers of
// the release:
//
//	h = RMSNorm(x)
//	x ← x + m_ssm_out·mamba(m_ssm_in·h) + m_attn_out·attn(m_attn_in·h)
//	x ← x + m_down·down(up(h₂) ⊙ silu(m_gate·gate(h₂))),  h₂ = RMSNorm(x)
//
// embeddings × embedding_multiplier, logits × lm_head_multiplier. On the
// block's slots: attention is the token mixer with the Mamba-2 mixer beside
// it (Layer.beside; its ssm_in/out multipliers and the per-section
// mup_vector are the mixer's own), attention_in/out_multiplier are
// Config.AttnInScale/AttnOutScale, the MLP is a channel mixer of this file
// (falconMLP). key_multiplier scales k before RoPE; as q·(c·k) = c·(q·k) it
// is folded into the score scale (Config.AttnScale = key_multiplier/√dh),
// so attn.hook_k and hook_rot_k hold k_proj's output without it. The
// gated RMSNorm of the mixer normalizes each of its n_groups groups.

// ArchFalconH1 is Falcon-H1.
const ArchFalconH1 Arch = "falcon_h1"

// FalconH1Config holds Falcon-H1's multipliers that are not slots of the
// decoder pass: the MLP's (mlp_multipliers: GateScale on gate_proj's
// output before SiLU, DownScale on down_proj's output) and, as released,
// key_multiplier and lm_head_multiplier (folded into Config.AttnScale and
// Config.LogitDivisor).
type FalconH1Config struct {
	GateScale, DownScale, KeyScale, LMHeadScale float32
}

// falconRaw holds FalconH1Config's fields beyond rawConfig's.
type falconRaw struct {
	DSSM           *int            `json:"mamba_d_ssm"`
	Heads          *int            `json:"mamba_n_heads"`
	DHead          json.RawMessage `json:"mamba_d_head"` // a number, or "auto" (mamba_d_ssm/mamba_n_heads)
	Expand         *float64        `json:"mamba_expand"`
	State          *int            `json:"mamba_d_state"`
	Groups         *int            `json:"mamba_n_groups"`
	Conv           *int            `json:"mamba_d_conv"`
	Chunk          *int            `json:"mamba_chunk_size"`
	ConvBias       *bool           `json:"mamba_conv_bias"`
	ProjBias       bool            `json:"mamba_proj_bias"`
	RMSNorm        *bool           `json:"mamba_rms_norm"`
	NormBeforeGate bool            `json:"mamba_norm_before_gate"`
	ProjectorsBias bool            `json:"projectors_bias"`
	Limit          []jsonFloat     `json:"time_step_limit"`
	Embedding      *float64        `json:"embedding_multiplier"`
	LMHead         *float64        `json:"lm_head_multiplier"`
	MLP            []float64       `json:"mlp_multipliers"`
	Key            *float64        `json:"key_multiplier"`
	AttnIn         *float64        `json:"attention_in_multiplier"`
	AttnOut        *float64        `json:"attention_out_multiplier"`
	SSMIn          *float64        `json:"ssm_in_multiplier"`
	SSMOut         *float64        `json:"ssm_out_multiplier"`
	SSM            []float64       `json:"ssm_multipliers"`
}

// parseFalconH1 fills c from a FalconH1Config config.json. Absent
// multipliers are FalconH1Config's defaults (1; mlp [1, 1]; ssm five 1s),
// as is an absent tie_word_embeddings (false); mamba_d_ssm defaults to
// mamba_expand·hidden_size, mamba_d_head (absent or "auto") to
// mamba_d_ssm/mamba_n_heads. Refused: mamba_rms_norm false and
// mamba_norm_before_gate true (not implemented), projectors_bias true, and
// any multiplier of 0.
func parseFalconH1(c *Config, cf *configFile) error {
	var r falconRaw
	if err := json.Unmarshal(cf.data, &r); err != nil {
		return fmt.Errorf("not valid: %v", err)
	}
	c.ModelType, c.DType = cf.modelType(), cf.dtype()
	if err := c.fromDecoder(&cf.r, false); err != nil {
		return err
	}
	c.QKVBias, c.OBias, c.MLPBias = cf.r.AttentionBias, cf.r.AttentionBias, cf.r.MLPBias
	if cf.r.TieWordEmbeddings == nil {
		c.TiedHead = false // FalconH1Config's default
	}
	switch {
	case r.RMSNorm != nil && !*r.RMSNorm:
		return fmt.Errorf("field mamba_rms_norm false (the ungated-norm mixer) is not supported")
	case r.NormBeforeGate:
		return fmt.Errorf("field mamba_norm_before_gate true is not supported (supported: false, norm(y ⊙ silu(z)))")
	case r.ProjectorsBias:
		return fmt.Errorf("field projectors_bias true is not supported")
	}
	sc := &SSMConfig{Chunk: 256, DtMax: math.Inf(1), ConvBias: true, ProjBias: r.ProjBias, Eps: c.NormEps, Attention: true}
	var err error
	for _, f := range []struct {
		dst  *int
		name string
		p    *int
	}{{&sc.Heads, "mamba_n_heads", r.Heads}, {&sc.State, "mamba_d_state", r.State}, {&sc.Groups, "mamba_n_groups", r.Groups},
		{&sc.ConvKernel, "mamba_d_conv", r.Conv}} {
		if *f.dst, err = need(f.name, f.p); err != nil {
			return err
		}
	}
	if r.DSSM != nil {
		if sc.Inner, err = need("mamba_d_ssm", r.DSSM); err != nil {
			return err
		}
	} else {
		expand := 2.0
		if r.Expand != nil {
			expand = *r.Expand
		}
		if inner := expand * float64(c.DModel); !(inner > 0) || inner != math.Trunc(inner) || inner > maxConfigElems {
			return fmt.Errorf("field mamba_expand %v × hidden_size %d is not a positive whole number of channels", expand, c.DModel)
		}
		sc.Inner = int(expand * float64(c.DModel))
	}
	switch d := string(r.DHead); d {
	case "", "null", `"auto"`:
		sc.HeadDim = sc.Inner / sc.Heads
	default:
		var n int
		if err := json.Unmarshal(r.DHead, &n); err != nil {
			return fmt.Errorf("field mamba_d_head %s: want a number or \"auto\"", d)
		}
		if sc.HeadDim, err = need("mamba_d_head", &n); err != nil {
			return err
		}
	}
	if sc.Heads*sc.HeadDim != sc.Inner {
		return fmt.Errorf("field mamba_n_heads %d × mamba_d_head %d ≠ mamba_d_ssm %d", sc.Heads, sc.HeadDim, sc.Inner)
	}
	if r.Chunk != nil {
		if *r.Chunk <= 0 {
			return fmt.Errorf("field mamba_chunk_size = %d must be positive (the SSD scan's chunk)", *r.Chunk)
		}
		sc.Chunk = *r.Chunk
	}
	if r.ConvBias != nil {
		sc.ConvBias = *r.ConvBias
	}
	sc.NormGroups = sc.Groups
	if r.Limit != nil {
		if len(r.Limit) != 2 {
			return fmt.Errorf("field time_step_limit has %d values, want [min, max]", len(r.Limit))
		}
		sc.DtMin, sc.DtMax = float64(r.Limit[0]), float64(r.Limit[1])
	}
	if err := sc.check(); err != nil {
		return fmt.Errorf("%w (Falcon-H1's mamba_* fields)", err)
	}

	one := func(name string, p *float64) (float32, error) {
		if p == nil {
			return 1, nil
		}
		if *p == 0 || math.IsNaN(*p) || math.IsInf(*p, 0) || math.Abs(*p) > math.MaxFloat32 {
			return 0, fmt.Errorf("field %s = %v: want a finite non-zero multiplier", name, *p)
		}
		return float32(*p), nil
	}
	list := func(name string, xs []float64, n int) ([]float32, error) {
		out := make([]float32, n)
		if xs == nil {
			for i := range out {
				out[i] = 1
			}
			return out, nil
		}
		if len(xs) != n {
			return nil, fmt.Errorf("field %s has %d values, want %d", name, len(xs), n)
		}
		for i := range xs {
			v, err := one(fmt.Sprintf("%s[%d]", name, i), &xs[i])
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	}
	var key, lm float32
	for _, m := range []struct {
		dst  *float32
		name string
		p    *float64
	}{{&c.EmbedScale, "embedding_multiplier", r.Embedding}, {&lm, "lm_head_multiplier", r.LMHead}, {&key, "key_multiplier", r.Key},
		{&c.AttnInScale, "attention_in_multiplier", r.AttnIn}, {&c.AttnOutScale, "attention_out_multiplier", r.AttnOut},
		{&sc.InScale, "ssm_in_multiplier", r.SSMIn}, {&sc.OutScale, "ssm_out_multiplier", r.SSMOut}} {
		if *m.dst, err = one(m.name, m.p); err != nil {
			return err
		}
	}
	if sc.Mup, err = list("ssm_multipliers", r.SSM, 5); err != nil {
		return err
	}
	mlp, err := list("mlp_multipliers", r.MLP, 2)
	if err != nil {
		return err
	}
	c.FalconH1 = &FalconH1Config{GateScale: mlp[0], DownScale: mlp[1], KeyScale: key, LMHeadScale: lm}
	c.LogitDivisor = 1 / lm
	c.AttnScale = float64(key) / math.Sqrt(float64(c.DHead))
	c.SSM = sc
	return nil
}

// loadFalconH1 reads a FalconH1ForCausalLM checkpoint: model.embed_tokens,
// model.layers.{l}.{input_layernorm, self_attn.{q,k,v,o}_proj, mamba.*,
// pre_ff_layernorm, feed_forward.{gate,up,down}_proj},
// model.final_layernorm, lm_head (or the embedding when tied).
func loadFalconH1(m *Model, ld *loader) {
	c := &m.Config
	D, H, KV, dh, F := c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP
	bias := func(on bool, name string, n int) []float32 {
		if !on {
			return nil
		}
		return ld.get(name, n)
	}
	ld.ignore("rotary_emb.inv_freq")
	m.Embed = ld.weight("model.embed_tokens.weight", c.Vocab, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		b := fmt.Sprintf("model.layers.%d.", l)
		a, f := b+"self_attn.", b+"feed_forward."
		L.Norm1W = ld.get(b+"input_layernorm.weight", D)
		L.Wq, L.Bq = ld.weight(a+"q_proj.weight", H*dh, D), bias(c.QKVBias, a+"q_proj.bias", H*dh)
		L.Wk, L.Bk = ld.weight(a+"k_proj.weight", KV*dh, D), bias(c.QKVBias, a+"k_proj.bias", KV*dh)
		L.Wv, L.Bv = ld.weight(a+"v_proj.weight", KV*dh, D), bias(c.QKVBias, a+"v_proj.bias", KV*dh)
		L.Wo, L.Bo = ld.weight(a+"o_proj.weight", D, H*dh), bias(c.OBias, a+"o_proj.bias", D)
		L.beside = readSSM(ld, b+"mamba.", D, c.SSM)
		L.Norm2W = ld.get(b+"pre_ff_layernorm.weight", D)
		L.ffn = &falconMLP{Scales: c.FalconH1,
			Gate: ld.weight(f+"gate_proj.weight", F, D), GateB: bias(c.MLPBias, f+"gate_proj.bias", F),
			Up: ld.weight(f+"up_proj.weight", F, D), UpB: bias(c.MLPBias, f+"up_proj.bias", F),
			Down: ld.weight(f+"down_proj.weight", D, F), DownB: bias(c.MLPBias, f+"down_proj.bias", D)}
	}
	m.FinalW = ld.get("model.final_layernorm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// falconMLP is Falcon-H1's SwiGLU MLP with its multipliers (HF
// FalconH1MLP): out = s_down·down(up(h) ⊙ silu(s_gate·gate(h))).
type falconMLP struct {
	Scales            *FalconH1Config
	Gate, Up, Down    Weight
	GateB, UpB, DownB []float32
}

// mixChannels computes the MLP for the n = B·T rows of h [n, D] into out
// (which may be h), blockRows rows at a time (all n when mlp.hook_pre or
// mlp.hook_post is hooked), with mlp.hook_pre on s_gate·gate(h) (the
// activation's input) and mlp.hook_post on up(h) ⊙ silu(s_gate·gate(h)).
func (f *falconMLP) mixChannels(m *Model, out, h []float32, l, B, T int, opt Options, run hookRun) error {
	n, D, F := B*T, m.DModel, m.DMLP
	rows := f.rows(B, T, opt.Hooks, l)
	buf := make([]float32, 2*rows*F)
	for r := 0; r < n; r += rows {
		k := min(rows, n-r)
		x, a1, a2 := h[r*D:(r+k)*D], buf[:k*F], buf[rows*F:rows*F+k*F]
		linearAs(opt.Compute, a1, x, k, D, f.Gate, F, f.GateB)
		for i := range a1 {
			a1[i] *= f.Scales.GateScale
		}
		run(hooks.MLPPre, l, a1, B, T, F)
		linearAs(opt.Compute, a2, x, k, D, f.Up, F, f.UpB)
		swiglu(a1, a2, "silu")
		run(hooks.MLPPost, l, a1, B, T, F)
		o := out[r*D : (r+k)*D]
		linearAs(opt.Compute, o, a1, k, F, f.Down, D, f.DownB)
		for i := range o {
			o[i] *= f.Scales.DownScale
		}
	}
	return nil
}

// rows is the row block of mixChannels.
func (f *falconMLP) rows(B, T int, hs *hooks.Set, l int) int {
	if hs.Has(hooks.Name(hooks.MLPPre, l)) || hs.Has(hooks.Name(hooks.MLPPost, l)) {
		return B * T
	}
	return blockSize(B*T, blockRows)
}

// scratchFloats is mixChannels' buffer: two row blocks of d_ff values.
func (f *falconMLP) scratchFloats(B, T int) int {
	return 2 * blockSize(B*T, blockRows) * f.Gate.Rows
}

// falconH1Family is Falcon-H1.
var falconH1Family = &family{
	arch: ArchFalconH1, modelTypes: "falcon_h1",
	detect: func(cf *configFile) bool { return cf.modelType() == "falcon_h1" },
	parse:  parseFalconH1,
	load:   loadFalconH1,
	hfConfig: func(c *Config) map[string]any {
		sc, fh := c.SSM, c.FalconH1
		mup := make([]float64, len(sc.Mup))
		for i, v := range sc.Mup {
			mup[i] = float64(v)
		}
		return map[string]any{
			"model_type": "falcon_h1", "architectures": []string{"FalconH1ForCausalLM"},
			"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
			"num_key_value_heads": c.KVHeads, "head_dim": c.DHead, "intermediate_size": c.DMLP,
			"vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps,
			"hidden_act": "silu", "tie_word_embeddings": c.TiedHead, "attention_bias": c.QKVBias, "mlp_bias": c.MLPBias,
			"projectors_bias": false, "dtype": "float32",
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": c.RoPE.Theta},
			"mamba_d_ssm":     sc.Inner, "mamba_n_heads": sc.Heads, "mamba_d_head": sc.HeadDim, "mamba_d_state": sc.State,
			"mamba_n_groups": sc.Groups, "mamba_d_conv": sc.ConvKernel, "mamba_chunk_size": sc.Chunk,
			"mamba_conv_bias": sc.ConvBias, "mamba_proj_bias": sc.ProjBias, "mamba_rms_norm": true,
			"mamba_norm_before_gate": false, "time_step_limit": timeStepLimit(sc),
			"embedding_multiplier": float64(c.EmbedScale), "lm_head_multiplier": float64(fh.LMHeadScale),
			"mlp_multipliers": []float64{float64(fh.GateScale), float64(fh.DownScale)}, "key_multiplier": float64(fh.KeyScale),
			"attention_in_multiplier": float64(c.AttnInScale), "attention_out_multiplier": float64(c.AttnOutScale),
			"ssm_in_multiplier": float64(sc.InScale), "ssm_out_multiplier": float64(sc.OutScale), "ssm_multipliers": mup,
		}
	},
	// Falcon-H1-0.5B's proportions at small width: attention heads of
	// d_model/heads, Mamba-2 heads of 16 over a mixer of 2·d_model, state
	// 16, two groups, conv 4, chunk 16, MLP 2·d_model, RoPE θ 10⁵, untied
	// head, and multipliers away from 1 (those of the golden case) so that
	// each one is exercised.
	small: func(s Size) (map[string]any, error) {
		dh := s.DModel / s.Heads
		if s.DModel%s.Heads != 0 || s.Heads%s.KVHeads != 0 || dh%2 != 0 || s.DModel%16 != 0 {
			return nil, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model a multiple of heads and of 16, heads of kv heads, an even head dim", s.DModel, s.Heads, s.KVHeads)
		}
		return map[string]any{
			"model_type": "falcon_h1", "hidden_size": s.DModel, "num_hidden_layers": s.Layers,
			"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": dh,
			"intermediate_size": 2 * s.DModel, "vocab_size": s.Vocab, "max_position_embeddings": s.MaxPos,
			"rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": false,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e5},
			"mamba_d_ssm":     2 * s.DModel, "mamba_n_heads": 2 * s.DModel / 16, "mamba_d_head": 16, "mamba_d_state": 16,
			"mamba_n_groups": 2, "mamba_d_conv": 4, "mamba_chunk_size": 16, "time_step_limit": []float64{1e-3, 1},
			"embedding_multiplier": 2.0, "lm_head_multiplier": 0.5, "mlp_multipliers": []float64{0.8, 1.2},
			"key_multiplier": 0.7, "attention_in_multiplier": 1.1, "attention_out_multiplier": 0.9,
			"ssm_in_multiplier": 1.2, "ssm_out_multiplier": 0.8, "ssm_multipliers": []float64{1, 0.9, 1.2, 0.8, 1.1},
		}, nil
	},
	prefix:    "model.",
	generated: func(rng *rand.Rand, c *Config) func(string, []float32) { return ssmGenerated(rng) },
}
