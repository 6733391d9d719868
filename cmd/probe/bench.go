package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// benchResult is the one JSON object probe bench prints.
type benchResult struct {
	TokensPerS float64 `json:"tokens_per_s"` // T / Seconds
	Seconds    float64 `json:"seconds"`      // best forward pass of the reps
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
	// BF16Kernel is, with --compute bf16, the kernel of the products:
	// amx, avx512_bf16 or go (model.BF16Kernel).
	BF16Kernel string `json:"bf16_kernel,omitempty"`
}

// cmdBench runs probe bench: one batch of T random (seeded) tokens through
// the model, --reps times, with every App. I diagnostic streaming on every
// layer unless --no-diagnostics (results discarded), and prints one JSON
// object (benchResult). Loading is timed apart from the passes
// (load_seconds, first_pass_seconds); the peak RSS is the whole process's.
// scripts/bench/compare.sh runs it beside PyTorch (docs/performance.md).
func cmdBench(args []string, w io.Writer) error {
	fs := newFlags("bench")
	mf := addModelFlag(fs, "checkpoint")
	T := fs.Int("tokens", 1024, "sequence length T (one batch of T random tokens)")
	reps := fs.Int("reps", 3, "forward passes; the fastest is reported")
	noDiag := fs.Bool("no-diagnostics", false, "plain forward pass, no attention consumer")
	path := fs.String("kernel", probes.MatrixKernel.String(), "where the diagnostics' row moments come from: matrix (the attention pass's matrix products) or rows (probes.Collector row by row); see probes.Kernel")
	reductions := fs.String("reductions", defaultReductions.String(), "reductions of S over the head dimension: mean (λobs and K from S̄, reduction (i)) or all (also (ii) per-dimension mean and (iii) harmonic, which need S per dimension); see probes.Reductions")
	seed := fs.Uint64("seed", 1, "seed of the random tokens")
	tf := addTokenFlags(fs, false) // instead of random ids: the first --tokens of them, all when --tokens is not given
	idsFile, textFile, tokFile := tf.ids, tf.text, tf.tokenizer
	threads := fs.Int("threads", 0, "attention workers (0: GOMAXPROCS)")
	tile := fs.Int("tile", 0, "query rows per attention tile (0: the model's default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the timed passes to this file (go tool pprof)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q", pos[0])
	case *idsFile != "" && *textFile != "":
		return fmt.Errorf("give --ids or --text, not both")
	case *T <= 0:
		return fmt.Errorf("--tokens %d: want a positive length", *T)
	case *reps <= 0:
		return fmt.Errorf("--reps %d: want at least 1", *reps)
	case !validKernel(*path):
		return fmt.Errorf("--kernel %q: want %s or %s", *path, probes.MatrixKernel, probes.RowKernel)
	}
	red, ok := probes.ParseReductions(*reductions)
	if !ok {
		return fmt.Errorf("--reductions %q: want %s or %s", *reductions, probes.MeanReduction, probes.AllReductions)
	}
	dir, err := mf.dir()
	if err != nil {
		return err
	}
	tLoad := time.Now()
	m, err := model.Load(dir, mf.loadOptions())
	if err != nil {
		return err
	}
	res := benchResult{LoadSeconds: time.Since(tLoad).Seconds(), WeightMiB: float64(m.WeightBytes) / (1 << 20)}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapMiB = float64(ms.HeapAlloc) / (1 << 20)
	if m.Compute == model.ComputeBF16 {
		res.BF16Kernel = model.BF16Kernel()
	}
	c := &m.Config
	var ids []int
	if *idsFile != "" || *textFile != "" {
		if *idsFile != "" {
			ids, err = readIDStream(*idsFile)
		} else {
			ids, err = readText(dir, *tokFile, *textFile, 0, false)
		}
		if err != nil {
			return err
		}
		src := inputName(*idsFile + *textFile)
		tokensSet := false
		fs.Visit(func(f *flag.Flag) { tokensSet = tokensSet || f.Name == "tokens" })
		if tokensSet {
			if len(ids) < *T {
				return fmt.Errorf("%s: %d tokens, fewer than --tokens %d", src, len(ids), *T)
			}
			ids = ids[:*T]
		}
		*T = len(ids)
		for i, id := range ids {
			if id < 0 || id >= c.Vocab {
				return fmt.Errorf("%s: id %d at position %d is outside the vocabulary [0, %d)", src, id, i, c.Vocab)
			}
		}
	} else {
		rng := rand.New(rand.NewPCG(*seed, 0x9e3779b97f4a7c15))
		ids = make([]int, *T)
		for i := range ids {
			ids[i] = rng.IntN(c.Vocab)
		}
	}
	opt := model.Options{AllowExtrapolation: true, Threads: *threads, TileRows: *tile}
	if !*noDiag {
		// Every diagnostic of the App. I protocol streams on every layer
		// (n_eff, S, λobs and K in the --reductions asked for, BOS mass,
		// ‖e‖, gates), as probe sweep computes them; the Collector is
		// allocated once, outside the timed passes.
		kernel, _ := probes.ParseKernel(*path)
		col, err := probes.NewCollector(1, c.Layers, c.Heads, *T, c.DHead, probes.CollectorOptions{Kernel: kernel, Reductions: red})
		if err != nil {
			return err
		}
		opt.Hooks = col.Hooks(c)
	}
	res.Threads = *threads
	if res.Threads <= 0 {
		res.Threads = runtime.GOMAXPROCS(0)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for r := 0; r < *reps; r++ {
		// Collect the previous pass's buffers first (not timed), so that the
		// peak RSS is that of one pass whatever --reps is.
		runtime.GC()
		t0 := time.Now()
		if _, err := m.Forward([][]int{ids}, opt); err != nil {
			return err
		}
		s := time.Since(t0).Seconds()
		if r == 0 {
			res.FirstPassSeconds = s
		}
		if r == 0 || s < res.Seconds {
			res.Seconds = s
		}
	}
	res.TokensPerS = float64(*T) / res.Seconds
	res.PeakRSSMiB = peakRSSMiB()
	out, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(out))
	return err
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
