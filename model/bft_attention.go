package model

import "math"

// bftObserver computes the kriging estimate e_t = Σ_j α̃_tj v_j and its
// observation precision per head dimension (Eq. 6 or Eq. 13) from rows of
// α̃, writing e [B·T, H·dh], lamObs [B·T, H·dh] and neff [B·T, H].
type bftObserver struct {
	cfg              *BFTConfig
	heads, kv, dHead int
	T                int
	v                []float32
	e, lamObs        []float32
	neff             []float32
	scratch          [][]float64 // per worker: e, S, B (3·dh)
}

func newBFTObserver(cfg *BFTConfig, B, T, H, KV, dh, threads int, v, e, lamObs, neff []float32) *bftObserver {
	o := &bftObserver{cfg: cfg, heads: H, kv: KV, dHead: dh, T: T, v: v, e: e, lamObs: lamObs, neff: neff}
	o.scratch = make([][]float64, threads)
	for i := range o.scratch {
		o.scratch[i] = make([]float64, 3*dh)
	}
	return o
}

// row observes query t of (batch b, head h) from its weights alpha =
// α̃[t, 0..t]. The moments are computed in two passes in float64 (e first,
// then S = Σ α̃ (v − e)², which equals Eq. 7's Σα̃v² − e² without its
// cancellation; notes §F.14):
//
//	n_eff = 1/Σ_j α̃_tj²                                   (Eq. 5)
//	reml:     Var_i = (S_i + ν·σ0²)/(n_eff + ν)            (Eq. 6)
//	sandwich: Var_i = Σ_j α̃_tj²(v_ji − e_i)² / (Σ_j α̃_tj)² (Eq. 13)
//	λobs_i = 1/Var_i
func (o *bftObserver) row(worker, b, h, t int, alpha []float32) {
	dh, kvStride := o.dHead, o.kv*o.dHead
	sc := o.scratch[worker]
	e, S, B := sc[:dh], sc[dh:2*dh], sc[2*dh:]
	clear(sc)
	vBase := b*o.T*kvStride + (h/(o.heads/o.kv))*dh
	var s1, s2 float64
	for j, a := range alpha {
		w := float64(a)
		s1 += w
		s2 += w * w
		vj := o.v[vBase+j*kvStride:][:dh]
		for i, x := range vj {
			e[i] += w * float64(x)
		}
	}
	for j, a := range alpha {
		w := float64(a)
		vj := o.v[vBase+j*kvStride:][:dh]
		for i, x := range vj {
			d := float64(x) - e[i]
			S[i] += w * d * d
			B[i] += w * w * d * d
		}
	}
	neff := 1 / s2
	r := (b*o.T + t)
	out := r*o.heads*dh + h*dh
	for i := 0; i < dh; i++ {
		var variance float64
		if o.cfg.Observation == "sandwich" {
			variance = B[i] / (s1 * s1)
		} else {
			variance = (S[i] + o.cfg.PriorNu*o.cfg.PriorSigma2) / (neff + o.cfg.PriorNu)
		}
		o.e[out+i] = float32(e[i])
		o.lamObs[out+i] = float32(1 / variance)
	}
	o.neff[r*o.heads+h] = float32(neff)
}

// bftLogits returns the kriging logits of Eq. 2 in the log-bias form of
// Remark 1 for the shared tile loop (attnArgs.logits): the scaled products
// q_t·k_j/√dh plus log λ̄_j (logLamBar [B·T], nil with Kriging "none") plus
// (t−j)·log ρ (logRho, 0 without recency decay), in float32; nil when both
// are off.
func bftLogits(T int, logLamBar []float32, logRho float64) logitsFunc {
	if logLamBar == nil && logRho == 0 {
		return nil
	}
	return func(_ int, _ []float64, b, _, q0, rows, ncol int, s []float32) {
		for r := 0; r < rows; r++ {
			t := q0 + r
			row := s[r*ncol : (r+1)*ncol]
			if logLamBar != nil {
				for j, lb := range logLamBar[b*T : b*T+t+1] {
					row[j] += lb
				}
			}
			if logRho != 0 {
				for j := 0; j <= t; j++ {
					row[j] += float32(float64(t-j) * logRho)
				}
			}
		}
	}
}

// logMeanPrecision writes log λ̄_j, λ̄_j = mean over the D dimensions of
// λ_j (App. C: one scalar per token shared by all heads), for every row
// of lam [n, D]. It returns the first row whose λ̄ is not a positive
// finite number (−1 if none).
func logMeanPrecision(dst, lam []float32, D int) int {
	for r := range dst {
		var s float64
		for _, x := range lam[r*D : (r+1)*D] {
			s += float64(x)
		}
		m := s / float64(D)
		if !(m > 0) || math.IsInf(m, 0) {
			return r
		}
		dst[r] = float32(math.Log(m))
	}
	return -1
}
