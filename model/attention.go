package model

import (
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/hooks"
)

// attnArgs describes one layer's causal grouped-query attention over a
// batch. Buffers are row-major: q [B·T, H·dh], k and v [B·T, KV·dh], z
// [B·T, H·dh].
type attnArgs struct {
	layer          int
	batch, T       int
	heads, kvHeads int
	dHead          int
	scale          float32
	window         int // sliding window (0: none): key j is seen by query t iff t−j < window

	q, k, v, z []float32

	consumers []hooks.AttnConsumer
	pattern   []float32 // [B, H, T, T] when the pattern is hooked, else nil
	tileRows  int
	threads   int
}

// causalAttention computes z = softmax(q·kᵀ·scale + causal mask)·v for every
// (batch, head), one tile of query rows at a time, so memory stays
// O(tileRows·T) per worker. Each tile's rows go to the consumers before they
// are multiplied by v. Query head h reads KV head h / (H/KV).
func causalAttention(a *attnArgs) error {
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
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			scores := make([]float32, tile*a.T)
			for j := range jobs {
				if err := attendHead(a, j.b, j.h, tile, scores); err != nil {
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

// attendHead runs one (batch, head) in tiles of query rows.
func attendHead(a *attnArgs, b, h, tile int, scores []float32) error {
	dh, T := a.dHead, a.T
	qStride, kvStride := a.heads*dh, a.kvHeads*dh
	kvh := h / (a.heads / a.kvHeads)
	kBase := b*T*kvStride + kvh*dh
	keys := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.k[kBase:]}
	vals := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.v[kBase:]}
	at := hooks.AttnTile{Batch: b, Layer: a.layer, Head: h, T: T, DHead: dh, VStride: kvStride, V: a.v[kBase:]}

	for q0 := 0; q0 < T; q0 += tile {
		rows := min(tile, T-q0)
		ncol := q0 + rows // keys 0..q0+rows−1 are visible to some row of the tile
		s := blas32.General{Rows: rows, Cols: ncol, Stride: ncol, Data: scores[:rows*ncol]}
		qt := blas32.General{Rows: rows, Cols: dh, Stride: qStride, Data: a.q[(b*T+q0)*qStride+h*dh:]}
		kt := keys
		kt.Rows = ncol
		blas32.Gemm(blas.NoTrans, blas.Trans, a.scale, qt, kt, 0, s)

		for r := 0; r < rows; r++ {
			t := q0 + r
			row := s.Data[r*ncol : (r+1)*ncol]
			lo := 0
			if a.window > 0 && t-a.window+1 > 0 {
				lo = t - a.window + 1
			}
			for j := 0; j < lo; j++ {
				row[j] = float32(math.Inf(-1))
			}
			softmaxRow(row[:t+1])
			for j := t + 1; j < ncol; j++ {
				row[j] = 0 // causal mask; the P·V product below reads these
			}
			if a.pattern != nil {
				copy(a.pattern[((b*a.heads+h)*T+t)*T:][:t+1], row[:t+1])
			}
		}
		if len(a.consumers) > 0 {
			at.Q0, at.Rows, at.Stride, at.Alpha = q0, rows, ncol, s.Data
			for _, c := range a.consumers {
				if err := c.ConsumeAttn(&at); err != nil {
					return err
				}
			}
		}
		if a.pattern != nil {
			continue // z is computed from the (possibly changed) pattern after the hook
		}
		vt := vals
		vt.Rows = ncol
		zt := blas32.General{Rows: rows, Cols: dh, Stride: qStride, Data: a.z[(b*T+q0)*qStride+h*dh:]}
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, s, vt, 0, zt)
	}
	return nil
}

// patternTimesV computes z = pattern·v for every (batch, head) from a
// materialized [B, H, T, T] pattern (used when hook_pattern is hooked, so
// that an intervention on the pattern reaches the output).
func patternTimesV(a *attnArgs) {
	dh, T := a.dHead, a.T
	qStride, kvStride := a.heads*dh, a.kvHeads*dh
	for b := 0; b < a.batch; b++ {
		for h := 0; h < a.heads; h++ {
			kvh := h / (a.heads / a.kvHeads)
			p := blas32.General{Rows: T, Cols: T, Stride: T, Data: a.pattern[(b*a.heads+h)*T*T:]}
			vv := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.v[b*T*kvStride+kvh*dh:]}
			zz := blas32.General{Rows: T, Cols: dh, Stride: qStride, Data: a.z[b*T*qStride+h*dh:]}
			blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, p, vv, 0, zz)
		}
	}
}
