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
	sf := addStreamFlags(fs, planDefaults{K: 1024, Samples: 1, Disjoint: analysis.DisjointAll, Placement: analysis.PlaceSequential, Seed: 1})
	pf := sf.plan
	innov := fs.String("innovation", "decayed", "innovation r_t = v_t − e^{g_t}S_{t−1}ᵀk_t (decayed: the residual the update multiplies by β) or v_t − S_{t−1}ᵀk_t (undecayed)")
	weights := fs.String("w-weights", "abs", "weights of the dispersion of the values under a W row: abs (|W|/Σ|W|, defined for any non-zero row) or signed (W/ΣW, defined only where every entry has the sign of ΣW)")
	lf := addLambdaFlags(fs, "") // of λobs^W = (n_eff^W + ν)/(S̄^W + νσ0²), σ0² = 1/d_value by default, and K^W
	wRows := fs.Bool("w-rows", false, "also compute the effective-attention rows' statistics (neff_w, first_share, row_sum, neg_share, S_mean_w, lambda_obs_w, K_w; otherwise empty): O(T²·d_k) per head against the recurrence's O(T·d_k·d_v), several times the forward pass at long T (docs/diagnostics.md)")
	noDisp := fs.Bool("no-dispersion", false, "with --w-rows: skip S_mean_w, lambda_obs_w, K_w (their O(t·d_value) per row)")
	noRows := fs.Bool("no-w-rows", false, "deprecated: the W rows are off unless --w-rows")
	tile := fs.Int("tile", 0, "rows per effective-attention tile (0: the model's default)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	lengths, fmts, err := sf.validate(pos)
	if err != nil {
		return err
	}
	if *noRows && *wRows {
		return fmt.Errorf("--no-w-rows (deprecated: the W rows are off by default) contradicts --w-rows")
	}
	if *noDisp && !*wRows {
		return fmt.Errorf("--no-dispersion applies to the W-row statistics: give it with --w-rows")
	}
	opts := analysis.GDNOptions{Lengths: lengths, Samples: *pf.samples, Disjoint: *pf.disjoint, Placement: *pf.placement, Seed: *pf.seed, Offset: *pf.offset,
		Innovation: *innov, Weights: *weights, Nu: *lf.nu, Sigma02: *lf.sigma02, Prior: *lf.prior, NoDispersion: *noDisp,
		WRows: *wRows, TileRows: *tile, AllowExtrapolation: *sf.allowExt}
	dir, stream, src, err := sf.input("gdn", "the gdn table and "+analysis.GDNManifestName)
	if err != nil {
		return err
	}
	stop := make(chan struct{})
	defer onInterrupt("gdn", stop, func() string { return resumeNote("gdn", args) })()
	run := &analysis.GDNRun{Dir: dir, Load: sf.model.loadOptions(), Source: src, Stream: stream, Options: opts, Out: *sf.out, Formats: fmts,
		Threads: *sf.threads, Shard: sf.sh, Force: *sf.force, Stop: stop, CLIOptions: cliOptions(fs), Args: append([]string{"gdn"}, args...),
		DeviationTokens: *sf.model.deviationTokens}
	progress, endBar := sf.progressBar()
	run.Progress = progress
	man, rows, err := run.Run()
	endBar()
	if err != nil {
		if man != nil {
			return sf.stopped(w, "gdn", args, &man.RunRecord, err)
		}
		return err
	}
	defer printDeviation(w, man.Deviation) // after the lines on the tables
	if sf.done(w, &man.RunRecord) {
		return nil
	}
	fmt.Fprintf(w, "wrote %d rows (%d passes × recurrent layers %v × heads × tokens) to %s (%.1f s)\n",
		len(rows), len(man.Chunks), man.Layers, *sf.out, man.Seconds)
	return nil
}
