package model

import (
	"math"
	"runtime"
	"sync"
)

// The numeric building blocks of the forward passes. Shapes are explicit;
// destinations come first; nothing here allocates.

// rmsNorm computes dst = x / sqrt(mean(x²) + eps) ⊙ w over rows of width d
// (PyTorch: the Llama/Qwen RMSNorm, which normalizes in float32 and
// multiplies by the weight afterwards). The mean square accumulates in
// float64. Long inputs are split by rows across goroutines; the row's two
// loops run on 16 lanes where the CPU has them (kern_amd64.go).
func rmsNorm(dst, x []float32, d int, w []float32, eps float64) {
	rows := len(x) / d
	parallelRows(rows, d, func(lo, hi int) {
		for r := lo * d; r < hi*d; r += d {
			row := x[r : r+d]
			inv := float32(1 / math.Sqrt(sumSquares(row)/float64(d)+eps))
			scaleMul(dst[r:r+d], row, w, inv)
		}
	})
}

// sumSquares returns Σ x[i]² summed in float64: sqNorm, or the 16-lane
// kernel (kern_amd64.go), whose float64 sum runs in another order.
var sumSquares = sqNorm

// scaleMul sets dst[i] = w[i]·(x[i]·s) in float32; dst may be x.
var scaleMul = func(dst, x, w []float32, s float32) {
	for i, v := range x {
		dst[i] = w[i] * (v * s)
	}
}

// parallelMinWork is the number of elements below which parallelRows runs
// on the calling goroutine (a goroutine start costs about a microsecond,
// the time of a few thousand element operations).
const parallelMinWork = 1 << 15

// parallelRows calls fn on contiguous row ranges [lo, hi) that cover
// [0, rows), one range per goroutine up to GOMAXPROCS, when rows·width is
// large enough to pay for the goroutines; otherwise fn(0, rows) runs on the
// caller.
func parallelRows(rows, width int, fn func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), rows)
	if parts <= 1 || rows*width < parallelMinWork {
		fn(0, rows)
		return
	}
	var wg sync.WaitGroup
	for p := 0; p < parts; p++ {
		lo, hi := p*rows/parts, (p+1)*rows/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// LayerNorm computes dst = (x − mean) / sqrt(var + eps) ⊙ w + b over rows of
// width d (biased variance, as torch.nn.LayerNorm), accumulating in float64.
// Exported for passes outside the registry (package afatoy's baseline).
func LayerNorm(dst, x []float32, d int, w, b []float32, eps float64) {
	for r := 0; r+d <= len(x); r += d {
		row, out := x[r:r+d], dst[r:r+d]
		var mean float64
		for _, v := range row {
			mean += float64(v)
		}
		mean /= float64(d)
		var vr float64
		for _, v := range row {
			dv := float64(v) - mean
			vr += dv * dv
		}
		inv := 1 / math.Sqrt(vr/float64(d)+eps)
		for i, v := range row {
			out[i] = float32((float64(v)-mean)*inv)*w[i] + b[i]
		}
	}
}

// activations maps Hugging Face activation names to functions.
var activations = map[string]func(float32) float32{
	"silu":              silu,
	"swish":             silu,
	"gelu_new":          geluTanh,
	"gelu_pytorch_tanh": geluTanh,
	"gelu_fast":         geluTanh,
	"gelu":              geluErf,
	"relu":              func(x float32) float32 { return max(x, 0) },
	// relu2 is relu(x)², transformers' ReLUSquaredActivation (RWKV's
	// channel mix)
	"relu2": func(x float32) float32 { x = max(x, 0); return x * x },
}

// silu(x) = x·σ(x) = x/(1 + e^−x) in float32, as PyTorch's F.silu (expf
// within 2 ulp, so silu within 3 ulp).
func silu(x float32) float32 { return x / (1 + expf(-x)) }

// swiglu computes gate[i] = act(gate[i])·up[i], the SwiGLU product of the
// Llama/Qwen MLP, for the activation named act (Config.Act, a key of
// activations), split across goroutines for long inputs. SiLU runs on a
// 16-lane (AVX-512 assembly) or 8-lane (OpenBLAS build, C) kernel where the
// build has one (siluMulKernel).
func swiglu(gate, up []float32, act string) {
	const chunk = 4096
	n := len(gate)
	up = up[:n]
	fn := activations[act]
	kernel := siluMulKernel
	if act != "silu" && act != "swish" {
		kernel = nil
	}
	parallelRows((n+chunk-1)/chunk, chunk, func(lo, hi int) {
		g, u := gate[lo*chunk:min(hi*chunk, n)], up[lo*chunk:min(hi*chunk, n)]
		if kernel != nil {
			kernel(g, u)
			return
		}
		for i, x := range g {
			g[i] = fn(x) * u[i]
		}
	})
}

// siluMulKernel, when set (kern_amd64.go on AVX-512 CPUs, the OpenBLAS
// build's C kernel on AVX2+FMA CPUs), computes g[i] = silu(g[i])·u[i] on
// 16 or 8 lanes, within 8 ulp of the exact product (TestSwiGLU).
var siluMulKernel func(g, u []float32)

// geluTanh is GPT-2's gelu_new: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
func geluTanh(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v))))
}

// geluErf is the exact GELU: 0.5·x·(1 + erf(x/√2)).
func geluErf(x float32) float32 {
	v := float64(x)
	return float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
}

// sigmoid(x) = 1/(1 + e^−x).
func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// addTo computes dst += x, split across goroutines for long inputs.
func addTo(dst, x []float32) {
	const chunk = 8192
	n := len(x)
	dst = dst[:n]
	parallelRows((n+chunk-1)/chunk, chunk, func(lo, hi int) {
		d, s := dst[lo*chunk:min(hi*chunk, n)], x[lo*chunk:min(hi*chunk, n)]
		for i, v := range s {
			d[i] += v
		}
	})
}

// softmaxRow replaces row with softmax(row) in place. The normalizer
// accumulates in float64 (long rows at 16k+ keys).
func softmaxRow(row []float32) {
	m := float32(math.Inf(-1))
	for _, v := range row {
		if v > m {
			m = v
		}
	}
	var sum float64
	for i, v := range row {
		e := math.Exp(float64(v - m))
		row[i] = float32(e)
		sum += e
	}
	inv := 1 / sum
	for i, v := range row {
		row[i] = float32(float64(v) * inv)
	}
}

// expf returns e^x in float32 within 2 ulp for x in [−87.3, 88.3] (the range
// where the result is a normal float32), faster than
// float32(math.Exp(float64(x))) (BenchmarkExpf; docs/performance.md).
// Outside that range, and for NaN, it returns float32(math.Exp(float64(x))).
//
// Method: x = n·ln2 + r with n = round(x·log₂e) and |r| ≲ ln2/2 (ln2 split
// into a 16-bit head, so that n·head is exact, and a tail); e^r by its
// Taylor polynomial of degree 7 (truncation below 6e-9 relative), scaled by
// 2ⁿ built in the exponent bits.
func expf(x float32) float32 {
	if !(x >= -87.3 && x <= 88.3) {
		return float32(math.Exp(float64(x)))
	}
	const (
		log2e  = 1.4426950408889634
		magic  = 12582912 // 1.5·2²³: adding it rounds to an integer held in the low mantissa bits
		ln2Hi  = 0.693145751953125
		ln2Lo  = 1.4286068203094173e-06
		c2, c3 = 1.0 / 2, 1.0 / 6
		c4, c5 = 1.0 / 24, 1.0 / 120
		c6, c7 = 1.0 / 720, 1.0 / 5040
	)
	t := x*log2e + magic
	k := int32(math.Float32bits(t)) - 0x4b400000
	n := t - magic
	r := x - n*ln2Hi - n*ln2Lo
	p := 1 + r*(1+r*(c2+r*(c3+r*(c4+r*(c5+r*(c6+r*c7))))))
	return p * math.Float32frombits(uint32(k+127)<<23)
}

// onePlus returns 1 + w in float32: the factor of Gemma's RMSNorm, which
// Hugging Face computes as (1 + w.float()) on every call and which is
// computed here once (a new slice: w stays as stored).
func onePlus(w []float32) []float32 {
	o := make([]float32, len(w))
	for i, x := range w {
		o[i] = 1 + x
	}
	return o
}

// clamp sets every x to min(max(x, −c), c).
func clamp(x []float32, c float32) {
	for i, v := range x {
		x[i] = min(max(v, -c), c)
	}
}
