package model

import (
	"encoding/json"
	"fmt"
)

// SmolLM3 (SmolLM3ForCausalLM) is the Llama block (loadDecoder: the same
// tensor names) with NoPE layers: layer l rotates q and k by RoPE iff
// no_rope_layers[l] = 1 (Hugging Face's use_rope; 0 leaves q and k as the
// projections give them, Config.NoRoPE), by default every
// no_rope_layer_interval-th layer ((l+1) mod interval = 0) without RoPE;
// grouped-query attention, a tied head, RoPE base 2·10⁶ by default. A
// layer of layer_types "sliding_attention" attends within sliding_window
// (by default: the NoPE layers, when use_sliding_window).

// ArchSmolLM3 is SmolLM3: the Llama block with NoPE layers.
const ArchSmolLM3 Arch = "smollm3"

// smolLM3Theta is SmolLM3Config's default_theta, the RoPE base when
// config.json gives none.
const smolLM3Theta = 2e6

var smollm3Family = &family{
	arch: ArchSmolLM3, modelTypes: "smollm3",
	detect: func(cf *configFile) bool { return cf.modelType() == "smollm3" },
	parse:  parseSmolLM3,
	load:   loadDecoder,
	hfConfig: func(c *Config) map[string]any {
		m := decoderHFConfig(c, "smollm3", "SmolLM3ForCausalLM")
		use := make([]int, c.Layers)
		types := make([]string, c.Layers)
		for l := range use {
			if !c.layerNoRoPE(l) {
				use[l] = 1
			}
			types[l] = "full_attention"
			if c.layerWindow(l) > 0 {
				types[l] = "sliding_attention"
			}
		}
		m["no_rope_layers"], m["layer_types"] = use, types
		m["attention_bias"], m["mlp_bias"] = c.QKVBias, c.MLPBias
		m["use_sliding_window"], m["sliding_window"] = c.Sliding > 0, nil
		if c.Sliding > 0 {
			m["sliding_window"] = c.Sliding
		}
		return m
	},
	// small: the Llama-layout small model with SmolLM3's default NoPE
	// layers (every 4th).
	small: func(s Size) (map[string]any, error) {
		m, err := smallDecoder(s, "smollm3", "SmolLM3ForCausalLM")
		if err != nil {
			return nil, err
		}
		use := make([]int, s.Layers)
		for l := range use {
			if (l+1)%4 != 0 {
				use[l] = 1
			}
		}
		m["no_rope_layers"] = use
		return m, nil
	},
	prefix: "model.",
}

// parseSmolLM3 fills c from a SmolLM3 config.json (SmolLM3Config's
// defaults for absent fields: no_rope_layer_interval 4, tied head).
func parseSmolLM3(c *Config, cf *configFile) error {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	r := cf.r
	if r.RopeTheta == nil {
		// the base where rope_parameters gives none either
		theta := smolLM3Theta
		r.RopeTheta = &theta
	}
	window := r.SlidingWindow
	r.SlidingWindow = nil // per layer type: below
	if err := c.fromDecoder(&r, false); err != nil {
		return err
	}
	c.QKVBias, c.OBias, c.MLPBias = r.AttentionBias, r.AttentionBias, r.MLPBias

	// no_rope_layers: 1 = RoPE, 0 = NoPE; else every interval-th layer NoPE
	c.NoRoPE = make([]bool, c.Layers)
	if data, ok := cf.raw["no_rope_layers"]; ok && string(data) != "null" {
		var use []int
		if err := json.Unmarshal(data, &use); err != nil {
			return fmt.Errorf("field no_rope_layers: want a list of 0 and 1, one per layer: %v", err)
		}
		if len(use) != c.Layers {
			return fmt.Errorf("no_rope_layers has %d entries for num_hidden_layers %d (one per layer: 1 applies RoPE, 0 does not)", len(use), c.Layers)
		}
		for l, u := range use {
			if u != 0 && u != 1 {
				return fmt.Errorf("no_rope_layers[%d] = %d: want 1 (RoPE) or 0 (NoPE)", l, u)
			}
			c.NoRoPE[l] = u == 0
		}
	} else {
		interval, err := optNumber(cf.raw, "no_rope_layer_interval", 4, false)
		if err != nil {
			return err
		}
		if interval != float64(int(interval)) || interval > maxConfigLayers {
			return fmt.Errorf("no_rope_layer_interval = %v must be a positive integer", interval)
		}
		for l := range c.NoRoPE {
			c.NoRoPE[l] = (l+1)%int(interval) == 0
		}
	}

	// layer_types, else sliding on the NoPE layers when use_sliding_window
	sliding := make([]bool, c.Layers)
	if data, ok := cf.raw["layer_types"]; ok && string(data) != "null" {
		var types []string
		if err := json.Unmarshal(data, &types); err != nil {
			return fmt.Errorf("field layer_types: want a list of strings: %v", err)
		}
		if len(types) != c.Layers {
			return fmt.Errorf("layer_types has %d entries for num_hidden_layers %d", len(types), c.Layers)
		}
		for l, t := range types {
			switch t {
			case "sliding_attention":
				sliding[l] = true
			case "full_attention":
			default:
				return fmt.Errorf("layer_types[%d] = %q is not supported (SmolLM3: full_attention, sliding_attention)", l, t)
			}
		}
	} else if r.UseSlidingWindow != nil && *r.UseSlidingWindow && window != nil {
		copy(sliding, c.NoRoPE)
	}
	for l, s := range sliding {
		if !s {
			continue
		}
		if window == nil || *window <= 0 {
			return fmt.Errorf("layer_types[%d] is sliding_attention but sliding_window is not a positive number", l)
		}
		c.Sliding, c.SlidingLayers = *window, sliding
	}
	return nil
}
