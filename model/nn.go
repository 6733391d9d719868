package model

import (
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// The numeric building blocks of the forward passes. Shapes are explicit;
// destinations come first; nothing here allocates.

// linear computes dst[n, out] = x[n, in] · w[out, in]ᵀ + b (b may be nil),
// the PyTorch nn.Linear convention. Weights of other layouts (GPT-2's
// Conv1D) are transposed at load time so that every projection uses this.
func linear(dst []float32, x []float32, n, in int, w []float32, out int, b []float32) {
	if n == 0 {
		return
	}
	// Split the rows across goroutines when there is enough work; each
	// part is one BLAS call.
	if parts := min(runtime.GOMAXPROCS(0), n/16); parts > 1 && n*in*out > 1<<20 {
		var wg sync.WaitGroup
		for p := 0; p < parts; p++ {
			lo, hi := p*n/parts, (p+1)*n/parts
			wg.Add(1)
			go func() {
				defer wg.Done()
				linearRows(dst[lo*out:hi*out], x[lo*in:hi*in], hi-lo, in, w, out, b)
			}()
		}
		wg.Wait()
		return
	}
	linearRows(dst, x, n, in, w, out, b)
}

// linearRows is linear in one BLAS call.
func linearRows(dst []float32, x []float32, n, in int, w []float32, out int, b []float32) {
	blas32.Gemm(blas.NoTrans, blas.Trans, 1,
		blas32.General{Rows: n, Cols: in, Stride: in, Data: x[:n*in]},
		blas32.General{Rows: out, Cols: in, Stride: in, Data: w[:out*in]},
		0, blas32.General{Rows: n, Cols: out, Stride: out, Data: dst[:n*out]})
	if b != nil {
		for r := 0; r < n; r++ {
			row := dst[r*out : (r+1)*out]
			for i, v := range b {
				row[i] += v
			}
		}
	}
}

// rmsNorm computes dst = x / sqrt(mean(x²) + eps) ⊙ w over rows of width d
// (PyTorch: the Llama/Qwen RMSNorm, which normalizes in float32 and
// multiplies by the weight afterwards). The mean square accumulates in
// float64.
func rmsNorm(dst, x []float32, d int, w []float32, eps float64) {
	for r := 0; r+d <= len(x); r += d {
		row, out := x[r:r+d], dst[r:r+d]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss/float64(d)+eps))
		for i, v := range row {
			out[i] = w[i] * (v * inv)
		}
	}
}

// layerNorm computes dst = (x − mean) / sqrt(var + eps) ⊙ w + b over rows of
// width d (biased variance, as torch.nn.LayerNorm), accumulating in float64.
func layerNorm(dst, x []float32, d int, w, b []float32, eps float64) {
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
}

// silu(x) = x·σ(x).
func silu(x float32) float32 { return float32(float64(x) / (1 + math.Exp(-float64(x)))) }

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

// addTo computes dst += x.
func addTo(dst, x []float32) {
	for i, v := range x {
		dst[i] += v
	}
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
