package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/filterlens/probe/checkpoint"
)

// Random checkpoints of the filter mechanisms that have no released code
// (BFT, RT, AFA), for tests, demos and the PyTorch references in
// reference/{bft,rt,afa}: the siblings of Generate and WriteHF.

// GenerateFilter builds a randomly initialized BFT, RT or AFA model of
// configuration cfg (exactly one of cfg.BFT, cfg.RT, cfg.AFA set; seeded,
// deterministic) and returns it with its tensors under their checkpoint
// names, ready for WriteFilter. Weights follow Generate's scheme (norms
// near 1, embeddings N(0, 0.5²), projections N(0, 1/fan_in)); the
// mechanisms' own parameters get values in their working ranges (see
// each fix-up below).
func GenerateFilter(cfg Config, seed uint64) (*Model, []checkpoint.Tensor, error) {
	g := &generator{rng: rand.New(rand.NewPCG(seed, 0x66696c746572)), prefix: "model."}
	m := &Model{Config: cfg, Format: "generated"}
	ld := &loader{gen: g}
	var fix func(name string, x []float32)
	switch {
	case cfg.BFT != nil && cfg.Arch == ArchBFT:
		loadBFT(m, ld)
		fix = bftGenerated(g.rng)
	case cfg.RT != nil && cfg.Arch == ArchRT:
		loadRT(m, ld)
		fix = rtGenerated(g.rng, cfg.Heads, cfg.DHead/2)
	case cfg.AFA != nil && cfg.Arch == ArchAFA:
		loadAFA(m, ld)
		fix = afaGenerated(g.rng, cfg.Heads, cfg.DHead/2)
	default:
		return nil, nil, fmt.Errorf("model: GenerateFilter needs a BFT, RT or AFA configuration, got %q", cfg.Arch)
	}
	for _, t := range g.tensors {
		x := t.Data.([]float32)
		fix(t.Name, x)
		m.Parameters += int64(len(x))
	}
	m.DTypes = []string{"F32"}
	return m, g.tensors, nil
}

// bftGenerated sets the BFT parameters of a generated model: q_logits
// N(−3, 0.5²) (Q ≈ 0.05·Q_max), rho_logit near logit(0.99), tau_logits
// N(0, 1), tau_range in [0.5, 1.5] and tau_base uniform in [0, 1], so that
// every τ is positive.
func bftGenerated(rng *rand.Rand) func(string, []float32) {
	return func(name string, x []float32) {
		set := func(f func() float64) {
			for i := range x {
				x[i] = float32(f())
			}
		}
		switch {
		case strings.HasSuffix(name, ".bft.q_logits"):
			set(func() float64 { return -3 + 0.5*rng.NormFloat64() })
		case strings.HasSuffix(name, ".bft.rho_logit"):
			set(func() float64 { return math.Log(0.99/0.01) - 2*rng.Float64() })
		case name == "model.bft.tau_logits":
			set(rng.NormFloat64)
		case name == "model.bft.tau_range":
			set(func() float64 { return 0.5 + rng.Float64() })
		case name == "model.bft.tau_base":
			set(rng.Float64)
		}
	}
}

// invSoftplus returns x with softplus(x) = y (y > 0).
func invSoftplus(y float64) float64 { return math.Log(math.Expm1(y)) }

// rtGenerated sets the RT filter parameters of a generated model: ω a
// RoPE-like spectrum 10000^(−c/C) per head, scaled by a random factor in
// [0.5, 1.5]; μ log-spaced over the heads from 0.02 to 0.5; σ̃², η², γ²,
// τ_θ² around 0.2–1; ν in [2, 10]; β_s in [1, 3].
func rtGenerated(rng *rand.Rand, H, C int) func(string, []float32) {
	return func(name string, x []float32) {
		if !strings.Contains(name, ".attn.") || strings.HasSuffix(name, ".weight") || strings.HasSuffix(name, ".bias") {
			return
		}
		for h := 0; h < H; h++ {
			frac := float64(h) / float64(max(H-1, 1))
			switch {
			case strings.HasSuffix(name, ".omega"):
				f := 0.5 + rng.Float64()
				for c := 0; c < C; c++ {
					x[h*C+c] = float32(f * math.Pow(10000, -float64(c)/float64(C)))
				}
			case strings.HasSuffix(name, ".mu_raw"):
				x[h] = float32(invSoftplus(0.02 * math.Pow(25, frac)))
			case strings.HasSuffix(name, ".nu_raw"):
				x[h] = float32(invSoftplus(2 + 8*rng.Float64()))
			case strings.HasSuffix(name, ".beta_raw"):
				x[h] = float32(invSoftplus(1 + 2*rng.Float64()))
			default: // sigma, eta, gamma, tau_theta
				x[h] = float32(invSoftplus(0.2 + 0.8*rng.Float64()))
			}
		}
	}
}

// afaGenerated sets the AFA filter parameters of a generated model: decay
// a = α² log-spaced over the heads from 0.01 to 0.3, ω a RoPE-like
// spectrum per head, σ in [0.3, 1], η in [0.5, 1.2], τ_s in [0.5, 2],
// δ ~ N(0, 1).
func afaGenerated(rng *rand.Rand, H, d int) func(string, []float32) {
	return func(name string, x []float32) {
		if !strings.Contains(name, ".attn.") || strings.Contains(name, "_proj.") {
			return
		}
		for h := 0; h < H; h++ {
			frac := float64(h) / float64(max(H-1, 1))
			switch {
			case strings.HasSuffix(name, ".alpha"):
				x[h] = float32(math.Sqrt(0.01 * math.Pow(30, frac)))
			case strings.HasSuffix(name, ".omega"):
				f := 0.5 + rng.Float64()
				for m := 0; m < d/2; m++ {
					x[h*d/2+m] = float32(f * math.Pow(10000, -float64(m)/float64(d/2)))
				}
			case strings.HasSuffix(name, ".sigma"):
				x[h] = float32(0.3 + 0.7*rng.Float64())
			case strings.HasSuffix(name, ".eta"):
				x[h] = float32(0.5 + 0.7*rng.Float64())
			case strings.HasSuffix(name, ".tau_s"):
				x[h] = float32(0.5 + 1.5*rng.Float64())
			case strings.HasSuffix(name, ".delta"):
				for i := 0; i < d; i++ {
					x[h*d+i] = float32(rng.NormFloat64())
				}
			}
		}
	}
}

// WriteFilter writes a checkpoint directory of a BFT, RT or AFA model:
// config.json (the mechanism's documented fields) and model.safetensors.
func WriteFilter(dir string, cfg Config, tensors []checkpoint.Tensor) error {
	var fields map[string]any
	switch {
	case cfg.BFT != nil:
		fields = cfg.bftHFConfig()
	case cfg.RT != nil:
		fields = cfg.rtHFConfig()
	case cfg.AFA != nil:
		fields = cfg.afaHFConfig()
	default:
		return fmt.Errorf("model: WriteFilter needs a BFT, RT or AFA configuration, got %q", cfg.Arch)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"})
}

// roundTrip returns the configuration a reader of fields as config.json
// gets.
func roundTrip(fields map[string]any) (Config, error) {
	data, err := json.Marshal(fields)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(data)
	if err != nil {
		return Config{}, err
	}
	return *c, nil
}

// SmallRTConfig returns a small RT-Transformer configuration for tests
// and demos: the given layers, d_model and heads, head_dim 2·d_model/heads
// (Algorithm 1's d → 2d), SwiGLU width 2·d_model, RMSNorm ε 1e-6, tied
// head, and the default RT options (rt_config.go).
func SmallRTConfig(layers, dModel, heads, vocab, maxPos int) (Config, error) {
	if heads <= 0 || (2*dModel)%heads != 0 || (2*dModel/heads)%2 != 0 {
		return Config{}, fmt.Errorf("model: d_model %d, heads %d: need an even head_dim 2·d_model/heads", dModel, heads)
	}
	return roundTrip(map[string]any{
		"model_type": rtModelType, "hidden_size": dModel, "num_hidden_layers": layers, "num_attention_heads": heads,
		"intermediate_size": 2 * dModel, "vocab_size": vocab, "max_position_embeddings": maxPos,
	})
}

// SmallAFAConfig returns a small AFA configuration for tests and demos:
// the given layers, d_model and heads, head_dim 2·d_model/heads (a
// multiple of 4), SwiGLU width 2·d_model, complex biases on, RMSNorm ε
// 1e-6, tied head, and the default AFA options (afa_config.go).
func SmallAFAConfig(layers, dModel, heads, vocab, maxPos int) (Config, error) {
	if heads <= 0 || (2*dModel)%heads != 0 || (2*dModel/heads)%4 != 0 {
		return Config{}, fmt.Errorf("model: d_model %d, heads %d: need head_dim 2·d_model/heads a multiple of 4", dModel, heads)
	}
	return roundTrip(map[string]any{
		"model_type": afaModelType, "hidden_size": dModel, "num_hidden_layers": layers, "num_attention_heads": heads,
		"intermediate_size": 2 * dModel, "vocab_size": vocab, "max_position_embeddings": maxPos,
		"qkv_bias": true, "o_bias": true,
	})
}

// SmallBFTConfig returns a small BFT configuration for tests and demos:
// the given layers, d_model, heads and kv heads, head_dim d_model/heads,
// SwiGLU width 2·d_model, RMSNorm ε 1e-6, RoPE θ 10000, tied head, and the
// default BFT options (bft_config.go). Change cfg.BFT's fields, then pass
// it to GenerateFilter.
func SmallBFTConfig(layers, dModel, heads, kvHeads, vocab, maxPos int) (Config, error) {
	if heads <= 0 || kvHeads <= 0 || dModel%heads != 0 || heads%kvHeads != 0 || (dModel/heads)%2 != 0 {
		return Config{}, fmt.Errorf("model: d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and an even head dim", dModel, heads, kvHeads)
	}
	return roundTrip(map[string]any{
		"model_type": bftModelType, "hidden_size": dModel, "num_hidden_layers": layers,
		"num_attention_heads": heads, "num_key_value_heads": kvHeads, "head_dim": dModel / heads,
		"intermediate_size": 2 * dModel, "vocab_size": vocab, "max_position_embeddings": maxPos,
		"rms_norm_eps": 1e-6, "hidden_act": "silu", "rope_theta": 10000.0, "tie_word_embeddings": true,
	})
}
