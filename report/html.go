package report

import (
	"bytes"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Report is one HTML page of figures.
type Report struct {
	Title    string
	Subtitle string
	Intro    []string // paragraphs above the figures
	Manifest []Option // settings shared by every figure (tool version, inputs, …)
	Figures  []*Figure
}

// WriteOptions control Report.Write.
type WriteOptions struct {
	// HTML is the page's file name inside the output directory (default
	// index.html).
	HTML string
	// ECharts is the path of echarts.min.js to inline; empty means
	// LocateECharts. Ignored with Static.
	ECharts string
	// Static writes the figures as inline SVG (no JavaScript at all)
	// instead of interactive echarts charts.
	Static bool
	// DPI of the PNG files (default 150).
	DPI int
	// Now stamps the page (default time.Now); tests fix it.
	Now time.Time
}

// Written lists what Write produced.
type Written struct {
	HTML  string
	Files []string // PNG and SVG per figure, in figure order
}

// Write renders every figure to <dir>/<id>.png and <dir>/<id>.svg and the
// page to <dir>/<HTML>, creating dir. The page is self-contained: its only
// script is the inlined echarts library plus the charts' option objects,
// its styles are inline, and a Content-Security-Policy forbids every
// network request.
func (r *Report) Write(dir string, o WriteOptions) (*Written, error) {
	if o.HTML == "" {
		o.HTML = "index.html"
	}
	if o.DPI <= 0 {
		o.DPI = 150
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	seen := map[string]bool{}
	for _, f := range r.Figures {
		if err := f.Validate(); err != nil {
			return nil, err
		}
		if seen[f.ID] {
			return nil, fmt.Errorf("report: two figures with id %q", f.ID)
		}
		seen[f.ID] = true
	}
	var js string
	if !o.Static {
		path := o.ECharts
		if path == "" {
			var err error
			if path, err = LocateECharts(); err != nil {
				return nil, err
			}
		}
		var err error
		if js, err = loadECharts(path); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := &Written{HTML: filepath.Join(dir, o.HTML)}
	page := pageData{Title: r.Title, Subtitle: r.Subtitle, Intro: r.Intro, Manifest: r.Manifest,
		Generated: o.Now.UTC().Format("2006-01-02 15:04 UTC"), ECharts: template.JS(js), Static: o.Static}
	for _, f := range r.Figures {
		png, err := f.PNG(o.DPI)
		if err != nil {
			return nil, err
		}
		svg, err := f.SVG()
		if err != nil {
			return nil, err
		}
		for _, file := range []struct {
			name string
			data []byte
		}{{f.ID + ".png", png}, {f.ID + ".svg", svg}} {
			p := filepath.Join(dir, file.name)
			if err := os.WriteFile(p, file.data, 0o644); err != nil {
				return nil, err
			}
			out.Files = append(out.Files, p)
		}
		fd := figureData{Figure: f, PNG: f.ID + ".png", SVG: f.ID + ".svg", Columns: f.columns()}
		if o.Static {
			w, _ := f.canvasSize()
			fd.Charts = []template.HTML{template.HTML(fmt.Sprintf(`<div class="chart static" id="%s" style="max-width:%.0fpx">%s</div>`,
				chartID(f.ID, 0), w.Points()*4/3, inlineSVG(svg)))}
			fd.Columns = 1
		} else {
			snips, err := f.echartsSnippets()
			if err != nil {
				return nil, err
			}
			for i, s := range snips {
				w, _ := f.panelSizePx(&f.Panels[i])
				fd.Charts = append(fd.Charts, template.HTML(fmt.Sprintf(`<div class="chart" style="max-width:%dpx">%s</div>`, w, s.Element)))
				page.Scripts = append(page.Scripts, template.HTML(s.Script))
			}
		}
		page.Figures = append(page.Figures, fd)
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, page); err != nil {
		return nil, err
	}
	if err := os.WriteFile(out.HTML, buf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return out, nil
}

// inlineSVG strips the XML prolog so the document can sit inside HTML.
func inlineSVG(svg []byte) string {
	s := string(svg)
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	return s
}

type pageData struct {
	Title, Subtitle, Generated string
	Intro                      []string
	Manifest                   []Option
	Figures                    []figureData
	ECharts                    template.JS
	Scripts                    []template.HTML
	Static                     bool
}

type figureData struct {
	*Figure
	Charts   []template.HTML
	PNG, SVG string
	Columns  int
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="probe">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:">
<title>{{.Title}}</title>
<style>
body { font-family: "Liberation Sans", Arial, Helvetica, sans-serif; color: #111; margin: 0 auto; max-width: 1720px; padding: 16px 24px 64px; line-height: 1.45; }
h1 { font-size: 1.7em; margin-bottom: 0.1em; }
h2 { font-size: 1.3em; margin-top: 2.2em; border-top: 1px solid #ccc; padding-top: 0.8em; }
.sub, .stamp { color: #444; margin-top: 0; }
nav ol { columns: 2; padding-left: 1.4em; }
.panels { display: flex; flex-wrap: wrap; gap: 8px 16px; }
.chart { background: #fff; min-width: 0; flex: 1 1 max(360px, calc((100% - (var(--cols) - 1) * 16px) / var(--cols) - 1px)); }
.chart.static { flex-basis: 100%; }
.chart.static svg { width: 100%; height: auto; display: block; }
.caption, .notes, details { max-width: 980px; }
td, code, .caption { overflow-wrap: anywhere; }
td:first-child { overflow-wrap: normal; }
table { border-collapse: collapse; margin: 0.6em 0 1em; font-size: 0.92em; }
caption { text-align: left; font-weight: bold; padding-bottom: 0.3em; }
th, td { border: 1px solid #bbb; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.src { color: #444; }
.notes li { margin-bottom: 0.3em; }
.files { font-size: 0.9em; color: #444; }
details summary { cursor: pointer; font-weight: bold; }
</style>
{{if not .Static}}<script>{{.ECharts}}</script>{{end}}
</head>
<body>
<header>
<h1>{{.Title}}</h1>
{{if .Subtitle}}<p class="sub">{{.Subtitle}}</p>{{end}}
<p class="stamp">Generated {{.Generated}} by <code>probe</code>{{if .Static}} (static SVG mode){{else}} (interactive: drag to zoom, double-click a legend entry to isolate it){{end}}.</p>
</header>
{{range .Intro}}<p>{{.}}</p>
{{end}}
{{if .Manifest}}<table class="manifest"><caption>Manifest</caption><tr><th>setting</th><th>value</th><th>source</th></tr>
{{range .Manifest}}<tr><td>{{.Name}}</td><td>{{.Value}}</td><td class="src">{{.Source}}</td></tr>
{{end}}</table>{{end}}
<nav><ol>{{range .Figures}}<li><a href="#fig-{{.ID}}">{{.Title}}</a></li>{{end}}</ol></nav>
{{range .Figures}}
<section class="figure" id="fig-{{.ID}}">
<h2>{{.Title}}</h2>
<div class="panels" style="--cols: {{.Columns}}">
{{range .Charts}}{{.}}
{{end}}</div>
<p class="caption">{{.Caption}}</p>
{{range .Tables}}<table><caption>{{.Caption}}</caption><tr>{{range .Header}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}
{{if .Options}}<details open><summary>Options and parameters</summary>
<table><tr><th>option</th><th>value</th><th>source</th></tr>
{{range .Options}}<tr><td>{{.Name}}</td><td>{{.Value}}</td><td class="src">{{.Source}}</td></tr>
{{end}}</table></details>{{end}}
{{if .Notes}}<ul class="notes">{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
<p class="files">Static versions: <a href="{{.PNG}}">{{.PNG}}</a> · <a href="{{.SVG}}">{{.SVG}}</a></p>
</section>
{{end}}
{{range .Scripts}}{{.}}
{{end}}{{if not .Static}}<script>
// Every chart follows its container's size (the panels wrap to the page).
(function () {
	var ro = new ResizeObserver(function (entries) {
		entries.forEach(function (e) { var c = echarts.getInstanceByDom(e.target); if (c) { c.resize(); } });
	});
	document.querySelectorAll('.chart .item').forEach(function (el) { ro.observe(el); });
})();
</script>{{end}}
</body>
</html>
`))
