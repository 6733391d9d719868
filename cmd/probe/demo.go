package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/afatab"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/filters"
	"github.com/filterlens/probe/report/papers"
	pplfig "github.com/filterlens/probe/report/ppl"
	"github.com/filterlens/probe/report/sweep"
	"github.com/filterlens/probe/zoo"
)

// Settings of probe demo: small enough for under three minutes on a
// 2-core machine, large enough to show each protocol's shape.
var (
	demoSweepLengths = "128,256,512,1024,2048" // BFT App. I: T beyond the training context of 256
	demoSweepSamples = 4
	demoPPLLengths   = "256,512,1024,2048,4096" // RFA Table 1's shape: 16× the training context
	demoPPLSamples   = 2
	demoPPLGates     = "learned,one,k,k-matched" // Prediction 3: the learned gate, no gate, K_BFT (raw and mean-matched)
	demoMapTokens    = 1024                      // RFA Figs. 11–14
	demoGDNLength    = "512"                     // probe gdn on the hybrid: one pass
	demoFalconLength = "512"                     // probe gdn --w-rows on the Falcon-H1-style model: one pass
	demoSinkLengths  = "256,1024"                // probe sinks on the hybrid
	demoDiagRows     = 2                         // probe diag on the hybrid: rows of the stream …
	demoDiagLength   = 512                       // … of this many tokens (2× its training context)
	demoMoELengths   = "256,1024"                // probe sinks and probe experts on the gpt-oss-style model
	demoMoESamples   = 2
)

// demoFalconFigs are the figures of probe gdn on the Falcon-H1-style model
// that the report shows: its attention heads beside its SSM heads (the
// per-head, per-token and gain figures' tables are in its folder, and
// probe report draws them all).
var demoFalconFigs = []string{"gdn-side-by-side"}

// DemoOptions are the options of probe demo.
type DemoOptions struct {
	cmdIO
	Out    string
	Force  bool
	Static bool
}

// flags declares the flags of probe demo into f and their relations.
func (o *DemoOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.StringVar(&o.Out, "out", "probe-demo", "output directory: new, empty, or holding an earlier demo (replaced)")
	f.BoolVar(&o.Force, "force", false, "write into an --out that holds other files")
	f.BoolVar(&o.Static, "static", false, "inline SVG charts, no JavaScript (chosen anyway when echarts.min.js is not installed)")
}

// runDemo runs the whole story on the zoo checkpoints embedded in the
// binary (package zoo: trained here on the Brown corpus) and a token
// stream sampled from the gated model, with no network and no other
// input: BFT's App. I protocol on the Qiu-gated model (Figs. 2–4), the RFA
// parameter readout and figures of the SC-RFA model (Figs. 3–4, 8–10,
// 11–14), AFA's toy-system figures (Figs. 1–3), the per-row diagnostics of
// the Qwen3.5-style hybrid's softmax layer (probe diag), the Falcon-H1-style
// model's attention and SSM heads side by side (probe gdn --w-rows), the sinks and
// expert routing of the gpt-oss-style model, and perplexity vs
// context length with BFT's Prediction 3 (the gate replaced by K_BFT), also
// of the hybrid and the Gemma-3-style model, all in one offline
// report.html.
func runDemo(opts *DemoOptions) error {
	pos := opts.Args
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q: probe demo takes only --out, --force and --static", pos[0])
	}
	if err := refuseForeignReport(opts.Out, opts.Force); err != nil {
		return err
	}
	st := &demoStages{w: opts.Stdout, n: 7, start: time.Now()}
	st.next("unpacking the embedded zoo checkpoints and token stream")
	zdir := filepath.Join(opts.Out, "zoo")
	if err := zoo.Unpack(zdir); err != nil {
		return err
	}
	d := &demo{w: opts.Stdout, out: opts.Out, zoo: zdir,
		gated: filepath.Join(zdir, "gated_headwise"), rfa: filepath.Join(zdir, "rfa_m2_sc"), afa: filepath.Join(zdir, "afa_toy"),
		base: filepath.Join(zdir, "qwen3_base"), rfa1: filepath.Join(zdir, "rfa_m1"),
		hybrid: filepath.Join(zdir, "qwen35_hybrid"), gemma: filepath.Join(zdir, "gemma3_tiny"), gptoss: filepath.Join(zdir, "gpt_oss_tiny"),
		falcon: filepath.Join(zdir, "falcon_h1_tiny")}
	ids, src, err := demoStream(filepath.Join(zdir, "demo_stream.json"), filepath.Join(opts.Out, "stream.ids.json"))
	if err != nil {
		return err
	}
	d.ids = ids
	fmt.Fprintf(opts.Stdout, "      %s\n", src)

	st.next("BFT App. I on gated_headwise: n_eff, S, λobs, K, BOS mass and gates at T = " + demoSweepLengths + ", " + strconv.Itoa(demoSweepSamples) +
		" samples each; the same per row on the softmax layer of the Qwen3.5-style hybrid (probe diag); the Falcon-H1-style model's attention and SSM heads side by side (probe gdn --w-rows, T = " + demoFalconLength + ")")
	if err := d.bft(); err != nil {
		return err
	}
	if err := d.hybridFilters(); err != nil {
		return err
	}
	if err := d.falconFilters(); err != nil {
		return err
	}
	st.next("the gpt-oss-style model (learned sinks, 4 experts top-2): probe sinks and probe experts at T = " + demoMoELengths)
	if err := d.moe(); err != nil {
		return err
	}
	st.next("RFA: learned per-head parameters of rfa_m2_sc (probe params), Figs. 3–4, 8–10 and 11–14")
	if err := d.rfaFigures(); err != nil {
		return err
	}
	st.next("AFA: the 2-D LTI toy system, Figs. 1–3 from the trained one-layer filters")
	toy, err := analysis.AFAToy(d.afa, afatab.Options{})
	if err != nil {
		return fmt.Errorf("demo: AFA figures: %w", err)
	}
	af, err := papers.AFAToyFigures(toy)
	if err != nil {
		return fmt.Errorf("demo: AFA figures: %w", err)
	}
	d.figs = append(d.figs, af...)
	st.next("perplexity vs context length (" + demoPPLLengths + ") of the baseline, gated, RFA and SC-RFA models, and BFT Prediction 3: gate = " + demoPPLGates +
		"; then of the Qwen3.5-style hybrid and the Gemma-3-style model")
	if err := d.perplexity(); err != nil {
		return err
	}
	st.next("writing the report")
	r := d.report("probe " + strings.Join(append([]string{"demo"}, opts.CommandLine...), " "))
	wr, err := r.Write(opts.Out, report.ChooseCharts(report.WriteOptions{HTML: "report.html", Static: opts.Static}, opts.Stdout))
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "\n%d figures in %s (PNG and SVG beside it); %s in all.\nOpen it in a browser: file://%s\n",
		len(d.figs), wr.HTML, time.Since(st.start).Round(time.Second), absPath(wr.HTML))
	return nil
}

// demo is the state of probe demo between its stages: where it writes,
// the unpacked checkpoints, the token stream, the folders each stage
// wrote (for the report's manifest) and the figures so far.
type demo struct {
	w                                                          io.Writer
	out, zoo                                                   string
	gated, rfa, afa, base, rfa1, hybrid, gemma, gptoss, falcon string
	ids                                                        string // the stream's id file
	sweepDir, diagCSV, gdnDir, sinksDir, falconDir             string
	retrievalDir, pplDir, pplNewDir                            string
	moeSinksDir, expertsDir                                    string
	figs                                                       []*report.Figure
}

// bft runs BFT App. I's sweep on the gated model and draws Figs. 2–4.
func (d *demo) bft() error {
	d.sweepDir = filepath.Join(d.out, "bft-sweep")
	so, flags := defaultsOf(NewCmdSweep)
	so.Stdout, so.Model.Name, so.Input.IDs, so.Out, so.Formats = d.w, d.gated, d.ids, d.sweepDir, "parquet,csv"
	so.Plan.Lengths, so.Plan.Samples = demoSweepLengths, demoSweepSamples
	so.CLIOptions, so.CommandLine = flagRecord(flags)
	if err := runSweep(so); err != nil {
		return fmt.Errorf("demo: BFT sweep: %w", err)
	}
	man, res, err := analysis.LoadResults(d.sweepDir, nil)
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
	d.figs = append(d.figs, br.Figures...)
	return nil
}

// hybridFilters measures the Qwen3.5-style hybrid: probe diag on its softmax
// layer, its Gated DeltaNet layers as filters, its sinks and its
// retrieval heads, and draws the last three.
func (d *demo) hybridFilters() error {
	diagIDs, err := demoBatch(d.ids, filepath.Join(d.out, "hybrid-diag.ids.json"), demoDiagRows, demoDiagLength)
	if err != nil {
		return err
	}
	d.diagCSV = filepath.Join(d.out, "hybrid-diag.csv")
	do, _ := defaultsOf(NewCmdDiag)
	do.Stdout, do.Model.Name, do.Input.IDs, do.Out = d.w, d.hybrid, diagIDs, d.diagCSV
	if err := runDiag(do); err != nil {
		return fmt.Errorf("demo: diagnostics of the hybrid: %w", err)
	}
	// the hybrid's Gated DeltaNet layers as filters (probe gdn) and the sink
	// measurements of its softmax layer (probe sinks), drawn from their tables
	d.gdnDir, d.sinksDir = filepath.Join(d.out, "hybrid-gdn"), filepath.Join(d.out, "hybrid-sinks")
	gdn, gdnFlags := defaultsOf(NewCmdGDN)
	sinks, sinksFlags := defaultsOf(NewCmdSinks)
	gdn.WRows = true // the effective-attention rows are shown: opt in to their cost
	gdn.Stdout, sinks.Stdout = io.Discard, io.Discard
	for _, run := range []struct {
		what, dir, lengths string
		stream             *streamFlags
		run                func() error
	}{
		{"Gated DeltaNet filter quantities", d.gdnDir, demoGDNLength, &gdn.Stream, func() error {
			gdn.CLIOptions, gdn.CommandLine = flagRecord(gdnFlags)
			return runGDN(gdn)
		}},
		{"sink measurements", d.sinksDir, demoSinkLengths, &sinks.Stream, func() error {
			sinks.CLIOptions, sinks.CommandLine = flagRecord(sinksFlags)
			return runSinks(sinks)
		}},
	} {
		s := run.stream
		s.Model.Name, s.Input.IDs, s.Plan.Lengths, s.Formats, s.Force, s.Out = d.hybrid, d.ids, run.lengths, "parquet", true, run.dir
		figs, err := measureFigures(run.what+" of the hybrid", run.dir, run.run)
		if err != nil {
			return err
		}
		d.figs = append(d.figs, figs...)
	}
	// Wu et al.'s retrieval score of its softmax heads on a copy task
	// (probe retrieval; every copy step scored: the zoo models copy none).
	d.retrievalDir = filepath.Join(d.out, "hybrid-retrieval")
	ro, flags := defaultsOf(NewCmdRetrieval)
	ro.Stdout, ro.Run.Model.Name, ro.Options.Gap, ro.Options.Steps, ro.Run.Formats, ro.Run.Force, ro.Run.Out = io.Discard, d.hybrid, 64, "all", "parquet", true, d.retrievalDir
	ro.CLIOptions, ro.CommandLine = flagRecord(flags)
	figs, err := measureFigures("retrieval heads of the hybrid", d.retrievalDir, func() error { return runRetrieval(ro) })
	d.figs = append(d.figs, figs...)
	return err
}

// measureFigures runs one of the demo's measurements into dir (what: its
// words in the error) and returns the figures drawn from its tables.
func measureFigures(what, dir string, run func() error) ([]*report.Figure, error) {
	if err := run(); err != nil {
		return nil, fmt.Errorf("demo: %s: %w", what, err)
	}
	fr, err := filters.Read(dir)
	if err != nil {
		return nil, err
	}
	return fr.Figures, nil
}

// falconFilters reads the Falcon-H1-style model's layers as filters
// (probe gdn --w-rows): its Mamba-2 heads' decay, gain and exact
// effective-attention rows, and its softmax heads' n_eff beside the SSM
// heads' n_eff^W of the same layer (figure gdn-side-by-side). The figure
// ids get the prefix falcon-h1- beside the Qwen3.5-style hybrid's gdn
// figures; of probe gdn's figures the report takes demoFalconFigs.
func (d *demo) falconFilters() error {
	d.falconDir = filepath.Join(d.out, "falcon-h1-gdn")
	o, flags := defaultsOf(NewCmdGDN)
	o.WRows = true // the side-by-side figure needs the W rows of the SSM heads
	o.Stdout = io.Discard
	s := &o.Stream
	s.Model.Name, s.Input.IDs, s.Plan.Lengths, s.Formats, s.Force, s.Out = d.falcon, d.ids, demoFalconLength, "parquet", true, d.falconDir
	o.CLIOptions, o.CommandLine = flagRecord(flags)
	figs, err := measureFigures("the Falcon-H1-style model as a filter", d.falconDir, func() error { return runGDN(o) })
	if err != nil {
		return err
	}
	for _, f := range figs {
		if slices.Contains(demoFalconFigs, f.ID) {
			f.ID, f.Title = "falcon-h1-"+f.ID, "Falcon-H1-style model: "+f.Title
			d.figs = append(d.figs, f)
		}
	}
	return nil
}

// moe measures the gpt-oss-style model: its learned sinks (probe sinks,
// rows renormalised by default) and its routing (probe experts), drawn
// from their tables; the figure ids get the prefix gpt-oss- beside the
// hybrid's sinks figures.
func (d *demo) moe() error {
	d.moeSinksDir, d.expertsDir = filepath.Join(d.out, "gpt-oss-sinks"), filepath.Join(d.out, "gpt-oss-experts")
	sinks, sinksFlags := defaultsOf(NewCmdSinks)
	experts, expertsFlags := defaultsOf(NewCmdExperts)
	sinks.Stdout, experts.Stdout = io.Discard, io.Discard
	for _, run := range []struct {
		what, dir string
		stream    *streamFlags
		run       func() error
	}{
		{"sink measurements", d.moeSinksDir, &sinks.Stream, func() error {
			sinks.CLIOptions, sinks.CommandLine = flagRecord(sinksFlags)
			return runSinks(sinks)
		}},
		{"expert routing", d.expertsDir, &experts.Stream, func() error {
			experts.CLIOptions, experts.CommandLine = flagRecord(expertsFlags)
			return runExperts(experts)
		}},
	} {
		s := run.stream
		s.Model.Name, s.Input.IDs, s.Plan.Lengths, s.Plan.Samples, s.Formats, s.Force, s.Out = d.gptoss, d.ids, demoMoELengths, demoMoESamples, "parquet", true, run.dir
		figs, err := measureFigures(run.what+" of the gpt-oss-style model", run.dir, run.run)
		if err != nil {
			return err
		}
		for _, f := range figs {
			f.ID, f.Title = "gpt-oss-"+f.ID, "gpt-oss-style model: "+f.Title
		}
		d.figs = append(d.figs, figs...)
	}
	return nil
}

// rfaFigures reads out the SC-RFA model's parameters and draws its
// checkpoint figures.
func (d *demo) rfaFigures() error {
	po, _ := defaultsOf(NewCmdParams)
	po.Stdout, po.Args = d.w, []string{d.rfa}
	if err := runParams(po); err != nil {
		return fmt.Errorf("demo: RFA parameters: %w", err)
	}
	fo, _ := defaultsOf(NewCmdFigures)
	rf := fo.RFA
	rf.Model, rf.History, rf.AttnTokens, rf.IDs = d.rfa, filepath.Join(d.rfa, "history.json"), demoMapTokens, d.ids
	rr, err := rfaCheckpointReport(&rf)
	if err != nil {
		return fmt.Errorf("demo: RFA figures: %w", err)
	}
	d.figs = append(d.figs, rr.Figures...)
	return nil
}

// perplexity runs probe ppl on the paper's four models (with Prediction
// 3's gates) and on the newer families, and draws the first.
func (d *demo) perplexity() error {
	d.pplDir = filepath.Join(d.out, "ppl")
	ppl := func(models []string, gates, out string) error {
		o, flags := defaultsOf(NewCmdPPL)
		o.Stdout, o.Run.Model.Name, o.Input.IDs, o.Gates, o.TrainLength, o.Run.Out = d.w, strings.Join(models, ","), d.ids, gates, 256, out
		o.Plan.Lengths, o.Plan.Samples, o.Plan.Disjoint = demoPPLLengths, demoPPLSamples, analysis.DisjointWithin
		o.CLIOptions, o.CommandLine = flagRecord(flags)
		return runPPL(o)
	}
	if err := ppl([]string{d.base, d.gated, d.rfa1, d.rfa}, demoPPLGates, d.pplDir); err != nil {
		return fmt.Errorf("demo: perplexity: %w", err)
	}
	pres, err := analysis.ReadPPL(d.pplDir)
	if err != nil {
		return err
	}
	ef, err := pplfig.ExtrapolationFigure(pres)
	if err != nil {
		return err
	}
	pf, err := pplfig.Prediction3Figure(pres, filepath.Base(d.gated))
	if err != nil {
		return err
	}
	d.figs = append(d.figs, ef, pf)
	// The newer families in a run of their own: RFA Table 1's figure above
	// compares with the paper's four models and has no room for more.
	d.pplNewDir = filepath.Join(d.out, "ppl-hybrid-gemma")
	if err := ppl([]string{d.hybrid, d.gemma}, "learned", d.pplNewDir); err != nil {
		return fmt.Errorf("demo: perplexity of the hybrid and Gemma-3-style models: %w", err)
	}
	return nil
}

// report is the demo's report of the figures, its manifest naming the
// command line and every folder the stages wrote.
func (d *demo) report(command string) *report.Report {
	return &report.Report{
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
			"The Falcon-H1-style model (softmax attention and a Mamba-2 mixer side by side in every layer, on the same normalized input): " +
				"probe gdn --w-rows reads its SSM heads as filters (decay exp(dt·A), gain dt, state norm and the exact effective-attention rows " +
				"M[t, s] = (C_t·B_s)·Π exp(dt_r·A)·dt_s) and draws its softmax heads' n_eff beside its SSM heads' n_eff^W of the same layer (falcon-h1-gdn/).",
			"The gpt-oss-style model (learned sink logits per head, alternating sliding and full layers, a mixture of 4 experts with 2 per token): " +
				"probe sinks' first-token attention and sink mass σ (gpt-oss-sinks/) and probe experts' routing: the load of each (layer, expert) over all tokens, " +
				"the first token and the rest, and the router's entropy and top-1 margin (gpt-oss-experts/).",
			"Perplexity vs context length of the baseline, gated, RFA (M1) and SC-RFA (M2) models trained at T = 256 (the shape of RFA's Table 1 at small scale, " +
				"on the sampled stream; zoo/README.md has the same on held-out Brown text) and BFT's Prediction 3: " +
				"the gated model with its learned gate, with the gate set to 1, and with the gate replaced by the adaptive K_BFT at inference.",
			"The models are tiny (≈1M parameters, context 256, minutes of CPU training): the figures show the protocols and the tool, " +
				"not the papers' large-scale results; the captions and tables say where the paper's numbers differ.",
		},
		Manifest: []report.Option{
			{Name: "command", Value: command, Source: "command line"},
			{Name: "checkpoints", Value: d.zoo, Source: "embedded (package zoo)"},
			{Name: "BFT sweep", Value: d.sweepDir, Source: "probe sweep, lengths " + demoSweepLengths + ", " + strconv.Itoa(demoSweepSamples) + " samples"},
			{Name: "hybrid as a filter", Value: d.gdnDir, Source: "probe gdn on qwen35_hybrid, T = " + demoGDNLength},
			{Name: "hybrid sinks", Value: d.sinksDir, Source: "probe sinks on qwen35_hybrid, T = " + demoSinkLengths},
			{Name: "hybrid retrieval", Value: d.retrievalDir, Source: "probe retrieval on qwen35_hybrid, segment 64, gap 64, every copy step"},
			{Name: "Falcon-H1-style model as a filter", Value: d.falconDir, Source: "probe gdn --w-rows on falcon_h1_tiny, T = " + demoFalconLength},
			{Name: "gpt-oss-style sinks", Value: d.moeSinksDir, Source: "probe sinks on gpt_oss_tiny, T = " + demoMoELengths + ", " + strconv.Itoa(demoMoESamples) + " samples, rows renormalised"},
			{Name: "gpt-oss-style experts", Value: d.expertsDir, Source: "probe experts on gpt_oss_tiny, T = " + demoMoELengths + ", " + strconv.Itoa(demoMoESamples) + " samples"},
			{Name: "hybrid diagnostics", Value: d.diagCSV, Source: fmt.Sprintf("probe diag on qwen35_hybrid, %d rows of %d stream tokens", demoDiagRows, demoDiagLength)},
			{Name: "perplexity", Value: d.pplDir, Source: "probe ppl, lengths " + demoPPLLengths + ", " + strconv.Itoa(demoPPLSamples) + " samples"},
			{Name: "perplexity (hybrid, Gemma-3-style)", Value: d.pplNewDir, Source: "probe ppl, lengths " + demoPPLLengths + ", " + strconv.Itoa(demoPPLSamples) + " samples, learned gates"},
		},
		Figures: d.figs,
	}
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
