package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// MassiveOptions are the options of probe massive.
type MassiveOptions struct {
	cmdIO
	Stream               streamFlags
	TopK, Layer, Entries int
	Interventions        string
}

// flags declares the flags of probe massive into f and their relations.
func (o *MassiveOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	d := analysis.DefaultMassiveOptions()
	o.Stream.registerStream(f, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	f.IntVar(&o.TopK, "top-k", d.TopK, "largest |residual| entries reported per layer")
	f.StringVar(&o.Interventions, "intervene", strings.Join(d.Interventions, ","), "interventions on the top entries, each its own pass: zero (Sun et al.), mean (channel mean over positions); none: no intervention")
	f.IntVar(&o.Layer, "layer", d.Layer, "layer whose top entries are replaced (-1: per pass the layer with the largest top-1 ratio to its median)")
	f.IntVar(&o.Entries, "entries", 0, "entries replaced (0: --top-k)")
	o.Stream.declareRelations(cmd)
}

// runMassive writes the massive activations of every layer's residual
// stream (Sun et al. 2024) and the perplexity change when the largest are
// zeroed or mean-replaced: massive_top, massive_ppl and
// massive_manifest.json (docs/diagnostics.md, "Massive activations").
func runMassive(opts *MassiveOptions) error {
	plan, fmts, err := opts.Stream.validate()
	if err != nil {
		return err
	}
	mo := results.MassiveOptions{StreamPlan: plan, TopK: opts.TopK, Layer: opts.Layer, Entries: opts.Entries}
	if opts.Interventions != "none" {
		for _, s := range strings.Split(opts.Interventions, ",") {
			mo.Interventions = append(mo.Interventions, strings.TrimSpace(s))
		}
	}
	spec, run, err := opts.Stream.streamSpec("massive", "the massive tables and "+results.MassiveManifestName, fmts, &opts.cmdIO)
	if err != nil {
		return err
	}
	man, tops, ppls, err := (&analysis.MassiveRun{RunSpec: spec, Options: mo}).Run()
	return finish(run, man, err, func() error {
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
	})
}
