package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// Arch names a supported architecture. Each is declared in its family's
// file (family.go lists them), and only that file refers to it.
type Arch string

// GateKind says whether and how attention outputs are gated.
type GateKind string

// Gate kinds of Qiu et al.'s gated attention.
const (
	GateNone        GateKind = "none"
	GateHeadwise    GateKind = "headwise"    // one sigmoid scalar per head and position
	GateElementwise GateKind = "elementwise" // one sigmoid per head dimension and position
)

// Config is the architecture description the forward pass needs, read from a
// Hugging Face config.json and normalized across model families.
type Config struct {
	Arch      Arch
	ModelType string // config.json model_type as written

	Layers   int
	DModel   int
	Heads    int
	KVHeads  int
	DHead    int
	DMLP     int
	Vocab    int
	MaxPos   int // max_position_embeddings (GPT-2: n_positions)
	NormEps  float64
	Act      string // hidden_act / activation_function
	TiedHead bool

	QKNorm bool     // Qwen3 / Qiu use_qk_norm
	Gate   GateKind // Qiu output gate
	// GainGate says that the gate is computed by the pass, not learned
	// (BFT: the Kalman gain K takes the gate's place).
	GainGate bool
	QKVBias  bool // bias on q, k, v projections
	OBias    bool // bias on o_proj
	MLPBias  bool // bias on the MLP projections (Llama mlp_bias; GPT-2 always)
	RoPE     RoPEConfig
	Sliding  int // sliding_window when in use (0: none)
	DType    string
	RFA      *RFAConfig // Robust Filter Attention settings (ArchRFA only; see rfa_config.go)
	// SelRoPE holds the Selective-RoPE rotary options (ArchSelRoPE only; see selrope_model.go).
	SelRoPE *SelRoPEConfig
	// BFT holds the Bayesian Filtering Transformer options (ArchBFT only; see bft_config.go).
	BFT *BFTConfig
	// RT holds the RT-Transformer options (ArchRT only; see rt_config.go).
	RT *RTConfig
	// AFA holds the Adaptive Filter Attention options (ArchAFA only; see afa_config.go).
	AFA *AFAConfig
	// DeltaNet holds the Gated DeltaNet layers' settings of a hybrid model
	// (Qwen3.5; see qwen35.go).
	DeltaNet *DeltaNetConfig
	// MoE holds the mixture-of-experts channel mixer's settings (Mixtral,
	// Qwen3-MoE, OLMoE, gpt-oss; see moe.go); nil: dense MLPs.
	MoE *MoEConfig
	// RWKV7 holds the RWKV-7 settings (ArchRWKV7 only; see rwkv7.go).
	RWKV7 *RWKV7Config
	// SSM holds the Mamba-2 mixers' settings (Mamba-2: every layer's token
	// mixer; Falcon-H1: beside every layer's attention; see ssm.go).
	SSM *SSMConfig
	// FalconH1 holds Falcon-H1's MLP, key and LM-head multipliers
	// (ArchFalconH1 only; see falcon_h1.go).
	FalconH1 *FalconH1Config

	// Per-layer attention span and RoPE, score scale, logit soft-caps and
	// embedding scale (Gemma 2/3, gemma.go); the zero values leave the
	// decoder pass as it is for every other family.
	// Gemma 4 (gemma4.go): the full-attention layers' head width and KV
	// heads (0: DHead, KVHeads), their value from the raw k projection
	// (attention_k_eq_v), the last KVShared layers reusing the k and v of
	// the last earlier layer of their type, per-layer inputs of width
	// PerLayerDim (hidden_size_per_layer_input; 0: none) from a table of
	// PerLayerVocab rows, the KV-shared layers' MLP twice as wide
	// (use_double_wide_mlp), and the experts beside the MLP (MoE with
	// MoEBeside, enable_moe_block).
	GlobalDHead, GlobalKVHeads int
	KEqV                       bool
	KVShared                   int
	PerLayerDim, PerLayerVocab int
	DoubleWideMLP, MoEBeside   bool

	SlidingLayers []bool      // per layer: whether the Sliding window applies (nil: every layer)
	LocalRoPE     *RoPEConfig // RoPE of the sliding layers where it differs from RoPE (nil: RoPE everywhere)
	AttnScalar    float64     // query_pre_attn_scalar: scores scaled by AttnScalar^−½ instead of DHead^−½ (0: DHead)
	AttnSoftcap   float64     // attention logit soft-cap c: scaled score s → c·tanh(s/c) before the mask (0: off)
	FinalSoftcap  float64     // final logit soft-cap c: logit → c·tanh(logit/c) (0: off)
	EmbedScale    float32     // factor on the token embedding (0: none)

	// The declared slots of a block (forward.go's decoderPass) that are
	// data: the residual layout, the score scale and multipliers, the
	// layers without RoPE. The zero values are the Llama layout.
	Residual ResidualLayout
	// AttnScale is the factor on q·k (0: DHead^−½); the family sets it:
	// GPT-2 without scale_attn_weights 1, Gemma query_pre_attn_scalar^−½,
	// Granite attention_multiplier.
	AttnScale float64
	// ScaleByInverseLayer divides layer l's score scale by l + 1 (GPT-2's
	// scale_attn_by_inverse_layer_idx).
	ScaleByInverseLayer bool
	// ClipQKV clamps q, k and v to [−ClipQKV, ClipQKV] after the
	// projections and QK-norm, before RoPE (OLMoE's clip_qkv; 0: none).
	ClipQKV float32
	// ResidScale multiplies each sub-block's output before the residual
	// add (Granite's residual_multiplier; 0: 1).
	ResidScale float32
	// LogitDivisor divides the logits (Granite's logits_scaling; 0: none).
	LogitDivisor float32
	// AttnInScale multiplies softmax attention's normalized input (after
	// any Layer.beside mixer has read it) and AttnOutScale its output
	// after o_proj (Falcon-H1's attention_in_multiplier,
	// attention_out_multiplier; 0: 1).
	AttnInScale, AttnOutScale float32
	// NoRoPE lists, per layer, the layers whose attention has no rotary
	// embedding (SmolLM3's no_rope_layers; nil: RoPE in every layer).
	NoRoPE []bool
}

// ResidualLayout says how a block's two sub-blocks meet the residual
// stream; which norms surround them is data of the layer (Layer's norm
// weights, nil for none): pre-norm (Llama), post-norm only (OLMo 2:
// x + norm(f(x))) and sandwich (Gemma: x + post(f(pre(x)))) are all the
// sequential layout.
type ResidualLayout string

// The residual layouts.
const (
	// ResidualSequential: x ← x + attn(·); x ← x + ffn(·) ("" too).
	ResidualSequential ResidualLayout = ""
	// ResidualParallel: x ← x + attn(norm₁(x)) + ffn(norm₂(x)) (GPT-NeoX's
	// use_parallel_residual, GPT-J).
	ResidualParallel ResidualLayout = "parallel"
)

// layerNoRoPE reports whether layer l's attention has no rotary embedding.
func (c *Config) layerNoRoPE(l int) bool { return l < len(c.NoRoPE) && c.NoRoPE[l] }

// RoPEConfig holds rotary embedding parameters (rotate-half convention),
// as Hugging Face transformers 5 reads them from rope_parameters (or
// rope_scaling and rope_theta); rope.go computes the tables.
type RoPEConfig struct {
	Theta float64
	Type  string // "default", "linear", "dynamic", "llama3", "yarn", "longrope", "proportional"
	// Factor is the context scaling factor: the divisor of the inverse
	// frequencies (linear, llama3's low frequencies, yarn's interpolation),
	// dynamic NTK's growth rate, and the argument of yarn's and longrope's
	// default attention factor (longrope: max_position_embeddings /
	// original_max_position_embeddings unless config.json gives factor).
	Factor   float64
	LowFreq  float64 // llama3 low_freq_factor
	HighFreq float64 // llama3 high_freq_factor
	// OrigMax is the pretraining context length,
	// original_max_position_embeddings (llama3, yarn, longrope; dynamic:
	// max_position_embeddings).
	OrigMax int
	// BetaFast and BetaSlow bound yarn's ramp between extrapolated and
	// interpolated frequencies, in rotations over OrigMax (beta_fast,
	// beta_slow; 0: Hugging Face's defaults 32 and 1).
	BetaFast, BetaSlow float64
	// MScale and MScaleAllDim are yarn's mscale and mscale_all_dim (0: not
	// given); see attentionScale.
	MScale, MScaleAllDim float64
	// NoTruncate is yarn's truncate = false (gpt-oss): the ramp's bounds
	// stay fractional instead of being rounded outwards to whole dimensions
	// (false, the default, is Hugging Face's truncate = true).
	NoTruncate bool
	// Pairs is proportional RoPE's count of rotated pairs (Gemma 4:
	// int(partial_rotary_factor·d/2)): pairs i < Pairs turn at
	// θ^(−2i/d)/Factor over the whole head width d, the others not at all.
	Pairs int
	// AttnFactor is attention_factor as config.json gives it (yarn,
	// longrope); 0 derives it from Factor (attentionScale).
	AttnFactor float64
	// Factors holds longrope's per-frequency divisors (nil for the other
	// types).
	Factors *LongRoPEFactors
	// Dims is the number of leading dimensions of each head that are
	// rotated (partial_rotary_factor·head_dim); 0 rotates the whole head.
	Dims int
}

// LongRoPEFactors are LongRoPE's divisors of the inverse frequencies, one
// per rotated pair: Short (short_factor) for passes of at most OrigMax
// positions, Long (long_factor) for longer ones.
type LongRoPEFactors struct {
	Short, Long []float64
}

// dims returns the rotated dimensions of a head of width dh.
func (rc RoPEConfig) dims(dh int) int {
	if rc.Dims > 0 {
		return rc.Dims
	}
	return dh
}

// rawConfig mirrors the config.json fields of every supported family.
type rawConfig struct {
	ModelType     string   `json:"model_type"`
	Architectures []string `json:"architectures"`

	HiddenSize   *int     `json:"hidden_size"`
	NumLayers    *int     `json:"num_hidden_layers"`
	NumHeads     *int     `json:"num_attention_heads"`
	NumKVHeads   *int     `json:"num_key_value_heads"`
	HeadDim      *int     `json:"head_dim"`
	Intermediate *int     `json:"intermediate_size"`
	VocabSize    *int     `json:"vocab_size"`
	MaxPos       *int     `json:"max_position_embeddings"`
	RMSNormEps   *float64 `json:"rms_norm_eps"`
	HiddenAct    string   `json:"hidden_act"`
	RopeTheta    *float64 `json:"rope_theta"`
	RopeScaling  json.RawMessage
	// transformers 5's RoPE object (rope_theta, partial_rotary_factor and
	// the scaling fields inside), and the top-level fields Phi-3 keeps
	// beside it; see rawConfig.rope.
	RopeParameters    json.RawMessage `json:"rope_parameters"`
	PartialRotary     json.RawMessage `json:"partial_rotary_factor"`
	OrigMaxPositions  json.RawMessage `json:"original_max_position_embeddings"`
	TieWordEmbeddings *bool           `json:"tie_word_embeddings"`
	AttentionBias     bool            `json:"attention_bias"`
	MLPBias           bool            `json:"mlp_bias"`
	SlidingWindow     *int            `json:"sliding_window"`
	UseSlidingWindow  *bool           `json:"use_sliding_window"`
	TorchDType        string          `json:"torch_dtype"`
	Headwise          *bool           `json:"headwise_attn_output_gate"`
	Elementwise       *bool           `json:"elementwise_attn_output_gate"`
	UseQKNorm         *bool           `json:"use_qk_norm"`
	QKVBias           *bool           `json:"qkv_bias"`

	// GPT-2
	NEmbd             *int     `json:"n_embd"`
	NLayer            *int     `json:"n_layer"`
	NHead             *int     `json:"n_head"`
	NInner            *int     `json:"n_inner"`
	NPositions        *int     `json:"n_positions"`
	LNEps             *float64 `json:"layer_norm_epsilon"`
	ActFn             string   `json:"activation_function"`
	ScaleAttnWeights  *bool    `json:"scale_attn_weights"`
	ScaleByInverseIdx bool     `json:"scale_attn_by_inverse_layer_idx"`
}

// filterSizesRaw holds the size fields of the research filter families'
// config.json (RT, AFA; fromFilterSizes).
type filterSizesRaw struct {
	Hidden  *int     `json:"hidden_size"`
	Layers  *int     `json:"num_hidden_layers"`
	Heads   *int     `json:"num_attention_heads"`
	HeadDim *int     `json:"head_dim"`
	Inter   *int     `json:"intermediate_size"`
	Vocab   *int     `json:"vocab_size"`
	MaxPos  *int     `json:"max_position_embeddings"`
	Eps     *float64 `json:"rms_norm_eps"`
	Act     string   `json:"hidden_act"`
	Tied    *bool    `json:"tie_word_embeddings"`
	QKVBias bool     `json:"qkv_bias"`
	OBias   bool     `json:"o_bias"`
	DType   string   `json:"torch_dtype"`
}

// LoadConfig reads dir/config.json, or the config GGUFConfig makes from
// the metadata of the GGUF file dir names or holds.
func LoadConfig(dir string) (*Config, error) {
	if cfg, ok, err := ggufConfigFile(dir); ok || err != nil {
		return cfg, err
	}
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses the bytes of a config.json. Besides each family's own
// checks, the sizes must be positive and every weight matrix they imply must
// stay within maxConfigElems elements (checkSizes), so that no product of
// them overflows and a config.json cannot make the loader allocate without
// bound.
func ParseConfig(data []byte) (*Config, error) {
	c, err := parseConfig(data)
	if err != nil {
		return nil, err
	}
	if err := c.checkSizes(); err != nil {
		return nil, err
	}
	return c, nil
}

// maxConfigElems bounds the element count of any one weight matrix a
// config.json implies (2^40, about 4 TiB of float32; the largest matrices of
// released models are near 2^33).
const maxConfigElems = 1 << 40

// maxConfigLayers bounds the layer count (Load allocates a record per layer
// before it reads any tensor; released models have at most a few hundred).
const maxConfigLayers = 1 << 14

// checkSizes checks the normalized sizes of any family: positive, at most
// maxConfigLayers layers, a finite non-negative norm epsilon, and matrices
// of at most maxConfigElems elements computed without overflow.
func (c *Config) checkSizes() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", c.Layers}, {"model width", c.DModel}, {"attention heads", c.Heads}, {"key/value heads", c.KVHeads},
		{"head dimension", c.DHead}, {"vocabulary size", c.Vocab}, {"max positions", c.MaxPos}} {
		if f.v <= 0 {
			return fmt.Errorf("%s = %d must be positive", f.name, f.v)
		}
	}
	if c.Layers > maxConfigLayers {
		return fmt.Errorf("layers = %d exceeds %d", c.Layers, maxConfigLayers)
	}
	if c.DMLP < 0 {
		return fmt.Errorf("MLP width = %d must not be negative", c.DMLP)
	}
	if math.IsNaN(c.NormEps) || math.IsInf(c.NormEps, 0) || c.NormEps < 0 {
		return fmt.Errorf("norm epsilon %v must be finite and ≥ 0", c.NormEps)
	}
	mul := func(a, b int) (int, bool) {
		if a > 0 && b > maxConfigElems/a {
			return 0, false
		}
		return a * b, true
	}
	qRows, ok1 := mul(c.Heads, c.DHead)
	kvRows, ok2 := mul(c.KVHeads, c.DHead)
	if !ok1 || !ok2 {
		return fmt.Errorf("attention heads × head dimension (%d × %d, key/value %d × %d) exceeds %d", c.Heads, c.DHead, c.KVHeads, c.DHead, maxConfigElems)
	}
	for _, m := range []struct {
		what string
		a, b int
		on   bool
	}{
		{"embedding (vocabulary × model width)", c.Vocab, c.DModel, true},
		{"query projection (heads·head dimension × model width)", qRows, c.DModel, true},
		{"key/value projection (key/value heads·head dimension × model width)", kvRows, c.DModel, true},
		{"MLP projection (MLP width × model width)", c.DMLP, c.DModel, true},
		// only GPT-2 stores a table of learned positions
		{"position table (max positions × model width)", c.MaxPos, c.DModel, c.LearnedPositions()},
	} {
		if !m.on {
			continue
		}
		if _, ok := mul(m.a, m.b); !ok {
			return fmt.Errorf("%s = %d × %d elements exceeds %d", m.what, m.a, m.b, maxConfigElems)
		}
	}
	return nil
}

// parseConfig parses config.json into the Config of the first family of
// the registry (families) that recognises it.
func parseConfig(data []byte) (*Config, error) {
	data = quoteNonFinite(data)
	cf := &configFile{data: data}
	if err := json.Unmarshal(data, &cf.r); err != nil {
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	_ = json.Unmarshal(data, &cf.raw)
	cf.r.RopeScaling = cf.raw["rope_scaling"]
	for _, f := range families {
		if f.detect(cf) {
			c := &Config{Arch: f.arch}
			return c, f.parse(c, cf)
		}
	}
	if cf.r.ModelType == "" {
		return nil, fmt.Errorf("field model_type is missing")
	}
	return nil, fmt.Errorf("model_type %q is not supported (supported: %s)", cf.r.ModelType, supportedModelTypes())
}

// quoteNonFinite returns config.json with Python's bare Infinity,
// -Infinity and NaN tokens (json.dumps writes them: Mamba2Config's and
// FalconH1Config's default time_step_limit is (0.0, inf)) quoted as
// strings, which Go's decoder accepts and jsonFloat reads; data itself
// when it has none.
func quoteNonFinite(data []byte) []byte {
	var out []byte
	inStr, esc, last := false, false, 0
	for i := 0; i < len(data); i++ {
		ch := data[i]
		switch {
		case inStr:
			switch {
			case esc:
				esc = false
			case ch == '\\':
				esc = true
			case ch == '"':
				inStr = false
			}
			continue
		case ch == '"':
			inStr = true
			continue
		}
		for _, tok := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(data[i:], []byte(tok)) && (i == 0 || !isIdentByte(data[i-1])) {
				out = append(out, data[last:i]...)
				out = append(out, '"')
				out = append(out, tok...)
				out = append(out, '"')
				i += len(tok) - 1
				last = i + 1
				break
			}
		}
	}
	if out == nil {
		return data
	}
	return append(out, data[last:]...)
}

// isIdentByte reports whether c can be part of a bare JSON token.
func isIdentByte(c byte) bool {
	return c == '_' || c == '-' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// jsonFloat is a config.json number that may also be Python's Infinity,
// -Infinity or NaN (quoted by quoteNonFinite).
type jsonFloat float64

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"Infinity"`:
		*f = jsonFloat(math.Inf(1))
	case `"-Infinity"`:
		*f = jsonFloat(math.Inf(-1))
	case `"NaN"`:
		*f = jsonFloat(math.NaN())
	default:
		var v float64
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		*f = jsonFloat(v)
	}
	return nil
}

func need(name string, p *int) (int, error) {
	if p == nil {
		return 0, fmt.Errorf("field %s is missing", name)
	}
	if *p <= 0 {
		return 0, fmt.Errorf("field %s = %d must be positive", name, *p)
	}
	return *p, nil
}

// fromDecoder fills the fields that the Llama-layout families share from
// config.json: sizes, norm epsilon, activation, tied head, RoPE, and the
// sliding window when use_sliding_window (default slidingByDefault) allows
// it. The family's parse sets its own flags (biases, QK-norm, gate) after.
func (c *Config) fromDecoder(r *rawConfig, slidingByDefault bool) error {
	var err error
	for _, f := range []struct {
		dst  *int
		name string
		p    *int
	}{
		{&c.DModel, "hidden_size", r.HiddenSize},
		{&c.Layers, "num_hidden_layers", r.NumLayers},
		{&c.Heads, "num_attention_heads", r.NumHeads},
		{&c.DMLP, "intermediate_size", r.Intermediate},
		{&c.Vocab, "vocab_size", r.VocabSize},
		{&c.MaxPos, "max_position_embeddings", r.MaxPos},
	} {
		if *f.dst, err = need(f.name, f.p); err != nil {
			return err
		}
	}
	c.KVHeads = c.Heads
	if r.NumKVHeads != nil {
		if c.KVHeads, err = need("num_key_value_heads", r.NumKVHeads); err != nil {
			return err
		}
	}
	if c.Heads%c.KVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if r.HeadDim != nil {
		if c.DHead, err = need("head_dim", r.HeadDim); err != nil {
			return err
		}
	} else {
		if c.DModel%c.Heads != 0 {
			return fmt.Errorf("hidden_size %d is not a multiple of num_attention_heads %d and head_dim is not given", c.DModel, c.Heads)
		}
		c.DHead = c.DModel / c.Heads
	}
	if c.DHead%2 != 0 {
		return fmt.Errorf("head_dim %d must be even for RoPE", c.DHead)
	}
	c.NormEps = 1e-6
	if r.RMSNormEps != nil {
		c.NormEps = *r.RMSNormEps
	}
	c.Act = r.HiddenAct
	if c.Act == "" {
		c.Act = "silu"
	}
	if _, ok := activations[c.Act]; !ok {
		return fmt.Errorf("hidden_act %q is not supported", c.Act)
	}
	c.TiedHead = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings
	if r.TieWordEmbeddings == nil {
		// transformers' PretrainedConfig default is true.
		c.TiedHead = true
	}
	c.Gate = GateNone
	if r.SlidingWindow != nil && *r.SlidingWindow > 0 {
		use := slidingByDefault
		if r.UseSlidingWindow != nil {
			use = *r.UseSlidingWindow
		}
		if use {
			c.Sliding = *r.SlidingWindow
			if c.Sliding > c.MaxPos {
				return fmt.Errorf("sliding_window %d exceeds max_position_embeddings %d (a window larger than the context; set use_sliding_window false or sliding_window null for full attention)", c.Sliding, c.MaxPos)
			}
		}
	}
	c.RoPE, err = r.rope(c.MaxPos, c.DHead)
	return err
}

// defaultRopeTheta is the RoPE base when config.json gives none
// (transformers' RotaryEmbeddingConfigMixin.default_theta).
const defaultRopeTheta = 10000

// ropeTypes are the rope types rope.go computes, for messages.
const ropeTypes = "default, linear, dynamic, llama3, yarn, longrope"

// rope reads the RoPE of config.json as transformers 5 standardises it
// (RotaryEmbeddingConfigMixin), for a head of dh dimensions:
//
//   - the parameters are rope_scaling when it is a non-empty object (the
//     form before transformers 5, beside a top-level rope_theta), else
//     rope_parameters (transformers 5: rope_theta inside); one object for
//     all layers (a per-layer-type object is refused here);
//   - rope_theta: the object's, else the top-level one, else 10000;
//   - rope_type (or type): default when absent;
//   - partial_rotary_factor f: the object's, else the top-level one; the
//     first int(f·dh) dimensions of each head are rotated (an even number
//     ≥ 2), for every rope type and family (transformers' scaled types all
//     read it; its Llama-layout default RoPE alone ignores it, a
//     combination no released Llama-layout checkpoint has);
//   - original_max_position_embeddings (llama3, yarn, longrope): the
//     top-level field when config.json has one (Phi-3 keeps it there, and
//     transformers gives it priority), else the object's, else
//     max_position_embeddings;
//   - per type: factor (linear, dynamic, llama3, yarn: required; yarn's
//     null and longrope's absent factor mean max_position_embeddings /
//     original_max_position_embeddings), low_freq_factor and
//     high_freq_factor (llama3), attention_factor, beta_fast, beta_slow,
//     mscale, mscale_all_dim, truncate (yarn), short_factor and long_factor
//     (longrope: one positive number per rotated pair, int(f·dh)/2).
//
// Unknown rope types and malformed fields are refused with the field's
// name; fields a type does not read are ignored, as transformers does.
func (r *rawConfig) rope(maxPos, dh int) (RoPEConfig, error) {
	rc := RoPEConfig{Theta: defaultRopeTheta, Type: "default", Factor: 1}
	obj := func(name string, data json.RawMessage) (map[string]json.RawMessage, error) {
		var m map[string]json.RawMessage
		if len(data) == 0 || string(data) == "null" {
			return nil, nil
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("field %s: want an object: %v", name, err)
		}
		return m, nil
	}
	field := "rope_scaling"
	m, err := obj(field, r.RopeScaling)
	if err != nil {
		return rc, err
	}
	if len(m) == 0 {
		field = "rope_parameters"
		if m, err = obj(field, r.RopeParameters); err != nil {
			return rc, err
		}
	}
	for _, lt := range []string{"full_attention", "sliding_attention"} {
		if _, ok := m[lt]; ok {
			return rc, fmt.Errorf("field %s: one RoPE per layer type (%s) is not supported for model_type %q; give one set of parameters for all layers", field, lt, r.ModelType)
		}
	}
	// number reads an optional finite number; name is the field's full name.
	number := func(name string, raw json.RawMessage) (float64, bool, error) {
		if len(raw) == 0 || string(raw) == "null" {
			return 0, false, nil
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, false, fmt.Errorf("field %s: want a number, got %s", name, raw)
		}
		return v, true, nil
	}
	get := func(key string) (float64, bool, error) { return number(field+"."+key, m[key]) }
	positive := func(key string, v float64) error {
		if !(v > 0) {
			return fmt.Errorf("%s.%s = %v must be positive", field, key, v)
		}
		return nil
	}

	if v, ok, err := get("rope_theta"); err != nil {
		return rc, err
	} else if ok {
		if err := positive("rope_theta", v); err != nil {
			return rc, err
		}
		rc.Theta = v
	} else if r.RopeTheta != nil {
		rc.Theta = *r.RopeTheta
		if !(rc.Theta > 0) || math.IsInf(rc.Theta, 0) {
			return rc, fmt.Errorf("rope_theta %v must be positive", rc.Theta)
		}
	}
	for _, key := range []string{"rope_type", "type"} {
		if raw, ok := m[key]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &rc.Type); err != nil {
				return rc, fmt.Errorf("field %s.%s: want a string, got %s", field, key, raw)
			}
			break
		}
	}

	// partial rotary: the object's factor, else the top-level one
	pname, praw := field+".partial_rotary_factor", m["partial_rotary_factor"]
	if len(praw) == 0 || string(praw) == "null" {
		pname, praw = "partial_rotary_factor", r.PartialRotary
	}
	if f, ok, err := number(pname, praw); err != nil {
		return rc, err
	} else if ok {
		rd := int(float64(dh) * f)
		if !(f > 0 && f <= 1) || rd < 2 || rd%2 != 0 {
			return rc, fmt.Errorf("%s %v: need 0 < factor ≤ 1 giving an even number ≥ 2 of rotated dimensions of head_dim %d (got %d)", pname, f, dh, rd)
		}
		if rd < dh {
			rc.Dims = rd
		}
	}

	switch rc.Type {
	case "default":
		return rc, nil
	case "linear", "dynamic", "llama3", "yarn", "longrope":
	default:
		return rc, fmt.Errorf("%s.rope_type %q is not supported (supported: %s)", field, rc.Type, ropeTypes)
	}

	// original_max_position_embeddings: top level first, as transformers
	switch rc.Type {
	case "dynamic":
		rc.OrigMax = maxPos
	case "llama3", "yarn", "longrope":
		oname, oraw := "original_max_position_embeddings", r.OrigMaxPositions
		if len(oraw) == 0 || string(oraw) == "null" {
			oname, oraw = field+".original_max_position_embeddings", m["original_max_position_embeddings"]
		}
		rc.OrigMax = maxPos
		if v, ok, err := number(oname, oraw); err != nil {
			return rc, err
		} else if ok {
			if !(v >= 1) || v != math.Trunc(v) || v > math.MaxInt32 {
				return rc, fmt.Errorf("%s = %v must be a positive integer", oname, v)
			}
			rc.OrigMax = int(v)
		}
	}

	// factor: required but for longrope; yarn's null and longrope's absent
	// factor are the ratio of the context lengths
	f, ok, err := get("factor")
	if err != nil {
		return rc, err
	}
	_, given := m["factor"]
	switch {
	case ok:
		if err := positive("factor", f); err != nil {
			return rc, err
		}
		rc.Factor = f
	case rc.Type == "longrope" || (rc.Type == "yarn" && given):
		rc.Factor = float64(maxPos) / float64(rc.OrigMax)
	default:
		return rc, fmt.Errorf("field %s.factor is missing (needed for rope_type %s)", field, rc.Type)
	}

	switch rc.Type {
	case "llama3":
		for _, p := range []struct {
			key string
			dst *float64
		}{{"low_freq_factor", &rc.LowFreq}, {"high_freq_factor", &rc.HighFreq}} {
			v, ok, err := get(p.key)
			if err != nil {
				return rc, err
			}
			if !ok {
				return rc, fmt.Errorf("field %s.%s is missing (needed for rope_type llama3)", field, p.key)
			}
			if err := positive(p.key, v); err != nil {
				return rc, err
			}
			*p.dst = v
		}
	case "yarn":
		for _, p := range []struct {
			key string
			dst *float64
			min float64 // smallest value allowed (beta 0: the default)
		}{{"beta_fast", &rc.BetaFast, 0}, {"beta_slow", &rc.BetaSlow, 0}, {"mscale", &rc.MScale, math.Inf(-1)}, {"mscale_all_dim", &rc.MScaleAllDim, math.Inf(-1)}} {
			v, _, err := get(p.key)
			if err != nil {
				return rc, err
			}
			if v < p.min {
				return rc, fmt.Errorf("%s.%s = %v must not be negative", field, p.key, v)
			}
			*p.dst = v
		}
		if raw, ok := m["truncate"]; ok && string(raw) != "null" {
			var t bool
			if err := json.Unmarshal(raw, &t); err != nil {
				return rc, fmt.Errorf("field %s.truncate: want true or false, got %s", field, raw)
			}
			rc.NoTruncate = !t
		}
	case "longrope":
		half := rc.dims(dh) / 2
		var fs LongRoPEFactors
		for _, p := range []struct {
			key string
			dst *[]float64
		}{{"short_factor", &fs.Short}, {"long_factor", &fs.Long}} {
			raw, ok := m[p.key]
			if !ok || string(raw) == "null" {
				return rc, fmt.Errorf("field %s.%s is missing (needed for rope_type longrope)", field, p.key)
			}
			if err := json.Unmarshal(raw, p.dst); err != nil {
				return rc, fmt.Errorf("field %s.%s: want a list of numbers: %v", field, p.key, err)
			}
			if len(*p.dst) != half {
				return rc, fmt.Errorf("%s.%s has %d entries, want %d (one per rotated pair: %d rotated dimensions of head_dim %d)", field, p.key, len(*p.dst), half, rc.dims(dh), dh)
			}
			for i, v := range *p.dst {
				if !(v > 0) {
					return rc, fmt.Errorf("%s.%s[%d] = %v must be positive", field, p.key, i, v)
				}
			}
		}
		rc.Factors = &fs
	}
	if rc.Type == "yarn" || rc.Type == "longrope" {
		if v, ok, err := get("attention_factor"); err != nil {
			return rc, err
		} else if ok {
			if err := positive("attention_factor", v); err != nil {
				return rc, err
			}
			rc.AttnFactor = v
		}
		if a := rc.attentionScale(); !(a > 0) || math.IsInf(a, 0) {
			return rc, fmt.Errorf("%s: the attention factor derived from factor %v, mscale %v and mscale_all_dim %v is %v; it must be positive and finite", field, rc.Factor, rc.MScale, rc.MScaleAllDim, a)
		}
	}
	return rc, nil
}

func (c *Config) fromGPT2(r *rawConfig) error {
	var err error
	if c.DModel, err = need("n_embd", r.NEmbd); err != nil {
		return err
	}
	if c.Layers, err = need("n_layer", r.NLayer); err != nil {
		return err
	}
	if c.Heads, err = need("n_head", r.NHead); err != nil {
		return err
	}
	if c.Vocab, err = need("vocab_size", r.VocabSize); err != nil {
		return err
	}
	if c.MaxPos, err = need("n_positions", r.NPositions); err != nil {
		return err
	}
	if c.DModel%c.Heads != 0 {
		return fmt.Errorf("n_embd %d is not a multiple of n_head %d", c.DModel, c.Heads)
	}
	c.KVHeads, c.DHead = c.Heads, c.DModel/c.Heads
	c.DMLP = 4 * c.DModel
	if r.NInner != nil {
		if c.DMLP, err = need("n_inner", r.NInner); err != nil {
			return err
		}
	}
	c.NormEps = 1e-5
	if r.LNEps != nil {
		c.NormEps = *r.LNEps
	}
	c.Act = r.ActFn
	if c.Act == "" {
		c.Act = "gelu_new"
	}
	if _, ok := activations[c.Act]; !ok {
		return fmt.Errorf("activation_function %q is not supported", c.Act)
	}
	c.TiedHead = r.TieWordEmbeddings == nil || *r.TieWordEmbeddings
	c.QKVBias, c.OBias, c.MLPBias = true, true, true
	c.Gate = GateNone
	if r.ScaleAttnWeights != nil && !*r.ScaleAttnWeights {
		c.AttnScale = 1 // scale_attn_weights false: q·k unscaled
	}
	c.ScaleByInverseLayer = r.ScaleByInverseIdx
	return nil
}

// LearnedGate reports whether the attention output passes through a gate
// learned as a sigmoid of the token (Qiu et al.'s gated attention, Qwen3.5's
// softmax layers): the gate that BFT's Prediction 3 replaces. BFT's own
// gate is its Kalman gain, computed by the pass (GainGate).
func (c *Config) LearnedGate() bool { return c.GatePerHead() > 0 && !c.GainGate }

// LayerKinds describes each layer's token mixer: "gated DeltaNet",
// "RWKV-7 time mix", "sliding window N" or "full attention" (softmax
// layers).
func (c *Config) LayerKinds() []string {
	kinds := make([]string, c.Layers)
	for l := range kinds {
		switch {
		case c.DeltaNet != nil && c.DeltaNet.Linear[l]:
			dn := c.DeltaNet
			kinds[l] = fmt.Sprintf("gated DeltaNet (%d key / %d value heads × %d/%d, conv %d)", dn.KeyHeads, dn.ValueHeads, dn.KeyDim, dn.ValueDim, dn.ConvKernel)
		case c.RWKV7 != nil:
			kinds[l] = fmt.Sprintf("RWKV-7 time mix (%d heads × %d, generalised delta rule)", c.Heads, c.DHead)
		case c.SSM != nil:
			sc, kind := c.SSM, "Mamba-2"
			if sc.Attention {
				kind = "full attention + Mamba-2"
			}
			kinds[l] = fmt.Sprintf("%s (%d heads × %d, state %d, %d groups, conv %d)", kind, sc.Heads, sc.HeadDim, sc.State, sc.Groups, sc.ConvKernel)
		case c.layerWindow(l) > 0:
			kinds[l] = fmt.Sprintf("sliding window %d", c.layerWindow(l))
		default:
			kinds[l] = "full attention"
		}
	}
	return kinds
}

// SoftmaxLayers returns the layers whose token mixer is softmax attention,
// the ones that stream attention rows to AttnConsumers (all of them except
// the Gated DeltaNet layers of a hybrid model and Mamba-2's layers; none
// of RWKV-7's, whose every layer is its recurrence).
func (c *Config) SoftmaxLayers() []int {
	if c.RWKV7 != nil {
		return nil
	}
	var ls []int
	for l := 0; l < c.Layers; l++ {
		if (c.DeltaNet == nil || !c.DeltaNet.Linear[l]) && (c.SSM == nil || c.SSM.Attention) {
			ls = append(ls, l)
		}
	}
	return ls
}

// GatePerHead is the number of gate values per head and position: 0, 1
// (headwise) or DHead (elementwise).
func (c *Config) GatePerHead() int {
	switch c.Gate {
	case GateHeadwise:
		return 1
	case GateElementwise:
		return c.DHead
	}
	return 0
}

// layerWindow is the sliding window of layer l (0: the layer attends to
// every earlier position).
func (c *Config) layerWindow(l int) int {
	if c.SlidingLayers != nil && !c.SlidingLayers[l] {
		return 0
	}
	return c.Sliding
}
