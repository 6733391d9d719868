package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/papers"
)

// cmdFigures writes a paper's analytic figures (no checkpoint): PNG and SVG
// per figure and an index.html report in --out. With --paper rfa and
// --model, --series or --history it draws the RFA figures of checkpoints
// instead (figures_rfa.go).
func cmdFigures(args []string, w io.Writer) error {
	fs := newFlags("figures")
	paper := fs.String("paper", "", "rfa, selrope, rt or bft (or all): analytic figures; afa with --model: Figs. 1–3 of trained toy filters")
	out := fs.String("out", "", "output directory: new, empty, or holding an earlier probe report (replaced)")
	force := fs.Bool("force", false, "write into an --out that holds other files")
	static := fs.Bool("static", false, "inline SVG instead of interactive echarts charts (no JavaScript)")
	echarts := fs.String("echarts", "", echartsFlagHelp)
	dpi := fs.Int("dpi", 150, "PNG resolution")
	rfa := addRFAFigureFlags(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	wo := report.ChooseCharts(report.WriteOptions{Static: *static, ECharts: *echarts, DPI: *dpi}, w)
	if *paper == "afa" {
		// AFA's figures exist only from trained toy filters (zoo/checkpoints/afa_toy).
		if rfa.Model == "" {
			return fmt.Errorf("--paper afa draws Figs. 1–3 from trained toy filters: give --model <afa_toy folder> (e.g. zoo/checkpoints/afa_toy)")
		}
		r, err := papers.AFAToyReport(rfa.Model, papers.AFAToyOptions{})
		if err != nil {
			return err
		}
		if err := refuseForeignReport(*out, *force); err != nil {
			return err
		}
		res, err := r.Write(*out, wo)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "afa: %d figures → %s\n", len(r.Figures), res.HTML)
		return nil
	}
	if rfa.active() {
		if *paper != "rfa" {
			return fmt.Errorf("--model, --series and --history draw RFA figures from checkpoints: use them with --paper rfa (or --model with --paper afa)")
		}
		if err := refuseForeignReport(*out, *force); err != nil {
			return err
		}
		return cmdFiguresRFA(rfa, *out, wo, w)
	}
	var list []string
	switch *paper {
	case "":
		return fmt.Errorf("--paper is required (%s or all)", strings.Join(papers.Paper, ", "))
	case "all":
		list = papers.Paper
	default:
		list = []string{*paper}
	}
	reports := make([]*report.Report, len(list))
	for i, p := range list {
		r, err := papers.Build(p)
		if err != nil {
			return err
		}
		reports[i] = r
	}
	if err := refuseForeignFigures(*out, *paper, *force); err != nil {
		return err
	}
	for i, p := range list {
		r := reports[i]
		dir := *out
		if len(list) > 1 {
			dir = *out + "/" + p
		}
		res, err := r.Write(dir, wo)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %d figures → %s\n", p, len(r.Figures), res.HTML)
	}
	return nil
}

// refuseForeignFigures is refuseForeignReport for the analytic figures:
// --paper all writes one report folder per paper below out, which may hold
// those folders only.
func refuseForeignFigures(out, paper string, force bool) error {
	if paper != "all" {
		return refuseForeignReport(out, force)
	}
	names, err := folderContents(out)
	if err != nil || force {
		return err
	}
	for _, n := range names {
		if !slices.Contains(papers.Paper, strings.TrimSuffix(n, "/")) {
			return fmt.Errorf("--out %s holds %s, which is not one of the papers' report folders (%s): choose another --out, or pass --force",
				out, n, strings.Join(papers.Paper, ", "))
		}
		if err := refuseForeignReport(filepath.Join(out, strings.TrimSuffix(n, "/")), false); err != nil {
			return err
		}
	}
	return nil
}
