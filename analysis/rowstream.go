package analysis

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"reflect"
	"slices"

	"github.com/parquet-go/parquet-go"
)

// rowBatch is the number of rows a rowWriter hands its Parquet writer at a
// time: a multiple of the 64 rows parquet-go cuts every Write into, so that
// the pages end where one Write of all the rows would end them and the file
// is byte for byte writeParquet's.
const rowBatch = 64 * 64

// rowWriter writes one table's rows as they come, without holding them:
// Parquet through one GenericWriter whose pages wait in temporary files in
// a folder until Close writes the file (one row group with writeParquet's
// options: the same bytes as writeParquet of all the rows), CSV and JSONL
// a batch of rows at a time. Memory: one batch of rows and the Parquet
// writer's current pages (256 KiB a column), whatever the number of rows.
type rowWriter[T any] struct {
	format string
	pw     *parquet.GenericWriter[T] // Parquet
	late   *lateWriter               // Parquet's output, bound at Close
	w      io.Writer                 // CSV, JSONL
	csv    *csv.Writer
	cols   []column
	rec    []string
	buf    []T
	rows   int64
}

// newRowWriter returns a rowWriter of format (FormatParquet, FormatCSV or
// FormatJSONL). A Parquet rowWriter keeps its pages in temporary files in
// tmp and writes to the writer given to Close (w is unused); CSV and JSONL
// write to w, CSV its header line first.
func newRowWriter[T any](format string, w io.Writer, tmp string) (*rowWriter[T], error) {
	rw := &rowWriter[T]{format: format, w: w, buf: make([]T, 0, rowBatch)}
	switch format {
	case FormatParquet:
		rw.late = &lateWriter{}
		opts := append(parquetOptions(nil), parquet.ColumnPageBuffers(parquet.NewFileBufferPool(tmp, ".pages-*")))
		rw.pw = parquet.NewGenericWriter[T](rw.late, opts...)
	case FormatCSV:
		rw.cols = columnsOf(reflect.TypeFor[T]())
		rw.csv = csv.NewWriter(w)
		rw.rec = make([]string, len(rw.cols))
		for i, c := range rw.cols {
			rw.rec[i] = c.name
		}
		if err := rw.csv.Write(rw.rec); err != nil {
			return nil, err
		}
	case FormatJSONL:
	default:
		return nil, fmt.Errorf("unknown table format %q", format)
	}
	return rw, nil
}

// Append adds one row.
func (rw *rowWriter[T]) Append(row T) error {
	rw.buf = append(rw.buf, row)
	rw.rows++
	if len(rw.buf) == rowBatch {
		return rw.flush()
	}
	return nil
}

// flush writes the batch of rows held.
func (rw *rowWriter[T]) flush() error {
	var err error
	switch rw.format {
	case FormatParquet:
		if len(rw.buf) > 0 {
			_, err = rw.pw.Write(rw.buf)
		}
	case FormatCSV:
		for _, r := range rw.buf {
			v := reflect.ValueOf(r)
			for i, c := range rw.cols {
				rw.rec[i] = csvValue(v.FieldByIndex(c.index))
			}
			if err = rw.csv.Write(rw.rec); err != nil {
				break
			}
		}
	case FormatJSONL:
		err = writeJSONL(rw.w, rw.buf)
	}
	rw.buf = rw.buf[:0]
	return err
}

// Close writes the rows still held and ends the table: a Parquet file is
// written to w with meta in its footer (sorted by key, as writeParquet
// writes it), and its temporary page files are removed; CSV is flushed.
// Close(io.Discard, nil) abandons a Parquet table and removes its files.
func (rw *rowWriter[T]) Close(w io.Writer, meta map[string]string) error {
	err := rw.flush()
	switch rw.format {
	case FormatParquet:
		if err != nil {
			w, meta = io.Discard, nil
		}
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			rw.pw.SetKeyValueMetadata(k, meta[k])
		}
		rw.late.bind(w)
		if cerr := rw.pw.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = rw.late.err
		}
	case FormatCSV:
		rw.csv.Flush()
		if err == nil {
			err = rw.csv.Error()
		}
	}
	return err
}

// passTable is the rows written so far as the pass table name; runStream
// calls its write once, which closes rw.
func (rw *rowWriter[T]) passTable(name string) passTable {
	return passTable{name: name, rows: rw.rows, write: rw.Close}
}

// lateWriter holds what is written to it until bind gives it its writer.
type lateWriter struct {
	w   io.Writer
	buf bytes.Buffer
	err error
}

func (l *lateWriter) Write(p []byte) (int, error) {
	if l.w == nil {
		return l.buf.Write(p)
	}
	n, err := l.w.Write(p)
	if err != nil && l.err == nil {
		l.err = err
	}
	return n, err
}

// bind sends what was held to w and what comes after it too.
func (l *lateWriter) bind(w io.Writer) {
	l.w = w
	if l.buf.Len() > 0 {
		if _, err := w.Write(l.buf.Bytes()); err != nil {
			l.err = err
		}
		l.buf = bytes.Buffer{}
	}
}
