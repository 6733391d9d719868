// Package browser opens an HTML report in headless Chromium, offline, and
// reports what a reader's browser would see: every network request the page
// made (and which of them failed or left the machine), every console error
// and uncaught exception (Content-Security-Policy violations included), the
// layout at each of LayoutWidths (sideways scrolling, overlapping text in a
// chart, text clipped by its chart or by a box that hides overflow; see
// layoutJS), and for every chart container (elements with class "chart") a
// screenshot of just that element with the share of its pixels that are
// not background.
//
// It speaks the Chrome DevTools protocol over a websocket (websocket.go, a
// minimal RFC 6455 client over net), so it needs no module beyond the
// standard library, only a Chromium binary (Debian's `chromium`).
package browser

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// ChromiumEnv names the environment variable that overrides the browser.
const ChromiumEnv = "PROBE_CHROMIUM"

// Flags are the Chromium flags of every check: headless, no sandbox (CI
// runs as root), no GPU, and no background traffic of the browser's own
// (component updates, sync, first-run pages); host resolution is disabled
// so that any request a page makes beyond file: fails loudly instead of
// reaching the network.
var Flags = []string{
	"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync",
	"--disable-extensions", "--disable-default-apps", "--mute-audio", "--hide-scrollbars",
	"--host-resolver-rules=MAP * ~NOTFOUND",
	"--remote-debugging-port=0", "--window-size=1400,1000",
}

// Find returns the Chromium binary: $PROBE_CHROMIUM, else the first of
// chromium, chromium-browser, google-chrome on PATH.
func Find() (string, error) {
	if p := os.Getenv(ChromiumEnv); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("browser: no chromium on PATH (Debian: apt-get install -y chromium; or set " + ChromiumEnv + ")")
}

// Chart is what one chart container looked like.
type Chart struct {
	ID       string
	W, H     int     // CSS pixels
	NonBlank float64 // fraction of pixels that differ from the element's background
	Colors   int     // distinct colours (quantized to 4 bits per channel)
	PNG      []byte  // the screenshot at the last of LayoutWidths
}

// LayoutWidths are the viewport widths (CSS pixels, height 1000) at which
// Check measures the layout; the last one is the width of the chart
// screenshots and of Result.Page.
var LayoutWidths = []int{1024, 1920, 1280}

// Layout is what the page's layout looked like at one viewport width.
type Layout struct {
	Width       int      // viewport width
	ScrollWidth int      // the document's scroll width (> Width: horizontal scrolling)
	Overlaps    []string // pairs of text boxes inside one chart that overlap
	Clipped     []string // text that sticks out of its chart, or overflows a box that hides overflow
}

// Result is what the page did.
type Result struct {
	Layouts  []Layout // one per LayoutWidths
	Requests []string // every URL requested, in order
	External []string // requests to anything but file:, data:, blob: and about:
	Failed   []string // "URL: error" for requests that failed
	Console  []string // console errors, uncaught exceptions and browser log errors
	Charts   []Chart
	Page     []byte // PNG screenshot of the first screen
}

// Problems lists everything that makes the page fail the offline check:
// external or failed requests, console errors, and chart containers with
// fewer than minNonBlank of their pixels drawn (or fewer than 3 colours).
func (r *Result) Problems(minNonBlank float64) []string {
	var out []string
	for _, u := range r.External {
		out = append(out, "external request: "+u)
	}
	for _, f := range r.Failed {
		out = append(out, "failed request: "+f)
	}
	for _, c := range r.Console {
		out = append(out, "console: "+c)
	}
	if len(r.Charts) == 0 {
		out = append(out, "no chart containers (.chart) on the page")
	}
	for _, c := range r.Charts {
		if c.W == 0 || c.H == 0 || c.NonBlank < minNonBlank || c.Colors < 3 {
			out = append(out, fmt.Sprintf("chart %q (%d×%d) looks blank: %.2f%% drawn, %d colours", c.ID, c.W, c.H, 100*c.NonBlank, c.Colors))
		}
	}
	for _, l := range r.Layouts {
		if l.ScrollWidth > l.Width {
			out = append(out, fmt.Sprintf("at %d px the page scrolls sideways: %d px of content", l.Width, l.ScrollWidth))
		}
		for _, o := range l.Overlaps {
			out = append(out, fmt.Sprintf("at %d px overlapping text: %s", l.Width, o))
		}
		for _, c := range l.Clipped {
			out = append(out, fmt.Sprintf("at %d px clipped text: %s", l.Width, c))
		}
	}
	return out
}

// layoutJS measures the page as laid out now. Text inside charts is read
// from the DOM: echarts draws with its SVG renderer and the static charts
// are inline SVG, so every label is a <text> element whose
// getBoundingClientRect is the box the reader sees (transforms and
// rotation included). Two non-empty, visible texts of one chart whose boxes
// overlap by more than 1.5 px in both directions overlap; a text whose box
// leaves its .chart box by more than 1 px is clipped. Outside charts, an
// element that hides or scrolls its overflow (overflow other than visible)
// and whose content is wider or taller than its box clips text.
const layoutJS = `(function () {
	function vis(el) {
		var r = el.getBoundingClientRect();
		if (r.width < 0.5 || r.height < 0.5 || !(el.textContent || '').trim()) { return null; }
		for (var e = el; e && e.nodeType === 1; e = e.parentNode) {
			var cs = getComputedStyle(e);
			if (cs.display === 'none' || cs.visibility === 'hidden' || cs.opacity === '0') { return null; }
			if (e.getAttribute && (e.getAttribute('opacity') === '0' || e.getAttribute('fill-opacity') === '0')) { return null; }
		}
		return r;
	}
	function name(el, r) {
		return JSON.stringify(el.textContent.trim().slice(0, 40)) + ' [' + Math.round(r.left) + ',' + Math.round(r.top) + ' ' + Math.round(r.width) + 'x' + Math.round(r.height) + ']';
	}
	var out = {scrollWidth: document.documentElement.scrollWidth, overlaps: [], clipped: []};
	document.querySelectorAll('.chart').forEach(function (chart) {
		var cid = chart.id || (chart.querySelector('[id]') || {}).id || '';
		var cr = chart.getBoundingClientRect();
		var texts = [];
		chart.querySelectorAll('text').forEach(function (t) { var r = vis(t); if (r) { texts.push([t, r]); } });
		for (var i = 0; i < texts.length; i++) {
			var a = texts[i][1];
			if (a.left < cr.left - 1 || a.right > cr.right + 1 || a.top < cr.top - 1 || a.bottom > cr.bottom + 1) {
				out.clipped.push(cid + ': ' + name(texts[i][0], a) + ' outside the chart [' + Math.round(cr.left) + ',' + Math.round(cr.top) + ' ' + Math.round(cr.width) + 'x' + Math.round(cr.height) + ']');
			}
			for (var j = i + 1; j < texts.length; j++) {
				var b = texts[j][1];
				var ox = Math.min(a.right, b.right) - Math.max(a.left, b.left), oy = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
				if (ox > 1.5 && oy > 1.5) { out.overlaps.push(cid + ': ' + name(texts[i][0], a) + ' and ' + name(texts[j][0], b)); }
			}
		}
	});
	document.querySelectorAll('body *').forEach(function (el) {
		if (el.closest('svg') || el.closest('.chart')) { return; }
		var cs = getComputedStyle(el);
		if (cs.overflowX === 'visible' && cs.overflowY === 'visible' && cs.textOverflow !== 'ellipsis') { return; }
		if ((el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1) && (el.textContent || '').trim()) {
			out.clipped.push('<' + el.tagName.toLowerCase() + '> ' + JSON.stringify(el.textContent.trim().slice(0, 40)) + ' (' + el.scrollWidth + 'x' + el.scrollHeight + ' in ' + el.clientWidth + 'x' + el.clientHeight + ')');
		}
	});
	return JSON.stringify(out);
})()`

var listening = regexp.MustCompile(`DevTools listening on (ws://\S+)`)

// Check opens htmlPath in a fresh headless Chromium with an empty profile,
// waits for the load event and for charts to settle, and collects a Result.
func Check(ctx context.Context, chromium, htmlPath string) (*Result, error) {
	abs, err := filepath.Abs(htmlPath)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(abs); err != nil {
		return nil, err
	}
	profile, err := os.MkdirTemp("", "probe-chromium-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(profile)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	args := append(append([]string{}, Flags...), "--user-data-dir="+profile, "about:blank")
	cmd := exec.CommandContext(ctx, chromium, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		cancel()
		_ = cmd.Wait()
	}()
	wsURL, err := waitListening(ctx, stderr)
	if err != nil {
		return nil, err
	}
	ws, err := dialWS(wsURL, 10*time.Second)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	s := newSession(ws)
	go s.readLoop()
	return s.run(ctx, "file://"+abs)
}

// waitListening reads Chromium's stderr until it announces its DevTools
// endpoint, then keeps draining stderr in the background.
func waitListening(ctx context.Context, r io.Reader) (string, error) {
	found := make(chan string, 1)
	var tail bytes.Buffer
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if m := listening.FindStringSubmatch(line); m != nil && !sent {
				found <- m[1]
				sent = true
			}
			mu.Lock()
			if tail.Len() < 4096 {
				tail.WriteString(line + "\n")
			}
			mu.Unlock()
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case u, ok := <-found:
		if !ok {
			mu.Lock()
			defer mu.Unlock()
			return "", fmt.Errorf("browser: chromium exited before listening:\n%s", tail.String())
		}
		return u, nil
	case <-time.After(30 * time.Second):
		return "", errors.New("browser: chromium did not open its DevTools endpoint within 30 s")
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// session is one DevTools connection: numbered calls and an event log.
type session struct {
	ws      *wsConn
	mu      sync.Mutex
	nextID  int
	pending map[int]chan message
	events  chan message
	readErr error
}

type message struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

func newSession(ws *wsConn) *session {
	return &session{ws: ws, pending: map[int]chan message{}, events: make(chan message, 4096)}
}

func (s *session) readLoop() {
	for {
		data, err := s.ws.ReadMessage()
		if err != nil {
			s.mu.Lock()
			s.readErr = err
			for id, ch := range s.pending {
				close(ch)
				delete(s.pending, id)
			}
			s.mu.Unlock()
			close(s.events)
			return
		}
		var m message
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		if m.ID != 0 {
			s.mu.Lock()
			ch := s.pending[m.ID]
			delete(s.pending, m.ID)
			s.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		select {
		case s.events <- m:
		default: // a page that floods events loses the excess, never the calls
		}
	}
}

// call sends a command (to the page session when sessionID is set) and
// waits for its reply.
func (s *session) call(ctx context.Context, sessionID, method string, params any, out any) error {
	s.mu.Lock()
	if s.readErr != nil {
		s.mu.Unlock()
		return s.readErr
	}
	s.nextID++
	id := s.nextID
	ch := make(chan message, 1)
	s.pending[id] = ch
	s.mu.Unlock()
	req := map[string]any{"id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	if sessionID != "" {
		req["sessionId"] = sessionID
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if err := s.ws.WriteText(data); err != nil {
		return err
	}
	select {
	case m, ok := <-ch:
		if !ok {
			return fmt.Errorf("browser: connection closed during %s", method)
		}
		if m.Error != nil {
			return fmt.Errorf("browser: %s: %s", method, m.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("browser: %s: %w", method, ctx.Err())
	}
}

// eventLog accumulates what the page did from the event stream.
type eventLog struct {
	mu     sync.Mutex
	res    Result
	urls   map[string]string // request id → URL
	loaded chan struct{}
	once   sync.Once
}

func (l *eventLog) handle(m message) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch m.Method {
	case "Network.requestWillBeSent":
		var p struct {
			RequestID string `json:"requestId"`
			Request   struct {
				URL string `json:"url"`
			} `json:"request"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			l.urls[p.RequestID] = p.Request.URL
			l.res.Requests = append(l.res.Requests, p.Request.URL)
			if !local(p.Request.URL) {
				l.res.External = append(l.res.External, p.Request.URL)
			}
		}
	case "Network.loadingFailed":
		var p struct {
			RequestID string `json:"requestId"`
			ErrorText string `json:"errorText"`
			Canceled  bool   `json:"canceled"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			l.res.Failed = append(l.res.Failed, l.urls[p.RequestID]+": "+p.ErrorText)
		}
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		if json.Unmarshal(m.Params, &p) == nil && (p.Type == "error" || p.Type == "assert") {
			var parts []string
			for _, a := range p.Args {
				if a.Description != "" {
					parts = append(parts, a.Description)
				} else {
					parts = append(parts, fmt.Sprint(a.Value))
				}
			}
			l.res.Console = append(l.res.Console, "console."+p.Type+": "+strings.Join(parts, " "))
		}
	case "Runtime.exceptionThrown":
		var p struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		if json.Unmarshal(m.Params, &p) == nil {
			l.res.Console = append(l.res.Console, "exception: "+p.Details.Text+" "+p.Details.Exception.Description)
		}
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level, Text, URL, Source string
			} `json:"entry"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.Entry.Level == "error" {
			l.res.Console = append(l.res.Console, "log("+p.Entry.Source+"): "+p.Entry.Text+" "+p.Entry.URL)
		}
	case "Page.loadEventFired":
		l.once.Do(func() { close(l.loaded) })
	}
}

// local reports whether a URL stays on the machine without a network stack.
func local(u string) bool {
	for _, p := range []string{"file:", "data:", "blob:", "about:"} {
		if strings.HasPrefix(u, p) {
			return true
		}
	}
	return false
}

func (s *session) run(ctx context.Context, pageURL string) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := s.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	if err := s.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached); err != nil {
		return nil, err
	}
	sid := attached.SessionID
	log := &eventLog{urls: map[string]string{}, loaded: make(chan struct{})}
	go func() {
		for m := range s.events {
			if m.SessionID == sid {
				log.handle(m)
			}
		}
	}()
	for _, m := range []string{"Network.enable", "Runtime.enable", "Log.enable", "Page.enable"} {
		if err := s.call(ctx, sid, m, nil, nil); err != nil {
			return nil, err
		}
	}
	if err := s.setWidth(ctx, sid, LayoutWidths[0]); err != nil {
		return nil, err
	}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := s.call(ctx, sid, "Page.navigate", map[string]any{"url": pageURL}, &nav); err != nil {
		return nil, err
	}
	if nav.ErrorText != "" {
		return nil, fmt.Errorf("browser: navigating to %s: %s", pageURL, nav.ErrorText)
	}
	select {
	case <-log.loaded:
	case <-ctx.Done():
		return nil, errors.New("browser: the page did not finish loading within 60 s")
	}
	// Charts draw synchronously at load (animation is off); give the
	// compositor a moment and let late console errors arrive.
	time.Sleep(700 * time.Millisecond)

	var layouts []Layout
	for i, w := range LayoutWidths {
		if i > 0 {
			// The charts follow their containers through a ResizeObserver.
			if err := s.setWidth(ctx, sid, w); err != nil {
				return nil, err
			}
			time.Sleep(300 * time.Millisecond)
		}
		if err := s.waitSettled(ctx, sid); err != nil {
			return nil, fmt.Errorf("browser: at %d px: %w", w, err)
		}
		var l struct {
			ScrollWidth int
			Overlaps    []string
			Clipped     []string
		}
		if err := s.eval(ctx, sid, layoutJS, &l); err != nil {
			return nil, fmt.Errorf("browser: measuring the layout at %d px: %w", w, err)
		}
		layouts = append(layouts, Layout{Width: w, ScrollWidth: l.ScrollWidth, Overlaps: l.Overlaps, Clipped: l.Clipped})
	}

	var eval struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
	}
	expr := `JSON.stringify(Array.from(document.querySelectorAll('.chart')).map(function (e) {
		var r = e.getBoundingClientRect(); var inner = e.querySelector('[id]');
		return {id: e.id || (inner ? inner.id : ''), x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height};
	}))`
	if err := s.call(ctx, sid, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &eval); err != nil {
		return nil, err
	}
	var boxes []struct {
		ID         string
		X, Y, W, H float64
	}
	if err := json.Unmarshal([]byte(eval.Result.Value), &boxes); err != nil {
		return nil, fmt.Errorf("browser: reading chart boxes: %w", err)
	}
	var charts []Chart
	for _, b := range boxes {
		c := Chart{ID: b.ID, W: int(b.W), H: int(b.H)}
		if b.W >= 1 && b.H >= 1 {
			// Scroll the chart into view and capture it there: capturing
			// beyond the viewport would resize the viewport, and the
			// charts, which follow their containers, with it.
			var y float64
			if err := s.eval(ctx, sid, fmt.Sprintf("window.scrollTo(0, %g); JSON.stringify(window.scrollY)", b.Y), &y); err != nil {
				return nil, err
			}
			time.Sleep(150 * time.Millisecond) // let the newly visible tiles paint
			img, err := s.screenshot(ctx, sid, map[string]any{"x": b.X, "y": b.Y, "width": b.W, "height": min(b.H, 1000), "scale": 1})
			if err != nil {
				return nil, err
			}
			c.NonBlank, c.Colors = inked(img)
			var buf bytes.Buffer
			if err := png.Encode(&buf, img); err == nil {
				c.PNG = buf.Bytes()
			}
		}
		charts = append(charts, c)
	}
	var top float64
	if err := s.eval(ctx, sid, "window.scrollTo(0, 0); JSON.stringify(window.scrollY)", &top); err != nil {
		return nil, err
	}
	time.Sleep(150 * time.Millisecond)
	var page struct {
		Data string `json:"data"`
	}
	if err := s.call(ctx, sid, "Page.captureScreenshot", map[string]any{"format": "png"}, &page); err != nil {
		return nil, err
	}
	time.Sleep(100 * time.Millisecond)
	log.mu.Lock()
	res := log.res
	log.mu.Unlock()
	res.Charts = charts
	res.Layouts = layouts
	res.Page, _ = base64.StdEncoding.DecodeString(page.Data)
	return &res, nil
}

// settledJS is true once every echarts chart on the page has been drawn at
// its container's current size (a page of many charts takes a while to
// follow a new viewport width); pages without echarts are always settled.
const settledJS = `JSON.stringify((function () {
	if (!window.echarts) { return true; }
	return Array.from(document.querySelectorAll('.chart .item')).every(function (el) {
		var c = echarts.getInstanceByDom(el);
		return !c || (Math.abs(c.getWidth() - el.clientWidth) < 1 && Math.abs(c.getHeight() - el.clientHeight) < 1);
	});
})())`

// waitSettled polls settledJS for up to 20 s.
func (s *session) waitSettled(ctx context.Context, sid string) error {
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(200 * time.Millisecond) {
		var ok bool
		if err := s.eval(ctx, sid, settledJS, &ok); err != nil {
			return err
		}
		if ok {
			time.Sleep(200 * time.Millisecond) // one more frame to paint
			return nil
		}
	}
	return errors.New("the charts did not follow the viewport's width within 20 s")
}

// setWidth emulates a viewport of width × 1000 CSS pixels.
func (s *session) setWidth(ctx context.Context, sid string, width int) error {
	return s.call(ctx, sid, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": false}, nil)
}

// eval evaluates a JavaScript expression that returns a JSON string and
// decodes it into out.
func (s *session) eval(ctx context.Context, sid, expr string, out any) error {
	var r struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := s.call(ctx, sid, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("script failed: %s", r.ExceptionDetails.Text)
	}
	return json.Unmarshal([]byte(r.Result.Value), out)
}

func (s *session) screenshot(ctx context.Context, sid string, clip map[string]any) (image.Image, error) {
	var shot struct {
		Data string `json:"data"`
	}
	if err := s.call(ctx, sid, "Page.captureScreenshot", map[string]any{
		"format": "png", "clip": clip}, &shot); err != nil {
		return nil, err
	}
	raw, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		return nil, err
	}
	return png.Decode(bytes.NewReader(raw))
}

// inked returns the fraction of pixels that differ from the image's
// background (its most common colour) by more than 24/255 in some channel,
// and the number of distinct colours at 4 bits per channel.
func inked(img image.Image) (float64, int) {
	b := img.Bounds()
	counts := map[uint32]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			counts[(r>>12)<<8|(g>>12)<<4|bl>>12]++
		}
	}
	var bg uint32
	best := -1
	for k, n := range counts {
		if n > best {
			bg, best = k, n
		}
	}
	br, bgc, bb := float64(bg>>8&0xf)*17, float64(bg>>4&0xf)*17, float64(bg&0xf)*17
	total, ink := 0, 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			total++
			if abs(float64(r>>8)-br) > 24 || abs(float64(g>>8)-bgc) > 24 || abs(float64(bl>>8)-bb) > 24 {
				ink++
			}
		}
	}
	if total == 0 {
		return 0, 0
	}
	return float64(ink) / float64(total), len(counts)
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
