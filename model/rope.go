package model

import "math"

// ropeTable holds cos and sin of the rotary angles for positions 0..T−1,
// each row of width DHead/2.
type ropeTable struct {
	half     int
	cos, sin []float32
}

// invFreq returns the RoPE inverse frequencies θ^(−2i/d), i < d/2, with the
// scaling of rc applied, for a sequence of length seqLen. It follows
// Hugging Face's float32 arithmetic (the angles of a long context then agree
// with PyTorch to the last bits instead of drifting by pos·ε).
func (rc RoPEConfig) invFreq(d, seqLen int) []float32 {
	base := rc.Theta
	if rc.Type == "dynamic" && seqLen > rc.OrigMax {
		// Dynamic NTK: grow the base once the context exceeds the trained length.
		f := rc.Factor*float64(seqLen)/float64(rc.OrigMax) - (rc.Factor - 1)
		base *= math.Pow(f, float64(d)/float64(d-2))
	}
	inv := make([]float32, d/2)
	for i := range inv {
		e := float32(2*i) / float32(d)
		inv[i] = float32(1 / float64(float32(math.Pow(base, float64(e)))))
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
	}
	return inv
}

// newRopeTable computes cos/sin for positions 0..seqLen−1.
func newRopeTable(rc RoPEConfig, d, seqLen int) *ropeTable {
	inv := rc.invFreq(d, seqLen)
	half := d / 2
	t := &ropeTable{half: half, cos: make([]float32, seqLen*half), sin: make([]float32, seqLen*half)}
	for p := 0; p < seqLen; p++ {
		for i, f := range inv {
			a := float64(float32(p) * f) // float32 product, as torch
			t.cos[p*half+i] = float32(math.Cos(a))
			t.sin[p*half+i] = float32(math.Sin(a))
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
