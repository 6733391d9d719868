package results

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSinkRateMonotone: Sink_1^ε never increases with ε, on random heads
// and NaN (not applicable) heads mixed in.
func TestSinkRateMonotone(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		means := make([]float64, 1+rng.IntN(40))
		for i := range means {
			means[i] = rng.Float64()
			if rng.IntN(10) == 0 {
				means[i] = math.NaN()
			}
		}
		prev := math.Inf(1)
		for eps := 0.0; eps <= 1.0001; eps += 0.01 {
			r, _ := SinkRate(means, eps)
			if r > prev {
				t.Fatalf("trial %d: Sink^%.2f = %v > Sink at the previous ε = %v", trial, eps, r, prev)
			}
			prev = r
		}
		if r, _ := SinkRate(means, 1); r != 0 && !math.IsNaN(r) {
			t.Fatalf("trial %d: Sink^1 = %v, want 0 (means ≤ 1)", trial, r)
		}
	}
}
