package main

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/checkpoint"
)

// cmdPPL measures perplexity against context length (RFA Table 1's
// protocol) over one or more checkpoints, and for gated checkpoints with
// the learned output gate replaced (BFT's Prediction 3).
func cmdPPL(args []string, w io.Writer) error {
	fs := newFlags("ppl")
	d := analysis.DefaultPPLOptions()
	mf := addModelFlag(fs, "checkpoints, comma-separated (required)")
	tf := addTokenFlags(fs, false) // one token stream (the models must share the tokenizer for --text)
	idsFile, textFile, tokFile := &tf.IDs, &tf.Text, &tf.Tokenizer
	pf := addPlanFlags(fs, planDefaults{Lengths: "256,512,1024,2048,4096", K: 1024, Samples: d.Samples, Disjoint: d.Disjoint, Placement: d.Placement, Seed: d.Seed, Offset: d.Offset})
	lengths, k, samples, disjoint, placement, seed, offset := &pf.Lengths, &pf.K, &pf.Samples, &pf.Disjoint, &pf.Placement, &pf.Seed, &pf.Offset
	gates := fs.String("gate", strings.Join(d.Variants, ","), "gate variants of gated models: learned, one (gate = 1), k (K_BFT), k-matched, k-lambda, mean (see docs/diagnostics.md)")
	positions := fs.String("positions", d.Positions, "scored positions: all, last-quarter, or from:N (t ≥ N)")
	lf := addLambdaFlags(fs, "reml (Eq. 6) or naive (Eq. 5), for the K gates")
	calibLen := fs.Int("calib-length", 0, "tokens per calibration chunk of k-matched, k-lambda and mean (0: the smallest length)")
	calibN := fs.Int("calib-samples", 1, "calibration chunks (taken from the stream before the evaluation chunks)")
	trainLen := fs.Int("train-length", 0, "the models' training context T_train, for the figures (0: unknown)")
	ci := fs.Float64("ci-level", d.CILevel, "level of the Student-t intervals over chunks")
	threads := addThreadsFlag(fs)
	formats := fs.String("format", "parquet,csv", "table formats: any of parquet,csv,jsonl")
	out := fs.String("out", "", "output folder (required)")
	progress := addProgressFlag(fs)
	force := fs.Bool("force", false, "write into an --out that already holds files (tables of the same names are replaced)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q", pos[0])
	case mf.Name == "":
		return fmt.Errorf("--model is required (one checkpoint, or several separated by commas)")
	case *out == "":
		return fmt.Errorf("--out is required")
	case (*idsFile == "") == (*textFile == ""):
		return fmt.Errorf("give exactly one of --ids and --text")
	case *k != 1000 && *k != 1024:
		return fmt.Errorf("--k %d: want 1000 or 1024", *k)
	}
	if err := mf.checkFlags(); err != nil {
		return err
	}
	var models []string
	var hubs []*checkpoint.HubModel
	for _, m := range strings.Split(mf.Name, ",") {
		if m = strings.TrimSpace(m); m != "" {
			d, hub, err := checkpoint.ResolveModel(m, mf.Revision)
			if err != nil {
				return err
			}
			models, hubs = append(models, d), append(hubs, hub)
		}
	}
	opts := analysis.PPLOptions{Samples: *samples, Disjoint: *disjoint, Placement: *placement, Seed: *seed, Offset: *offset,
		Positions: *positions, LambdaForm: lf.Form, Nu: lf.Nu, Sigma02: lf.Sigma02, Prior: lf.Prior, LambdaMax: lf.Max,
		CalibLength: *calibLen, CalibSamples: *calibN, TrainLength: *trainLen, CILevel: *ci}
	if opts.Lengths, err = analysis.ParseLengths(*lengths, *k); err != nil {
		return fmt.Errorf("--lengths: %w", err)
	}
	if opts.Variants, err = analysis.ParseVariants(*gates); err != nil {
		return fmt.Errorf("--gate: %w", err)
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	fmts, err := analysis.ParseFormats(*formats)
	if err != nil {
		return err
	}
	if err := refuseNonEmpty(*out, "the perplexity tables and "+analysis.PPLManifestName, *force); err != nil {
		return err
	}

	if *textFile != "" && *tokFile == "" {
		// every model must tokenize the text the same way
		var first analysis.FileHash
		for i, m := range models {
			h, err := analysis.HashFile(filepath.Join(m, "tokenizer.json"))
			if err != nil {
				return fmt.Errorf("%s has no readable tokenizer.json (%v): pass --ids, or --tokenizer <file>", m, err)
			}
			if i == 0 {
				first = h
			} else if h.SHA256 != first.SHA256 {
				return fmt.Errorf("%s and %s have different tokenizer.json files: one text cannot feed both; pass --tokenizer or --ids", models[0], m)
			}
		}
	}
	stream, src, err := readTokenStream(*idsFile, *textFile, models[0], *tokFile)
	if err != nil {
		return err
	}

	run := &analysis.PPLRun{Dirs: models, Hubs: hubs, Source: src, Stream: stream, Options: opts, Out: *out, Formats: fmts,
		Threads: *threads, Load: mf.loadOptions(), CLIOptions: cliOptions(fs), Args: append([]string{"ppl"}, args...),
		DeviationTokens: mf.DeviationTokens}
	if *progress {
		bar := newProgressBar(progressOut)
		run.Progress = func(p analysis.PPLProgress) { pplProgress(bar, p) }
		defer bar.finish()
	}
	res, err := run.Run()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d models, %d passes in %.1f s; tables %s and %s in %s\n", len(res.Manifest.Models), len(res.Chunks),
		res.Manifest.Seconds, strings.Join(res.Manifest.Tables, ", "), analysis.PPLManifestName, *out)
	for _, pm := range res.Manifest.Models {
		if pm.Deviation != nil {
			fmt.Fprintf(w, "%s: ", pm.Label)
			printDeviation(w, pm.Deviation)
		}
	}
	fmt.Fprintln(w)
	return writePPLSummary(w, res)
}

// pplProgress draws one progress state of a perplexity run with the
// sweep's bar (one line per finished pass when not on a terminal).
func pplProgress(b *progressBar, p analysis.PPLProgress) {
	if !b.tty && !p.Done {
		return
	}
	if b.tty && !p.Done && time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last = time.Now()
	frac := 1.0
	if tot := p.Work + p.WorkLeft; tot > 0 {
		frac = p.Work / tot
	}
	const width = 24
	n := int(frac*width + 0.5)
	rate, eta := "—", "—"
	if s := p.Elapsed.Seconds(); s > 0 && p.Tokens > 0 {
		rate = fmt.Sprintf("%.0f tok/s", float64(p.Tokens)/s)
	}
	if p.Work > 0 {
		eta = time.Duration(p.Elapsed.Seconds() * p.WorkLeft / p.Work * float64(time.Second)).Round(time.Second).String()
	}
	state := fmt.Sprintf("layer %d/%d", p.Layer, p.Layers)
	if p.Done {
		state = "done"
	}
	line := fmt.Sprintf("[%s] %3.0f%%  pass %d/%d %s %s T=%d sample %d %s  %s  ETA %s", strings.Repeat("=", n)+strings.Repeat(" ", width-n),
		100*frac, p.Pass, p.Passes, p.Model, p.Variant, p.T, p.Sample, state, rate, eta)
	if b.tty {
		fmt.Fprintf(b.w, "\r\033[K%s", line)
		b.drawn = true
	} else {
		fmt.Fprintln(b.w, line)
	}
}

// writePPLSummary prints the summary table: perplexity with its interval
// per (model, variant, T) and the paired NLL difference to the learned
// gate.
func writePPLSummary(w io.Writer, res *analysis.PPLResults) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	lvl := res.Manifest.Options.CILevel * 100
	fmt.Fprintf(tw, "model\tvariant\tT\tppl\t%.0f%% interval\tΔNLL vs learned [%.0f%%]\textrapolated\n", lvl, lvl)
	for _, s := range res.Summary {
		d := "—"
		if s.Variant != analysis.VariantLearned && !math.IsNaN(s.DNLL) {
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
