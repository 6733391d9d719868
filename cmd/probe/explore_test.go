package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
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
	opts := &ExploreOptions{Stdout: &stdout, Addr: "127.0.0.1", Port: 0, Model: modelDir, IDs: idsFile, Lengths: "64,128",
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
