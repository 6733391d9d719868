package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// pngB64 returns a w×h PNG, white with a black diagonal band when ink is set.
func pngB64(t *testing.T, w, h int, ink bool) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.RGBA{255, 255, 255, 255}
			if ink && (x-y)*(x-y) < 16 {
				c = color.RGBA{0, 0, 0, 255}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

const goodSVG = `<svg xmlns="http://www.w3.org/2000/svg" width="100" height="100"><rect width="100" height="100"/>` +
	`<line x1="0" y1="0" x2="9" y2="9"/><line x1="1" y1="0" x2="9" y2="9"/><polyline points="0,0 5,5"/>` +
	`<circle r="2"/><circle r="3"/><text>a</text><text>b</text><path d="M0 0L1 1"/></svg>`

// notebook builds an executed notebook from cells given as JSON objects.
func notebook(t *testing.T, cells ...string) *Notebook {
	t.Helper()
	doc := `{"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"name": "gonb"}}, "cells": [` +
		strings.Join(cells, ",") + `]}`
	nb, err := Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	return nb
}

// figureCell returns an executed code cell tagged figure (n figures) with the outputs.
func figureCell(n int, outputs ...string) string {
	return `{"cell_type": "code", "execution_count": 1, "source": ["show(fig)\n", "more"],` +
		`"metadata": {"tags": ["figure"], "figures": ` + itoa(n) + `}, "outputs": [` + strings.Join(outputs, ",") + `]}`
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func display(mime map[string]string) string {
	b, _ := json.Marshal(map[string]any{"output_type": "display_data", "metadata": map[string]any{}, "data": mime})
	return string(b)
}

func TestCheckAcceptsRealFigures(t *testing.T) {
	good := pngB64(t, 120, 80, true)
	// nbformat may split a base64 string into a list of lines.
	split, _ := json.Marshal(map[string]any{"output_type": "display_data",
		"data": map[string]any{"image/png": []string{good[:40] + "\n", good[40:]}}})
	nb := notebook(t,
		`{"cell_type": "markdown", "metadata": {}, "source": "# title"}`,
		figureCell(1, display(map[string]string{"image/png": good})),
		figureCell(1, string(split)),
		figureCell(2, display(map[string]string{"text/html": `<figure><img src="data:image/png;base64,` + good + `"></figure>`}),
			display(map[string]string{"image/svg+xml": goodSVG, "text/html": "<div>" + goodSVG + "</div>"})),
		`{"cell_type": "code", "execution_count": 5, "metadata": {}, "source": "x", "outputs": [{"output_type": "stream", "name": "stderr", "text": "go: added x\n"}]}`,
	)
	rep := Check(nb)
	if len(rep.Problems) > 0 {
		t.Fatalf("problems: %v", rep.Problems)
	}
	if rep.CodeCells != 4 || rep.Expected != 4 || rep.Figures != 4 {
		t.Errorf("report %+v, want 4 code cells and 4 of 4 figures", rep)
	}
}

func TestCheckRejects(t *testing.T) {
	good := pngB64(t, 120, 80, true)
	cases := []struct {
		name, cell, want string
	}{
		{"error output", `{"cell_type": "code", "execution_count": 2, "metadata": {}, "source": "panic(1)", "outputs": [` +
			`{"output_type": "error", "ename": "ERROR", "evalue": "exit status 2\nmore", "traceback": []}]}`, "failed: ERROR: exit status 2"},
		{"not run", `{"cell_type": "code", "execution_count": null, "metadata": {}, "source": "x", "outputs": []}`, "did not run"},
		{"no output", figureCell(1), "produced 0 of 1"},
		{"blank PNG", figureCell(1, display(map[string]string{"image/png": pngB64(t, 120, 80, false)})), "PNG is blank"},
		{"tiny PNG", figureCell(1, display(map[string]string{"image/png": pngB64(t, 20, 20, true)})), "below 64"},
		{"bad base64", figureCell(1, display(map[string]string{"image/png": "!!!"})), "bad base64"},
		{"not a PNG", figureCell(1, display(map[string]string{"image/png": base64.StdEncoding.EncodeToString([]byte("GIF89a"))})), "does not decode"},
		{"broken SVG", figureCell(1, display(map[string]string{"image/svg+xml": "<svg><rect></svg>"})), "not well-formed"},
		{"empty SVG", figureCell(1, display(map[string]string{"image/svg+xml": `<svg xmlns="http://www.w3.org/2000/svg"><rect/></svg>`})), "draws 1 elements"},
		{"HTML without a picture", figureCell(1, display(map[string]string{"text/html": "<b>no figure</b>"})), "produced 0 of 1"},
		{"text only", figureCell(1, `{"output_type": "stream", "name": "stdout", "text": "`+good[:20]+`"}`), "produced 0 of 1"},
		{"one figure in two representations counts once", figureCell(2, display(map[string]string{"image/png": good,
			"text/html": `<img src="data:image/png;base64,` + good + `">`})), "produced 1 of 2"},
	}
	for _, c := range cases {
		rep := Check(notebook(t, c.cell))
		if len(rep.Problems) == 0 {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !strings.Contains(strings.Join(rep.Problems, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one mentioning %q", c.name, rep.Problems, c.want)
		}
	}
}

func TestParseRejectsOtherFormats(t *testing.T) {
	for _, doc := range []string{`{"nbformat": 3, "cells": []}`, `not json`} {
		if _, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("Parse(%q) accepted", doc)
		}
	}
}

func TestLintRejects(t *testing.T) {
	tagged := `{"cell_type": "code", "execution_count": null, "metadata": {"tags": ["figure"]}, "source": "x", "outputs": []}`
	cases := []struct{ name, doc, want string }{
		{"unknown kernel", `{"nbformat": 4, "metadata": {"kernelspec": {"name": "python3"}}, "cells": [` + tagged + `]}`, "kernelspec"},
		{"stored outputs", `{"nbformat": 4, "metadata": {"kernelspec": {"name": "gonb"}}, "cells": [` +
			strings.Replace(tagged, `"execution_count": null`, `"execution_count": 3`, 1) + `]}`, "stores outputs"},
		{"no figure cell", `{"nbformat": 4, "metadata": {"kernelspec": {"name": "gonb"}}, "cells": [` +
			`{"cell_type": "code", "execution_count": null, "metadata": {}, "source": "x", "outputs": []}]}`, "no cell is tagged"},
		{"count without tag", `{"nbformat": 4, "metadata": {"kernelspec": {"name": "gonb"}}, "cells": [` + tagged +
			`, {"cell_type": "code", "execution_count": null, "metadata": {"figures": 2}, "source": "x", "outputs": []}]}`, "needs the"},
		{"tagged markdown", `{"nbformat": 4, "metadata": {"kernelspec": {"name": "gonb"}}, "cells": [` + tagged +
			`, {"cell_type": "markdown", "metadata": {"tags": ["figure"]}, "source": "x"}]}`, "markdown cell tagged"},
	}
	for _, c := range cases {
		nb, err := Parse(strings.NewReader(c.doc))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rep := Lint(nb)
		if !strings.Contains(strings.Join(rep.Problems, "\n"), c.want) {
			t.Errorf("%s: problems %q, want one mentioning %q", c.name, rep.Problems, c.want)
		}
	}
}

// TestCommittedNotebooks lints the notebooks of this folder: one per paper
// plus the two getting-started notebooks and the explorer's, committed
// without outputs, each
// with figure cells for CI to check.
func TestCommittedNotebooks(t *testing.T) {
	paths, err := filepath.Glob("../*.ipynb")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		if strings.HasSuffix(p, ".out.ipynb") { // executed copies (git-ignored)
			continue
		}
		rep, err := LintFile(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		for _, prob := range rep.Problems {
			t.Errorf("%s: %s", p, prob)
		}
		name := strings.TrimSuffix(filepath.Base(p), ".ipynb")
		names = append(names, name)
		wantKernel := "gonb"
		if strings.HasSuffix(name, "-gophernotes") {
			wantKernel = "gophernotes"
		}
		if rep.Kernel != wantKernel {
			t.Errorf("%s: kernel %q, want %q", p, rep.Kernel, wantKernel)
		}
	}
	sort.Strings(names)
	want := "afa bft explore getting-started getting-started-gophernotes qwen35 rfa rt selrope sinks"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("notebooks: %s, want %s", got, want)
	}
}
