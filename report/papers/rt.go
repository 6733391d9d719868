package papers

import (
	"fmt"
	"math"

	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/analytic"
)

// RT returns Fig. 1 of "RT-Transformer: The Transformer Block as a
// Spherical State Estimator".
func RT() (*report.Report, error) {
	f, err := rtFig1()
	if err != nil {
		return nil, err
	}
	return &report.Report{
		Title:    "RT-Transformer — analytic figure",
		Subtitle: "Fig. 1: stochastic RT-SDE trajectories on the sphere (d = 3), simulated with a fixed seed.",
		Manifest: []report.Option{
			{Name: "paper", Value: "papers/004 (RT-Transformer), §3.2, App. B.1–B.2", Source: "shared/papers"},
			{Name: "parameters", Value: "the paper gives none; all values below are this tool's choices (notes 004 §C.1)", Source: "notes 004 §C.1"},
		},
		Figures: []*report.Figure{f},
	}, nil
}

// projector draws 3-D geometry with an orthographic camera as 2-D series,
// splitting every curve into its front (facing the viewer) and back parts.
type projector struct{ cam analytic.Ortho }

// curve projects a polyline; a point belongs to the front part when it or
// a neighbour faces the viewer, so the two parts meet at the horizon.
func (p projector) curve(pts []analytic.Vec3) (x, front, back []float64) {
	n := len(pts)
	depth := make([]float64, n)
	y := make([]float64, n)
	x = make([]float64, n)
	for i, q := range pts {
		x[i], y[i], depth[i] = p.cam.Project(q)
	}
	front, back = make([]float64, n), make([]float64, n)
	for i := range pts {
		isFront := func(j int) bool { return j >= 0 && j < n && depth[j] >= 0 }
		front[i], back[i] = math.NaN(), math.NaN()
		if isFront(i) || isFront(i-1) || isFront(i+1) {
			front[i] = y[i]
		}
		if !isFront(i) || !isFront(i-1) || !isFront(i+1) {
			back[i] = y[i]
		}
	}
	return x, front, back
}

// join concatenates curves with a NaN break between them.
func join(dst *[3][]float64, x, f, b []float64) {
	if len(dst[0]) > 0 {
		dst[0] = append(dst[0], x[len(x)-1])
		dst[1] = append(dst[1], math.NaN())
		dst[2] = append(dst[2], math.NaN())
	}
	dst[0] = append(dst[0], x...)
	dst[1] = append(dst[1], f...)
	dst[2] = append(dst[2], b...)
}

// sphereSeries returns the unit sphere's wireframe (every 30° of latitude
// and longitude), front solid and back dashed, and its outline.
func (p projector) sphereSeries() []report.Series {
	var wire [3][]float64
	for lat := -60.0; lat <= 60; lat += 30 {
		var pts []analytic.Vec3
		for k := 0; k <= 180; k++ {
			lo := 2 * math.Pi * float64(k) / 180
			r := math.Cos(lat * math.Pi / 180)
			pts = append(pts, analytic.Vec3{r * math.Cos(lo), r * math.Sin(lo), math.Sin(lat * math.Pi / 180)})
		}
		x, f, b := p.curve(pts)
		join(&wire, x, f, b)
	}
	for lon := 0.0; lon < 360; lon += 30 {
		var pts []analytic.Vec3
		for k := 0; k <= 90; k++ {
			la := -math.Pi/2 + math.Pi*float64(k)/90
			pts = append(pts, analytic.Vec3{math.Cos(la) * math.Cos(lon*math.Pi/180), math.Cos(la) * math.Sin(lon*math.Pi/180), math.Sin(la)})
		}
		x, f, b := p.curve(pts)
		join(&wire, x, f, b)
	}
	var ox, oy []float64
	for k := 0; k <= 240; k++ {
		t := 2 * math.Pi * float64(k) / 240
		ox, oy = append(ox, math.Cos(t)), append(oy, math.Sin(t))
	}
	light := report.Grey
	return []report.Series{
		{Kind: report.Line, X: wire[0], Y: wire[2], Color: light, Width: 0.6, Dash: true, Alpha: 0.55},
		{Kind: report.Line, X: wire[0], Y: wire[1], Color: light, Width: 0.8},
		{Kind: report.Line, X: ox, Y: oy, Color: report.Black, Width: 1},
	}
}

func (p projector) pathSeries(path *analytic.SpherePath) []report.Series {
	x, f, b := p.curve(path.U)
	var fx, fy, bx, by []float64
	for _, u := range path.UZ {
		px, py, d := p.cam.Project(u)
		if d >= 0 {
			fx, fy = append(fx, px), append(fy, py)
		} else {
			bx, by = append(bx, px), append(by, py)
		}
	}
	out := []report.Series{
		{Name: "path u(t), far side", Kind: report.Line, X: x, Y: b, Color: report.Black, Width: 1.1, Dash: true, Alpha: 0.45},
		{Name: "path u(t)", Kind: report.Line, X: x, Y: f, Color: report.Black, Width: 1.1},
	}
	if len(bx) > 0 {
		out = append(out, report.Series{Name: "measurement u_z, far side", Kind: report.Scatter, X: bx, Y: by, Color: report.Vermillion, Hollow: true, Radius: 2.6})
	}
	if len(fx) > 0 {
		out = append(out, report.Series{Name: "measurement u_z = z/‖z‖", Kind: report.Scatter, X: fx, Y: fy, Color: report.Vermillion, Radius: 2.8})
	}
	return out
}

func rtFig1() (*report.Figure, error) {
	const (
		h      = 1e-3
		steps  = 10000
		every  = 200
		etaR   = 0.05
		etaT   = 0.08
		azDeg  = -60.0
		elDeg  = 25.0
		seedA  = 1
		seedB  = 2
		sigmaA = 0.3
		sigmaB = 0.1
		omegaB = 1.0
	)
	u0 := analytic.Vec3{0.5, -0.8, 0.45} // facing the camera
	a := analytic.SphereWalk{SigmaT: sigmaA, M0: 1, H: h, Steps: steps, U0: u0, MeasEvery: every, EtaR: etaR, EtaT: etaT, Seed: seedA}
	b := analytic.SphereWalk{Omega: omegaB, Axis: analytic.Vec3{0, 0, 1}, SigmaT: sigmaB, M0: 1, H: h, Steps: steps, U0: u0,
		MeasEvery: every, EtaR: etaR, EtaT: etaT, Seed: seedB}
	pa, err := a.Simulate()
	if err != nil {
		return nil, err
	}
	pb, err := b.Simulate()
	if err != nil {
		return nil, err
	}
	pr := projector{cam: analytic.Ortho{Az: azDeg * math.Pi / 180, El: elDeg * math.Pi / 180}}
	panel := func(title string, p *analytic.SpherePath) report.Panel {
		return report.Panel{Title: title, NoAxes: true, Equal: true, Legend: report.LegendOutside,
			X: report.Range{Min: -1.08, Max: 1.08}, Y: report.Range{Min: -1.08, Max: 1.08},
			Series: append(pr.sphereSeries(), pr.pathSeries(p)...)}
	}
	pa1, pb1 := panel("(a) pure tangential noise (ω = 0)", pa), panel("(b) rotational dynamics (ω = 1 about e_z)", pb)
	turns := func(p *analytic.SpherePath) float64 {
		// accumulated azimuth about e_z, in turns
		tot := 0.0
		for i := 1; i < len(p.U); i++ {
			d := math.Atan2(p.U[i][1], p.U[i][0]) - math.Atan2(p.U[i-1][1], p.U[i-1][0])
			d = math.Remainder(d, 2*math.Pi)
			tot += d
		}
		return tot / (2 * math.Pi)
	}
	ang := func(p *analytic.SpherePath) float64 { return math.Sqrt(analytic.GeodesicSq(p.U[0], p.U[len(p.U)-1])) }
	return &report.Figure{
		ID:    "rt-fig1",
		Title: "RT Fig. 1 — stochastic RT-SDE trajectories on the hypersphere (d = 3)",
		Caption: "Directions u = x/‖x‖ of the RT-SDE (Eq. 3) on S², seen from azimuth −60°, elevation 25° (orthographic; the far hemisphere dashed " +
			"and paler). Black: the true path; red dots: noisy directional measurements u_z = z/‖z‖ with z = (m + η_r ζ_r)u + η_t P_T(u)ζ (Eq. 4), " +
			"every 0.2 time units. (a) Pure tangential diffusion, ω = 0: a random walk on the sphere. (b) Rotational dynamics e^{Λ_Ω t} (a rotation " +
			"about e_z at ω = 1) plus smaller tangential diffusion: rotational transport with the radial–tangential noise structure kept.",
		Options: []report.Option{
			{Name: "space", Value: "real R³, Ω = ω[e_z]× (the real counterpart of diag(iω, −iω, 0))", Source: "choice: a complex C³ state lives on S⁵ (notes 004 §C.1, F.20)"},
			{Name: "integrator", Value: "geodesic random walk with retraction: u ← Norm(R(ωh, n)u + (σ_t/m₀)√h P_T(u)ξ), exact Rodrigues rotation", Source: "notes 004 §C.1 option (ii): the paper's tangent step + retraction"},
			{Name: "h, steps", Value: fmt.Sprintf("h = %g, %d steps (T = %g)", h, steps, h*steps), Source: "choice"},
			{Name: "m₀, u₀", Value: "m₀ = 1, u₀ = Norm(0.5, −0.8, 0.45) (near the view direction, so (a) starts facing the reader)", Source: "choice"},
			{Name: "(a)", Value: fmt.Sprintf("ω = 0, σ_t = %g, seed %d", sigmaA, seedA), Source: "choice"},
			{Name: "(b)", Value: fmt.Sprintf("ω = %g about n = e_z, σ_t = %g, seed %d", omegaB, sigmaB, seedB), Source: "choice"},
			{Name: "measurements", Value: fmt.Sprintf("every %d steps; η_r = %g, η_t = %g; drawn as directions", every, etaR, etaT), Source: "choice"},
			{Name: "camera", Value: fmt.Sprintf("orthographic, azimuth %g°, elevation %g°; wireframe every 30°", azDeg, elDeg), Source: "choice"},
			{Name: "random stream", Value: "PCG(seed, 0x52545344): one N(0, I₃) per step, then ζ_r, ζ per measurement", Source: "choice"},
		},
		Tables: []report.Table{{Caption: "Path summaries (ours)", Header: []string{"panel", "measurements", "angle start→end (rad)", "turns about e_z", "ωT/2π"}, Rows: [][]string{
			{"(a)", fmt.Sprint(len(pa.UZ)), fmt.Sprintf("%.2f", ang(pa)), fmt.Sprintf("%.2f", turns(pa)), "0"},
			{"(b)", fmt.Sprint(len(pb.UZ)), fmt.Sprintf("%.2f", ang(pb)), fmt.Sprintf("%.2f", turns(pb)), fmt.Sprintf("%.2f", omegaB*h*steps/(2*math.Pi))},
		}}},
		Notes: []string{
			"The paper reports no parameters or numbers for this figure; it is qualitative, so only its look can be compared.",
			"Checks (unit tests of package analytic): with σ_t = 0 the walk is an exact rotation and closes after 2π/ω; " +
				"with ω = 0 the mean squared geodesic displacement grows as 2σ_t²t/m₀² for small t.",
		},
		Panels:     []report.Panel{pa1, pb1},
		Columns:    1,
		PanelWidth: 7.6, PanelHeight: 5.2,
	}, nil
}
