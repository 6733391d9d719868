package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/filters"
	"github.com/filterlens/probe/report/papers"
	"github.com/filterlens/probe/report/sweep"
	"github.com/filterlens/probe/zoo"
)

// Settings of probe demo: small enough for under three minutes on a
// 2-core machine, large enough to show each protocol's shape.
var (
	demoSweepLengths = "128,256,512,1024,2048" // BFT App. I: T beyond the training context of 256
	demoSweepSamples = "4"
	demoPPLLengths   = "256,512,1024,2048,4096" // RFA Table 1's shape: 16× the training context
	demoPPLSamples   = "2"
	demoPPLGates     = "learned,one,k,k-matched" // Prediction 3: the learned gate, no gate, K_BFT (raw and mean-matched)
	demoMapTokens    = 1024                      // RFA Figs. 11–14
	demoGDNLength    = "512"                     // probe gdn on the hybrid: one pass
	demoSinkLengths  = "256,1024"                // probe sinks on the hybrid
	demoDiagRows     = 2                         // probe diag on the hybrid: rows of the stream …
	demoDiagLength   = 512                       // … of this many tokens (2× its training context)
)

// cmdDemo runs the whole story on the zoo checkpoints embedded in the
// binary (package zoo: trained here on the Brown corpus) and a token
// stream sampled from the gated model, with no network and no other
// input: BFT's App. I protocol on the Qiu-gated model (Figs. 2–4), the RFA
// parameter readout and figures of the SC-RFA model (Figs. 3–4, 8–10,
// 11–14), AFA's toy-system figures (Figs. 1–3), the per-row diagnostics of
// the Qwen3.5-style hybrid's softmax layer (probe diag), and perplexity vs
// context length with BFT's Prediction 3 (the gate replaced by K_BFT), also
// of the hybrid and the Gemma-3-style model, all in one offline
// report.html.
func cmdDemo(args []string, w io.Writer) error {
	fs := newFlags("demo")
	out := fs.String("out", "probe-demo", "output directory: new, empty, or holding an earlier demo (replaced)")
	force := fs.Bool("force", false, "write into an --out that holds other files")
	static := fs.Bool("static", false, "inline SVG charts, no JavaScript (chosen anyway when echarts.min.js is not installed)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q: probe demo takes only --out, --force and --static", pos[0])
	}
	if err := refuseForeignReport(*out, *force); err != nil {
		return err
	}
	st := &demoStages{w: w, n: 6, start: time.Now()}
	var figs []*report.Figure

	st.next("unpacking the embedded zoo checkpoints and token stream")
	zdir := filepath.Join(*out, "zoo")
	if err := zoo.Unpack(zdir); err != nil {
		return err
	}
	gated, rfa, afa := filepath.Join(zdir, "gated_headwise"), filepath.Join(zdir, "rfa_m2_sc"), filepath.Join(zdir, "afa_toy")
	base, rfa1 := filepath.Join(zdir, "qwen3_base"), filepath.Join(zdir, "rfa_m1")
	hybrid, gemma := filepath.Join(zdir, "qwen35_hybrid"), filepath.Join(zdir, "gemma3_tiny")
	ids, src, err := demoStream(filepath.Join(zdir, "demo_stream.json"), filepath.Join(*out, "stream.ids.json"))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "      %s\n", src)

	st.next("BFT App. I on gated_headwise: n_eff, S, λobs, K, BOS mass and gates at T = " + demoSweepLengths + ", " + demoSweepSamples +
		" samples each; the same per row on the softmax layer of the Qwen3.5-style hybrid (probe diag)")
	sweepDir := filepath.Join(*out, "bft-sweep")
	if err := cmdSweep([]string{"--model", gated, "--ids", ids, "--lengths", demoSweepLengths, "--samples", demoSweepSamples,
		"--out", sweepDir, "--format", "parquet,csv"}, w); err != nil {
		return fmt.Errorf("demo: BFT sweep: %w", err)
	}
	man, res, err := analysis.LoadResults(sweepDir, nil)
	if err != nil {
		return err
	}
	in, err := sweep.FromAnalysis(man, res, sweep.StdUnits)
	if err != nil {
		return err
	}
	br, err := sweep.Build(in)
	if err != nil {
		return err
	}
	figs = append(figs, br.Figures...)
	diagIDs, err := demoBatch(ids, filepath.Join(*out, "hybrid-diag.ids.json"), demoDiagRows, demoDiagLength)
	if err != nil {
		return err
	}
	diagCSV := filepath.Join(*out, "hybrid-diag.csv")
	do := defaultsOf(NewCmdDiag)
	do.Stdout, do.Model.Name, do.Input.IDs, do.Out = w, hybrid, diagIDs, diagCSV
	if err := runDiag(do); err != nil {
		return fmt.Errorf("demo: diagnostics of the hybrid: %w", err)
	}
	// the hybrid's Gated DeltaNet layers as filters (probe gdn) and the sink
	// measurements of its softmax layer (probe sinks), drawn from their tables
	gdnDir, sinksDir := filepath.Join(*out, "hybrid-gdn"), filepath.Join(*out, "hybrid-sinks")
	gdn, sinks := defaultsOf(NewCmdGDN), defaultsOf(NewCmdSinks)
	gdn.WRows = true // the effective-attention rows are shown: opt in to their cost
	gdn.Stdout, sinks.Stdout = io.Discard, io.Discard
	for _, run := range []struct {
		what, dir, lengths string
		stream             *streamFlags
		run                func() error
	}{
		{"Gated DeltaNet filter quantities", gdnDir, demoGDNLength, &gdn.Stream, func() error { return runGDN(gdn) }},
		{"sink measurements", sinksDir, demoSinkLengths, &sinks.Stream, func() error { return runSinks(sinks) }},
	} {
		s := run.stream
		s.Model.Name, s.Input.IDs, s.Plan.Lengths, s.Formats, s.Force, s.Out = hybrid, ids, run.lengths, "parquet", true, run.dir
		if err := run.run(); err != nil {
			return fmt.Errorf("demo: %s of the hybrid: %w", run.what, err)
		}
		fr, err := filters.Read(run.dir)
		if err != nil {
			return err
		}
		figs = append(figs, fr.Figures...)
	}
	// Wu et al.'s retrieval score of its softmax heads on a copy task
	// (probe retrieval; every copy step scored: the zoo models copy none).
	retrievalDir := filepath.Join(*out, "hybrid-retrieval")
	ro := defaultsOf(NewCmdRetrieval)
	ro.Stdout, ro.Model.Name, ro.Gap, ro.Steps, ro.Formats, ro.Force, ro.Out = io.Discard, hybrid, 64, "all", "parquet", true, retrievalDir
	if err := runRetrieval(ro); err != nil {
		return fmt.Errorf("demo: retrieval heads of the hybrid: %w", err)
	}
	fr, err := filters.Read(retrievalDir)
	if err != nil {
		return err
	}
	figs = append(figs, fr.Figures...)

	st.next("RFA: learned per-head parameters of rfa_m2_sc (probe params), Figs. 3–4, 8–10 and 11–14")
	po := defaultsOf(NewCmdParams)
	po.Stdout, po.Args = w, []string{rfa}
	if err := runParams(po); err != nil {
		return fmt.Errorf("demo: RFA parameters: %w", err)
	}
	rf := defaultsOf(NewCmdFigures).RFA
	rf.Model, rf.History, rf.AttnTokens, rf.IDs = rfa, filepath.Join(rfa, "history.json"), demoMapTokens, ids
	rr, err := rfaCheckpointReport(&rf)
	if err != nil {
		return fmt.Errorf("demo: RFA figures: %w", err)
	}
	figs = append(figs, rr.Figures...)

	st.next("AFA: the 2-D LTI toy system, Figs. 1–3 from the trained one-layer filters")
	af, err := papers.AFAToyFigures(afa)
	if err != nil {
		return fmt.Errorf("demo: AFA figures: %w", err)
	}
	figs = append(figs, af...)

	st.next("perplexity vs context length (" + demoPPLLengths + ") of the baseline, gated, RFA and SC-RFA models, and BFT Prediction 3: gate = " + demoPPLGates +
		"; then of the Qwen3.5-style hybrid and the Gemma-3-style model")
	pplDir := filepath.Join(*out, "ppl")
	if err := cmdPPL([]string{"--model", strings.Join([]string{base, gated, rfa1, rfa}, ","), "--ids", ids,
		"--lengths", demoPPLLengths, "--samples", demoPPLSamples, "--gate", demoPPLGates,
		"--disjoint", "within", "--train-length", "256", "--out", pplDir}, w); err != nil {
		return fmt.Errorf("demo: perplexity: %w", err)
	}
	pres, err := analysis.ReadPPL(pplDir)
	if err != nil {
		return err
	}
	ef, err := papers.ExtrapolationFigure(pres)
	if err != nil {
		return err
	}
	pf, err := papers.Prediction3Figure(pres, filepath.Base(gated))
	if err != nil {
		return err
	}
	figs = append(figs, ef, pf)
	// The newer families in a run of their own: RFA Table 1's figure above
	// compares with the paper's four models and has no room for more.
	pplNewDir := filepath.Join(*out, "ppl-hybrid-gemma")
	if err := cmdPPL([]string{"--model", hybrid + "," + gemma, "--ids", ids, "--lengths", demoPPLLengths, "--samples", demoPPLSamples,
		"--gate", "learned", "--disjoint", "within", "--train-length", "256", "--out", pplNewDir}, w); err != nil {
		return fmt.Errorf("demo: perplexity of the hybrid and Gemma-3-style models: %w", err)
	}

	st.next("writing the report")
	r := &report.Report{
		Title: "probe demo — filtering diagnostics on the project's reference zoo",
		Subtitle: "Every figure below was computed just now by this binary from checkpoints trained in this project " +
			"(zoo/, Brown corpus, PyTorch 1.13) and embedded in it; nothing was downloaded.",
		Intro: []string{
			"BFT (paper 003) App. I: per (layer, head, query) n_eff, λobs (REML, Eq. 6), K = λobs/(1 + λobs) and first-token mass, " +
				"and the learned gate, on the Qiu-style headwise-gated model (Fig. 4 also with the gate in place of K); the token stream was sampled from that model (zoo/checkpoints/demo_stream.json).",
			"RFA (paper 000): the learned noise parameters of the spectrally coupled SC-RFA model, their history over training, and its attention maps.",
			"AFA (paper 001): one-layer adaptive filters trained on the 2-D linear time-invariant toy system in the paper's three noise settings.",
			"The Qwen3.5-style hybrid (three Gated DeltaNet layers, then one gated softmax layer): probe diag measures its softmax layer per row " +
				"(hybrid-diag.csv); the DeltaNet layers have no softmax rows, and probe gdn reads them as filters instead (gain β, forgetting, " +
				"innovation, and the effective-attention rows W; hybrid-gdn/), with probe sinks' first-token and entropy measurements (hybrid-sinks/) and probe retrieval's retrieval score of its softmax heads on a copy task (hybrid-retrieval/). Its perplexity vs context length and that of the Gemma-3-style model " +
				"(sliding window 64 on three of four layers) are in ppl-hybrid-gemma/.",
			"Perplexity vs context length of the baseline, gated, RFA (M1) and SC-RFA (M2) models trained at T = 256 (the shape of RFA's Table 1 at small scale, " +
				"on the sampled stream; zoo/README.md has the same on held-out Brown text) and BFT's Prediction 3: " +
				"the gated model with its learned gate, with the gate set to 1, and with the gate replaced by the adaptive K_BFT at inference.",
			"The models are tiny (≈1M parameters, context 256, minutes of CPU training): the figures show the protocols and the tool, " +
				"not the papers' large-scale results; the captions and tables say where the paper's numbers differ.",
		},
		Manifest: []report.Option{
			{Name: "command", Value: "probe " + strings.Join(append([]string{"demo"}, args...), " "), Source: "command line"},
			{Name: "checkpoints", Value: zdir, Source: "embedded (package zoo)"},
			{Name: "BFT sweep", Value: sweepDir, Source: "probe sweep, lengths " + demoSweepLengths + ", " + demoSweepSamples + " samples"},
			{Name: "hybrid as a filter", Value: gdnDir, Source: "probe gdn on qwen35_hybrid, T = " + demoGDNLength},
			{Name: "hybrid sinks", Value: sinksDir, Source: "probe sinks on qwen35_hybrid, T = " + demoSinkLengths},
			{Name: "hybrid retrieval", Value: retrievalDir, Source: "probe retrieval on qwen35_hybrid, segment 64, gap 64, every copy step"},
			{Name: "hybrid diagnostics", Value: diagCSV, Source: fmt.Sprintf("probe diag on qwen35_hybrid, %d rows of %d stream tokens", demoDiagRows, demoDiagLength)},
			{Name: "perplexity", Value: pplDir, Source: "probe ppl, lengths " + demoPPLLengths + ", " + demoPPLSamples + " samples"},
			{Name: "perplexity (hybrid, Gemma-3-style)", Value: pplNewDir, Source: "probe ppl, lengths " + demoPPLLengths + ", " + demoPPLSamples + " samples, learned gates"},
		},
		Figures: figs,
	}
	wr, err := r.Write(*out, report.ChooseCharts(report.WriteOptions{HTML: "report.html", Static: *static}, w))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%d figures in %s (PNG and SVG beside it); %s in all.\nOpen it in a browser: file://%s\n",
		len(figs), wr.HTML, time.Since(st.start).Round(time.Second), absPath(wr.HTML))
	return nil
}

// demoStages prints the demo's overall progress, one numbered line per
// stage with the time so far; the sweep and perplexity stages draw their
// own progress bars on stderr.
type demoStages struct {
	w     io.Writer
	i, n  int
	start time.Time
}

func (s *demoStages) next(what string) {
	s.i++
	const width = 12
	done := (s.i - 1) * width / s.n
	fmt.Fprintf(s.w, "\n[%s%s] %d/%d %s (%s)\n", strings.Repeat("#", done), strings.Repeat(".", width-done),
		s.i, s.n, what, time.Since(s.start).Round(time.Second))
}

// demoStream writes the ids of the embedded stream file (an object with
// an "ids" list and how it was made) as a plain JSON list for sweep and
// ppl, and describes it.
func demoStream(src, dst string) (string, string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", "", err
	}
	var s struct {
		Source string `json:"source"`
		Model  string `json:"model"`
		IDs    []int  `json:"ids"`
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return "", "", fmt.Errorf("%s: %v", src, err)
	}
	if len(s.IDs) == 0 {
		return "", "", fmt.Errorf("%s: no ids", src)
	}
	list, err := json.Marshal(s.IDs)
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(dst, list, 0o644); err != nil {
		return "", "", err
	}
	return dst, fmt.Sprintf("token stream: %d ids sampled from %s (%s)", len(s.IDs), s.Model, s.Source), nil
}

// demoBatch writes the first rows·length ids of the stream file src (a
// JSON list) as rows consecutive rows of length ids to dst, the batch that
// probe diag reads.
func demoBatch(src, dst string, rows, length int) (string, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	var ids []int
	if err := json.Unmarshal(data, &ids); err != nil {
		return "", fmt.Errorf("%s: %v", src, err)
	}
	if len(ids) < rows*length {
		return "", fmt.Errorf("%s: %d ids, the hybrid's diagnostics need %d×%d", src, len(ids), rows, length)
	}
	batch := make([][]int, rows)
	for r := range batch {
		batch[r] = ids[r*length : (r+1)*length]
	}
	out, err := json.Marshal(batch)
	if err != nil {
		return "", err
	}
	return dst, os.WriteFile(dst, out, 0o644)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
