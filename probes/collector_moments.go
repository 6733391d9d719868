package probes

import (
	"math"

	"github.com/filterlens/probe/hooks"
)

// Kernel selects where a Collector gets each row's moments (Σα, Σα², the
// entropy, e and S) from.
type Kernel int

const (
	// MatrixKernel (the default) takes them from the attention pass itself
	// where the model offers them (hooks.MomentsConsumer: the Llama-family
	// attention of Llama, Mistral, Qwen2, Qwen3, Qiu's gated attention and
	// GPT-2), computed there with float32 matrix products over whole tiles,
	// with rows recomputed by float64 two-pass sums where the product form
	// could lose digits (hooks.AttnMoments states the accuracy: e within
	// ~1e-6 of Σα|v|, S within ~1e-5 relative of the two-pass sums; the
	// diagnostics agree with RowKernel's within 1e-5). Other models, the
	// Sandwich form, the Expanded method and tiles with NaN/Inf fall back to
	// RowKernel.
	MatrixKernel Kernel = iota
	// RowKernel walks every row's weights and value vectors twice in
	// ConsumeAttn (Moments, two-pass, float64): several times slower at
	// long context, the reference the matrix kernel is tested against.
	RowKernel
)

// String returns the kernel's name as flags and manifests spell it.
func (k Kernel) String() string {
	switch k {
	case MatrixKernel:
		return "matrix"
	case RowKernel:
		return "rows"
	}
	return "Kernel(?)"
}

// ParseKernel parses "matrix" or "rows".
func ParseKernel(s string) (Kernel, bool) {
	for _, k := range []Kernel{MatrixKernel, RowKernel} {
		if k.String() == s {
			return k, true
		}
	}
	return 0, false
}

// ConsumeMoments implements hooks.MomentsConsumer: it stores the
// diagnostics of every row of the tile formed from the moments the
// attention pass computed (MatrixKernel), with the same functions and order
// of operations as ConsumeAttn, so the two agree to the moments' rounding
// (TestBenchMomentsMatchCollector in cmd/probe: worst 1.7e-6, the
// per-dimension S; λobs ≤ 3.9e-7 and K ≤ 7.1e-8, with both sides stored as
// float32). It hands the tile to ConsumeAttn when the
// options need more than the moments (RowKernel, Sandwich, Expanded) and
// when the tile does not fit (ConsumeAttn reports the shape error).
func (c *Collector) ConsumeMoments(am *hooks.AttnMoments) error {
	a := am.Tile
	o := c.opts
	if o.Kernel != MatrixKernel || o.Lambda.Form == Sandwich || o.Moments != TwoPass {
		return c.ConsumeAttn(a)
	}
	if c.checkTile(a) != nil {
		return c.ConsumeAttn(a)
	}
	if !c.HasLayer(a.Layer) {
		return nil
	}
	sc := c.pool.Get().(*scratch)
	defer c.pool.Put(sc)
	d := a.DHead
	lo := c.layerLambda(a.Layer)
	harmonic := *lo
	harmonic.Reduction = Harmonic
	lams := sc.lam[:d]
	base := c.Index(a.Batch, a.Layer, a.Head, 0)
	renorm := a.Sink != nil && o.SinkRows == RenormRows
	for r := 0; r < a.Rows; r++ {
		idx := base + a.Q0 + r
		if c.SinkMass != nil {
			c.SinkMass[idx] = a.SinkMass(r)
		}
		s1, ent := am.SumAlpha[r], am.Entropy[r]
		st := RowStats{NEff: 1 / am.SumSq[r], SumAlpha: s1}
		e := am.E[r*d : (r+1)*d]
		bos := ColumnMass(a.Row(r), o.BOSKeys)
		var e2, sumS float64
		if am.S == nil { // Σ_i S_i only (MeanReduction)
			sumS = am.SSum[r]
		} else {
			st.S = am.S[r*d : (r+1)*d]
		}
		if renorm {
			// α' = α/s1 (SinkRows): Σα'² = Σα²/s1², H' = H/s1 + ln s1,
			// e' = e/s1, S'_i = S_i/s1 − (e'_i·(1 − s1))² (S_i is centred
			// at e, S'_i at e'); where the subtraction would lose more
			// than a bit of S'_i the row is read again, renormalised.
			st.NEff, st.SumAlpha = s1*s1/am.SumSq[r], 1
			ent = ent/s1 + math.Log(s1)
			bos /= s1
			var lost bool
			var cross float64
			for i, ei := range e {
				sc.e[i] = ei / s1
				ci := sc.e[i] * (1 - s1)
				if st.S != nil {
					si := st.S[i] / s1
					sc.s[i] = si - ci*ci
					lost = lost || ci*ci > si/2
				}
				cross += ci * ci
			}
			if st.S != nil {
				st.S = sc.s[:d]
			} else {
				sumS = sumS/s1 - cross
				lost = cross > sumS
			}
			if lost {
				sc.alpha = renormRow(sc.alpha, a.Row(r))
				c.row(sc, a.Layer, idx, sc.alpha, a.V, a.VStride)
				continue
			}
			e = sc.e[:d]
		}
		for _, ei := range e {
			e2 += ei * ei
		}
		if st.S != nil {
			for _, si := range st.S {
				sumS += si
			}
		}
		// (i) from the mean statistic
		lam := lo.lambda1(&st, sumS/float64(d))
		c.NEff[idx] = float32(st.NEff)
		c.NEffEntropy[idx] = float32(math.Exp(ent))
		c.SumAlpha[idx] = float32(st.SumAlpha)
		c.SMean[idx] = float32(sumS / float64(d))
		c.LambdaObs[idx] = float32(lam)
		c.K[idx] = float32(KalmanGain(lam, c.lambdaK))
		c.BOSMass[idx] = float32(bos)
		c.ENorm[idx] = float32(math.Sqrt(e2))
		if st.S == nil || o.Reductions != AllReductions {
			continue
		}
		// (ii) per dimension, then mean; (iii) harmonic
		lo.LambdaDim(lams, st)
		var sumLam float64
		for _, li := range lams {
			sumLam += li
		}
		c.LambdaObsDimMean[idx] = float32(sumLam / float64(d))
		c.KDimMean[idx] = float32(KDimMean(lams, c.lambdaK))
		c.LambdaObsHarmonic[idx] = float32(harmonic.Lambda(st))
		if o.KeepPerDim {
			store32(c.S[idx*c.DHead:idx*c.DHead+d], st.S)
			store32(c.LambdaObsDim[idx*c.DHead:idx*c.DHead+d], lams)
		}
	}
	return nil
}

// MomentsSumOnly reports whether the Collector stores reduction (i) only
// (MeanReduction), so that the attention may hand it Σ_i S_i instead of S
// (hooks.SumOnlyConsumer).
func (c *Collector) MomentsSumOnly() bool { return c.opts.Reductions == MeanReduction }

var _ hooks.SumOnlyConsumer = (*Collector)(nil)
