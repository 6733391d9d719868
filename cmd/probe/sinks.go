package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/filterlens/probe/analysis"
)

// cmdSinks writes the standard attention-sink measurements per (length,
// sample, softmax layer, head) and Gu et al.'s sink rate per (length, ε):
// sinks_heads, sinks_rate and sinks_manifest.json (docs/diagnostics.md,
// "Attention sinks").
func cmdSinks(args []string, w io.Writer) error {
	fs := newFlags("sinks")
	d := analysis.DefaultSinksOptions()
	sf := addStreamFlags(fs, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	pf := sf.plan
	eps := fs.String("eps", "0.3", "thresholds ε of the sink rate Sink_1^ε (% of heads whose mean first-token attention exceeds ε), comma-separated")
	firstQuery := fs.Bool("include-first-query", d.IncludeFirstQuery, "count query 0 (whose row is 1 on position 0) in the mean first-token attention, as Gu et al.'s mean over all queries does")
	gateBelow := fs.Float64("gate-below", d.GateBelow, "threshold of the gate sparsity (fraction of gate values below it; Qiu et al.: 0.1)")
	split := fs.Bool("split-local", d.SplitLocal, "also give the sink rate of global and sliding-window layers separately")
	sinkRows := fs.String("sink-rows", d.SinkRows, "models with learned attention sinks (gpt-oss), whose rows sum to 1 − σ: the rows every diagnostic reads, renorm (divided by their own sum; σ in the sink_mass column) or raw (as the model returns them); docs/diagnostics.md")
	tile := addTileFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	lengths, fmts, err := sf.validate(pos)
	if err != nil {
		return err
	}
	opts := analysis.SinksOptions{Lengths: lengths, Samples: *pf.samples, Disjoint: *pf.disjoint, Placement: *pf.placement, Seed: *pf.seed, Offset: *pf.offset,
		IncludeFirstQuery: *firstQuery, GateBelow: *gateBelow, SinkRows: *sinkRows, SplitLocal: *split, TileRows: *tile, AllowExtrapolation: *sf.allowExt}
	for _, s := range strings.Split(*eps, ",") {
		e, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("--eps %q: %q is not a number", *eps, s)
		}
		opts.Eps = append(opts.Eps, e)
	}
	dir, stream, src, err := sf.input("sinks", "the sinks tables and "+analysis.SinksManifestName)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	defer onInterrupt("sinks", stop, func() string { return resumeNote("sinks", args) })()
	run := &analysis.SinksRun{Dir: dir, Load: sf.model.loadOptions(), Source: src, Stream: stream, Options: opts, Out: *sf.out, Formats: fmts,
		Threads: *sf.threads, Shard: sf.sh, Force: *sf.force, Stop: stop, CLIOptions: cliOptions(fs), Args: append([]string{"sinks"}, args...),
		DeviationTokens: *sf.model.deviationTokens}
	progress, endBar := sf.progressBar()
	run.Progress = progress
	man, heads, rates, err := run.Run()
	endBar()
	if err != nil {
		if man != nil {
			return sf.stopped(w, "sinks", args, &man.RunRecord, err)
		}
		return err
	}
	defer printDeviation(w, man.Deviation) // after the lines on the tables
	if sf.done(w, &man.RunRecord) {
		return nil
	}
	fmt.Fprintf(w, "wrote %d head rows and %d sink-rate rows to %s (%.1f s)\n", len(heads), len(rates), *sf.out, man.Seconds)
	for _, r := range rates {
		fmt.Fprintf(w, "T=%d %s layers: Sink_1^%g = %.1f %% (%d of %d heads)", r.T, r.Layers, r.Eps, r.Rate, r.HeadsAbove, r.Heads)
		if r.RowsLeftOut > 0 {
			fmt.Fprintf(w, "; %d of %d query rows left out (position 0 outside their sliding window)", r.RowsLeftOut, r.Rows)
		}
		fmt.Fprintln(w)
	}
	for _, n := range man.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}
