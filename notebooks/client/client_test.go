package client

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// writeST writes a safetensors file from (name, dtype, shape, raw bytes).
type stEntry struct {
	name, dtype string
	shape       []int
	raw         []byte
}

func writeST(t *testing.T, path string, entries []stEntry, meta map[string]string) {
	t.Helper()
	header := map[string]interface{}{}
	if meta != nil {
		header["__metadata__"] = meta
	}
	var data []byte
	for _, e := range entries {
		header[e.name] = map[string]interface{}{"dtype": e.dtype, "shape": e.shape,
			"data_offsets": []int{len(data), len(data) + len(e.raw)}}
		data = append(data, e.raw...)
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, uint64(len(h)))
	buf.Write(h)
	buf.Write(data)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func le32(v ...float32) []byte {
	var b bytes.Buffer
	for _, x := range v {
		_ = binary.Write(&b, binary.LittleEndian, math.Float32bits(x))
	}
	return b.Bytes()
}

func le16(v ...uint16) []byte {
	var b bytes.Buffer
	for _, x := range v {
		_ = binary.Write(&b, binary.LittleEndian, x)
	}
	return b.Bytes()
}

func TestReadSafetensors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.safetensors")
	var ids bytes.Buffer
	for _, v := range []int64{5, -1, 1 << 40} {
		_ = binary.Write(&ids, binary.LittleEndian, v)
	}
	writeST(t, path, []stEntry{
		{"a", "F32", []int{2, 3}, le32(0, 1, 2, 3, 4.5, -6)},
		{"ids", "I64", []int{1, 3}, ids.Bytes()},
		{"h", "F16", []int{5}, le16(0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00)},
		{"bf", "BF16", []int{2}, le16(0x3f80, 0xc040)},
	}, map[string]string{"format": "pt"})
	ts, err := ReadSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ts.Names(), ","); got != "a,bf,h,ids" {
		t.Errorf("Names = %s", got)
	}
	if ts.Metadata["format"] != "pt" {
		t.Errorf("metadata = %v", ts.Metadata)
	}
	a := ts.Get("a")
	if a.At(1, 1) != 4.5 || a.At(1, 2) != -6 || a.At(0, 2) != 2 {
		t.Errorf("a = %v", a.Data)
	}
	if r := a.Row(1); len(r) != 3 || r[0] != 3 {
		t.Errorf("a.Row(1) = %v", r)
	}
	if d := ts.Get("ids").Data; d[0] != 5 || d[1] != -1 || d[2] != 1<<40 {
		t.Errorf("ids = %v", d)
	}
	h := ts.Get("h").Data
	want := []float64{1, -2, 65504, math.Pow(2, -24), math.Inf(1)}
	for i := range want {
		if h[i] != want[i] {
			t.Errorf("F16 element %d = %g, want %g", i, h[i], want[i])
		}
	}
	if bf := ts.Get("bf").Data; bf[0] != 1 || bf[1] != -3 {
		t.Errorf("BF16 = %v, want [1 -3]", bf)
	}
	if ts.Get("missing") != nil {
		t.Error("Get of a missing name is not nil")
	}
}

func TestReadSafetensorsRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]stEntry{
		"short data":    {{"a", "F32", []int{4}, le32(1, 2, 3)}},
		"unknown dtype": {{"a", "C64", []int{1}, le32(1, 2)}},
		"negative dim":  {{"a", "F32", []int{-1}, le32(1)}},
	}
	for name, entries := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_"))
		writeST(t, path, entries, nil)
		if _, err := ReadSafetensors(path); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// Offsets past the end of the file.
	path := filepath.Join(dir, "offsets")
	h := []byte(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,400]}}`)
	var buf bytes.Buffer
	_ = binary.Write(&buf, binary.LittleEndian, uint64(len(h)))
	buf.Write(h)
	buf.Write(le32(1))
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSafetensors(path); err == nil {
		t.Error("offsets past the data accepted")
	}
	// A header length larger than the file.
	if err := os.WriteFile(path, []byte{0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'}, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSafetensors(path); err == nil {
		t.Error("header length past the file accepted")
	}
}

func TestTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.csv")
	var b strings.Builder
	b.WriteString("layer,head,neff\n")
	for i := 0; i < 30; i++ {
		b.WriteString([]string{"0", "1"}[i%2] + ",0," + []string{"1.5", "", "NaN"}[i%3] + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tab, err := ReadCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 30 {
		t.Fatalf("Len = %d", tab.Len())
	}
	col, err := tab.Column("neff")
	if err != nil {
		t.Fatal(err)
	}
	if col[0] != 1.5 || !math.IsNaN(col[1]) || !math.IsNaN(col[2]) {
		t.Errorf("Column = %v", col[:3])
	}
	if _, err := tab.Column("nope"); err == nil {
		t.Error("Column of a missing name accepted")
	}
	l1, err := tab.Where("layer", "1")
	if err != nil || l1.Len() != 15 {
		t.Fatalf("Where: %d rows, %v", l1.Len(), err)
	}
	h := tab.HTML()
	if n := strings.Count(h, "<tr>"); n != MaxHTMLRows+2 { // header + rows + the elision row
		t.Errorf("HTML has %d rows, want %d", n, MaxHTMLRows+2)
	}
	if !strings.Contains(h, "10 more rows") {
		t.Error("HTML does not say how many rows it left out")
	}
}

func TestPlotSVG(t *testing.T) {
	nan := math.NaN()
	p := NewPlot("n_eff <per head>", "query t", "n_eff").
		Line("head 0", []float64{0, 1, 2, 3, 4}, []float64{1, 2, nan, 3, 4}).
		Points("gate", []float64{0, 1}, []float64{0.5, 2})
	svg := p.SVG()
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Errorf("a NaN should split the line in two polylines, got %d", n)
	}
	if n := strings.Count(svg, `r="2.5"`); n != 2 {
		t.Errorf("%d markers, want 2", n)
	}
	for _, want := range []string{"n_eff &lt;per head&gt;", ">head 0<", ">gate<", "query t"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if !strings.HasPrefix(p.HTML(), "<div><svg") {
		t.Error("HTML does not inline the SVG")
	}
	// Every polyline point lies inside the SVG canvas.
	for _, m := range regexp.MustCompile(`points="([^"]+)"`).FindAllStringSubmatch(svg, -1) {
		for _, pt := range strings.Fields(m[1]) {
			var x, y float64
			if _, err := fmtSscanf(pt, &x, &y); err != nil || x < 0 || x > 640 || y < 0 || y > 400 {
				t.Errorf("point %q outside the canvas (%v)", pt, err)
			}
		}
	}

	bad := NewPlot("log", "x", "y")
	bad.LogY = true
	bad.Line("a", []float64{0, 1}, []float64{1, 0})
	if s := bad.SVG(); !strings.Contains(s, "on a log axis") || strings.Contains(s, "<polyline") {
		t.Errorf("a non-positive value on a log axis should be reported, not drawn")
	}
	if s := NewPlot("", "", "").Line("a", []float64{1, 2}, []float64{1}).SVG(); !strings.Contains(s, "2 x values, 1 y values") {
		t.Error("mismatched lengths not reported")
	}
}

// fmtSscanf parses an "x,y" point.
func fmtSscanf(s string, x, y *float64) (int, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 2 {
		return 0, os.ErrInvalid
	}
	var err error
	if *x, err = parseF(parts[0]); err != nil {
		return 0, err
	}
	if *y, err = parseF(parts[1]); err != nil {
		return 1, err
	}
	return 2, nil
}

func parseF(s string) (float64, error) {
	var v float64
	err := json.Unmarshal([]byte(s), &v)
	return v, err
}

func TestTicks(t *testing.T) {
	got := ticks(0, 1, 5)
	want := []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}
	if len(got) != len(want) {
		t.Fatalf("ticks(0, 1, 5) = %v", got)
	}
	for i := range got {
		if tickLabel(got[i]) != tickLabel(want[i]) {
			t.Errorf("tick %d label %s, want %s", i, tickLabel(got[i]), tickLabel(want[i]))
		}
	}
	if l := tickLabel(0.6000000000000001); l != "0.6" {
		t.Errorf("tickLabel = %s, want 0.6", l)
	}
	if lt := logTicks(0, 2); len(lt) != 3 || lt[2] != 2 {
		t.Errorf("logTicks(0, 2) = %v, want decades 1, 10, 100", lt)
	}
}

func TestGallery(t *testing.T) {
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 8, 4))
	img.Set(1, 1, color.Black)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"b-fig", "a-fig"} {
		if err := os.WriteFile(filepath.Join(dir, name+".png"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a-fig.svg"), []byte("<svg/>"), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := ReadGallery(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(g.Names(), ","); got != "a-fig,b-fig" {
		t.Errorf("Names = %s", got)
	}
	a := g.Image("a-fig")
	if a.Width != 8 || a.Height != 4 || string(a.SVGData) != "<svg/>" || g.Image("b-fig").SVGData != nil {
		t.Errorf("image a: %dx%d svg %q", a.Width, a.Height, a.SVGData)
	}
	if !bytes.Equal(a.PNG(), buf.Bytes()) || strings.Count(g.HTML(), "data:image/png;base64,") != 2 {
		t.Error("PNG/HTML do not carry the files")
	}
	if _, err := ReadGallery(t.TempDir()); err == nil {
		t.Error("an empty folder gave a gallery")
	}
	if err := os.WriteFile(filepath.Join(dir, "c.png"), []byte("not a png"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadGallery(dir); err == nil {
		t.Error("a broken PNG was accepted")
	}
}

func TestWorkdirAndRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "notebooks", "client", "client.go")); err != nil {
		t.Errorf("RepoRoot %s is not this repository: %v", root, err)
	}
	base := t.TempDir()
	t.Setenv(WorkEnv, base)
	d, err := Workdir("gs")
	if err != nil || d != filepath.Join(base, "gs") {
		t.Errorf("Workdir = %q, %v", d, err)
	}
	if _, err := Workdir("../x"); err == nil {
		t.Error("Workdir accepted a path")
	}
}

func TestWriteIDsRejectsRaggedBatch(t *testing.T) {
	if err := writeIDs(filepath.Join(t.TempDir(), "x"), [][]int{{1, 2}, {3}}); err == nil {
		t.Error("ragged batch accepted")
	}
	if ids := ByteIDs("Ab"); len(ids) != 1 || ids[0][0] != 65 || ids[0][1] != 98 {
		t.Errorf("ByteIDs = %v", ids)
	}
}

// probeForTest returns a probe binary: $PROBE_BIN, one found by Find, or one
// built from the repository with the go command on PATH (which must be the
// library's Go 1.26; with an older one the end-to-end test skips).
func probeForTest(t *testing.T) *Probe {
	t.Helper()
	if p, err := Find(); err == nil {
		return p
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/probe")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("no probe binary ($%s unset) and it does not build with this go: %v\n%s", BinEnv, err, out)
	}
	p, err := New(bin)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEndToEnd(t *testing.T) {
	p := probeForTest(t)
	dir := t.TempDir()
	info, err := p.Generate(filepath.Join(dir, "ck"), GenerateOptions{Arch: "gated", Layers: 2, DModel: 32, Heads: 2, KVHeads: 1, Vocab: 256, MaxPos: 256})
	if err != nil {
		t.Fatal(err)
	}
	if info.Layers != 2 || info.Heads != 2 || info.Gate != "headwise" || info.Vocab != 256 {
		t.Errorf("inspect: %+v", info)
	}
	ids := ByteIDs("a filter, a gain, a state")
	T := len(ids[0])
	ts, err := p.Capture(info.Dir, ids, []string{"blocks.*.attn.hook_pattern"}, filepath.Join(dir, "cap.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	pat := ts.Get("blocks.1.attn.hook_pattern")
	if pat == nil || len(pat.Shape) != 4 || pat.Shape[1] != 2 || pat.Shape[2] != T || pat.Shape[3] != T {
		t.Fatalf("capture: %v", ts.Names())
	}
	for q := 0; q < T; q++ { // causal softmax rows sum to 1
		var s float64
		for _, v := range pat.Row(0, 1, q) {
			s += v
		}
		if math.Abs(s-1) > 1e-5 {
			t.Fatalf("row %d sums to %g", q, s)
		}
	}
	tab, err := p.Diag(info.Dir, ids, filepath.Join(dir, "d.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if tab.Len() != 2*2*T {
		t.Errorf("diag: %d rows, want %d", tab.Len(), 2*2*T)
	}
	neff, err := tab.Column("neff")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range neff {
		if !(v >= 1-1e-9) {
			t.Fatalf("n_eff row %d = %g < 1", i, v)
		}
	}
	g, err := p.AttentionMaps(filepath.Join(dir, "cap.safetensors"), 1, []int{0, 1}, 0.25, filepath.Join(dir, "attn"))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Images) == 0 || g.Images[0].Width < 100 {
		t.Errorf("attention maps: %+v", g.Names())
	}
	f, err := p.Figures("rt", filepath.Join(dir, "rt"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Image("rt-fig1") == nil {
		t.Errorf("figures rt: %v", f.Names())
	}
	if _, err := p.Run("no-such-command"); err == nil {
		t.Error("an unknown command did not fail")
	}
}
