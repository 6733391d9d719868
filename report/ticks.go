package report

import (
	"math"
	"strconv"
)

// targetTicks is the number of labelled intervals an axis aims for.
const targetTicks = 5

// niceStep returns the step of the form 1, 2, 2.5 or 5 times a power of
// ten closest (in ratio) to raw; raw ≤ 0 or not finite gives 1.
func niceStep(raw float64) float64 {
	if !(raw > 0) || math.IsInf(raw, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	best := p
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if math.Abs(math.Log(m*p/raw)) < math.Abs(math.Log(best/raw)) {
			best = m * p
		}
	}
	return best
}

// NiceTicks returns the labelled ticks of a linear axis over [lo, hi]:
// every multiple of step = niceStep((hi − lo)/n) inside the range (1e-9 of
// a step of slack at both ends), and the number of decimals that prints
// every multiple of step exactly (stepDecimals). An empty or reversed
// range gives no ticks.
func NiceTicks(lo, hi float64, n int) (ticks []float64, step float64, decimals int) {
	if !(hi > lo) || n < 1 || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return nil, 0, 0
	}
	step = niceStep((hi - lo) / float64(n))
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		ticks = append(ticks, k*step)
	}
	return ticks, step, stepDecimals(step)
}

// NiceRange widens [lo, hi] outwards to multiples of its nice step (the
// automatic range of an axis, so that both ends carry a label); a
// degenerate range is first widened by ±1 (or ±|lo|/10).
func NiceRange(lo, hi float64, n int) (nlo, nhi float64) {
	if !(hi > lo) {
		d := math.Max(math.Abs(lo)/10, 1e-300)
		if lo == 0 {
			d = 1
		}
		lo, hi = lo-d, hi+d
	}
	step := niceStep((hi - lo) / float64(n))
	return math.Floor(lo/step+1e-9) * step, math.Ceil(hi/step-1e-9) * step
}

// stepDecimals is the number of decimals that prints every multiple of
// step exactly: 0 for 1, 2, 5, 10…; 1 for 0.5; 2 for 0.25 or 0.01.
func stepDecimals(step float64) int {
	for d := 0; d < 15; d++ {
		s := step * math.Pow(10, float64(d))
		if math.Abs(s-math.Round(s)) < 1e-6*s {
			return d
		}
	}
	return 15
}

// TickLabel prints a multiple of step with decimals digits after the point
// ("25", "0.25", "-1.5"; never "-0"), or in exponent form with three
// significant digits when the step is below 1e-4 or above 1e6.
func TickLabel(v, step float64, decimals int) string {
	v = math.Round(v/step) * step
	if math.Abs(v) < step*1e-9 {
		return "0"
	}
	if step < 1e-4 || step > 1e6 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}
