package main

import (
	"math"
	"sync"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// momentsCollector fills a probes.Collector from the row moments the
// attention pass computes itself (model.MomentsConsumer) instead of having
// the Collector walk every row's weights and value vectors twice. Every
// metric is formed from the moments with the probes functions the
// Collector itself uses (same order of operations), so the results differ
// from Collector.ConsumeAttn's only by the moments' rounding (see
// model.AttnMoments; TestBenchMomentsMatchCollector checks 1e-6 relative).
// Options the moments do not cover (the sandwich form, expanded moments)
// and tiles with non-finite values go to the Collector's ConsumeAttn.
type momentsCollector struct {
	*probes.Collector
	opts    probes.CollectorOptions
	lambdaK float64
	ok      bool // the options are covered by the moments
	pool    sync.Pool
}

func newMomentsCollector(col *probes.Collector) *momentsCollector {
	o := col.Options()
	m := &momentsCollector{Collector: col, opts: o, lambdaK: o.LambdaPrior,
		ok: o.Lambda.Form != probes.Sandwich && o.Moments == probes.TwoPass}
	if m.lambdaK == 0 {
		m.lambdaK = 1
	}
	d := col.DHead
	m.pool.New = func() any { return make([]float64, d) }
	return m
}

// ConsumeMoments stores the diagnostics of every row of the tile.
func (m *momentsCollector) ConsumeMoments(am *model.AttnMoments) error {
	a := am.Tile
	if !m.ok {
		return m.ConsumeAttn(a)
	}
	if a.Batch < 0 || a.Batch >= m.B || a.Layer < 0 || a.Layer >= m.L || a.Head < 0 || a.Head >= m.H ||
		a.DHead != m.DHead || a.Q0+a.Rows > m.T {
		return m.ConsumeAttn(a) // the Collector reports the shape error
	}
	lamDim := m.pool.Get().([]float64)
	defer m.pool.Put(lamDim)
	d := a.DHead
	fromMean, harmonic := m.opts.Lambda, m.opts.Lambda
	fromMean.Reduction, harmonic.Reduction = probes.FromMean, probes.Harmonic
	base := m.Index(a.Batch, a.Layer, a.Head, 0)
	for r := 0; r < a.Rows; r++ {
		idx := base + a.Q0 + r
		e, s := am.E[r*d:(r+1)*d], am.S[r*d:(r+1)*d]
		st := probes.RowStats{NEff: 1 / am.SumSq[r], SumAlpha: am.SumAlpha[r], S: s}
		lam := fromMean.Lambda(st)
		m.opts.Lambda.LambdaDim(lamDim, st)
		var sumS, e2, sumLam float64
		for i, ei := range e {
			e2 += ei * ei
			sumS += s[i]
			sumLam += lamDim[i]
		}
		m.NEff[idx] = st.NEff
		m.NEffEntropy[idx] = math.Exp(am.Entropy[r])
		m.SumAlpha[idx] = st.SumAlpha
		m.SMean[idx] = sumS / float64(d)
		m.LambdaObs[idx] = lam
		m.K[idx] = probes.KalmanGain(lam, m.lambdaK)
		m.LambdaObsDimMean[idx] = sumLam / float64(d)
		m.KDimMean[idx] = probes.KDimMean(lamDim, m.lambdaK)
		m.LambdaObsHarmonic[idx] = harmonic.Lambda(st)
		m.BOSMass[idx] = probes.ColumnMass(a.Row(r), m.opts.BOSKeys)
		m.ENorm[idx] = math.Sqrt(e2)
		if m.opts.KeepPerDim {
			copy(m.S[idx*d:(idx+1)*d], s)
			copy(m.LambdaObsDim[idx*d:(idx+1)*d], lamDim)
		}
	}
	return nil
}

var (
	_ model.MomentsConsumer = (*momentsCollector)(nil)
	_ hooks.AttnConsumer    = (*momentsCollector)(nil)
)
