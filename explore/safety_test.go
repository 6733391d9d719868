package explore

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// noRedirect is a client that reports redirects instead of following
// them, so that each request is judged on its own answer.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// TestMalformedQueries: each bad query gets its 4xx and a message that
// names the parameter, never a 5xx or a crash.
func TestMalformedQueries(t *testing.T) {
	sw := gated(t)
	_, ts := newTestServer(t, sw.dir, Options{})
	for _, c := range []struct {
		path string
		code int
		msg  string
	}{
		{"/api/grid?T=33", 400, "T 33"},
		{"/api/grid?metric=nope", 400, "nope"},
		{"/api/grid?window=middle", 400, "window"},
		{"/api/grid?T=40&T=24", 400, "given 2 times"},
		{"/api/series?layer=x&head=0", 400, "layer"},
		{"/api/series?head=0", 400, "missing parameter layer"},
		{"/api/series?layer=9&head=0", 400, "no series"},
		{"/api/series?layer=0&head=0&from=30&to=10", 400, "range"},
		{"/api/series?layer=0&head=0&to=41", 400, "range"},
		{"/api/series?layer=0&head=0&buckets=0", 400, "buckets"},
		{"/api/series?layer=0&head=0&buckets=100000", 400, "buckets"},
		{"/api/series?layer=0&head=0&sample=99999999999999999999", 400, "sample"},
		{"/api/tokens?from=-1", 400, "range"},
		{"/api/tokens?sample=7", 400, "sample 7"},
		{"/api/row?layer=0&head=0&query=40", 400, "query 40"},
		{"/api/row?layer=-1&head=0&query=3", 400, "layer -1"},
		{"/api/row?layer=0&head=99&query=3", 400, "head 99"},
		{"/api/row?layer=0&head=0", 400, "missing parameter query"},
		{"/api/row?layer=0&head=0&query=1&sample=5", 400, "sample 5"},
		{"/api/nothing", 404, ""},
		{"/api/info?" + strings.Repeat("x", 3000), 414, "URL"},
	} {
		code, body := get(t, ts, c.path, nil)
		if code != c.code || !strings.Contains(body, c.msg) {
			t.Errorf("%.60s: %d %.200s, want %d with %q", c.path, code, body, c.code, c.msg)
		}
	}
	resp, err := http.Post(ts.URL+"/api/info", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
}

// TestFilesStayInsideTheFolder: /files serves the folder's files and
// nothing outside it, however the path is written.
func TestFilesStayInsideTheFolder(t *testing.T) {
	sw := gated(t)
	secret := filepath.Join(filepath.Dir(sw.dir), "secret.txt")
	if err := os.WriteFile(secret, []byte("SECRET-OUTSIDE"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(sw.dir, "explore-cache", "out.txt")
	os.MkdirAll(filepath.Dir(link), 0o755)
	os.Remove(link)
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	dirLink := filepath.Join(sw.dir, "explore-cache", "up")
	os.Remove(dirLink)
	if err := os.Symlink(filepath.Dir(sw.dir), dirLink); err != nil {
		t.Fatal(err)
	}
	_, ts := newTestServer(t, sw.dir, Options{})
	if code, body := get(t, ts, "/files/summary.json", nil); code != 200 || !strings.Contains(body, "layer_groups") {
		t.Fatalf("summary.json: %d %.100s", code, body)
	}
	for _, p := range []string{
		"/files/../secret.txt", "/files/%2e%2e/secret.txt", "/files/%252e%252e/secret.txt", "/files/..%2fsecret.txt",
		"/files/passes/..%2f..%2fsecret.txt", "/files/" + secret, "/files//" + secret, "/files/%2f" + secret[1:],
		"/files/explore-cache/out.txt", "/files/explore-cache/up/secret.txt", "/files/..\\secret.txt", "/files/.%2e/secret.txt",
		"/files/", "/files/passes",
	} {
		req, _ := http.NewRequest("GET", ts.URL+"/", nil)
		req.URL.Opaque = "/" + strings.TrimPrefix(p, "/") // sent as written, not cleaned by the client
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<12)
		n, _ := resp.Body.Read(buf)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(buf[:n]), "SECRET") {
			t.Errorf("%s: %d %.100s", p, resp.StatusCode, buf[:n])
		}
	}
}

// TestTokenAndHost: on a non-loopback address every request needs the
// token; on loopback a request for another host is refused (DNS
// rebinding).
func TestTokenAndHost(t *testing.T) {
	sw := gated(t)
	s, ts := newTestServer(t, sw.dir, Options{Addr: "0.0.0.0:0"})
	tok := s.Token()
	if len(tok) != 32 {
		t.Fatalf("token %q", tok)
	}
	for _, c := range []struct {
		path, header string
		code         int
	}{{"/api/info", "", 401}, {"/api/info?token=wrong", "", 401}, {"/", "", 401}, {"/api/info?token=" + tok, "", 200}, {"/api/info", tok, 200}} {
		req, _ := http.NewRequest("GET", ts.URL+c.path, nil)
		if c.header != "" {
			req.Header.Set("X-Probe-Token", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("%s (header %q): %d, want %d", c.path, c.header, resp.StatusCode, c.code)
		}
	}
	_, local := newTestServer(t, sw.dir, Options{})
	req, _ := http.NewRequest("GET", local.URL+"/api/info", nil)
	req.Host = "evil.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("Host evil.example: %d, want 403", resp.StatusCode)
	}
}

// TestModelNotFound: without the model, rows answer 503 saying why and
// info says so; the grid, series and tokens still work.
func TestModelNotFound(t *testing.T) {
	sw := gated(t)
	_, ts := newTestServer(t, sw.dir, Options{ModelDir: filepath.Join(t.TempDir(), "gone")})
	var in Info
	get(t, ts, "/api/info", &in)
	if in.Rows || !strings.Contains(in.RowsReason, "not found") || !in.Tokens {
		t.Errorf("info: rows %v (%s), tokens %v", in.Rows, in.RowsReason, in.Tokens)
	}
	if code, body := get(t, ts, "/api/row?layer=0&head=0&query=3", nil); code != 503 || !strings.Contains(body, "not found") {
		t.Errorf("row: %d %s", code, body)
	}
	for _, p := range []string{"/api/grid", "/api/series?layer=1&head=1", "/api/tokens?from=0&to=5"} {
		if code, body := get(t, ts, p, nil); code != 200 {
			t.Errorf("%s: %d %s", p, code, body)
		}
	}
}

// TestNotAMeasurement: folders that are not a finished sweep are refused
// with a message saying what they are and what to do.
func TestNotAMeasurement(t *testing.T) {
	empty := t.TempDir()
	file := filepath.Join(empty, "x.txt")
	os.WriteFile(file, []byte("x"), 0o644)
	gdn := t.TempDir()
	os.WriteFile(filepath.Join(gdn, "gdn_manifest.json"), []byte("{}"), 0o644)
	sinks := t.TempDir()
	os.WriteFile(filepath.Join(sinks, "sinks_manifest.json"), []byte("{}"), 0o644)
	shards := t.TempDir()
	os.WriteFile(filepath.Join(shards, "experts_manifest-shard-0-of-2.json"), []byte("{}"), 0o644)
	csv := filepath.Join(empty, "x.csv")
	os.WriteFile(csv, []byte("sample,layer,head,query,neff\n0,0,0,x,1\n"), 0o644)
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "manifest.json"), []byte("[1,2"), 0o644)
	for _, c := range []struct{ dir, msg string }{
		{empty, "not a measurement folder"}, {file, "is a file"}, {gdn, "gdn run is unfinished"}, {sinks, "sinks run is unfinished"},
		{shards, "experts shards but no merged experts_manifest.json: run probe merge first"}, {csv, "line 2, query \"x\""},
		{bad, "not a sweep manifest"}, {filepath.Join(empty, "none"), "no such file"},
	} {
		if _, err := Open(c.dir); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("Open(%s): %v, want %q", c.dir, err, c.msg)
		}
	}
}

// TestGatedDeltaNetRow: for a Gated DeltaNet layer /api/row is the
// effective attention row W[t, :] that the full pass streams, and a
// softmax layer of the same model gives its hook_pattern row.
func TestGatedDeltaNetRow(t *testing.T) {
	sw := hybridSweep(t)
	m, err := model.Load(sw.modelDir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := m.Config.LayerKinds()
	_, ts := newTestServer(t, sw.dir, Options{})
	ids := passIDs(sw, 40, 1)
	for l, kind := range kinds {
		const h, q = 1, 33
		var row Row
		path := fmt.Sprintf("/api/row?T=40&sample=1&layer=%d&head=%d&query=%d", l, h, q)
		if code, body := get(t, ts, path, &row); code != 200 {
			t.Fatalf("%s (%s): %d %s", path, kind, code, body)
		}
		var want []float32
		if strings.HasPrefix(kind, "gated DeltaNet") {
			k := &rowKeeper{layer: l, head: h, query: q}
			set := &hooks.Set{}
			set.Stream(l, k)
			if _, err := m.Forward([][]int{ids}, model.Options{Hooks: set}); err != nil {
				t.Fatal(err)
			}
			want = k.row
			if row.Kind != "gated_deltanet" {
				t.Errorf("layer %d: kind %s", l, row.Kind)
			}
		} else {
			want = patternRow(t, sw.modelDir, ids, l, h, q)
		}
		if len(want) != q+1 || len(row.Weights) != q+1 {
			t.Fatalf("layer %d: %d weights, reference %d", l, len(row.Weights), len(want))
		}
		for j := range want {
			if d := float64(row.Weights[j] - want[j]); d*d > 1e-12*max(float64(want[j]*want[j]), 1e-18) {
				t.Errorf("layer %d (%s) key %d: %v, full pass %v", l, kind, j, row.Weights[j], want[j])
			}
		}
	}
}

// TestFrameAncestors: by default only the explorer's own pages may frame
// it; Options.FrameAncestors widens that (a notebook's iframe), and a
// value that could end the header's directive is refused.
func TestFrameAncestors(t *testing.T) {
	sw := gated(t)
	for _, c := range []struct{ set, want string }{
		{"", "frame-ancestors 'self'"},
		{"http://127.0.0.1:* http://localhost:*", "frame-ancestors http://127.0.0.1:* http://localhost:*"},
	} {
		_, ts := newTestServer(t, sw.dir, Options{FrameAncestors: c.set})
		resp, err := http.Get(ts.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasSuffix(csp, c.want) {
			t.Errorf("FrameAncestors %q: CSP %q, want it to end with %q", c.set, csp, c.want)
		}
	}
	f := mustOpen(t, sw.dir)
	if _, err := NewServer(f, Options{FrameAncestors: "'self'; script-src *"}); err == nil || !strings.Contains(err.Error(), "--frame-ancestors") {
		t.Errorf("a ';' in FrameAncestors: %v", err)
	}
}
