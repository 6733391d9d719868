package model

import (
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/filterlens/probe/hooks"
)

// MomentsConsumer is a hooks.AttnConsumer that can also take the per-row
// moments of a tile computed by the attention pass itself with matrix
// products, instead of walking every row's weights and value vectors.
// Register it like any consumer (hooks.Set.Stream); the Llama-family
// attention (causalAttention: Llama, Mistral, Qwen2, Qwen3, gated Qwen3,
// GPT-2, and every family built on it) calls ConsumeMoments, other
// attention kernels call ConsumeAttn. The same concurrency rules as for
// ConsumeAttn apply.
type MomentsConsumer interface {
	hooks.AttnConsumer
	ConsumeMoments(m *AttnMoments) error
}

// AttnMoments holds the moments of the rows of one attention tile (one
// batch entry, layer and head; query rows t = Tile.Q0 … Tile.Q0+Rows−1) for
// the BFT filter diagnostics (package probes):
//
//	SumAlpha[r] = Σ_j α_tj                   SumSq[r] = Σ_j α_tj²
//	Entropy[r]  = −Σ_j α_tj log α_tj         (0·log 0 = 0)
//	E[r·d+i]    = e_ti = Σ_j α_tj v_ji       S[r·d+i] = Σ_j α_tj (v_ji − e_ti)²
//
// with d = Tile.DHead, all in float64 from the float32 weights α the tile
// holds. They agree with the row-by-row float64 sums (probes.Moments,
// two-pass) to about 1e-15 relative for SumAlpha, SumSq and E, with two
// documented differences: the entropy uses log α_tj = (x_tj − m_t) − log
// Z_t (score minus row maximum, minus the log normalizer) instead of the
// log of the rounded float32 weight, which changes exp(Entropy) by at most
// about 6e-8·(2 + Entropy) relative; and S is first formed from two matrix
// products as Σα w² − 2u Σα w + u² Σα with w = v − c (c the mean value
// vector of the head over all keys, u = e − c), whose absolute error is
// about T·1e-16·G_ti with G_ti = Σ_j α_tj (v_ji − c_i)². Where that could
// matter — S_ti < 1e-4·G_ti, i.e. nearly one-hot rows or values far from
// the head's mean — the row's S is recomputed by the two-pass sum
// Σ_j α_tj (v_ji − e_ti)² (momentsGuard), so S is within about 1e-9
// relative of the two-pass value on every row (TestMomentsMatchTwoPass).
//
// Tile is the tile itself (weights and value vectors), for what the
// moments do not cover (e.g. the mass on chosen key positions) and as a
// fallback: a consumer may simply call its own ConsumeAttn(Tile). The
// struct and its slices are only valid during the call.
type AttnMoments struct {
	Tile                     *hooks.AttnTile
	SumAlpha, SumSq, Entropy []float64 // [Rows]
	E, S                     []float64 // [Rows, DHead]
}

// momentsWork is one attention worker's scratch for the moments of its
// tiles: the weights in float64 and the shifted values beside their
// squares, so that the two value moments of a whole tile are one float64
// matrix product.
type momentsWork struct {
	dh      int
	a64     []float64 // [rows, ncol]: the tile's weights, 0 beyond each row's query
	ww      []float64 // [T, 2·dh]: row j = (v_j − c, (v_j − c)²)
	c       []float64 // [dh] shift: mean value vector of the head
	fg      []float64 // [rows, 2·dh]: α·(v − c) and α·(v − c)²
	s1, s2  []float64 // [rows] Σα, Σα²
	ent     []float64 // [rows] entropy
	e, s    []float64 // [rows, dh]
	moments AttnMoments
	v       []float32 // the head's value vectors v_j = v[j·stride:][:dh] (setValues)
	stride  int
	redone  int // rows whose S was recomputed by two passes (for tests)
}

// momentsGuard is the ratio S/G below which finish recomputes a row's S by
// two passes: the matrix-product form loses about log10(G/S) digits.
const momentsGuard = 1e-4

func newMomentsWork(tile, T, dh int) *momentsWork {
	return &momentsWork{dh: dh,
		a64: make([]float64, tile*T), ww: make([]float64, T*2*dh), c: make([]float64, dh),
		fg: make([]float64, tile*2*dh), s1: make([]float64, tile), s2: make([]float64, tile),
		ent: make([]float64, tile), e: make([]float64, tile*dh), s: make([]float64, tile*dh)}
}

// fits reports whether w serves tiles of n rows over T keys of dimension dh.
func (w *momentsWork) fits(n, T, dh int) bool {
	return w.dh == dh && len(w.a64) >= n*T && len(w.ww) >= T*2*dh && len(w.s1) >= n
}

// setValues fills ww and c from the value vectors v_j = V[j·stride :
// j·stride+dh], j < T.
func (w *momentsWork) setValues(V []float32, stride, T int) {
	dh := w.dh
	w.v, w.stride = V, stride
	c := w.c
	clear(c)
	for j := 0; j < T; j++ {
		for i, x := range V[j*stride : j*stride+dh] {
			c[i] += float64(x)
		}
	}
	for i := range c {
		c[i] /= float64(T)
	}
	for j := 0; j < T; j++ {
		row := w.ww[j*2*dh : (j+1)*2*dh]
		for i, x := range V[j*stride : j*stride+dh] {
			d := float64(x) - c[i]
			row[i] = d
			row[dh+i] = d * d
		}
	}
}

// finish computes E and S of rows × ncol weights (a64, filled by the
// softmax) and reports whether every moment is finite.
func (w *momentsWork) finish(rows, ncol int) bool {
	dh := w.dh
	blas64.Gemm(blas.NoTrans, blas.NoTrans, 1,
		blas64.General{Rows: rows, Cols: ncol, Stride: ncol, Data: w.a64[:rows*ncol]},
		blas64.General{Rows: ncol, Cols: 2 * dh, Stride: 2 * dh, Data: w.ww[:ncol*2*dh]},
		0, blas64.General{Rows: rows, Cols: 2 * dh, Stride: 2 * dh, Data: w.fg[:rows*2*dh]})
	ok := true
	for r := 0; r < rows; r++ {
		s1 := w.s1[r]
		fg := w.fg[r*2*dh : (r+1)*2*dh]
		e, s := w.e[r*dh:(r+1)*dh], w.s[r*dh:(r+1)*dh]
		var sum float64
		redo := false
		for i, ci := range w.c {
			f, g := fg[i], fg[dh+i]
			u := f + ci*(s1-1) // e − c
			e[i] = f + ci*s1
			si := g - u*(2*f-u*s1)
			if si < momentsGuard*g {
				redo = true
			}
			if si < 0 {
				si = 0
			}
			s[i] = si
			sum += si + e[i]
		}
		if redo && !math.IsNaN(sum) && !math.IsInf(sum, 0) {
			w.twoPassS(s, e, w.a64[r*ncol:(r+1)*ncol])
			w.redone++
		}
		if math.IsNaN(sum) || math.IsInf(sum, 0) || math.IsNaN(s1+w.s2[r]) || math.IsInf(s1+w.s2[r], 0) {
			ok = false
		}
	}
	return ok
}

// twoPassS sets s_i = Σ_j α_j (v_ji − e_i)² over the keys of one row
// (weights a, e already computed): the second pass of the two-pass form.
func (w *momentsWork) twoPassS(s, e, a []float64) {
	clear(s)
	dh := w.dh
	for j, aj := range a {
		if aj == 0 {
			continue
		}
		for i, x := range w.v[j*w.stride : j*w.stride+dh] {
			d := float64(x) - e[i]
			s[i] += aj * d * d
		}
	}
}

// softmaxRowStats replaces row[lo:] with softmax(row[lo:]) and row[:lo]
// with 0, in float32 (expf; the normalizer accumulates in float64). With
// a64 non-nil it also writes the weights as float64 into a64[:len(row)]
// and returns Σα, Σα² and the entropy −Σα log α (see AttnMoments).
func softmaxRowStats(row []float32, lo int, a64 []float64) (s1, s2, ent float64) {
	seg := row[lo:]
	m := float32(math.Inf(-1))
	for _, v := range seg {
		if v > m {
			m = v
		}
	}
	clear(row[:lo])
	if a64 == nil {
		var z float64
		for i, v := range seg {
			p := expf(v - m)
			seg[i] = p
			z += float64(p)
		}
		inv := float32(1 / z)
		for i, p := range seg {
			seg[i] = p * inv
		}
		return 0, 0, 0
	}
	var z, pd float64
	for i, v := range seg {
		d := v - m
		p := expf(d)
		seg[i] = p
		z += float64(p)
		pd += float64(p) * float64(d)
	}
	inv := 1 / z
	invf := float32(inv)
	a := a64[lo:len(row)]
	for i, p := range seg {
		x := p * invf
		seg[i] = x
		xf := float64(x)
		a[i] = xf
		s1 += xf
		s2 += xf * xf
	}
	clear(a64[:lo])
	return s1, s2, math.Log(z)*s1 - pd*inv
}
