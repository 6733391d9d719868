package model

import (
	"math"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// Weights kept in bfloat16 with conversion on the fly: half the resident
// memory of widened float32 weights (a 1.7B-parameter model: 3.4 GB instead
// of 6.8 GB), at the cost of widening each weight once per projection call.
// Widening bf16 to float32 is exact (the bf16 bits are the top half of the
// float32), so a projection with bf16 weights gives the float32 projection
// of the same bf16-rounded weights.

// bf16Rows is the number of weight rows widened per block by linearBF16:
// 128 rows of a 4096-wide matrix are 2 MiB of float32 scratch.
const bf16Rows = 128

// bf16To32 widens bfloat16 values to float32 (exact).
func bf16To32(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, b := range src {
		dst[i] = math.Float32frombits(uint32(b) << 16)
	}
}

// bf16Scratch holds one goroutine's widened weight block.
var bf16Scratch = sync.Pool{New: func() any { return new([]float32) }}

// linearBF16 is linear with bfloat16 weights w [out, in] (raw bits, as
// stored in safetensors BF16): dst[n, out] = x[n, in] · wᵀ + b. The weight
// rows are widened to float32 in blocks of bf16Rows and multiplied block by
// block (one BLAS call each), with the rows of x split across goroutines
// as linear does.
func linearBF16(dst []float32, x []float32, n, in int, w []uint16, out int, b []float32) {
	if n == 0 {
		return
	}
	_ = w[out*in-1]
	parallelRows(n, in*out/64, func(lo, hi int) {
		buf := bf16Scratch.Get().(*[]float32)
		defer bf16Scratch.Put(buf)
		if cap(*buf) < bf16Rows*in {
			*buf = make([]float32, bf16Rows*in)
		}
		ws := (*buf)[:bf16Rows*in]
		rows := hi - lo
		xs := blas32.General{Rows: rows, Cols: in, Stride: in, Data: x[lo*in : hi*in]}
		for o0 := 0; o0 < out; o0 += bf16Rows {
			m := min(bf16Rows, out-o0)
			bf16To32(ws[:m*in], w[o0*in:(o0+m)*in])
			blas32.Gemm(blas.NoTrans, blas.Trans, 1, xs,
				blas32.General{Rows: m, Cols: in, Stride: in, Data: ws[:m*in]},
				0, blas32.General{Rows: rows, Cols: m, Stride: out, Data: dst[lo*out+o0:]})
		}
		if b != nil {
			for r := lo; r < hi; r++ {
				row := dst[r*out : (r+1)*out]
				for i, v := range b {
					row[i] += v
				}
			}
		}
	})
}
