package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// ExpertsOptions are the options of probe experts.
type ExpertsOptions struct {
	cmdIO
	Stream streamFlags
	Margin string
}

// flags declares the flags of probe experts into f and their relations.
func (o *ExpertsOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	d := analysis.DefaultExpertsRunOptions()
	o.Stream.registerStream(f, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	f.StringVar(&o.Margin, "margin", d.Margin, "top-1 margin of the router: prob (p₍₁₎ − p₍₂₎ of the softmax over all experts, in [0, 1]) or logit (z₍₁₎ − z₍₂₎)")
	o.Stream.declareRelations(cmd)
}

// runExperts writes the routing of every mixture-of-experts layer per
// length: experts_load (layer, expert), experts_layers (layer) and
// experts_manifest.json (docs/diagnostics.md, "Mixture-of-experts
// routing").
func runExperts(opts *ExpertsOptions) error {
	plan, fmts, err := opts.Stream.validate()
	if err != nil {
		return err
	}
	mo := results.ExpertsRunOptions{StreamPlan: plan, Margin: opts.Margin}
	spec, run, err := opts.Stream.streamSpec("experts", "the experts tables and "+results.ExpertsManifestName, fmts, &opts.cmdIO)
	if err != nil {
		return err
	}
	man, loads, layers, err := (&analysis.ExpertsRun{RunSpec: spec, Options: mo}).Run()
	return finish(run, man, err, func() error {
		fmt.Fprintf(opts.Stdout, "wrote %d load rows and %d layer rows to %s (%.1f s)\n", len(loads), len(layers), opts.Stream.Out, man.Seconds)
		for _, r := range layers {
			fmt.Fprintf(opts.Stdout, "T=%d layer %d: entropy %.3f nats (first token %.3f), top-1 margin %.3f; first tokens pick expert %d (%.0f %%, the rest %.0f %%)\n",
				r.T, r.Layer, r.Entropy, r.EntropyFirst, r.Margin, r.FirstMode, 100*r.FirstAgree, 100*r.RestAgree)
		}
		return nil
	})
}
