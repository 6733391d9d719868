package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// TestBenchCommand: probe bench prints one JSON object with its eight
// fields, with and without diagnostics, on both diagnostic paths.
func TestBenchCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if code, _, errs := probe(t, "generate", "--arch", "gated", "--layers", "2", "--d-model", "64", "--heads", "4",
		"--kv-heads", "2", "--vocab", "300", "--max-pos", "512", "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := filepath.Join(t.TempDir(), "ids.json")
	if err := os.WriteFile(ids, []byte("["+strings.Repeat("5,", 69)+"6]"), 0o644); err != nil { // 70 ids
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--no-diagnostics"}, {}, {"--kernel", "rows"}, {"--threads", "1", "--tile", "5"}, {"--ids", ids},
	} {
		code, out, errs := probe(t, append([]string{"bench", "--model", dir, "--tokens", "70", "--reps", "2"}, args...)...)
		if code != 0 {
			t.Fatalf("bench %v: exit %d: %s", args, code, errs)
		}
		if n := strings.Count(strings.TrimSpace(out), "\n"); n != 0 {
			t.Errorf("bench %v: %d lines, want one JSON object:\n%s", args, n+1, out)
		}
		var raw map[string]any
		if err := json.Unmarshal([]byte(out), &raw); err != nil {
			t.Fatalf("bench %v: %v\n%s", args, err, out)
		}
		fields := map[string]float64{}
		for k, v := range raw {
			if f, ok := v.(float64); ok {
				fields[k] = f
			}
		}
		for _, k := range []string{"tokens_per_s", "seconds", "peak_rss_mib", "threads", "load_seconds", "first_pass_seconds", "weight_mib", "heap_mib"} {
			if !(fields[k] > 0) {
				t.Errorf("bench %v: %s = %v, want > 0 (%s)", args, k, fields[k], out)
			}
		}
		diag := !slices.Contains(args, "--no-diagnostics")
		want := 13 // and diagnostics_mib with the diagnostics
		if diag {
			want = 14
		}
		if c, ok := raw["cpu_seconds"].(float64); !ok || c < 0 {
			t.Errorf("bench %v: cpu_seconds = %v, want a number ≥ 0", args, raw["cpu_seconds"])
		}
		if raw["products_kernel"] != model.BLAS() { // float32 weights
			t.Errorf("bench %v: products_kernel %v, want %s", args, raw["products_kernel"], model.BLAS())
		}
		if len(raw) != want {
			t.Errorf("bench %v: %d fields, want %d: %s", args, len(raw), want, out)
		}
		// the diagnostics read nothing after the last block's heads
		if fields["blocks"] != 2 || raw["last_block_heads_only"] != diag {
			t.Errorf("bench %v: blocks %v, last_block_heads_only %v; want 2 and %v", args, fields["blocks"], raw["last_block_heads_only"], diag)
		}
		var opt model.Options
		if slices.Contains(args, "--threads") {
			opt = model.Options{Threads: 1, TileRows: 5}
		}
		if diag {
			opt.Hooks = &hooks.Set{} // the diagnostics add the moments' squares (model.Model.PassBytes)
			opt.Hooks.Stream(-1, nil)
		}
		if b, _ := m.PassBytes(1, 70, opt); fields["pass_estimate_mib"] != float64(b)/(1<<20) {
			t.Errorf("bench %v: pass_estimate_mib = %v, want PassBytes = %v MiB", args, fields["pass_estimate_mib"], float64(b)/(1<<20))
		}
		if want := float64(4*m.Parameters) / (1 << 20); fields["weight_mib"] != want || m.WeightBytes != 4*m.Parameters {
			t.Errorf("bench %v: weight_mib = %v (WeightBytes %d), want 4 bytes × %d float32 parameters = %v", args, fields["weight_mib"], m.WeightBytes, m.Parameters, want)
		}
		if math.Abs(fields["tokens_per_s"]*fields["seconds"]-70) > 1e-6*70 {
			t.Errorf("bench %v: tokens_per_s·seconds = %v, want 70", args, fields["tokens_per_s"]*fields["seconds"])
		}
	}
	for _, bad := range [][]string{{"--tokens", "0"}, {"--reps", "0"}, {"--kernel", "x"}, {"--reductions", "x"}, {"--ids", ids, "--tokens", "71"}} {
		if code, _, _ := probe(t, append([]string{"bench", "--model", dir}, bad...)...); code != 1 {
			t.Errorf("bench %v: exit %d, want 1", bad, code)
		}
	}
}

// TestBenchThroughLayer: --through-layer L times a plain pass through
// blocks 0 … L whole (the pass probe explore's rows are measured against);
// a layer the model lacks, a negative one and the diagnostics beside it are
// refused.
func TestBenchThroughLayer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if code, _, errs := probe(t, "generate", "--arch", "gated", "--layers", "3", "--d-model", "64", "--heads", "4",
		"--kv-heads", "2", "--vocab", "300", "--max-pos", "512", "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	for L, want := range []float64{1, 2, 3} {
		code, out, errs := probe(t, "bench", "--model", dir, "--tokens", "40", "--reps", "1", "--no-diagnostics", "--through-layer", strconv.Itoa(L))
		if code != 0 {
			t.Fatalf("--through-layer %d: exit %d: %s", L, code, errs)
		}
		var r benchResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("--through-layer %d: %v\n%s", L, err, out)
		}
		if float64(r.Blocks) != want || r.LastBlockHeadsOnly {
			t.Errorf("--through-layer %d: blocks %d, last_block_heads_only %v; want %v whole blocks", L, r.Blocks, r.LastBlockHeadsOnly, want)
		}
	}
	for _, bad := range [][]string{{"--no-diagnostics", "--through-layer", "3"}, {"--no-diagnostics", "--through-layer", "-2"}, {"--through-layer", "0"}} {
		code, _, errs := probe(t, append([]string{"bench", "--model", dir, "--tokens", "40"}, bad...)...)
		if code != 1 || !strings.Contains(errs, "--through-layer") {
			t.Errorf("bench %v: exit %d, %q; want 1 naming --through-layer", bad, code, errs)
		}
	}
}

// TestBenchSinks: on a model with learned sinks (gpt-oss) probe bench's
// Collector keeps the sink mass, as probe sweep's does: its results are
// those of a Collector with Sinks, larger than one without.
func TestBenchSinks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	if code, _, errs := probe(t, "generate", "--arch", "gpt_oss", "--layers", "2", "--d-model", "64", "--heads", "4",
		"--kv-heads", "2", "--vocab", "300", "--max-pos", "512", "--expert-format", "mxfp4", "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	code, out, errs := probe(t, "bench", "--model", dir, "--tokens", "40", "--reps", "1")
	if code != 0 {
		t.Fatalf("bench: %s", errs)
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bytes := map[bool]float64{}
	for _, sinks := range []bool{false, true} {
		col, err := probes.NewModelCollector(1, &m.Config, 40, probes.CollectorOptions{Reductions: defaultReductions, Sinks: sinks})
		if err != nil {
			t.Fatal(err)
		}
		bytes[sinks] = mib(col.Bytes())
	}
	if res.DiagnosticsMiB != bytes[true] || !(bytes[true] > bytes[false]) {
		t.Errorf("diagnostics_mib %v; a Collector with the sink mass holds %v MiB, one without %v", res.DiagnosticsMiB, bytes[true], bytes[false])
	}
}

// TestBenchMomentsMatchCollector: the diagnostics formed from the pass's
// moments (probes.MatrixKernel) equal probes.Collector's own row-by-row ones
// within 1e-5 relative (hooks.AttnMoments: float32 products), for every metric and cell, on Qwen3 and gated
// models, with the per-dimension metrics kept; and so do those of reduction
// (i) alone (probes.MeanReduction: Σ_i S_i from the softmax pass).
func TestBenchMomentsMatchCollector(t *testing.T) {
	for _, arch := range []model.Arch{model.ArchQwen3, model.ArchGated} {
		t.Run(string(arch), func(t *testing.T) {
			cfg, err := model.SmallConfig(arch, model.Size{Layers: 3, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 300, MaxPos: 1024})
			if err != nil {
				t.Fatal(err)
			}
			m, _, err := model.Generate(cfg, 7)
			if err != nil {
				t.Fatal(err)
			}
			const T = 300
			ids := make([]int, T)
			for i := range ids {
				ids[i] = (i*i*31 + 7*i) % cfg.Vocab
			}
			run := func(opts probes.CollectorOptions) *probes.Collector {
				col, err := probes.NewCollector(1, cfg.Layers, cfg.Heads, T, cfg.DHead, opts)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Forward([][]int{ids}, model.Options{Hooks: col.Hooks(&m.Config), TileRows: 32}); err != nil {
					t.Fatal(err)
				}
				return col
			}
			rows := run(probes.CollectorOptions{KeepPerDim: true, Kernel: probes.RowKernel})
			compare(t, "matrix", rows, run(probes.CollectorOptions{KeepPerDim: true, Kernel: probes.MatrixKernel}))
			mean := run(probes.CollectorOptions{Kernel: probes.MatrixKernel, Reductions: probes.MeanReduction})
			if n := len(mean.Metrics()); n != len(rows.Metrics())-5 {
				t.Errorf("MeanReduction keeps %d metrics %v, want %d: all but S, λobs per dimension, (ii) and (iii)",
					n, mean.Metrics(), len(rows.Metrics())-5)
			}
			compare(t, "matrix, sum only", rows, mean)
		})
	}
}

// compare checks every metric of got against want within 1e-5 relative.
func compare(t *testing.T, label string, ref, col *probes.Collector) {
	t.Helper()
	for _, name := range col.Metrics() {
		want, _ := ref.Metric(name)
		got, _ := col.Metric(name)
		worst, at := 0.0, 0
		for i := range want {
			w, g := float64(want[i]), float64(got[i])
			if math.IsNaN(w) && math.IsNaN(g) {
				continue
			}
			// relative, with an absolute floor of 1e-12 for dispersions
			// that are 0 up to rounding (query 0)
			if e := math.Abs(g-w) / (math.Abs(w) + 1e-12); e > worst || math.IsNaN(e) {
				worst, at = e, i
			}
		}
		t.Logf("%s: %-20s worst rel. error %.2g", label, name, worst)
		if worst > 1e-5 || math.IsNaN(worst) {
			t.Errorf("%s: %s: rel. error %.3g at flat index %d: moments %v, rows %v", label, name, worst, at, got[at], want[at])
		}
	}
}

// TestSweepPeakRSS: the peak memory of a many-pass probe sweep stays that
// of one probe bench pass plus a fraction of the weights: no collector
// headroom proportional to the weights (issue 17), because the weights are
// views of the mapped checkpoint in their stored dtype (float32 or bf16),
// not on the Go heap. Measured here on a 110 MiB float32 model, 16 passes
// at T = 128 and 256 against one bench pass at T = 256: the sweep's peak
// was 22 MiB (0.2 × the weights) above bench's, and 74 MiB (0.67 ×) when
// the weights were copied onto the heap. Since the pass releases the
// mapped embedding after its lookup, bench's peak leaves the embedding out
// (91.5 MiB against 110.5 MiB of weights) while the sweep's one-token hook
// check still reads it as the tied head: the sweep is compared with bench
// plus the embedding (then within −4 MiB of it, float32 and bf16).
// Each command runs in its own process (this test binary re-run as
// TestPeakRSSHelper), which reports its own VmHWM.
func TestSweepPeakRSS(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peak RSS is read from /proc/self/status (Linux)")
	}
	if testing.Short() {
		t.Skip("writes a 110 MiB and a 55 MiB checkpoint and runs 17 passes of each in child processes")
	}
	for _, dtype := range []string{"f32", "bf16"} {
		t.Run(dtype, func(t *testing.T) { sweepPeakRSS(t, dtype) })
	}
}

// sweepPeakRSS is TestSweepPeakRSS on a checkpoint stored in dtype.
func sweepPeakRSS(t *testing.T, dtype string) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "m")
	if code, _, errs := probe(t, "generate", "--arch", "qwen3", "--layers", "4", "--d-model", "512", "--heads", "8",
		"--kv-heads", "4", "--vocab", "32000", "--max-pos", "1024", "--dtype", dtype, "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	weightsMiB := float64(m.WeightBytes) / (1 << 20)
	rng := rand.New(rand.NewPCG(2, 3))
	ids := make([]int, 4000)
	for i := range ids {
		ids[i] = rng.IntN(32000)
	}
	idsFile := filepath.Join(tmp, "ids.json")
	data, _ := json.Marshal(ids)
	if err := os.WriteFile(idsFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	bench := peakRSSOf(t, "bench", "--model", dir, "--tokens", "256", "--reps", "1")
	sweep := peakRSSOf(t, "sweep", "--model", dir, "--ids", idsFile, "--lengths", "128,256", "--samples", "8",
		"--bootstrap", "0", "--out", filepath.Join(tmp, "sweep"))
	// The bound scales with the model's float32 size (the same for both
	// dtypes: the headroom is on activations, which bf16 weights do not
	// shrink); bf16 weights widened onto the heap would add about
	// 0.67 × their float32 size, as float32 ones on the heap did.
	f32MiB := float64(4*m.Parameters) / (1 << 20)
	// bench never has the token embedding resident after its lookup (the
	// pass releases the mapped table, model/forward.go); the sweep's hook
	// check (Model.HookNames: one token through every point, logits
	// included) reads every weight once, the embedding as the tied head,
	// so its baseline is bench's plus the embedding.
	size := 4.0
	if m.Embed.DType != "F32" {
		size = 2
	}
	embedMiB := size * float64(m.Embed.Rows*m.Embed.Cols) / (1 << 20)
	t.Logf("peak RSS: sweep %.1f MiB, bench %.1f MiB, weights %.1f MiB (%.1f MiB in float32, embedding %.1f MiB)",
		sweep, bench, weightsMiB, f32MiB, embedMiB)
	if sweep-bench-embedMiB > 0.4*f32MiB {
		t.Errorf("a 16-pass sweep peaked at %.1f MiB, %.1f MiB above one bench pass (%.1f MiB) and the %.1f MiB embedding: more than 0.4 × the %.1f MiB of float32 weights",
			sweep, sweep-bench-embedMiB, bench, embedMiB, f32MiB)
	}
}

// TestSweepActivationHeadroom: with the weights off the heap, the live
// heap is one pass's activations, and the collector's headroom grows with
// them: on a 29 MiB model at T = 4096, where one pass's activations (bench
// at T = 4096 less bench at T = 16) are about 85 MiB, 3 sweep passes peaked
// 1.0 × them above one bench pass at Go's default GOGC=100, and 0.2 × at
// probe's GOGC=20 (main.go, defaultGOGC); the test allows 0.5 ×. Each
// command runs in its own process (TestPeakRSSHelper).
func TestSweepActivationHeadroom(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("peak RSS is read from /proc/self/status (Linux)")
	}
	if testing.Short() {
		t.Skip("runs 5 passes at T = 4096 in child processes")
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		t.Skipf("GOGC=%s in the environment replaces probe's own setting, whose headroom this test checks", v)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "m")
	if code, _, errs := probe(t, "generate", "--arch", "qwen3", "--layers", "2", "--d-model", "512", "--heads", "4",
		"--kv-heads", "2", "--vocab", "1000", "--max-pos", "4096", "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	rng := rand.New(rand.NewPCG(2, 3))
	ids := make([]int, 16000)
	for i := range ids {
		ids[i] = rng.IntN(1000)
	}
	idsFile := filepath.Join(tmp, "ids.json")
	data, _ := json.Marshal(ids)
	if err := os.WriteFile(idsFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	idle := peakRSSOf(t, "bench", "--model", dir, "--tokens", "16", "--reps", "1")
	bench := peakRSSOf(t, "bench", "--model", dir, "--tokens", "4096", "--reps", "1")
	sweep := peakRSSOf(t, "sweep", "--model", dir, "--ids", idsFile, "--lengths", "4096", "--samples", "3",
		"--bootstrap", "0", "--out", filepath.Join(tmp, "sweep"))
	act := bench - idle
	t.Logf("peak RSS: sweep %.1f MiB, bench %.1f MiB, bench at T = 16 %.1f MiB: %.2f × one pass's activations above bench",
		sweep, bench, idle, (sweep-bench)/act)
	if sweep-bench > 0.5*act {
		t.Errorf("a 3-pass sweep at T = 4096 peaked at %.1f MiB, %.1f MiB above one bench pass (%.1f MiB): more than half of one pass's %.1f MiB of activations",
			sweep, sweep-bench, bench, act)
	}
}

// peakRSSOf runs probe with args in a child process and returns its peak
// RSS in MiB.
func peakRSSOf(t *testing.T, args ...string) float64 {
	t.Helper()
	enc, _ := json.Marshal(args)
	cmd := exec.Command(os.Args[0], "-test.run=^TestPeakRSSHelper$")
	cmd.Env = append(os.Environ(), "PROBE_PEAK_RSS_ARGS="+string(enc))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe %v: %v\n%s", args, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	mib, ok := strings.CutPrefix(lines[len(lines)-1], "peak_rss_mib ")
	v, err := strconv.ParseFloat(mib, 64)
	if !ok || err != nil {
		t.Fatalf("probe %v: no peak RSS in its output:\n%s", args, out)
	}
	return v
}

// TestPeakRSSHelper is not a test of its own: run by peakRSSOf as a child
// process, it runs the probe command in $PROBE_PEAK_RSS_ARGS and prints
// its peak RSS.
func TestPeakRSSHelper(t *testing.T) {
	enc := os.Getenv("PROBE_PEAK_RSS_ARGS")
	if enc == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(enc), &args); err != nil {
		t.Fatal(err)
	}
	if code := run(args, io.Discard, os.Stderr); code != 0 {
		os.Exit(code)
	}
	fmt.Printf("peak_rss_mib %f\n", peakRSSMiB())
	os.Exit(0)
}

// TestBenchModes: probe bench --modes times the plain forward pass and the
// consumers of probe sweep, gdn (default set and with W rows), sinks and
// massive in one run: one JSON object with forward first (overhead 0) and
// every mode's times, peak RSS and overheads; gdn modes on a model without
// Gated DeltaNet layers and unknown modes are refused.
func TestBenchModes(t *testing.T) {
	tmp := t.TempDir()
	q35, llama := filepath.Join(tmp, "q35"), filepath.Join(tmp, "llama")
	if code, _, errs := probe(t, "generate", "--arch", "qwen3_5", "--layers", "4", "--d-model", "64", "--heads", "2", "--kv-heads", "1",
		"--vocab", "128", "--out", q35); code != 0 {
		t.Fatal(errs)
	}
	if code, _, errs := probe(t, "generate", "--arch", "llama", "--layers", "1", "--d-model", "32", "--heads", "2", "--kv-heads", "1",
		"--vocab", "64", "--out", llama); code != 0 {
		t.Fatal(errs)
	}
	code, out, errs := probe(t, "bench", "--model", q35, "--tokens", "96", "--reps", "2", "--modes", "all")
	if code != 0 {
		t.Fatalf("bench --modes all: exit %d: %s", code, errs)
	}
	var res benchModesResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var names []string
	for _, m := range res.Modes {
		names = append(names, m.Mode)
		if !(m.Seconds > 0 && m.CPUSeconds >= 0 && m.MedianSeconds >= m.Seconds && m.PeakRSSMiB > 0 && m.TokensPerS == 96/m.Seconds) {
			t.Errorf("mode %+v", m)
		}
		if want := m.Seconds/res.Modes[0].Seconds - 1; math.Abs(m.Overhead-want) > 1e-12 {
			t.Errorf("%s: overhead %v, want %v", m.Mode, m.Overhead, want)
		}
	}
	if strings.Join(names, ",") != "forward,sweep,gdn,gdn-w-rows,sinks,massive" || res.Modes[0].Overhead != 0 || res.Tokens != 96 || res.Reps != 2 {
		t.Errorf("modes %v, forward overhead %v, tokens %d, reps %d", names, res.Modes[0].Overhead, res.Tokens, res.Reps)
	}
	code, out, _ = probe(t, "bench", "--model", llama, "--tokens", "32", "--reps", "1", "--modes", "all")
	if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || len(res.Modes) != 4 {
		t.Errorf("--modes all without Gated DeltaNet layers: exit %d, %v: %s", code, err, out)
	}
	for _, c := range []struct{ modes, want string }{
		{"gdn", "no Gated DeltaNet, Mamba-2 or RWKV-7 layers"}, {"ssm-recurrent", "has no Mamba-2 layers"}, {"sinks,foo", `"foo" is not one of`},
	} {
		if code, _, errs := probe(t, "bench", "--model", llama, "--tokens", "32", "--modes", c.modes); code == 0 || !strings.Contains(errs, c.want) {
			t.Errorf("--modes %s: exit %d: %s", c.modes, code, errs)
		}
	}
	if code, _, errs := probe(t, "bench", "--model", llama, "--modes", "sinks", "--no-diagnostics"); code == 0 || !strings.Contains(errs, "drop --no-diagnostics") {
		t.Errorf("--modes with --no-diagnostics: exit %d: %s", code, errs)
	}
}

// TestBenchChecksMemory: bench refuses a pass whose diagnostics' results
// and activations cannot fit (48 layers × 48 heads × 4M queries of
// metrics: hundreds of GiB) before allocating them, with the figures.
func TestBenchChecksMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the available memory is read from /proc (Linux)")
	}
	dir := filepath.Join(t.TempDir(), "m")
	if code, _, errs := probe(t, "generate", "--arch", "qwen3", "--layers", "48", "--d-model", "96", "--heads", "48",
		"--kv-heads", "48", "--vocab", "300", "--max-pos", "512", "--out", dir); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
	code, _, errs := probe(t, "bench", "--model", dir, "--tokens", "4194304", "--reps", "1")
	if code != 1 || !strings.Contains(errs, "a pass of 1 × 4194304 tokens needs about") || !strings.Contains(errs, "--memory-check=false") {
		t.Fatalf("bench --tokens 4194304: exit %d, %s; want the pass refused for its memory", code, errs)
	}
}
