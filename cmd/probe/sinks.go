package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// SinksOptions are the options of probe sinks.
type SinksOptions struct {
	cmdIO
	Stream                        streamFlags
	Eps, SinkRows                 string
	IncludeFirstQuery, SplitLocal bool
	GateBelow                     float64
	Tile                          int
}

// flags declares the flags of probe sinks into f and their relations.
func (o *SinksOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	d := analysis.DefaultSinksOptions()
	o.Stream.registerStream(f, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	f.StringVar(&o.Eps, "eps", "0.3", "thresholds ε of the sink rate Sink_1^ε (% of heads whose mean first-token attention exceeds ε), comma-separated")
	f.BoolVar(&o.IncludeFirstQuery, "include-first-query", d.IncludeFirstQuery, "count query 0 (whose row is 1 on position 0) in the mean first-token attention, as Gu et al.'s mean over all queries does")
	f.Float64Var(&o.GateBelow, "gate-below", d.GateBelow, "threshold of the gate sparsity (fraction of gate values below it; Qiu et al.: 0.1)")
	f.StringVar(&o.SinkRows, "sink-rows", d.SinkRows, "models with learned attention sinks (gpt-oss), whose rows sum to 1 − σ: the rows every diagnostic reads, renorm (divided by their own sum; σ in the sink_mass column) or raw (as the model returns them); docs/diagnostics.md")
	f.BoolVar(&o.SplitLocal, "split-local", d.SplitLocal, "also give the sink rate of global and sliding-window layers separately")
	tileVar(f, &o.Tile)
	o.Stream.declareRelations(cmd)
}

// runSinks writes the standard attention-sink measurements per (length,
// sample, softmax layer, head) and Gu et al.'s sink rate per (length, ε):
// sinks_heads, sinks_rate and sinks_manifest.json (docs/diagnostics.md,
// "Attention sinks").
func runSinks(opts *SinksOptions) error {
	plan, fmts, err := opts.Stream.validate()
	if err != nil {
		return err
	}
	mo := results.SinksOptions{StreamPlan: plan, IncludeFirstQuery: opts.IncludeFirstQuery, GateBelow: opts.GateBelow, SinkRows: opts.SinkRows, SplitLocal: opts.SplitLocal, TileRows: opts.Tile}
	for _, s := range strings.Split(opts.Eps, ",") {
		e, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return fmt.Errorf("--eps %q: %q is not a number", opts.Eps, s)
		}
		mo.Eps = append(mo.Eps, e)
	}
	spec, run, err := opts.Stream.streamSpec("sinks", "the sinks tables and "+results.SinksManifestName, fmts, &opts.cmdIO)
	if err != nil {
		return err
	}
	man, heads, rates, err := (&analysis.SinksRun{RunSpec: spec, Options: mo}).Run()
	return finish(run, man, err, func() error {
		fmt.Fprintf(opts.Stdout, "wrote %d head rows and %d sink-rate rows to %s (%.1f s)\n", len(heads), len(rates), opts.Stream.Out, man.Seconds)
		for _, r := range rates {
			fmt.Fprintf(opts.Stdout, "T=%d %s layers: Sink_1^%g = %.1f %% (%d of %d heads)", r.T, r.Layers, r.Eps, r.Rate, r.HeadsAbove, r.Heads)
			if r.RowsLeftOut > 0 {
				fmt.Fprintf(opts.Stdout, "; %d of %d query rows left out (position 0 outside their sliding window)", r.RowsLeftOut, r.Rows)
			}
			fmt.Fprintln(opts.Stdout)
		}
		for _, n := range man.Notes {
			fmt.Fprintln(opts.Stdout, "note:", n)
		}
		return nil
	})
}
