package model

import (
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
	"gorgonia.org/tensor"
)

// procStatusBytes reads a field (VmRSS, VmHWM) of /proc/self/status in bytes.
func procStatusBytes(t *testing.T, field string) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if kb, ok := statField(data, field+":"); ok {
		return kb << 10
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

// TestPeakMemoryFormula checks PassBytes (the formula of
// docs/performance.md) against the peak RSS of
// forward passes of a Qwen3-layout model at T = 1k … 8k, of a gated one
// (whose gate adds H values per token) and of a Qwen3.5 hybrid (Gated
// DeltaNet and softmax layers sharing the arena) and of a Mixtral (a
// mixture of experts' scratch, moeLayer.scratchFloats) at 4k, and of the Qwen3
// layout stored in bf16 at 1k and 4k (its float32 products on AMX, whose
// packed activations kern keeps from the earlier passes: the formula less
// that term; that they stay kept across collections, rather than grow the
// peak with T, is kern.TestAMXBuffersKept), each within 10 %
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
		dtype   string // stored: F32, or BF16 (on AMX its products' packed activations count)
	}{{ArchQwen3, []int{1024, 2048, 4096, 8192}, "F32"}, {ArchGated, []int{4096}, "F32"}, {ArchQwen35, []int{4096}, "F32"},
		{ArchQwen3, []int{1024, 4096}, "BF16"}, {ArchMixtral, []int{4096}, "F32"}} {
		cfg, err := SmallConfig(tc.arch, Size{Layers: 2, DModel: 256, Heads: 2, KVHeads: 1, Vocab: 512, MaxPos: 8192})
		if err != nil {
			t.Fatal(err)
		}
		m, tensors, err := Generate(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		if tc.dtype != "F32" {
			if m, err = Load(writeStored(t, cfg, tensors, tc.dtype), LoadOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var xs, ys []float64 // T and measured bytes beyond one MLP block
		for _, T := range tc.lengths {
			ids := seqs(1, T, m.Vocab)
			got := min(passPeak(t, m, ids, Options{Threads: workers}), passPeak(t, m, ids, Options{Threads: workers})) // noise only adds
			want, _ := m.PassBytes(1, T, Options{Threads: workers})
			want -= 4 * int64(m.amxScratchFloats(T, Options{})) // kept from the earlier passes: in the base
			want -= 4 * int64(moeKeptFloats(m, T))              // so are the experts' buffers (moeKept)
			t.Logf("%s %s T=%d: peak %.1f MiB over the weights, formula %.1f MiB", tc.arch, tc.dtype, T, float64(got)/(1<<20), float64(want)/(1<<20))
			if d := got - want; d > want/10+4<<20 || -d > want/10+4<<20 {
				t.Errorf("%s %s T=%d: the pass peaked %.1f MiB over the weights, the formula says %.1f MiB", tc.arch, tc.dtype, T, float64(got)/(1<<20), float64(want)/(1<<20))
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
		b2, _ := m.PassBytes(1, 2*blockRows, Options{Threads: workers})
		b1, _ := m.PassBytes(1, blockRows, Options{Threads: workers})
		want := float64(b2-b1) / float64(blockRows)
		t.Logf("%s: %.0f bytes per token measured, %.0f by the formula", tc.arch, slope, want)
		if slope > 1.1*want || slope < 0.9*want {
			t.Errorf("%s: the peak grows by %.0f bytes per token, the formula by %.0f", tc.arch, slope, want)
		}
	}
}

// moeKeptFloats is the largest scratch of m's mixture-of-experts layers
// for a pass of T tokens: buffers kept from an earlier pass of at least T
// tokens (moeKept), which passPeak's base already holds.
func moeKeptFloats(m *Model, T int) int {
	n := 0
	for _, L := range m.Layers {
		if e, ok := L.ffn.(*moeLayer); ok {
			n = max(n, e.scratchFloats(1, T))
		}
	}
	return n
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

// TestListingReadsNoWeights: listing the hook points (HookNames, which
// every hooked pass calls first) reads no weight matrix, so that a pass
// reading a few layers of a mapped 8B checkpoint does not first make all
// of it resident: with every matrix of the blocks and the head emptied
// (their values gone, their shapes kept) the listing gives the same names.
func TestListingReadsNoWeights(t *testing.T) {
	eachFamily(t, 3, func(t *testing.T, gen func() *Model) {
		m := gen()
		if _, own := m.ext.(ownPass); own || m.Arch == ArchAFA {
			t.Skip("a research family's own pass or token mixer computes its products itself")
		}
		want, err := m.HookNames()
		if err != nil {
			t.Fatal(err)
		}
		empty := func(w *Weight) { w.F32, w.Bits = nil, nil }
		m = gen()
		for l := range m.Layers {
			L := &m.Layers[l]
			for _, w := range []*Weight{&L.Wq, &L.Wk, &L.Wv, &L.Wo, &L.Wg, &L.WGate, &L.WUp, &L.WDown} {
				empty(w)
			}
		}
		empty(&m.Head)
		got, err := m.HookNames()
		if err != nil {
			t.Fatalf("listing with the matrices emptied: %v", err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("listing with the matrices emptied: %d names, want %d", len(got), len(want))
		}
	})
}

// TestAttentionScratchKept: the attention workers of a pass keep their
// scratch from layer to layer (workList) although collections run between
// the layers and empty headWorkPool: a second layer, after two
// collections, runs on the same workers' scratch (the same score buffers),
// in float32 and in bf16 (on AMX also the packed keys and values and α·v's
// packed weights, kern.GemmPacked). Counting bytes allocated instead is not
// exact enough: the kernels' pools make fixed-size buffers again after a
// collection, one per worker or two depending on timing.
func TestAttentionScratchKept(t *testing.T) {
	const B, T, H, KV, dh, workers = 1, 2048, 4, 2, 64, 2
	rng := rand.New(rand.NewPCG(61, 62))
	q, k, v := randn32(rng, B*T*H*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0), randn32(rng, B*T*KV*dh, 1, 0)
	for _, bf16 := range []bool{false, true} {
		work := new(workList)
		layer := func() {
			a := &attnArgs{batch: B, T: T, heads: H, kvHeads: KV, dHead: dh, scale: 0.125, bf16: bf16,
				q: slices.Clone(q), k: slices.Clone(k), v: slices.Clone(v), z: make([]float32, B*T*H*dh), threads: workers, work: work}
			if err := causalAttention(a); err != nil {
				t.Fatal(err)
			}
		}
		scratch := func() map[*headWork]*float32 {
			m := map[*headWork]*float32{}
			for _, hw := range work.free {
				m[hw] = &hw.scores[0]
			}
			return m
		}
		layer()
		first := scratch()
		if len(first) != workers {
			t.Fatalf("bf16=%v: %d workers' scratch in the list after a layer, want %d", bf16, len(first), workers)
		}
		runtime.GC()
		runtime.GC()
		layer()
		if second := scratch(); !maps.Equal(first, second) {
			t.Errorf("bf16=%v: the second layer's scratch %v is not the first's %v", bf16, second, first)
		}
		work.release()
		if len(work.free) != 0 {
			t.Errorf("bf16=%v: %d workers' scratch left in the list after release", bf16, len(work.free))
		}
	}
}

// TestMemoryCheck: a pass whose PassBytes exceed the available memory is
// refused before it allocates, with an error that gives both figures and
// the way out; the attention pattern's B·H·T² counts when it is hooked;
// the caller's extra bytes count; Model.NoMemoryCheck, and passes that
// fit, go through; and this
// machine's available memory reads as a positive figure on Linux.
func TestMemoryCheck(t *testing.T) {
	cfg, err := SmallConfig(ArchQwen3, Size{Layers: 2, DModel: 256, Heads: 2, KVHeads: 1, Vocab: 512, MaxPos: 1024})
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Generate(cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	avail := availableMemory
	defer func() { availableMemory = avail }()
	availableMemory = func() (int64, string) { return 1 << 30, "the test's figure" }

	const T = 1 << 20 // 6 GiB of activations at 6 KiB per token: refused before any of it is made
	opt := Options{AllowExtrapolation: true, Threads: 2}
	need, ok := m.PassBytes(1, T, opt)
	if !ok || need < 4<<30 {
		t.Fatalf("PassBytes(1, %d) = %d, %v: want several GiB", T, need, ok)
	}
	_, err = m.Forward(seqs(1, T, m.Vocab), opt)
	if err == nil {
		t.Fatalf("a pass needing %s went ahead with 1 GiB available", gib(need))
	}
	for _, want := range []string{gib(need), "1.00 GiB are available (the test's figure)", "--memory-check=false"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	m.NoMemoryCheck = true
	if err := m.CheckMemory(1, T, opt, 0); err != nil {
		t.Errorf("with NoMemoryCheck: %v", err)
	}
	m.NoMemoryCheck = false
	if err := m.CheckMemory(1, 1024, opt, 0); err != nil {
		t.Errorf("a pass of 1024 tokens: %v", err)
	}
	if err := m.CheckMemory(1, 1024, opt, 2<<30); err == nil {
		t.Errorf("a pass of 1024 tokens with 2 GiB of the caller's (extra) went ahead with 1 GiB available")
	}

	// hook_pattern: B·H·T² floats, 2 GiB at T = 16k with 2 heads
	hs := &hooks.Set{}
	hs.Add(hooks.Name(hooks.AttnPattern, 1), func(string, int, *tensor.Dense) error { return nil })
	plain, _ := m.PassBytes(1, 16384, opt)
	opt.Hooks = hs
	hooked, _ := m.PassBytes(1, 16384, opt)
	if d := hooked - plain; d != 4*2*16384*16384 {
		t.Errorf("hook_pattern adds %d bytes to PassBytes at T = 16384, want %d", d, 4*2*16384*16384)
	}
	if err := m.CheckMemory(1, 16384, opt, 0); err == nil {
		t.Errorf("a pass with hook_pattern at T = 16384 (%s) went ahead with 1 GiB available", gib(hooked))
	}

	if runtime.GOOS == "linux" {
		if got, from := avail(); got <= 0 || from == "" {
			t.Errorf("available memory on this machine: %d bytes from %q", got, from)
		} else {
			t.Logf("available: %s (%s)", gib(got), from)
		}
	}
}

// TestCgroupAvailable: the memory a cgroup limit leaves is limit − usage +
// page cache, read from cgroup v2 (memory.max, memory.current, memory.stat
// file) or v1 (memory.limit_in_bytes, memory.usage_in_bytes, memory.stat
// total_cache) files; no limit ("max", or v1's huge number) and unreadable
// files give −1.
func TestCgroupAvailable(t *testing.T) {
	write := func(dir string, files map[string]string) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name, self string
		files      map[string]string // under root/<dir>
		dir        string
		want       int64
	}{
		{"v2", "0::/job_7/step_0\n", map[string]string{"memory.max": "8589934592\n", "memory.current": "6442450944\n",
			"memory.stat": "anon 4294967296\nfile 1073741824\nkernel 1\n"}, "job_7/step_0", 3 << 30},
		{"v2 no limit", "0::/\n", map[string]string{"memory.max": "max\n", "memory.current": "1\n"}, "", -1},
		{"v1", "12:pids:/x\n4:memory:/slurm/uid_0/job_9\n0::/\n", map[string]string{"memory.limit_in_bytes": "4294967296\n",
			"memory.usage_in_bytes": "4000000000\n", "memory.stat": "cache 5\ntotal_cache 100000000\n"}, "memory/slurm/uid_0/job_9", 4294967296 - 4000000000 + 100000000},
		{"v1 no limit", "4:memory:/\n", map[string]string{"memory.limit_in_bytes": "9223372036854771712\n", "memory.usage_in_bytes": "1\n"}, "memory", -1},
		{"usage above the limit", "0::/a\n", map[string]string{"memory.max": "100\n", "memory.current": "200\n"}, "a", 0},
		{"unreadable", "0::/none\n", nil, "", -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			self := filepath.Join(root, "self-cgroup")
			if err := os.WriteFile(self, []byte(c.self), 0o644); err != nil {
				t.Fatal(err)
			}
			if c.files != nil {
				write(filepath.Join(root, c.dir), c.files)
			}
			got, dir := cgroupAvailable(self, root)
			if got != c.want || (got >= 0 && dir != filepath.Join(root, c.dir)) {
				t.Errorf("cgroupAvailable = %d (%s), want %d (%s)", got, dir, c.want, filepath.Join(root, c.dir))
			}
		})
	}
}
