package probes

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/filterlens/probe/model"
)

// softmaxRow returns a random softmax row of length n whose logits have
// standard deviation temp (large temp: peaked rows, small: flat rows).
func softmaxRow(rng *rand.Rand, n int, temp float64) []float32 {
	logits := make([]float64, n)
	mx := math.Inf(-1)
	for j := range logits {
		logits[j] = temp * rng.NormFloat64()
		mx = math.Max(mx, logits[j])
	}
	var z float64
	for j := range logits {
		logits[j] = math.Exp(logits[j] - mx)
		z += logits[j]
	}
	row := make([]float32, n)
	for j := range row {
		row[j] = float32(logits[j] / z)
	}
	return row
}

// randValues returns n value vectors of dimension d, row-major with stride
// vStride (the padding holds NaN, which must never be read).
func randValues(rng *rand.Rand, n, d, vStride int, offset, scale float64) []float32 {
	V := make([]float32, n*vStride)
	for j := 0; j < n; j++ {
		for i := 0; i < vStride; i++ {
			if i < d {
				V[j*vStride+i] = float32(offset + scale*rng.NormFloat64())
			} else {
				V[j*vStride+i] = float32(math.NaN())
			}
		}
	}
	return V
}

// rowsOf returns v(j) for row-major values with the given stride and dim.
func rowsOf(V []float32, vStride, d int) func(j int) []float32 {
	return func(j int) []float32 { return V[j*vStride : j*vStride+d] }
}

func relErr(got, want float64) float64 {
	if got == want {
		return 0
	}
	return math.Abs(got-want) / math.Max(math.Abs(want), math.SmallestNonzeroFloat64)
}

// storedFrom reports whether got, a stored float32 widened to float64, is
// the float32 nearest some x with |x − w| ≤ tol: the float64 value w
// within tol, rounded to float32 once. NaN matches NaN and ±Inf the same
// infinity (also a finite w beyond float32's range rounds to ±Inf).
func storedFrom(got, w, tol float64) bool {
	switch {
	case math.IsNaN(w) || math.IsNaN(got):
		return math.IsNaN(w) && math.IsNaN(got)
	case math.IsInf(w, 0):
		return got == w
	}
	return got == float64(float32(got)) && float64(float32(w-tol)) <= got && got <= float64(float32(w+tol))
}

// smallModel generates a random model of family arch and size s from seed:
// the small models of this package's tests.
func smallModel(tb testing.TB, arch model.Arch, s model.Size, seed uint64) *model.Model {
	tb.Helper()
	cfg, err := model.SmallConfig(arch, s)
	if err != nil {
		tb.Fatal(err)
	}
	m, _, err := model.Generate(cfg, seed)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}
