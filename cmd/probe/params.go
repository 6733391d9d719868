package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// paramsRow is one (layer, head) of `probe params`. Fields that a head
// does not have are null in JSON: σ²/(2μ), α and β for μ = 0 heads, the
// ALiBi slopes for μ ≠ 0 heads, sigma_tilde2 and the gate parameters when
// the checkpoint lacks them.
type paramsRow struct {
	Layer int     `json:"layer"` // 0-based
	Head  int     `json:"head"`  // 0-based, slowest (lowest-frequency) head first in SC-RFA
	Mu    float64 `json:"mu"`    // decay μ the pass uses (the authors' mu_v metadata)
	// Omega band: the smallest and largest of the head's distinct |ω|.
	OmegaMin float64 `json:"omega_min"`
	OmegaMax float64 `json:"omega_max"`
	Sigma2   float64 `json:"sigma2"` // σ² = softplus(sigma_v) (sigma_sq_v)
	// SigmaTilde2 is the authors' sigma_tilde_sq_v = softplus(sigma_tilde_v),
	// a separate parameter their default kernel does not use; the
	// steady-state variance of the pass is SteadyState = σ²/(2μ).
	SigmaTilde2 *float64 `json:"sigma_tilde2"`
	SteadyState *float64 `json:"sigma2_over_2mu"`
	Eta2        float64  `json:"eta2"`      // η² (eta_sq_v)
	Gamma2      float64  `json:"gamma2"`    // γ² (gamma_sq_v)
	Tau         float64  `json:"tau"`       // softmax inverse temperature τ_s (tau)
	NuOverD     float64  `json:"nu_over_d"` // ν/d (nu_over_d)
	Nu          float64  `json:"nu"`
	Kappa       float64  `json:"kappa"`   // κ = (ν+d)/d
	TShift      float64  `json:"t_shift"` // learned prediction shift Δt₊ (0 if not learned)
	Alpha       *float64 `json:"alpha"`   // α = η² − σ²/(2μ)
	Beta        *float64 `json:"beta"`    // β = γ² + σ²/(2μ)
	Regime      string   `json:"regime"`  // integrative, diffusive, boundary or brownian (μ = 0)
	// ALiBi-equivalent slopes of μ = 0 heads (probes.RFAALiBiSlope): the
	// paper's σ²/V₀ − (2κ/ν)σ²/V₀² with V₀ = η²+γ², and the slope of the
	// actual logit (τ_s times the same with V₀ = V(0) of the pass).
	ALiBiSlope      *float64 `json:"alibi_slope"`
	ALiBiSlopeLogit *float64 `json:"alibi_slope_logit"`
	Gate            bool     `json:"gate"`        // the confidence gate is applied
	PScale          *float64 `json:"p_scale"`     // exp(P_scale_log)
	LogPPrior       *float64 `json:"log_p_prior"` // P_prior_log
}

func num(x float64) *float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return nil
	}
	return &x
}

// rfaParams reads a checkpoint's per-head RFA parameters (model.RFAParams,
// which refuses a model of another family).
func rfaParams(dir string, lo model.LoadOptions) ([]paramsRow, *model.Model, error) {
	m, err := model.Load(dir, lo)
	if err != nil {
		return nil, nil, err
	}
	ps, err := m.RFAParams()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: params reads the learned filter parameters of RFA checkpoints", err)
	}
	rows := make([]paramsRow, len(ps))
	for i := range ps {
		p := &ps[i]
		reg := probes.RFARegime(p)
		paper, logit := probes.RFAALiBiSlope(p)
		r := paramsRow{Layer: p.Layer, Head: p.Head, Mu: p.Mu, Sigma2: p.Sigma2, SigmaTilde2: num(p.SigmaTilde2),
			SteadyState: num(reg.SteadyState), Eta2: p.Eta2, Gamma2: p.Gamma2, Tau: p.Tau, NuOverD: p.NuOverD(),
			Nu: p.Nu, Kappa: p.Kappa(), TShift: p.TShift, Alpha: num(reg.Alpha), Beta: num(reg.Beta), Regime: reg.Regime,
			ALiBiSlope: num(paper), ALiBiSlopeLogit: num(logit), Gate: p.Gate,
			PScale: num(math.Exp(p.PScaleLog)), LogPPrior: num(p.PPriorLog)}
		abs := make([]float64, len(p.Omega))
		for k, w := range p.Omega {
			abs[k] = math.Abs(w)
		}
		if len(abs) > 0 {
			r.OmegaMin, r.OmegaMax = slices.Min(abs), slices.Max(abs)
		}
		rows[i] = r
	}
	return rows, m, nil
}

func cmdParams(args []string, w io.Writer) error {
	fs := newFlags("params")
	asJSON := fs.Bool("json", false, "print a JSON list of objects, one per (layer, head)")
	mf := addModelFlag(fs, "RFA checkpoint (or give it as the argument)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := mf.positional(pos); err != nil {
		return err
	}
	dir, err := mf.dir()
	if err != nil {
		return err
	}
	rows, m, err := rfaParams(dir, mf.loadOptions())
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	f := func(p *float64, format string) string {
		if p == nil {
			return "—"
		}
		return fmt.Sprintf(format, *p)
	}
	fmt.Fprintf(w, "RFA filter parameters of %s (%d layers × %d heads, d = %d complex dims per head", dir, m.Config.Layers, m.Heads, m.DHead)
	if m.RFA.Ablation != "" {
		fmt.Fprintf(w, ", %s", m.RFA.Ablation)
	}
	fmt.Fprintf(w, ")\n")
	fmt.Fprintf(w, "σ̃² = σ²/2μ is the steady-state variance the pass uses; α = η² − σ̃², β = γ² + σ̃²; sigma_tilde2 is the authors' separate, unused sigma_tilde_sq_v.\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "layer\thead\tμ\tω min\tω max\tσ²\tσ²/2μ\tsigma_tilde2\tη²\tγ²\tτ_s\tν/d\tΔt₊\tα\tβ\tregime\tALiBi slope\tgate p_scale\tlog p_prior\t")
	for _, r := range rows {
		gs, gp := "—", "—"
		if r.Gate {
			gs, gp = f(r.PScale, "%.4g"), f(r.LogPPrior, "%.4g")
		}
		fmt.Fprintf(tw, "%d\t%d\t%.4g\t%.4g\t%.4g\t%.4g\t%s\t%s\t%.4g\t%.4g\t%.4g\t%.4g\t%.4g\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.Layer, r.Head, r.Mu, r.OmegaMin, r.OmegaMax, r.Sigma2, f(r.SteadyState, "%.4g"), f(r.SigmaTilde2, "%.4g"),
			r.Eta2, r.Gamma2, r.Tau, r.NuOverD, r.TShift, f(r.Alpha, "%.4g"), f(r.Beta, "%.4g"), r.Regime,
			f(r.ALiBiSlope, "%.4g"), gs, gp)
	}
	return tw.Flush()
}
