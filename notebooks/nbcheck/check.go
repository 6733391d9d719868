package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"regexp"
	"strings"
)

// Notebook is the part of an nbformat 4 document that the checks read.
type Notebook struct {
	NBFormat int `json:"nbformat"`
	Metadata struct {
		KernelSpec struct {
			Name string `json:"name"`
		} `json:"kernelspec"`
	} `json:"metadata"`
	Cells []Cell `json:"cells"`
}

// Cell is one notebook cell.
type Cell struct {
	Type           string       `json:"cell_type"`
	Source         multiline    `json:"source"`
	Metadata       CellMetadata `json:"metadata"`
	ExecutionCount *int         `json:"execution_count"`
	Outputs        []Output     `json:"outputs"`
}

// CellMetadata holds the cell's tags and its expected figure count.
type CellMetadata struct {
	Tags []string `json:"tags"`
	// Figures is how many figures a "figure" cell must produce (0: 1).
	Figures *int `json:"figures"`
}

// Output is one cell output.
type Output struct {
	Type  string               `json:"output_type"`
	Name  string               `json:"name"` // stream name
	Text  multiline            `json:"text"`
	Data  map[string]multiline `json:"data"`
	EName string               `json:"ename"`
	EVal  string               `json:"evalue"`
}

// multiline is nbformat's string-or-list-of-strings.
type multiline string

// UnmarshalJSON accepts a string or a list of strings (joined).
func (m *multiline) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*m = multiline(s)
		return nil
	}
	var parts []string
	if err := json.Unmarshal(b, &parts); err != nil {
		// Non-string MIME data (application/json) is not inspected.
		*m = ""
		return nil
	}
	*m = multiline(strings.Join(parts, ""))
	return nil
}

// Report is the result of checking one notebook.
type Report struct {
	Kernel    string
	CodeCells int
	Expected  int // figures the tagged cells must produce
	Figures   int // figures found in tagged cells (executed notebooks)
	Problems  []string
}

func (r *Report) addf(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// FigureTag is the cell tag that marks a cell whose outputs must hold figures.
const FigureTag = "figure"

// expected returns how many figures a cell must produce (0 if untagged).
func (c *Cell) expected() int {
	for _, t := range c.Metadata.Tags {
		if t == FigureTag {
			if c.Metadata.Figures != nil {
				return *c.Metadata.Figures
			}
			return 1
		}
	}
	return 0
}

// head returns the first line of the cell's source, for messages.
func (c *Cell) head() string {
	s := strings.TrimSpace(string(c.Source))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 70 {
		s = s[:70] + "…"
	}
	return s
}

// Parse reads a notebook.
func Parse(r io.Reader) (*Notebook, error) {
	var nb Notebook
	dec := json.NewDecoder(r)
	if err := dec.Decode(&nb); err != nil {
		return nil, fmt.Errorf("not a notebook: %w", err)
	}
	if nb.NBFormat != 4 {
		return nil, fmt.Errorf("nbformat %d, want 4", nb.NBFormat)
	}
	return &nb, nil
}

func parseFile(path string) (*Notebook, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// CheckFile checks an executed notebook (see Check).
func CheckFile(path string) (*Report, error) {
	nb, err := parseFile(path)
	if err != nil {
		return nil, err
	}
	return Check(nb), nil
}

// Check checks an executed notebook: every code cell ran, no output is an
// error, every tagged cell produced its figures.
func Check(nb *Notebook) *Report {
	rep := &Report{Kernel: nb.Metadata.KernelSpec.Name}
	for i := range nb.Cells {
		c := &nb.Cells[i]
		if c.Type != "code" {
			continue
		}
		rep.CodeCells++
		if c.ExecutionCount == nil {
			rep.addf("cell %d (%s) did not run", i, c.head())
		}
		for _, o := range c.Outputs {
			if o.Type == "error" {
				rep.addf("cell %d (%s) failed: %s: %s", i, c.head(), o.EName, firstLine(o.EVal))
			}
		}
		want := c.expected()
		if want == 0 {
			continue
		}
		rep.Expected += want
		got := 0
		var why []string
		for _, o := range c.Outputs {
			n, reasons := figuresIn(o)
			got += n
			why = append(why, reasons...)
		}
		rep.Figures += min(got, want)
		if got < want {
			msg := fmt.Sprintf("cell %d (%s) produced %d of %d expected figures", i, c.head(), got, want)
			if len(why) > 0 {
				msg += " (" + strings.Join(why, "; ") + ")"
			}
			rep.addf("%s", msg)
		}
	}
	return rep
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

var (
	dataPNG   = regexp.MustCompile(`data:image/png;base64,([A-Za-z0-9+/=\s]+)`)
	inlineSVG = regexp.MustCompile(`(?s)<svg[\s>].*?</svg>`)
)

// figuresIn counts the valid figures of one display output: the most that
// any one of its MIME representations holds (a PNG and the HTML that
// inlines it are the same figure), with the reasons invalid ones failed.
func figuresIn(o Output) (int, []string) {
	if o.Type != "display_data" && o.Type != "execute_result" {
		return 0, nil
	}
	best := 0
	var why []string
	found := func(n int) { best = max(best, n) }
	if d, ok := o.Data["image/png"]; ok {
		if err := checkPNGBase64(string(d)); err != nil {
			why = append(why, err.Error())
		} else {
			found(1)
		}
	}
	if d, ok := o.Data["image/svg+xml"]; ok {
		if err := checkSVG(string(d)); err != nil {
			why = append(why, err.Error())
		} else {
			found(1)
		}
	}
	if d, ok := o.Data["text/html"]; ok {
		n := 0
		for _, m := range dataPNG.FindAllStringSubmatch(string(d), -1) {
			if err := checkPNGBase64(m[1]); err != nil {
				why = append(why, "inlined "+err.Error())
			} else {
				n++
			}
		}
		for _, svg := range inlineSVG.FindAllString(string(d), -1) {
			if err := checkSVG(svg); err != nil {
				why = append(why, "inlined "+err.Error())
			} else {
				n++
			}
		}
		found(n)
	}
	return best, why
}

// Minimum size and ink of a figure.
const (
	minSide      = 64    // pixels on the shorter side
	minInkFrac   = 0.005 // fraction of pixels that differ from the background
	minSVGShapes = 8     // drawing elements in an SVG
)

// checkPNGBase64 decodes a base64 PNG and checks it is a real picture.
func checkPNGBase64(b64 string) error {
	raw, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(b64), ""))
	if err != nil {
		return fmt.Errorf("PNG: bad base64: %v", err)
	}
	return checkPNG(raw)
}

// checkPNG checks that raw is a PNG of at least minSide pixels a side whose
// pixels are not all (nearly all) one colour.
func checkPNG(raw []byte) error {
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("PNG does not decode: %v", err)
	}
	b := img.Bounds()
	if b.Dx() < minSide || b.Dy() < minSide {
		return fmt.Errorf("PNG is %d×%d pixels, below %d", b.Dx(), b.Dy(), minSide)
	}
	if frac := inkFraction(img); frac < minInkFrac {
		return fmt.Errorf("PNG is blank (%.3f%% of pixels differ from the background)", 100*frac)
	}
	return nil
}

// inkFraction returns the fraction of pixels whose colour differs from the
// most common colour (the background).
func inkFraction(img image.Image) float64 {
	b := img.Bounds()
	counts := map[[4]uint32]int{}
	total := 0
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			counts[[4]uint32{r >> 8, g >> 8, bl >> 8, a >> 8}]++
			total++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	return float64(total-most) / float64(total)
}

// svgShapes are the SVG elements that draw something.
var svgShapes = map[string]bool{"path": true, "line": true, "polyline": true, "polygon": true, "rect": true,
	"circle": true, "ellipse": true, "text": true, "image": true}

// checkSVG checks that s is a well-formed SVG document with an <svg> root
// and at least minSVGShapes drawing elements.
func checkSVG(s string) error {
	dec := xml.NewDecoder(strings.NewReader(s))
	dec.Strict = true
	root, shapes := "", 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
			}
			if svgShapes[se.Name.Local] {
				shapes++
			}
		}
	}
	if root != "svg" {
		return fmt.Errorf("SVG root element is %q", root)
	}
	if shapes < minSVGShapes {
		return fmt.Errorf("SVG draws %d elements, below %d", shapes, minSVGShapes)
	}
	return nil
}

// Kernels the notebooks may use.
var Kernels = map[string]bool{"gonb": true, "gophernotes": true}

// LintFile checks a committed notebook (see Lint).
func LintFile(path string) (*Report, error) {
	nb, err := parseFile(path)
	if err != nil {
		return nil, err
	}
	return Lint(nb), nil
}

// Lint checks a notebook as committed: a known kernel, no stored outputs or
// execution counts, figure tags on code cells with positive counts, at least
// one figure cell.
func Lint(nb *Notebook) *Report {
	rep := &Report{Kernel: nb.Metadata.KernelSpec.Name}
	if !Kernels[rep.Kernel] {
		rep.addf("kernelspec %q: want gonb or gophernotes", rep.Kernel)
	}
	for i := range nb.Cells {
		c := &nb.Cells[i]
		tagged := false
		for _, t := range c.Metadata.Tags {
			tagged = tagged || t == FigureTag
		}
		if c.Type != "code" {
			if tagged {
				rep.addf("cell %d is a %s cell tagged %q", i, c.Type, FigureTag)
			}
			continue
		}
		rep.CodeCells++
		if c.ExecutionCount != nil || len(c.Outputs) > 0 {
			rep.addf("cell %d (%s) stores outputs: commit notebooks cleared", i, c.head())
		}
		if c.Metadata.Figures != nil && (!tagged || *c.Metadata.Figures < 1) {
			rep.addf("cell %d (%s): figures = %d needs the %q tag and a count ≥ 1", i, c.head(), *c.Metadata.Figures, FigureTag)
		}
		rep.Expected += c.expected()
	}
	if rep.Expected == 0 {
		rep.addf("no cell is tagged %q: CI could not tell a notebook that draws nothing", FigureTag)
	}
	return rep
}
