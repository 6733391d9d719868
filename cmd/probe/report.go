package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/attngrid"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/explore"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/attnmap"
	"github.com/filterlens/probe/report/filters"
	"github.com/filterlens/probe/report/ppl"
	"github.com/filterlens/probe/report/sweep"
)

// ReportOptions are the options of probe report.
type ReportOptions struct {
	cmdIO
	Out, Std string
	Force    bool
	drawFlags
}

// flags declares the flags of probe report into f and their relations.
func (o *ReportOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.StringVar(&o.Out, "out", "", "HTML file to write (default <results-dir>/report.html); PNG and SVG go beside it. An existing file that is not a probe report is refused unless --force")
	f.BoolVar(&o.Force, "force", false, "replace an --out file that is not a probe report")
	f.StringVar(&o.Std, "std", sweep.StdUnits, "Fig. 2 bands: units (std of (sample, layer) means) or pooled (std of all pooled elements)")
	o.registerDraw(f)
}

// runReport writes the BFT Figs. 2–4 report of a finished `probe sweep`
// folder, the perplexity-vs-T and Prediction 3 report of a `probe ppl`
// folder, the figures of a `probe gdn`, `probe sinks` or `probe massive`
// folder (chosen by its manifest), or (`probe report attention …`)
// attention maps of a capture.
func runReport(opts *ReportOptions) error {
	pos := opts.Args
	if len(pos) != 1 {
		return fmt.Errorf("want one results directory (a finished probe sweep, ppl, gdn, sinks, massive, retrieval or experts folder), or `probe report attention …`")
	}
	var err error
	html := opts.Out
	if html == "" {
		html = filepath.Join(pos[0], "report.html")
	}
	if _, err := os.Stat(html); err == nil && !opts.Force && !isProbeReport(html) {
		return fmt.Errorf("--out %s exists and is not a probe report: choose another --out, or pass --force to replace it", html)
	}
	var r *report.Report
	if isFilterFolder(pos[0]) {
		if r, err = filters.Read(pos[0]); err != nil {
			return err
		}
	} else if _, err := os.Stat(filepath.Join(pos[0], "ppl_manifest.json")); err == nil {
		// A probe ppl folder: perplexity vs T and BFT's Prediction 3.
		res, err := analysis.ReadPPL(pos[0])
		if err != nil {
			return err
		}
		if r, err = ppl.ZooReport(res); err != nil {
			return err
		}
	} else {
		man, res, missing, err := analysis.LoadPartialResults(pos[0], nil)
		if err != nil {
			return err
		}
		if !man.Complete {
			fmt.Fprintf(opts.Stdout, "unfinished sweep: the report uses the %d passes of T = %v × %d samples finished in %s, of the %d planned (resume it with the command in its manifest)\n",
				len(man.Chunks)-len(missing), res.Summary.Lengths, res.Summary.Samples, pos[0], len(man.Chunks))
		}
		in, err := sweep.FromAnalysis(man, res, opts.Std)
		if err != nil {
			return err
		}
		if r, err = sweep.Build(in); err != nil {
			return err
		}
	}
	wo := opts.writeOptions(filepath.Base(html), opts.Stdout)
	wr, err := r.Write(filepath.Dir(html), wo)
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "%d figures → %s\n", len(r.Figures), wr.HTML)
	printExplore(opts.Stdout, pos[0])
	return nil
}

// printExplore prints the probe explore command of a folder it opens
// (nothing for one it does not: a ppl or retrieval folder, an unfinished
// run, a sweep without Parquet tables).
func printExplore(w io.Writer, dir string) {
	f, err := explore.Open(dir)
	if err != nil {
		return
	}
	f.Close()
	fmt.Fprintf(w, "explore it in the browser: probe explore %s\n", shellQuote(dir))
}

// newReportCmd builds probe report with its subcommand report attention.
func newReportCmd() *cobra.Command {
	c := NewCmdReport(nil)
	c.AddCommand(NewCmdReportAttention(nil))
	return c
}

// isFilterFolder reports whether dir holds the manifest of a probe gdn,
// sinks, massive, retrieval or experts run.
func isFilterFolder(dir string) bool {
	for _, name := range []string{results.GDNManifestName, results.SinksManifestName, results.MassiveManifestName, results.RetrievalManifestName, results.ExpertsManifestName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// echartsFlagHelp documents --echarts of every command that writes a report.
const echartsFlagHelp = "echarts.min.js to inline (default: $" + report.EChartsEnv + ", the repository's " + report.EChartsRelPath +
	", or the user cache that `probe setup` fills; without one the charts are static SVG)"

// drawFlags are the chart flags of the commands that draw (figures, report,
// report attention): --static, --echarts and --dpi.
type drawFlags struct {
	Static  bool
	ECharts string
	DPI     int
}

// registerDraw declares --static, --echarts and --dpi into f.
func (d *drawFlags) registerDraw(f *pflag.FlagSet) {
	f.BoolVar(&d.Static, "static", false, "inline SVG instead of interactive echarts charts (no JavaScript)")
	f.StringVar(&d.ECharts, "echarts", "", echartsFlagHelp)
	f.IntVar(&d.DPI, "dpi", 150, "PNG resolution")
}

// writeOptions are the report.WriteOptions of the flags, with the HTML file
// name html ("": the default), the charts chosen by report.ChooseCharts
// (which says on w why they are static when it falls back).
func (d drawFlags) writeOptions(html string, w io.Writer) report.WriteOptions {
	return report.ChooseCharts(report.WriteOptions{HTML: html, Static: d.Static, ECharts: d.ECharts, DPI: d.DPI}, w)
}

// ReportAttentionOptions are the options of probe report attention.
type ReportAttentionOptions struct {
	cmdIO
	Capture, Heads, Pool, Out string
	Layer, Batch, MaxSize     int
	Gamma                     float64
	Force                     bool
	drawFlags
}

// flags declares the flags of probe report attention into f and their relations.
func (o *ReportAttentionOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.StringVar(&o.Capture, "capture", "", "safetensors file written by probe capture with blocks.{l}.attn.hook_pattern")
	f.IntVar(&o.Layer, "layer", -1, "layer to draw")
	f.StringVar(&o.Heads, "heads", "", "comma-separated heads (default: all)")
	f.IntVar(&o.Batch, "batch", 0, "sequence of the captured batch")
	f.Float64Var(&o.Gamma, "gamma", 0.25, "contrast exponent: draw Â^γ (RFA App. F.3: 0.25; 1 for plain Â)")
	f.StringVar(&o.Pool, "pool", attngrid.PoolMax, "downsampling of long T: max or mean over each block")
	f.IntVar(&o.MaxSize, "max-size", 128, "largest number of blocks per side (0: one cell per token pair)")
	f.StringVar(&o.Out, "out", "", "output directory: new, empty, or holding an earlier probe report (replaced)")
	f.BoolVar(&o.Force, "force", false, "write into an --out that holds other files")
	o.registerDraw(f)
	markRequired(cmd, "capture", "")
	markRequired(cmd, "layer", "")
	markRequired(cmd, "out", "")
}

// runReportAttention draws attention maps of one captured layer.
func runReportAttention(opts *ReportAttentionOptions) error {
	switch {
	case opts.Layer < 0:
		return fmt.Errorf("--layer %d: want a layer, 0 or more", opts.Layer)
	case opts.Gamma <= 0:
		return fmt.Errorf("--gamma must be positive")
	}
	if err := refuseForeignReport(opts.Out, opts.Force); err != nil {
		return err
	}
	var hs []int
	if opts.Heads != "" {
		for _, s := range strings.Split(opts.Heads, ",") {
			h, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("--heads %q: %v", opts.Heads, err)
			}
			hs = append(hs, h)
		}
	}
	f, err := attnmap.FromCapture(opts.Capture, attnmap.Options{Layer: opts.Layer, Heads: hs, Batch: opts.Batch, Gamma: opts.Gamma, Pool: opts.Pool, MaxSize: opts.MaxSize})
	if err != nil {
		return err
	}
	r := &report.Report{Title: fmt.Sprintf("Attention maps — %s, layer %d", filepath.Base(opts.Capture), opts.Layer), Figures: []*report.Figure{f}}
	wr, err := r.Write(opts.Out, opts.writeOptions("", opts.Stdout))
	if err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "attention maps of layer %d → %s\n", opts.Layer, wr.HTML)
	return nil
}
