package analysis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/parquet-go/parquet-go"

	"github.com/filterlens/probe/internal/atomicfile"
)

// Table formats.
const (
	FormatParquet = "parquet"
	FormatCSV     = "csv"
	FormatJSONL   = "jsonl"
)

// ParseFormats parses a comma-separated list of table formats (parquet,
// csv, jsonl) and returns them in that canonical order without
// duplicates.
func ParseFormats(s string) ([]string, error) {
	want := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		switch f {
		case FormatParquet, FormatCSV, FormatJSONL:
			want[f] = true
		case "":
		default:
			return nil, fmt.Errorf("format %q: want parquet, csv or jsonl", f)
		}
	}
	var out []string
	for _, f := range []string{FormatParquet, FormatCSV, FormatJSONL} {
		if want[f] {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no table format given (parquet, csv, jsonl)")
	}
	return out, nil
}

// parquetOptions are the writer options of every Parquet file the package
// writes: Snappy pages, and no build-dependent "created by" string, so that
// equal rows give byte-identical files.
func parquetOptions(meta map[string]string) []parquet.WriterOption {
	opts := []parquet.WriterOption{
		parquet.Compression(&parquet.Snappy),
		parquet.CreatedBy("github.com/filterlens/probe", formatVersion, ""),
	}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		opts = append(opts, parquet.KeyValueMetadata(k, meta[k]))
	}
	return opts
}

// writeParquet writes rows (structs with parquet tags) to w.
func writeParquet[T any](w io.Writer, rows []T, meta map[string]string) error {
	pw := parquet.NewGenericWriter[T](w, parquetOptions(meta)...)
	if len(rows) > 0 {
		if _, err := pw.Write(rows); err != nil {
			return err
		}
	}
	return pw.Close()
}

// writeTable writes rows as dir/name.parquet, .csv and/or .jsonl (one file
// per format), each atomically. T is a struct whose exported fields carry
// `parquet:"column"` tags; the same names head the CSV columns and key the
// JSON objects, in field order. Non-finite floats are written as NaN/±Inf
// in Parquet, as an empty field (NaN) or +Inf/-Inf in CSV, and as null in
// JSONL.
func writeTable[T any](dir, name string, rows []T, formats []string) error {
	for _, f := range formats {
		path := filepath.Join(dir, name+"."+f)
		var err error
		switch f {
		case FormatParquet:
			err = atomicfile.Write(path, func(w io.Writer) error { return writeParquet(w, rows, nil) })
		case FormatCSV:
			err = atomicfile.Write(path, func(w io.Writer) error { return writeCSV(w, rows) })
		case FormatJSONL:
			err = atomicfile.Write(path, func(w io.Writer) error { return writeJSONL(w, rows) })
		default:
			err = fmt.Errorf("unknown table format %q", f)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type column struct {
	index []int // reflect.Value.FieldByIndex's
	name  string
}

// columnsOf lists the tagged fields of struct type t in order, with the
// fields of an embedded struct in its place, as parquet-go lays out the
// columns.
func columnsOf(t reflect.Type) []column {
	var cols []column
	for _, f := range reflect.VisibleFields(t) {
		tag := f.Tag.Get("parquet")
		if f.Anonymous || !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		cols = append(cols, column{f.Index, name})
	}
	return cols
}

// writeCSV writes rows as CSV with a header line (see writeTable).
func writeCSV[T any](w io.Writer, rows []T) error {
	rw, err := newRowWriter[T](FormatCSV, w, "")
	if err != nil {
		return err
	}
	for _, r := range rows {
		if err := rw.Append(r); err != nil {
			return err
		}
	}
	return rw.Close(w, nil)
}

func csvValue(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Float64, reflect.Float32:
		return formatFloat(v.Float())
	case reflect.Int, reflect.Int64, reflect.Int32:
		return strconv.FormatInt(v.Int(), 10)
	case reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case reflect.String:
		return v.String()
	}
	panic(fmt.Sprintf("analysis: unsupported column kind %v", v.Kind()))
}

// formatFloat writes x in the shortest form that reads back exactly, with
// the non-finite values spelled by tableNonFinite.
func formatFloat(x float64) string {
	if s, ok := tableNonFinite.spell(x); ok {
		return s
	}
	return strconv.FormatFloat(x, 'g', -1, 64)
}

// nonFinite spells the float64 values a cell cannot print as a number:
// NaN, +Inf and −Inf, in that order.
type nonFinite [3]string

var (
	// tableNonFinite is the CSV tables' spelling: NaN an empty (missing)
	// cell, the infinities as strconv.ParseFloat reads them (JSONL writes
	// null for all three).
	tableNonFinite = nonFinite{"", "+Inf", "-Inf"}
	// reportNonFinite is the printed report's: an em dash for NaN, and
	// the typographic minus sign (U+2212) of its other numbers' text.
	reportNonFinite = nonFinite{"—", "+Inf", "−Inf"}
)

// spell returns s's spelling of x and true when x is NaN or ±Inf, and
// false for a finite x.
func (s nonFinite) spell(x float64) (string, bool) {
	switch {
	case math.IsNaN(x):
		return s[0], true
	case math.IsInf(x, 1):
		return s[1], true
	case math.IsInf(x, -1):
		return s[2], true
	}
	return "", false
}

// writeJSONL writes rows as one JSON object per line (see writeTable).
func writeJSONL[T any](w io.Writer, rows []T) error {
	cols := columnsOf(reflect.TypeFor[T]())
	var b bytes.Buffer
	for _, r := range rows {
		b.Reset()
		v := reflect.ValueOf(r)
		b.WriteByte('{')
		for i, c := range cols {
			if i > 0 {
				b.WriteByte(',')
			}
			key, _ := json.Marshal(c.name)
			b.Write(key)
			b.WriteByte(':')
			f := v.FieldByIndex(c.index)
			switch f.Kind() {
			case reflect.Float64, reflect.Float32:
				x := f.Float()
				if math.IsNaN(x) || math.IsInf(x, 0) {
					b.WriteString("null")
				} else {
					b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
				}
			case reflect.String:
				s, _ := json.Marshal(f.String())
				b.Write(s)
			default:
				b.WriteString(csvValue(f))
			}
		}
		b.WriteString("}\n")
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}
