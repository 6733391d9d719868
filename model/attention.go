package model

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model/internal/kern"
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

	// softcap is the attention logit soft-cap c (0: off): each visible
	// scaled score s becomes c·tanh(s/c) before the softmax. Like the
	// window it is a parameter of softmaxTile and of its row kernels.
	softcap float32

	// sinks are the learned sink logits s_h of the query heads ([heads];
	// nil: none), gpt-oss's extra softmax column: every row of head h is
	// the softmax over its keys and s_h, with the s_h column dropped, so
	// that it sums to 1 − σ (the sink mass; softmaxRowStats). The logit is
	// used as it is (no scale, no soft-cap); −Inf is no sink for that
	// head. Each row's σ goes to the consumers (hooks.AttnTile.Sink) and,
	// when hooked, to blocks.{l}.attn.hook_sink_mass (sinkMass).
	sinks []float32

	// bf16 rounds k and v to bfloat16 in place and q as it is read
	// (ComputeBF16): the scores and α·v are then sums of exact products
	// of bf16 values, on AMX where the CPU has it (attendGroup).
	bf16 bool

	q, k, v, z []float32

	consumers []hooks.AttnConsumer
	pattern   []float32 // [B, H, T, T] when the pattern is hooked, else nil
	sinkMass  []float32 // [B, H, T] when there are sinks and hook_sink_mass is hooked, else nil
	tileRows  int
	threads   int

	// A filter family's own math in the tile loop (RT, AFA, RFA, BFT; all
	// nil for softmax attention). logits turns the scaled products s of a
	// tile (rows × ncol, row r is query t = q0+r of head h, batch b) into
	// the family's logits for the keys j ≤ t in place, before the causal
	// softmax; w is the worker (< threadCount(threads), for the family's
	// per-worker scratch) and lg a float64 scratch row of T. decay[h][n],
	// when set, scales the weight of the key n tokens back before the
	// weights multiply v (AFA, RFA: the values get α ⊙ E, which
	// hook_pattern_decayed shows). observe, when set, takes each row of
	// weights in place of z = α·v (BFT's observation step). stream, when
	// set, gets every tile after the consumers (RFA's RFAConsumers).
	logits  logitsFunc
	decay   [][]float64
	observe func(w, b, h, t int, alpha []float32)
	stream  func(w int, at *hooks.AttnTile) error

	// work, when set, keeps the workers' scratch from layer to layer of
	// one pass (nil: headWorkPool only).
	work *workList
}

// A logitsFunc is a filter family's logits in the tile loop (attnArgs).
type logitsFunc func(w int, lg []float64, b, h, q0, rows, ncol int, s []float32)

// causalAttention computes z = softmax(cap(q·kᵀ·scale) + causal mask)·v for
// every (batch, head) (cap: s ↦ c·tanh(s/c) with c = a.softcap, or the
// identity when it is 0), one tile of query rows at a time, so memory stays
// O(tileRows·T) per worker. The query heads that share a KV head (grouped-
// query attention) are stacked into one matrix product per tile, so that
// the keys and values are packed once for all of them. Each head's tile
// goes to the consumers before it is multiplied by v; consumers that
// implement hooks.MomentsConsumer get the tile's moments, computed here with one
// float32 matrix product per head and tile, or with none beyond α·v when
// they all need only Σ_i S_i (hooks.SumOnlyConsumer; see hooks.AttnMoments). Consumers only
// observe: the output is the same, bit for bit, with or without them.
// Query head h reads KV head h / (H/KV).
func causalAttention(a *attnArgs) error {
	if err := checkSinks(a.sinks, a.heads); err != nil {
		return err
	}
	if a.bf16 {
		roundBF16(a.k)
		roundBF16(a.v)
	}
	type job struct{ b, kvh, j0, j1 int } // batch, KV head, its query heads j0 … j1−1 (within the group)
	jobs := make(chan job)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	threads := threadCount(a.threads)
	tile := a.tileRows
	if tile <= 0 {
		tile = defaultTileRows
	}
	// Query heads per matrix product: up to the group, at most
	// maxStackRows rows, and small enough to leave every worker a job.
	group := a.heads / a.kvHeads
	stack := max(1, min(group, maxStackRows/tile, a.batch*a.heads/threads))
	var plain []hooks.AttnConsumer
	var moments []hooks.MomentsConsumer
	// A filter family streams rows only: the moments are the softmax
	// attention's offer (probes' filter collectors wrap a Collector and
	// read the rows).
	filter := a.logits != nil || a.decay != nil || a.observe != nil
	for _, c := range a.consumers {
		if mc, ok := c.(hooks.MomentsConsumer); ok && !filter {
			moments = append(moments, mc)
		} else {
			plain = append(plain, c)
		}
	}
	sumOnly := len(moments) > 0
	for _, mc := range moments {
		if so, ok := mc.(hooks.SumOnlyConsumer); !ok || !so.MomentsSumOnly() {
			sumOnly = false
		}
	}
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hw := a.work.get(stack*tile, a.T, a.dHead, len(moments) > 0)
			if hw.mw != nil {
				hw.mw.sum = sumOnly
			}
			defer a.work.put(hw)
			hw.plain, hw.moments, hw.worker = plain, moments, w
			for j := range jobs {
				if err := attendGroup(a, j.b, j.kvh, j.j0, j.j1, tile, hw); err != nil {
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
		for kvh := 0; kvh < a.kvHeads; kvh++ {
			for j0 := 0; j0 < group; j0 += stack {
				jobs <- job{b, kvh, j0, min(j0+stack, group)}
			}
		}
	}
	close(jobs)
	wg.Wait()
	return firstErr
}

// defaultTileRows is the number of query rows per attention tile when
// Options.TileRows is 0, and maxStackRows the most rows (query heads ×
// tile rows) one matrix product of causalAttention stacks
// (BenchmarkAttentionTile compares sizes).
const (
	defaultTileRows = 64
	maxStackRows    = 256
)

// headWork is one attention worker's scratch and consumers.
type headWork struct {
	worker  int       // the worker's index (attnArgs.logits)
	scores  []float32 // [heads·tile, T]
	qp, zp  []float32 // [heads·tile, dh]: packed queries and outputs
	lg      []float64 // [T]: a filter family's scratch row (attnArgs.logits)
	sink    []float32 // [heads·tile]: the rows' sink mass (attnArgs.sinks)
	panels  []panelProduct
	kpack   []float32       // the head's keys packed once (packKT)
	kb, vb  kern.PackedBF16 // the head's keys and values packed once for AMX (attnArgs.bf16)
	plain   []hooks.AttnConsumer
	moments []hooks.MomentsConsumer
	mw      *momentsWork // nil without moments consumers
}

// headWorkPool keeps the workers' scratch between layers and passes (a
// worker's score and weight buffers are n·T floats: megabytes at long T).
var headWorkPool sync.Pool

// A workList holds the attention workers' scratch for the length of one
// pass. headWorkPool alone drops what it holds at every other collection,
// and a long pass collects between its softmax layers (a hybrid model's
// other layers make garbage too), so the workers made their buffers again
// in every layer: hundreds of megabytes per layer at 128k, garbage that let
// the heap grow to the collector's goal. The pass hands its list back to
// headWorkPool when it ends (release), so idle scratch still goes at the
// next collections. A nil *workList uses headWorkPool directly.
type workList struct {
	mu   sync.Mutex
	free []*headWork
}

// get returns scratch for n stacked query rows of T keys and head
// dimension dh, with moments scratch when moments is set.
func (l *workList) get(n, T, dh int, moments bool) *headWork {
	var hw *headWork
	if l != nil {
		l.mu.Lock()
		if k := len(l.free); k > 0 {
			hw, l.free = l.free[k-1], l.free[:k-1]
		}
		l.mu.Unlock()
	}
	if hw == nil {
		hw, _ = headWorkPool.Get().(*headWork)
	}
	if hw == nil {
		hw = &headWork{}
	}
	hw.scores = grow(hw.scores, n*T)
	hw.qp = grow(hw.qp, n*dh)
	hw.zp = grow(hw.zp, n*dh)
	hw.lg = grow(hw.lg, T)
	hw.sink = grow(hw.sink, n)
	if !moments {
		hw.mw = nil
	} else if hw.mw == nil || !hw.mw.fits(n, T, dh) {
		hw.mw = newMomentsWork(n, T, dh)
	}
	return hw
}

// put takes hw back, without its consumers.
func (l *workList) put(hw *headWork) {
	hw.plain, hw.moments = nil, nil
	if l == nil {
		headWorkPool.Put(hw)
		return
	}
	l.mu.Lock()
	l.free = append(l.free, hw)
	l.mu.Unlock()
}

// release hands the list's scratch to headWorkPool at the end of a pass.
func (l *workList) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, hw := range l.free {
		headWorkPool.Put(hw)
	}
	l.free = nil
}

// grow returns x with length n, reusing its storage when large enough.
func grow[E any](x []E, n int) []E {
	if cap(x) >= n {
		return x[:n]
	}
	return make([]E, n)
}

// attendGroup runs the query heads kvh·group + j0 … kvh·group + j1−1 of
// batch entry b, which share KV head kvh, in tiles of query rows. Rows are
// stacked head-major: row j·rows + r of a tile is head j0+j, query q0+r.
func attendGroup(a *attnArgs, b, kvh, j0, j1, tile int, hw *headWork) error {
	dh, T := a.dHead, a.T
	qStride, kvStride := a.heads*dh, a.kvHeads*dh
	h0 := kvh*(a.heads/a.kvHeads) + j0
	nh := j1 - j0
	kBase := b*T*kvStride + kvh*dh
	keys := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.k[kBase:]}
	vals := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.v[kBase:]}
	at := hooks.AttnTile{Batch: b, Layer: a.layer, T: T, DHead: dh, VStride: kvStride, V: a.v[kBase:]}
	mw := hw.mw
	if mw != nil {
		mw.setValues(a.v[kBase:], kvStride)
	}
	// bf16 on AMX: the keys, and the values as Vᵀ for the split product
	// (finite values only: AMX multiplies the values of keys a tile cannot
	// see by its zero weights), packed once for all the tiles
	amx := a.bf16 && attnAMX()
	amxV := amx && finiteRows(a.v[kBase:], kvStride, dh, 0, T)
	if amx {
		kern.PackRowsBF16(&hw.kb, a.k[kBase:], kvStride, T, dh)
	}
	if amxV {
		kern.PackColsSplit(&hw.vb, a.v[kBase:], kvStride, T, dh)
	}
	prepacked := gemmKT != nil && dh <= maxKTDepth && !amx
	if prepacked {
		hw.kpack = packKT(hw.kpack, a.k[kBase:], kvStride, T, dh)
	}

	for q0 := 0; q0 < T; q0 += tile {
		rows := min(tile, T-q0)
		ncol := q0 + rows // keys 0..q0+rows−1 are visible to some row of the tile
		n := nh * rows
		for j := 0; j < nh; j++ {
			for r := 0; r < rows; r++ {
				copy(hw.qp[(j*rows+r)*dh:(j*rows+r+1)*dh], a.q[(b*T+q0+r)*qStride+(h0+j)*dh:][:dh])
			}
		}
		s := blas32.General{Rows: n, Cols: ncol, Stride: ncol, Data: hw.scores[:n*ncol]}
		if a.bf16 && !amx {
			roundBF16(hw.qp[:n*dh]) // k and v are rounded already (causalAttention)
		}
		if amx {
			kern.GemmPacked(n, ncol, dh, hw.qp[:n*dh], dh, &hw.kb, s.Data, ncol)
			scaleTile(s.Data, a.scale)
		} else if prepacked {
			gemmKT(n, ncol, dh, a.scale, hw.qp[:n*dh], dh, hw.kpack, s.Data, ncol)
		} else {
			kt := keys
			kt.Rows = ncol
			blas32.Gemm(blas.NoTrans, blas.Trans, a.scale, blas32.General{Rows: n, Cols: dh, Stride: dh, Data: hw.qp[:n*dh]}, kt, 0, s)
		}

		var norms []float32 // G = α·‖v − c‖² in the softmax's last pass
		if mw != nil && mw.sum {
			norms = mw.squares(q0, tile, ncol, T)
		}
		for j := 0; j < nh; j++ {
			sj := s.Data[j*rows*ncol : (j+1)*rows*ncol]
			if a.logits != nil {
				a.logits(hw.worker, hw.lg, b, h0+j, q0, rows, ncol, sj)
			}
			o := j * rows
			sink, sm := noSink, []float32(nil)
			if a.sinks != nil {
				sink, sm = a.sinks[h0+j], hw.sink[o:o+rows]
			}
			if mw == nil {
				softmaxTile(sj, rows, ncol, q0, a.window, a.softcap, sink, sm, nil, nil, nil, nil, nil)
			} else {
				softmaxTile(sj, rows, ncol, q0, a.window, a.softcap, sink, sm, mw.s1[o:o+rows], mw.s2[o:o+rows], mw.ent[o:o+rows],
					norms, mw.gs[o:o+rows])
			}
			if a.pattern != nil {
				for r := 0; r < rows; r++ {
					t := q0 + r
					copy(a.pattern[((b*a.heads+h0+j)*T+t)*T:][:t+1], sj[r*ncol:r*ncol+t+1])
				}
			}
			if a.sinkMass != nil {
				copy(a.sinkMass[(b*a.heads+h0+j)*T+q0:][:rows], sm)
			}
		}
		// zp = α·v: the output, and e for the moments; G = α·(v − c)² for
		// the moments, in the same sweep over the weights where the build
		// can (gemmPanels), else by a second product per head.
		// (A family that decays the weights or observes the rows forms its
		// output after the consumers: here α·v only serves the moments.)
		zp := blas32.General{Rows: n, Cols: dh, Stride: dh, Data: hw.zp[:n*dh]}
		finiteV := finiteRows(a.v[kBase:], kvStride, dh, q0, ncol)
		later := a.decay != nil || a.observe != nil
		fused := !amxV && mw != nil && !mw.sum && finiteV && gemmPanels != nil && dh%32 == 0 && dh <= gemmDirectN
		switch {
		case amxV && ((a.pattern == nil && !later) || mw != nil):
			// α split in two bf16 parts (to 16 bits) times the bf16 values
			kern.GemmPacked(n, dh, ncol, s.Data, ncol, &hw.vb, hw.zp[:n*dh], dh)
			if mw != nil && !mw.sum {
				mw.gProduct(0, n, ncol, s.Data, mw.squares(q0, tile, ncol, T))
			}
		case fused: // all stacked heads in one sweep: they share v and the shift c
			sq := mw.squares(q0, tile, ncol, T)
			ps := hw.panels[:0]
			for i := 0; i < dh; i += 32 {
				ps = append(ps,
					panelProduct{B: a.v[kBase+i:], LDB: kvStride, C: hw.zp[i:], LDC: dh},
					panelProduct{B: sq[i:], LDB: dh, C: mw.g[i:], LDC: dh})
			}
			clear(hw.zp[:n*dh])
			clear(mw.g[:n*dh])
			gemmPanels(n, ncol, s.Data, ncol, ps)
			hw.panels = ps
		case (a.pattern == nil && !later) || mw != nil:
			tileTimesV(s, vals, q0, rows, finiteV, zp)
			if mw != nil && !mw.sum {
				mw.gProduct(0, n, ncol, s.Data, mw.squares(q0, tile, ncol, T))
			}
		}
		finite := true
		if mw != nil {
			for j := 0; j < nh; j++ {
				if !mw.finish(j*rows, rows, ncol, s.Data[j*rows*ncol:(j+1)*rows*ncol], hw.zp[j*rows*dh:(j+1)*rows*dh]) {
					finite = false
				}
			}
			if finite {
				mw.keepShift(hw.zp, n)
			}
		}
		for j := 0; j < nh; j++ {
			at.Head, at.Q0, at.Rows, at.Stride, at.Alpha = h0+j, q0, rows, ncol, s.Data[j*rows*ncol:(j+1)*rows*ncol]
			if a.sinks != nil {
				at.Sink = hw.sink[j*rows : (j+1)*rows]
			}
			for _, c := range hw.plain {
				if err := c.ConsumeAttn(&at); err != nil {
					return err
				}
			}
			if a.stream != nil {
				if err := a.stream(hw.worker, &at); err != nil {
					return err
				}
			}
			if len(hw.moments) == 0 {
				continue
			}
			o := j * rows
			am := &mw.moments
			*am = hooks.AttnMoments{Tile: &at, SumAlpha: mw.s1[o : o+rows], SumSq: mw.s2[o : o+rows], Entropy: mw.ent[o : o+rows],
				E: mw.e[o*dh : (o+rows)*dh]}
			if mw.sum {
				am.SSum = mw.ss[o : o+rows]
			} else {
				am.S = mw.s[o*dh : (o+rows)*dh]
			}
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
		if a.observe != nil {
			for i := 0; i < n; i++ {
				t := q0 + i%rows
				a.observe(hw.worker, b, h0+i/rows, t, s.Data[i*ncol:i*ncol+t+1])
			}
			continue
		}
		if a.decay != nil {
			for i := 0; i < n; i++ {
				t, E := q0+i%rows, a.decay[h0+i/rows]
				row := s.Data[i*ncol : i*ncol+t+1]
				for j := range row {
					row[j] = float32(float64(row[j]) * E[t-j])
				}
			}
			tileTimesV(s, vals, q0, rows, finiteV, zp)
		}
		for j := 0; j < nh; j++ {
			for r := 0; r < rows; r++ {
				copy(a.z[(b*T+q0+r)*qStride+(h0+j)*dh:][:dh], hw.zp[(j*rows+r)*dh:(j*rows+r+1)*dh])
			}
		}
	}
	return nil
}

// attnAMX reports whether the bf16 attention runs on AMX (a variable so
// that a test can run the other path on an AMX machine).
var attnAMX = kern.HasAMX

// roundBF16 rounds each x to the nearest bfloat16 (kern.RoundBF16), in
// place.
func roundBF16(x []float32) {
	for i, v := range x {
		x[i] = math.Float32frombits(uint32(kern.RoundBF16(v)) << 16)
	}
}

// scaleTile multiplies each x by s in float32 (16 lanes where the CPU has
// them, kern_amd64.go).
var scaleTile = func(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

// finiteRows reports whether the value vectors j0 … j1−1 (V[j·stride :
// j·stride+dh]) hold only finite numbers.
func finiteRows(V []float32, stride, dh, j0, j1 int) bool {
	for j := j0; j < j1; j++ {
		if firstNonFinite(V[j*stride:j*stride+dh]) >= 0 {
			return false
		}
	}
	return true
}

// tileTimesV computes zp = α·v for a tile of weights s (rows stacked as in
// attendGroup): one product where the tile's values vals are finite, else
// causalTimesV.
func tileTimesV(s, vals blas32.General, q0, rows int, finite bool, zp blas32.General) {
	if finite {
		gemmNarrow(s.Rows, zp.Cols, s.Cols, s.Data, s.Stride, vals.Data, vals.Stride, zp.Data, zp.Stride)
	} else {
		causalTimesV(s, vals, q0, rows, zp)
	}
}

// causalTimesV computes zp = α·v for a tile whose diagonal block of values
// (keys q0 … q0+rows−1) is not finite, without reading a value its row
// cannot see: one product over the keys before q0, which every row sees,
// then row by row over keys q0 … t. (The one-product path would multiply
// the zero weights of future keys by their NaN/Inf values, and the error
// would point at an earlier query than the faulty token.) Rows are stacked
// as in attendGroup: row i is query q0 + i mod rows.
func causalTimesV(s, vals blas32.General, q0, rows int, zp blas32.General) {
	dh := zp.Cols
	if q0 > 0 {
		past, vp := s, vals
		past.Cols, vp.Rows = q0, q0
		blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, past, vp, 0, zp)
	} else {
		clear(zp.Data[:zp.Rows*dh])
	}
	for i := 0; i < s.Rows; i++ {
		t := q0 + i%rows
		z := zp.Data[i*dh : (i+1)*dh]
		for j := q0; j <= t; j++ {
			aj := s.Data[i*s.Stride+j]
			for d, v := range vals.Data[j*vals.Stride : j*vals.Stride+dh] {
				z[d] += aj * v
			}
		}
	}
}

// softmaxTile turns the rows × ncol scores s of the query rows q0 …
// q0+rows−1 into attention weights in place: row r (query t = q0+r) gets
// the softmax of its keys max(0, t−window+1) … t (window 0: keys 0 … t)
// and of the head's sink column, and 0 elsewhere (softmaxRowStats: with a
// sink logit the row sums to 1 − σ_r, the sink mass, which goes to sm[r]
// when sm is not nil; sink −Inf: no sink). With softcap c > 0 each of
// those scores x first becomes c·tanh(x/c) (capLogits, Gemma 2's attention
// logit soft-cap; the C tile uses the same roundings with the C library's
// tanh); softcap 0 leaves them as they are; the sink logit is never
// capped. With s1 non-nil it also writes each row's Σα, Σα² and entropy
// −Σα log α of the returned weights into s1, s2 and ent
// (softmaxRowStats); with w non-nil (and s1) also g[r] = Σ_j α_rj w_j, the
// weights times a vector w of the keys (the moments' G = Σα‖v − c‖² when
// only Σ_i S_i is asked for, hooks.SumOnlyConsumer). The OpenBLAS build
// replaces it with a C kernel on CPUs with AVX2 but without AVX-512.
var softmaxTile = softmaxTileGo

// softmaxTileGo is softmaxTile row by row with softmaxRowStats.
func softmaxTileGo(s []float32, rows, ncol, q0, window int, softcap, sink float32, sm []float32, s1, s2, ent []float64, w []float32, g []float64) {
	for r := 0; r < rows; r++ {
		t := q0 + r
		row := s[r*ncol : (r+1)*ncol]
		lo := 0
		if window > 0 && t-window+1 > 0 {
			lo = t - window + 1
		}
		clear(row[t+1:]) // causal mask; the P·V product reads these
		var mass float32
		switch {
		case s1 == nil:
			_, _, _, _, mass = softmaxRowStats(row[:t+1], lo, softcap, sink, false, nil)
		case w == nil:
			s1[r], s2[r], ent[r], _, mass = softmaxRowStats(row[:t+1], lo, softcap, sink, true, nil)
		default:
			s1[r], s2[r], ent[r], g[r], mass = softmaxRowStats(row[:t+1], lo, softcap, sink, true, w)
		}
		if sm != nil {
			sm[r] = mass
		}
	}
}

// capLogits replaces each x of xs by c·tanh(x/c), Gemma 2's logit
// soft-cap, with PyTorch's float32 roundings: x/c in float32, its tanh
// (math.Tanh of the float64, rounded), times c in float32.
func capLogits(xs []float32, c float32) {
	for i, x := range xs {
		xs[i] = float32(math.Tanh(float64(x/c))) * c
	}
}

// patternTimesV computes z = pattern·v for every (batch, head) from a
// materialized [B, H, T, T] pattern (used when hook_pattern is hooked, so
// that an intervention on the pattern reaches the output). Where some value
// vector is NaN/Inf, keys of weight exactly 0 are left out of the sum (as
// causalTimesV leaves out future keys), so that a fault reaches only the
// queries that attend to it and is reported at the first of them.
func patternTimesV(a *attnArgs) {
	dh, T := a.dHead, a.T
	qStride, kvStride := a.heads*dh, a.kvHeads*dh
	for b := 0; b < a.batch; b++ {
		for h := 0; h < a.heads; h++ {
			kvh := h / (a.heads / a.kvHeads)
			p := blas32.General{Rows: T, Cols: T, Stride: T, Data: a.pattern[(b*a.heads+h)*T*T:]}
			vv := blas32.General{Rows: T, Cols: dh, Stride: kvStride, Data: a.v[b*T*kvStride+kvh*dh:]}
			zz := blas32.General{Rows: T, Cols: dh, Stride: qStride, Data: a.z[b*T*qStride+h*dh:]}
			if finiteRows(vv.Data, kvStride, dh, 0, T) {
				blas32.Gemm(blas.NoTrans, blas.NoTrans, 1, p, vv, 0, zz)
				continue
			}
			for t := 0; t < T; t++ {
				z := zz.Data[t*qStride : t*qStride+dh]
				clear(z)
				for j, w := range p.Data[t*T : (t+1)*T] {
					if w == 0 {
						continue
					}
					for i, x := range vv.Data[j*kvStride : j*kvStride+dh] {
						z[i] += w * x
					}
				}
			}
		}
	}
}

// attend runs causalAttention on a with the layer's pattern materialized
// when blocks.{l}.attn.hook_pattern (or, for a family whose values get
// decayed weights, hook_pattern_decayed) is hooked: the pattern then goes
// through its hook (decayed by a.decay and through hook_pattern_decayed),
// and the output is formed from what the hooks leave, so that a change
// there reaches it (patternTimesV, or a.observe on every row).
func attend(a *attnArgs, hs *hooks.Set, run hookRun) error {
	patName := hooks.Name(hooks.AttnPattern, a.layer)
	decName := hooks.Name(hooks.AttnPatternDecayed, a.layer)
	B, H, T := a.batch, a.heads, a.T
	if hs.Has(patName) || (a.decay != nil && hs.Has(decName)) {
		a.pattern = make([]float32, B*H*T*T)
	}
	if a.sinks != nil && hs.Has(hooks.Name(hooks.AttnSinkMass, a.layer)) {
		a.sinkMass = make([]float32, B*H*T)
	}
	if err := causalAttention(a); err != nil {
		return fmt.Errorf("model: layer %d attention: %w", a.layer, err)
	}
	if a.sinks != nil {
		// observation only: the weights are formed, the sink column dropped
		run(hooks.AttnSinkMass, a.layer, a.sinkMass, B, H, T)
	}
	if a.pattern == nil {
		return nil
	}
	run(hooks.AttnPattern, a.layer, a.pattern, B, H, T, T)
	if a.decay != nil {
		decayPattern(a)
		run(hooks.AttnPatternDecayed, a.layer, a.pattern, B, H, T, T)
	}
	if a.observe == nil {
		patternTimesV(a)
		return nil
	}
	return forEachHead(B, H, a.threads, func(w, b, h int) error {
		for t := 0; t < T; t++ {
			a.observe(w, b, h, t, a.pattern[((b*H+h)*T+t)*T:][:t+1])
		}
		return nil
	})
}

// checkSinks refuses sink logits that are not one per query head, or that
// are NaN or +Inf (−Inf is a head without a sink).
func checkSinks(sinks []float32, heads int) error {
	if sinks == nil {
		return nil
	}
	if len(sinks) != heads {
		return fmt.Errorf("self_attn.sinks holds %d sink logits, want one per query head (%d)", len(sinks), heads)
	}
	for h, s := range sinks {
		if s != s || math.IsInf(float64(s), 1) {
			return fmt.Errorf("self_attn.sinks: the sink logit of head %d is %v (want a finite number, or −Inf for no sink)", h, s)
		}
	}
	return nil
}

// decayPattern scales a materialized pattern [B, H, T, T] in place to the
// weights the values get: α_tj·E_h(t−j), E_h = a.decay[h].
func decayPattern(a *attnArgs) {
	H, T := a.heads, a.T
	for b := 0; b < a.batch; b++ {
		for h, E := range a.decay {
			for t := 0; t < T; t++ {
				row := a.pattern[((b*H+h)*T+t)*T:][:t+1]
				for j := range row {
					row[j] = float32(float64(row[j]) * E[t-j])
				}
			}
		}
	}
}

// forEachHead calls fn(worker, b, h) for every (batch, head) pair on a pool
// of threadCount(threads) workers and returns the first error; worker
// indexes per-worker scratch.
func forEachHead(batch, heads, threads int, fn func(worker, b, h int) error) error {
	threads = threadCount(threads)
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

// threadCount resolves Options.Threads: n, or GOMAXPROCS when n ≤ 0.
func threadCount(n int) int {
	if n <= 0 {
		return runtime.GOMAXPROCS(0)
	}
	return n
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
