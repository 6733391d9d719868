package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/filterlens/probe/analysis"
)

// cmdMassive writes the massive activations of every layer's residual
// stream (Sun et al. 2024) and the perplexity change when the largest are
// zeroed or mean-replaced: massive_top, massive_ppl and
// massive_manifest.json (docs/diagnostics.md, "Massive activations").
func cmdMassive(args []string, w io.Writer) error {
	fs := newFlags("massive")
	d := analysis.DefaultMassiveOptions()
	sf := addStreamFlags(fs, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	pf := sf.Plan
	topK := fs.Int("top-k", d.TopK, "largest |residual| entries reported per layer")
	interventions := fs.String("intervene", strings.Join(d.Interventions, ","), "interventions on the top entries, each its own pass: zero (Sun et al.), mean (channel mean over positions); none: no intervention")
	layer := fs.Int("layer", d.Layer, "layer whose top entries are replaced (-1: per pass the layer with the largest top-1 ratio to its median)")
	entries := fs.Int("entries", 0, "entries replaced (0: --top-k)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	lengths, fmts, err := sf.validate(pos)
	if err != nil {
		return err
	}
	opts := analysis.MassiveOptions{Lengths: lengths, Samples: pf.Samples, Disjoint: pf.Disjoint, Placement: pf.Placement, Seed: pf.Seed, Offset: pf.Offset,
		TopK: *topK, Layer: *layer, Entries: *entries, AllowExtrapolation: sf.AllowExtrapolation}
	if *interventions != "none" {
		for _, s := range strings.Split(*interventions, ",") {
			opts.Interventions = append(opts.Interventions, strings.TrimSpace(s))
		}
	}
	dir, stream, src, err := sf.input("massive", "the massive tables and "+analysis.MassiveManifestName)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	defer onInterrupt("massive", stop, func() string { return resumeNote("massive", args) })()
	run := &analysis.MassiveRun{Dir: dir, Load: sf.Model.loadOptions(), Source: src, Stream: stream, Options: opts, Out: sf.Out, Formats: fmts,
		Threads: sf.Threads, Shard: sf.sh, Force: sf.Force, Stop: stop, CLIOptions: cliOptions(fs), Args: append([]string{"massive"}, args...),
		DeviationTokens: sf.Model.DeviationTokens}
	progress, endBar := sf.progressBar()
	run.Progress = progress
	man, tops, ppls, err := run.Run()
	endBar()
	if err != nil {
		if man != nil {
			return sf.stopped(w, "massive", args, &man.RunRecord, err)
		}
		return err
	}
	defer printDeviation(w, man.Deviation) // after the lines on the tables
	if sf.done(w, &man.RunRecord) {
		return nil
	}
	fmt.Fprintf(w, "wrote %d top-entry rows and %d perplexity rows to %s (%.1f s)\n", len(tops), len(ppls), sf.Out, man.Seconds)
	for i, p := range ppls {
		if p.Intervention == "none" {
			fmt.Fprintf(w, "T=%d sample %d: ppl %.4g", p.T, p.Sample, p.PPL)
		} else {
			fmt.Fprintf(w, "; %s at layer %d (%d entries) ppl %.4g (ΔNLL %+.4f)", p.Intervention, p.Layer, p.Entries, p.PPL, p.DNLL)
		}
		if i+1 == len(ppls) || ppls[i+1].Intervention == "none" {
			fmt.Fprintln(w)
		}
	}
	return nil
}
