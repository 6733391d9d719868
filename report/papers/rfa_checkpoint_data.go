package papers

// Pure helpers of the RFA checkpoint figures (rfa_checkpoint.go); the data
// they draw comes from analysis (RFAPriors, LoadRFASeries, ReadRFAHistory,
// StreamAttentionMaps) as analysis/rfatab and analysis/attngrid values.

import (
	"fmt"
	"math"
	"slices"

	"github.com/filterlens/probe/report/analytic"
)

// Grid returns the lags of ax (RFALagGrid; Points defaults to 400).
func (ax RFALagAxis) Grid() ([]float64, error) {
	n := ax.Points
	if n == 0 {
		n = 400
	}
	return RFALagGrid(ax.Max, n, ax.Log)
}

// RFALagGrid returns n lags for the Figs. 3–4 curves: evenly spaced on
// [0, maxLag] (logAxis false), or geometrically spaced on [1, maxLag] for a
// logarithmic lag axis (lag 0 cannot be drawn there; the figure's table
// gives the values at lag 0). maxLag must exceed 1 for a log axis.
func RFALagGrid(maxLag float64, n int, logAxis bool) ([]float64, error) {
	switch {
	case n < 2:
		return nil, fmt.Errorf("papers: lag grid of %d points", n)
	case logAxis && !(maxLag > 1):
		return nil, fmt.Errorf("papers: a logarithmic lag axis needs a largest lag above 1, got %g", maxLag)
	case !(maxLag > 0) || math.IsInf(maxLag, 0):
		return nil, fmt.Errorf("papers: largest lag %g", maxLag)
	}
	if !logAxis {
		return analytic.Linspace(0, maxLag, n), nil
	}
	out := analytic.Linspace(0, math.Log(maxLag), n)
	for i, v := range out {
		out[i] = math.Exp(v)
	}
	out[0], out[n-1] = 1, maxLag
	return out, nil
}

// PositiveQuantile returns the q-quantile (0 ≤ q ≤ 1, nearest rank) of the
// positive values of z, or 0 when there are none. Attention maps use it to
// clip a linear colour scale, whose maximum is otherwise the weight 1 of
// query 0 on itself.
func PositiveQuantile(z []float64, q float64) float64 {
	var pos []float64
	for _, v := range z {
		if v > 0 {
			pos = append(pos, v)
		}
	}
	if len(pos) == 0 {
		return 0
	}
	slices.Sort(pos)
	k := int(math.Ceil(q*float64(len(pos)))) - 1
	return pos[min(max(k, 0), len(pos)-1)]
}
