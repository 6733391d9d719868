package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/afatab"
	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/papers"
)

// FiguresOptions are the options of probe figures.
type FiguresOptions struct {
	cmdIO
	Paper string
	Out   string
	Force bool
	drawFlags
	RFA rfaFigureFlags
}

// flags declares the flags of probe figures into f and their relations.
func (o *FiguresOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.StringVar(&o.Paper, "paper", "", "rfa, selrope, rt or bft (or all): analytic figures; afa with --model: Figs. 1–3 of trained toy filters")
	f.StringVar(&o.Out, "out", "", "output directory: new, empty, or holding an earlier probe report (replaced)")
	f.BoolVar(&o.Force, "force", false, "write into an --out that holds other files")
	o.registerDraw(f)
	o.RFA.registerRFAFigures(f)
	markRequired(cmd, "out", "")
}

// runFigures writes a paper's analytic figures (no checkpoint): PNG and SVG
// per figure and an index.html report in --out. With --paper rfa and
// --model, --series or --history it draws the RFA figures of checkpoints
// instead (figures_rfa.go).
func runFigures(opts *FiguresOptions) error {
	wo := opts.writeOptions("", opts.Stdout)
	if opts.Paper == "afa" {
		// AFA's figures exist only from trained toy filters (zoo/checkpoints/afa_toy).
		if opts.RFA.Model == "" {
			return fmt.Errorf("--paper afa draws Figs. 1–3 from trained toy filters: give --model <afa_toy folder> (e.g. zoo/checkpoints/afa_toy)")
		}
		toy, err := analysis.AFAToy(opts.RFA.Model, afatab.Options{})
		if err != nil {
			return err
		}
		r, err := papers.AFAToyReport(toy)
		if err != nil {
			return err
		}
		if err := refuseForeignReport(opts.Out, opts.Force); err != nil {
			return err
		}
		res, err := r.Write(opts.Out, wo)
		if err != nil {
			return err
		}
		fmt.Fprintf(opts.Stdout, "afa: %d figures → %s\n", len(r.Figures), res.HTML)
		return nil
	}
	if opts.RFA.active() {
		if opts.Paper != "rfa" {
			return fmt.Errorf("--model, --series and --history draw RFA figures from checkpoints: use them with --paper rfa (or --model with --paper afa)")
		}
		if err := refuseForeignReport(opts.Out, opts.Force); err != nil {
			return err
		}
		return cmdFiguresRFA(&opts.RFA, opts.Out, wo, opts.Stdout)
	}
	var list []string
	switch opts.Paper {
	case "":
		return fmt.Errorf("--paper is required (%s or all)", strings.Join(papers.Paper, ", "))
	case "all":
		list = papers.Paper
	default:
		list = []string{opts.Paper}
	}
	reports := make([]*report.Report, len(list))
	for i, p := range list {
		r, err := papers.Build(p)
		if err != nil {
			return err
		}
		reports[i] = r
	}
	if err := refuseForeignFigures(opts.Out, opts.Paper, opts.Force); err != nil {
		return err
	}
	for i, p := range list {
		r := reports[i]
		dir := opts.Out
		if len(list) > 1 {
			dir = opts.Out + "/" + p
		}
		res, err := r.Write(dir, wo)
		if err != nil {
			return err
		}
		fmt.Fprintf(opts.Stdout, "%s: %d figures → %s\n", p, len(r.Figures), res.HTML)
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
