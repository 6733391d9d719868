package model

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model/internal/kern"
)

// PassBytes estimates the memory one forward pass of B sequences of T
// tokens with options opt needs beyond the weights, in bytes: the formula
// of docs/performance.md, "Peak memory" (float32 values, 4 bytes each;
// n = B·T):
//
//	n·(2d) + T·r                               x, h (the sub-blocks' output too); RoPE cos and sin
//	+ max(n·(H·dh + 2·KV·dh + H·g), mixers)    the arena: attention's q (then z), k, v, gate,
//	                                           or Gated DeltaNet's buffers (its scratchFloats)
//	+ min(n, blockRows)·a·d_ff                 MLP hidden values (a = 2 for SwiGLU, 1 for GELU),
//	                                           or the channel mixers' scratch (channelFloats)
//	+ n·d                                      the parallel layout's second sub-block input
//	+ P·T·(S + dh)                             each attention worker's scores and packed keys;
//	                                           P·T·(2S + 1.5·dh) for bf16 on AMX; + P·T·dh with
//	                                           streamed diagnostics (their moments' squares)
//	+ 2·n·Hv                                   Gated DeltaNet's β and g (Mamba-2: B·H·T² for a
//	                                           captured ssm.hook_eff_attn, 2·n·H·N for hooked B, C)
//	+ n·d                                      the output of a mixer beside attention (Falcon-H1)
//	+ G·q·min(n, 1024)·i/2                     the AMX products' packed activations: q = 3 parts
//	                                           for ComputeF32 on bf16 weights, 1 for bf16 products
//	                                           (on AMX only), i the widest projection input; kept
//	                                           for later passes (amxScratchFloats); off AMX, bf16
//	                                           products keep G super-blocks of packed rows
//	                                           instead (kern.BF16PackedXBytes, ≤ 64 MiB in all)
//	+ n·V or min(n, headRows)·V                logits: returned (or hooked), or streamed (LogitRows)
//	+ B·H·T²                                   the attention pattern, when hook_pattern is hooked
//
// with P the attention workers (Options.Threads), S the query rows a
// worker stacks into one product (query heads × tile rows) and G the
// goroutines a projection is split over (GOMAXPROCS). Diagnostics'
// results (a probes.Collector) are the caller's and not counted. ok is
// false for the research families with their own pass or token mixer
// (RT, RFA, BFT, AFA), which the formula does not describe.
func (m *Model) PassBytes(B, T int, opt Options) (bytes int64, ok bool) {
	if _, own := m.ext.(ownPass); own {
		return 0, false
	}
	for _, L := range m.Layers {
		_, gdn := L.mixer.(*deltaNet)
		_, ssm := L.mixer.(*ssmMixer)
		if L.mixer != nil && !gdn && !ssm {
			return 0, false
		}
	}
	c := &m.Config
	n := B * T
	D, H, KV, dh := c.DModel, c.Heads, c.KVHeads, c.DHead
	arena, attn := m.arenaFloats(B, T)
	floats := 2*n*D + arena + m.layerDataFloats(B, T)
	rdh := dh // the width of Config.RoPE's table
	if c.GlobalDHead > 0 {
		rdh = c.GlobalDHead
	}
	if attn {
		if m.PosEmbed == nil {
			if _, rot := m.ext.(qkRotator); !rot {
				floats += T * c.RoPE.dims(rdh)
				if c.LocalRoPE != nil {
					floats += T * c.LocalRoPE.dims(dh)
				}
			}
		} else {
			floats += n * D // GPT-2's positions
		}
	}
	gdn := 0
	side := 0
	for l, L := range m.Layers {
		if w, ok := L.mixer.(*deltaNet); ok {
			gdn = max(gdn, 2*n*w.Hv)
		}
		if L.beside != nil {
			side = n * D // the output of the mixer beside attention
		}
		if sc := c.SSM; sc != nil {
			k := 0
			if opt.Hooks.Has(hooks.Name(hooks.SSMEffAttn, l)) {
				k += B * sc.Heads * T * T // Mamba-2's captured effective attention
			}
			if opt.Hooks.Has(hooks.Name(hooks.SSMB, l)) || opt.Hooks.Has(hooks.Name(hooks.SSMC, l)) {
				k += 2 * n * sc.Heads * sc.State // B and C repeated per head for their hooks
			}
			gdn = max(gdn, k)
		}
	}
	floats += gdn + side
	floats += m.amxScratchFloats(n, opt)
	floats += m.channelFloats(B, T)
	if c.Residual == ResidualParallel {
		floats += n * D // the channel mixer's own input and output
	}
	if attn {
		P := threadCount(opt.Threads)
		tile := opt.TileRows
		if tile <= 0 {
			tile = defaultTileRows
		}
		for _, L := range m.Layers { // Gemma 4: the widest layer's heads
			dh = max(dh, L.DHead)
		}
		S := max(1, min(H/KV, maxStackRows/tile, B*H/P)) * tile
		w := S + dh
		if cmp.Or(opt.Compute, m.Compute) == ComputeBF16 && attnAMX() {
			w = 2*S + dh + dh/2
		}
		for l := range m.Layers {
			if len(opt.Hooks.Consumers(l)) > 0 {
				w += dh // the moments' squares (v − c)²
				break
			}
		}
		floats += P * T * w
		for l := range m.Layers {
			if opt.Hooks.Has(hooks.Name(hooks.AttnPattern, l)) {
				floats += B * H * T * T // one layer's at a time
				break
			}
		}
	}
	switch {
	case opt.Logits || opt.Hooks.Has(hooks.Logits):
		floats += n * c.Vocab
	case opt.LogitRows != nil:
		floats += blockSize(n, headRows) * c.Vocab
	}
	return 4 * int64(floats), true
}

// channelFloats is PassBytes' term for the channel mixers: the dense MLP's
// hidden values, min(n, blockRows)·a·d_ff with a = 2 for a gated MLP
// (SwiGLU's gate and up projections) and 1 otherwise, or the largest
// scratch of the layers' own channel mixers (Layer.ffn; a mixture of
// experts keeps its buffers for later passes, moeKept, as the AMX products
// keep theirs).
func (m *Model) channelFloats(B, T int) int {
	floats := 0
	for _, L := range m.Layers {
		if L.ffn != nil {
			floats = max(floats, L.ffn.scratchFloats(B, T))
			continue
		}
		a := 1
		if L.WGate.present() {
			a = 2
		}
		F := m.DMLP
		if L.WUp.Rows > 0 {
			F = L.WUp.Rows // Gemma 4's double-wide layers
		}
		f := blockSize(B*T, blockRows) * a * F
		if L.ffnBeside != nil {
			f += L.ffnBeside.scratchFloats(B, T) // beside the MLP's hidden values
		}
		floats = max(floats, f)
	}
	return floats
}

// layerDataFloats is PassBytes' term for the buffers of the per-layer
// slots (Gemma 4): the k and v kept for the layers that reuse them
// (Layer.KVFrom), the output of the mixers beside the MLP (n·D), and the
// per-layer inputs with one layer's branch (n·(L·P + P + D)).
func (m *Model) layerDataFloats(B, T int) int {
	c, n := &m.Config, B*T
	floats, side := 0, false
	kept := map[int]bool{}
	for _, L := range m.Layers {
		if L.KVFrom > 0 {
			kept[L.KVFrom-1] = true
		}
		side = side || L.ffnBeside != nil
	}
	for s := range kept {
		dh, kv := c.DHead, c.KVHeads
		if L := m.Layers[s]; L.DHead > 0 {
			dh, kv = L.DHead, L.KVHeads
		}
		floats += 2 * n * kv * dh
	}
	if side {
		floats += n * c.DModel
	}
	if _, ok := m.ext.(layerInputs); ok {
		floats += n * (c.Layers*c.PerLayerDim + c.PerLayerDim + c.DModel)
	}
	return floats
}

// amxScratchFloats is PassBytes' term for the AMX products' packed
// activations of a pass of n rows: G·q·min(n, 1024)·i/2, or off AMX for
// bf16 products G super-blocks of packed rows (kern.BF16PackedXBytes). kern keeps those
// buffers for the next products (one per P), so that the first pass
// allocates them and later passes reuse them.
func (m *Model) amxScratchFloats(n int, opt Options) int {
	c := &m.Config
	in := max(c.DModel, c.Heads*c.DHead, c.DMLP)
	if dc := c.DeltaNet; dc != nil {
		in = max(in, dc.ValueHeads*dc.ValueDim)
	}
	compute := cmp.Or(opt.Compute, m.Compute)
	q := m.amxParts(compute)
	if q == 0 {
		if compute.BF16Products() {
			return runtime.GOMAXPROCS(0) * kern.BF16PackedXBytes(n, in) / 4 // the VDPBF16PS products' super-blocks
		}
		return 0
	}
	return runtime.GOMAXPROCS(0) * q * min(n, amxRowsAtOnce) * in / 2
}

// axisSizes returns the size of every axis name hooks.Points uses, for a
// pass of c's model on B sequences of T tokens; the axes a model does not
// have (the Gated DeltaNet ones of a model without such layers, the
// experts' of a dense one) are absent.
func axisSizes(c *Config, B, T int) map[string]int {
	known := map[string]int{"batch": B, "pos": T, "query": T, "key": T, "d_model": c.DModel, "vocab": c.Vocab,
		"head": c.Heads, "kv_head": c.KVHeads, "d_head": c.DHead, "d_mlp": c.DMLP, "re_im": 2, "pair": c.DHead / 2}
	if dc := c.DeltaNet; dc != nil {
		known["v_head"], known["d_key"], known["d_value"] = dc.ValueHeads, dc.KeyDim, dc.ValueDim
	}
	if mc := c.MoE; mc != nil {
		known["expert"], known["top_k"] = mc.Experts, mc.TopK
	}
	// Gemma 4: the full-attention layers' heads, the double-wide MLPs, the
	// per-layer inputs
	if c.GlobalDHead > 0 {
		known["d_head_global"], known["kv_head_global"] = c.GlobalDHead, c.GlobalKVHeads
	}
	if c.DoubleWideMLP {
		known["d_mlp_wide"] = 2 * c.DMLP
	}
	if c.PerLayerDim > 0 {
		known["layer"], known["d_per_layer"] = c.Layers, c.PerLayerDim
	}
	if sc := c.SSM; sc != nil {
		known["ssm_head"], known["ssm_d_head"], known["d_state"], known["d_inner"] = sc.Heads, sc.HeadDim, sc.State, sc.Inner
		known["ssm_group"] = sc.Groups
	}
	return known
}

// PointBytes returns the bytes of the float32 value at the hook point name
// in a pass of B sequences of T tokens, from its documented shape
// (hooks.Shapes) and the configuration: what capturing it keeps. Where the
// registry documents several shapes (a per-head or elementwise gate) it is
// the largest this model's axes allow; 0 for a name not in the registry.
func (m *Model) PointBytes(name string, B, T int) int64 {
	known := axisSizes(&m.Config, B, T)
	var most int64
	for _, shape := range hooks.Shapes(name) {
		n, ok := int64(4), true
		for _, axis := range shape {
			v, has := known[axis]
			ok = ok && has
			n *= int64(v)
		}
		if ok {
			most = max(most, n)
		}
	}
	return most
}

// CheckMemory refuses a pass whose PassBytes, plus extra bytes the caller
// allocates for it beforehand (a Collector's results, for a check before
// they exist), exceed the memory the machine (and the process's cgroup,
// e.g. a Slurm job's) has available: an error before the pass allocates, in
// place of an out-of-memory crash or kill part way through it. Memory the
// Go heap holds but no longer uses (an earlier pass's) is returned first
// when the estimate does not fit. Every pass of Forward checks itself
// (extra 0); a command of many passes can check its longest at the start.
// No check where the available memory cannot be read (outside Linux), for
// the families PassBytes does not describe, under 256 MiB, or with
// Model.NoMemoryCheck.
func (m *Model) CheckMemory(B, T int, opt Options, extra int64) error {
	if m.NoMemoryCheck {
		return nil
	}
	need, ok := m.PassBytes(B, T, opt)
	need += extra
	if !ok || need < 256<<20 {
		return nil
	}
	avail, from := availableMemory()
	if avail < 0 || need <= avail {
		return nil
	}
	debug.FreeOSMemory() // a collection, and the freed pages back to the OS
	if avail, from = availableMemory(); need <= avail {
		return nil
	}
	return fmt.Errorf("model: a pass of %d × %d tokens needs about %s beyond the weights (docs/performance.md, \"Peak memory\"), "+
		"but only %s are available (%s): use fewer tokens, or --memory-check=false (Model.NoMemoryCheck) to run it anyway",
		B, T, gib(need), gib(avail), from)
}

// gib formats a byte count in GiB.
func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }

// availableMemory returns the bytes this process can still allocate and
// where that figure comes from (procAvailable; tests replace it).
var availableMemory = procAvailable

// AvailableMemory returns the memory CheckMemory compares a pass with, in
// bytes, and where the figure comes from; −1 where it cannot be read.
func AvailableMemory() (int64, string) { return availableMemory() }

// procAvailable is the smaller of /proc/meminfo's MemAvailable and what
// the process's cgroup memory limit leaves (cgroupAvailable); −1 where
// neither can be read.
func procAvailable() (int64, string) {
	if runtime.GOOS != "linux" {
		return -1, ""
	}
	avail, from := int64(-1), ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, ok := statField(b, "MemAvailable:"); ok {
			avail, from = kb<<10, "MemAvailable in /proc/meminfo"
		}
	}
	if cg, dir := cgroupAvailable("/proc/self/cgroup", "/sys/fs/cgroup"); cg >= 0 && (avail < 0 || cg < avail) {
		avail, from = cg, "the memory limit of cgroup "+dir+" less its usage, page cache excepted"
	}
	return avail, from
}

// cgroupAvailable is the memory the process's cgroup limit leaves, read
// from the cgroup file self (/proc/self/cgroup) and the hierarchy under
// root: limit − usage + page cache (the cache, the mapped weights' pages
// among it, is reclaimed before the limit kills; MemAvailable counts it
// too). cgroup v2: memory.max, memory.current and memory.stat's file; v1:
// memory.limit_in_bytes, memory.usage_in_bytes and memory.stat's
// total_cache. −1 without a limit or where the files cannot be read.
func cgroupAvailable(self, root string) (int64, string) {
	b, err := os.ReadFile(self)
	if err != nil {
		return -1, ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile, usageFile, cacheField string
		switch {
		case parts[0] == "0" && parts[1] == "": // v2
			dir, limitFile, usageFile, cacheField = filepath.Join(root, parts[2]), "memory.max", "memory.current", "file"
		case slices.Contains(strings.Split(parts[1], ","), "memory"): // v1
			dir, limitFile, usageFile, cacheField = filepath.Join(root, "memory", parts[2]), "memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache"
		default:
			continue
		}
		limit, err1 := readCgroupInt(filepath.Join(dir, limitFile))
		used, err2 := readCgroupInt(filepath.Join(dir, usageFile))
		if err1 != nil || err2 != nil || limit < 0 || limit >= 1<<60 { // v1 writes "no limit" as a huge number
			continue
		}
		var cache int64
		if st, err := os.ReadFile(filepath.Join(dir, "memory.stat")); err == nil {
			cache, _ = statField(st, cacheField+" ")
		}
		return max(0, limit-used+cache), dir
	}
	return -1, ""
}

// statField returns the integer after the line prefix name in a
// /proc/meminfo or memory.stat text (a unit such as "kB" dropped).
func statField(b []byte, name string) (int64, bool) {
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readCgroupInt reads a cgroup file holding a byte count, or "max" (−1).
func readCgroupInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
