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

// generator makes up the tensors a loader asks for: norms near 1 (near 0
// for the families whose norms scale by 1 + w) with zero bias, embeddings N(0, 0.5²), projections N(0, 1/fan_in), so activations
// stay O(1) and attention is varied. It records every tensor under its
// Hugging Face name so that the checkpoint can be written.
type generator struct {
	rng      *rand.Rand
	tensors  []checkpoint.Tensor
	prefix   string
	normMean float64 // mean of the norm weights: 1, or 0 where norms scale by 1 + w
	// fix, when set, moves a family's own parameters into their working
	// ranges as each tensor is made (family.generated), before the family's
	// loader transforms it.
	fix func(name string, x []float32)
}

func (g *generator) has(name string) bool {
	return strings.HasPrefix(name, g.prefix) && !strings.HasPrefix(name, "lm_head")
}

func (g *generator) make(name string, shape []int) []float32 {
	x := make([]float32, prod(shape))
	base := name[strings.LastIndex(name[:strings.LastIndex(name, ".")], ".")+1:]
	switch {
	case strings.Contains(base, "norm") || strings.HasPrefix(base, "ln_"):
		if strings.HasSuffix(name, ".weight") {
			for i := range x {
				x[i] = float32(g.normMean + 0.1*g.rng.NormFloat64())
			}
		}
	case strings.HasSuffix(name, ".bias"):
		for i := range x {
			x[i] = float32(0.02 * g.rng.NormFloat64())
		}
	case strings.Contains(name, "embed") || strings.Contains(name, "wte") || strings.Contains(name, "wpe"):
		for i := range x {
			x[i] = float32(0.5 * g.rng.NormFloat64())
		}
	default:
		fanIn := shape[len(shape)-1]
		if strings.Contains(name, ".c_") { // GPT-2 Conv1D is [in, out]
			fanIn = shape[0]
		}
		s := 1 / math.Sqrt(float64(fanIn))
		for i := range x {
			x[i] = float32(s * g.rng.NormFloat64())
		}
	}
	if g.fix != nil {
		g.fix(name, x)
	}
	g.tensors = append(g.tensors, checkpoint.Tensor{Name: name, Shape: append([]int(nil), shape...), Data: x})
	return x
}

// Generate builds a randomly initialized model of configuration cfg
// (seeded, deterministic) and returns it with its tensors under their
// checkpoint names, ready for WriteHF. Weights: norms near 1 with zero bias,
// embeddings N(0, 0.5²), projections N(0, 1/fan_in), so activations stay
// O(1) and attention is varied; the filter families then move their own
// parameters into their working ranges (family.generated). Used for demos,
// tests and benchmarks.
func Generate(cfg Config, seed uint64) (*Model, []checkpoint.Tensor, error) {
	f, err := familyOf(cfg.Arch)
	if err != nil {
		return nil, nil, fmt.Errorf("model: %w", err)
	}
	// The decoders and the filter mechanisms draw from two streams, so
	// that a seed gives the checkpoints it always gave.
	stream := uint64(0x6b616c6d616e)
	if f.generated != nil {
		stream = 0x66696c746572
	}
	g := &generator{rng: rand.New(rand.NewPCG(seed, stream)), prefix: f.prefix, normMean: 1}
	if f.offsetNorms {
		g.normMean = 0
	}
	if f.generated != nil {
		// its own stream, so that the generic weights do not depend on it
		g.fix = f.generated(rand.New(rand.NewPCG(seed, stream+1)), &cfg)
	}
	m := &Model{Config: cfg, Format: "generated", points: &hookPoints{}}
	f.load(m, &loader{gen: g})
	for _, t := range g.tensors {
		m.Parameters += int64(len(t.Data.([]float32)))
	}
	m.DTypes, m.WeightBytes = []string{"F32"}, 4*m.Parameters
	return m, g.tensors, nil
}

// WriteHF writes a checkpoint directory the way its family's reference
// code reads it: config.json (HFConfig) and model.safetensors.
func WriteHF(dir string, cfg Config, tensors []checkpoint.Tensor) error {
	fields := cfg.HFConfig()
	if fields == nil {
		return fmt.Errorf("model: unknown architecture %q (known: %s)", cfg.Arch, strings.Join(Archs(), ", "))
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
