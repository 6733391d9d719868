package analysis

import (
	"math"

	"github.com/filterlens/probe/analysis/results"
)

// paperIndex returns the index of T in Paper.LengthsK for k unit kUnit, or
// −1 when T is not one of the paper's lengths.
func paperIndex(T, kUnit int) int {
	for i, k := range results.Paper.LengthsK {
		if T == k*kUnit {
			return i
		}
	}
	return -1
}

// paperValue returns xs[paperIndex(T)] or NaN.
func paperValue(xs []float64, T, kUnit int) float64 {
	if i := paperIndex(T, kUnit); i >= 0 && i < len(xs) {
		return xs[i]
	}
	return math.NaN()
}

// paperFig3 returns the paper's Fig. 3 relative error at T, or NaN.
func paperFig3(T, kUnit int) float64 {
	if i := paperIndex(T, kUnit); i >= 1 {
		return results.Paper.Fig3RelErr[i-1]
	}
	return math.NaN()
}
