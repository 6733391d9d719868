package probes

// Diagnostics of Robust Filter Attention (RFA; Racioppo, "Robust Filter
// Attention: Self-Attention as a Parallel State Estimator", "the RFA
// paper"), in the project's filter vocabulary. The model side (the
// forward pass, its per-head parameters, the kernel E and V below
// (RFAHeadParams.Kernel) and the RFATile it streams) is in package model
// (rfa.go). For head parameters p (model.RFAHeadParams) and a
// lag τ ≥ 0 tokens, with s = τ + Δt₊ (the learned prediction shift, App.
// C.6):
//
//	E(τ)      = exp(clamp(−μs, min_exponent, max_exponent))                    decay (§3.2)
//	V(τ)      = σ̃²(1 − E²) + η²E² + γ² + c,  σ̃² = σ²/(2μ)                       Eq. 9 (+ the authors' c = cov_eps = 0.01)
//	          = σ²s + η² + γ² + c                                   for μ → 0 (App. B.4.2)
//	P_Δt(τ)   = 1/V(τ)            "λobs" prior: the precision of an observation τ old, before its content is seen
//	B_Δt(τ)   = −log V(τ)         additive bias of the logit (Alg. 1)
//	α = η² − σ̃²,  β = γ² + σ̃²    regime parameters (App. B.4.1): α > 0 integrative, α < 0 diffusive (RFAHeadParams.Regime)
//	m         = σ²/V₀ − (2κ/ν)σ²/V₀²   ALiBi-equivalent slope of a μ = 0 head (App. B.4.2 / notes A.11; RFAHeadParams.ALiBiSlope)
//
// and per query row t of one head, from the streamed Â and ‖R_tj‖² (Eq. 10):
//
//	n_eff,t   = 1/Σ_j Â_tj²       Kish effective number of attended tokens, on Â (Collector)
//	BOS mass  = Â_t0               mass on the first token of the chunk, on Â (Collector)
//	m_t       = Σ_j Â_tj E(t−j)    mass of the decayed weights A = Â ⊙ E (≤ 1): evidence surviving decay
//	log p̂_tot,t = log Σ_j exp(B_Δt(t−j) − ε_tj)    total precision ("observed Fisher information", App. C.4):
//	              ε_tj = log(1 + ‖R_tj‖²/(νV))       in the authors' code (TotalPrecisionAuthors, the gate's input)
//	              ε_tj = ‖R_tj‖²/V                    in the paper's C.4 text (TotalPrecisionPaper)
//	g_t       = σ(p_scale·log p̂_tot,t − log p_prior)     the confidence gate, RFA's "Kalman gain" (App. C.4);
//	            with p_scale = 1 it is p̂/(p̂ + p_prior), a scalar Kalman gain with prior precision p_prior.
//	            The authors' code adds log((ν_g−2+ε)/(ν_g+ε)) to log p̂ (GateAuthors).

import (
	"fmt"
	"math"
	"sync"

	"github.com/filterlens/probe/model"
)

// RFAPrecisionPrior returns P_Δt(τ) = 1/V_Δt(τ) (Alg. 1) with V of
// RFAHeadParams.Kernel (Eq. 9), the lag-only observation precision of RFA
// — the "λobs" of the filter before an observation's content is seen (the
// authors' A_prior).
func RFAPrecisionPrior(p *model.RFAHeadParams, lag float64) float64 {
	V, _ := p.Kernel(lag)
	return 1 / V
}

// RFAAdditiveBias returns B_Δt(τ) = −log V_Δt(τ) (Alg. 1) with V of
// RFAHeadParams.Kernel (Eq. 9).
func RFAAdditiveBias(p *model.RFAHeadParams, lag float64) float64 {
	V, _ := p.Kernel(lag)
	return -math.Log(V)
}

// TotalPrecisionForm selects the energy in the total precision p̂_tot.
type TotalPrecisionForm int

const (
	// TotalPrecisionAuthors is log Σ_j exp(B − log(1 + ‖R‖²/(νV))): the
	// authors' precision_marginal_log (the Student-t energy with κ = 1 and
	// the 1/ν of Eq. 11), which their gate uses. The default.
	TotalPrecisionAuthors TotalPrecisionForm = iota
	// TotalPrecisionPaper is log Σ_j exp(B − ‖R‖²/V): the Gaussian energy
	// of RFA paper App. C.4.
	TotalPrecisionPaper
)

// String names the form.
func (f TotalPrecisionForm) String() string {
	switch f {
	case TotalPrecisionAuthors:
		return "authors"
	case TotalPrecisionPaper:
		return "paper"
	}
	return fmt.Sprintf("TotalPrecisionForm(%d)", int(f))
}

// RFALogTotalPrecision returns log p̂_tot of query t = len(r2)−1 from its
// squared residuals r2[j] = ‖R_tj‖², j = 0..t (RFA paper App. C.4), in the
// given form, accumulated in float64 with a stable log-sum-exp. An empty
// row gives −Inf.
func RFALogTotalPrecision(p *model.RFAHeadParams, r2 []float32, form TotalPrecisionForm) float64 {
	var tab rfaLagTable
	tab.fill(p, len(r2))
	return tab.logTotalPrecision(p, r2, form, make([]float64, len(r2)))
}

// rfaLagTable tabulates a head's kernel by lag (Toeplitz: lag t − j).
type rfaLagTable struct {
	logV, E []float64
}

// fill makes the table cover lags 0..n−1.
func (tab *rfaLagTable) fill(p *model.RFAHeadParams, n int) {
	tab.logV, tab.E = tab.logV[:0], tab.E[:0]
	for k := 0; k < n; k++ {
		V, E := p.Kernel(float64(k))
		tab.logV = append(tab.logV, math.Log(V))
		tab.E = append(tab.E, E)
	}
}

// logTotalPrecision is RFALogTotalPrecision on a table covering lags
// 0..len(r2)−1; en is scratch of len(r2).
func (tab *rfaLagTable) logTotalPrecision(p *model.RFAHeadParams, r2 []float32, form TotalPrecisionForm, en []float64) float64 {
	t := len(r2) - 1
	m := math.Inf(-1)
	for j, x := range r2 {
		lv := tab.logV[t-j]
		if form == TotalPrecisionPaper {
			en[j] = -lv - float64(x)*math.Exp(-lv)
		} else {
			en[j] = -lv - math.Log1p(float64(x)*math.Exp(-lv)/p.Nu)
		}
		m = max(m, en[j])
	}
	if math.IsInf(m, 0) {
		return m
	}
	var s float64
	for _, e := range en {
		s += math.Exp(e - m)
	}
	return m + math.Log(s)
}

// GateForm selects the confidence-gate formula.
type GateForm int

const (
	// GateAuthors is σ(p_scale·(log p̂ + log(ν_g−2+ε) − log(ν_g+ε)) −
	// log p_prior) with ν_g = d·(softplus(ν′)+2+ε): the authors'
	// _apply_total_precision_gate, what the pass applies. The default.
	GateAuthors GateForm = iota
	// GatePaper is σ(p_scale·log p̂ − log p_prior) (RFA paper App. C.4).
	GatePaper
)

// String names the form.
func (f GateForm) String() string {
	switch f {
	case GateAuthors:
		return "authors"
	case GatePaper:
		return "paper"
	}
	return fmt.Sprintf("GateForm(%d)", int(f))
}

// RFAGate returns the confidence gate g ∈ (0, 1) for total precision
// logPTot (RFA paper App. C.4) with p_scale = exp(PScaleLog) and log p_prior
// = PPriorLog. It is RFA's Kalman gain: with p_scale = 1 (GatePaper) it is
// p̂/(p̂ + p_prior), the gain of a scalar update with prior precision
// p_prior and observation precision p̂. NaN when the head has no gate
// parameters.
func RFAGate(p *model.RFAHeadParams, logPTot float64, form GateForm) float64 {
	x := logPTot
	if form == GateAuthors {
		x += math.Log(p.NuGate-2+p.Epsilon) - math.Log(p.NuGate+p.Epsilon)
	}
	x = math.Exp(p.PScaleLog)*x - p.PPriorLog
	return 1 / (1 + math.Exp(-x))
}

// RFACollectorOptions configures an RFACollector.
type RFACollectorOptions struct {
	// Collector configures the embedded Collector (n_eff, BOS mass and the
	// BFT moments, here on Â and Ṽ).
	Collector CollectorOptions
	// TotalPrecision selects the form of LogPTot (default the authors').
	TotalPrecision TotalPrecisionForm
	// Gate selects the gate formula (default the authors').
	Gate GateForm
	// GateAlways also stores the gate of heads whose model does not apply
	// it (the value the C.4 gate would take with the stored p_scale and
	// p_prior; NaN if the checkpoint has none). Default: only where the
	// pass applies the gate.
	GateAlways bool
}

// RFACollector is an attention consumer (model.RFAConsumer) for RFA
// models. The embedded Collector computes n_eff, BOS mass and the other
// per-row metrics on the streamed Â rows, with the rotated values Ṽ as V
// (DHead = 2·d reals); RFACollector adds, per (batch, layer, head, query)
// in the Collector's [B, L, H, T] layout:
//
//	LogPTot     log p̂_tot,t (RFALogTotalPrecision, from the streamed ‖R‖²)
//	DecayedMass m_t = Σ_j Â_tj E(t−j), the row mass of A = Â ⊙ E
//
// and stores the confidence gate g_t (RFAGate of LogPTot) as the
// Collector's MetricGate: RFA's Kalman gain. Cells never reached hold NaN.
// On a model that is not RFA it receives plain tiles and behaves as its
// Collector.
type RFACollector struct {
	*Collector
	LogPTot, DecayedMass []float64
	ropts                RFACollectorOptions
	rfaPool              sync.Pool // *rfaScratch
}

// NewRFACollector returns an RFACollector for batch size b, nLayers
// layers, nHeads heads, sequences of at most seqLen queries and d complex
// dimensions per head (model.Config.DHead; the Collector sees 2·d reals).
func NewRFACollector(b, nLayers, nHeads, seqLen, d int, opts RFACollectorOptions) (*RFACollector, error) {
	if opts.TotalPrecision != TotalPrecisionAuthors && opts.TotalPrecision != TotalPrecisionPaper {
		return nil, fmt.Errorf("probes: unknown TotalPrecisionForm %d", int(opts.TotalPrecision))
	}
	if opts.Gate != GateAuthors && opts.Gate != GatePaper {
		return nil, fmt.Errorf("probes: unknown GateForm %d", int(opts.Gate))
	}
	c, err := NewCollector(b, nLayers, nHeads, seqLen, 2*d, opts.Collector)
	if err != nil {
		return nil, err
	}
	n := b * nLayers * nHeads * seqLen
	rc := &RFACollector{Collector: c, LogPTot: nanSlice[float64](n), DecayedMass: nanSlice[float64](n), ropts: opts}
	rc.rfaPool.New = func() any { return &rfaScratch{} }
	return rc, nil
}

// ConsumeRFA implements model.RFAConsumer: the Collector's metrics of the
// tile's Â rows, then log p̂_tot, the decayed row mass and the gate of each
// row. Errors are those of Collector.ConsumeAttn, and an ErrTileShape error
// when ‖R‖² is missing or short.
func (c *RFACollector) ConsumeRFA(rt *model.RFATile) error {
	a := rt.Tile
	if err := c.Collector.ConsumeAttn(a); err != nil {
		return err
	}
	if a.Rows == 0 {
		return nil
	}
	if rt.Params == nil || len(rt.R2) < (a.Rows-1)*a.Stride+a.Q0+a.Rows {
		return fmt.Errorf("%w: batch %d layer %d head %d: RFA tile without parameters or with %d squared residuals",
			ErrTileShape, a.Batch, a.Layer, a.Head, len(rt.R2))
	}
	p := rt.Params
	gate := p.Gate || (c.ropts.GateAlways && !math.IsNaN(p.PScaleLog))
	sc := c.rfaPool.Get().(*rfaScratch)
	defer c.rfaPool.Put(sc)
	last := a.Q0 + a.Rows
	sc.tab.fill(p, last)
	if cap(sc.en) < last {
		sc.en = make([]float64, last)
	}
	base := c.Index(a.Batch, a.Layer, a.Head, 0)
	for r := 0; r < a.Rows; r++ {
		t := a.Q0 + r
		lp := sc.tab.logTotalPrecision(p, rt.R2[r*a.Stride:r*a.Stride+t+1], c.ropts.TotalPrecision, sc.en[:t+1])
		var mass float64
		for j, w := range a.Row(r) {
			mass += float64(w) * sc.tab.E[t-j]
		}
		c.LogPTot[base+t], c.DecayedMass[base+t] = lp, mass
		if gate {
			c.Gate[base+t] = float32(RFAGate(p, lp, c.ropts.Gate))
		}
	}
	return nil
}

// rfaScratch is one call's working memory (pooled).
type rfaScratch struct {
	tab rfaLagTable
	en  []float64
}
