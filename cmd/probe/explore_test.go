package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/filterlens/probe/explore"
)

// TestExploreSweepsThenServes: probe explore --model --ids sweeps first,
// then serves the folder on loopback with no token; its info lists the
// sweep's lengths and rows are available.
func TestExploreSweepsThenServes(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	out := filepath.Join(t.TempDir(), "ex")
	var stdout bytes.Buffer
	var info explore.Info
	var status int
	opts := &ExploreOptions{cmdIO: cmdIO{Stdout: &stdout}, Addr: "127.0.0.1", Port: 0, Model: modelDir, IDs: idsFile, Lengths: "64,128",
		Samples: 1, Bucket: 4, Out: out, MaxQueue: 4}
	opts.ready = func(url string) bool {
		resp, err := http.Get(url + "api/info")
		if err != nil {
			t.Error(err)
			return false
		}
		defer resp.Body.Close()
		status = resp.StatusCode
		b, _ := io.ReadAll(resp.Body)
		json.Unmarshal(b, &info)
		return false
	}
	if err := runExplore(opts); err != nil {
		t.Fatal(err)
	}
	if status != 200 || len(info.Lengths) != 2 || info.Lengths[1] != 128 || !info.Rows || !info.Tokens {
		t.Errorf("info: status %d, %+v", status, info)
	}
	for _, want := range []string{"sweeping", "open http://127.0.0.1:", explore.CacheDir} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "token=") {
		t.Errorf("a loopback server printed a token:\n%s", stdout.String())
	}
}

// TestExploreErrors: a folder that is not a sweep, both a folder and
// --text, and --text without --model are refused with what to do.
func TestExploreErrors(t *testing.T) {
	empty := t.TempDir()
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"explore", empty}, "not a measurement folder"},
		{[]string{"explore"}, "want one measurement folder"},
		{[]string{"explore", empty, "--text", "x.txt", "--model", empty}, "not both"},
		{[]string{"explore", "--text", "x.txt"}, "need --model"},
		{[]string{"explore", "--text", "a", "--ids", "b"}, "at most one of --ids and --text"},
	} {
		code, _, errs := probe(t, c.args...)
		if code == 0 || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d, %q, want %q", c.args, code, errs, c.msg)
		}
	}
}

// TestExploreDiagCSV: probe diag's CSV (written with --tokens on the zoo's
// gated checkpoint) opens in probe explore: its grid is each head's mean
// over its queries (one sample: std 0), its series the per-query values,
// its token strings the token column; rows are refused saying why.
func TestExploreDiagCSV(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text.txt")
	if err := os.WriteFile(text, []byte(strings.Repeat("The filter keeps what the head attends to, token by token. ", 20)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "diag.csv")
	if code, _, errs := probe(t, "diag", "--model", "../../zoo/checkpoints/gated_headwise", "--text", text, "--max-tokens", "100",
		"--tokens", "--progress=false", "--out", out); code != 0 {
		t.Fatalf("probe diag: %s", errs)
	}
	f, err := explore.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := explore.NewServer(f, explore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()
	get := func(path string, v any) (int, string) {
		resp, err := http.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if v != nil && resp.StatusCode == 200 {
			if err := json.Unmarshal(b, v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		return resp.StatusCode, string(b)
	}
	var in explore.Info
	get("/api/info", &in)
	if in.Kind != "diag" || !in.Series || !in.Tokens || in.Rows || !strings.Contains(in.RowsReason, "neither the model nor the token ids") ||
		len(in.Lengths) != 1 || in.Lengths[0] != 100 || !slices.Contains(in.Metrics, "lambda_obs") {
		t.Fatalf("info: %+v", in)
	}
	// The reference: the CSV read whole here.
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(fh).ReadAll()
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	col := slices.Index(recs[0], "neff")
	var sum [4][4]float64
	var vals [4][4][]float64
	var tokens []string
	for _, r := range recs[1:] {
		l, _ := strconv.Atoi(r[1])
		h, _ := strconv.Atoi(r[2])
		x, _ := strconv.ParseFloat(r[col], 64)
		sum[l][h] += x
		vals[l][h] = append(vals[l][h], x)
		if l == 0 && h == 0 {
			tokens = append(tokens, r[len(r)-1])
		}
	}
	var g struct{ Mean, Std [][]*float64 }
	if code, body := get("/api/grid?metric=neff", &g); code != 200 {
		t.Fatalf("grid: %d %s", code, body)
	}
	for l := range 4 {
		for h := range 4 {
			want := sum[l][h] / 100
			if got := g.Mean[l][h]; got == nil || math.Abs(*got-want) > 1e-12*want || *g.Std[l][h] != 0 {
				t.Errorf("grid layer %d head %d: %v ± %v, CSV mean %v", l, h, got, g.Std[l][h], want)
			}
		}
	}
	var e explore.Envelope
	if code, body := get("/api/series?layer=2&head=3&metric=neff&buckets=100", &e); code != 200 {
		t.Fatalf("series: %d %s", code, body)
	}
	for q, want := range vals[2][3] {
		if got := float64(e.Mean[q]); got != want {
			t.Errorf("series query %d: %v, CSV %v", q, got, want)
		}
	}
	var tk struct{ Tokens []string }
	if code, body := get("/api/tokens?from=10&to=20", &tk); code != 200 || !slices.Equal(tk.Tokens, tokens[10:20]) {
		t.Errorf("tokens: %d %s, CSV %q", code, body, tokens[10:20])
	}
	if code, body := get("/api/row?layer=0&head=0&query=5", nil); code != 422 || !strings.Contains(body, "neither the model") {
		t.Errorf("row: %d %s", code, body)
	}
	if code, body := get("/files/diag.csv", nil); code != 200 || !strings.HasPrefix(body, "sample,layer,head,query") {
		t.Errorf("/files/diag.csv: %d %.60s", code, body)
	}
	if code, _ := get("/files/text.txt", nil); code != 404 {
		t.Errorf("/files/text.txt beside the CSV: %d, want 404", code)
	}
}
