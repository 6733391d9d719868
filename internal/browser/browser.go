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
// It drives the browser through chromedp (the Chrome DevTools protocol):
// a test-only dependency, imported by the tests that check pages (package
// report/reporttest and the explorer's tests), never by the probe binary.
// It needs a Chromium binary (Debian's `chromium`).
package browser

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
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

// DefaultTimeout bounds a Check whose context has no deadline.
const DefaultTimeout = 3 * time.Minute

// Check opens htmlPath in a fresh headless Chromium with an empty profile,
// waits for the load event and for charts to settle, and collects a Result
// within ctx's deadline (DefaultTimeout if it has none).
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
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(chromium), chromedp.UserDataDir(profile)}
	for _, f := range Flags {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if name == "remote-debugging-port" { // chromedp sets its own
			continue
		}
		if hasValue {
			opts = append(opts, chromedp.Flag(name, value))
		} else {
			opts = append(opts, chromedp.Flag(name, true))
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	tctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()
	log := &eventLog{urls: map[network.RequestID]string{}}
	if err := chromedp.Listen(tctx, log.handle); err != nil {
		return nil, fmt.Errorf("browser: starting %s: %w", chromium, err)
	}
	res, err := run(tctx, log, "file://"+abs)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("browser: the page was not checked in time (the context's deadline): %w", err)
	}
	return res, err
}

// eventLog accumulates what the page did from the target's events.
type eventLog struct {
	mu   sync.Mutex
	res  Result
	urls map[network.RequestID]string
}

func (l *eventLog) handle(ev any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		u := e.Request.URL
		l.urls[e.RequestID] = u
		l.res.Requests = append(l.res.Requests, u)
		if !local(u) {
			l.res.External = append(l.res.External, u)
		}
	case *network.EventLoadingFailed:
		l.res.Failed = append(l.res.Failed, l.urls[e.RequestID]+": "+e.ErrorText)
	case *runtime.EventConsoleAPICalled:
		if e.Type != runtime.ConsoleAPICalledTypeError && e.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		var parts []string
		for _, a := range e.Args {
			if a.Description != "" {
				parts = append(parts, a.Description)
				continue
			}
			var v any
			if json.Unmarshal(a.Value, &v) == nil {
				parts = append(parts, fmt.Sprint(v))
			} else {
				parts = append(parts, string(a.Value))
			}
		}
		l.res.Console = append(l.res.Console, "console."+string(e.Type)+": "+strings.Join(parts, " "))
	case *runtime.EventExceptionThrown:
		d := e.ExceptionDetails
		desc := ""
		if d.Exception != nil {
			desc = d.Exception.Description
		}
		l.res.Console = append(l.res.Console, "exception: "+d.Text+" "+desc)
	case *cdplog.EventEntryAdded:
		if en := e.Entry; en.Level == cdplog.EntryLevelError {
			l.res.Console = append(l.res.Console, "log("+string(en.Source)+"): "+en.Text+" "+en.URL)
		}
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

// run loads pageURL in the tab of ctx and measures it: the layout at each
// of LayoutWidths, then every chart's screenshot and the first screen at
// the last width.
func run(ctx context.Context, log *eventLog, pageURL string) (*Result, error) {
	_, err := chromedp.Call(ctx, network.Enable, network.EnableParams{})
	if err == nil {
		_, err = chromedp.Call(ctx, runtime.Enable, cdp.Empty{})
	}
	if err == nil {
		_, err = chromedp.Call(ctx, cdplog.Enable, cdp.Empty{})
	}
	if err == nil {
		err = setWidth(ctx, LayoutWidths[0])
	}
	if err == nil {
		err = chromedp.Do(ctx, chromedp.Navigate(pageURL))
	}
	if err != nil {
		return nil, fmt.Errorf("browser: loading %s: %w", pageURL, err)
	}
	// Charts draw synchronously at load (animation is off); give the
	// compositor a moment and let late console errors arrive.
	time.Sleep(700 * time.Millisecond)

	var layouts []Layout
	for i, w := range LayoutWidths {
		if i > 0 {
			// The charts follow their containers through a ResizeObserver.
			if err := setWidth(ctx, w); err != nil {
				return nil, err
			}
			time.Sleep(300 * time.Millisecond)
		}
		if err := waitSettled(ctx); err != nil {
			return nil, fmt.Errorf("browser: at %d px: %w", w, err)
		}
		var l struct {
			ScrollWidth int
			Overlaps    []string
			Clipped     []string
		}
		if err := eval(ctx, layoutJS, &l); err != nil {
			return nil, fmt.Errorf("browser: measuring the layout at %d px: %w", w, err)
		}
		layouts = append(layouts, Layout{Width: w, ScrollWidth: l.ScrollWidth, Overlaps: l.Overlaps, Clipped: l.Clipped})
	}

	var boxes []struct {
		ID         string
		X, Y, W, H float64
	}
	if err := eval(ctx, `JSON.stringify(Array.from(document.querySelectorAll('.chart')).map(function (e) {
		var r = e.getBoundingClientRect(); var inner = e.querySelector('[id]');
		return {id: e.id || (inner ? inner.id : ''), x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height};
	}))`, &boxes); err != nil {
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
			if err := eval(ctx, fmt.Sprintf("window.scrollTo(0, %g); JSON.stringify(window.scrollY)", b.Y), &y); err != nil {
				return nil, err
			}
			time.Sleep(150 * time.Millisecond) // let the newly visible tiles paint
			clip := &page.Viewport{X: b.X, Y: b.Y, Width: b.W, Height: min(b.H, 1000), Scale: 1}
			shot, err := chromedp.Call(ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng, Clip: clip})
			if err != nil {
				return nil, fmt.Errorf("browser: screenshot of chart %q: %w", b.ID, err)
			}
			raw := []byte(shot.Data)
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil {
				return nil, fmt.Errorf("browser: screenshot of chart %q: %w", b.ID, err)
			}
			c.NonBlank, c.Colors = inked(img)
			c.PNG = raw
		}
		charts = append(charts, c)
	}
	var top float64
	if err := eval(ctx, "window.scrollTo(0, 0); JSON.stringify(window.scrollY)", &top); err != nil {
		return nil, err
	}
	time.Sleep(150 * time.Millisecond)
	shot, err := chromedp.Call(ctx, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng})
	if err != nil {
		return nil, fmt.Errorf("browser: screenshot of the page: %w", err)
	}
	time.Sleep(100 * time.Millisecond) // late events
	log.mu.Lock()
	res := log.res
	log.mu.Unlock()
	res.Charts, res.Layouts, res.Page = charts, layouts, []byte(shot.Data)
	return &res, nil
}

// setWidth emulates a viewport of width × 1000 CSS pixels.
func setWidth(ctx context.Context, width int) error {
	_, err := chromedp.Call(ctx, emulation.SetDeviceMetricsOverride,
		emulation.SetDeviceMetricsOverrideParams{Width: int64(width), Height: 1000, DeviceScaleFactor: 1})
	return err
}

// eval evaluates a JavaScript expression that returns a JSON string and
// decodes it into out.
func eval(ctx context.Context, expr string, out any) error {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(s), out)
}

// waitSettled polls settledJS for up to 20 s.
func waitSettled(ctx context.Context) error {
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(200 * time.Millisecond) {
		var ok bool
		if err := eval(ctx, settledJS, &ok); err != nil {
			return err
		}
		if ok {
			time.Sleep(200 * time.Millisecond) // one more frame to paint
			return nil
		}
	}
	return errors.New("the charts did not follow the viewport's width within 20 s")
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
