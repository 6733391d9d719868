package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/filterlens/probe/analysis"
)

func cmdSummarize(args []string, w io.Writer) error {
	fs := newFlags("summarize")
	asJSON := fs.Bool("json", false, "print summary.json's content instead of the tables")
	af := addAggFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("want one results folder: probe summarize <dir>")
	}
	man, _, err := analysis.LoadResults(pos[0], nil)
	if err != nil {
		return err
	}
	agg, err := af.options(man.Analysis, man.Sweep.KUnit, true)
	if err != nil {
		return err
	}
	man, res, err := analysis.LoadResults(pos[0], &agg)
	if err != nil {
		return err
	}
	if *asJSON {
		b, err := json.MarshalIndent(res.Summary, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return analysis.WriteReport(w, man, res)
}
