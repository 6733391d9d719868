package filters

import (
	"fmt"
	"sort"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// Retrieval returns the report of a probe retrieval run: Wu et al.'s
// retrieval score and the mean attention on the copy source per (layer,
// head), with the heads that score highest.
func Retrieval(man *results.RetrievalManifest, rows []results.RetrievalHeadRow) (*report.Report, error) {
	if len(rows) == 0 {
		return nil, fmt.Errorf("retrieval report: the retrieval_heads table is empty")
	}
	nh := 0
	for _, r := range rows {
		nh = max(nh, r.Head+1)
	}
	var copied, queries int
	for _, s := range man.Samples {
		copied, queries = copied+s.Copied, queries+s.CopyQueries
	}
	o := man.Options
	f := &report.Figure{
		ID:    "retrieval-heads",
		Title: fmt.Sprintf("Retrieval score per (layer, head): copy task of %d tokens, gap %d, T = %d", o.Segment, o.Gap, man.T),
		Caption: fmt.Sprintf("Each cell is one head of one softmax layer (rows: model layer index). The panel \"retrieval score\" is Wu et al.'s score, the fraction of "+
			"the counted copy steps (%s) at which the head's largest attention weight lies on the position the next token is copied from; "+
			"the panel \"mean weight on the copy source\" shows the mean weight on that position (1/(t + 1) for uniform attention). Both colour scales are fixed to [0, 1]. "+
			"The model copied %d of %d copy steps over %d samples.", o.Steps, copied, queries, len(man.Samples)),
		PanelWidth: max(5.4, 2.5+0.3*float64(nh)), PanelHeight: max(3.4, 1.6+0.3*float64(len(man.Layers))),
	}
	for _, q := range []struct {
		title, label string
		get          func(results.RetrievalHeadRow) float64
	}{
		{"retrieval score", "score", func(r results.RetrievalHeadRow) float64 { return r.Score }},
		{"mean weight on the copy source", "α[t, s(t)]", func(r results.RetrievalHeadRow) float64 { return r.SourceMass }},
	} {
		g := newGrid(man.Layers, nh)
		for _, r := range rows {
			g.add(r.Layer, r.Head, q.get(r), 1)
		}
		z := g.means()
		p, missing, ok := heatPanel(q.title, q.label, g.layers, nh, z, 0, 1)
		if !ok {
			p, missing, _ = heatPanel(q.title+" (no counted step)", q.label, g.layers, nh, make([]float64, len(z)), 0, 1)
			missing = len(z)
		}
		if missing > 0 {
			f.Notes = append(f.Notes, fmt.Sprintf("%s: %d cells have no counted copy step (the model copied nowhere; --steps all scores every step) and are drawn at 0.", q.title, missing))
		}
		f.Panels = append(f.Panels, p)
	}
	top := append([]results.RetrievalHeadRow{}, rows...)
	sort.SliceStable(top, func(i, j int) bool { return top[i].Score > top[j].Score })
	tbl := report.Table{Caption: "highest retrieval scores", Header: []string{"layer", "head", "kind", "score", "hits / steps", "source mass"}}
	for _, r := range top[:min(8, len(top))] {
		if finite(r.Score) {
			tbl.Rows = append(tbl.Rows, []string{fmt.Sprint(r.Layer), fmt.Sprint(r.Head), r.Kind, fmt.Sprintf("%.3f", r.Score),
				fmt.Sprintf("%d / %d", r.Hits, r.Steps), fmt.Sprintf("%.3f", r.SourceMass)})
		}
	}
	if len(tbl.Rows) > 0 {
		f.Tables = []report.Table{tbl}
	}
	opts := manifestOptions(results.RetrievalManifestName, man.Tool, man.Created, man.Model, results.SourceInfo{Kind: "synthetic copy task", Tokens: man.T}, nil, o)
	return &report.Report{
		Title:    "Retrieval heads on a copy task",
		Subtitle: fmt.Sprintf("Model: %s (%s); softmax layers %s.", man.Model.Dir, man.Model.Arch, fmtInts(man.Layers)),
		Intro: []string{fmt.Sprintf("Each pass is a segment of %d distinct random token ids, %d filler ids and the segment again; definitions in "+
			"docs/diagnostics.md, \"Retrieval heads\". %d heads score above %g (Wu et al.'s retrieval heads).", o.Segment, o.Gap, man.HeadsAbove, o.Above)},
		Manifest: opts,
		Figures:  []*report.Figure{f},
	}, nil
}
