package model

import (
	"bytes"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"testing"
)

// peakPassBytes is the peak memory of the decoder pass (forward) over its
// weights, for one sequence of T tokens without logits or hooks and with
// `workers` attention workers — the formula of docs/performance.md, "Peak
// memory", in float32 values:
//
//	T·(2d + r)                                 x, h (the sub-blocks' output too); RoPE cos and sin
//	+ max(T·(H·dh + 2·KV·dh + H·g),            the arena: attention's q (then z), k, v, gate,
//	      T·Hv·(2·Dk + Dv)                     or Gated DeltaNet's q (then output), k, v
//	      + (K − 1 + 2·min(T, blockRows))·C)   (T·2·Hv·(Dk + Dv) where Dk ≠ Dv: output apart),
//	                                           convolution window and block
//	+ min(T, blockRows)·a·d_ff                 MLP hidden values (a = 2 for SwiGLU, 1 for GELU)
//	+ P·(S·T + T·dh)                           each attention worker's scores and packed keys
//	+ 2·T·Hv                                   Gated DeltaNet's β and g
//
// with g the output gate's values per head (0, 1 or dh), r the rotary
// dimensions (twice for Gemma 3's local RoPE), P the workers, S the query
// rows a worker stacks into one product (query heads × tile rows), and
// Gated DeltaNet's Hk, Hv heads of Dk, Dv, conv kernel K, C = 2·Hk·Dk +
// Hv·Dv (its terms 0 in a model without such layers).
func peakPassBytes(m *Model, T, workers int) int64 {
	c := &m.Config
	d, H, KV, dh := c.DModel, c.Heads, c.KVHeads, c.DHead
	r := c.RoPE.dims(dh)
	if c.LocalRoPE != nil {
		r += c.LocalRoPE.dims(dh)
	}
	a := 2 // SwiGLU's gate and up projections
	if c.Arch == ArchGPT2 {
		a = 1
	}
	stack := max(1, min(H/KV, maxStackRows/defaultTileRows, H/workers))
	S, R := stack*defaultTileRows, min(T, blockRows)
	arena, gdn := 0, 0
	for _, L := range m.Layers {
		if w, ok := L.mixer.(*deltaNet); ok {
			block := (w.K - 1 + 2*R) * (2*w.Hk*w.Dk + w.Hv*w.Dv)
			if w.Dk == w.Dv {
				arena = max(arena, T*w.Hv*(2*w.Dk+w.Dv)+block)
			} else {
				arena = max(arena, T*2*w.Hv*(w.Dk+w.Dv)+block)
			}
			gdn = max(gdn, 2*T*w.Hv)
		} else {
			arena = max(arena, T*(H*dh+2*KV*dh+H*c.GatePerHead()))
		}
	}
	floats := T*(2*d+r) + arena + R*a*c.DMLP + workers*(S*T+T*dh) + gdn
	return 4 * int64(floats)
}

// procStatusBytes reads a field (VmRSS, VmHWM) of /proc/self/status in bytes.
func procStatusBytes(t *testing.T, field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(field+":")); ok {
			kb, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// passPeak returns how far the process's peak RSS rose above its RSS
// before one forward pass of m on ids: the kernel's VmHWM, reset through
// /proc/self/clear_refs, after the collector returned every free page
// (three cycles: the attention workers' pooled scratch goes in two).
func passPeak(t *testing.T, m *Model, ids [][]int, opt Options) int64 {
	runtime.GC()
	runtime.GC()
	debug.FreeOSMemory()
	base := procStatusBytes(t, "VmRSS")
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS (/proc/self/clear_refs): %v", err)
	}
	if _, err := m.Forward(ids, opt); err != nil {
		t.Fatal(err)
	}
	return procStatusBytes(t, "VmHWM") - base
}

// TestPeakMemoryFormula checks peakPassBytes against the peak RSS of
// forward passes of a Qwen3-layout model at T = 1k … 8k, of a gated one
// (whose gate adds H values per token) and of a Qwen3.5 hybrid (Gated
// DeltaNet and softmax layers sharing the arena) at 4k, each within 10 %
// + 4 MiB (the runtime's own pages), and the growth per token, fitted over
// the lengths beyond one MLP block, within 10 % of the formula's: linear in
// T, with no T×d_ff buffer (that would add 6 KiB per token here); each
// the smaller of two passes, as the collector's timing only adds. The
// collector runs at GOGC = 1 so that the heap holds what is live, not its
// headroom.
func TestPeakMemoryFormula(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peak RSS is read from /proc/self (Linux)")
	}
	if testing.Short() {
		t.Skip("forward passes up to T = 8192")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(1))
	const workers = 2
	for _, tc := range []struct {
		arch    Arch
		lengths []int
	}{{ArchQwen3, []int{1024, 2048, 4096, 8192}}, {ArchGated, []int{4096}}, {ArchQwen35, []int{4096}}} {
		cfg, err := SmallConfig(tc.arch, Size{Layers: 2, DModel: 256, Heads: 2, KVHeads: 1, Vocab: 512, MaxPos: 8192})
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := Generate(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		var xs, ys []float64 // T and measured bytes beyond one MLP block
		for _, T := range tc.lengths {
			ids := seqs(1, T, m.Vocab)
			got := min(passPeak(t, m, ids, Options{Threads: workers}), passPeak(t, m, ids, Options{Threads: workers})) // noise only adds
			want := peakPassBytes(m, T, workers)
			t.Logf("%s T=%d: peak %.1f MiB over the weights, formula %.1f MiB", tc.arch, T, float64(got)/(1<<20), float64(want)/(1<<20))
			if d := got - want; d > want/10+4<<20 || -d > want/10+4<<20 {
				t.Errorf("%s T=%d: the pass peaked %.1f MiB over the weights, the formula says %.1f MiB", tc.arch, T, float64(got)/(1<<20), float64(want)/(1<<20))
			}
			if T >= blockRows {
				xs, ys = append(xs, float64(T)), append(ys, float64(got))
			}
		}
		if len(xs) < 2 {
			continue
		}
		var mx, my, sxy, sxx float64
		for i := range xs {
			mx, my = mx+xs[i]/float64(len(xs)), my+ys[i]/float64(len(xs))
		}
		for i := range xs {
			sxy += (xs[i] - mx) * (ys[i] - my)
			sxx += (xs[i] - mx) * (xs[i] - mx)
		}
		slope := sxy / sxx
		want := float64(peakPassBytes(m, 2*blockRows, workers)-peakPassBytes(m, blockRows, workers)) / float64(blockRows)
		t.Logf("%s: %.0f bytes per token measured, %.0f by the formula", tc.arch, slope, want)
		if slope > 1.1*want || slope < 0.9*want {
			t.Errorf("%s: the peak grows by %.0f bytes per token, the formula by %.0f", tc.arch, slope, want)
		}
	}
}

// procRssFile is this process's resident file-mapped memory in bytes.
func procRssFile(t *testing.T) int64 { return procStatusBytes(t, "RssFile") }

// TestEmbeddingReleased: after a pass without logits over a mapped bf16
// checkpoint, the token embedding's pages are out of the resident set
// (checkpoint.Releaser), though its rows were read, in every arithmetic
// (with --compute bf16 the stored bf16 weights stay mapped too); the
// pass's results are unchanged by the release (two passes, and a pass with
// logits, which maps the tied head again).
func TestEmbeddingReleased(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("resident file pages are read from /proc/self (Linux)")
	}
	cfg, err := SmallConfig(ArchQwen3, Size{Layers: 1, DModel: 256, Heads: 2, KVHeads: 1, Vocab: 65536, MaxPos: 4096})
	if err != nil {
		t.Fatal(err)
	}
	cfg.DType = "bfloat16"
	_, dir := writeGenerated(t, cfg, 3)
	for _, cmp := range []Compute{ComputeF32, ComputeBF16, ComputeBF16Proj} {
		m, err := Load(dir, LoadOptions{Compute: cmp})
		if err != nil {
			t.Fatal(err)
		}
		if m.Embed.release == nil {
			t.Fatalf("compute %s: the embedding of a mapped bf16 checkpoint has no release", cmp)
		}
		embed := int64(2 * m.Embed.Rows * m.Embed.Cols) // 32 MiB
		ids := seqs(1, 4096, m.Vocab)                   // rows all over the table
		base := procRssFile(t)
		first, err := m.Forward(ids, Options{Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := m.Forward(ids, Options{}); err != nil {
				t.Fatal(err)
			}
			if got := procRssFile(t) - base; got > embed/2 {
				t.Errorf("compute %s: after a pass without logits %d bytes of mapped files are resident, more than half the %d-byte embedding", cmp, got, embed)
			}
		}
		again, err := m.Forward(ids, Options{Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(first.Logits, again.Logits) {
			t.Errorf("compute %s: logits changed after the embedding's pages were released", cmp)
		}
	}
}

// TestAttentionScratchKept: the attention workers of a pass keep their
// scratch from layer to layer (workList) although collections run between
// the layers and empty headWorkPool, in float32 and in bf16 (on AMX also
// the packed keys and values and α·v's packed weights, kern.GemmPacked):
// what a second layer allocates does not grow with T (from 1024 to 4096
// tokens by less than a quarter of one worker's scores; the kernels' own
// pools hold fixed-size buffers). Without a list it grows by the workers'
// scratch (the premise of the test).
func TestAttentionScratchKept(t *testing.T) {
	const B, H, KV, dh, workers = 1, 4, 2, 64, 2
	rng := rand.New(rand.NewPCG(61, 62))
	layer := func(T int, bf16 bool, work *workList) int64 {
		q, k, v := randn32(rng, B*T*H*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0)
		a := &attnArgs{batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: 0.125, bf16: bf16,
			q: q, k: k, v: v, z: make([]float32, B*T*H*dh), threads: workers, work: work}
		runtime.GC()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := causalAttention(a); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return int64(after.TotalAlloc - before.TotalAlloc)
	}
	const T0, T1 = 1024, 4096
	scores := int64(4 * (T1 - T0) * defaultTileRows * (H / KV)) // one worker's scores, T0 to T1
	for _, bf16 := range []bool{false, true} {
		var kept, pooled [2]int64
		for i, T := range []int{T0, T1} {
			work := new(workList)
			layer(T, bf16, work)
			kept[i] = layer(T, bf16, work)
			work.release()
			pooled[i] = layer(T, bf16, nil)
		}
		t.Logf("bf16=%v: a second layer allocated %d → %d bytes with a workList, %d → %d without (T = %d → %d)",
			bf16, kept[0], kept[1], pooled[0], pooled[1], T0, T1)
		if d := kept[1] - kept[0]; d > scores/4 {
			t.Errorf("bf16=%v: a pass's second layer allocated %d bytes more at T = %d than at %d: its scratch was made again", bf16, d, T1, T0)
		}
		if d := pooled[1] - pooled[0]; d < workers*scores {
			t.Errorf("bf16=%v: without a workList a layer after two collections allocated only %d bytes more at T = %d than at %d: headWorkPool kept the scratch, so this test checks nothing", bf16, d, T1, T0)
		}
	}
}
