package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
	// store is the safetensors dtype the weight matrices are kept in
	// ("BF16", "F16"; "" keeps float32): each is rounded as soon as it is
	// made, so a model whose float32 weights would not fit in memory can
	// be generated (an 8B-parameter model in bf16 holds 16 GB).
	store string
}

// weight makes the matrix name [rows, cols] (or a stack of them, [a, …,
// rows, cols], as one matrix of their rows) and keeps it in g.store's
// dtype (the tensor to write and the model's Weight share the bits).
func (g *generator) weight(name string, shape ...int) Weight {
	x := g.make(name, shape)
	rows, cols := prod(shape[:len(shape)-1]), shape[len(shape)-1]
	if g.store == "" || g.store == "F32" {
		return f32Weight(x, cols)
	}
	var bits []uint16
	switch g.store {
	case "BF16":
		b := make(checkpoint.BFloat16, len(x))
		for i, v := range x {
			b[i] = checkpoint.Float32ToBF16(v)
		}
		g.tensors[len(g.tensors)-1].Data, bits = b, b
	case "F16":
		b := make(checkpoint.Float16, len(x))
		for i, v := range x {
			b[i] = checkpoint.Float32ToF16(v)
		}
		g.tensors[len(g.tensors)-1].Data, bits = b, b
	}
	return Weight{Rows: rows, Cols: cols, DType: g.store, Bits: bits}
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
// checkpoint names, ready for WriteHF. A cfg.DType of bfloat16 or float16
// keeps the weight matrices in that dtype as they are made (norms, biases
// and the families' own parameters stay float32: convert them to write a
// checkpoint of one dtype, as probe generate does). Weights: norms near 1 with zero bias,
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
	g.store = map[string]string{"bfloat16": "BF16", "float16": "F16"}[cfg.DType]
	m := &Model{Config: cfg, Format: "generated", points: &hookPoints{}}
	f.load(m, &loader{gen: g})
	types := map[string]bool{}
	for _, t := range g.tensors {
		switch d := t.Data.(type) {
		case []float32:
			m.Parameters += int64(len(d))
			m.WeightBytes += 4 * int64(len(d))
			types["F32"] = true
		case checkpoint.BFloat16:
			m.Parameters += int64(len(d))
			m.WeightBytes += 2 * int64(len(d))
			types["BF16"] = true
		case checkpoint.Float16:
			m.Parameters += int64(len(d))
			m.WeightBytes += 2 * int64(len(d))
			types["F16"] = true
		}
	}
	m.DTypes = slices.Sorted(maps.Keys(types))
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
