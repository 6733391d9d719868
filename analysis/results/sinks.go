package results

import (
	"math"
)

// SinkRate returns Gu et al.'s Sink_1^ε: the percentage of the given
// per-head first-token means ā_0 that exceed eps (strictly), over the
// finite ones, and how many were finite. It is non-increasing in eps.
func SinkRate(firstMeans []float64, eps float64) (rate float64, heads int) {
	var above int
	for _, m := range firstMeans {
		if math.IsNaN(m) {
			continue
		}
		heads++
		if m > eps {
			above++
		}
	}
	if heads == 0 {
		return math.NaN(), 0
	}
	return 100 * float64(above) / float64(heads), heads
}
