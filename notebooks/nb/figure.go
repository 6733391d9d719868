// Package nb holds the helpers of the GoNB notebooks in notebooks/: figures
// and tables that Jupyter kernels can display (they have HTML, PNG and SVG
// methods), the notebooks' working directory, and an on-disk cache for state
// that must outlive one cell.
//
// Under GoNB every cell is compiled and run as a fresh program: declarations
// carry over from cell to cell, values do not. What is expensive to compute
// (a generated checkpoint, a sweep) is therefore written to disk by the first
// cell that needs it and read back by the others (see Checkpoint and Cached).
//
// GoNB displays through github.com/janpfeifer/gonb/gonbui, which the notebooks
// import themselves; this package does not depend on it, so it stays part of
// the library's module without adding a dependency. A one-line helper in each
// notebook passes a value's HTML (or PNG, or SVG) to gonbui.
package nb

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html"
	"strings"

	"github.com/filterlens/probe/report"
)

// DefaultDPI is the resolution of a Figure's PNG when Render is given dpi ≤ 0:
// sharp on a high-density screen, small enough to keep notebooks light.
const DefaultDPI = 110

// Figure is a report.Figure rendered once, statically (gonum/plot), as PNG
// and SVG. Its HTML, PNG and SVG methods are what Jupyter kernels look for to
// display a value (gophernotes does so by itself; GoNB through gonbui).
type Figure struct {
	// F is the figure description it was rendered from.
	F   *report.Figure
	png []byte
	svg []byte
}

// Render validates f and renders it as a PNG at dpi dots per inch (dpi ≤ 0:
// DefaultDPI) and as an SVG document. Errors are returned here, once, so that
// the display methods, whose signatures cannot carry an error, never fail.
func Render(f *report.Figure, dpi int) (*Figure, error) {
	if f == nil {
		return nil, fmt.Errorf("nb: nil figure")
	}
	if dpi <= 0 {
		dpi = DefaultDPI
	}
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("nb: figure %q: %w", f.ID, err)
	}
	png, err := f.PNG(dpi)
	if err != nil {
		return nil, fmt.Errorf("nb: figure %q: PNG: %w", f.ID, err)
	}
	svg, err := f.SVG()
	if err != nil {
		return nil, fmt.Errorf("nb: figure %q: SVG: %w", f.ID, err)
	}
	return &Figure{F: f, png: png, svg: svg}, nil
}

// RenderAll renders every figure of a report (see Render).
func RenderAll(r *report.Report, dpi int) ([]*Figure, error) {
	out := make([]*Figure, 0, len(r.Figures))
	for _, f := range r.Figures {
		fig, err := Render(f, dpi)
		if err != nil {
			return nil, err
		}
		out = append(out, fig)
	}
	return out, nil
}

// PNG returns the rendered PNG image.
func (f *Figure) PNG() []byte { return f.png }

// SVG returns the rendered SVG document.
func (f *Figure) SVG() string { return string(f.svg) }

// HTML returns the figure as an HTML fragment: its title, the PNG inlined as
// a data URI, the caption, the paper-vs-ours tables, the notes, and the
// options with their sources in a collapsed block.
func (f *Figure) HTML() string {
	var b strings.Builder
	b.WriteString(`<figure style="margin:0.5em 0">`)
	if f.F.Title != "" {
		fmt.Fprintf(&b, `<div style="font-weight:bold;margin-bottom:0.3em">%s</div>`, html.EscapeString(f.F.Title))
	}
	fmt.Fprintf(&b, `<img alt="%s" style="max-width:100%%" src="data:image/png;base64,%s">`,
		html.EscapeString(f.F.ID), base64.StdEncoding.EncodeToString(f.png))
	if f.F.Caption != "" {
		fmt.Fprintf(&b, `<figcaption style="max-width:60em">%s</figcaption>`, html.EscapeString(f.F.Caption))
	}
	b.WriteString(`</figure>`)
	for _, t := range f.F.Tables {
		b.WriteString((&Table{Caption: t.Caption, Header: t.Header, Rows: t.Rows}).HTML())
	}
	for _, n := range f.F.Notes {
		fmt.Fprintf(&b, `<p style="max-width:60em"><i>Note.</i> %s</p>`, html.EscapeString(n))
	}
	if len(f.F.Options) > 0 {
		opt := &Table{Header: []string{"option", "value", "source"}}
		for _, o := range f.F.Options {
			opt.Rows = append(opt.Rows, []string{o.Name, o.Value, o.Source})
		}
		fmt.Fprintf(&b, `<details><summary>%d options</summary>%s</details>`, len(f.F.Options), opt.HTML())
	}
	return b.String()
}

// Table is a small table of strings that displays as HTML.
type Table struct {
	Caption string
	Header  []string
	Rows    [][]string
}

// HTML returns the table as an HTML <table>, every cell escaped.
func (t *Table) HTML() string {
	var b bytes.Buffer
	b.WriteString(`<table style="border-collapse:collapse;margin:0.4em 0">`)
	if t.Caption != "" {
		fmt.Fprintf(&b, `<caption style="text-align:left">%s</caption>`, html.EscapeString(t.Caption))
	}
	if len(t.Header) > 0 {
		b.WriteString("<tr>")
		for _, h := range t.Header {
			fmt.Fprintf(&b, `<th style="border-bottom:1px solid #999;padding:2px 8px">%s</th>`, html.EscapeString(h))
		}
		b.WriteString("</tr>")
	}
	for _, r := range t.Rows {
		b.WriteString("<tr>")
		for _, c := range r {
			fmt.Fprintf(&b, `<td style="padding:2px 8px">%s</td>`, html.EscapeString(c))
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>")
	return b.String()
}
