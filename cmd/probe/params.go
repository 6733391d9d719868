package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/model"
)

// paramsRow is one (layer, head) of a model.HeadTable as a JSON object:
// the columns that have a name, in order, non-finite numbers as null.
type paramsRow struct {
	cols  []model.HeadColumn
	cells []any
}

func (r paramsRow) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, c := range r.cols {
		if c.Name == "" {
			continue
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		v := r.cells[i]
		if x, ok := v.(float64); ok && (math.IsNaN(x) || math.IsInf(x, 0)) {
			v = nil
		}
		key, _ := json.Marshal(c.Name)
		val, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// paramsCell is a cell of the text table: numbers to 4 significant
// digits, "—" where a head has none.
func paramsCell(v any) string {
	switch x := v.(type) {
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "—"
		}
		return fmt.Sprintf("%.4g", x)
	case bool:
		if x {
			return "yes"
		}
		return "no"
	}
	return fmt.Sprint(v)
}

// ParamsOptions are the options of probe params.
type ParamsOptions struct {
	cmdIO
	JSON  bool
	Model modelFlag
}

// flags declares the flags of probe params into f and their relations.
func (o *ParamsOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	cmd.ValidArgsFunction = completeModelDir
	f.BoolVar(&o.JSON, "json", false, "print a JSON list of objects, one per (layer, head)")
	o.Model.registerModel(f, "checkpoint of a family with learned per-head filter parameters: RFA, AFA or RT (or give it as the argument)")
}

// runParams prints the learned per-head filter parameters of the
// checkpoint (--model or the argument) as a table or JSON.
func runParams(opts *ParamsOptions) error {
	pos := opts.Args
	if err := opts.Model.positional(pos); err != nil {
		return err
	}
	dir, m, err := opts.Model.load()
	if err != nil {
		return err
	}
	t, err := m.HeadParams()
	if err != nil {
		return err
	}
	if opts.JSON {
		rows := make([]paramsRow, len(t.Rows))
		for i, cells := range t.Rows {
			rows[i] = paramsRow{t.Columns, cells}
		}
		enc := json.NewEncoder(opts.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	}
	fmt.Fprintf(opts.Stdout, "%s of %s (%d layers × %d heads, %s)\n", t.Title, dir, m.Config.Layers, m.Heads, t.Shape)
	for _, n := range t.Notes {
		fmt.Fprintln(opts.Stdout, n)
	}
	fmt.Fprintln(opts.Stdout)
	tw := tabwriter.NewWriter(opts.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	var line []string
	for _, c := range t.Columns {
		if c.Label != "" {
			line = append(line, c.Label)
		}
	}
	fmt.Fprintln(tw, strings.Join(line, "\t")+"\t")
	for _, cells := range t.Rows {
		line = line[:0]
		for i, c := range t.Columns {
			if c.Label != "" {
				line = append(line, paramsCell(cells[i]))
			}
		}
		fmt.Fprintln(tw, strings.Join(line, "\t")+"\t")
	}
	return tw.Flush()
}
