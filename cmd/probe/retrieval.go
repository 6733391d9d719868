package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/spf13/cobra"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// RetrievalOptions are the options of probe retrieval.
type RetrievalOptions struct {
	Stdout      io.Writer
	CLIOptions  []results.Option // every flag with its value, for the manifest
	CommandLine []string         // the arguments after the command name, for the manifest and the resume note
	Run         runFlags
	Segment     int
	Gap         int
	Samples     int
	Seed        uint64
	Steps       string
	Above       float64
	Tile        int
	// AllowExtrapolation runs copy tasks longer than max_position_embeddings.
	AllowExtrapolation bool
}

// NewCmdRetrieval builds probe retrieval; runF (nil: runRetrieval) runs it.
func NewCmdRetrieval(runF func(*RetrievalOptions) error) *cobra.Command {
	opts := &RetrievalOptions{}
	cmd := &cobra.Command{
		Use:     "retrieval --model <dir> [--segment 64] [--gap 0] [--samples 4] [--steps copied|all] [--shard i/n] --out <dir>",
		Short:   "Wu et al.'s retrieval score per softmax head on a synthetic copy task (argmax attention on the copied token's source)",
		Example: "probe retrieval --model zoo/checkpoints/qwen3_base --segment 64 --gap 128 --out /tmp/retrieval",
		Args:    noArgs(""),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Stdout = c.OutOrStdout()
			opts.CLIOptions, opts.CommandLine = cliOptions(c.Flags()), commandArgs(c)
			return orDefault(runF, runRetrieval)(opts)
		},
	}
	f := cmd.Flags()
	d := analysis.DefaultRetrievalOptions()
	opts.Run.registerRun(f, "checkpoint (required)")
	extrapolationVar(f, &opts.AllowExtrapolation)
	f.IntVar(&opts.Segment, "segment", d.Segment, "length n of the repeated segment of distinct token ids")
	f.IntVar(&opts.Gap, "gap", d.Gap, "filler tokens between the two copies (T = 2 × segment + gap)")
	f.IntVar(&opts.Samples, "samples", d.Samples, "passes, each with its own segment and filler")
	f.Uint64Var(&opts.Seed, "seed", d.Seed, "seed of the segments and fillers")
	f.StringVar(&opts.Steps, "steps", d.Steps, "copy steps scored: copied (the model's greedy next token is the copy, as Wu et al. count) or all")
	f.Float64Var(&opts.Above, "above", d.Above, "score above which a head counts as a retrieval head (Wu et al.: 0.1)")
	tileVar(f, &opts.Tile)
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
	return cmd
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
	spec, end, err := opts.Run.spec("retrieval", "retrieval_heads and "+results.RetrievalManifestName, fmts, opts.CLIOptions, opts.CommandLine)
	if err != nil {
		return err
	}
	spec.Dir = dir
	man, rows, err := (&analysis.RetrievalRun{RunSpec: spec, Options: results.RetrievalOptions{Segment: opts.Segment, Gap: opts.Gap, Samples: opts.Samples,
		Seed: opts.Seed, Steps: opts.Steps, Above: opts.Above, TileRows: opts.Tile, AllowExtrapolation: opts.AllowExtrapolation}}).Run()
	end()
	if err != nil {
		if man != nil {
			return opts.Run.stopped(opts.Stdout, "retrieval", opts.CommandLine, &man.RunRecord, err)
		}
		return err
	}
	if opts.Run.done(opts.Stdout, &man.RunRecord) {
		return nil
	}
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
}
