//go:build amd64

package kern

import (
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// hasBF16: AVX-512F, BMI2 and AVX512_BF16 (VDPBF16PS), with the OS saving
// the zmm registers (cpu checks that).
var hasBF16 = Available() && cpu.X86.HasAVX512BF16

func init() {
	if hasBF16 {
		bfKernel = kernelBF6x32
	}
}

// kernelBF6x32 is kernelBF6x32Go on VDPBF16PS (bf16_amd64.s).
func kernelBF6x32(kp int, ap, bp []uint32, c []float32, ldc int, load bool) {
	_, _ = ap[bfMR*kp-1], bp[bfNR*kp-1]
	_ = c[(bfMR-1)*ldc+bfNR-1]
	l := 0
	if load {
		l = 1
	}
	kernelBF6x32AVX512(kp, &ap[0], &bp[0], &c[0], ldc, l)
}

//go:noescape
func kernelBF6x32AVX512(kp int, ap, bp *uint32, c *float32, ldc, load int)

// packRowPairs writes the first n pairs of row into column j of a panel
// (dst[p·32+j]), reading each pair as one dword: on a little-endian
// machine the row's memory itself.
func packRowPairs(dst []uint32, j int, row []uint16, n int) {
	if n == 0 {
		return
	}
	_, _ = dst[(n-1)*bfNR+j], row[2*n-1]
	for p, d := range unsafe.Slice((*uint32)(unsafe.Pointer(&row[0])), n) {
		dst[p*bfNR+j] = d
	}
}

// packPanel is PackPanelBF16 (arguments checked): rows gathered 16 at a
// time with AVX-512 where the row offsets fit VPGATHERDD's int32 indexes,
// else row by row.
func packPanel(dst []uint32, bits []uint16, stride, kp int) {
	if !Available() || 2*stride*(bfNR-1) > math.MaxInt32 {
		packPanelRows(dst, bits, stride, kp)
		return
	}
	var idx [17]int32
	for j := range idx {
		idx[j] = int32(2 * stride * j)
	}
	packPanelAVX512(&dst[0], &bits[0], &idx[0], kp)
}

//go:noescape
func packPanelAVX512(dst *uint32, bits *uint16, idx *int32, kp int)
