package model

import (
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
// are multiplied by v; consumers that implement MomentsConsumer get the
// tile's moments, computed here with one float64 matrix product per tile
// (see AttnMoments). Query head h reads KV head h / (H/KV).
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
		tile = defaultTileRows
	}
	var plain []hooks.AttnConsumer
	var moments []MomentsConsumer
	for _, c := range a.consumers {
		if mc, ok := c.(MomentsConsumer); ok {
			moments = append(moments, mc)
		} else {
			plain = append(plain, c)
		}
	}
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hw := &headWork{scores: make([]float32, tile*a.T), plain: plain, moments: moments}
			if len(moments) > 0 {
				hw.mw = newMomentsWork(tile, a.T, a.dHead)
			}
			for j := range jobs {
				if err := attendHead(a, j.b, j.h, tile, hw); err != nil {
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

// defaultTileRows is the number of query rows per attention tile when
// Options.TileRows is 0 (BenchmarkAttentionTile compares sizes).
const defaultTileRows = 64

// headWork is one attention worker's scratch and consumers.
type headWork struct {
	scores  []float32 // [tile, T]
	plain   []hooks.AttnConsumer
	moments []MomentsConsumer
	mw      *momentsWork // nil without moments consumers
}

// attendHead runs one (batch, head) in tiles of query rows.
func attendHead(a *attnArgs, b, h, tile int, hw *headWork) error {
	dh, T := a.dHead, a.T
	qStride, kvStride := a.heads*dh, a.kvHeads*dh
	kvh := h / (a.heads / a.kvHeads)
	kBase := b*T*kvStride + kvh*dh
	keys := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.k[kBase:]}
	vals := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.v[kBase:]}
	at := hooks.AttnTile{Batch: b, Layer: a.layer, Head: h, T: T, DHead: dh, VStride: kvStride, V: a.v[kBase:]}
	mw := hw.mw
	if mw != nil {
		mw.setValues(a.v[kBase:], kvStride, T)
	}

	for q0 := 0; q0 < T; q0 += tile {
		rows := min(tile, T-q0)
		ncol := q0 + rows // keys 0..q0+rows−1 are visible to some row of the tile
		s := blas32.General{Rows: rows, Cols: ncol, Stride: ncol, Data: hw.scores[:rows*ncol]}
		qt := blas32.General{Rows: rows, Cols: dh, Stride: qStride, Data: a.q[(b*T+q0)*qStride+h*dh:]}
		kt := keys
		kt.Rows = ncol
		blas32.Gemm(blas.NoTrans, blas.Trans, a.scale, qt, kt, 0, s)

		softmaxTile(s.Data, rows, ncol, q0, a.window, mw)
		if a.pattern != nil {
			for r := 0; r < rows; r++ {
				t := q0 + r
				copy(a.pattern[((b*a.heads+h)*T+t)*T:][:t+1], s.Data[r*ncol:r*ncol+t+1])
			}
		}
		at.Q0, at.Rows, at.Stride, at.Alpha = q0, rows, ncol, s.Data
		for _, c := range hw.plain {
			if err := c.ConsumeAttn(&at); err != nil {
				return err
			}
		}
		if len(hw.moments) > 0 {
			finite := mw.finish(rows, ncol)
			am := &mw.moments
			*am = AttnMoments{Tile: &at, SumAlpha: mw.s1[:rows], SumSq: mw.s2[:rows], Entropy: mw.ent[:rows],
				E: mw.e[:rows*dh], S: mw.s[:rows*dh]}
			for _, c := range hw.moments {
				var err error
				if finite {
					err = c.ConsumeMoments(am)
				} else {
					err = c.ConsumeAttn(&at) // the consumer's own handling of NaN/Inf rows
				}
				if err != nil {
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

// softmaxTile turns the rows × ncol scores of the query rows q0 … q0+rows−1
// into attention weights in place: row r (query t = q0+r) gets the softmax
// of its keys max(0, t−window+1) … t and 0 elsewhere. With mw non-nil it
// also fills mw's float64 weights and per-row Σα, Σα² and entropy.
var softmaxTile = softmaxTileGo

// softmaxTileGo is softmaxTile in Go.
func softmaxTileGo(s []float32, rows, ncol, q0, window int, mw *momentsWork) {
	for r := 0; r < rows; r++ {
		t := q0 + r
		row := s[r*ncol : (r+1)*ncol]
		lo := 0
		if window > 0 && t-window+1 > 0 {
			lo = t - window + 1
		}
		clear(row[t+1:]) // causal mask; the P·V product reads these
		if mw == nil {
			softmaxRowStats(row[:t+1], lo, nil)
			continue
		}
		a64 := mw.a64[r*ncol : (r+1)*ncol]
		clear(a64[t+1:])
		mw.s1[r], mw.s2[r], mw.ent[r] = softmaxRowStats(row[:t+1], lo, a64)
	}
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
