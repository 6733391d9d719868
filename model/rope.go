package model

import "math"

// ropeTable holds cos and sin of the rotary angles for positions 0..T−1,
// each row of width DHead/2.
type ropeTable struct {
	half     int
	cos, sin []float32
}

// invFreq returns the RoPE inverse frequencies of d rotated dimensions
// (d/2 of them) with the scaling of rc applied, for a pass over positions
// 0..seqLen−1. With pos_i = θ^(2i/d), i < d/2, as transformers 5
// (modeling_rope_utils.py) computes them:
//
//	default   1/pos_i
//	linear    1/(factor·pos_i)
//	dynamic   θ grown to θ·(factor·seqLen/max − (factor − 1))^(d/(d−2)) once seqLen > max
//	llama3    1/pos_i above the wavelength orig/high_freq_factor, 1/(factor·pos_i)
//	          below orig/low_freq_factor, a linear blend in between
//	yarn      (1−e_i)/(factor·pos_i) + e_i/pos_i, e_i = 1 − clamp((i − lo)/(hi − lo), 0, 1),
//	          where lo, hi are the dimensions c(β) = d·ln(orig/(2πβ))/(2 ln θ) that
//	          turn beta_fast and beta_slow times over orig positions (truncate:
//	          lo rounded down, hi up; then lo ≥ 0, hi ≤ d−1)
//	proportional 1/(factor·pos_i) for i < Pairs, 0 beyond (Gemma 4)
//	longrope  1/(λ_i·pos_i), λ = long_factor when seqLen > orig, else short_factor
//
// LongRoPE's choice follows transformers' dynamic update, which picks the
// factors from the sequence length of the forward (max position id + 1),
// here seqLen: every position of a pass longer than orig uses long_factor,
// including those below orig.
//
// It follows transformers' float32 arithmetic (the angles of a long context
// then agree with PyTorch to the last bits instead of drifting by pos·ε);
// the explicit float32 conversions keep Go from fusing the products.
func (rc RoPEConfig) invFreq(d, seqLen int) []float32 {
	base := rc.Theta
	if rc.Type == "dynamic" && seqLen > rc.OrigMax {
		// Dynamic NTK: grow the base once the context exceeds the trained length.
		f := rc.Factor*float64(seqLen)/float64(rc.OrigMax) - (rc.Factor - 1)
		base *= math.Pow(f, float64(d)/float64(d-2))
	}
	pos := make([]float32, d/2)
	inv := make([]float32, d/2)
	for i := range inv {
		e := float32(2*i) / float32(d)
		pos[i] = float32(math.Pow(base, float64(e)))
		inv[i] = float32(1 / float64(pos[i]))
	}
	switch rc.Type {
	case "linear":
		for i := range inv {
			inv[i] = float32(float64(inv[i]) / rc.Factor)
		}
	case "llama3":
		lowWave := float64(rc.OrigMax) / rc.LowFreq
		highWave := float64(rc.OrigMax) / rc.HighFreq
		for i, f := range inv {
			wave := 2 * math.Pi / float64(f)
			switch {
			case wave < highWave:
			case wave > lowWave:
				inv[i] = float32(float64(f) / rc.Factor)
			default:
				s := (float64(rc.OrigMax)/wave - rc.LowFreq) / (rc.HighFreq - rc.LowFreq)
				inv[i] = float32((1-s)*float64(f)/rc.Factor + s*float64(f))
			}
		}
	case "yarn":
		lo, hi := rc.yarnRange(d)
		den := float32(hi - lo)
		factor := float32(rc.Factor)
		for i, p := range pos {
			ramp := min(max((float32(i)-float32(lo))/den, 0), 1)
			e := 1 - ramp // the extrapolation weight
			interp := float32(1 / float64(float32(factor*p)))
			inv[i] = float32(interp*float32(1-e)) + float32(inv[i]*e)
		}
	case "proportional":
		for i := range inv {
			inv[i] = float32(float64(inv[i]) / rc.Factor)
			if i >= rc.Pairs {
				inv[i] = 0
			}
		}
	case "longrope":
		lambda := rc.Factors.Short
		if seqLen > rc.OrigMax {
			lambda = rc.Factors.Long
		}
		for i, p := range pos {
			inv[i] = float32(1 / float64(float32(float32(lambda[i])*p)))
		}
	}
	return inv
}

// yarnRange returns the bounds lo, hi of YaRN's ramp over the d/2
// frequencies of d rotated dimensions: the correction dimensions
// c(β) = d·ln(orig/(2πβ))/(2 ln θ) of beta_fast (default 32) and beta_slow
// (default 1), rounded outwards unless NoTruncate, clamped to [0, d−1], and
// hi = lo + 0.001 where they meet.
func (rc RoPEConfig) yarnRange(d int) (lo, hi float64) {
	fast, slow := rc.BetaFast, rc.BetaSlow
	if fast == 0 {
		fast = 32
	}
	if slow == 0 {
		slow = 1
	}
	corr := func(rot float64) float64 {
		return float64(d) * math.Log(float64(rc.OrigMax)/(rot*2*math.Pi)) / (2 * math.Log(rc.Theta))
	}
	lo, hi = corr(fast), corr(slow)
	if !rc.NoTruncate {
		lo, hi = math.Floor(lo), math.Ceil(hi)
	}
	lo, hi = max(lo, 0), min(hi, float64(d-1))
	if lo == hi {
		hi += 0.001
	}
	return lo, hi
}

// attentionScale returns the factor on cos and sin (transformers'
// attention_scaling), with mscale(s, m) = 0.1·m·ln s + 1 for s > 1, else 1:
//
//	yarn      attention_factor if given; else mscale(factor, mscale)/mscale(factor, mscale_all_dim)
//	          when both are non-zero; else mscale(factor, 1)
//	longrope  attention_factor if given; else √(1 + ln factor / ln orig) for factor > 1, else 1
//	others    1
func (rc RoPEConfig) attentionScale() float64 {
	if rc.AttnFactor != 0 {
		return rc.AttnFactor
	}
	mscale := func(s, m float64) float64 {
		if s <= 1 {
			return 1
		}
		return 0.1*m*math.Log(s) + 1
	}
	switch rc.Type {
	case "yarn":
		if rc.MScale != 0 && rc.MScaleAllDim != 0 {
			return mscale(rc.Factor, rc.MScale) / mscale(rc.Factor, rc.MScaleAllDim)
		}
		return mscale(rc.Factor, 1)
	case "longrope":
		if rc.Factor <= 1 {
			return 1
		}
		return math.Sqrt(1 + math.Log(rc.Factor)/math.Log(float64(rc.OrigMax)))
	}
	return 1
}

// newRopeTable computes cos and sin of the angles p·inv_i of d rotated
// dimensions for positions p < seqLen, each times the attention factor
// (attentionScale), in float32 as transformers does.
func newRopeTable(rc RoPEConfig, d, seqLen int) *ropeTable {
	inv := rc.invFreq(d, seqLen)
	scale := float32(rc.attentionScale())
	half := d / 2
	t := &ropeTable{half: half, cos: make([]float32, seqLen*half), sin: make([]float32, seqLen*half)}
	for p := 0; p < seqLen; p++ {
		for i, f := range inv {
			a := float64(float32(p) * f) // float32 product, as torch
			t.cos[p*half+i] = float32(math.Cos(a)) * scale
			t.sin[p*half+i] = float32(math.Sin(a)) * scale
		}
	}
	return t
}

// apply rotates x (one head vector of width 2·half at position pos) in the
// rotate-half convention: x' = x·cos + rotate_half(x)·sin, where
// rotate_half(x) = [−x₂, x₁].
func (t *ropeTable) apply(x []float32, pos int) {
	rotateHalf(x[:t.half], x[t.half:2*t.half], t.cos[pos*t.half:(pos+1)*t.half], t.sin[pos*t.half:(pos+1)*t.half])
}

// rotateHalf sets x1[i], x2[i] = x1[i]·c[i] − x2[i]·s[i], x2[i]·c[i] +
// x1[i]·s[i], i < len(c) (kern.Rotate on 16 lanes where the CPU has them,
// the same bits).
var rotateHalf = func(x1, x2, c, s []float32) {
	x1, x2, s = x1[:len(c)], x2[:len(c)], s[:len(c)]
	for i := range c {
		a, b := x1[i], x2[i]
		x1[i] = a*c[i] - b*s[i]
		x2[i] = b*c[i] + a*s[i]
	}
}
