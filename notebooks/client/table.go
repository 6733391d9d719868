package client

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"html"
	"math"
	"os"
	"strconv"
)

// MaxHTMLRows is how many rows Table.HTML shows before it elides the rest.
const MaxHTMLRows = 20

// Table is a table of strings with a header, such as a CSV file that probe
// writes.
type Table struct {
	Caption string
	Header  []string
	Rows    [][]string
}

// ReadCSV reads a CSV file whose first record is the header.
func ReadCSV(path string) (*Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: empty CSV file", path)
	}
	return &Table{Caption: path, Header: recs[0], Rows: recs[1:]}, nil
}

// Len returns the number of rows.
func (t *Table) Len() int { return len(t.Rows) }

// col returns the index of the named column.
func (t *Table) col(name string) (int, error) {
	for i, h := range t.Header {
		if h == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("client: no column %q (have %v)", name, t.Header)
}

// Column returns a column parsed as numbers; empty cells and "NaN" are NaN.
func (t *Table) Column(name string) ([]float64, error) {
	c, err := t.col(name)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(t.Rows))
	for i, r := range t.Rows {
		if c >= len(r) || r[c] == "" {
			out[i] = math.NaN()
			continue
		}
		v, err := strconv.ParseFloat(r[c], 64)
		if err != nil {
			return nil, fmt.Errorf("client: column %q row %d: %v", name, i, err)
		}
		out[i] = v
	}
	return out, nil
}

// Where returns the rows whose column name equals value, in order.
func (t *Table) Where(name, value string) (*Table, error) {
	c, err := t.col(name)
	if err != nil {
		return nil, err
	}
	out := &Table{Caption: fmt.Sprintf("%s where %s = %s", t.Caption, name, value), Header: t.Header}
	for _, r := range t.Rows {
		if c < len(r) && r[c] == value {
			out.Rows = append(out.Rows, r)
		}
	}
	return out, nil
}

// HTML shows the table, the first MaxHTMLRows rows of it when longer.
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
	for i, r := range t.Rows {
		if i == MaxHTMLRows {
			fmt.Fprintf(&b, `<tr><td colspan="%d" style="padding:2px 8px"><i>… %d more rows</i></td></tr>`,
				len(t.Header), len(t.Rows)-MaxHTMLRows)
			break
		}
		b.WriteString("<tr>")
		for _, c := range r {
			fmt.Fprintf(&b, `<td style="padding:2px 8px">%s</td>`, html.EscapeString(c))
		}
		b.WriteString("</tr>")
	}
	b.WriteString("</table>")
	return b.String()
}
