package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// benchResult is the one JSON object probe bench prints.
type benchResult struct {
	TokensPerS float64 `json:"tokens_per_s"` // T / Seconds
	Seconds    float64 `json:"seconds"`      // best forward pass of the reps
	// CPUSeconds is the user + system CPU seconds (getrusage) of the
	// pass Seconds times, steadier than wall time on a loaded machine.
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSMiB float64 `json:"peak_rss_mib"` // peak resident set of the process (VmHWM), loading included
	Threads    int     `json:"threads"`      // attention workers: --threads, default GOMAXPROCS (projections always split over GOMAXPROCS)
	// LoadSeconds is model.Load: config.json, opening the checkpoint,
	// reading (or mapping) every weight. Weights mapped from the file are
	// read from disk by the first pass, so open to the end of the first
	// forward pass is LoadSeconds + FirstPassSeconds.
	LoadSeconds      float64 `json:"load_seconds"`
	FirstPassSeconds float64 `json:"first_pass_seconds"` // the first forward pass (counted in Seconds too when it is the fastest)
	WeightMiB        float64 `json:"weight_mib"`         // the weights as the model holds them (model.Model.WeightBytes): 2 bytes per BF16/F16 value kept as stored, 4 per float32 one
	// HeapMiB is the Go heap in use after loading (after a collection):
	// weights copied from the checkpoint are here, weights mapped from
	// it are not (they are resident as file pages, shared with the page
	// cache and other processes mapping the same file).
	HeapMiB float64 `json:"heap_mib"`
	// ProductsKernel is the kernel of the matrix products
	// (model.Model.ProductKernel): with --compute bf16 amx, avx512_bf16 or
	// go; with f32 the float32 kernels (gonum+avx512, openblas), after
	// amx-split3/ where bf16 weights are multiplied on AMX.
	ProductsKernel string `json:"products_kernel"`
	// PassEstimateMiB is the pass's memory beyond the weights as
	// model.Model.PassBytes estimates it (docs/performance.md, "Peak
	// memory"; absent for the research families with their own pass or
	// token mixer), and
	// DiagnosticsMiB the diagnostics' results (probes.Collector), allocated
	// before the passes.
	PassEstimateMiB float64 `json:"pass_estimate_mib,omitempty"`
	DiagnosticsMiB  float64 `json:"diagnostics_mib,omitempty"`
	// Blocks is how many of the model's blocks the timed pass runs, and
	// LastBlockHeadsOnly whether it runs the last of them only through
	// its attention heads (model.Model.Reach: the diagnostics read nothing
	// after them, so the pass skips that block's o_proj and MLP).
	Blocks             int  `json:"blocks"`
	LastBlockHeadsOnly bool `json:"last_block_heads_only"`
	// Resident (--resident) is, after the passes, how much of each group
	// of mapped weights this process holds (residentTensors).
	Resident []residentGroup `json:"resident,omitempty"`
}

// BenchOptions are the options of probe bench.
type BenchOptions struct {
	cmdIO
	Model         modelFlag
	Input         tokenFlags // instead of random ids: the first Tokens of them, all when TokensGiven is false
	Tokens        int        // sequence length T
	TokensGiven   bool       // --tokens was given (with Input: cut the ids to Tokens)
	Reps          int
	NoDiagnostics bool
	Kernel        string
	Reductions    string
	Seed          uint64 // of the random tokens
	Threads, Tile int
	CPUProfile    string
	Modes         string
	Resident      bool // report which mapped weights are resident after the passes
	// ThroughLayer, when ≥ 0, stops the timed plain pass after block
	// ThroughLayer (its MLP and hook_resid_post included): a no-op reader
	// of that block's hook_resid_post makes model.Model.Reach end there.
	// It times "the pass up to layer L", against which probe explore's
	// rows (which stop after layer L's heads) are measured. -1: every block.
	ThroughLayer int
}

// flags declares the flags of probe bench into f and their relations.
func (o *BenchOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	cmd.PreRun = func(c *cobra.Command, _ []string) { o.TokensGiven = c.Flags().Changed("tokens") }
	o.Model.registerModel(f, "checkpoint")
	f.IntVar(&o.Tokens, "tokens", 1024, "sequence length T (one batch of T random tokens)")
	f.IntVar(&o.Reps, "reps", 3, "forward passes; the fastest is reported")
	f.BoolVar(&o.NoDiagnostics, "no-diagnostics", false, "plain forward pass, no attention consumer")
	f.StringVar(&o.Kernel, "kernel", probes.MatrixKernel.String(), "where the diagnostics' row moments come from: matrix (the attention pass's matrix products) or rows (probes.Collector row by row); see probes.Kernel")
	f.StringVar(&o.Reductions, "reductions", defaultReductions.String(), "reductions of S over the head dimension: mean (λobs and K from S̄, reduction (i)) or all (also (ii) per-dimension mean and (iii) harmonic, which need S per dimension); see probes.Reductions")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the random tokens")
	o.Input.registerInput(f, false)
	threadsVar(f, &o.Threads)
	tileVar(f, &o.Tile)
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the timed passes to this file (go tool pprof)")
	f.StringVar(&o.Modes, "modes", "", "compare consumers in one run: comma-separated of "+strings.Join(benchModes, ", ")+", or all (every one the model has layers for); forward is always included, each rep runs every mode once in rotating order, and one JSON object gives each mode's best wall and CPU seconds, peak RSS and overhead vs forward")
	f.BoolVar(&o.Resident, "resident", false, "after the passes, report per tensor (per-expert tensors of a layer together) how much of the memory-mapped weights is resident in this process (Linux /proc/self/pagemap) and how many tensors or experts were touched")
	f.IntVar(&o.ThroughLayer, "through-layer", -1, "with --no-diagnostics: time the pass through blocks 0 … L only (block L whole, no logits), as if nothing read further; -1: every block")
	markRequired(cmd, "model", modelHint)
	cmd.MarkFlagsMutuallyExclusive("ids", "text")
}

// runBench runs probe bench: one batch of T random (seeded) tokens through
// the model, --reps times, with every App. I diagnostic streaming on every
// layer unless --no-diagnostics (results discarded), and prints one JSON
// object (benchResult). Loading is timed apart from the passes
// (load_seconds, first_pass_seconds); the peak RSS is the whole process's.
// scripts/bench/compare.sh runs it beside PyTorch (docs/performance.md).
func runBench(opts *BenchOptions) error {
	red, err := opts.check()
	if err != nil {
		return err
	}
	dir, err := opts.Model.dir()
	if err != nil {
		return err
	}
	tLoad := time.Now()
	m, err := model.Load(dir, opts.Model.loadOptions())
	if err != nil {
		return err
	}
	if L := opts.ThroughLayer; L >= len(m.Layers) {
		return fmt.Errorf("--through-layer %d: the model has layers 0 … %d", L, len(m.Layers)-1)
	}
	res := benchResult{LoadSeconds: time.Since(tLoad).Seconds(), WeightMiB: float64(m.WeightBytes) / (1 << 20)}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapMiB = float64(ms.HeapAlloc) / (1 << 20)
	res.ProductsKernel = m.ProductKernel(m.Compute)
	ids, err := opts.ids(dir, m.Config.Vocab)
	if err != nil {
		return err
	}
	T := len(ids)
	opt := model.Options{AllowExtrapolation: true, Threads: opts.Threads, TileRows: opts.Tile}
	res.Threads = opts.Threads
	if res.Threads <= 0 {
		res.Threads = runtime.GOMAXPROCS(0)
	}
	stopProfile, err := startCPUProfile(opts.CPUProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	kernel, _ := probes.ParseKernel(opts.Kernel)
	// as probe sweep and probe diag: a model with learned sinks (gpt-oss)
	// keeps each row's sink mass beside the diagnostics
	copts := probes.CollectorOptions{Kernel: kernel, Reductions: red, Sinks: analysis.HasSinks(m)}
	resident := func() ([]residentGroup, error) { return nil, nil }
	if opts.Resident {
		resident = func() ([]residentGroup, error) { return residentTensors(dir) }
	}
	if opts.Modes != "" {
		return benchCompare(opts.Stdout, m, ids, opt, opts.Modes, opts.Reps, benchModesResult{Tokens: T, Threads: res.Threads, Reps: opts.Reps,
			LoadSeconds: res.LoadSeconds, WeightMiB: res.WeightMiB, HeapMiB: res.HeapMiB}, copts, resident)
	}
	if res.DiagnosticsMiB, err = opts.passHooks(m, T, &opt, copts); err != nil {
		return err
	}
	if err := benchPasses(&res, m, ids, opt, opts.Reps); err != nil {
		return err
	}
	if res.Resident, err = resident(); err != nil {
		return err
	}
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(opts.Stdout, string(out))
	return err
}

// passHooks sets the hooks of the timed passes in opt and returns the
// diagnostics' memory (MiB). Unless --no-diagnostics every diagnostic of
// the App. I protocol streams on every layer (n_eff, S, λobs and K in the
// --reductions asked for, BOS mass, ‖e‖, gates, the sink mass of a model
// with sinks), as probe sweep computes them, from a Collector allocated
// once, outside the timed passes; with --through-layer L the pass stops
// after block L's hook_resid_post, after which nothing is read.
func (opts *BenchOptions) passHooks(m *model.Model, T int, opt *model.Options, copts probes.CollectorOptions) (float64, error) {
	if L := opts.ThroughLayer; L >= 0 {
		opt.Hooks = &hooks.Set{}
		opt.Hooks.Add(hooks.Name(hooks.ResidPost, L), func(string, int, *tensor.Dense) error { return nil })
		return 0, nil
	}
	if opts.NoDiagnostics {
		return 0, nil
	}
	if err := probes.CheckModelMemory(m, 1, T, *opt, copts); err != nil {
		return 0, err
	}
	col, err := probes.NewModelCollector(1, &m.Config, T, copts)
	if err != nil {
		return 0, err
	}
	opt.Hooks = col.Hooks(&m.Config)
	return mib(col.Bytes()), nil
}

// check refuses the flag values and combinations that cannot run, and
// returns --reductions parsed.
func (opts *BenchOptions) check() (probes.Reductions, error) {
	switch {
	case opts.Tokens <= 0:
		return 0, fmt.Errorf("--tokens %d: want a positive length", opts.Tokens)
	case opts.Reps <= 0:
		return 0, fmt.Errorf("--reps %d: want at least 1", opts.Reps)
	case !validKernel(opts.Kernel):
		return 0, fmt.Errorf("--kernel %q: want %s or %s", opts.Kernel, probes.MatrixKernel, probes.RowKernel)
	case opts.Modes != "" && opts.NoDiagnostics:
		return 0, fmt.Errorf("--modes includes the plain forward pass (forward); drop --no-diagnostics")
	case opts.ThroughLayer < -1:
		return 0, fmt.Errorf("--through-layer %d: want a layer ≥ 0, or -1 for every block", opts.ThroughLayer)
	case opts.ThroughLayer >= 0 && !opts.NoDiagnostics:
		return 0, fmt.Errorf("--through-layer %d times a plain pass (the diagnostics read every layer): add --no-diagnostics", opts.ThroughLayer)
	}
	red, ok := probes.ParseReductions(opts.Reductions)
	if !ok {
		return 0, fmt.Errorf("--reductions %q: want %s or %s", opts.Reductions, probes.MeanReduction, probes.AllReductions)
	}
	return red, nil
}

// ids returns the tokens of the timed passes: those of --ids or --text
// (cut to --tokens when it is given), or --tokens random ids from --seed.
func (opts *BenchOptions) ids(dir string, vocab int) ([]int, error) {
	in := opts.Input
	if in.IDs == "" && in.Text == "" {
		rng := rand.New(rand.NewPCG(opts.Seed, 0x9e3779b97f4a7c15))
		ids := make([]int, opts.Tokens)
		for i := range ids {
			ids[i] = rng.IntN(vocab)
		}
		return ids, nil
	}
	var ids []int
	var err error
	if in.IDs != "" {
		ids, err = readIDStream(in.IDs)
	} else {
		ids, err = readText(dir, in.Tokenizer, in.Text, 0, false)
	}
	if err != nil {
		return nil, err
	}
	src := inputName(in.IDs + in.Text)
	if opts.TokensGiven {
		if len(ids) < opts.Tokens {
			return nil, fmt.Errorf("%s: %d tokens, fewer than --tokens %d", src, len(ids), opts.Tokens)
		}
		ids = ids[:opts.Tokens]
	}
	for i, id := range ids {
		if id < 0 || id >= vocab {
			return nil, fmt.Errorf("%s: id %d at position %d is outside the vocabulary [0, %d)", src, id, i, vocab)
		}
	}
	return ids, nil
}

// startCPUProfile starts a CPU profile into path ("": none) and returns
// the function that stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// benchPasses times reps passes of ids into res: the fastest (Seconds),
// the first, tokens per second and the peak RSS, with the pass's
// estimate and reach.
func benchPasses(res *benchResult, m *model.Model, ids []int, opt model.Options, reps int) error {
	T := len(ids)
	if b, ok := m.PassBytes(1, T, opt); ok {
		res.PassEstimateMiB = mib(b)
	}
	res.Blocks, res.LastBlockHeadsOnly = m.Reach(opt)
	for r := 0; r < reps; r++ {
		// Collect the previous pass's buffers first (not timed), so that the
		// peak RSS is that of one pass whatever --reps is.
		runtime.GC()
		t0, c0 := time.Now(), cpuSeconds()
		if _, err := m.Forward([][]int{ids}, opt); err != nil {
			return err
		}
		s := time.Since(t0).Seconds()
		if r == 0 {
			res.FirstPassSeconds = s
		}
		if r == 0 || s < res.Seconds {
			res.Seconds, res.CPUSeconds = s, cpuSeconds()-c0
		}
	}
	res.TokensPerS = float64(T) / res.Seconds
	res.PeakRSSMiB = peakRSSMiB()
	return nil
}

// defaultReductions is the reductions probe sweep and probe bench store by
// default (probe diag always stores all: its CSV has K_dim_mean).
const defaultReductions = probes.MeanReduction

func validKernel(s string) bool { _, ok := probes.ParseKernel(s); return ok }

// peakRSSMiB returns the peak resident set size of this process in MiB:
// VmHWM from /proc/self/status, or getrusage's ru_maxrss where /proc is
// missing.
func peakRSSMiB() float64 {
	if f, err := os.Open("/proc/self/status"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				fields := strings.Fields(rest) // "123456 kB"
				if kb, err := strconv.ParseFloat(fields[0], 64); err == nil && len(fields) == 2 && fields[1] == "kB" {
					return kb / 1024
				}
			}
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		return float64(ru.Maxrss) / 1024 // kilobytes on Linux
	}
	return 0
}

// benchModes are the consumers probe bench --modes compares, in the order
// they run within a rep: none (forward), the App. I Collector of probe
// sweep (sweep), probe gdn's default set (gdn: gain, forgetting,
// innovation, state norm) and with the W-row statistics (gdn-w-rows),
// probe sinks' SinkCollector and gate statistics (sinks), and probe
// massive's top-k and median of every residual stream (massive: its plain
// pass; each intervention is one more forward pass); and, for models with
// Mamba-2 mixers, the plain pass with the step-by-step recurrence in place
// of the chunked scan (ssm-recurrent: model.Options.SSMScan −1), whose
// ratio to forward is the chunked scan's gain on the whole model.
var benchModes = []string{"forward", "ssm-recurrent", "sweep", "gdn", "gdn-w-rows", "sinks", "massive"}

// benchModeFits says whether mode applies to a model of configuration c:
// the gdn modes need recurrent mixers, ssm-recurrent Mamba-2 ones.
func benchModeFits(mode string, c *model.Config) bool {
	switch {
	case strings.HasPrefix(mode, "gdn"):
		return c.DeltaNet != nil || c.SSM != nil || c.RWKV7 != nil
	case mode == "ssm-recurrent":
		return c.SSM != nil
	}
	return true
}

// benchModesResult is the one JSON object probe bench --modes prints.
type benchModesResult struct {
	Tokens      int     `json:"tokens"`
	Threads     int     `json:"threads"`
	Reps        int     `json:"reps"`
	LoadSeconds float64 `json:"load_seconds"`
	WeightMiB   float64 `json:"weight_mib"`
	HeapMiB     float64 `json:"heap_mib"`
	PeakRSSMiB  float64 `json:"peak_rss_mib"` // the whole process's
	// RSSPerMode says whether each mode's peak_rss_mib is its own (the
	// kernel's peak counter reset before each pass through
	// /proc/self/clear_refs, after returning freed memory to the OS) or,
	// where that is not possible, the process's peak so far.
	RSSPerMode bool            `json:"peak_rss_per_mode"`
	Modes      []benchMode     `json:"modes"`
	Resident   []residentGroup `json:"resident,omitempty"` // as benchResult's
}

// benchMode is one mode's line of benchModesResult.
type benchMode struct {
	Mode          string  `json:"mode"`
	Seconds       float64 `json:"seconds"`        // best wall-clock forward pass of the reps
	MedianSeconds float64 `json:"median_seconds"` // median of the reps
	CPUSeconds    float64 `json:"cpu_seconds"`    // best user + system CPU seconds of a pass (getrusage), steadier than wall time on a loaded machine
	TokensPerS    float64 `json:"tokens_per_s"`   // tokens / seconds
	Overhead      float64 `json:"overhead"`       // seconds / forward's seconds − 1
	CPUOverhead   float64 `json:"cpu_overhead"`   // cpu_seconds / forward's − 1
	PeakRSSMiB    float64 `json:"peak_rss_mib"`   // peak resident set over this mode's passes (see peak_rss_per_mode)
}

// parseBenchModes returns the modes of --modes in benchModes' order, with
// forward first; all means every mode the model supports.
func parseBenchModes(s string, c *model.Config) ([]string, error) {
	want := map[string]bool{"forward": true}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "all":
			for _, m := range benchModes {
				want[m] = benchModeFits(m, c)
			}
		case slices.Contains(benchModes, f):
			if !benchModeFits(f, c) && f == "ssm-recurrent" {
				return nil, fmt.Errorf("--modes %s: %s has no Mamba-2 layers", f, c.Arch)
			}
			if !benchModeFits(f, c) {
				return nil, fmt.Errorf("--modes %s: %s has no Gated DeltaNet, Mamba-2 or RWKV-7 layers", f, c.Arch)
			}
			want[f] = true
		default:
			return nil, fmt.Errorf("--modes: %q is not one of %s, all", f, strings.Join(benchModes, ", "))
		}
	}
	var out []string
	for _, m := range benchModes {
		if want[m] {
			out = append(out, m)
		}
	}
	return out, nil
}

// benchHooks returns the consumers of mode for one pass of T tokens (nil
// for forward), built as the command that computes them builds them.
func benchHooks(mode string, c *model.Config, T, threads int, copt probes.CollectorOptions) (*hooks.Set, error) {
	hs := &hooks.Set{}
	switch mode {
	case "forward", "ssm-recurrent":
		return nil, nil
	case "sweep":
		col, err := probes.NewModelCollector(1, c, T, copt)
		if err != nil {
			return nil, err
		}
		return col.Hooks(c), nil
	case "gdn", "gdn-w-rows":
		_, err := analysis.GDNFilter(hs, c, T, results.GDNOptions{WRows: mode == "gdn-w-rows"}, threads)
		return hs, err
	case "sinks":
		_, err := analysis.SinkHooks(hs, c, results.Chunk{T: T}, analysis.DefaultSinksOptions())
		return hs, err
	case "massive":
		analysis.MassiveHooks(hs, c, T, analysis.DefaultMassiveOptions().TopK)
		return hs, nil
	}
	return nil, fmt.Errorf("unknown bench mode %q", mode)
}

// benchCompare runs reps rounds of every mode of --modes, each round in an
// order rotated by one (so that no mode always follows the same one), and
// prints res with each mode's times, peak RSS and overheads, and what
// resident returns after the passes.
func benchCompare(w io.Writer, m *model.Model, ids []int, opt model.Options, modeList string, reps int, res benchModesResult, copt probes.CollectorOptions, resident func() ([]residentGroup, error)) error {
	c := &m.Config
	modes, err := parseBenchModes(modeList, c)
	if err != nil {
		return err
	}
	wall := make([][]float64, len(modes))
	cpu := make([][]float64, len(modes))
	peak := make([]float64, len(modes))
	res.RSSPerMode = true
	for r := 0; r < reps; r++ {
		for k := range modes {
			i := (k + r) % len(modes)
			hs, err := benchHooks(modes[i], c, len(ids), res.Threads, copt)
			if err != nil {
				return fmt.Errorf("--modes %s: %w", modes[i], err)
			}
			o := opt
			o.Hooks = hs
			if modes[i] == "ssm-recurrent" {
				o.SSMScan = -1
			}
			debug.FreeOSMemory() // the previous pass's buffers, returned to the OS before the peak is reset
			if os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) != nil {
				res.RSSPerMode = false
			}
			c0 := cpuSeconds()
			t0 := time.Now()
			if _, err := m.Forward([][]int{ids}, o); err != nil {
				return fmt.Errorf("--modes %s: %w", modes[i], err)
			}
			wall[i] = append(wall[i], time.Since(t0).Seconds())
			cpu[i] = append(cpu[i], cpuSeconds()-c0)
			peak[i] = max(peak[i], peakRSSMiB())
		}
	}
	for i, mode := range modes {
		bm := benchMode{Mode: mode, Seconds: slices.Min(wall[i]), CPUSeconds: slices.Min(cpu[i]), PeakRSSMiB: peak[i]}
		sorted := slices.Sorted(slices.Values(wall[i]))
		bm.MedianSeconds = sorted[len(sorted)/2]
		if len(sorted)%2 == 0 {
			bm.MedianSeconds = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
		}
		bm.TokensPerS = float64(len(ids)) / bm.Seconds
		bm.Overhead = bm.Seconds/slices.Min(wall[0]) - 1
		bm.CPUOverhead = bm.CPUSeconds/slices.Min(cpu[0]) - 1
		res.Modes = append(res.Modes, bm)
	}
	res.PeakRSSMiB = slices.Max(peak)
	if res.Resident, err = resident(); err != nil {
		return err
	}
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
}

// cpuSeconds is the user + system CPU time of this process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
