package model

import (
	"fmt"
	"math"
)

// IBM Granite (GraniteForCausalLM) is the Llama block (loadDecoder: the
// same tensor names) with four multipliers, all data of the decoder pass:
//
//	x₀ = m_e · embed(ids)                   (embedding_multiplier, EmbedScale)
//	s  = m_a · q·k                           (attention_multiplier in place of dh^−½, AttnScale)
//	x ← x + m_r · attn(norm₁(x)); x ← x + m_r · mlp(norm₂(x))   (residual_multiplier, ResidScale)
//	logits = head(norm(x)) / c               (logits_scaling, LogitDivisor)
//
// GraniteConfig's defaults: every multiplier 1 (so the score scale is 1,
// not dh^−½, when attention_multiplier is absent), an untied head,
// attention_bias and mlp_bias false.

// ArchGranite is IBM Granite: the Llama block with multipliers.
const ArchGranite Arch = "granite"

var graniteFamily = &family{
	arch: ArchGranite, modelTypes: "granite",
	detect: func(cf *configFile) bool { return cf.modelType() == "granite" },
	parse:  parseGranite,
	load:   loadDecoder,
	hfConfig: func(c *Config) map[string]any {
		m := decoderHFConfig(c, "granite", "GraniteForCausalLM")
		one := func(x float32) float32 {
			if x == 0 {
				return 1
			}
			return x
		}
		m["embedding_multiplier"], m["residual_multiplier"] = one(c.EmbedScale), one(c.ResidScale)
		m["logits_scaling"], m["attention_multiplier"] = one(c.LogitDivisor), c.AttnScale
		m["attention_bias"], m["mlp_bias"] = c.QKVBias, c.MLPBias
		return m
	},
	// small: the Llama-layout small model with multipliers of the
	// released Granite 3 models' kind (embedding 12, attention 1/dh,
	// residual 0.22, logits divided by 8).
	small: func(s Size) (map[string]any, error) {
		m, err := smallDecoder(s, "granite", "GraniteForCausalLM")
		if err != nil {
			return nil, err
		}
		m["embedding_multiplier"], m["residual_multiplier"], m["logits_scaling"] = 12.0, 0.22, 8.0
		m["attention_multiplier"] = 1 / float64(s.DModel/s.Heads)
		return m, nil
	},
	prefix: "model.",
}

// parseGranite fills c from a Granite config.json.
func parseGranite(c *Config, cf *configFile) error {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	r := cf.r
	if err := c.fromDecoder(&r, false); err != nil {
		return err
	}
	c.TiedHead = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings // GraniteConfig: untied
	c.QKVBias, c.OBias, c.MLPBias = r.AttentionBias, r.AttentionBias, r.MLPBias
	mult := map[string]float64{}
	var err error
	for _, name := range []string{"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"} {
		if mult[name], err = optNumber(cf.raw, name, 1, false); err != nil {
			return err
		}
		if mult[name] > math.MaxFloat32 {
			return fmt.Errorf("%s = %v exceeds the float32 range", name, mult[name])
		}
	}
	c.AttnScale = mult["attention_multiplier"]
	c.EmbedScale = float32(mult["embedding_multiplier"])
	c.ResidScale = float32(mult["residual_multiplier"])
	c.LogitDivisor = float32(mult["logits_scaling"])
	return nil
}
