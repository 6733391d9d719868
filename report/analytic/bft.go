package analytic

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/filterlens/probe/analysis/results"
)

// BFTLambdaObs returns BFT's observation precision from the kriging
// effective sample size and dispersion (App. I, Eq. 6 with λ̄ ≡ 1):
// λobs = (n_eff + 1)/(S + σ0²). The BFT diagnostic uses σ0² = 1/d_h.
func BFTLambdaObs(nEff, s, sigma02 float64) float64 { return (nEff + 1) / (s + sigma02) }

// BFTGain returns the Kalman gain K = λobs/(λ + λobs) (Eq. 3).
func BFTGain(lambdaObs, lambda float64) float64 { return lambdaObs / (lambda + lambdaObs) }

// FitPriorPrecision returns the prior precision λ that makes K_opt at the
// reference length equal the measured gain there (BFT Fig. 3, notes 003
// §B.6): λ = λobs·(1 − K)/K.
func FitPriorPrecision(lambdaObs, kMeasured float64) (float64, error) {
	if !(kMeasured > 0 && kMeasured < 1) {
		return 0, fmt.Errorf("analytic: measured gain %g is not in (0, 1)", kMeasured)
	}
	return lambdaObs * (1 - kMeasured) / kMeasured, nil
}

// Pearson returns the Pearson correlation r of x and y and its two-sided
// p-value from Student's t with n − 2 degrees of freedom,
// t = r √((n−2)/(1−r²)) (BFT Fig. 4: r over the (layer, head) cells).
func Pearson(x, y []float64) (r, p float64, err error) {
	n := len(x)
	if n != len(y) || n < 3 {
		return 0, 0, fmt.Errorf("analytic: Pearson needs two equal-length series of at least 3 points (got %d, %d)", len(x), len(y))
	}
	if r = results.PearsonR(x, y); math.IsNaN(r) {
		return 0, 0, fmt.Errorf("analytic: Pearson of a constant series is undefined")
	}
	return r, PearsonP(r, n), nil
}

// PearsonP returns the two-sided p-value of a Pearson correlation r over n
// points under the null of no correlation.
func PearsonP(r float64, n int) float64 {
	df := float64(n - 2)
	if math.Abs(r) >= 1 {
		return 0
	}
	t := r * math.Sqrt(df/(1-r*r))
	st := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: df}
	return 2 * st.Survival(math.Abs(t))
}
