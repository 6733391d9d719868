package report

import (
	"fmt"
	"math"
	"strings"

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

// panelSizePx is a panel's interactive size in CSS pixels.
func (f *Figure) panelSizePx(pn *Panel) (w, h int) {
	pw, ph := f.panelSize()
	w, h = int(pw*100), int(ph*100)
	if pn.Equal {
		h = max(h, w*9/10)
	}
	return w, h
}

// echartsSnippets renders every panel of f as a go-echarts chart and
// returns its HTML element and script.
func (f *Figure) echartsSnippets() ([]render.ChartSnippet, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var out []render.ChartSnippet
	for i := range f.Panels {
		pn := &f.Panels[i]
		w, h := f.panelSizePx(pn)
		var r render.Renderer
		if pn.Heatmap != nil {
			r = heatmapChart(pn, chartID(f.ID, i), w, h)
		} else {
			r = xyChart(pn, chartID(f.ID, i), w, h)
		}
		out = append(out, r.RenderSnippet())
	}
	return out, nil
}

// visitor injects the few options go-echarts has no field for; it runs
// after every built-in option is settled.
type visitor struct {
	charts.BaseConfigurationVisitor
	extra func(obj map[string]interface{})
}

func (v visitor) Visit(obj map[string]interface{}) {
	if v.extra != nil {
		v.extra(obj)
	}
}

func commonOptions(pn *Panel, id string, w, h int) []charts.GlobalOpts {
	return []charts.GlobalOpts{
		charts.WithInitializationOpts(opts.Initialization{
			ChartID: id, Width: fmt.Sprintf("%dpx", w), Height: fmt.Sprintf("%dpx", h),
			BackgroundColor: "#ffffff",
		}),
		charts.WithAnimation(false),
		charts.WithTitleOpts(opts.Title{Title: pn.Title, Left: "center",
			TitleStyle: &opts.TextStyle{FontSize: 15, FontWeight: "normal", Color: "#111"}}),
		charts.WithTooltipOpts(opts.Tooltip{Show: opts.Bool(true), Trigger: "item"}),
		charts.WithToolboxOpts(opts.Toolbox{Show: opts.Bool(true), Right: "2%", Top: "0", Feature: &opts.ToolBoxFeature{
			SaveAsImage: &opts.ToolBoxFeatureSaveAsImage{Show: opts.Bool(true), Type: "png", Title: "save PNG"},
			Restore:     &opts.ToolBoxFeatureRestore{Show: opts.Bool(true), Title: "reset zoom"},
		}}),
	}
}

func axisName(label string) string { return label }

// xyChart draws line, scatter, band and error-bar series on value (or log)
// axes.
func xyChart(pn *Panel, id string, w, h int) render.Renderer {
	c := charts.NewLine()
	gopts := commonOptions(pn, id, w, h)
	xt, yt := "value", "value"
	if pn.XLog {
		xt = "log"
	}
	if pn.YLog {
		yt = "log"
	}
	xa := opts.XAxis{Type: xt, Name: axisName(pn.XLabel), NameLocation: "middle", NameGap: 30, Scale: opts.Bool(true),
		SplitLine: &opts.SplitLine{Show: opts.Bool(true), LineStyle: &opts.LineStyle{Color: "#e6e6e6"}}}
	ya := opts.YAxis{Type: yt, Name: axisName(pn.YLabel), NameLocation: "middle", NameGap: 52, Scale: opts.Bool(true),
		Inverse:   opts.Bool(pn.YDown),
		SplitLine: &opts.SplitLine{Show: opts.Bool(true), LineStyle: &opts.LineStyle{Color: "#e6e6e6"}}}
	xr, yr := pn.X, pn.Y
	if pn.Equal {
		xr, yr = equalRanges(pn, w, h)
	}
	if xr.Set() {
		xa.Min, xa.Max = xr.Min, xr.Max
	}
	if yr.Set() {
		ya.Min, ya.Max = yr.Min, yr.Max
	}
	if pn.NoAxes {
		xa.Show, ya.Show = opts.Bool(false), opts.Bool(false)
	}
	gopts = append(gopts, charts.WithXAxisOpts(xa), charts.WithYAxisOpts(ya),
		charts.WithDataZoomOpts(opts.DataZoom{Type: "inside", XAxisIndex: 0, FilterMode: "none"},
			opts.DataZoom{Type: "inside", YAxisIndex: 0, FilterMode: "none"}))

	var names []string
	var series []charts.SingleSeries
	colorIdx := -1
	for i := range pn.Series {
		s := &pn.Series[i]
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
	right := "4%"
	if pn.Colors != nil {
		right = "95px"
	}
	top := 40
	if legendOn {
		top = 40 + 22*((len(names)+2)/3)
		gopts = append(gopts, charts.WithLegendOpts(opts.Legend{Show: opts.Bool(true), Type: "plain", Top: "26",
			Left: "center", Data: names, TextStyle: &opts.TextStyle{FontSize: 12}}))
	} else {
		gopts = append(gopts, charts.WithLegendOpts(opts.Legend{Show: opts.Bool(false)}))
	}
	gopts = append(gopts, charts.WithGridOpts(opts.Grid{Left: "78", Right: right, Top: fmt.Sprint(top), Bottom: "52"}))
	c.SetGlobalOptions(gopts...)
	c.MultiSeries = append(c.MultiSeries, series...)
	cs := pn.Colors
	c.Accept(visitor{extra: func(obj map[string]interface{}) {
		obj["textStyle"] = map[string]interface{}{"fontFamily": "Liberation Sans, Arial, sans-serif"}
		if cs != nil && colorIdx >= 0 {
			obj["visualMap"] = []map[string]interface{}{visualMap(cs, colorIdx, 2)}
		}
	}})
	return c
}

func visualMap(cs *ColorScale, seriesIndex, dim int) map[string]interface{} {
	return map[string]interface{}{
		"type": "continuous", "min": cs.Map.Min(), "max": cs.Map.Max(), "dimension": dim,
		"seriesIndex": seriesIndex, "calculable": true, "precision": 3,
		"inRange": map[string]interface{}{"color": cs.Map.Hex()},
		"text":    []string{"", cs.Label}, "right": 5, "top": "middle", "itemHeight": 180,
	}
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

// heatmapChart draws a Heatmap on category axes whose labels are the cell
// centres.
func heatmapChart(pn *Panel, id string, w, h int) render.Renderer {
	hm := pn.Heatmap
	c := charts.NewHeatMap()
	xs := make([]string, hm.Cols)
	for i := range xs {
		xs[i] = trimFloat(hm.X0 + (float64(i)+0.5)*hm.DX)
	}
	ys := make([]string, hm.Rows)
	for i := range ys {
		ys[i] = trimFloat(hm.Y0 + (float64(i)+0.5)*hm.DY)
	}
	gopts := commonOptions(pn, id, w, h)
	gopts = append(gopts,
		charts.WithXAxisOpts(opts.XAxis{Type: "category", Data: xs, Name: pn.XLabel, NameLocation: "middle", NameGap: 30,
			SplitArea: &opts.SplitArea{Show: opts.Bool(false)}}),
		charts.WithYAxisOpts(opts.YAxis{Type: "category", Data: ys, Name: pn.YLabel, NameLocation: "middle", NameGap: 52,
			Inverse: opts.Bool(pn.YDown), SplitArea: &opts.SplitArea{Show: opts.Bool(false)}}),
		charts.WithLegendOpts(opts.Legend{Show: opts.Bool(false)}),
		charts.WithGridOpts(opts.Grid{Left: "78", Right: "95", Top: "40", Bottom: "52"}),
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
	scale := hm.Scale
	c.Accept(visitor{extra: func(obj map[string]interface{}) {
		obj["textStyle"] = map[string]interface{}{"fontFamily": "Liberation Sans, Arial, sans-serif"}
		obj["visualMap"] = []map[string]interface{}{visualMap(&scale, 0, 2)}
	}})
	return c
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.4g", v)
	return s
}

// roundSig keeps 4 significant digits to keep the inlined data small.
func roundSig(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	e := math.Pow(10, 3-math.Floor(math.Log10(math.Abs(v))))
	return math.Round(v*e) / e
}
