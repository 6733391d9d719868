package probes

import "golang.org/x/sys/cpu"

// decayAdd8 is decayAdd64's loop on eight float64 lanes (decay_amd64.s)
// for the first n elements, n a multiple of 8.
//
//go:noescape
func decayAdd8(row, u, next *float64, n int, e, k, kn float64) float64

func init() {
	if cpu.X86.HasAVX512F {
		decayAdd = decayAddAVX512
	}
}

// decayAddAVX512 is decayAdd64 with the multiples of 8 on AVX-512 (the
// state update is the whole cost of the gdn default set): the same row,
// next and Σ row² up to rounding (one FMA per element, eight partial
// sums).
func decayAddAVX512(row, u, next []float64, e, k, kn float64) float64 {
	u, next = u[:len(row)], next[:len(row)]
	n := len(row) &^ 7
	var s float64
	if n > 0 {
		s = decayAdd8(&row[0], &u[0], &next[0], n, e, k, kn)
	}
	for i := n; i < len(row); i++ {
		x := e*row[i] + k*u[i]
		row[i] = x
		next[i] += kn * x
		s += x * x
	}
	return s
}
