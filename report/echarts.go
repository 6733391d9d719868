package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-echarts/go-echarts/v2/charts"
	"github.com/go-echarts/go-echarts/v2/opts"
	"github.com/go-echarts/go-echarts/v2/render"
	"github.com/go-echarts/go-echarts/v2/types"
)

// maxInteractivePoints caps the points of one interactive line series;
// longer series are thinned by a constant stride (the static PNG/SVG keep
// every point).
const maxInteractivePoints = 4000

// chartID turns a figure id and panel index into an id that is valid both
// as an HTML id and inside the JavaScript identifiers go-echarts derives
// from it.
func chartID(figID string, panel int) string {
	return strings.NewReplacer("-", "_").Replace(figID) + fmt.Sprintf("_p%d", panel)
}

// panelSizePx is a panel's design size in CSS pixels: its width and
// height at the widest, and its aspect ratio at every width (the page's
// grid shrinks the width to fit and the height follows).
func (f *Figure) panelSizePx(pn *Panel) (w, h int) {
	pw, ph := f.panelSize()
	w, h = int(pw*100), int(ph*100)
	if pn.Equal {
		h = max(h, w*9/10)
	}
	return w, h
}

// chartSnippet is one panel's HTML element and the script that draws it.
type chartSnippet struct {
	Element, Script string
}

// echartsSnippets renders every panel of f as a go-echarts chart drawn by
// echarts' SVG renderer (so that the browser check can measure every text
// box) into a container as wide as its grid cell, with the panel's aspect
// ratio.
func (f *Figure) echartsSnippets() ([]chartSnippet, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var out []chartSnippet
	for i := range f.Panels {
		pn := &f.Panels[i]
		w, h := f.panelSizePx(pn)
		id := chartID(f.ID, i)
		var r render.Renderer
		if pn.Heatmap != nil {
			r = heatmapChart(pn, id, w, h)
		} else {
			r = xyChart(pn, id, w, h)
		}
		out = append(out, chartSnippet{
			Element: fmt.Sprintf(`<div class="item" id="%s" style="width:100%%;aspect-ratio:%d / %d"></div>`, id, w, h),
			Script:  safeScript(r.RenderSnippet().Script),
		})
	}
	return out, nil
}

// safeScript keeps a <script> element's body from ending the element
// early: text in the option data (a token "</script>", "<!--") has its
// "</" and "<!" written as "<\/" and "<\!", which mean the same inside a
// JavaScript string (go-echarts writes the options as JSON without HTML
// escaping).
func safeScript(s string) string {
	open := strings.Index(s, ">") + 1
	end := strings.LastIndex(s, "</script>")
	if open <= 0 || end < open {
		return s
	}
	body := strings.NewReplacer("</", `<\/`, "<!", `<\!`).Replace(s[open:end])
	return s[:open] + body + s[end:]
}

// visitor injects the options go-echarts v2.6.7 has no place for; it runs
// after every built-in option is settled. Those are: the chart-wide
// textStyle (typed, reportFont), the axes (typed, axisOption: v2.6.7's
// charts hold XAxis/YAxis values without the keys axisOption adds), and,
// as raw maps, the colour bar's visualMap (v2.6.7's VisualMap has float32
// min/max, which would round the scale, and lacks seriesIndex, textGap,
// itemWidth and itemHeight) and its title, a graphic element (v2.6.7 has
// no graphic option).
type visitor struct {
	charts.BaseConfigurationVisitor
	extra func(obj map[string]interface{})
}

// reportFont is the chart-wide text style (echarts' top-level textStyle,
// which v2.6.7's charts have no option for).
var reportFont = opts.TextStyle{FontFamily: "Liberation Sans, Arial, sans-serif"}

func (v visitor) Visit(obj map[string]interface{}) {
	if v.extra != nil {
		v.extra(obj)
	}
}

func commonOptions(pn *Panel, id string, w, h int) []charts.GlobalOpts {
	return []charts.GlobalOpts{
		charts.WithInitializationOpts(opts.Initialization{
			ChartID: id, Width: fmt.Sprintf("%dpx", w), Height: fmt.Sprintf("%dpx", h),
			BackgroundColor: "#ffffff", Renderer: "svg",
		}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: pn.Title, Left: "center",
			TitleStyle: &opts.TextStyle{FontSize: 15, FontWeight: "normal", Color: "#111"}}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item"}),
		charts.WithToolboxOpts(opts.Toolbox{Show: opts.Bool(true), Right: "4", Bottom: "2", Feature: &opts.ToolBoxFeature{
			SaveAsImage: &opts.ToolBoxFeatureSaveAsImage{Show: opts.Bool(true), Type: "svg", Title: "save SVG"}, // the SVG renderer saves SVG
			Restore:     &opts.ToolBoxFeatureRestore{Show: opts.Bool(true), Title: "reset zoom"},
		}}),
	}
}

// textWidthPx estimates the width of a label in CSS pixels at size px
// (proportional sans-serif: about 0.6 em per character).
func textWidthPx(s string, size float64) int {
	return int(math.Ceil(0.6 * size * float64(utf8.RuneCountInString(s))))
}

// axisSpec is one value axis as drawn: its range (in log10 units on a
// log axis, whose data are drawn as log10 on a linear echarts axis),
// whether it is logarithmic, its labelled ticks and their labels.
type axisSpec struct {
	lo, hi float64
	log    bool
	step   float64 // between labelled ticks (decades on a log axis)
	labels []string
}

// newAxis settles a value axis over the data extent [lo, hi]: a fixed range
// is kept as given, an automatic one is widened to NiceRange (linear) or to
// whole decades (log), so that the ends carry round labels. A log axis
// labels every decade, or every second, third… when there are more than 8.
//
// echarts' own log axis is not used: it rounds tick values to 10 decimals,
// so a range below 1e-10 gets ticks at 0 and draws at -Infinity.
func newAxis(lo, hi float64, fixed, log bool) axisSpec {
	a := axisSpec{lo: lo, hi: hi, log: log}
	if log {
		a.lo, a.hi = math.Log10(lo), math.Log10(hi)
		if !fixed {
			a.lo, a.hi = math.Floor(a.lo+1e-9), math.Ceil(a.hi-1e-9)
		}
		if a.hi <= a.lo {
			a.hi = a.lo + 1
		}
		a.step = math.Ceil((a.hi - a.lo) / 8)
		for k := math.Ceil(a.lo/a.step-1e-9) * a.step; k <= a.hi+1e-9; k += a.step {
			a.labels = append(a.labels, decade(int(k)))
		}
		return a
	}
	if !fixed {
		a.lo, a.hi = NiceRange(lo, hi, targetTicks)
	}
	ticks, step, dec := NiceTicks(a.lo, a.hi, targetTicks)
	a.step = step
	for _, v := range ticks {
		a.labels = append(a.labels, TickLabel(v, step, dec))
	}
	return a
}

// maxLabelPx is the width of the widest tick label at 12 px.
func (a axisSpec) maxLabelPx() int {
	w := 0
	for _, l := range a.labels {
		w = max(w, textWidthPx(l, 12))
	}
	return w
}

// option is the echarts axis option: the range, ticks at the multiples of
// the nice step and a formatter that prints each multiple of the step with
// TickLabel's precision (10^k as decade does on a log axis) and leaves the
// ends blank when they are not multiples (a fixed range need not end on
// one).
func (a axisSpec) option(name string, nameGap int, vertical, inverse, show bool) axisOption {
	o := axisOption{
		XAxis: opts.XAxis{
			Type: "value", Name: name, NameLocation: "middle", NameGap: nameGap,
			Min: a.lo, Max: a.hi, Inverse: opts.Bool(inverse), Show: opts.Bool(show),
			SplitLine: &opts.SplitLine{Show: opts.Bool(true), LineStyle: &opts.LineStyle{Color: "#e6e6e6"}},
			AxisLine:  &opts.AxisLine{OnZero: opts.Bool(false)}, // at the edge of the plot, as the labels are
		},
		NameTextStyle: &opts.TextStyle{FontSize: 13},
	}
	if a.step == 0 {
		return o
	}
	// minInterval = maxInterval = step makes echarts place its ticks at
	// the multiples of step inside the range (a fixed "interval" would
	// count from the range's start, which need not be a multiple).
	o.MinInterval, o.MaxInterval = a.step, a.step
	_, _, dec := NiceTicks(a.lo, a.hi, targetTicks)
	format := fmt.Sprintf("(k * %v).toFixed(%d)", a.step, dec)
	switch {
	case a.log:
		format = fmt.Sprintf("(k * %v >= -3 && k * %v <= 4) ? Math.pow(10, k * %v).toFixed(Math.max(0, -k * %v)) : '1e' + (k * %v)",
			a.step, a.step, a.step, a.step, a.step)
	case a.step < 1e-4 || a.step > 1e6:
		format = fmt.Sprintf("String(+(k * %v).toPrecision(3))", a.step)
	}
	zero := "'0'"
	if a.log {
		zero = "'1'"
	}
	label := &axisLabel{AxisLabel: opts.AxisLabel{FontSize: 12, HideOverlap: opts.Bool(true), Formatter: opts.FuncOpts(fmt.Sprintf(`function (v) {
		var k = Math.round(v / %v);
		if (Math.abs(v - k * %v) > %v) { return ''; }
		if (k === 0) { return %s; }
		return %s;
	}`, a.step, a.step, a.step*1e-6, zero, format))}}
	// The labels at both ends of an axis stay inside its extent, so the
	// first x label never runs into the lowest y label at the corner.
	if vertical {
		lo, hi := "bottom", "top"
		if inverse {
			lo, hi = hi, lo
		}
		label.VerticalAlignMinLabel, label.VerticalAlignMaxLabel = lo, hi
	} else {
		label.AlignMinLabel, label.AlignMaxLabel = "left", "right"
	}
	o.AxisLabel = label
	return o
}

// axisOption is an echarts cartesian axis (x or y: echarts gives both the
// same keys) in go-echarts v2.6.7's typed XAxis, whose fields are a superset
// of its YAxis (which lacks axisTick), plus what v2.6.7 lacks.
type axisOption struct {
	opts.XAxis
	// NameTextStyle: the axis name's font (echarts nameTextStyle); not in v2.6.7.
	NameTextStyle *opts.TextStyle `json:"nameTextStyle,omitempty"`
	// AxisLabel shadows XAxis.AxisLabel to add the keys v2.6.7 lacks.
	AxisLabel *axisLabel `json:"axisLabel,omitempty"`
}

// axisLabel is v2.6.7's AxisLabel plus the keys it lacks.
type axisLabel struct {
	opts.AxisLabel
	// VerticalAlignMinLabel, VerticalAlignMaxLabel: the vertical alignment
	// of a y axis's end labels (echarts ≥ 5.5); not in v2.6.7.
	VerticalAlignMinLabel string `json:"verticalAlignMinLabel,omitempty"`
	VerticalAlignMaxLabel string `json:"verticalAlignMaxLabel,omitempty"`
	// IntervalAll: echarts' axisLabel.interval as the number 0 (every
	// label); v2.6.7's Interval is a string, which echarts reads as "auto".
	IntervalAll *int `json:"interval,omitempty"`
}

// logSeries returns s with its coordinates on log axes replaced by their
// log10 (the axes of xyChart are linear in log10 units).
func logSeries(s Series, xlog, ylog bool) Series {
	lg := func(v []float64) []float64 {
		if v == nil {
			return nil
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = math.Log10(x) // NaN stays NaN (a gap)
		}
		return out
	}
	if xlog {
		s.X = lg(s.X)
	}
	if ylog {
		s.Y, s.Lo, s.Hi = lg(s.Y), lg(s.Lo), lg(s.Hi)
	}
	return s
}

// dataExtent is the extent of every finite x and y (Lo and Hi included)
// of a panel's series.
func dataExtent(pn *Panel) (x, y Range) {
	x = Range{math.Inf(1), math.Inf(-1)}
	y = x
	for _, s := range pn.Series {
		for i := range s.X {
			x.Min, x.Max = math.Min(x.Min, s.X[i]), math.Max(x.Max, s.X[i])
			for _, col := range [][]float64{s.Y, s.Lo, s.Hi} {
				if i < len(col) && !math.IsNaN(col[i]) && !math.IsInf(col[i], 0) {
					y.Min, y.Max = math.Min(y.Min, col[i]), math.Max(y.Max, col[i])
				}
			}
		}
	}
	if math.IsInf(y.Min, 0) {
		y = Range{0, 1}
	}
	return x, y
}

// xyChart draws line, scatter, band and error-bar series on value (or log)
// axes whose ticks are NiceTicks.
func xyChart(pn *Panel, id string, w, h int) render.Renderer {
	c := charts.NewLine()
	gopts := commonOptions(pn, id, w, h)
	xr, yr := dataExtent(pn)
	xFixed, yFixed := pn.X.Set(), pn.Y.Set()
	if xFixed {
		xr = pn.X
	}
	if yFixed {
		yr = pn.Y
	}
	if pn.Equal {
		xr, yr = equalRanges(pn, w, h)
		xFixed, yFixed = true, true
	}
	xa, ya := newAxis(xr.Min, xr.Max, xFixed, pn.XLog), newAxis(yr.Min, yr.Max, yFixed, pn.YLog)
	yGap := ya.maxLabelPx() + 14
	left := yGap + 24
	if pn.NoAxes {
		left = 20
	}
	gopts = append(gopts, charts.WithDataZoomOpts(opts.DataZoom{Type: "inside", XAxisIndex: 0, FilterMode: "none"},
		opts.DataZoom{Type: "inside", YAxisIndex: 0, FilterMode: "none"}))

	var names []string
	var series []charts.SingleSeries
	colorIdx := -1
	for i := range pn.Series {
		ls := logSeries(pn.Series[i], pn.XLog, pn.YLog)
		s := &ls
		if s.Name != "" {
			names = append(names, s.Name)
		}
		ss := echartsSeries(s, i)
		if s.Values != nil {
			colorIdx = len(series)
		}
		series = append(series, ss...)
	}
	legendOn := len(names) > 0 && pn.Legend != LegendNone
	top := 40
	if legendOn {
		rows := legendRows(names, w-40)
		legend := opts.Legend{Show: opts.Bool(true), Type: "plain", Top: "26", Left: "center", Data: names,
			TextStyle: &opts.TextStyle{FontSize: 12}}
		if rows > 3 {
			legend.Type, rows = "scroll", 1
		}
		top = 40 + 22*rows
		gopts = append(gopts, charts.WithLegendOpts(legend))
	} else {
		gopts = append(gopts, charts.WithLegendOpts(opts.Legend{Show: opts.Bool(false)}))
	}
	right := 24
	var vm, vmTitle map[string]interface{}
	if pn.Colors != nil && colorIdx >= 0 {
		var bw int
		vm, vmTitle, bw = colorBar(pn.Colors, colorIdx, 2, top)
		right = bw + 16
	}
	gopts = append(gopts, charts.WithGridOpts(opts.Grid{Left: fmt.Sprint(left), Right: fmt.Sprint(right), Top: fmt.Sprint(top), Bottom: "52"}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item", Formatter: xyTooltip(pn.XLog, pn.YLog)}))
	c.SetGlobalOptions(gopts...)
	c.MultiSeries = append(c.MultiSeries, series...)
	c.Accept(visitor{extra: func(obj map[string]interface{}) {
		obj["textStyle"] = reportFont
		obj["xAxis"] = []axisOption{xa.option(pn.XLabel, 30, false, false, !pn.NoAxes)}
		obj["yAxis"] = []axisOption{ya.option(pn.YLabel, yGap, true, pn.YDown, !pn.NoAxes)}
		if vm != nil {
			obj["visualMap"] = []map[string]interface{}{vm}
			obj["graphic"] = []map[string]interface{}{vmTitle}
		}
	}})
	return c
}

// xyTooltip shows a point's series and its coordinates to 4 significant
// digits, undoing the log10 of log axes.
func xyTooltip(xlog, ylog bool) types.FuncStr {
	return opts.FuncOpts(fmt.Sprintf(`function (p) {
		var v = p.value, f = function (z, lg) { return String(+(lg ? Math.pow(10, z) : z).toPrecision(4)); };
		if (!v || v.length < 2) { return p.seriesName; }
		return (p.seriesName ? p.seriesName + ': ' : '') + f(v[0], %t) + ', ' + f(v[1], %t) + (v.length > 2 ? ' (' + f(v[2], false) + ')' : '');
	}`, xlog, ylog))
}

// legendRows estimates how many rows a centred legend of names takes in
// width px (echarts wraps a plain legend).
func legendRows(names []string, width int) int {
	rows, x := 1, 0
	for _, n := range names {
		iw := textWidthPx(n, 12) + 35
		if x > 0 && x+iw > width {
			rows, x = rows+1, 0
		}
		x += iw
	}
	return rows
}

// colorBar is the colour bar of cs at the right edge of a chart whose
// grid starts top px below the chart's top: the label above a vertical
// ramp, the maximum and minimum at its ends (whole numbers for an integer
// scale, else TickLabel's precision). It returns the visualMap option, the
// label as a graphic text element, and the width the bar and its texts take
// from the right edge.
func colorBar(cs *ColorScale, seriesIndex, dim, top int) (vm, title map[string]interface{}, width int) {
	lo, hi := cs.Map.Min(), cs.Map.Max()
	lab := func(v float64) string {
		if cs.Integer {
			return fmt.Sprint(int(math.Round(v)))
		}
		_, step, dec := NiceTicks(lo, hi, targetTicks)
		if step == 0 {
			return fmt.Sprintf("%.3g", v)
		}
		return TickLabel(v, step, dec)
	}
	const barW, barH = 16, 150
	tw := max(textWidthPx(cs.Label, 12), textWidthPx(lab(hi), 12), textWidthPx(lab(lo), 12))
	// echarts centres the end texts of a vertical bar on the bar; the
	// label is right-aligned at the same right margin as the widest text.
	right := max(6, tw/2-barW/2+6)
	vm = map[string]interface{}{
		"type": "continuous", "min": lo, "max": hi, "dimension": dim,
		"seriesIndex": seriesIndex, "calculable": false,
		"inRange": map[string]interface{}{"color": cs.Map.Hex()},
		"text":    []string{lab(hi), lab(lo)}, "textGap": 6, "textStyle": map[string]interface{}{"fontSize": 12},
		"right": right, "top": top + 40, "itemHeight": barH, "itemWidth": barW,
	}
	title = map[string]interface{}{
		"type": "text", "right": 6, "top": top + 6,
		"style": map[string]interface{}{"text": cs.Label, "fontSize": 12, "fill": "#333"},
	}
	return vm, title, right + barW/2 + tw/2
}

// equalRanges gives both axes the same units per pixel for a w×h chart
// (approximately: the grid margins are fixed).
func equalRanges(pn *Panel, w, h int) (Range, Range) {
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range pn.Series {
		for i := range s.X {
			xmin, xmax = math.Min(xmin, s.X[i]), math.Max(xmax, s.X[i])
			if !math.IsNaN(s.Y[i]) {
				ymin, ymax = math.Min(ymin, s.Y[i]), math.Max(ymax, s.Y[i])
			}
		}
	}
	if pn.X.Set() {
		xmin, xmax = pn.X.Min, pn.X.Max
	}
	if pn.Y.Set() {
		ymin, ymax = pn.Y.Min, pn.Y.Max
	}
	gw, gh := float64(w-78-40), float64(h-100)
	sx, sy := xmax-xmin, ymax-ymin
	if sx/gw > sy/gh {
		ny := sx / gw * gh
		m := (ymin + ymax) / 2
		ymin, ymax = m-ny/2, m+ny/2
	} else {
		nx := sy / gh * gw
		m := (xmin + xmax) / 2
		xmin, xmax = m-nx/2, m+nx/2
	}
	return Range{xmin, xmax}, Range{ymin, ymax}
}

// bandRenderer is the renderItem of a Band's custom series.
func bandRenderer(fill string) types.FuncStr {
	return opts.FuncOpts(`function (params, api) {
		if (params.dataIndexInside !== 0) { return null; }
		var pts = [];
		for (var i = 0; i < params.dataInsideLength; i++) {
			pts.push(api.coord([api.value(0, i), api.value(1, i)]));
		}
		return {type: 'polygon', shape: {points: pts}, style: {fill: '` + fill + `'}, silent: true};
	}`)
}

func pair(x, y float64) []interface{} {
	if math.IsNaN(y) {
		return []interface{}{x, "-"}
	}
	return []interface{}{x, y}
}

// echartsSeries converts one Series into echarts series (a band becomes a
// stacked pair: an invisible lower bound and the filled height above it).
func echartsSeries(s *Series, idx int) []charts.SingleSeries {
	col := RGBA(s.Color, s.alpha())
	dash := "solid"
	if s.Dash {
		dash = "dashed"
	}
	symbol := map[Shape]string{Circle: "circle", Square: "rect", Triangle: "triangle", Diamond: "diamond", Cross: "pin"}[s.Shape]
	if s.Hollow && s.Shape == Circle {
		symbol = "emptyCircle"
	}
	size := 2 * s.radius() * 1.2
	switch s.Kind {
	case Line:
		stride := 1
		if len(s.X) > maxInteractivePoints {
			stride = (len(s.X) + maxInteractivePoints - 1) / maxInteractivePoints
		}
		var data []interface{}
		for i := 0; i < len(s.X); i += stride {
			data = append(data, pair(s.X[i], s.Y[i]))
		}
		if last := len(s.X) - 1; last%stride != 0 {
			data = append(data, pair(s.X[last], s.Y[last]))
		}
		return []charts.SingleSeries{{Name: s.Name, Type: "line", Data: data, ShowSymbol: opts.Bool(false),
			Symbol: "none", ConnectNulls: opts.Bool(false),
			LineStyle: &opts.LineStyle{Color: col, Width: float32(s.width() * 1.3), Type: dash},
			ItemStyle: &opts.ItemStyle{Color: col}}}
	case Scatter:
		var data []interface{}
		for i := range s.X {
			if s.Values != nil {
				data = append(data, []interface{}{s.X[i], s.Y[i], s.Values[i]})
			} else {
				data = append(data, pair(s.X[i], s.Y[i]))
			}
		}
		return []charts.SingleSeries{{Name: s.Name, Type: "scatter", Data: data, Symbol: symbol, SymbolSize: size,
			ItemStyle: &opts.ItemStyle{Color: col}}}
	case Band:
		// A custom series whose data are the polygon's vertices (lower
		// bound forwards, upper bound backwards); the first item draws the
		// whole polygon, so the axes' extents and zoom see every vertex.
		var data []interface{}
		for i := range s.X {
			data = append(data, pair(s.X[i], s.Lo[i]))
		}
		for i := len(s.X) - 1; i >= 0; i-- {
			data = append(data, pair(s.X[i], s.Hi[i]))
		}
		return []charts.SingleSeries{{Name: s.Name, Type: "custom", Data: data, RenderItem: bandRenderer(col),
			ItemStyle: &opts.ItemStyle{Color: col}}}
	case ErrorBars:
		// Vertical segments (x, lo)–(x, hi) joined by gaps, then the markers.
		var bars, pts []interface{}
		for i := range s.X {
			bars = append(bars, pair(s.X[i], s.Lo[i]), pair(s.X[i], s.Hi[i]), pair(s.X[i], math.NaN()))
			pts = append(pts, pair(s.X[i], s.Y[i]))
		}
		c := RGBA(s.Color, 1)
		return []charts.SingleSeries{
			{Type: "line", Data: bars, ShowSymbol: opts.Bool(false), Symbol: "none", ConnectNulls: opts.Bool(false),
				LineStyle: &opts.LineStyle{Color: c, Width: 1.5}},
			{Name: s.Name, Type: "scatter", Data: pts, Symbol: symbol, SymbolSize: size, ItemStyle: &opts.ItemStyle{Color: c}},
		}
	}
	return nil
}

// cellLabels labels the n cells [x0 + c·dx, x0 + (c+1)·dx) of a heatmap
// axis: the cell holding a multiple m of the axis' nice step is labelled m,
// every other cell "" (so labels sit at round positions, never at block
// centres); tokens, when there is one per cell and at most maxTokenLabels
// cells, label every cell instead. tips describe each cell for the tooltip:
// its position or range of positions, and its token.
func cellLabels(n int, x0, dx float64, tokens []string) (labels, tips []string) {
	labels, tips = make([]string, n), make([]string, n)
	ticks, step, dec := NiceTicks(x0, x0+float64(n)*dx, targetTicks+1)
	if dx >= 1 {
		step = math.Max(1, math.Round(step))
		dec = 0
		ticks = ticks[:0]
		for v := math.Ceil(x0); v < x0+float64(n)*dx; v += step {
			if math.Mod(v, step) == 0 {
				ticks = append(ticks, v)
			}
		}
	}
	for _, v := range ticks {
		c := int(math.Floor((v - x0) / dx))
		if c >= 0 && c < n {
			labels[c] = TickLabel(v, step, dec)
		}
	}
	whole := math.Abs(dx-math.Round(dx)) < 1e-9 && math.Abs(x0-math.Round(x0)) < 1e-9
	for c := range tips {
		a, b := x0+float64(c)*dx, x0+float64(c+1)*dx
		switch {
		case dx == 1 && whole:
			tips[c] = fmt.Sprint(int(a))
		case dx == 1:
			tips[c] = fmt.Sprint(int(math.Round(a + 0.5)))
		default:
			tips[c] = fmt.Sprintf("%d–%d", int(math.Ceil(a)), int(math.Ceil(b))-1)
		}
		if len(tokens) == n {
			tips[c] += " " + strconv.Quote(tokens[c])
		}
	}
	if len(tokens) == n && n <= maxTokenLabels && dx == 1 {
		for c, t := range tokens {
			labels[c] = shortToken(t)
		}
	}
	return labels, tips
}

// maxTokenLabels is the longest sequence whose heatmap axes are labelled
// with every token (longer ones show tokens on hover only).
const maxTokenLabels = 40

// shortToken makes a token printable on an axis: whitespace shown as ␣ and
// ↵, at most 10 characters.
func shortToken(t string) string {
	t = strings.NewReplacer(" ", "␣", "\n", "↵", "\t", "⇥").Replace(t)
	if r := []rune(t); len(r) > 10 {
		t = string(r[:9]) + "…"
	}
	return t
}

// jsStrings writes strs as a JavaScript array literal of strings that
// survive go-echarts' JSON quoting of function source (which forbids '"'
// and '\'): each string is percent-encoded and decoded in the page.
func jsStrings(strs []string) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, s := range strs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\'')
		for _, c := range []byte(s) {
			if c < 0x80 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		b.WriteByte('\'')
	}
	b.WriteByte(']')
	return b.String()
}

// heatmapChart draws a Heatmap on category axes, one category per cell,
// labelled at round positions (cellLabels) or by token; the tooltip names
// both cells' positions (and tokens) and the value.
func heatmapChart(pn *Panel, id string, w, h int) render.Renderer {
	hm := pn.Heatmap
	c := charts.NewHeatMap()
	xs, xtips := cellLabels(hm.Cols, hm.X0, hm.DX, hm.XTokens)
	ys, ytips := cellLabels(hm.Rows, hm.Y0, hm.DY, hm.YTokens)
	var yw int
	for _, l := range ys {
		yw = max(yw, textWidthPx(l, 12))
	}
	rotate := 0
	xh := 0
	if len(hm.XTokens) == hm.Cols && hm.Cols <= maxTokenLabels && hm.DX == 1 {
		rotate = 90
		for _, l := range xs {
			xh = max(xh, textWidthPx(l, 12))
		}
	}
	vm, vmTitle, bw := colorBar(&hm.Scale, 0, 2, 40)
	// Category axes keep every cell's label but draw only the non-empty
	// ones, so labels never crowd: interval 0 with blank categories.
	every := 0
	axis := func(name string, data []string, gap int, inverse bool, rot int) axisOption {
		return axisOption{
			XAxis: opts.XAxis{Type: "category", Data: data, Name: name, NameLocation: "middle", NameGap: gap,
				Inverse: opts.Bool(inverse), AxisTick: &opts.AxisTick{Show: opts.Bool(false)}, SplitArea: &opts.SplitArea{Show: opts.Bool(false)}},
			NameTextStyle: &opts.TextStyle{FontSize: 13},
			AxisLabel:     &axisLabel{AxisLabel: opts.AxisLabel{FontSize: 12, Rotate: float64(rot), HideOverlap: opts.Bool(true)}, IntervalAll: &every},
		}
	}
	xGap := max(30, xh+14)
	gopts := commonOptions(pn, id, w, h)
	gopts = append(gopts,
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(false)}),
		charts.WithGridOpts(opts.Grid{Left: fmt.Sprint(yw + 38), Right: fmt.Sprint(bw + 16), Top: "40", Bottom: fmt.Sprint(xGap + 22)}),
	)
	c.SetGlobalOptions(gopts...)
	data := make([]opts.HeatMapData, 0, hm.Rows*hm.Cols)
	for r := 0; r < hm.Rows; r++ {
		for col := 0; col < hm.Cols; col++ {
			v := hm.Z[r*hm.Cols+col]
			data = append(data, opts.HeatMapData{Value: [3]interface{}{col, r, roundSig(v)}})
		}
	}
	c.AddSeries(pn.Title, data)
	tip := opts.FuncOpts(fmt.Sprintf(`function (p) {
		var X = %s, Y = %s, N = %s, d = decodeURIComponent;
		return d(N[1]) + ' ' + d(Y[p.value[1]]) + ', ' + d(N[0]) + ' ' + d(X[p.value[0]]) + ': ' + p.value[2];
	}`, jsStrings(xtips), jsStrings(ytips), jsStrings([]string{pn.XLabel, pn.YLabel})))
	c.SetGlobalOptions(charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item", Formatter: tip}))
	c.Accept(visitor{extra: func(obj map[string]interface{}) {
		obj["textStyle"] = reportFont
		obj["xAxis"] = []axisOption{axis(pn.XLabel, xs, xGap, false, rotate)}
		obj["yAxis"] = []axisOption{axis(pn.YLabel, ys, yw+14, pn.YDown, 0)}
		obj["visualMap"] = []map[string]interface{}{vm}
		obj["graphic"] = []map[string]interface{}{vmTitle}
	}})
	return c
}

// roundSig keeps 4 significant digits to keep the inlined data small.
func roundSig(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	e := math.Pow(10, 3-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*e) / e
}
