package analytic

import (
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"
)

// LTI2 is the stable 2-D linear time-invariant SDE of RFA Fig. 1 (App.
// A.1.2, Eq. 1) with C = I:
//
//	dx = A x dt + G dw,  Q = G Gᵀ;   z_j = x(t_j) + v_j,  v_j ~ N(0, R).
type LTI2 struct {
	A, Q, R *mat.Dense
}

// RFAFig1System returns the parameters of RFA Fig. 1 as given by the
// author's LTI_SDE_Visualization notebook (notes 000 §C Fig. 1):
// A = [[−0.1, −1], [1, −0.1]], Q = 0.01·[[1, 0.5], [0.5, 1]],
// R = 0.25·[[1, 0.3], [0.3, 1]].
func RFAFig1System() LTI2 {
	return LTI2{
		A: mat.NewDense(2, 2, []float64{-0.1, -1, 1, -0.1}),
		Q: mat.NewDense(2, 2, []float64{0.01, 0.005, 0.005, 0.01}),
		R: mat.NewDense(2, 2, []float64{0.25, 0.075, 0.075, 0.25}),
	}
}

// Transition returns Φ(Δt) = e^{AΔt} (any sign of Δt).
func (s LTI2) Transition(dt float64) *mat.Dense {
	var m, e mat.Dense
	m.Scale(dt, s.A)
	e.Exp(&m)
	return &e
}

// ProcessCov returns the accumulated process covariance V(Δt) of the
// differential Lyapunov equation dV/ds = AV + VAᵀ + Q, V(0) = 0 (RFA Eq. 2),
// i.e. ∫_0^{Δt} e^{As} Q e^{Aᵀs} ds, computed by Van Loan's block-matrix
// exponential: exp([[−A, Q], [0, Aᵀ]]Δt) = [[·, F12], [0, F22]] gives
// V = F22ᵀ F12. For Δt < 0 it returns the backward (non-causal) form
// V_B(Δt) = e^{AΔt} V(|Δt|) e^{AᵀΔt} (App. A.1.1).
func (s LTI2) ProcessCov(dt float64) *mat.Dense {
	if dt < 0 {
		phi := s.Transition(dt)
		v := s.ProcessCov(-dt)
		var out mat.Dense
		out.Product(phi, v, phi.T())
		return &out
	}
	n, _ := s.A.Dims()
	block := mat.NewDense(2*n, 2*n, nil)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			block.Set(i, j, -s.A.At(i, j)*dt)
			block.Set(i, n+j, s.Q.At(i, j)*dt)
			block.Set(n+i, n+j, s.A.At(j, i)*dt)
		}
	}
	var f mat.Dense
	f.Exp(block)
	f12 := f.Slice(0, n, n, 2*n)
	f22 := f.Slice(n, 2*n, n, 2*n)
	var v mat.Dense
	v.Mul(f22.T(), f12)
	return symmetrize(&v)
}

// MeasurementCov returns the covariance of a measurement transported by Δt,
// V^C(Δt) = V(Δt) + Φ(Δt) R Φ(Δt)ᵀ (App. A, step 3 with C = I).
func (s LTI2) MeasurementCov(dt float64) *mat.Dense {
	phi := s.Transition(dt)
	var prr mat.Dense
	prr.Product(phi, s.R, phi.T())
	var out mat.Dense
	out.Add(s.ProcessCov(dt), &prr)
	return symmetrize(&out)
}

func symmetrize(m *mat.Dense) *mat.Dense {
	n, _ := m.Dims()
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a := 0.5 * (m.At(i, j) + m.At(j, i))
			m.Set(i, j, a)
			m.Set(j, i, a)
		}
	}
	return m
}

// Sample is one simulated path of an LTI2 system with its measurements.
type Sample struct {
	T, X1, X2      []float64 // Euler–Maruyama path at t = k·dt
	MeasT, Z1, Z2  []float64 // measurement times and noisy measurements
	MeasStep       []int     // path index of each measurement
	Dt, Horizon    float64
	Seed           uint64
	NumMeasurement int
}

// Simulate integrates the SDE from x0 over [0, horizon] with Euler–Maruyama
// step dt (x_{k+1} = x_k + A x_k dt + chol(Q) √dt ξ_k) and takes nMeas
// measurements z = x + chol(R) ζ at path indices round(j·K/(nMeas−1)),
// j = 0..nMeas−1, K = horizon/dt (evenly subsampled, both ends included).
// The random stream is PCG(seed, 0x5eed).
func (s LTI2) Simulate(x0 [2]float64, horizon, dt float64, nMeas int, seed uint64) (*Sample, error) {
	steps := int(math.Round(horizon / dt))
	if steps < 1 || nMeas < 2 || nMeas > steps+1 {
		return nil, fmt.Errorf("analytic: bad simulation grid (horizon %g, dt %g, %d measurements)", horizon, dt, nMeas)
	}
	g, err := chol2(s.Q)
	if err != nil {
		return nil, fmt.Errorf("analytic: Q: %w", err)
	}
	rr, err := chol2(s.R)
	if err != nil {
		return nil, fmt.Errorf("analytic: R: %w", err)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := &Sample{Dt: dt, Horizon: horizon, Seed: seed, NumMeasurement: nMeas}
	x := x0
	sq := math.Sqrt(dt)
	a := s.A
	for k := 0; k <= steps; k++ {
		out.T = append(out.T, float64(k)*dt)
		out.X1 = append(out.X1, x[0])
		out.X2 = append(out.X2, x[1])
		xi := [2]float64{rng.NormFloat64(), rng.NormFloat64()}
		n := mulL(g, xi)
		x = [2]float64{
			x[0] + (a.At(0, 0)*x[0]+a.At(0, 1)*x[1])*dt + sq*n[0],
			x[1] + (a.At(1, 0)*x[0]+a.At(1, 1)*x[1])*dt + sq*n[1],
		}
	}
	for j := 0; j < nMeas; j++ {
		k := int(math.Round(float64(j) * float64(steps) / float64(nMeas-1)))
		zeta := mulL(rr, [2]float64{rng.NormFloat64(), rng.NormFloat64()})
		out.MeasStep = append(out.MeasStep, k)
		out.MeasT = append(out.MeasT, out.T[k])
		out.Z1 = append(out.Z1, out.X1[k]+zeta[0])
		out.Z2 = append(out.Z2, out.X2[k]+zeta[1])
	}
	return out, nil
}

// chol2 returns the lower Cholesky factor of a 2×2 SPD matrix.
func chol2(m *mat.Dense) ([2][2]float64, error) {
	a, b, d := m.At(0, 0), m.At(1, 0), m.At(1, 1)
	if a <= 0 {
		return [2][2]float64{}, fmt.Errorf("not positive definite")
	}
	l11 := math.Sqrt(a)
	l21 := b / l11
	r := d - l21*l21
	if r <= 0 {
		return [2][2]float64{}, fmt.Errorf("not positive definite")
	}
	return [2][2]float64{{l11, 0}, {l21, math.Sqrt(r)}}, nil
}

func mulL(l [2][2]float64, v [2]float64) [2]float64 {
	return [2]float64{l[0][0]*v[0] + l[0][1]*v[1], l[1][0]*v[0] + l[1][1]*v[1]}
}

// Aggregate is RFA Fig. 1's estimate at one target measurement i: every other
// measurement transported to t_i, ẑ_ij = e^{AΔt_ij} z_j (Δt_ij = t_i − t_j,
// causal for j < i, backward for j > i), their precisions
// P_ij = V^C(Δt_ij)^{-1}, the precision-weighted mean
// (Σ_j P_ij)^{-1} Σ_j P_ij ẑ_ij and the posterior covariance (Σ_j P_ij)^{-1}.
type Aggregate struct {
	Target         int       // measurement index i
	TargetT        float64   // t_i
	Hat1, Hat2     []float64 // ẑ_ij, j ≠ i, in measurement order
	Forward        []bool    // j < i (causal) for each ẑ_ij
	Mean           [2]float64
	Cov            [2][2]float64
	TrueX1, TrueX2 float64 // x(t_i) on the path
}

// AggregateAt computes the Fig. 1 estimate for measurement index i of smp.
func (s LTI2) AggregateAt(smp *Sample, i int) (*Aggregate, error) {
	if i < 0 || i >= len(smp.MeasT) {
		return nil, fmt.Errorf("analytic: target %d out of range", i)
	}
	ag := &Aggregate{Target: i, TargetT: smp.MeasT[i],
		TrueX1: smp.X1[smp.MeasStep[i]], TrueX2: smp.X2[smp.MeasStep[i]]}
	sumP := mat.NewDense(2, 2, nil)
	sumPz := mat.NewVecDense(2, nil)
	for j := range smp.MeasT {
		if j == i {
			continue
		}
		dt := smp.MeasT[i] - smp.MeasT[j]
		phi := s.Transition(dt)
		zj := mat.NewVecDense(2, []float64{smp.Z1[j], smp.Z2[j]})
		var hat mat.VecDense
		hat.MulVec(phi, zj)
		var p mat.Dense
		if err := p.Inverse(s.MeasurementCov(dt)); err != nil {
			return nil, fmt.Errorf("analytic: V^C(%g) not invertible: %w", dt, err)
		}
		var pz mat.VecDense
		pz.MulVec(&p, &hat)
		sumP.Add(sumP, &p)
		sumPz.AddVec(sumPz, &pz)
		ag.Hat1 = append(ag.Hat1, hat.AtVec(0))
		ag.Hat2 = append(ag.Hat2, hat.AtVec(1))
		ag.Forward = append(ag.Forward, j < i)
	}
	var cov mat.Dense
	if err := cov.Inverse(sumP); err != nil {
		return nil, err
	}
	symmetrize(&cov)
	var mean mat.VecDense
	mean.MulVec(&cov, sumPz)
	ag.Mean = [2]float64{mean.AtVec(0), mean.AtVec(1)}
	ag.Cov = [2][2]float64{{cov.At(0, 0), cov.At(0, 1)}, {cov.At(1, 0), cov.At(1, 1)}}
	return ag, nil
}

// NearestIndex returns the index of the value in ts closest to t.
func NearestIndex(ts []float64, t float64) int {
	best, bi := math.Inf(1), 0
	for i, v := range ts {
		if d := math.Abs(v - t); d < best {
			best, bi = d, i
		}
	}
	return bi
}

// Ellipse returns n+1 points (closed) of the k-σ ellipse of the 2×2
// covariance cov centred at c: c + k·L·(cos θ, sin θ), L the Cholesky factor.
func Ellipse(c [2]float64, cov [2][2]float64, k float64, n int) (xs, ys []float64, err error) {
	l, err := chol2(mat.NewDense(2, 2, []float64{cov[0][0], cov[0][1], cov[1][0], cov[1][1]}))
	if err != nil {
		return nil, nil, err
	}
	for i := 0; i <= n; i++ {
		th := 2 * math.Pi * float64(i) / float64(n)
		p := mulL(l, [2]float64{math.Cos(th), math.Sin(th)})
		xs = append(xs, c[0]+k*p[0])
		ys = append(ys, c[1]+k*p[1])
	}
	return xs, ys, nil
}
