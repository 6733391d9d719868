package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model/internal/kern"
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

// mxfp4 makes experts × [rows, cols] matrices drawn as weight draws a
// projection, N(0, 1/cols), and stores them in MXFP4 as they are made
// (quantizeMXFP4), recording name+"_blocks" (uint8 [experts, rows,
// cols/32, 16]) and name+"_scales" (uint8 [experts, rows, cols/32]), the
// released gpt-oss layout: the float values of a 20B model's experts (19
// billion) are never held. Each expert draws from its own stream, seeded
// in order from g's, so the experts are made in parallel and the result
// does not depend on the number of goroutines. cols is a multiple of 32
// (the caller checks); g.fix does not apply.
func (g *generator) mxfp4(name string, experts, rows, cols int) (blocks, scales []uint8) {
	per := rows * cols
	blocks, scales = make([]uint8, experts*per/2), make([]uint8, experts*per/kern.MXFP4Block)
	seeds := make([]uint64, experts)
	for e := range seeds {
		seeds[e] = g.rng.Uint64()
	}
	s := 1 / math.Sqrt(float64(cols))
	next := make(chan int, experts)
	for e := range experts {
		next <- e
	}
	close(next)
	var wg sync.WaitGroup
	for range min(experts, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var x [kern.MXFP4Block]float32
			for e := range next {
				rng := rand.New(rand.NewPCG(seeds[e], 0x6d78667034))
				for b := e * per / kern.MXFP4Block; b < (e+1)*per/kern.MXFP4Block; b++ {
					for i := range x {
						x[i] = float32(s * rng.NormFloat64())
					}
					scales[b] = quantizeMXFP4(blocks[b*kern.MXFP4Block/2:(b+1)*kern.MXFP4Block/2], x[:])
				}
			}
		}()
	}
	wg.Wait()
	g.tensors = append(g.tensors,
		checkpoint.Tensor{Name: name + "_blocks", Shape: []int{experts, rows, cols / kern.MXFP4Block, kern.MXFP4Block / 2}, Data: blocks},
		checkpoint.Tensor{Name: name + "_scales", Shape: []int{experts, rows, cols / kern.MXFP4Block}, Data: scales})
	return blocks, scales
}

// mxfp4Mid are the midpoints of the E2M1 magnitudes {0, 0.5, 1, 1.5, 2,
// 3, 4, 6}: magnitude code c+1 is nearer than code c above mxfp4Mid[c],
// and at mxfp4Mid[c] too when c is odd (ties to the even code).
var mxfp4Mid = [7]float32{0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5}

// quantizeMXFP4 sets dst (16 bytes) to the E2M1 codes of the 32 values x
// under a shared scale 2^e, e = ⌊log₂ max|x|⌋ − 2 (max|x|/2^e in [4, 8):
// the largest value maps near the largest magnitude, 6), and returns the
// scale byte e + 127 (E8M0). Each value is the nearest magnitude of
// |x|/2^e (ties to the even code; above 6, 6), the sign in bit 3, element
// 2i in the low nibble of byte i and 2i+1 in the high one: the
// quantization the gpt_oss_mxfp4 golden case documents. A block of zeros
// gets scale 2^−127 and zero codes.
func quantizeMXFP4(dst []uint8, x []float32) uint8 {
	var mx uint32 // the largest |x| as bits (ordered as the values are)
	for _, v := range x {
		mx = max(mx, math.Float32bits(v)&0x7fffffff)
	}
	e := -127
	if mx > 0 {
		_, exp := math.Frexp(float64(math.Float32frombits(mx))) // = f·2^exp, f in [0.5, 1)
		e = max(exp-1-2, -127)
	}
	inv := float32(math.Ldexp(1, -e))
	clear(dst)
	for i, v := range x {
		bits := math.Float32bits(v)
		a, code := math.Float32frombits(bits&0x7fffffff)*inv, uint8(0)
		for c, m := range mxfp4Mid {
			if a > m || a == m && c&1 == 1 {
				code = uint8(c + 1)
			}
		}
		if bits>>31 == 1 && code != 0 {
			code |= 8
		}
		dst[i/2] |= code << (4 * (i % 2))
	}
	return uint8(e + 127)
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
		case []uint8: // MXFP4: two values a byte of the blocks; the scales are theirs
			if strings.HasSuffix(t.Name, "_blocks") {
				m.Parameters += 2 * int64(len(d))
			}
			m.WeightBytes += int64(len(d))
			types["MXFP4"] = true
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
