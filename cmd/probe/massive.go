package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// MassiveOptions are the options of probe massive.
type MassiveOptions struct {
	Stdout        io.Writer
	CLIOptions    []results.Option // every flag with its value, for the manifest
	CommandLine   []string         // the arguments after the command name, for the manifest and the resume note
	Stream        streamFlags
	TopK          int
	Interventions string
	Layer         int
	Entries       int
}

// NewCmdMassive builds probe massive; runF (nil: runMassive) runs it.
func NewCmdMassive(runF func(*MassiveOptions) error) *cobra.Command {
	opts := &MassiveOptions{}
	cmd := &cobra.Command{
		Use:     "massive --model <dir> (--ids <file> | --text <file>) --lengths 1k [--top-k 10] [--intervene zero,mean] [--shard i/n] --out <dir>",
		Short:   "Sun et al.'s massive activations per layer and the perplexity change when they are zeroed or mean-replaced",
		Example: "probe massive --model zoo/checkpoints/gated_headwise --text README.md --lengths 256 --out /tmp/massive",
		Args:    noArgs(""),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Stdout = c.OutOrStdout()
			opts.CLIOptions, opts.CommandLine = cliOptions(c.Flags()), commandArgs(c)
			return orDefault(runF, runMassive)(opts)
		},
	}
	f := cmd.Flags()
	d := analysis.DefaultMassiveOptions()
	opts.Stream.registerStream(f, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	f.IntVar(&opts.TopK, "top-k", d.TopK, "largest |residual| entries reported per layer")
	f.StringVar(&opts.Interventions, "intervene", strings.Join(d.Interventions, ","), "interventions on the top entries, each its own pass: zero (Sun et al.), mean (channel mean over positions); none: no intervention")
	f.IntVar(&opts.Layer, "layer", d.Layer, "layer whose top entries are replaced (-1: per pass the layer with the largest top-1 ratio to its median)")
	f.IntVar(&opts.Entries, "entries", 0, "entries replaced (0: --top-k)")
	opts.Stream.declareRelations(cmd)
	return cmd
}

// runMassive writes the massive activations of every layer's residual
// stream (Sun et al. 2024) and the perplexity change when the largest are
// zeroed or mean-replaced: massive_top, massive_ppl and
// massive_manifest.json (docs/diagnostics.md, "Massive activations").
func runMassive(opts *MassiveOptions) error {
	lengths, fmts, err := opts.Stream.validate()
	if err != nil {
		return err
	}
	mo := results.MassiveOptions{StreamPlan: opts.Stream.plan(lengths),
		TopK: opts.TopK, Layer: opts.Layer, Entries: opts.Entries}
	if opts.Interventions != "none" {
		for _, s := range strings.Split(opts.Interventions, ",") {
			mo.Interventions = append(mo.Interventions, strings.TrimSpace(s))
		}
	}
	spec, end, err := opts.Stream.streamSpec("massive", "the massive tables and "+results.MassiveManifestName, fmts, opts.CLIOptions, opts.CommandLine)
	if err != nil {
		return err
	}
	man, tops, ppls, err := (&analysis.MassiveRun{RunSpec: spec, Options: mo}).Run()
	end()
	if err != nil {
		if man != nil {
			return opts.Stream.stopped(opts.Stdout, "massive", opts.CommandLine, &man.RunRecord, err)
		}
		return err
	}
	defer printDeviation(opts.Stdout, man.Deviation) // after the lines on the tables
	if opts.Stream.done(opts.Stdout, &man.RunRecord) {
		return nil
	}
	fmt.Fprintf(opts.Stdout, "wrote %d top-entry rows and %d perplexity rows to %s (%.1f s)\n", len(tops), len(ppls), opts.Stream.Out, man.Seconds)
	for i, p := range ppls {
		if p.Intervention == "none" {
			fmt.Fprintf(opts.Stdout, "T=%d sample %d: ppl %.4g", p.T, p.Sample, p.PPL)
		} else {
			fmt.Fprintf(opts.Stdout, "; %s at layer %d (%d entries) ppl %.4g (ΔNLL %+.4f)", p.Intervention, p.Layer, p.Entries, p.PPL, p.DNLL)
		}
		if i+1 == len(ppls) || ppls[i+1].Intervention == "none" {
			fmt.Fprintln(opts.Stdout)
		}
	}
	return nil
}
