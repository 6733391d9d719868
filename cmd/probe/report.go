package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/attnmap"
	"github.com/filterlens/probe/report/filters"
	"github.com/filterlens/probe/report/papers"
	"github.com/filterlens/probe/report/sweep"
	"github.com/spf13/cobra"
)

// cmdReport writes the BFT Figs. 2–4 report of a finished `probe sweep`
// folder, the perplexity-vs-T and Prediction 3 report of a `probe ppl`
// folder, the figures of a `probe gdn`, `probe sinks` or `probe massive`
// folder (chosen by its manifest), or (`probe report attention …`)
// attention maps of a capture.
func cmdReport(args []string, w io.Writer) error {
	fs := newFlags("report")
	out := fs.String("out", "", "HTML file to write (default <results-dir>/report.html); PNG and SVG go beside it. An existing file that is not a probe report is refused unless --force")
	force := fs.Bool("force", false, "replace an --out file that is not a probe report")
	std := fs.String("std", sweep.StdUnits, "Fig. 2 bands: units (std of (sample, layer) means) or pooled (std of all pooled elements)")
	static := fs.Bool("static", false, "inline SVG instead of interactive echarts charts (no JavaScript)")
	echarts := fs.String("echarts", "", echartsFlagHelp)
	dpi := fs.Int("dpi", 150, "PNG resolution")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("want one results directory (a finished probe sweep, ppl, gdn, sinks, massive or retrieval folder), or `probe report attention …`")
	}
	html := *out
	if html == "" {
		html = filepath.Join(pos[0], "report.html")
	}
	if _, err := os.Stat(html); err == nil && !*force && !isProbeReport(html) {
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
		if r, err = papers.ZooReport(res); err != nil {
			return err
		}
	} else {
		man, res, missing, err := analysis.LoadPartialResults(pos[0], nil)
		if err != nil {
			return err
		}
		if !man.Complete {
			fmt.Fprintf(w, "unfinished sweep: the report uses the %d passes of T = %v × %d samples finished in %s, of the %d planned (resume it with the command in its manifest)\n",
				len(man.Chunks)-len(missing), res.Summary.Lengths, res.Summary.Samples, pos[0], len(man.Chunks))
		}
		in, err := sweep.FromAnalysis(man, res, *std)
		if err != nil {
			return err
		}
		if r, err = sweep.Build(in); err != nil {
			return err
		}
	}
	wo := report.ChooseCharts(report.WriteOptions{HTML: filepath.Base(html), Static: *static, ECharts: *echarts, DPI: *dpi}, w)
	wr, err := r.Write(filepath.Dir(html), wo)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d figures → %s\n", len(r.Figures), wr.HTML)
	return nil
}

// newReportCmd builds probe report with its subcommand report attention.
func newReportCmd() *cobra.Command {
	c := legacyCmd("report <results-dir> [--out report.html] [--static]",
		"HTML report of a finished sweep, ppl, gdn, sinks, massive or retrieval folder; `report attention` draws captured attention maps",
		"probe report /tmp/sweep", cmdReport)
	c.AddCommand(legacyCmd("attention --capture <file.safetensors> --layer L [--heads 0,1] [--gamma 0.25] --out <dir>",
		"attention maps of one captured layer (blocks.{l}.attn.hook_pattern), downsampled and contrast-stretched",
		"probe report attention --capture cap.safetensors --layer 1 --out /tmp/maps", cmdReportAttention))
	return c
}

// isFilterFolder reports whether dir holds the manifest of a probe gdn,
// sinks, massive or retrieval run.
func isFilterFolder(dir string) bool {
	for _, name := range []string{analysis.GDNManifestName, analysis.SinksManifestName, analysis.MassiveManifestName, analysis.RetrievalManifestName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// echartsFlagHelp documents --echarts of every command that writes a report.
const echartsFlagHelp = "echarts.min.js to inline (default: $" + report.EChartsEnv + ", the repository's " + report.EChartsRelPath +
	", or the user cache that `probe setup` fills; without one the charts are static SVG)"

// cmdReportAttention draws attention maps of one captured layer.
func cmdReportAttention(args []string, w io.Writer) error {
	fs := newFlags("report attention")
	capture := fs.String("capture", "", "safetensors file written by probe capture with blocks.{l}.attn.hook_pattern")
	layer := fs.Int("layer", -1, "layer to draw")
	heads := fs.String("heads", "", "comma-separated heads (default: all)")
	batch := fs.Int("batch", 0, "sequence of the captured batch")
	gamma := fs.Float64("gamma", 0.25, "contrast exponent: draw Â^γ (RFA App. F.3: 0.25; 1 for plain Â)")
	pool := fs.String("pool", attnmap.PoolMax, "downsampling of long T: max or mean over each block")
	maxSize := fs.Int("max-size", 128, "largest number of blocks per side (0: one cell per token pair)")
	out := fs.String("out", "", "output directory: new, empty, or holding an earlier probe report (replaced)")
	force := fs.Bool("force", false, "write into an --out that holds other files")
	static := fs.Bool("static", false, "inline SVG instead of interactive echarts charts")
	echarts := fs.String("echarts", "", echartsFlagHelp)
	dpi := fs.Int("dpi", 150, "PNG resolution")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	switch {
	case *capture == "":
		return fmt.Errorf("--capture is required")
	case *layer < 0:
		return fmt.Errorf("--layer is required")
	case *out == "":
		return fmt.Errorf("--out is required")
	case *gamma <= 0:
		return fmt.Errorf("--gamma must be positive")
	}
	if err := refuseForeignReport(*out, *force); err != nil {
		return err
	}
	var hs []int
	if *heads != "" {
		for _, s := range strings.Split(*heads, ",") {
			h, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("--heads %q: %v", *heads, err)
			}
			hs = append(hs, h)
		}
	}
	f, err := attnmap.FromCapture(*capture, attnmap.Options{Layer: *layer, Heads: hs, Batch: *batch, Gamma: *gamma, Pool: *pool, MaxSize: *maxSize})
	if err != nil {
		return err
	}
	r := &report.Report{Title: fmt.Sprintf("Attention maps — %s, layer %d", filepath.Base(*capture), *layer), Figures: []*report.Figure{f}}
	wr, err := r.Write(*out, report.ChooseCharts(report.WriteOptions{Static: *static, ECharts: *echarts, DPI: *dpi}, w))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "attention maps of layer %d → %s\n", *layer, wr.HTML)
	return nil
}
