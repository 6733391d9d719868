package model

import (
	"fmt"
	"runtime"
	"slices"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model/internal/kern"
)

// Compute is the arithmetic of the decoder pass's matrix products (the
// q, k, v, gate and output projections, the MLP, the LM head and the Gated
// DeltaNet projections, and the softmax attention's q·kᵀ and α·v; CLI
// --compute):
//
//   - ComputeF32 (the default): float32 arithmetic — every product of an
//     activation and a weight exact or rounded once to float32, float32
//     sums. For a weight stored in bfloat16, on a CPU with AMX, and at
//     least amxF32Rows rows, kern.GemmF32AMX forms the products on the
//     tile unit: each activation split into three bfloat16 parts that sum
//     to it exactly, so each product is the exact sum of three exact
//     products, summed in float32 in the tile unit's order (within the
//     float32 summation bound of ComputeF32Widen, not bit for bit; no
//     activation is rounded). Everywhere else as ComputeF32Widen.
//   - ComputeF32Widen: the weights widened to float32 (exactly) and the
//     products of the float32 kernels (AVX-512 FMA or OpenBLAS): bit for
//     bit the pass of a float32 copy of the weights.
//   - ComputeBF16: PyTorch's bfloat16 arithmetic — the activations rounded
//     to bfloat16 (nearest even) before each projection, the weights in
//     bfloat16, exact products summed in float32 (kern.GemmBF16: AMX or
//     AVX-512 BF16 dot products where the CPU has them), with the product
//     itself kept in float32 where PyTorch would round it to bfloat16 too;
//     and in the softmax attention q, k and v rounded to bfloat16 (as
//     PyTorch's bf16 q, k, v tensors are), the scores scale·(q·kᵀ) and
//     α·v sums of exact products in float32 (AMX where the CPU has it).
//     The softmax and α stay float32; PyTorch rounds α to bfloat16 before
//     α·v, here the product carries α to 16 significant bits (hi + lo,
//     kern.GemmPacked) on AMX and to all 24 elsewhere, so that the
//     diagnostics' moments of α and the output α·v agree.
//   - ComputeBF16Proj: ComputeBF16's projections with the attention as in
//     ComputeF32 (q·kᵀ, softmax and α·v in float32 from the float32 q, k,
//     v), so that the diagnostics, statistics of α, carry no rounding of
//     q, k and v.
//
// Everything else stays float32 in all three: norms, RoPE, residual adds,
// the softmax and the Gated DeltaNet recurrence.
type Compute string

const (
	ComputeF32      Compute = "f32"
	ComputeBF16     Compute = "bf16"
	ComputeBF16Proj Compute = "bf16-proj"
	ComputeF32Widen Compute = "f32-widen"
)

// computeNames is HookNames' arithmetic: no products at all (linearAs
// writes zeros), for a pass that only lists the points it issues.
const computeNames Compute = "names"

// BF16Products reports whether c computes the projections in bfloat16
// (ComputeBF16 and ComputeBF16Proj): Load then keeps the weights in
// bfloat16, and the commands measure the deviation from float32.
func (c Compute) BF16Products() bool { return c == ComputeBF16 || c == ComputeBF16Proj }

// BF16Kernel names the kernel of ComputeBF16's products on this machine:
// "amx" (TDPBF16PS tiles: the CPU has AMX-BF16 and the OS granted the tile
// state), "avx512_bf16" (VDPBF16PS) or "go". Their sums agree within the
// float32 summation bound, not bit for bit (kern.GemmBF16).
func BF16Kernel() string {
	switch {
	case kern.HasAMX():
		return "amx"
	case kern.HasBF16():
		return "avx512_bf16"
	}
	return "go"
}

// ProductKernel names the kernel of m's matrix products in the arithmetic
// c on this machine: for bf16 products BF16Kernel's; for ComputeF32 where
// a weight is stored in bfloat16 and the CPU has AMX "amx-split3/" and the
// float32 kernels' name (kern.GemmF32AMX for products of at least
// amxF32Rows rows of those weights, the float32 kernels for the rest);
// else the float32 kernels' name, BLAS().
func (m *Model) ProductKernel(c Compute) string {
	switch {
	case c.BF16Products():
		return BF16Kernel()
	case m.amxParts(c) == 3:
		return "amx-split3/" + BLAS()
	}
	return BLAS()
}

// amxParts is how many bfloat16 parts of each activation m's products in
// the arithmetic c multiply on AMX: 3 for ComputeF32 with bf16 weights
// (kern.GemmF32AMX), 1 for bf16 products, 0 off AMX or where no product
// runs there.
func (m *Model) amxParts(c Compute) int {
	switch {
	case !kern.HasAMX():
		return 0
	case c.BF16Products():
		return 1
	case c != ComputeF32Widen && c != computeNames && slices.Contains(m.DTypes, "BF16"):
		return 3
	}
	return 0
}

// Recorded is c as results record it (results.SweepOptions.Compute and
// pass keys): "" for ComputeF32 (and ""), so that float32 keys are those
// of releases before the option; c itself otherwise.
func (c Compute) Recorded() Compute {
	if c == ComputeF32 {
		return ""
	}
	return c
}

// ParseCompute reads a Compute by name ("" is ComputeF32).
func ParseCompute(s string) (Compute, error) {
	switch Compute(s) {
	case "", ComputeF32:
		return ComputeF32, nil
	case ComputeF32Widen, ComputeBF16, ComputeBF16Proj:
		return Compute(s), nil
	}
	return "", fmt.Errorf("compute %q: want %s, %s, %s or %s", s, ComputeF32, ComputeF32Widen, ComputeBF16, ComputeBF16Proj)
}

// checkCompute refuses a Compute the model's pass does not run: an unknown
// name, or bf16 products for a family with its own pass (RFA, BFT, RT,
// AFA), whose projections are float32 only.
func (m *Model) checkCompute(c Compute) error {
	if _, err := ParseCompute(string(c)); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if _, own := m.ext.(ownPass); own && c.BF16Products() {
		return fmt.Errorf("model: compute %s runs the decoder pass's projections; the %s family has its own pass, computed in float32 (use --compute %s)",
			c, m.Arch, ComputeF32)
	}
	return nil
}

// linearAs is linear in the arithmetic c: linearBF16 for bf16 products,
// zeros for computeNames, and for ComputeF32 linearPairs on
// kern.GemmF32AMX where f32AMX says so (bf16 weights, AMX, at least
// amxF32Rows rows).
func linearAs(c Compute, dst []float32, x []float32, n, in int, w Weight, out int, b []float32) {
	switch {
	case c == computeNames:
		clear(dst[:n*out])
	case c.BF16Products():
		linearBF16(dst, x, n, in, w, out, b)
	case c != ComputeF32Widen && f32AMX(w.DType, n):
		linearPairs(dst, x, n, in, w, out, b, kern.GemmF32AMX)
	default:
		linear(dst, x, n, in, w, out, b)
	}
}

// amxF32Rows is the fewest rows of x for which ComputeF32 multiplies a
// bf16 weight on AMX (kern.GemmF32AMX): below it, packing the weight's
// panels for the tile unit costs more than the float32 kernels' whole
// product.
const amxF32Rows = 64

// f32AMX reports whether ComputeF32's product of n rows by a weight of
// dtype runs on kern.GemmF32AMX: the weight stored in bfloat16, so that
// its values are exact tile operands, and the CPU has AMX (a variable, so
// that tests can put products of any rows there).
var f32AMX = func(dtype string, n int) bool {
	return dtype == "BF16" && n >= amxF32Rows && kern.HasAMX()
}

// linearBF16 is linear with the product in bfloat16 arithmetic
// (ComputeBF16): dst = bf16(x)·bf16(w)ᵀ + b, exact products summed in
// float32 by kern.GemmBF16, which reads w where it is stored (Weight.
// PackPairs).
func linearBF16(dst []float32, x []float32, n, in int, w Weight, out int, b []float32) {
	linearPairs(dst, x, n, in, w, out, b, kern.GemmBF16)
}

// amxRowsAtOnce is the most rows of x for which linearPairs splits the
// columns of the product between goroutines rather than its rows: up to
// the rows kern's AMX products take at once (the weight's panels are then
// packed once in all, instead of once per goroutine).
const amxRowsAtOnce = 1024

// linearPairs is linear on a product gemm of kern's pair layout (GemmBF16,
// GemmF32AMX), which reads w where it is stored through Weight.PackPairs:
// the columns of dst are split across goroutines for few rows of x, the
// rows for many. An element's sum does not depend on the split (kern's
// sums depend on k alone).
func linearPairs(dst []float32, x []float32, n, in int, w Weight, out int, b []float32,
	gemm func(m, n, k int, x []float32, ldx int, w kern.PairSource, c []float32, ldc int)) {
	if n == 0 {
		return
	}
	if w.Rows != out || w.Cols != in {
		panic(fmt.Sprintf("model: linear with a [%d, %d] weight for %d inputs and %d outputs", w.Rows, w.Cols, in, out))
	}
	parts := runtime.GOMAXPROCS(0)
	if n*in*out <= 1<<20 {
		parts = 1
	}
	if n <= amxRowsAtOnce {
		blocks := (out + 31) / 32 // of the tile unit's 32 columns
		eachPart(blocks, min(parts, blocks), func(lo, hi int) {
			j0, j1 := 32*lo, min(32*hi, out)
			gemm(n, j1-j0, in, x, in, weightFrom{&w, j0}, dst[j0:], out)
		})
	} else {
		eachPart(n, parts, func(lo, hi int) {
			gemm(hi-lo, out, in, x[lo*in:hi*in], in, &w, dst[lo*out:hi*out], out)
		})
	}
	addBias(dst, n, out, b, min(parts, n))
}

// weightFrom is the rows of w from j0 on, as a kern.PairSource.
type weightFrom struct {
	w  *Weight
	j0 int
}

func (f weightFrom) PackPairs(dst []uint32, r0, rows, p0, kp int) {
	f.w.PackPairs(dst, f.j0+r0, rows, p0, kp)
}

// PackPairs writes rows r0 … r0+rows−1, pairs p0 … p0+kp−1 of the weight
// in bfloat16 as one panel of kern.GemmBF16 (kern.PairSource): BF16 bits
// as stored, F32 and F16 values rounded to nearest even, MXFP4 values
// dequantized (exact), ggml's blocks dequantized then rounded.
func (w *Weight) PackPairs(dst []uint32, r0, rows, p0, kp int) {
	const nr = 32
	lo := 2 * p0
	hi := min(w.Cols, 2*(p0+kp))
	if w.DType == "BF16" && w.run == 0 && rows == nr && hi-lo == 2*kp {
		at := w.rowAt(r0)
		kern.PackPanelBF16(dst, w.Bits[at+lo:], w.Cols, kp) // a whole panel at once
		return
	}
	for j := 0; j < nr; j++ {
		if j >= rows {
			for p := 0; p < kp; p++ {
				dst[p*nr+j] = 0
			}
			continue
		}
		at := w.rowAt(r0 + j)
		kind := w.DType
		if w.Q != nil {
			kind = "quantized"
		}
		switch kind {
		case "BF16":
			kern.PackPairsBF16(dst, j, w.Bits[at+lo:at+hi], kp)
		case "F32":
			kern.PackPairsF32(dst, j, w.F32[at+lo:at+hi], kp)
		case "MXFP4":
			// dequantized a chunk at a time (exact in bfloat16: two
			// significant bits), then packed as float32 values
			var buf [256]float32
			for c := lo; c < hi; c += len(buf) {
				m := min(len(buf), hi-c)
				kern.DequantMXFP4(buf[:m], w.MX.Codes, w.MX.Scales, at+c)
				kern.PackPairsF32(dst[(c-lo)/2*nr:], j, buf[:m], (m+1)/2)
			}
		case "quantized":
			// ggml's blocks: dequantized a chunk at a time as float32,
			// then rounded to bfloat16 as an F32 weight's values
			var buf [256]float32
			for c := lo; c < hi; c += len(buf) {
				m := min(len(buf), hi-c)
				w.Q.Dequant(buf[:m], at+c)
				kern.PackPairsF32(dst[(c-lo)/2*nr:], j, buf[:m], (m+1)/2)
			}
		case "F16":
			row := w.Bits[at+lo : at+hi]
			for p := 0; p < kp; p++ {
				var d uint32
				if 2*p < len(row) {
					d = uint32(kern.RoundBF16(checkpoint.F16ToFloat32(row[2*p])))
				}
				if 2*p+1 < len(row) {
					d |= uint32(kern.RoundBF16(checkpoint.F16ToFloat32(row[2*p+1]))) << 16
				}
				dst[p*nr+j] = d
			}
		default:
			panic(fmt.Sprintf("model: weight of dtype %q", w.DType))
		}
	}
}

// roundedBF16 returns the weight rounded to bfloat16 (nearest even) as a
// BF16 weight on the heap: what Load keeps of an F32 or F16 weight with
// LoadOptions.Compute bf16 (2 bytes per value instead of the stored 4, or
// the same 2). BF16 weights are returned as they are.
func (w Weight) roundedBF16() Weight {
	if w.DType == "BF16" || w.DType == "MXFP4" || w.Q != nil || !w.present() {
		return w // MXFP4: every value is a bfloat16 already; ggml's blocks stay as stored (rounded in the packing)
	}
	if !w.contiguous() {
		panic("model: rounding a weight made of runs")
	}
	r := Weight{Rows: w.Rows, Cols: w.Cols, DType: "BF16", Bits: make([]uint16, w.Rows*w.Cols)}
	switch w.DType {
	case "F32":
		for i, v := range w.F32[:len(r.Bits)] {
			r.Bits[i] = kern.RoundBF16(v)
		}
	case "F16":
		for i, h := range w.Bits[:len(r.Bits)] {
			r.Bits[i] = kern.RoundBF16(checkpoint.F16ToFloat32(h))
		}
	default:
		panic(fmt.Sprintf("model: weight of dtype %q", w.DType))
	}
	return r
}
