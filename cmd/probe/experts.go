package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// ExpertsOptions are the options of probe experts.
type ExpertsOptions struct {
	Stdout      io.Writer
	CLIOptions  []results.Option // every flag with its value, for the manifest
	CommandLine []string         // the arguments after the command name, for the manifest and the resume note
	Stream      streamFlags
	Margin      string
}

// NewCmdExperts builds probe experts; runF (nil: runExperts) runs it.
func NewCmdExperts(runF func(*ExpertsOptions) error) *cobra.Command {
	opts := &ExpertsOptions{}
	cmd := &cobra.Command{
		Use:     "experts --model <dir> (--ids <file> | --text <file>) --lengths 1k [--margin prob|logit] [--shard i/n] --out <dir>",
		Short:   "mixture-of-experts routing per layer: expert load over all tokens, the first token vs the rest, routing weights, router entropy and top-1 margin",
		Example: "probe experts --model zoo/checkpoints/gpt_oss_tiny --text README.md --lengths 128,256 --out /tmp/experts",
		Args:    noArgs(""),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Stdout = c.OutOrStdout()
			opts.CLIOptions, opts.CommandLine = cliOptions(c.Flags()), commandArgs(c)
			return orDefault(runF, runExperts)(opts)
		},
	}
	f := cmd.Flags()
	d := analysis.DefaultExpertsRunOptions()
	opts.Stream.registerStream(f, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	f.StringVar(&opts.Margin, "margin", d.Margin, "top-1 margin of the router: prob (p₍₁₎ − p₍₂₎ of the softmax over all experts, in [0, 1]) or logit (z₍₁₎ − z₍₂₎)")
	opts.Stream.declareRelations(cmd)
	return cmd
}

// runExperts writes the routing of every mixture-of-experts layer per
// length: experts_load (layer, expert), experts_layers (layer) and
// experts_manifest.json (docs/diagnostics.md, "Mixture-of-experts
// routing").
func runExperts(opts *ExpertsOptions) error {
	lengths, fmts, err := opts.Stream.validate()
	if err != nil {
		return err
	}
	mo := results.ExpertsRunOptions{StreamPlan: opts.Stream.plan(lengths), Margin: opts.Margin}
	spec, end, err := opts.Stream.streamSpec("experts", "the experts tables and "+results.ExpertsManifestName, fmts, opts.CLIOptions, opts.CommandLine)
	if err != nil {
		return err
	}
	man, loads, layers, err := (&analysis.ExpertsRun{RunSpec: spec, Options: mo}).Run()
	end()
	if err != nil {
		if man != nil {
			return opts.Stream.stopped(opts.Stdout, "experts", opts.CommandLine, &man.RunRecord, err)
		}
		return err
	}
	defer printDeviation(opts.Stdout, man.Deviation) // after the lines on the tables
	if opts.Stream.done(opts.Stdout, &man.RunRecord) {
		return nil
	}
	fmt.Fprintf(opts.Stdout, "wrote %d load rows and %d layer rows to %s (%.1f s)\n", len(loads), len(layers), opts.Stream.Out, man.Seconds)
	for _, r := range layers {
		fmt.Fprintf(opts.Stdout, "T=%d layer %d: entropy %.3f nats (first token %.3f), top-1 margin %.3f; first tokens pick expert %d (%.0f %%, the rest %.0f %%)\n",
			r.T, r.Layer, r.Entropy, r.EntropyFirst, r.Margin, r.FirstMode, 100*r.FirstAgree, 100*r.RestAgree)
	}
	return nil
}
