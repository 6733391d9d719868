package analysis

import (
	"cmp"
	"fmt"
	"math"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/probes"
)

// formatVersion names the layout of pass files and tables; it is part of
// every pass key, so files of another layout are never taken as finished.
const formatVersion = "probe-sweep/1"

// ResolveProbeOptions fills in p's defaults for head dimension dHead and checks the
// values. dHead 0 (SigmaDHead of a model whose layers' heads differ in
// width) leaves Sigma02 0: 1/d_head of each layer.
func ResolveProbeOptions(p results.ProbeOptions, dHead int) (results.ProbeOptions, error) {
	p.Form = cmp.Or(p.Form, "reml")
	p.Moments = cmp.Or(p.Moments, "two-pass")
	p.Kernel = cmp.Or(p.Kernel, probes.MatrixKernel.String())
	p.Reductions = cmp.Or(p.Reductions, probes.MeanReduction.String())
	p.SinkRows = cmp.Or(p.SinkRows, probes.RenormRows.String())
	p.Nu = cmp.Or(p.Nu, 1)
	if p.Sigma02 == 0 && dHead > 0 {
		p.Sigma02 = 1 / float64(dHead)
	}
	p.LambdaPrior = cmp.Or(p.LambdaPrior, 1)
	_, err := collectorOptions(p)
	return p, err
}

// collectorOptions converts resolved options.
func collectorOptions(p results.ProbeOptions) (probes.CollectorOptions, error) {
	var o probes.CollectorOptions
	switch p.Form {
	case "reml":
		o.Lambda.Form = probes.REMLPrior
	case "naive":
		o.Lambda.Form = probes.REMLNaive
	case "sandwich":
		o.Lambda.Form = probes.Sandwich
	default:
		return o, fmt.Errorf("lambda form %q: want reml (Eq. 6), naive (Eq. 5) or sandwich (Eq. 13)", p.Form)
	}
	switch p.Moments {
	case "two-pass":
		o.Moments = probes.TwoPass
	case "expanded":
		o.Moments = probes.Expanded
	default:
		return o, fmt.Errorf("moments %q: want two-pass or expanded", p.Moments)
	}
	k, ok := probes.ParseKernel(p.Kernel)
	if !ok {
		return o, fmt.Errorf("kernel %q: want %s or %s", p.Kernel, probes.MatrixKernel, probes.RowKernel)
	}
	o.Kernel = k
	if o.Reductions, ok = probes.ParseReductions(p.Reductions); !ok {
		return o, fmt.Errorf("reductions %q: want %s or %s", p.Reductions, probes.MeanReduction, probes.AllReductions)
	}
	if p.SinkRows != "" { // "" (a manifest from before the option): the default
		if o.SinkRows, ok = probes.ParseSinkRows(p.SinkRows); !ok {
			return o, fmt.Errorf("sink rows %q: want %s or %s", p.SinkRows, probes.RenormRows, probes.RawRows)
		}
	}
	for _, v := range []struct {
		name string
		x    float64
	}{{"nu", p.Nu}, {"sigma02", p.Sigma02}, {"lambda prior", p.LambdaPrior}, {"lambda max", p.LambdaMax}} {
		if v.x < 0 || math.IsNaN(v.x) || math.IsInf(v.x, 0) {
			return o, fmt.Errorf("%s = %v: want a finite value ≥ 0", v.name, v.x)
		}
	}
	o.Lambda.Nu, o.Lambda.Sigma02, o.Lambda.LambdaMax = p.Nu, p.Sigma02, p.LambdaMax
	o.LambdaPrior = p.LambdaPrior
	if err := o.Lambda.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// lambdaFromAggregates applies p's λobs form to aggregate n_eff and
// S̄ (Fig. 3's "λobs predicted by Eq. 6 from the measured n_eff(T) and
// S(T)"). The sandwich form needs Σα²(v−e)², which is not aggregated: it
// gives NaN. Options that leave σ₀² to each layer (Sigma02 0) take it as
// 1/dHead, the width of the aggregated layers' heads, and give NaN for
// dHead 0 (layers of several widths).
func lambdaFromAggregates(p results.ProbeOptions, neff, s float64, dHead int) float64 {
	switch p.Form {
	case "reml":
		s02 := p.Sigma02
		if s02 == 0 {
			if dHead <= 0 {
				return math.NaN()
			}
			s02 = 1 / float64(dHead)
		}
		return probes.LambdaREML(neff, s, p.Nu, s02)
	case "naive":
		return probes.LambdaNaive(neff, s)
	}
	return math.NaN()
}

// Non-finite policies (SweepOptions.OnNonFinite).
const (
	// NonFiniteStop stops the sweep at the first attention row with NaN/Inf
	// weights or values and reports its T, sample, layer, head and query
	// (default: never silently wrong numbers). Finished passes are kept.
	NonFiniteStop = "stop"
	// NonFiniteFlag records the pass with its non-finite rows counted
	// (BucketRow.NonFinite) and left out of every statistic, flags it in
	// the manifest and goes on.
	NonFiniteFlag = "flag"
)

// DefaultSweepOptions returns the defaults (lengths and samples excepted).
func DefaultSweepOptions() results.SweepOptions {
	return results.SweepOptions{KUnit: 1000, Samples: 5, Disjoint: DisjointAll, Placement: PlaceSequential, BOSToken: -1,
		BOSCountsInT: true, Bucket: 64, LastFrac: 0.25, BOSFrac: 0.5, OnNonFinite: NonFiniteStop}
}

// SweepChunkOptions returns the chunk layout of the sweep o.
func SweepChunkOptions(o *results.SweepOptions) ChunkOptions {
	return ChunkOptions{Lengths: o.Lengths, Samples: o.Samples, Disjoint: o.Disjoint, Placement: o.Placement,
		Seed: o.Seed, Offset: o.Offset, BOS: o.BOSToken >= 0}
}

// ValidateSweepOptions checks o against a model configuration (layers are
// not needed; max positions and vocabulary are).
func ValidateSweepOptions(o *results.SweepOptions, maxPos, vocab int) error {
	o.BOSCountsInT = true
	if len(o.Lengths) == 0 {
		l, err := ParseLengths(o.LengthsArg, o.KUnit)
		if err != nil {
			return err
		}
		o.Lengths = l
	}
	co := SweepChunkOptions(o)
	if err := co.resolve(); err != nil {
		return err
	}
	o.Disjoint, o.Placement = co.Disjoint, co.Placement
	switch {
	case o.Bucket < 1:
		return fmt.Errorf("bucket = %d: want at least 1 query", o.Bucket)
	case !(o.LastFrac > 0 && o.LastFrac <= 1):
		return fmt.Errorf("last-frac = %v: want a fraction in (0, 1]", o.LastFrac)
	case !(o.BOSFrac > 0 && o.BOSFrac <= 1):
		return fmt.Errorf("bos-frac = %v: want a fraction in (0, 1]", o.BOSFrac)
	case o.OnNonFinite != NonFiniteStop && o.OnNonFinite != NonFiniteFlag:
		return fmt.Errorf("on-nonfinite %q: want stop or flag", o.OnNonFinite)
	case o.BOSToken < -1 || (vocab > 0 && o.BOSToken >= vocab):
		return fmt.Errorf("bos-token %d: outside the vocabulary [0, %d) (−1 for none)", o.BOSToken, vocab)
	}
	if T := o.Lengths[len(o.Lengths)-1]; maxPos > 0 && T > maxPos && !o.AllowExtrapolation {
		return fmt.Errorf("length %d exceeds the model's max_position_embeddings %d (pass --allow-extrapolation to run it anyway)", T, maxPos)
	}
	for _, T := range o.Lengths {
		if windowStart(T, o.LastFrac) >= T || windowStart(T, o.BOSFrac) >= T {
			return fmt.Errorf("length %d: the last %v / %v of its queries is empty", T, o.LastFrac, o.BOSFrac)
		}
	}
	return nil
}

// DefaultAggOptions returns the defaults.
func DefaultAggOptions() results.AggOptions {
	return results.AggOptions{LastLayers: 7, DDOF: 0, Fig4Pool: results.PoolPasses, Bootstrap: 10000, Seed: 1, CILevel: 0.95,
		LambdaRatio: results.RatioOfMeans, LocalLayers: results.LocalSeparate}
}
