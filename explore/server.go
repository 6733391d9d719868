package explore

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/filterlens/probe/report"
)

//go:embed assets
var assets embed.FS

// Options are the server's settings; Defaults gives the documented
// defaults.
type Options struct {
	// Addr is the listening address (default 127.0.0.1:8457). Any host
	// other than a loopback one requires Token on every request.
	Addr string
	// Token is the access token required when Addr is not loopback
	// (generated at random when empty).
	Token string
	// ModelDir overrides the manifest's model folder for row passes.
	ModelDir string
	// FullPass runs the whole pass (all T tokens) for a row instead of the
	// tokens 0 … query (default false: the pass is causal, so the row is
	// the same and costs query+1 tokens).
	FullPass bool
	// Threads are the attention workers of a row pass (0: GOMAXPROCS).
	Threads int
	// MaxQueue is the number of distinct row passes that may wait (default 8);
	// more get 503.
	MaxQueue int
	// RequestTimeout bounds every request but rows (default 10 s);
	// RowTimeout bounds the wait for a row (default 10 min; the pass goes on
	// and caches its row when the wait ends first).
	RequestTimeout, RowTimeout time.Duration
	// ECharts is the echarts.min.js file (default report.LocateECharts's).
	ECharts string
	// FrameAncestors are the pages that may show the explorer in a frame,
	// as the Content-Security-Policy frame-ancestors sources (default
	// "'self'": none but the explorer's own; a notebook on loopback passes
	// "http://127.0.0.1:* http://localhost:*").
	FrameAncestors string
	// MaxBuckets bounds a series request's bucket count (default 4096) and
	// MaxTokens a tokens request's range (default 20000).
	MaxBuckets, MaxTokens int
}

// Defaults returns the default options.
func Defaults() Options {
	return Options{Addr: "127.0.0.1:8457", FrameAncestors: "'self'", MaxQueue: 8, RequestTimeout: 10 * time.Second, RowTimeout: 10 * time.Minute,
		MaxBuckets: 4096, MaxTokens: 20000}
}

// Server serves one folder.
type Server struct {
	f       *Folder
	o       Options
	rows    *rowRunner
	echarts []byte
	echErr  error
	local   bool // listening on loopback: no token, Host checked instead
	mux     *http.ServeMux
}

// NewServer prepares the server of an opened folder.
func NewServer(f *Folder, o Options) (*Server, error) {
	d := Defaults()
	if o.Addr == "" {
		o.Addr = d.Addr
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = d.MaxQueue
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = d.RequestTimeout
	}
	if o.RowTimeout <= 0 {
		o.RowTimeout = d.RowTimeout
	}
	if o.MaxBuckets <= 0 {
		o.MaxBuckets = d.MaxBuckets
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = d.MaxTokens
	}
	if o.FrameAncestors == "" {
		o.FrameAncestors = d.FrameAncestors
	}
	if i := strings.IndexAny(o.FrameAncestors, ";,\r\n\"\\"); i >= 0 {
		return nil, fmt.Errorf("--frame-ancestors %q: %q is not allowed (give space-separated CSP sources, e.g. 'self' http://127.0.0.1:*)", o.FrameAncestors, o.FrameAncestors[i])
	}
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("--addr %q: %w (want host:port, e.g. 127.0.0.1:8457)", o.Addr, err)
	}
	s := &Server{f: f, o: o, rows: newRowRunner(f, o), local: isLoopback(host)}
	if !s.local && s.o.Token == "" {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return nil, err
		}
		s.o.Token = hex.EncodeToString(b)
	}
	p := o.ECharts
	if p == "" {
		p, s.echErr = report.LocateECharts()
	}
	if s.echErr == nil {
		s.echarts, s.echErr = os.ReadFile(p)
	}
	s.mux = http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	s.mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.index)
	s.mux.HandleFunc("GET /echarts.min.js", s.echartsJS)
	s.mux.HandleFunc("GET /api/info", s.api(s.info))
	s.mux.HandleFunc("GET /api/grid", s.api(s.gridAPI))
	s.mux.HandleFunc("GET /api/series", s.api(s.seriesAPI))
	s.mux.HandleFunc("GET /api/tokens", s.api(s.tokensAPI))
	s.mux.HandleFunc("GET /api/row", s.rowAPI)
	s.mux.HandleFunc("GET /api/status", s.api(s.statusAPI))
	s.mux.HandleFunc("GET /files/", s.file)
	return s, nil
}

// Token is the access token ("" when listening on loopback).
func (s *Server) Token() string {
	if s.local {
		return ""
	}
	return s.o.Token
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// maxURL bounds a request's URL length; no request has a body.
const maxURL = 2048

// ServeHTTP checks the request's size, method, host and token, then
// routes it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(r.RequestURI) > maxURL {
		httpError(w, http.StatusRequestURITooLong, fmt.Sprintf("URL of %d bytes: at most %d", len(r.RequestURI), maxURL))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		httpError(w, http.StatusMethodNotAllowed, "only GET: the explorer never changes anything")
		return
	}
	if r.ContentLength > 0 {
		httpError(w, http.StatusRequestEntityTooLarge, "requests have no body")
		return
	}
	if s.local {
		// A loopback server answers only requests addressed to loopback (no DNS rebinding).
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if !isLoopback(host) {
			httpError(w, http.StatusForbidden, fmt.Sprintf("host %q: this server answers requests to 127.0.0.1 or localhost only", r.Host))
			return
		}
	} else if !s.authorized(w, r) {
		httpError(w, http.StatusUnauthorized, "missing or wrong token: open the URL probe explore printed (it carries ?token=…), or send the X-Probe-Token header")
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors "+s.o.FrameAncestors)
	s.mux.ServeHTTP(w, r)
}

// authorized checks the token (query ?token=, header X-Probe-Token or the
// cookie set when the page was opened with the token).
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	got := r.URL.Query().Get("token")
	if got == "" {
		got = r.Header.Get("X-Probe-Token")
	}
	if got == "" {
		if c, err := r.Cookie("probe_token"); err == nil {
			got = c.Value
		}
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(s.o.Token)) != 1 {
		return false
	}
	if r.URL.Query().Get("token") != "" {
		http.SetCookie(w, &http.Cookie{Name: "probe_token", Value: s.o.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	return true
}

// httpError writes {"error": msg} with the status.
func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// badRequest is an error whose message is the client's fault (400).
type badRequest struct{ msg string }

func (e badRequest) Error() string { return e.msg }

func bad(format string, a ...any) error { return badRequest{fmt.Sprintf(format, a...)} }

// api wraps a JSON handler: a time bound, 400 for a bad request, 500 for
// anything else, and no panic ever reaching the connection.
func (s *Server) api(h func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.o.RequestTimeout)
		defer cancel()
		type result struct {
			v   any
			err error
		}
		done := make(chan result, 1)
		go func() {
			defer func() {
				if p := recover(); p != nil {
					done <- result{nil, fmt.Errorf("internal error: %v", p)}
				}
			}()
			v, err := h(r.WithContext(ctx))
			done <- result{v, err}
		}()
		select {
		case res := <-done:
			writeResult(w, res.v, res.err)
		case <-ctx.Done():
			httpError(w, http.StatusServiceUnavailable, fmt.Sprintf("the request took longer than %v", s.o.RequestTimeout))
		}
	}
}

func writeResult(w http.ResponseWriter, v any, err error) {
	var br badRequest
	switch {
	case errors.As(err, &br), errors.Is(err, ErrNoHead):
		httpError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrNoRows):
		httpError(w, http.StatusUnprocessableEntity, err.Error())
	case errors.Is(err, ErrBusy):
		httpError(w, http.StatusServiceUnavailable, err.Error())
	case err != nil:
		httpError(w, http.StatusInternalServerError, err.Error())
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(v)
	}
}

// params reads integer query parameters: each name must be present
// (unless it has a default in defs) and a base-10 int.
func intParam(r *http.Request, name string, def *int) (int, error) {
	v := r.URL.Query()[name]
	if len(v) == 0 || v[0] == "" {
		if def != nil {
			return *def, nil
		}
		return 0, bad("missing parameter %s", name)
	}
	if len(v) > 1 {
		return 0, bad("parameter %s given %d times", name, len(v))
	}
	n, err := strconv.Atoi(v[0])
	if err != nil {
		return 0, bad("parameter %s=%q: want an integer", name, truncate(v[0], 40))
	}
	return n, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func ptr(n int) *int { return &n }

// lengthParam reads T, defaulting to the longest length.
func (s *Server) lengthParam(r *http.Request) (int, error) {
	ls := s.f.table.lengths()
	T, err := intParam(r, "T", ptr(ls[len(ls)-1]))
	if err != nil {
		return 0, err
	}
	if !slices.Contains(ls, T) {
		return 0, bad("T %d: the sweep has lengths %v", T, ls)
	}
	return T, nil
}

func (s *Server) metricParam(r *http.Request, def string) (string, error) {
	m := r.URL.Query().Get("metric")
	if m == "" {
		m = def
	}
	if !slices.Contains(s.f.table.metrics(), m) {
		return "", bad("metric %q: the %s has %v", truncate(m, 40), s.f.Kind, s.f.table.metrics())
	}
	return m, nil
}

// Info is /api/info: what the folder holds and whether rows can be had.
type Info struct {
	Dir         string   `json:"dir"`
	Kind        string   `json:"kind"`
	Note        string   `json:"note,omitempty"`
	Model       any      `json:"model"`
	LayerKinds  []string `json:"layer_kinds,omitempty"`
	Lengths     []int    `json:"lengths"`
	Samples     int      `json:"samples"`
	Metrics     []string `json:"metrics"`
	Metric      string   `json:"default_metric"` // what grid and series show without metric=
	Windows     []string `json:"windows"`
	Columns     string   `json:"columns"`                // the grid's second axis: head, rank or expert
	HeadsReason string   `json:"heads_reason,omitempty"` // why the grid's cells are not attention heads
	Series      bool     `json:"series"`                 // a per-position table: Head over positions and Text
	Bucket      int      `json:"bucket"`
	BOSToken    int      `json:"bos_token"`
	Measured    []int    `json:"measured_layers"`
	Rows        bool     `json:"rows"`
	RowsReason  string   `json:"rows_reason,omitempty"`
	Tokens      bool     `json:"tokens"`
	TokenReason string   `json:"tokens_reason,omitempty"`
	ECharts     string   `json:"echarts_error,omitempty"`
	CacheDir    string   `json:"cache_dir"`
}

func (s *Server) info(r *http.Request) (any, error) {
	in := Info{Dir: s.f.Dir, Kind: s.f.Kind, Model: s.f.Model, Lengths: s.f.table.lengths(), Samples: s.f.Samples,
		Metrics: s.f.table.metrics(), Metric: s.f.defaultMetric(), Windows: s.f.windows, Bucket: s.f.Bucket, BOSToken: s.f.BOSToken,
		Measured: measured(s.f.Model), CacheDir: CacheDir, Note: s.f.note, Columns: s.f.columns, HeadsReason: s.f.noHeads}
	_, gridOnly := s.f.table.(gridOnly)
	in.Series = !gridOnly
	if err := s.f.tokensAvailable(); err != nil {
		in.TokenReason = err.Error()
	} else {
		in.Tokens = true
	}
	if why := cmp.Or(s.f.noRows, s.f.noHeads); why != "" {
		in.RowsReason = why
	} else if err := s.rows.available(); err != nil {
		in.RowsReason = err.Error()
	} else {
		in.Rows = true
	}
	if s.echErr != nil {
		in.ECharts = s.echErr.Error()
	}
	return in, nil
}

func (s *Server) gridAPI(r *http.Request) (any, error) {
	T, err := s.lengthParam(r)
	if err != nil {
		return nil, err
	}
	m, err := s.metricParam(r, s.f.defaultMetric())
	if err != nil {
		return nil, err
	}
	win := r.URL.Query().Get("window")
	if win == "" {
		win = "all"
	}
	if !slices.Contains(s.f.windows, win) {
		return nil, bad("window %q: the %s has %v", truncate(win, 20), s.f.Kind, s.f.windows)
	}
	return s.f.grid(T, m, win)
}

// maxOverlay bounds the series of one /api/series request.
const maxOverlay = 16

// listParam reads a comma-separated list of integers (at least one).
func listParam(r *http.Request, name string) ([]int, error) {
	v := r.URL.Query()[name]
	if len(v) != 1 || v[0] == "" {
		if len(v) > 1 {
			return nil, bad("parameter %s given %d times (give a list as %s=1,2)", name, len(v), name)
		}
		return nil, bad("missing parameter %s", name)
	}
	parts := strings.Split(v[0], ",")
	if len(parts) > maxOverlay {
		return nil, bad("parameter %s: %d values, at most %d", name, len(parts), maxOverlay)
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, bad("parameter %s=%q: want an integer or a comma-separated list of them", name, truncate(v[0], 40))
		}
		out[i] = n
	}
	return out, nil
}

// SeriesOf is one series of a list answer of /api/series.
type SeriesOf struct {
	Layer int `json:"layer"`
	Head  int `json:"head"`
	Envelope
}

// seriesAPI answers one series (layer and head single integers: the
// envelope's fields at the top level) or several overlaid (layer and/or
// head comma-separated lists, paired by position; a list of one is
// repeated, so layer=3&head=0,1,2 is three heads of layer 3 and
// layer=0,1,2,3&head=1 head 1 of four layers: {"series": [{layer, head,
// envelope…}, …]}), all over the same range and buckets.
func (s *Server) seriesAPI(r *http.Request) (any, error) {
	T, err := s.lengthParam(r)
	if err != nil {
		return nil, err
	}
	m, err := s.metricParam(r, s.f.defaultMetric())
	if err != nil {
		return nil, err
	}
	var v [3]int
	for i, p := range []struct {
		name string
		def  *int
	}{{"sample", ptr(0)}, {"from", ptr(0)}, {"to", ptr(T)}} {
		if v[i], err = intParam(r, p.name, p.def); err != nil {
			return nil, err
		}
	}
	layers, err := listParam(r, "layer")
	if err != nil {
		return nil, err
	}
	heads, err := listParam(r, "head")
	if err != nil {
		return nil, err
	}
	n := max(len(layers), len(heads))
	if (len(layers) != 1 && len(layers) != n) || (len(heads) != 1 && len(heads) != n) {
		return nil, bad("%d layers and %d heads: give lists of the same length, or one of them a single value", len(layers), len(heads))
	}
	nb, err := intParam(r, "buckets", ptr(1000))
	if err != nil {
		return nil, err
	}
	sample, from, to := v[0], v[1], v[2]
	if from < 0 || to > T || from >= to {
		return nil, bad("range [%d, %d): want 0 ≤ from < to ≤ T = %d", from, to, T)
	}
	if nb < 1 || nb > s.o.MaxBuckets {
		return nil, bad("buckets %d: want 1 … %d", nb, s.o.MaxBuckets)
	}
	if _, ok := s.f.table.(gridOnly); ok {
		return nil, bad("a probe %s folder has no per-position table: only /api/grid (and /api/row where /api/info says rows)", s.f.Kind)
	}
	out := make([]SeriesOf, n)
	for i := range out {
		layer, head := layers[min(i, len(layers)-1)], heads[min(i, len(heads)-1)]
		k := seriesKey{T: T, Sample: sample, Layer: layer, Head: head, Metric: m}
		if !s.f.table.has(k) {
			return nil, bad("no series for T %d sample %d layer %d head %d metric %s (samples %v; the %s's layers and heads are in /api/info)",
				T, sample, layer, head, m, s.f.table.samples(T), s.f.Kind)
		}
		rows, err := s.f.table.series(k)
		if err != nil {
			return nil, err
		}
		out[i] = SeriesOf{layer, head, envelope(rows, from, to, nb, s.f.Bucket)}
	}
	type head struct {
		T      int    `json:"T"`
		Sample int    `json:"sample"`
		Metric string `json:"metric"`
	}
	if len(layers) == 1 && len(heads) == 1 {
		return struct {
			head
			SeriesOf
		}{head{T, sample, m}, out[0]}, nil
	}
	return struct {
		head
		Series []SeriesOf `json:"series"`
	}{head{T, sample, m}, out}, nil
}

func (s *Server) tokensAPI(r *http.Request) (any, error) {
	T, err := s.lengthParam(r)
	if err != nil {
		return nil, err
	}
	sample, err := intParam(r, "sample", ptr(0))
	if err != nil {
		return nil, err
	}
	from, err := intParam(r, "from", ptr(0))
	if err != nil {
		return nil, err
	}
	to, err := intParam(r, "to", ptr(min(T, from+s.o.MaxTokens)))
	if err != nil {
		return nil, err
	}
	if from < 0 || to > T || from >= to || to-from > s.o.MaxTokens {
		return nil, bad("range [%d, %d): want 0 ≤ from < to ≤ T = %d, at most %d tokens a request", from, to, T, s.o.MaxTokens)
	}
	if !slices.Contains(s.f.table.samples(T), sample) && !s.f.hasChunk(T, sample) {
		return nil, bad("no pass T %d sample %d in the %s (lengths %v, %d samples)", T, sample, s.f.Kind, s.f.Lengths, s.f.Samples)
	}
	ids, toks, err := s.f.tokenStrings(T, sample, from, to)
	if err != nil {
		return nil, err
	}
	return map[string]any{"T": T, "sample": sample, "from": from, "to": to, "ids": ids, "tokens": toks}, nil
}

// rowParams reads a row request: T (default the longest length), sample
// (default 0), layer, head and query.
func (s *Server) rowParams(r *http.Request) (RowRequest, error) {
	var q RowRequest
	var err error
	if q.T, err = s.lengthParam(r); err != nil {
		return q, err
	}
	for _, p := range []struct {
		name string
		dst  *int
		def  *int
	}{{"sample", &q.Sample, ptr(0)}, {"layer", &q.Layer, nil}, {"head", &q.Head, nil}, {"query", &q.Query, nil}} {
		if *p.dst, err = intParam(r, p.name, p.def); err != nil {
			return q, err
		}
	}
	return q, nil
}

// statusLongPoll is the longest /api/status?since= waits for a change.
const statusLongPoll = 5 * time.Second

// statusAPI is /api/status[?since=V][&T=&sample=&layer=&head=&query=]:
// the row passes' status (RowStatus); with since equal to its current
// version it answers at the next change or after statusLongPoll; with a
// query (layer, head and query given) it says where that request stands.
func (s *Server) statusAPI(r *http.Request) (any, error) {
	var since *uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, bad("parameter since=%q: want the version of an earlier status (a non-negative integer)", truncate(v, 40))
		}
		since = &n
	}
	var q *RowRequest
	if r.URL.Query().Has("query") {
		rq, err := s.rowParams(r)
		if err != nil {
			return nil, err
		}
		q = &rq
	}
	ctx, cancel := context.WithTimeout(r.Context(), min(statusLongPoll, s.o.RequestTimeout/2))
	defer cancel()
	return s.rows.status(ctx, since, q), nil
}

func (s *Server) rowAPI(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			httpError(w, http.StatusInternalServerError, fmt.Sprintf("internal error: %v", p))
		}
	}()
	q, err := s.rowParams(r)
	if err != nil {
		writeResult(w, nil, err)
		return
	}
	if why := cmp.Or(s.f.noRows, s.f.noHeads); why != "" {
		httpError(w, http.StatusUnprocessableEntity, "rows are unavailable: "+why)
		return
	}
	if err := s.rows.check(q); err != nil {
		writeResult(w, nil, badRequest{err.Error()})
		return
	}
	if err := s.rows.available(); err != nil {
		httpError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.RowTimeout)
	defer cancel()
	row, err := s.rows.row(ctx, q)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		httpError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeResult(w, row, err)
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	b, err := assets.ReadFile("assets/index.html")
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

func (s *Server) echartsJS(w http.ResponseWriter, r *http.Request) {
	if s.echErr != nil {
		httpError(w, http.StatusNotFound, s.echErr.Error())
		return
	}
	w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Write(s.echarts)
}

// file serves a file of the folder (tables, summary.json, figures) under
// /files/<relative path>. Refused: absolute paths, any ".." element
// (also percent-encoded), hidden names, and anything whose real path,
// symlinks resolved, lies outside the folder.
func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	rel, err := s.safePath(strings.TrimPrefix(r.URL.EscapedPath(), "/files/"))
	if err != nil {
		httpError(w, http.StatusBadRequest, err.Error())
		return
	}
	if s.f.only != "" && rel != s.f.only {
		httpError(w, http.StatusNotFound, fmt.Sprintf("%s: only %s is served (probe explore was given that file)", rel, s.f.only))
		return
	}
	root, err := os.OpenRoot(s.f.Dir)
	if err != nil {
		httpError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer root.Close()
	fh, err := root.Open(rel)
	if err != nil {
		httpError(w, http.StatusNotFound, fmt.Sprintf("%s: not a file of the folder (or it leads outside it)", rel))
		return
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil || !st.Mode().IsRegular() {
		httpError(w, http.StatusNotFound, fmt.Sprintf("%s: not a file", rel))
		return
	}
	http.ServeContent(w, r, path.Base(rel), st.ModTime(), fh)
}

// safePath turns the escaped path after /files/ into a clean relative
// path, refusing what could leave the folder.
func (s *Server) safePath(escaped string) (string, error) {
	if strings.Contains(strings.ToLower(escaped), "%2f") || strings.Contains(strings.ToLower(escaped), "%5c") || strings.Contains(escaped, "\\") {
		return "", fmt.Errorf("path %q: encoded or back slashes are refused", truncate(escaped, 80))
	}
	var parts []string
	for _, seg := range strings.Split(escaped, "/") {
		p, err := urlUnescape(seg)
		if err != nil {
			return "", fmt.Errorf("path %q: %v", truncate(escaped, 80), err)
		}
		if p == "" || p == "." {
			continue
		}
		if p == ".." || strings.HasPrefix(p, ".") || strings.ContainsAny(p, "\x00:") {
			return "", fmt.Errorf("path %q: %q is refused (no parent, hidden or special names)", truncate(escaped, 80), p)
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("no file named after /files/")
	}
	rel := filepath.Join(parts...)
	if filepath.IsAbs(rel) || !filepath.IsLocal(rel) {
		return "", fmt.Errorf("path %q: not inside the folder", truncate(escaped, 80))
	}
	return rel, nil
}

// urlUnescape decodes one path segment, repeatedly, so that a doubly
// encoded ".." (%252e%252e) is seen as "..".
func urlUnescape(s string) (string, error) {
	for range 3 {
		u, err := url.PathUnescape(s)
		if err != nil {
			return "", err
		}
		if u == s {
			return u, nil
		}
		s = u
	}
	return "", fmt.Errorf("encoded more than twice")
}

// Serve listens on Options.Addr and serves until ctx ends; ready gets the
// URL to open (with the token when one is required) once it listens.
// Request headers are bounded to 16 KiB and 10 s, responses other than
// rows to RequestTimeout.
func (s *Server) Serve(ctx context.Context, ready func(url string)) error {
	ln, err := net.Listen("tcp", s.o.Addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w (another probe explore on that port? pass --port)", s.o.Addr, err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: s.o.RowTimeout + 30*time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 16 << 10}
	u := "http://" + ln.Addr().String() + "/"
	if t := s.Token(); t != "" {
		u += "?token=" + t
	}
	if ready != nil {
		ready(u)
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
