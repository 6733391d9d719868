package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
)

// Mamba-2 (model_type mamba2, Mamba2ForCausalLM): every block is
// x ← x + mixer(RMSNorm(x)) with the Mamba-2 mixer of ssm.go as its token
// mixer and no channel mixer; final RMSNorm (norm_f) and the LM head.
// Config.Heads and DHead are the SSM heads and their width (there is no
// softmax attention), and nothing bounds the positions.

// ArchMamba2 is Mamba-2.
const ArchMamba2 Arch = "mamba2"

// mamba2Raw holds Mamba2Config's fields.
type mamba2Raw struct {
	Hidden     *int        `json:"hidden_size"`
	Layers     *int        `json:"num_hidden_layers"`
	Heads      *int        `json:"num_heads"`
	HeadDim    *int        `json:"head_dim"`
	Expand     *float64    `json:"expand"`
	State      *int        `json:"state_size"`
	Groups     *int        `json:"n_groups"`
	ConvKernel *int        `json:"conv_kernel"`
	Chunk      *int        `json:"chunk_size"`
	Vocab      *int        `json:"vocab_size"`
	Eps        *float64    `json:"layer_norm_epsilon"`
	Limit      []jsonFloat `json:"time_step_limit"`
	ConvBias   *bool       `json:"use_conv_bias"`
	Bias       bool        `json:"use_bias"`
	Act        string      `json:"hidden_act"`
	Tied       *bool       `json:"tie_word_embeddings"`
}

// parseMamba2 fills c from a Mamba2Config config.json. The sizes are
// required; chunk_size (256), time_step_limit ((0, ∞)), use_conv_bias
// (true), layer_norm_epsilon (1e-5) and tie_word_embeddings (false) take
// Mamba2Config's defaults when absent.
func parseMamba2(c *Config, cf *configFile) error {
	var r mamba2Raw
	if err := json.Unmarshal(cf.data, &r); err != nil {
		return fmt.Errorf("not valid: %v", err)
	}
	c.ModelType, c.DType = cf.modelType(), cf.dtype()
	sc := &SSMConfig{Chunk: 256, DtMax: math.Inf(1), ConvBias: true, ProjBias: r.Bias, NormGroups: 1, Eps: 1e-5}
	var err error
	for _, f := range []struct {
		dst  *int
		name string
		p    *int
	}{{&c.DModel, "hidden_size", r.Hidden}, {&c.Layers, "num_hidden_layers", r.Layers}, {&sc.Heads, "num_heads", r.Heads},
		{&sc.HeadDim, "head_dim", r.HeadDim}, {&sc.State, "state_size", r.State}, {&sc.Groups, "n_groups", r.Groups},
		{&sc.ConvKernel, "conv_kernel", r.ConvKernel}, {&c.Vocab, "vocab_size", r.Vocab}} {
		if *f.dst, err = need(f.name, f.p); err != nil {
			return err
		}
	}
	if r.Chunk != nil {
		if *r.Chunk <= 0 {
			return fmt.Errorf("field chunk_size = %d must be positive (the SSD scan's chunk)", *r.Chunk)
		}
		sc.Chunk = *r.Chunk
	}
	expand := 2.0
	if r.Expand != nil {
		expand = *r.Expand
	}
	if inner := expand * float64(c.DModel); !(inner > 0) || inner != math.Trunc(inner) || inner > maxConfigElems {
		return fmt.Errorf("field expand %v × hidden_size %d is not a positive whole number of channels", expand, c.DModel)
	}
	sc.Inner = int(expand * float64(c.DModel))
	if r.Limit != nil {
		if len(r.Limit) != 2 {
			return fmt.Errorf("field time_step_limit has %d values, want [min, max]", len(r.Limit))
		}
		sc.DtMin, sc.DtMax = float64(r.Limit[0]), float64(r.Limit[1])
	}
	if r.ConvBias != nil {
		sc.ConvBias = *r.ConvBias
	}
	if r.Eps != nil {
		sc.Eps = *r.Eps
	}
	if r.Act != "" && r.Act != "silu" {
		return fmt.Errorf("field hidden_act %q is not supported for Mamba-2 (supported: silu, the convolution's activation)", r.Act)
	}
	if err := sc.check(); err != nil {
		return err
	}
	c.Heads, c.KVHeads, c.DHead, c.Act, c.Gate = sc.Heads, sc.Heads, sc.HeadDim, "silu", GateNone
	c.NormEps, c.MaxPos = sc.Eps, math.MaxInt32
	c.TiedHead = r.Tied != nil && *r.Tied
	c.SSM = sc
	return nil
}

// loadMamba2 reads a Mamba2ForCausalLM checkpoint: backbone.embeddings,
// backbone.layers.{l}.{norm, mixer.*}, backbone.norm_f, lm_head (or the
// embedding when tied).
func loadMamba2(m *Model, ld *loader) {
	c := &m.Config
	D := c.DModel
	m.Embed = ld.weight("backbone.embeddings.weight", c.Vocab, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		b := fmt.Sprintf("backbone.layers.%d.", l)
		L.Norm1W = ld.get(b+"norm.weight", D)
		L.mixer = readSSM(ld, b+"mixer.", D, c.SSM)
	}
	m.FinalW = ld.get("backbone.norm_f.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// mamba2Family is Mamba-2.
var mamba2Family = &family{
	arch: ArchMamba2, modelTypes: "mamba2",
	detect: func(cf *configFile) bool { return cf.modelType() == "mamba2" },
	parse:  parseMamba2,
	load:   loadMamba2,
	hfConfig: func(c *Config) map[string]any {
		sc := c.SSM
		return map[string]any{
			"model_type": "mamba2", "architectures": []string{"Mamba2ForCausalLM"},
			"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_heads": sc.Heads, "head_dim": sc.HeadDim,
			"expand": float64(sc.Inner) / float64(c.DModel), "state_size": sc.State, "n_groups": sc.Groups,
			"conv_kernel": sc.ConvKernel, "chunk_size": sc.Chunk, "vocab_size": c.Vocab,
			"layer_norm_epsilon": sc.Eps, "time_step_limit": timeStepLimit(sc), "use_conv_bias": sc.ConvBias,
			"use_bias": sc.ProjBias, "hidden_act": "silu", "tie_word_embeddings": c.TiedHead, "rms_norm": true,
			"residual_in_fp32": true, "dtype": "float32",
		}
	},
	// Mamba-2's proportions: expand 2, head width 16 (heads = 2·d_model/16),
	// state 16, two groups of B/C (one where the heads are odd), conv 4,
	// chunk 16, time_step_limit [1e-3, 1], untied head. s.Heads and s.KVHeads are not used: the heads follow
	// from d_model.
	small: func(s Size) (map[string]any, error) {
		if s.DModel%8 != 0 {
			return nil, fmt.Errorf("d_model %d: need a multiple of 8 (heads of 16 channels over expand·d_model)", s.DModel)
		}
		H, G := 2*s.DModel/16, 2
		if H%2 != 0 {
			G = 1
		}
		return map[string]any{
			"model_type": "mamba2", "hidden_size": s.DModel, "num_hidden_layers": s.Layers, "num_heads": H,
			"head_dim": 16, "expand": 2, "state_size": 16, "n_groups": G, "conv_kernel": 4, "chunk_size": 16,
			"vocab_size": s.Vocab, "layer_norm_epsilon": 1e-5, "time_step_limit": []float64{1e-3, 1},
			"use_conv_bias": true, "use_bias": false, "tie_word_embeddings": false,
		}, nil
	},
	prefix:    "backbone.",
	positions: "none (the recurrence's order)",
	generated: func(rng *rand.Rand, c *Config) func(string, []float32) { return ssmGenerated(rng) },
}
