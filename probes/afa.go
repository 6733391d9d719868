package probes

// Diagnostics of isotropic Adaptive Filter Attention (P. Racioppo,
// "Attention as an Adaptive Filter", paper 001; the pass is model/afa.go,
// head parameters model.AFAHeadParams), in the project's vocabulary (notes
// 001 §B; lag n tokens, τ = nΔt):
//
//	σ_V²(n) = σ²κ(n) + η²e^{−2anΔt}        propagated measurement covariance (§3.6)   AFAHeadParams.Covariance
//	P(n) = 1/σ_V²(n)                       prior precision of a measurement n tokens old (§3.1)
//	λobs = P(0) = 1/η²                     observation precision of the current token (§B.2)
//	σ²/(2a)                                stationary variance; ρ = σ²/(2aη²) the noise ratio:
//	                                       ρ < 1 makes P(n) rise with lag (old tokens more precise, §F.16)
//	ln 2/(aΔt), 2π/(|ω|Δt)                 half-life and rotation period in tokens (§B.2)
//	n_eff^prior(i) = (Σ_n p_n)²/Σ_n p_n²,  p_n = P(n)^{τ_s}   content-free n_eff of query i (§B.3)
//	g_i = (1 − s̄) + s̄·A_ii                 effective gain on the current observation (§B.2; s̄ = mean sigmoid(δ))
//	m_i = Σ_j A_ij e^{−a(i−j)Δt}            mass of the decayed weights Â (≤ 1; §F.15)
//	log Π_i = log Σ_j e^{τ_s L_ij}          total precision (App. B.3), the hook afa.hook_log_precision
//
// n_eff and BOS mass are the Collector's, on the streamed A rows; notes
// §F.15: they are on A, not on Â.

import (
	"fmt"
	"math"
	"sync"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// AFAPriorPrecision returns P(n) = 1/σ_V²(n), the precision the model
// assigns to a measurement pulled forward by n tokens before its content
// is seen.
func AFAPriorPrecision(p *model.AFAHeadParams, n float64) float64 { return 1 / p.Covariance(n) }

// AFAObservationPrecision returns λobs = P(0) = 1/η² (notes 001 §B.2).
func AFAObservationPrecision(p *model.AFAHeadParams) float64 { return 1 / p.Eta2 }

// AFANoiseRatio returns ρ = σ²/(2aη²): the prior precision falls with lag
// when ρ > 1 and rises (a model-induced first-token preference) when
// ρ < 1 (notes §B.2, §F.16). +Inf for a = 0.
func AFANoiseRatio(p *model.AFAHeadParams) float64 {
	if p.A == 0 {
		return math.Inf(1)
	}
	return p.Sigma2 / (2 * p.A * p.Eta2)
}

// AFAHalfLife returns ln 2/(aΔt), the lag in tokens over which the decay
// e^{−anΔt} halves (+Inf for a = 0).
func AFAHalfLife(p *model.AFAHeadParams) float64 { return math.Ln2 / (p.A * p.Dt) }

// AFAPriorNEff returns the content-free effective number of tokens of
// query i, (Σ_n p_n)²/Σ_n p_n² over n = 0..i with p_n = P(n)^{τ_s} (notes
// §B.3): the n_eff A would have if every residual were zero.
func AFAPriorNEff(p *model.AFAHeadParams, i int) float64 {
	logs := make([]float64, i+1)
	mx := math.Inf(-1)
	for n := range logs {
		logs[n] = -p.TauS * math.Log(p.Covariance(float64(n)))
		mx = max(mx, logs[n])
	}
	var s1, s2 float64
	for _, l := range logs {
		w := math.Exp(l - mx)
		s1 += w
		s2 += w * w
	}
	return s1 * s1 / s2
}

// AFAGain returns g = (1 − s̄) + s̄·aii, the weight of the current
// observation in the mixed estimate (1 − s)Z_v + sZ̄_v (step 16) when A_ii
// = aii: the batch analogue of a Kalman gain (notes §B.2), with s̄ the
// head's mean residual weight.
func AFAGain(p *model.AFAHeadParams, aii float64) float64 {
	s := 0.0
	for _, x := range p.S {
		s += x
	}
	s /= float64(len(p.S))
	return (1 - s) + s*aii
}

// AFACollector is a Collector for AFA models that also keeps, per (batch,
// layer, head, query) in the Collector's layout: SelfWeight A_ii,
// DecayedMass m_i = Σ_j A_ij E(i−j) and Gain g_i (AFAGain), and stores the
// gain as the Collector's MetricGate (AFA's "Kalman gain"). The embedded
// Collector computes n_eff, BOS mass and the BFT moments on the streamed A
// rows with the rotated values.
type AFACollector struct {
	*Collector
	SelfWeight, DecayedMass, Gain []float64
	params                        []model.AFAHeadParams // layer major
	mu                            sync.Mutex
	decay                         map[int][]float64 // per (layer, head): E(n), n < T
}

// NewAFACollector returns an AFACollector for batch size b, sequences of
// at most seqLen queries and the model's parameters (model.AFAParams);
// nLayers, nHeads and dHead come from cfg.
func NewAFACollector(b, seqLen int, cfg *model.Config, params []model.AFAHeadParams, opts CollectorOptions) (*AFACollector, error) {
	if len(params) != cfg.Layers*cfg.Heads {
		return nil, fmt.Errorf("probes: %d AFA head parameters for %d layers × %d heads", len(params), cfg.Layers, cfg.Heads)
	}
	c, err := NewCollector(b, cfg.Layers, cfg.Heads, seqLen, cfg.DHead, opts)
	if err != nil {
		return nil, err
	}
	n := b * cfg.Layers * cfg.Heads * seqLen
	return &AFACollector{Collector: c, SelfWeight: nanSlice[float64](n), DecayedMass: nanSlice[float64](n), Gain: nanSlice[float64](n),
		params: params, decay: map[int][]float64{}}, nil
}

func (c *AFACollector) decayTable(l, h int) ([]float64, *model.AFAHeadParams) {
	key := l*c.H + h
	p := &c.params[key]
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.decay[key]; ok {
		return e, p
	}
	e := make([]float64, c.T)
	for n := range e {
		e[n] = p.Decay(float64(n))
	}
	c.decay[key] = e
	return e, p
}

// ConsumeAttn implements hooks.AttnConsumer: the Collector's metrics, then
// A_ii, m_i and g_i of each row.
func (c *AFACollector) ConsumeAttn(a *hooks.AttnTile) error {
	if err := c.Collector.ConsumeAttn(a); err != nil {
		return err
	}
	E, p := c.decayTable(a.Layer, a.Head)
	for r := 0; r < a.Rows; r++ {
		t := a.Q0 + r
		row := a.Row(r)
		var m float64
		for j, w := range row {
			m += float64(w) * E[t-j]
		}
		i := c.Index(a.Batch, a.Layer, a.Head, t)
		c.SelfWeight[i], c.DecayedMass[i] = float64(row[t]), m
		c.Gain[i] = AFAGain(p, float64(row[t]))
		c.Collector.Gate[i] = float32(c.Gain[i])
	}
	return nil
}
