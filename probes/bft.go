package probes

// Diagnostics of a trained Bayesian Filtering Transformer (Long et al.,
// "Precision Tracked Transformer via Kalman Filtering, Kriging and Process
// Noise", paper 003; the pass is model/bft.go). The zero-training App. I
// diagnostic of any softmax model (n_eff, S, λobs and K at λ = 1) is the
// Collector; on a BFT model the streamed rows are the kriging weights α̃,
// so the Collector's n_eff and λobs (Eq. 6 with its default ν = 1,
// σ0² = 1/d_head) are the layer's own. What a BFT layer adds is the
// tracked precision (notes §F.4 "Trained BFT core"):
//
//	α̃_tj = α_tj λ̄_j / Σ_j' α_tj' λ̄_j'            kriging weights (Eq. 2)
//	λobs ≤ (n_eff + ν)/(ν σ0²)                     the prior's bound on Eq. 6 (S = 0)
//	K = λobs/(λ + λobs) = σ(log(λobs/λ))           Kalman gain (Eq. 3; Sec. 4.2's gate form)
//	λ' = λ + λobs                                  posterior precision (Eq. 3)
//	λ'' = (clip((1+J)²)/λ' + Q)⁻¹                  predicted precision (Eq. 9)
//	λ''/λ                                          the layer's net precision change ("ratchet", §3.2)
//
// BFTRecorder collects the model's own λ, λobs, K, λ', J and λ'' from its
// hook points, reduced over each head's subspace by the mean (notes
// §F.1.1, reduction (ii)), in the Collector's [B, L, H, T] layout, and Q
// per (layer, head).

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
)

// BFTKrigingWeights writes α̃_tj = α_tj λ̄_j / Σ_j' α_tj' λ̄_j' (paper Eq. 2)
// for one attention row alpha (keys 0..t) and the keys' mean precisions
// lambdaBar into dst (len(alpha)). Equivalently softmax(s + log λ̄) for
// α = softmax(s) (Remark 1).
func BFTKrigingWeights(dst []float64, alpha []float32, lambdaBar []float64) {
	var z float64
	for j, a := range alpha {
		dst[j] = float64(a) * lambdaBar[j]
		z += dst[j]
	}
	for j := range alpha {
		dst[j] /= z
	}
}

// BFTObservationBound returns the largest λobs Eq. 6 can give at a given
// n_eff: (n_eff + ν)/(ν σ0²), reached when the values agree (S = 0). At
// n_eff = 1 with ν = 1 it is 2/σ0² = 2·d_head (§3.1).
func BFTObservationBound(neff, nu, sigma02 float64) float64 {
	return (neff + nu) / (nu * sigma02)
}

// BFTGainLogit returns log(λobs/λ), the argument of the sigmoid form
// K = σ(log(λobs/λ)) that Sec. 4.2 compares with a learned output gate.
func BFTGainLogit(lambdaObs, lambda float64) float64 {
	return math.Log(lambdaObs / lambda)
}

// BFTPredictedPrecision returns λ” = (d/λ' + Q)⁻¹ (paper Eq. 9) with
// d = max((1+J)², eps), or max(|1+J|, eps)² when clipAbs (the two readings
// of §3.2's "clip at ε = 0.01"; model.BFTConfig.JacobianClip).
func BFTPredictedPrecision(lambdaPost, jac, q, eps float64, clipAbs bool) float64 {
	f := 1 + jac
	d := max(f*f, eps)
	if clipAbs {
		d = max(math.Abs(f), eps)
		d *= d
	}
	return 1 / (d/lambdaPost + q)
}

// BFTRecorder keeps the BFT model's own precisions per (batch, layer,
// head, query) cell, each the mean over the head's d_head coordinates of
// the residual (or head-space) vector, layout [B, L, H, T] as Collector
// (Index). Cells not reached hold NaN.
type BFTRecorder struct {
	B, L, H, T, DHead int
	// Lambda is λ entering the layer, LambdaObs λobs, K the gain, LambdaPost
	// λ', Jacobian J_FFN and LambdaPred λ'' (hook points blocks.{l}.bft.*).
	Lambda, LambdaObs, K, LambdaPost, Jacobian, LambdaPred []float64
	// Ratchet is λ''/λ per dimension, then the mean: the layer's net
	// precision change.
	Ratchet []float64
	// Tau is the layer-0 precision per (batch, position), layout [B, T].
	Tau []float64
	// Q is the process noise per (layer, head), the mean over the head
	// subspace, layout [L, H].
	Q []float64

	lamIn []float32 // λ of the current layer, kept for Ratchet
}

// NewBFTRecorder returns a recorder for batch size b, nLayers layers,
// nHeads heads of dHead dimensions, and sequences of at most seqLen tokens.
func NewBFTRecorder(b, nLayers, nHeads, seqLen, dHead int) (*BFTRecorder, error) {
	if b <= 0 || nLayers <= 0 || nHeads <= 0 || seqLen <= 0 || dHead <= 0 {
		return nil, fmt.Errorf("probes: BFT recorder shape [B=%d, L=%d, H=%d, T=%d, d_head=%d] must be positive", b, nLayers, nHeads, seqLen, dHead)
	}
	n := b * nLayers * nHeads * seqLen
	return &BFTRecorder{B: b, L: nLayers, H: nHeads, T: seqLen, DHead: dHead,
		Lambda: nanSlice[float64](n), LambdaObs: nanSlice[float64](n), K: nanSlice[float64](n), LambdaPost: nanSlice[float64](n),
		Jacobian: nanSlice[float64](n), LambdaPred: nanSlice[float64](n), Ratchet: nanSlice[float64](n),
		Tau: nanSlice[float64](b * seqLen), Q: nanSlice[float64](nLayers * nHeads)}, nil
}

// Index returns the flat index of cell (b, l, h, t).
func (r *BFTRecorder) Index(b, l, h, t int) int { return ((b*r.L+l)*r.H+h)*r.T + t }

// Register adds the recorder's functions to hs (they only read).
func (r *BFTRecorder) Register(hs *hooks.Set) {
	hs.Add(hooks.BFTTau, func(name string, _ int, x *tensor.Dense) error {
		d := x.Data().([]float32)
		sh := x.Shape()
		if len(sh) != 2 || sh[0] > r.B || sh[1] > r.T {
			return fmt.Errorf("probes: %s has shape %v, recorder is [B=%d, T=%d]", name, sh, r.B, r.T)
		}
		for b := 0; b < sh[0]; b++ {
			for t := 0; t < sh[1]; t++ {
				r.Tau[b*r.T+t] = float64(d[b*sh[1]+t])
			}
		}
		return nil
	})
	for pattern, dst := range map[string][]float64{
		hooks.BFTLambda: r.Lambda, hooks.BFTLambdaObs: r.LambdaObs,
		hooks.BFTGain: r.K, hooks.BFTLambdaPost: r.LambdaPost,
		hooks.BFTJacobian: r.Jacobian, hooks.BFTLambdaPred: r.LambdaPred,
	} {
		hs.Add(pattern, func(name string, l int, x *tensor.Dense) error { return r.headMeans(name, l, x, dst) })
	}
	hs.Add(hooks.BFTLambda, func(_ string, _ int, x *tensor.Dense) error {
		r.lamIn = append(r.lamIn[:0], x.Data().([]float32)...)
		return nil
	})
	hs.Add(hooks.BFTLambdaPred, func(name string, l int, x *tensor.Dense) error {
		if len(r.lamIn) != len(x.Data().([]float32)) {
			return nil
		}
		ratio := make([]float32, len(r.lamIn))
		for i, v := range x.Data().([]float32) {
			ratio[i] = v / r.lamIn[i]
		}
		return r.headMeans(name, l, tensor.New(tensor.WithShape(x.Shape()...), tensor.WithBacking(ratio)), r.Ratchet)
	})
	hs.Add(hooks.BFTQNoise, func(name string, l int, x *tensor.Dense) error {
		if err := r.checkLayer(name, l); err != nil {
			return err
		}
		d := x.Data().([]float32)
		if len(d) != r.H*r.DHead {
			return fmt.Errorf("probes: %s has %d values, recorder expects H·d_head = %d", name, len(d), r.H*r.DHead)
		}
		for h := 0; h < r.H; h++ {
			r.Q[l*r.H+h] = meanF32(d[h*r.DHead : (h+1)*r.DHead])
		}
		return nil
	})
}

// checkLayer refuses a hook call whose layer l is outside the recorder's.
func (r *BFTRecorder) checkLayer(name string, l int) error {
	if l < 0 || l >= r.L {
		return fmt.Errorf("probes: hook %q: layer outside the recorder's %d layers", name, r.L)
	}
	return nil
}

// headMeans stores the mean over each head's d_head coordinates of a
// [batch, pos, d_model] or [batch, pos, head, d_head] value of layer l.
func (r *BFTRecorder) headMeans(name string, l int, x *tensor.Dense, dst []float64) error {
	if err := r.checkLayer(name, l); err != nil {
		return err
	}
	sh := x.Shape()
	d := x.Data().([]float32)
	if len(sh) < 3 || sh[0] > r.B || sh[1] > r.T || len(d) != sh[0]*sh[1]*r.H*r.DHead {
		return fmt.Errorf("probes: %s has shape %v, recorder is [B=%d, T=%d, H=%d, d_head=%d]", name, sh, r.B, r.T, r.H, r.DHead)
	}
	B, T, w := sh[0], sh[1], r.H*r.DHead
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			row := d[(b*T+t)*w : (b*T+t+1)*w]
			for h := 0; h < r.H; h++ {
				dst[r.Index(b, l, h, t)] = meanF32(row[h*r.DHead : (h+1)*r.DHead])
			}
		}
	}
	return nil
}

func meanF32(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	return s / float64(len(x))
}
