package results

import "math"

// BootstrapCI is a percentile bootstrap confidence interval of a Pearson
// correlation.
type BootstrapCI struct {
	Lo        Float   `json:"lo"`
	Hi        Float   `json:"hi"`
	Level     float64 `json:"level"`     // e.g. 0.95
	Resamples int     `json:"resamples"` // resamples drawn
	Valid     int     `json:"valid"`     // resamples whose r was defined (non-constant x and y)
	Seed      uint64  `json:"seed"`
}

// PearsonR is the Pearson correlation coefficient of the equal-length x and
// y (n ≥ 2 pairs), computed in two passes about the means,
// r = Σ(x−x̄)(y−ȳ) / √(Σ(x−x̄)² Σ(y−ȳ)²), clamped to [−1, 1] against
// rounding; NaN when either series is constant. The sweep's Fig. 4 cell
// correlations (analysis) and their p-values (report/analytic) both read it.
func PearsonR(x, y []float64) float64 {
	n := float64(len(x))
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= n
	my /= n
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return math.NaN()
	}
	return math.Max(-1, math.Min(1, sxy/math.Sqrt(sxx*syy)))
}
