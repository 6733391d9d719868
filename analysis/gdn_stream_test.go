package analysis

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestGDNRunStreamsSameBytes: probe gdn writes each layer's rows to its
// pass file as the layer ends and the tables from the pass files a batch
// at a time; its pass files and its gdn and gdn_heads tables (Parquet,
// CSV, JSONL) are byte for byte those of the rows of the whole pass held
// in memory and written at once (every layer's filter values kept, rows in
// (mixer, layer, head, token) order): for a Gated DeltaNet hybrid,
// Mamba-2, RWKV-7 and Falcon-H1 with its attention heads' rows (--w-rows),
// with passes of more rows than one batch, and (Mamba-2 at T = 5000) of
// more than one Parquet page a column.
func TestGDNRunStreamsSameBytes(t *testing.T) {
	for _, tc := range []struct {
		arch    model.Arch
		wRows   bool
		lengths []int
	}{{model.ArchQwen35, true, []int{40, 600}}, {model.ArchMamba2, false, []int{40, 600}}, {model.ArchRWKV7, false, []int{40, 600}},
		{model.ArchFalconH1, true, []int{40, 600}}, {model.ArchMamba2, false, []int{5000}}} {
		t.Run(fmt.Sprint(tc.arch, tc.lengths), func(t *testing.T) {
			dir := genModel(t, tc.arch, 2, 32, 4, 2, 64, 8192, nil)
			stream := randomStream(12000, 0, 64, 5)
			src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
			out := t.TempDir()
			fm := []string{FormatParquet, FormatCSV, FormatJSONL}
			o := results.GDNOptions{StreamPlan: results.StreamPlan{Lengths: tc.lengths, Samples: 2}, WRows: tc.wRows}
			man, n, err := (&GDNRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Formats: fm, Threads: 2}, Options: o}).Run()
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(dir, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, kind := recurrentLayers(&m.Config)
			var all []results.GDNRow
			var heads []results.GDNHeadRow
			for _, c := range man.Chunks {
				hs := &hooks.Set{}
				f, fa, err := gdnFilters(hs, &m.Config, c.T, man.Options, man.Threads, false)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := m.Forward([][]int{stream[c.Start:c.End]}, model.Options{Hooks: hs, Threads: man.Threads}); err != nil {
					t.Fatal(err)
				}
				rows := appendGDNRows(nil, f, c, kind)
				if fa != nil {
					rows = appendGDNRows(rows, fa, c, results.MixerAttention)
				}
				if c.T >= 600 && len(rows) <= rowBatch {
					t.Fatalf("a pass of %d rows: want more than one batch (%d)", len(rows), rowBatch)
				}
				path := streamPassPath(out, "gdn", c)
				_, pf, err := openPassFile(path, &results.StreamPass{})
				if err != nil {
					t.Fatal(err)
				}
				meta, _ := pf.Lookup(passMetaKey)
				var want bytes.Buffer
				if err := writeParquet(&want, rows, map[string]string{passMetaKey: meta}); err != nil {
					t.Fatal(err)
				}
				sameFile(t, path, want.Bytes())
				all = append(all, rows...)
				heads = appendGDNHeads(heads, rows)
			}
			if n != int64(len(all)) {
				t.Errorf("Run returned %d rows, the passes have %d", n, len(all))
			}
			for _, f := range fm {
				var want, wantHeads bytes.Buffer
				switch f {
				case FormatParquet:
					err = writeParquet(&want, all, nil)
					_ = writeParquet(&wantHeads, heads, nil)
				case FormatCSV:
					err = writeCSV(&want, all)
					_ = writeCSV(&wantHeads, heads)
				case FormatJSONL:
					err = writeJSONL(&want, all)
					_ = writeJSONL(&wantHeads, heads)
				}
				if err != nil {
					t.Fatal(err)
				}
				sameFile(t, filepath.Join(out, "gdn."+f), want.Bytes())
				sameFile(t, filepath.Join(out, "gdn_heads."+f), wantHeads.Bytes())
			}
			left, _ := filepath.Glob(filepath.Join(out, "*", ".pages-*"))
			top, _ := filepath.Glob(filepath.Join(out, ".pages-*"))
			if len(left)+len(top) > 0 {
				t.Errorf("temporary page files left: %v %v", left, top)
			}
		})
	}
}

// sameFile fails unless the file at path holds want.
func sameFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Errorf("%s: %d bytes, want %d; first difference at byte %d", path, len(got), len(want), i)
	}
}
