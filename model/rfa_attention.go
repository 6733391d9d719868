package model

import (
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/hooks"
)

// rfaAttnArgs describes one layer's causal RFA attention over a batch.
// Complex buffers are [B·T, H, d, 2] row-major (W = 2·H·d reals per row).
type rfaAttnArgs struct {
	layer    int
	batch, T int
	heads, d int
	kern     []rfaHeadKernel // per head
	clampR2  bool

	qt, kt, vt []float32 // rotated Q̃, K̃, Ṽ
	agg        []float32 // out: Σ_j A_ij Ṽ_j (not written when pattern != nil)
	logPTot    []float32 // out: [B·T, H] log p̂_tot

	consumers []hooks.AttnConsumer
	pattern   []float32 // [B, H, T, T]: Â, when a pattern hook is registered
	tileRows  int
	threads   int
}

// rfaScratch is one worker's memory: O(tileRows·T) whatever T is.
type rfaScratch struct {
	scores, r2 []float32 // [tile, T]
	energy     []float64 // [T]
	knorm      []float64 // [T]
	lp         []float32 // [tile]
}

// rfaAttention runs every (batch, head) of a layer on a pool of workers,
// one tile of query rows at a time (see attendRFAHead).
func rfaAttention(a *rfaAttnArgs) error {
	type job struct{ b, h int }
	jobs := make(chan job)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	threads := a.threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	tile := a.tileRows
	if tile <= 0 {
		tile = 64
	}
	wantR2 := false
	for _, c := range a.consumers {
		if _, ok := c.(RFAConsumer); ok {
			wantR2 = true
		}
	}
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := &rfaScratch{scores: make([]float32, tile*a.T), energy: make([]float64, a.T),
				knorm: make([]float64, a.T), lp: make([]float32, tile)}
			if wantR2 {
				sc.r2 = make([]float32, tile*a.T)
			}
			for j := range jobs {
				if err := attendRFAHead(a, j.b, j.h, tile, sc); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for b := 0; b < a.batch; b++ {
		for h := 0; h < a.heads; h++ {
			jobs <- job{b, h}
		}
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

// attendRFAHead computes, for one (batch, head) and each tile of query
// rows t: the cross terms Re(Q̃_t†K̃_j) by one matmul, the squared residuals
// ‖R_tj‖² (Eq. 10), the Student-t logits τ_s·L (Eq. 11), Â = softmax_j and
// log p̂_tot,t; it streams the tile, then forms A = Â ⊙ E and Σ_j A_tj Ṽ_j
// by a second matmul. Lags index the Toeplitz kernels: E[t−j], V[t−j].
func attendRFAHead(a *rfaAttnArgs, b, h, tile int, sc *rfaScratch) error {
	T, rw := a.T, 2*a.d
	W := a.heads * rw
	K := &a.kern[h]
	base := b*T*W + h*rw
	keys := blas32.General{Rows: T, Cols: rw, Stride: W, Data: a.kt[base:]}
	vals := blas32.General{Rows: T, Cols: rw, Stride: W, Data: a.vt[base:]}
	for j := 0; j < T; j++ {
		sc.knorm[j] = sqNorm(a.kt[base+j*W:][:rw])
	}
	at := hooks.AttnTile{Batch: b, Layer: a.layer, Head: h, T: T, DHead: rw, VStride: W, V: a.vt[base:]}
	rt := RFATile{Tile: &at, Params: &K.p}
	tau, kappa := K.p.Tau, K.kappa

	for q0 := 0; q0 < T; q0 += tile {
		rows := min(tile, T-q0)
		ncol := q0 + rows
		s := blas32.General{Rows: rows, Cols: ncol, Stride: ncol, Data: sc.scores[:rows*ncol]}
		qtile := blas32.General{Rows: rows, Cols: rw, Stride: W, Data: a.qt[base+q0*W:]}
		kk := keys
		kk.Rows = ncol
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, qtile, kk, 0, s) // Re(Q̃_t†K̃_j)

		for r := 0; r < rows; r++ {
			t := q0 + r
			qn := sqNorm(a.qt[base+t*W:][:rw])
			row := s.Data[r*ncol : (r+1)*ncol]
			en := sc.energy[:t+1]
			for j := 0; j <= t; j++ {
				lag := t - j
				e := K.E[lag]
				r2 := qn + e*e*sc.knorm[j] - 2*e*float64(row[j])
				if a.clampR2 && r2 < 0 {
					r2 = 0
				}
				if sc.r2 != nil {
					sc.r2[r*ncol+j] = float32(r2)
				}
				u := math.Log1p(K.invV[lag] * r2)
				en[j] = -K.logV[lag] - u
				row[j] = float32(tau * (-K.logV[lag] - kappa*u))
			}
			lp := logSumExp(en)
			a.logPTot[(b*T+t)*a.heads+h] = float32(lp)
			sc.lp[r] = float32(lp)
			softmaxRow(row[:t+1])
			for j := t + 1; j < ncol; j++ {
				row[j] = 0 // causal mask; the A·Ṽ product below reads these
			}
			if a.pattern != nil {
				copy(a.pattern[((b*a.heads+h)*T+t)*T:][:t+1], row[:t+1])
			}
		}
		if len(a.consumers) > 0 {
			at.Q0, at.Rows, at.Stride, at.Alpha = q0, rows, ncol, s.Data
			rt.LogPTot = sc.lp[:rows]
			if sc.r2 != nil {
				rt.R2 = sc.r2[:rows*ncol]
			}
			for _, c := range a.consumers {
				var err error
				if rc, ok := c.(RFAConsumer); ok {
					err = rc.ConsumeRFA(&rt)
				} else {
					err = c.ConsumeAttn(&at)
				}
				if err != nil {
					return err
				}
			}
		}
		if a.pattern != nil {
			continue // A·Ṽ is formed from the (possibly changed) pattern after the hooks
		}
		for r := 0; r < rows; r++ {
			t := q0 + r
			row := s.Data[r*ncol : r*ncol+t+1]
			for j := range row {
				row[j] = float32(float64(row[j]) * K.E[t-j]) // A = Â ⊙ E
			}
		}
		vv := vals
		vv.Rows = ncol
		out := blas32.General{Rows: rows, Cols: rw, Stride: W, Data: a.agg[base+q0*W:]}
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, s, vv, 0, out)
	}
	return nil
}

// sqNorm returns Σ x² in float64.
func sqNorm(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

// logSumExp returns log Σ exp(x) computed stably.
func logSumExp(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, v)
	}
	if math.IsInf(m, 0) {
		return m
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}
