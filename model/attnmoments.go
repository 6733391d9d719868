package model

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/hooks"
)

// momentsWork is one attention worker's scratch for the moments of its
// tiles (hooks.AttnMoments): rows are stacked as in attendGroup (head-major).
type momentsWork struct {
	dh      int
	w       []float32 // [T, dh]: row k = (v_k − c)², k < built
	built   int
	c       []float32 // [dh]: the shift c
	next    []float32 // [dh]: the mean output of the last tile
	g       []float32 // [tile, dh]: G = α·(v − c)²
	s1, s2  []float64 // [rows] Σα, Σα²
	ent     []float64 // [rows] entropy
	e, s    []float64 // [rows, dh]
	moments hooks.AttnMoments
	sum     bool      // SSum only: w holds ‖v_k − c‖² (width 1), G comes from the softmax
	gs, ss  []float64 // [rows]: G = Σα‖v − c‖² and Σ_i S_i (sum)
	v       []float32 // the head's value vectors v_j = v[j·stride:][:dh] (setValues)
	stride  int
	vmax    []float32 // [dh]: max |v_ji| over the keys j < nmax
	nmax    int
}

// finish recomputes a row by two passes where S_i < momentsGuard·G_i (the
// product form loses about log10(G/S) of float32's digits of G) or S_i <
// momentsGuardF·2|u_i|·max_j |v_ji| (the error of the float32 output e_i
// enters S through 2u·F and scales with the size of the values, not with
// their spread). Their values trade the rows recomputed against the error
// of S: on the zoo's trained Qwen3 and gated checkpoints over 4096 tokens
// of text, 1.9 % and 2.3 % of the rows are recomputed and S is within
// 3.1e-6 of the two-pass value (7.5e-6 in TestAttentionMoments).
const (
	momentsGuard  = 0.05
	momentsGuardF = 0.05
)

func newMomentsWork(rows, T, dh int) *momentsWork {
	return &momentsWork{dh: dh,
		c: make([]float32, dh), next: make([]float32, dh), g: make([]float32, rows*dh), vmax: make([]float32, dh),
		s1: make([]float64, rows), s2: make([]float64, rows), ent: make([]float64, rows),
		gs: make([]float64, rows), ss: make([]float64, rows),
		e: make([]float64, rows*dh), s: make([]float64, rows*dh)}
}

// fits reports whether w serves tiles of n stacked rows over T keys of
// dimension dh.
func (w *momentsWork) fits(n, T, dh int) bool {
	return w.dh == dh && len(w.s1) >= n
}

// setValues sets the value vectors of the KV head whose query heads the
// worker runs next: v_j = V[j·stride : j·stride+dh].
func (w *momentsWork) setValues(V []float32, stride int) {
	w.v, w.stride = V, stride
	w.nmax = 0
	clear(w.vmax)
}

// momentsRefresh is the number of tiles between two choices of the shift
// c: in between, the squares (v_k − c)² of the keys already seen are kept
// and only the new keys' are computed.
const momentsRefresh = 8

// squares prepares the product G = α·(v − c)² of a tile of query rows q0 …
// over keys 0 … ncol−1 (tile index q0/tile) for all the stacked heads,
// which share the KV head's values and one shift c: it returns the squares
// (v_k − c)², k < ncol. Every momentsRefresh tiles c is chosen anew — the
// mean output of the previous tile's rows (finish keeps it), or for the
// first tile the mean value vector of its keys — and the squares are
// recomputed.
//
// With w.sum it returns the squared norms ‖v_k − c‖² instead.
func (w *momentsWork) squares(q0, tile, ncol, T int) []float32 {
	dh := w.dh
	width := dh
	if w.sum {
		width = 1
	}
	w.w = grow(w.w, T*width)
	c := w.c
	if t := q0 / tile; t%momentsRefresh == 0 {
		if q0 == 0 {
			for i := range c {
				var sum float64
				for k := 0; k < ncol; k++ {
					sum += float64(w.v[k*w.stride+i])
				}
				c[i] = float32(sum / float64(ncol))
			}
		} else {
			copy(c, w.next)
		}
		w.built = 0
	}
	for ; w.nmax < ncol; w.nmax++ {
		for i, x := range w.v[w.nmax*w.stride : w.nmax*w.stride+dh] {
			w.vmax[i] = max(w.vmax[i], abs32(x))
		}
	}
	if b := w.built; b < ncol {
		if w.sum {
			shiftNorm(w.w[b:ncol], w.v[b*w.stride:], w.stride, c, ncol-b)
		} else {
			shiftSquare(w.w[b*dh:ncol*dh], w.v[b*w.stride:], w.stride, c, ncol-b)
		}
		w.built = ncol
	}
	return w.w[:ncol*width]
}

// keepShift sets the next shift to the mean of the n outputs zp [n, dh]
// of the tile's rows (after finish reported them finite).
func (w *momentsWork) keepShift(zp []float32, n int) {
	dh := w.dh
	for i := range w.next {
		var sum float64
		for r := 0; r < n; r++ {
			sum += float64(zp[r*dh+i])
		}
		w.next[i] = float32(sum / float64(n))
	}
}

// gProduct computes G = α·(v − c)² (rows o … o+rows−1 of g) with one
// product from the squares sq.
func (w *momentsWork) gProduct(o, rows, ncol int, alpha, sq []float32) {
	dh := w.dh
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1,
		blas32.General{Rows: rows, Cols: ncol, Stride: ncol, Data: alpha[:rows*ncol]},
		blas32.General{Rows: ncol, Cols: dh, Stride: dh, Data: sq},
		0, blas32.General{Rows: rows, Cols: dh, Stride: dh, Data: w.g[o*dh : (o+rows)*dh]})
}

// finish computes E and S of the stacked rows o … o+rows−1 of one head
// (weights alpha [rows, ncol], row stride ncol; outputs zp = α·v [rows,
// dh]) from G and the shift c that squares chose. It reports whether every
// moment is finite.
func (w *momentsWork) finish(o, rows, ncol int, alpha, zp []float32) bool {
	if w.sum {
		return w.finishSum(o, rows, ncol, alpha, zp)
	}
	dh := w.dh
	c := w.c
	ok := true
	for r := 0; r < rows; r++ {
		s1 := w.s1[o+r]
		e, s := w.e[(o+r)*dh:(o+r+1)*dh], w.s[(o+r)*dh:(o+r+1)*dh]
		var sum float64
		redo := false
		g := w.g[(o+r)*dh : (o+r+1)*dh]
		z := zp[r*dh : (r+1)*dh]
		for i, cf := range c {
			ei, gi, ci := float64(z[i]), float64(g[i]), float64(cf)
			f := ei - ci*s1
			u := ei - ci
			si := gi - u*(2*f-u*s1)
			if si < momentsGuard*gi || si < momentsGuardF*2*math.Abs(u)*float64(w.vmax[i]) {
				redo = true
			}
			e[i], s[i] = ei, max(si, 0)
			sum += si + ei
		}
		finite := !math.IsNaN(sum) && !math.IsInf(sum, 0)
		if redo && finite {
			w.twoPass(e, s, alpha[r*ncol:(r+1)*ncol])
		}
		if !finite || math.IsNaN(s1+w.s2[o+r]) || math.IsInf(s1+w.s2[o+r], 0) {
			ok = false
		}
	}
	return ok
}

// finishSum is finish for Σ_i S_i only (w.sum): S = G − Σ_i u_i(2f_i −
// u_i·Σα) from the softmax's G = Σα‖v − c‖², recomputed by two passes
// where S < momentsGuard·G or S < momentsGuardF·2·Σ_i |u_i|·max_j |v_ji|
// (the guards of finish, summed over the dimensions).
func (w *momentsWork) finishSum(o, rows, ncol int, alpha, zp []float32) bool {
	dh := w.dh
	c := w.c
	ok := true
	for r := 0; r < rows; r++ {
		s1, g := w.s1[o+r], w.gs[o+r]
		e := w.e[(o+r)*dh : (o+r+1)*dh]
		z := zp[r*dh : (r+1)*dh]
		var cross, spread, sum float64
		for i, cf := range c {
			ei, ci := float64(z[i]), float64(cf)
			u := ei - ci
			cross += u * (2*(ei-ci*s1) - u*s1)
			spread += math.Abs(u) * float64(w.vmax[i])
			e[i] = ei
			sum += ei
		}
		ss := g - cross
		finite := !math.IsNaN(sum+ss) && !math.IsInf(sum+ss, 0)
		if finite && (ss < momentsGuard*g || ss < momentsGuardF*2*spread) {
			s := w.s[(o+r)*dh : (o+r+1)*dh]
			w.twoPass(e, s, alpha[r*ncol:(r+1)*ncol])
			ss = 0
			for _, si := range s {
				ss += si
			}
		}
		w.ss[o+r] = max(ss, 0)
		if !finite || math.IsNaN(s1+w.s2[o+r]) || math.IsInf(s1+w.s2[o+r], 0) {
			ok = false
		}
	}
	return ok
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// shiftSquare sets w[j·dh+i] = (v_ji − c_i)², j < n, for the value vectors
// v_j = v[j·stride:][:dh], dh = len(c) (assembly where the CPU has it,
// kern_amd64.go).
var shiftSquare = shiftSquareGo

func shiftSquareGo(w, v []float32, stride int, c []float32, n int) {
	dh := len(c)
	for j := 0; j < n; j++ {
		row := w[j*dh : (j+1)*dh]
		for i, x := range v[j*stride : j*stride+dh] {
			d := x - c[i]
			row[i] = d * d
		}
	}
}

// shiftNorm sets w[j] = Σ_i (v_ji − c_i)², j < n, for the value vectors
// v_j = v[j·stride:][:dh], dh = len(c) (assembly where the CPU has it).
var shiftNorm = shiftNormGo

func shiftNormGo(w, v []float32, stride int, c []float32, n int) {
	dh := len(c)
	for j := 0; j < n; j++ {
		var sum float32
		for i, x := range v[j*stride : j*stride+dh] {
			d := x - c[i]
			sum += d * d
		}
		w[j] = sum
	}
}

// twoPass sets e_i = Σ_j α_j v_ji and s_i = Σ_j α_j (v_ji − e_i)² over
// the keys of one row in float64.
func (w *momentsWork) twoPass(e, s []float64, a []float32) {
	clear(e)
	clear(s)
	dh := w.dh
	for j, aj := range a {
		if aj == 0 {
			continue
		}
		for i, x := range w.v[j*w.stride : j*w.stride+dh] {
			e[i] += float64(aj) * float64(x)
		}
	}
	for j, aj := range a {
		if aj == 0 {
			continue
		}
		for i, x := range w.v[j*w.stride : j*w.stride+dh] {
			d := float64(x) - e[i]
			s[i] += float64(aj) * d * d
		}
	}
}

// softmaxRowStats replaces row[lo:] with the attention weights α_j =
// e^(x_j − m)/Z and row[:lo] with 0, in float32 (the normalizer accumulates
// in float64), where
//
//	m = max(max_j x_j, s)    Z = Σ_j e^(x_j − m) + e^(s − m)
//
// over the scores x_j = row[lo+j] and the learned sink logit s of the
// row's head (gpt-oss: one extra softmax column that is dropped after the
// softmax). It returns the dropped column's weight, the sink mass
// σ = e^(s − m)/Z (formed like the weights, e^(s − m)·(1/Z) in float32),
// so that Σ_j α_j = 1 − σ. s = −Inf means no sink: Z is then the keys'
// sum alone, σ = 0, and the weights are those of the plain softmax bit
// for bit. With softcap > 0 the scores row[lo:] are capped first
// (capLogits), to the same bits in every implementation; the sink logit is
// used as it is (gpt-oss has no soft-cap; a cap on it would be a second,
// undocumented choice). With stats it also returns Σα, Σα² (float64 sums of
// the float32 weights) and the entropy −Σα log α, from log α = (x − m) −
// log Z (see hooks.AttnMoments): all three over the returned (raw) weights,
// without the sink column, so Σα = 1 − σ and the entropy is that of the
// rows hook_pattern shows. With w not nil it also returns g = Σ_j α_j w_j
// (row and w indexed alike) from the scaling pass. Assembly kernels replace
// softmaxRowStatsGo where the CPU has them (kern_amd64.go).
var softmaxRowStats = softmaxRowStatsGo

// noSink is the sink logit of a head without one (softmaxRowStats).
var noSink = float32(math.Inf(-1))

// softmaxRowStatsGo is softmaxRowStats in Go, with the scalar expf.
func softmaxRowStatsGo(row []float32, lo int, softcap, sink float32, stats bool, w []float32) (s1, s2, ent, g float64, sm float32) {
	seg := row[lo:]
	if softcap > 0 {
		capLogits(seg, softcap)
	}
	m := float32(math.Inf(-1))
	for _, v := range seg {
		if v > m {
			m = v
		}
	}
	hasSink := sink > noSink
	if hasSink && sink > m {
		m = sink
	}
	clear(row[:lo])
	var z, pd float64
	for i, v := range seg {
		d := v - m
		p := expf(d)
		seg[i] = p
		z += float64(p)
		if stats {
			pd += float64(p) * float64(d)
		}
	}
	var ps float32 // e^(s − m), the sink column before the scaling
	if hasSink {
		ps = expf(sink - m)
		z += float64(ps)
	}
	inv := 1 / z
	invf := float32(inv)
	for i, p := range seg {
		x := p * invf
		seg[i] = x
		if stats {
			xf := float64(x)
			s1 += xf
			s2 += xf * xf
		}
		if w != nil {
			g += float64(x) * float64(w[lo+i])
		}
	}
	if hasSink {
		sm = ps * invf
	}
	if !stats {
		return 0, 0, 0, g, sm
	}
	return s1, s2, math.Log(z)*s1 - pd*inv, g, sm
}
