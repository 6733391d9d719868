package main

import (
	"fmt"
	"io"

	"github.com/filterlens/probe/analysis"
)

// cmdGDN writes the Gated DeltaNet filter quantities of a hybrid model
// (probes.GDNFilter) per (length, sample, layer, value head, token):
// the table gdn and gdn_manifest.json (docs/diagnostics.md, "Gated
// DeltaNet as a filter").
func cmdGDN(args []string, w io.Writer) error {
	fs := newFlags("gdn")
	mf := addModelFlag(fs, "checkpoint (required)")
	tf := addTokenFlags(fs, false) // one token stream, cut into chunks
	idsFile, textFile, tokFile := tf.ids, tf.text, tf.tokenizer
	pf := addPlanFlags(fs, planDefaults{K: 1024, Samples: 1, Disjoint: analysis.DisjointAll, Placement: analysis.PlaceSequential, Seed: 1})
	lengths, k, samples, disjoint, placement, seed, offset := pf.lengths, pf.k, pf.samples, pf.disjoint, pf.placement, pf.seed, pf.offset
	innov := fs.String("innovation", "decayed", "innovation r_t = v_t − e^{g_t}S_{t−1}ᵀk_t (decayed: the residual the update multiplies by β) or v_t − S_{t−1}ᵀk_t (undecayed)")
	weights := fs.String("w-weights", "abs", "weights of the dispersion of the values under a W row: abs (|W|/Σ|W|, defined for any non-zero row) or signed (W/ΣW, defined only where every entry has the sign of ΣW)")
	lf := addLambdaFlags(fs, "") // of λobs^W = (n_eff^W + ν)/(S̄^W + νσ0²), σ0² = 1/d_value by default, and K^W
	nu, sigma02, prior := lf.nu, lf.sigma02, lf.prior
	noDisp := fs.Bool("no-dispersion", false, "skip S_mean_w, lambda_obs_w, K_w (their O(t·d_value) per row)")
	noRows := fs.Bool("no-w-rows", false, "skip the effective-attention rows (neff_w … K_w empty): only β, decay, innovation and state norm, at the recurrence's O(T·d_k·d_v) per head instead of the rows' O(T²·d_k)")
	tile := fs.Int("tile", 0, "rows per effective-attention tile (0: the model's default)")
	allowExt := fs.Bool("allow-extrapolation", false, "run lengths beyond max_position_embeddings")
	threads := fs.Int("threads", 0, "workers (0: GOMAXPROCS)")
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
		return fmt.Errorf("--lengths is required (e.g. --lengths 4k)")
	case (*idsFile == "") == (*textFile == ""):
		return fmt.Errorf("give exactly one of --ids and --text")
	}
	fmts, err := analysis.ParseFormats(*formats)
	if err != nil {
		return fmt.Errorf("--format: %w", err)
	}
	opts := analysis.GDNOptions{Samples: *samples, Disjoint: *disjoint, Placement: *placement, Seed: *seed, Offset: *offset,
		Innovation: *innov, Weights: *weights, Nu: *nu, Sigma02: *sigma02, Prior: *prior, NoDispersion: *noDisp,
		NoRows: *noRows, TileRows: *tile, AllowExtrapolation: *allowExt}
	if opts.Lengths, err = analysis.ParseLengths(*lengths, *k); err != nil {
		return fmt.Errorf("--lengths: %w", err)
	}
	dir, err := mf.dir()
	if err != nil {
		return err
	}
	if err := refuseNonEmpty(*out, "the gdn table and "+analysis.GDNManifestName, *force); err != nil {
		return err
	}
	stream, src, err := readTokenStream(*idsFile, *textFile, dir, *tokFile)
	if err != nil {
		return err
	}
	run := &analysis.GDNRun{Dir: dir, Load: mf.loadOptions(), Source: src, Stream: stream, Options: opts, Out: *out, Formats: fmts,
		Threads: *threads, CLIOptions: cliOptions(fs), Args: append([]string{"gdn"}, args...)}
	man, rows, err := run.Run()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %d rows (%d passes × Gated DeltaNet layers %v × %d value heads × tokens) to %s (%.1f s)\n",
		len(rows), len(man.Chunks), man.Layers, rows[len(rows)-1].Head+1, *out, man.Seconds)
	return nil
}
