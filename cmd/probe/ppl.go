package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
)

// PPLOptions are the options of probe ppl.
type PPLOptions struct {
	cmdIO
	Run                                    runFlags
	Input                                  tokenFlags
	Plan                                   planFlags
	Gates                                  string
	Positions                              string
	Lambda                                 lambdaFlags
	CalibLength, CalibSamples, TrainLength int
	CILevel                                float64
}

// flags declares the flags of probe ppl into f and their relations.
func (o *PPLOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	d := analysis.DefaultPPLOptions()
	o.Run.registerRun(f, "checkpoints, comma-separated (required)")
	o.Input.registerInput(f, false) // one token stream (the models must share the tokenizer for --text)
	o.Plan.registerPlan(f, planDefaults{Lengths: "256,512,1024,2048,4096", K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	f.StringVar(&o.Gates, "gate", strings.Join(d.Variants, ","), "gate variants of gated models: learned, one (gate = 1), k (K_BFT), k-matched, k-lambda, mean (see docs/diagnostics.md)")
	f.StringVar(&o.Positions, "positions", d.Positions, "scored positions: all, last-quarter, or from:N (t ≥ N)")
	o.Lambda.registerLambda(f, "reml (Eq. 6) or naive (Eq. 5), for the K gates")
	f.IntVar(&o.CalibLength, "calib-length", 0, "tokens per calibration chunk of k-matched, k-lambda and mean (0: the smallest length)")
	f.IntVar(&o.CalibSamples, "calib-samples", 1, "calibration chunks (taken from the stream before the evaluation chunks)")
	f.IntVar(&o.TrainLength, "train-length", 0, "the models' training context T_train, for the figures (0: unknown)")
	f.Float64Var(&o.CILevel, "ci-level", d.CILevel, "level of the Student-t intervals over chunks")
	markRequired(cmd, "model", "one checkpoint, or several separated by commas")
	markRequired(cmd, "out", "")
	markExactlyOne(cmd, "ids", "text")
}

// runPPL measures perplexity against context length (RFA Table 1's
// protocol) over one or more checkpoints, and for gated checkpoints with
// the learned output gate replaced (BFT's Prediction 3).
func runPPL(opts *PPLOptions) error {
	if k := opts.Plan.K; k != 1000 && k != 1024 {
		return fmt.Errorf("--k %d: want 1000 or 1024", k)
	}
	if err := opts.Run.Model.checkFlags(); err != nil {
		return err
	}
	var models []string
	var hubs []*checkpoint.HubModel
	for _, m := range strings.Split(opts.Run.Model.Name, ",") {
		if m = strings.TrimSpace(m); m != "" {
			d, hub, err := checkpoint.ResolveModel(m, opts.Run.Model.Revision)
			if err != nil {
				return err
			}
			models, hubs = append(models, d), append(hubs, hub)
		}
	}
	lengths, err := analysis.ParseLengths(opts.Plan.Lengths, opts.Plan.K)
	if err != nil {
		return fmt.Errorf("--lengths: %w", err)
	}
	// every length runs, those past max_position_embeddings marked extrapolated
	po := results.PPLOptions{StreamPlan: opts.Plan.plan(lengths, true),
		Positions: opts.Positions, LambdaForm: opts.Lambda.Form, Nu: opts.Lambda.Nu, Sigma02: opts.Lambda.Sigma02, Prior: opts.Lambda.Prior, LambdaMax: opts.Lambda.Max,
		CalibLength: opts.CalibLength, CalibSamples: opts.CalibSamples, TrainLength: opts.TrainLength, CILevel: opts.CILevel}
	if po.Variants, err = analysis.ParseVariants(opts.Gates); err != nil {
		return fmt.Errorf("--gate: %w", err)
	}
	if err := analysis.ValidatePPLOptions(&po); err != nil {
		return err
	}
	fmts, err := opts.Run.formats()
	if err != nil {
		return err
	}
	stream, src, err := pplStream(opts.Input, models)
	if err != nil {
		return err
	}
	spec, run, err := opts.Run.spec("ppl", "the perplexity tables and "+results.PPLManifestName, fmts, &opts.cmdIO)
	if err != nil {
		return err
	}
	spec.Stream, spec.Source = stream, src
	res, err := (&analysis.PPLRun{RunSpec: spec, Dirs: models, Hubs: hubs, Options: po}).Run()
	return finish(run, res, err, func() error {
		var tables []string // the tables' names, without their formats
		for _, t := range res.Manifest.Tables {
			if t = strings.TrimSuffix(t, filepath.Ext(t)); !slices.Contains(tables, t) {
				tables = append(tables, t)
			}
		}
		fmt.Fprintf(opts.Stdout, "%d models, %d passes in %.1f s; tables %s and %s in %s\n", len(res.Manifest.Models), len(res.Chunks),
			res.Manifest.Seconds, strings.Join(tables, ", "), results.PPLManifestName, opts.Run.Out)
		for _, pm := range res.Manifest.Models {
			if pm.Deviation != nil {
				fmt.Fprintf(opts.Stdout, "%s: ", pm.Label)
				printDeviation(opts.Stdout, pm.Deviation)
			}
		}
		fmt.Fprintln(opts.Stdout)
		return writePPLSummary(opts.Stdout, res)
	})
}

// pplStream reads the token stream of a ppl run: --ids, or --text
// tokenized by --tokenizer or by the models' tokenizer.json, which must
// then be the same file for every model (one text cannot feed two
// tokenizers).
func pplStream(in tokenFlags, models []string) ([]int, results.SourceInfo, error) {
	if in.Text != "" && in.Tokenizer == "" {
		var first results.FileHash
		for i, m := range models {
			h, err := analysis.HashFile(filepath.Join(m, "tokenizer.json"))
			if err != nil {
				return nil, results.SourceInfo{}, fmt.Errorf("%s has no readable tokenizer.json (%v): pass --ids, or --tokenizer <file>", m, err)
			}
			if i == 0 {
				first = h
			} else if h.SHA256 != first.SHA256 {
				return nil, results.SourceInfo{}, fmt.Errorf("%s and %s have different tokenizer.json files: one text cannot feed both; pass --tokenizer or --ids", models[0], m)
			}
		}
	}
	return readTokenStream(in.IDs, in.Text, models[0], in.Tokenizer)
}

// writePPLSummary prints the summary table: perplexity with its interval
// per (model, variant, T) and the paired NLL difference to the learned
// gate.
func writePPLSummary(w io.Writer, res *results.PPLResults) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	lvl := res.Manifest.Options.CILevel * 100
	fmt.Fprintf(tw, "model\tvariant\tT\tppl\t%.0f%% interval\tΔNLL vs learned [%.0f%%]\textrapolated\n", lvl, lvl)
	for _, s := range res.Summary {
		d := "—"
		if s.Variant != results.VariantLearned && !math.IsNaN(s.DNLL) {
			d = fmt.Sprintf("%+.4f", s.DNLL)
			if !math.IsNaN(s.DNLLLo) {
				d += fmt.Sprintf(" [%+.4f, %+.4f]", s.DNLLLo, s.DNLLHi)
			}
		}
		iv := "—"
		if !math.IsNaN(s.PPLLo) {
			iv = fmt.Sprintf("[%.3f, %.3f]", s.PPLLo, s.PPLHi)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%s\t%s\t%v\n", s.Model, s.Variant, s.T, s.PPL, iv, d, s.Extrap)
	}
	return tw.Flush()
}
