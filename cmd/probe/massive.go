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
	mf := addModelFlag(fs, "checkpoint (required)")
	tf := addTokenFlags(fs, false) // one token stream, cut into chunks
	idsFile, textFile, tokFile := tf.ids, tf.text, tf.tokenizer
	pf := addPlanFlags(fs, planDefaults{K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	lengths, k, samples, disjoint, placement, seed, offset := pf.lengths, pf.k, pf.samples, pf.disjoint, pf.placement, pf.seed, pf.offset
	topK := fs.Int("top-k", d.TopK, "largest |residual| entries reported per layer")
	interventions := fs.String("intervene", strings.Join(d.Interventions, ","), "interventions on the top entries, each its own pass: zero (Sun et al.), mean (channel mean over positions); none: no intervention")
	layer := fs.Int("layer", d.Layer, "layer whose top entries are replaced (-1: per pass the layer with the largest top-1 ratio to its median)")
	entries := fs.Int("entries", 0, "entries replaced (0: --top-k)")
	allowExt := fs.Bool("allow-extrapolation", false, "run lengths beyond max_position_embeddings")
	threads := fs.Int("threads", 0, "attention workers (0: GOMAXPROCS)")
	formats := fs.String("format", "parquet,csv", "table formats: any of parquet,csv,jsonl")
	out := fs.String("out", "", "output folder (required)")
	force := fs.Bool("force", false, "write into an --out that already holds files (tables of the same names are replaced)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q", pos[0])
	case *mf.name == "":
		return fmt.Errorf("--model is required (a checkpoint folder or a hub model id org/name)")
	case *out == "":
		return fmt.Errorf("--out is required")
	case *lengths == "":
		return fmt.Errorf("--lengths is required (e.g. --lengths 1k)")
	case (*idsFile == "") == (*textFile == ""):
		return fmt.Errorf("give exactly one of --ids and --text")
	}
	fmts, err := analysis.ParseFormats(*formats)
	if err != nil {
		return fmt.Errorf("--format: %w", err)
	}
	opts := analysis.MassiveOptions{Samples: *samples, Disjoint: *disjoint, Placement: *placement, Seed: *seed, Offset: *offset,
		TopK: *topK, Layer: *layer, Entries: *entries, AllowExtrapolation: *allowExt}
	if *interventions != "none" {
		for _, s := range strings.Split(*interventions, ",") {
			opts.Interventions = append(opts.Interventions, strings.TrimSpace(s))
		}
	}
	if opts.Lengths, err = analysis.ParseLengths(*lengths, *k); err != nil {
		return fmt.Errorf("--lengths: %w", err)
	}
	dir, err := mf.dir()
	if err != nil {
		return err
	}
	if err := refuseNonEmpty(*out, "the massive tables and "+analysis.MassiveManifestName, *force); err != nil {
		return err
	}
	stream, src, err := readTokenStream(*idsFile, *textFile, dir, *tokFile)
	if err != nil {
		return err
	}
	run := &analysis.MassiveRun{Dir: dir, Load: mf.loadOptions(), Source: src, Stream: stream, Options: opts, Out: *out, Formats: fmts,
		Threads: *threads, CLIOptions: cliOptions(fs), Args: append([]string{"massive"}, args...)}
	man, tops, ppls, err := run.Run()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %d top-entry rows and %d perplexity rows to %s (%.1f s)\n", len(tops), len(ppls), *out, man.Seconds)
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
