package model

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model/internal/kern"
)

// Compute is the arithmetic of the decoder pass's matrix products (the
// q, k, v, gate and output projections, the MLP, the LM head and the Gated
// DeltaNet projections, and the softmax attention's q·kᵀ and α·v; CLI
// --compute):
//
//   - ComputeF32 (the default): float32 products of the weights as stored
//     (widened exactly), float32 sums.
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

// ParseCompute reads a Compute by name ("" is ComputeF32).
func ParseCompute(s string) (Compute, error) {
	switch Compute(s) {
	case "", ComputeF32:
		return ComputeF32, nil
	case ComputeBF16, ComputeBF16Proj:
		return Compute(s), nil
	}
	return "", fmt.Errorf("compute %q: want %s, %s or %s", s, ComputeF32, ComputeBF16, ComputeBF16Proj)
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
// zeros for computeNames.
func linearAs(c Compute, dst []float32, x []float32, n, in int, w Weight, out int, b []float32) {
	if c == computeNames {
		clear(dst[:n*out])
		return
	}
	if c.BF16Products() {
		linearBF16(dst, x, n, in, w, out, b)
		return
	}
	linear(dst, x, n, in, w, out, b)
}

// linearBF16 is linear with the product in bfloat16 arithmetic
// (ComputeBF16): dst = bf16(x)·bf16(w)ᵀ + b, exact products summed in
// float32 by kern.GemmBF16, which reads w where it is stored (Weight.
// PackPairs); the rows of x are split across goroutines as linear splits
// them.
func linearBF16(dst []float32, x []float32, n, in int, w Weight, out int, b []float32) {
	if n == 0 {
		return
	}
	if w.Rows != out || w.Cols != in {
		panic(fmt.Sprintf("model: linear with a [%d, %d] weight for %d inputs and %d outputs", w.Rows, w.Cols, in, out))
	}
	rows := func(lo, hi int) {
		kern.GemmBF16(hi-lo, out, in, x[lo*in:hi*in], in, &w, dst[lo*out:hi*out], out)
		if b != nil {
			for r := lo; r < hi; r++ {
				row := dst[r*out : (r+1)*out]
				for i, v := range b {
					row[i] += v
				}
			}
		}
	}
	if parts := min(runtime.GOMAXPROCS(0), n/16); parts > 1 && n*in*out > 1<<20 {
		var wg sync.WaitGroup
		for p := 0; p < parts; p++ {
			lo, hi := p*n/parts, (p+1)*n/parts
			wg.Add(1)
			go func() {
				defer wg.Done()
				rows(lo, hi)
			}()
		}
		wg.Wait()
		return
	}
	rows(0, n)
}

// PackPairs writes rows r0 … r0+rows−1, pairs p0 … p0+kp−1 of the weight
// in bfloat16 as one panel of kern.GemmBF16 (kern.PairSource): BF16 bits
// as stored, F32 and F16 values rounded to nearest even.
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
		switch w.DType {
		case "BF16":
			kern.PackPairsBF16(dst, j, w.Bits[at+lo:at+hi], kp)
		case "F32":
			kern.PackPairsF32(dst, j, w.F32[at+lo:at+hi], kp)
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
	if w.DType == "BF16" || !w.present() {
		return w
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
