package analysis

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
)

type tableRow struct {
	Name  string  `parquet:"name,dict"`
	N     int64   `parquet:"n"`
	X     float64 `parquet:"x"`
	OK    bool    `parquet:"ok"`
	Skip  string  `parquet:"-"`
	inner int
}

var tableRows = []tableRow{
	{Name: "a,b", N: -3, X: 0.1, OK: true},
	{Name: `q"uote`, N: 1 << 40, X: math.NaN()},
	{Name: "inf", N: 0, X: math.Inf(1)},
	{Name: "tiny", N: 7, X: -1.25e-300},
}

func TestCSVAndJSONL(t *testing.T) {
	var b bytes.Buffer
	if err := writeCSV(&b, tableRows); err != nil {
		t.Fatal(err)
	}
	want := "name,n,x,ok\n\"a,b\",-3,0.1,true\n\"q\"\"uote\",1099511627776,,false\ninf,0,+Inf,false\ntiny,7,-1.25e-300,false\n"
	if b.String() != want {
		t.Errorf("CSV:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	if err := writeJSONL(&b, tableRows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || lines[1] != `{"name":"q\"uote","n":1099511627776,"x":null,"ok":false}` {
		t.Errorf("JSONL:\n%s", b.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("line %q is not JSON: %v", l, err)
		}
	}
}

func TestParquetRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if err := writeTable(dir, "t", tableRows, []string{FormatParquet}); err != nil {
		t.Fatal(err)
	}
	got, err := results.ReadTable[tableRow](filepath.Join(dir, "t.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range tableRows {
		w := tableRows[i]
		w.Skip = ""
		if got[i].Name != w.Name || got[i].N != w.N || got[i].OK != w.OK ||
			!(got[i].X == w.X || math.IsNaN(got[i].X) && math.IsNaN(w.X)) {
			t.Errorf("row %d: %+v, want %+v", i, got[i], w)
		}
	}
	// Equal rows give equal bytes (merge relies on it).
	writeTable(dir, "u", tableRows, []string{FormatParquet})
	a, _ := os.ReadFile(filepath.Join(dir, "t.parquet"))
	b, _ := os.ReadFile(filepath.Join(dir, "u.parquet"))
	if !bytes.Equal(a, b) {
		t.Error("two writes of the same rows differ")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "t.parquet")); fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v", fi.Mode())
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(m) > 0 {
		t.Errorf("temporary files left: %v", m)
	}
	if _, err := ParseFormats("parquet,xml"); err == nil {
		t.Error("xml accepted")
	}
	if f, err := ParseFormats("jsonl, CSV,parquet,csv"); err != nil || !reflect.DeepEqual(f, []string{"parquet", "csv", "jsonl"}) {
		t.Errorf("ParseFormats = %v, %v", f, err)
	}
}

// hyparquetDir is where .ci/setup.sh installs hyparquet, an independent
// (JavaScript) Parquet reader.
var hyparquetDir = filepath.Join("..", "third_party", "hyparquet", "node_modules", "hyparquet")

// TestParquetIndependentReader reads a sweep's pass file and tables with
// hyparquet and compares every row, and the pass record in the footer, with
// what this package wrote.
func TestParquetIndependentReader(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed (bash .ci/setup.sh installs it with npm)")
	}
	pkg, _ := filepath.Abs(hyparquetDir)
	if _, err := os.Stat(filepath.Join(pkg, "src", "index.js")); err != nil {
		t.Skipf("hyparquet not installed at %s (bash .ci/setup.sh installs it)", pkg)
	}
	dir, stream, opts, agg := smallSweep(t)
	out := t.TempDir()
	if _, _, err := newSweep(t, dir, stream, out, opts, agg).Run(); err != nil {
		t.Fatal(err)
	}
	read := func(path string) (map[string]string, []map[string]any) {
		t.Helper()
		cmd := exec.Command(node, filepath.Join("testdata", "read_parquet.mjs"), pkg, path)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("hyparquet on %s: %v\n%s", path, err, stderr.String())
		}
		var v struct {
			KV   map[string]string
			Rows []map[string]any
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		return v.KV, v.Rows
	}
	num := func(v any) float64 {
		switch x := v.(type) {
		case float64:
			return x
		case string:
			switch x {
			case "NaN":
				return math.NaN()
			case "Infinity":
				return math.Inf(1)
			}
		}
		t.Fatalf("not a number: %v", v)
		return 0
	}

	pass := sweepPass(out, 40, 1)
	rec, rows, err := readBucketPass(pass)
	if err != nil {
		t.Fatal(err)
	}
	kv, js := read(pass)
	var jrec results.StreamPass
	if err := json.Unmarshal([]byte(kv[passMetaKey]), &jrec); err != nil || jrec.Hash != rec.Hash || jrec.Rows["buckets"] != int64(len(rows)) {
		t.Errorf("footer record via hyparquet: %v %+v", err, jrec)
	}
	if len(js) != len(rows) {
		t.Fatalf("hyparquet read %d rows, we wrote %d", len(js), len(rows))
	}
	for i, r := range rows {
		j := js[i]
		if num(j["T"]) != float64(r.T) || num(j["layer"]) != float64(r.Layer) || num(j["head"]) != float64(r.Head) ||
			num(j["q_lo"]) != float64(r.QLo) || num(j["q_hi"]) != float64(r.QHi) || j["metric"] != r.Metric ||
			num(j["n"]) != float64(r.N) || num(j["sum"]) != r.Sum || num(j["m2"]) != r.M2 || num(j["nonfinite"]) != float64(r.NonFinite) {
			t.Fatalf("row %d: hyparquet %v, we wrote %+v", i, j, r)
		}
	}

	f3, _ := results.ReadTable[results.Fig3Row](filepath.Join(out, "fig3.parquet"))
	_, js = read(filepath.Join(out, "fig3.parquet"))
	for i, r := range f3 {
		got := []float64{num(js[i]["K_opt"]), num(js[i]["lambda_fit"]), num(js[i]["paper_rel_err"])}
		want := []float64{r.KOpt, r.LambdaFit, r.PaperRelErr}
		for k := range got {
			if !(got[k] == want[k] || math.IsNaN(got[k]) && math.IsNaN(want[k])) {
				t.Errorf("fig3 row %d: hyparquet %v, we wrote %v", i, got, want)
			}
		}
	}
}

// TestNonFiniteSpellings pins the two spellings of NaN and ±Inf: the CSV
// tables' (empty, -Inf) and the printed report's (em dash, U+2212).
func TestNonFiniteSpellings(t *testing.T) {
	for _, c := range []struct {
		x           float64
		table, text string
	}{
		{math.NaN(), "", "—"},
		{math.Inf(1), "+Inf", "+Inf"},
		{math.Inf(-1), "-Inf", "−Inf"},
		{-1.25, "-1.25", "-1.250"},
		{0, "0", "0.000"},
	} {
		if got := formatFloat(c.x); got != c.table {
			t.Errorf("formatFloat(%v) = %q, want %q", c.x, got, c.table)
		}
		if got := num(c.x, 3); got != c.text {
			t.Errorf("num(%v, 3) = %q, want %q", c.x, got, c.text)
		}
	}
}

// TestEmbeddedColumns: the fields of an embedded struct are columns in its
// place, in CSV and JSONL as in Parquet (results.SoftmaxHead in the
// sinks_heads and retrieval_heads rows).
func TestEmbeddedColumns(t *testing.T) {
	type row struct {
		T int `parquet:"T"`
		results.SoftmaxHead
		X float64 `parquet:"x"`
	}
	rows := []row{{T: 8, SoftmaxHead: results.SoftmaxHead{Layer: 1, Kind: "local", Window: 4, Head: 2}, X: 0.5}}
	var c, j bytes.Buffer
	if err := writeCSV(&c, rows); err != nil {
		t.Fatal(err)
	}
	if want := "T,layer,kind,window,head,x\n8,1,local,4,2,0.5\n"; c.String() != want {
		t.Errorf("CSV %q, want %q", c.String(), want)
	}
	if err := writeJSONL(&j, rows); err != nil {
		t.Fatal(err)
	}
	if want := `{"T":8,"layer":1,"kind":"local","window":4,"head":2,"x":0.5}` + "\n"; j.String() != want {
		t.Errorf("JSONL %q, want %q", j.String(), want)
	}
	dir := t.TempDir()
	if err := writeTable(dir, "e", rows, []string{FormatParquet}); err != nil {
		t.Fatal(err)
	}
	back, err := results.ReadTable[row](filepath.Join(dir, "e.parquet"))
	if err != nil || !reflect.DeepEqual(back, rows) {
		t.Errorf("Parquet read back %+v (%v), want %+v", back, err, rows)
	}
}
