package main

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// RetrievalOptions are the options of probe retrieval.
type RetrievalOptions struct {
	cmdIO
	Run     runFlags
	Options results.RetrievalOptions // the copy task and the score, as the flags fill them
}

// flags declares the flags of probe retrieval into f and their relations.
func (o *RetrievalOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	d := analysis.DefaultRetrievalOptions()
	o.Run.registerRun(f, "checkpoint (required)")
	extrapolationVar(f, &o.Options.AllowExtrapolation)
	f.IntVar(&o.Options.Segment, "segment", d.Segment, "length n of the repeated segment of distinct token ids")
	f.IntVar(&o.Options.Gap, "gap", d.Gap, "filler tokens between the two copies (T = 2 × segment + gap)")
	f.IntVar(&o.Options.Samples, "samples", d.Samples, "passes, each with its own segment and filler")
	f.Uint64Var(&o.Options.Seed, "seed", d.Seed, "seed of the segments and fillers")
	f.StringVar(&o.Options.Steps, "steps", d.Steps, "copy steps scored: copied (the model's greedy next token is the copy, as Wu et al. count) or all")
	f.Float64Var(&o.Options.Above, "above", d.Above, "score above which a head counts as a retrieval head (Wu et al.: 0.1)")
	tileVar(f, &o.Options.TileRows)
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
}

// runRetrieval writes Wu et al.'s retrieval score of every softmax head on
// a synthetic copy task (a segment of distinct tokens, filler, the segment
// again): retrieval_heads and retrieval_manifest.json (docs/diagnostics.md,
// "Retrieval heads").
func runRetrieval(opts *RetrievalOptions) error {
	fmts, err := opts.Run.formats()
	if err != nil {
		return err
	}
	dir, err := opts.Run.Model.dir()
	if err != nil {
		return err
	}
	spec, run, err := opts.Run.spec("retrieval", "retrieval_heads and "+results.RetrievalManifestName, fmts, &opts.cmdIO)
	if err != nil {
		return err
	}
	spec.Dir = dir
	man, rows, err := (&analysis.RetrievalRun{RunSpec: spec, Options: opts.Options}).Run()
	return finish(run, man, err, func() error {
		var copied, queries int
		for _, s := range man.Samples {
			copied, queries = copied+s.Copied, queries+s.CopyQueries
		}
		fmt.Fprintf(opts.Stdout, "wrote %d head rows to %s (%.1f s): T = %d, the model copied %d of %d copy steps; %d heads score above %g\n",
			len(rows), opts.Run.Out, man.Seconds, man.T, copied, queries, man.HeadsAbove, man.Options.Above)
		top := append([]results.RetrievalHeadRow{}, rows...)
		sort.SliceStable(top, func(i, j int) bool { return top[i].Score > top[j].Score })
		for _, r := range top[:min(5, len(top))] {
			if r.Steps > 0 {
				fmt.Fprintf(opts.Stdout, "  layer %d head %d: retrieval score %.3f (%d of %d steps), source mass %.3f\n", r.Layer, r.Head, r.Score, r.Hits, r.Steps, r.SourceMass)
			}
		}
		for _, n := range man.Notes {
			fmt.Fprintln(opts.Stdout, "note:", n)
		}
		return nil
	})
}
