package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/tokenizer"
)

// aggFlags are the App. I aggregation options shared by sweep, summarize
// and merge.
type aggFlags struct {
	fs                          *pflag.FlagSet // where they were declared: which were given
	LastLayers, DDOF, Bootstrap int
	Fig4Lengths, Fig4Pool       string
	Seed                        uint64
	CILevel                     float64
	LambdaRatio, LocalLayers    string
}

// registerAgg declares the aggregation flags on fs with
// analysis.DefaultAggOptions' defaults.
func (a *aggFlags) registerAgg(fs *pflag.FlagSet) {
	d := analysis.DefaultAggOptions()
	a.fs = fs
	fs.IntVar(&a.LastLayers, "last-layers", d.LastLayers, "Figs. 2–3 pool the last N layers (paper: 7; all when the model has fewer)")
	fs.IntVar(&a.DDOF, "ddof", d.DDOF, "delta degrees of freedom of every std: 0 (numpy's np.std) or 1")
	fs.StringVar(&a.Fig4Lengths, "fig4-lengths", "", "lengths Fig. 4 aggregates, e.g. 4k,8k (default: 4k and 8k when in the sweep, else all)")
	fs.StringVar(&a.Fig4Pool, "fig4-pool", d.Fig4Pool, "Fig. 4 weighting: passes (each (T, sample) pass equally) or queries (every query pooled)")
	fs.IntVar(&a.Bootstrap, "bootstrap", d.Bootstrap, "bootstrap resamples of the Fig. 4 correlation (0: none)")
	fs.Uint64Var(&a.Seed, "bootstrap-seed", d.Seed, "seed of the bootstrap")
	fs.Float64Var(&a.CILevel, "ci-level", d.CILevel, "level of the bootstrap interval")
	fs.StringVar(&a.LambdaRatio, "lambda-ratio", d.LambdaRatio, "reading of Fig. 2(c) shown first: ratio-of-means, mean-of-ratios or from-K (all are stored)")
	fs.StringVar(&a.LocalLayers, "local-layers", d.LocalLayers, "a model with sliding-window (local) and global layers: separate (Figs. 2–4 per layer group, layers column global / local) or pooled (one group, all)")
}

// options returns base with the aggregation flags applied: all of them
// (onlySet false) or only those given on the command line.
func (a *aggFlags) options(base results.AggOptions, kUnit int, onlySet bool) (results.AggOptions, error) {
	set := map[string]bool{}
	a.fs.Visit(func(f *pflag.Flag) { set[f.Name] = true })
	use := func(name string) bool { return !onlySet || set[name] }
	setIf(use("last-layers"), &base.LastLayers, a.LastLayers)
	setIf(use("ddof"), &base.DDOF, a.DDOF)
	if use("fig4-lengths") {
		base.Fig4Lengths = nil
		if a.Fig4Lengths != "" {
			ls, err := analysis.ParseLengths(a.Fig4Lengths, kUnit)
			if err != nil {
				return base, fmt.Errorf("--fig4-lengths: %w", err)
			}
			base.Fig4Lengths = ls
		}
	}
	setIf(use("fig4-pool"), &base.Fig4Pool, a.Fig4Pool)
	setIf(use("bootstrap"), &base.Bootstrap, a.Bootstrap)
	setIf(use("bootstrap-seed"), &base.Seed, a.Seed)
	setIf(use("ci-level"), &base.CILevel, a.CILevel)
	setIf(use("lambda-ratio"), &base.LambdaRatio, a.LambdaRatio)
	setIf(use("local-layers"), &base.LocalLayers, a.LocalLayers)
	return base, base.Validate()
}

// setIf sets *dst to v when ok.
func setIf[T any](ok bool, dst *T, v T) {
	if ok {
		*dst = v
	}
}

// cliOptions lists every flag of fs with its value and default, for the
// manifest: given (Set) where the command line gave it or its value is
// not the default.
func cliOptions(fs *pflag.FlagSet) []results.Option {
	opts, _ := flagRecord(fs)
	return opts
}

// flagRecord returns cliOptions and the command line that gives the
// flags' values where they are not the defaults ("--name value", a true
// boolean "--name", a false one "--name=false"), for options filled
// without a command line (defaultsOf).
func flagRecord(fs *pflag.FlagSet) ([]results.Option, []string) {
	var opts []results.Option
	var line []string
	fs.VisitAll(func(f *pflag.Flag) {
		v := f.Value.String()
		set := f.Changed || v != f.DefValue
		opts = append(opts, results.Option{Name: f.Name, Value: v, Default: f.DefValue, Set: set, Usage: f.Usage})
		switch {
		case v == f.DefValue:
		case f.Value.Type() == "bool" && v == "true":
			line = append(line, "--"+f.Name)
		case f.Value.Type() == "bool":
			line = append(line, "--"+f.Name+"="+v)
		default:
			line = append(line, "--"+f.Name, v)
		}
	})
	return opts, line
}

// readTokenStream reads the token stream of a run: the ids file, or the
// text file tokenized with tokFile (default modelDir/tokenizer.json)
// without special tokens, either "-" for standard input; and describes it
// (kind, file and tokenizer hashes, length, digest).
func readTokenStream(idsFile, textFile, modelDir, tokFile string) ([]int, results.SourceInfo, error) {
	src := results.SourceInfo{Kind: "ids"}
	path := idsFile
	if textFile != "" {
		path, src.Kind = textFile, "text"
	}
	data, err := readInput(path)
	if err != nil {
		return nil, src, err
	}
	src.File = analysis.HashBytes(inputName(path), data)
	var stream []int
	if idsFile != "" {
		if stream, err = parseIDStream(idsFile, data); err != nil {
			return nil, src, err
		}
	} else {
		tp, err := tokenizerPath(modelDir, tokFile)
		if err != nil {
			return nil, src, err
		}
		tok, err := tokenizer.Load(tp)
		if err != nil {
			return nil, src, err
		}
		th, err := analysis.HashFile(tp)
		if err != nil {
			return nil, src, err
		}
		if stream, err = tok.Encode(string(data), false); err != nil {
			return nil, src, fmt.Errorf("%s: %w", inputName(textFile), err)
		}
		if len(stream) == 0 {
			return nil, src, fmt.Errorf("%s: no tokens", inputName(textFile))
		}
		src.Tokenizer = &th
	}
	src.Tokens, src.Digest = len(stream), analysis.TokenDigest(stream)
	return stream, src, nil
}

// onInterrupt handles SIGINT and SIGTERM while probe cmd (sweep, gdn,
// sinks, massive) runs its passes: the first closes stop (the pass under
// way finishes, then the run stops and says what is kept); a second
// abandons the pass under way and exits at once with status 130, printing
// note() (every finished pass file is complete, written atomically). The
// returned function stops the handling.
func onInterrupt(cmd string, stop chan struct{}, note func() string) func() {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			close(stop)
			fmt.Fprintf(progressOut, "\nprobe %s: interrupted: finishing the pass under way, then stopping (interrupt again to abandon it)\n", cmd)
		case <-done:
			return
		}
		select {
		case <-sigs:
			fmt.Fprintf(progressOut, "\nprobe %s: abandoned the pass under way; the finished passes are kept.\n%s\n", cmd, note())
			os.Exit(130)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// resumeNote is the command that resumes probe cmd with args.
func resumeNote(cmd string, args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return fmt.Sprintf("resume with (finished passes are reused):\n  probe %s %s", cmd, strings.Join(q, " "))
}

// shellQuote quotes s for a POSIX shell when it holds anything beyond
// letters, digits and -_./,:=+@%.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,:=+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// SweepOptions are the options of probe sweep.
type SweepOptions struct {
	cmdIO
	runFlags
	Input                                 tokenFlags
	Plan                                  planFlags
	BOSToken                              int
	Bucket                                int
	LastFrac                              float64
	BOSFrac                               float64
	AllowExtrapolation                    bool
	OnNonFinite                           string
	Lambda                                lambdaFlags
	Moments, Kernel, Reductions, SinkRows string
	Agg                                   aggFlags
}

// flags declares the flags of probe sweep into f and their relations.
func (o *SweepOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	d := analysis.DefaultSweepOptions()
	o.Model.registerModel(f, "checkpoint")
	o.Input.registerInput(f, false) // one token stream, cut into the chunks of the plan
	o.Plan.registerPlan(f, planDefaults{K: d.KUnit, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	f.StringVar(&o.Out, "out", "", "output folder (required); re-running into it skips finished passes")
	shardVar(f, &o.Shard)
	f.IntVar(&o.BOSToken, "bos-token", d.BOSToken, "token id prepended to every pass, counted in T (-1: none)")
	f.IntVar(&o.Bucket, "bucket", d.Bucket, "query bucket size of the per-bucket table")
	f.Float64Var(&o.LastFrac, "last-frac", d.LastFrac, "query window of Figs. 2–3 and of K in Fig. 4: the last fraction of queries")
	f.Float64Var(&o.BOSFrac, "bos-frac", d.BOSFrac, "query window of the BOS mass in Fig. 4: the last fraction of queries")
	threadsVar(f, &o.Threads)
	extrapolationVar(f, &o.AllowExtrapolation)
	f.StringVar(&o.OnNonFinite, "on-nonfinite", d.OnNonFinite, "NaN/Inf in attention rows: stop (report layer, head, query) or flag (record, leave out, go on)")
	o.Lambda.registerLambda(f, "reml (Eq. 6), naive (Eq. 5) or sandwich (Eq. 13)")
	f.StringVar(&o.Moments, "moments", "two-pass", "how S is computed: two-pass or expanded (comparison only)")
	f.StringVar(&o.Kernel, "kernel", "matrix", "where the row moments come from: matrix (the attention pass's matrix products, guarded) or rows (each row walked twice); see probes.Kernel")
	f.StringVar(&o.SinkRows, "sink-rows", "renorm", "models with learned attention sinks (gpt-oss), whose rows sum to 1 − σ: the rows every diagnostic reads, renorm (divided by their own sum; σ in the sink_mass column) or raw (as the model returns them); docs/diagnostics.md")
	f.StringVar(&o.Reductions, "reductions", defaultReductions.String(), "reductions of S over the head dimension: mean (λobs and K from S̄, reduction (i)) or all (also (ii) per-dimension mean and (iii) harmonic: S per dimension, about a third more time at 16k)")
	f.StringVar(&o.Formats, "format", "parquet", "table formats: any of parquet,csv,jsonl")
	progressVar(f, &o.Progress)
	f.BoolVar(&o.Force, "force", false, "run into an --out that holds other files, or a sweep of another plan (its tables are replaced)")
	o.Agg.registerAgg(f)
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
	markRequired(cmd, "lengths", "e.g. --lengths 1k,2k,4k")
	markExactlyOne(cmd, "ids", "text")
}

// runSweep runs BFT App. I's sweep — the diagnostics of the chunks the plan
// cuts from the stream at each length — into opts.Out, resuming the passes
// a run of the same plan finished, and prints Figs. 2–4 beside the paper's numbers.
func runSweep(opts *SweepOptions) error {
	fmts, err := opts.formats() // the cheap checks before the model
	if err != nil {
		return err
	}
	dir, hub, err := opts.Model.resolve()
	if err != nil {
		return err
	}
	so := results.SweepOptions{LengthsArg: opts.Plan.Lengths, KUnit: opts.Plan.K, Samples: opts.Plan.Samples, Disjoint: opts.Plan.Disjoint,
		Placement: opts.Plan.Placement, Seed: opts.Plan.Seed, Offset: opts.Plan.Offset, BOSToken: opts.BOSToken, Bucket: opts.Bucket, LastFrac: opts.LastFrac,
		BOSFrac: opts.BOSFrac, AllowExtrapolation: opts.AllowExtrapolation, OnNonFinite: opts.OnNonFinite,
		Probe: results.ProbeOptions{Form: opts.Lambda.Form, Nu: opts.Lambda.Nu, Sigma02: opts.Lambda.Sigma02, LambdaPrior: opts.Lambda.Prior, LambdaMax: opts.Lambda.Max, Moments: opts.Moments, Kernel: opts.Kernel, Reductions: opts.Reductions,
			SinkRows: opts.SinkRows},
		DeviationTokens: opts.Model.DeviationTokens}
	if k := opts.Plan.K; k != 1000 && k != 1024 {
		return fmt.Errorf("--k %d: want 1000 or 1024", k)
	}
	agg, err := opts.Agg.options(analysis.DefaultAggOptions(), opts.Plan.K, false)
	if err != nil {
		return err
	}
	// an --out of other files refused before any work; the run compares the plan with a sweep's there
	spec, run, err := opts.spec("sweep", "a probe sweep (its tables, manifest.json and passes/)", fmts, &opts.cmdIO)
	if err != nil {
		return err
	}
	defer run.end()
	sw, err := opts.prepare(dir, hub, so, agg, spec)
	if err != nil {
		return err
	}
	return opts.runPasses(sw)
}

// prepare makes the sweep of so over the stream: the cheap checks first
// (options, lengths and the stream, before the weights), then the model
// loaded and hashed (the run refuses an --out of another plan unless
// --force).
func (opts *SweepOptions) prepare(dir string, hub *checkpoint.HubModel, so results.SweepOptions, agg results.AggOptions, spec analysis.RunSpec) (*analysis.Sweep, error) {
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if err := analysis.ValidateSweepOptions(&so, cfg.MaxPos, cfg.Vocab); err != nil {
		return nil, err
	}
	if _, err := analysis.ResolveProbeOptions(so.Probe, analysis.SigmaDHead(cfg)); err != nil {
		return nil, err
	}
	var tm results.Timings
	t0 := time.Now()
	in := opts.Input
	stream, src, err := readTokenStream(in.IDs, in.Text, dir, in.Tokenizer)
	if err != nil {
		return nil, err
	}
	spec.Dir, spec.Stream, spec.Source = dir, stream, src
	if in.Text != "" {
		tm.Tokenize = time.Since(t0).Seconds()
	}
	if _, err := analysis.PlanChunks(len(stream), analysis.SweepChunkOptions(&so)); err != nil {
		what := in.IDs
		if what == "" {
			what = in.Text + " (tokenized)"
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	t0 = time.Now()
	m, err := model.Load(dir, opts.Model.loadOptions())
	if err != nil {
		return nil, err
	}
	tm.Loading = time.Since(t0).Seconds()
	t0 = time.Now()
	info, err := analysis.DescribeModel(m)
	if err != nil {
		return nil, err
	}
	info.Hub = hub
	tm.Hashing = time.Since(t0).Seconds()
	so.Compute = string(m.Compute.Recorded()) // as Sweep.Run records it
	return &analysis.Sweep{RunSpec: spec, Model: m, Info: info, Options: so, Agg: agg, Timings: tm}, nil
}

// runPasses runs the sweep (its progress bar and SIGINT handling in its
// spec: runFlags.spec), and prints
// what it did: the passes, flags, deviation and, for a whole run, the
// tables and Figs. 2–4 beside the paper's numbers.
func (opts *SweepOptions) runPasses(sw *analysis.Sweep) error {
	w, sh := opts.Stdout, sw.Shard
	man, res, err := sw.Run()
	if errors.Is(err, analysis.ErrStopped) {
		mine := 0
		for i := range man.Chunks {
			if i%sh.Count == sh.Index {
				mine++
			}
		}
		fmt.Fprintf(w, "interrupted: %d of %d passes are finished and kept in %s (each pass file is written whole); %s says the sweep is unfinished.\n%s\n",
			len(man.Passes), mine, filepath.Join(opts.Out, "passes"), analysis.ManifestName(sh), resumeNote("sweep", opts.CommandLine))
		return exitError{130, err}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d passes (%d run, %d already finished) in %s; manifest %s\n", len(man.Passes), len(man.Passes)-len(man.Reused), len(man.Reused),
		opts.Out, analysis.ManifestName(sh))
	for _, f := range man.Flags {
		fmt.Fprintf(w, "flagged: %s\n", f)
	}
	if sh.Count > 1 {
		printDeviation(w, man.Deviation)
		fmt.Fprintf(w, "shard %v done; when every shard is, combine them with: probe merge <shard folders…> --out <dir>\n", sh)
		return nil
	}
	fmt.Fprintf(w, "tables: %s\n", strings.Join(man.Tables, ", "))
	printDeviation(w, man.Deviation)
	fmt.Fprintln(w)
	return analysis.WriteReport(w, man, res)
}
