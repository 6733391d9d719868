package analytic

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Vec3 is a vector in R³.
type Vec3 [3]float64

// Dot returns a·b.
func (a Vec3) Dot(b Vec3) float64 { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }

// Norm returns ‖a‖.
func (a Vec3) Norm() float64 { return math.Sqrt(a.Dot(a)) }

// Scale returns s·a.
func (a Vec3) Scale(s float64) Vec3 { return Vec3{s * a[0], s * a[1], s * a[2]} }

// Add returns a + b.
func (a Vec3) Add(b Vec3) Vec3 { return Vec3{a[0] + b[0], a[1] + b[1], a[2] + b[2]} }

// Cross returns a × b.
func (a Vec3) Cross(b Vec3) Vec3 {
	return Vec3{a[1]*b[2] - a[2]*b[1], a[2]*b[0] - a[0]*b[2], a[0]*b[1] - a[1]*b[0]}
}

// Unit returns a/‖a‖.
func (a Vec3) Unit() Vec3 { return a.Scale(1 / a.Norm()) }

// Tangent returns P_T(u)ξ = ξ − u(u·ξ), the projection of ξ on the tangent
// plane at the unit vector u (RT paper §3.2).
func Tangent(u, xi Vec3) Vec3 { return xi.Add(u.Scale(-u.Dot(xi))) }

// Rotate rotates v by angle theta about the unit axis n (Rodrigues):
// v cos θ + (n × v) sin θ + n (n·v)(1 − cos θ). It is e^{Ωθ} for the
// skew-symmetric generator Ω = [n]×, the real 3-D counterpart of Λ_Ω.
func Rotate(v, n Vec3, theta float64) Vec3 {
	c, s := math.Cos(theta), math.Sin(theta)
	return v.Scale(c).Add(n.Cross(v).Scale(s)).Add(n.Scale(n.Dot(v) * (1 - c)))
}

// SphereWalk parameterizes one RT-SDE direction path on S² (RT Fig. 1) in
// the form of notes 004 §C.1 option (ii): a geodesic random walk with
// retraction,
//
//	u_{k+1} = Norm( R(ωh, n) u_k + (σ_t/m0) √h P_T(u_k) ξ_k ),  ξ_k ~ N(0, I₃),
//
// i.e. rotational transport e^{Λ_Ω h} plus tangential diffusion at fixed
// magnitude m0, then normalization (the tangent step + retraction of RT
// §3.5/App. C.2). Measurements (the figure's red dots) are taken every
// MeasEvery steps as z = m0 u + η_r ζ_r u + η_t P_T(u) ζ and drawn as
// directions u_z = z/‖z‖ (Eq. 4).
type SphereWalk struct {
	Omega      float64 // rotation rate ω (rad per unit time) about Axis
	Axis       Vec3    // rotation axis n (normalized by Simulate)
	SigmaT     float64 // tangential diffusion σ_t
	M0         float64 // magnitude m0 (the walk's angular noise is σ_t/m0)
	H          float64 // step h
	Steps      int     // number of steps (horizon = Steps·H)
	U0         Vec3    // start direction (normalized by Simulate)
	MeasEvery  int     // steps between measurements (0: none)
	EtaR, EtaT float64 // radial and tangential measurement noise η_r, η_t
	Seed       uint64  // PCG(Seed, 0x52545344) random stream
}

// SpherePath is a simulated SphereWalk.
type SpherePath struct {
	T     []float64
	U     []Vec3 // unit directions on the path
	MeasT []float64
	Z     []Vec3 // raw measurements z
	UZ    []Vec3 // measured directions z/‖z‖
}

// Simulate runs the walk.
func (w SphereWalk) Simulate() (*SpherePath, error) {
	if w.H <= 0 || w.Steps < 1 || w.M0 <= 0 {
		return nil, fmt.Errorf("analytic: bad sphere walk (h %g, steps %d, m0 %g)", w.H, w.Steps, w.M0)
	}
	if w.U0.Norm() == 0 || (w.Omega != 0 && w.Axis.Norm() == 0) {
		return nil, fmt.Errorf("analytic: sphere walk needs a nonzero start direction and rotation axis")
	}
	rng := rand.New(rand.NewPCG(w.Seed, 0x52545344))
	axis := Vec3{0, 0, 1}
	if w.Axis.Norm() > 0 {
		axis = w.Axis.Unit()
	}
	u := w.U0.Unit()
	p := &SpherePath{}
	sq := math.Sqrt(w.H) * w.SigmaT / w.M0
	normal := func() Vec3 { return Vec3{rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()} }
	for k := 0; k <= w.Steps; k++ {
		t := float64(k) * w.H
		p.T = append(p.T, t)
		p.U = append(p.U, u)
		if w.MeasEvery > 0 && k%w.MeasEvery == 0 {
			zr, zt := rng.NormFloat64(), normal()
			z := u.Scale(w.M0 + w.EtaR*zr).Add(Tangent(u, zt).Scale(w.EtaT))
			p.MeasT = append(p.MeasT, t)
			p.Z = append(p.Z, z)
			p.UZ = append(p.UZ, z.Unit())
		}
		if k == w.Steps {
			break
		}
		next := Rotate(u, axis, w.Omega*w.H).Add(Tangent(u, normal()).Scale(sq))
		u = next.Unit()
	}
	return p, nil
}

// Ortho is an orthographic camera looking at the origin from azimuth Az and
// elevation El (radians; matplotlib's 3-D convention: the eye is at
// (cos El cos Az, cos El sin Az, sin El)).
type Ortho struct{ Az, El float64 }

// Project maps p to screen coordinates (x right, y up) and its depth along
// the eye direction (> 0: front hemisphere, facing the viewer).
func (o Ortho) Project(p Vec3) (x, y, depth float64) {
	eye := Vec3{math.Cos(o.El) * math.Cos(o.Az), math.Cos(o.El) * math.Sin(o.Az), math.Sin(o.El)}
	right := Vec3{-math.Sin(o.Az), math.Cos(o.Az), 0}
	up := eye.Cross(right)
	return p.Dot(right), p.Dot(up), p.Dot(eye)
}

// GeodesicSq returns the squared great-circle distance between unit vectors.
func GeodesicSq(a, b Vec3) float64 {
	c := math.Max(-1, math.Min(1, a.Dot(b)))
	th := math.Acos(c)
	return th * th
}
