package model

import (
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/hooks"
)

// forEachHead calls fn(worker, b, h) for every (batch, head) pair on a pool
// of threads workers (≤ 0: GOMAXPROCS) and returns the first error. worker
// < threads indexes per-worker scratch. It is the job loop of the filter
// mechanisms' attention (BFT, RT, AFA).
func forEachHead(batch, heads, threads int, fn func(worker, b, h int) error) error {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	type job struct{ b, h int }
	jobs := make(chan job)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for j := range jobs {
				if err := fn(w, j.b, j.h); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}(w)
	}
	for b := 0; b < batch; b++ {
		for h := 0; h < heads; h++ {
			jobs <- job{b, h}
		}
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

// threadCount resolves Options.Threads.
func threadCount(n int) int {
	if n <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return n
}

// bftAttnArgs describes one layer's kriging attention (Eq. 2, Remark 1):
// α̃_tj = softmax_j(q_t·k_j/√dh + log λ̄_j [+ (t−j)·log ρ]) over j ≤ t, and
// the observation step of Algorithm 1 lines 2–3 on it. Buffers are
// row-major: q [B·T, H·dh], k and v [B·T, KV·dh].
type bftAttnArgs struct {
	layer          int
	batch, T       int
	heads, kvHeads int
	dHead          int
	scale          float32
	q, k, v        []float32
	logLamBar      []float32 // [B·T] log λ̄_j (nil: Kriging "none")
	logRho         float64   // recency term per lag (0: none)
	obs            *bftObserver

	consumers []hooks.AttnConsumer
	pattern   []float32 // [B, H, T, T] when hook_pattern is hooked, else nil
	tileRows  int
	threads   int
}

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

// bftAttention runs every (batch, head) of a layer, one tile of query rows
// at a time (memory O(tileRows·T) per worker): the scores by one matmul,
// the precision bias, the causal softmax, the tile to the consumers, and —
// unless the pattern is materialized for its hook — the observation of
// each row.
func bftAttention(a *bftAttnArgs) error {
	tile := a.tileRows
	if tile <= 0 {
		tile = 64
	}
	threads := threadCount(a.threads)
	scores := make([][]float32, threads)
	for i := range scores {
		scores[i] = make([]float32, tile*a.T)
	}
	return forEachHead(a.batch, a.heads, threads, func(w, b, h int) error {
		return bftAttendHead(a, w, b, h, tile, scores[w])
	})
}

func bftAttendHead(a *bftAttnArgs, worker, b, h, tile int, scores []float32) error {
	dh, T := a.dHead, a.T
	qStride, kvStride := a.heads*dh, a.kvHeads*dh
	kBase := b*T*kvStride + (h/(a.heads/a.kvHeads))*dh
	keys := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.k[kBase:]}
	at := hooks.AttnTile{Batch: b, Layer: a.layer, Head: h, T: T, DHead: dh, VStride: kvStride, V: a.v[kBase:]}
	for q0 := 0; q0 < T; q0 += tile {
		rows := min(tile, T-q0)
		ncol := q0 + rows
		s := blas32.General{Rows: rows, Cols: ncol, Stride: ncol, Data: scores[:rows*ncol]}
		qt := blas32.General{Rows: rows, Cols: dh, Stride: qStride, Data: a.q[(b*T+q0)*qStride+h*dh:]}
		kt := keys
		kt.Rows = ncol
		blas32.Gemm(blas.NoTrans, blas.Trans, a.scale, qt, kt, 0, s)
		for r := 0; r < rows; r++ {
			t := q0 + r
			row := s.Data[r*ncol : (r+1)*ncol]
			if a.logLamBar != nil {
				for j, lb := range a.logLamBar[b*T : b*T+t+1] {
					row[j] += lb
				}
			}
			if a.logRho != 0 {
				for j := 0; j <= t; j++ {
					row[j] += float32(float64(t-j) * a.logRho)
				}
			}
			softmaxRow(row[:t+1])
			clear(row[t+1:])
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
		if a.pattern == nil {
			for r := 0; r < rows; r++ {
				a.obs.row(worker, b, h, q0+r, s.Data[r*ncol:r*ncol+q0+r+1])
			}
		}
	}
	return nil
}

// bftObservePattern observes every row of a materialized [B, H, T, T]
// pattern (after its hook, so that an intervention reaches e and λobs).
func bftObservePattern(a *bftAttnArgs) error {
	T := a.T
	return forEachHead(a.batch, a.heads, threadCount(a.threads), func(w, b, h int) error {
		for t := 0; t < T; t++ {
			a.obs.row(w, b, h, t, a.pattern[((b*a.heads+h)*T+t)*T:][:t+1])
		}
		return nil
	})
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
