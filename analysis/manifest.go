package analysis

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"github.com/filterlens/probe/model"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/atomicfile"
)

// HashFile returns the sha256 of the file at path.
func HashFile(path string) (results.FileHash, error) {
	f, err := os.Open(path)
	if err != nil {
		return results.FileHash{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return results.FileHash{}, fmt.Errorf("%s: %w", path, err)
	}
	return results.FileHash{Path: path, SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: n}, nil
}

// HashBytes describes data read from path (standard input, say) the way
// HashFile describes a file.
func HashBytes(path string, data []byte) results.FileHash {
	s := sha256.Sum256(data)
	return results.FileHash{Path: path, SHA256: hex.EncodeToString(s[:]), Bytes: int64(len(data))}
}

// ComputeDescription is ModelInfo.Compute for a model's arithmetic and
// the kernel of its products (model.Model.ProductKernel), whose order of
// the float32 sums differs between kernels (AMX, VDPBF16PS, the float32
// ones).
func ComputeDescription(c model.Compute, kernel string) string {
	const sums = "(float64 accumulation of norms, softmax sums and diagnostics)"
	if !c.BF16Products() {
		products := "float32"
		if c == model.ComputeF32Widen {
			products += " (weights widened to float32)"
		}
		return products + " matrix products (kernel " + kernel + "), the rest float32 " + sums
	}
	products := "bf16 matrix products (activations rounded to bf16, bf16 weights, float32 sums; model.Compute; kernel " + kernel + ")"
	if c == model.ComputeBF16 {
		return products + ", attention from bf16 q, k, v (scores and α·v float32 sums of exact products, softmax float32), the rest float32 " + sums
	}
	return products + ", attention and the rest float32 " + sums
}

// shapeOf returns the model's shape for aggregation.
func shapeOf(m results.ModelInfo) Shape {
	return Shape{Layers: m.Layers, Heads: m.Heads, Gated: m.Gate != string(model.GateNone) && m.Gate != "", Sinks: m.Sinks,
		Measured: m.MeasuredLayers, Windows: m.Windows, LayerDHead: m.LayerDHead}
}

// SigmaDHead is the head width that ProbeOptions.Resolve takes σ₀²'s
// default from: the model's, or 0 when its layers' heads differ in width
// (σ₀² is then 1/d_head of each layer: probes.NewModelCollector).
func SigmaDHead(c *model.Config) int {
	if c.LayerValueDims() != nil {
		return 0
	}
	return c.DHead
}

// measuredLayers is ModelInfo.MeasuredLayers: nil when every layer is
// softmax attention.
func measuredLayers(c *model.Config) []int {
	if ls := c.SoftmaxLayers(); len(ls) < c.Layers {
		return ls
	}
	return nil
}

// slidingWindows is ModelInfo.Windows: LayerWindows, nil when no layer
// has a sliding window.
func slidingWindows(c *model.Config) []int {
	w := LayerWindows(c)
	if slices.ContainsFunc(w, func(x int) bool { return x > 0 }) {
		return w
	}
	return nil
}

// DescribeModel hashes the checkpoint's config.json and weight files and
// describes the model.
func DescribeModel(m *model.Model) (results.ModelInfo, error) {
	info := results.ModelInfo{Dir: m.Dir, Arch: string(m.Arch), ModelType: m.ModelType, Layers: m.Config.Layers,
		MeasuredLayers: measuredLayers(&m.Config), Windows: slidingWindows(&m.Config),
		DModel: m.DModel, Heads: m.Heads, KVHeads: m.KVHeads, DHead: m.DHead, Vocab: m.Vocab, MaxPos: m.MaxPos,
		Gate: string(m.Gate), DTypes: m.DTypes, Compute: ComputeDescription(m.Compute, m.ProductKernel(m.Compute)),
		Parameters: m.Parameters, Sinks: HasSinks(m), LayerDHead: m.Config.LayerValueDims()}
	root, files := m.Dir, []string{filepath.Join(m.Dir, "config.json")}
	for _, f := range m.Files {
		if !filepath.IsAbs(f) && !strings.HasPrefix(f, m.Dir) {
			f = filepath.Join(m.Dir, f)
		}
		files = append(files, f)
	}
	if m.Format == model.FormatGGUF { // one file: the config is its metadata
		info.Format, files, root = m.Format, m.Files, filepath.Dir(m.Files[0])
	}
	h := sha256.New()
	for _, f := range files {
		fh, err := HashFile(f)
		if err != nil {
			return info, err
		}
		if rel, err := filepath.Rel(root, fh.Path); err == nil {
			fh.Path = rel
		}
		info.Files = append(info.Files, fh)
		fmt.Fprintf(h, "%s %s\n", fh.Path, fh.SHA256)
	}
	info.Digest = hex.EncodeToString(h.Sum(nil))
	return info, nil
}

// noVCS is ToolInfo.BuildNote when the build recorded no VCS information.
const noVCS = "the build recorded no VCS revision (go run, go test, -buildvcs=false and builds in a linked git worktree, golang/go#58218, record none); go build or go install in a primary git checkout records it"

// Tool returns the running program's identity from its build information
// (runtime/debug.ReadBuildInfo).
func Tool() results.ToolInfo {
	t := results.ToolInfo{Name: "probe", Module: "github.com/filterlens/probe", Version: "(devel)", Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH, BLAS: model.BLAS(), Format: formatVersion, BuildNote: noVCS}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			t.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				t.Revision, t.BuildNote = s.Value, ""
			case "vcs.time":
				t.Time = s.Value
			case "vcs.modified":
				m := s.Value == "true"
				t.Modified = &m
			}
		}
	}
	return t
}

// conventions describes the fixed readings of a sweep for its manifest.
func conventions(sw results.SweepOptions, agg results.AggOptions) map[string]string {
	return map[string]string{
		"T":            "context length of a pass = tokens in the forward pass; a prepended BOS token counts in T",
		"queries":      "0-based query positions t = 0..T−1; windows are the last ⌊f·T⌋ queries: t ≥ T − ⌊f·T⌋",
		"window_last":  fmt.Sprintf("t ≥ T − ⌊%v·T⌋ (Figs. 2–3; K in Fig. 4)", sw.LastFrac),
		"window_bos":   fmt.Sprintf("t ≥ T − ⌊%v·T⌋ (BOS mass in Fig. 4)", sw.BOSFrac),
		"layers":       "0-based; Figs. 2–3 pool the last analysis.last_layers layers (layers_used)",
		"bos_mass":     "α[t, 0]: attention on position 0 (the BOS token when one is prepended, else the chunk's first token)",
		"sink_rows":    "models with learned attention sinks only (model.sinks): every row metric reads the rows as sweep.probe.sink_rows says — renorm: divided by their own sum Σα = 1 − σ; raw: as the model returns them (sum 1 − σ); sink_mass = σ, the dropped sink column's weight, as the model computed it",
		"scalar_S":     "S_mean = mean over the head dimension of S_i; lambda_obs and K apply Eq. 6 to S_mean (reduction (i)); lambda_obs_dim_mean, K_dim_mean: reduction (ii); lambda_obs_harmonic: (iii); (ii) and (iii) are in the tables only with sweep.probe.reductions = all",
		"std":          fmt.Sprintf("ddof = %d; std_pooled over (sample, layer, head, query) elements, std_units over the means of (sample, layer) units", agg.DDOF),
		"fig3":         "λ = λobs(Tmin)(1 − K_meas(Tmin))/K_meas(Tmin), λobs from the pooled n_eff and S_mean via the sweep's λobs form; K_meas = pooled mean of per-element K",
		"fig4":         "one cell per (layer, head) over all layers; K and the learned gate over window_last, BOS mass over window_bos; weighting analysis.fig4_pool; gate: the same cells with the gate in place of K",
		"left_out":     "bos_mass aggregates (heads, fig2, fig4) leave out the queries t >= window of a sliding-window layer (position 0 is outside their window: not applicable) and count them in left_out / bos_left_out; the buckets table keeps their measured mass (0)",
		"local_layers": fmt.Sprintf("%s: with both sliding-window (local) and global layers, fig2, fig3 and the fig4 statistics are per layer group (layers column: global, local; summary layer_groups); pooled: one group, all (analysis.local_layers = %s)", results.LocalSeparate, agg.LocalLayers),
		"bucket_stats": "per bucket and metric: n finite values, sum, m2 = Σ(x − sum/n)²; raw Σx² = m2 + sum²/n",
		"nonfinite":    "NaN/±Inf values are excluded from every statistic and counted in the nonfinite columns",
	}
}

// writeJSON writes v as indented JSON to path, atomically.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	b = append(b, '\n')
	return atomicfile.Write(path, func(w io.Writer) error { _, err := w.Write(b); return err })
}

// ReadManifest reads a sweep's manifest JSON file. A manifest written
// before the sweep ran on the run engine (no kind) is refused with how to
// convert its folder: its pass files cannot be read as the engine's.
func ReadManifest(path string) (*results.Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var head struct {
		Kind string           `json:"kind"`
		Tool results.ToolInfo `json:"tool"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%s: not a sweep manifest: %w", path, err)
	}
	switch {
	case head.Tool.Format != formatVersion:
		return nil, fmt.Errorf("%s: format %q, this probe reads %q", path, head.Tool.Format, formatVersion)
	case head.Kind == "":
		return nil, fmt.Errorf("%s: %w", path, errOldSweep)
	case head.Kind != "sweep":
		return nil, fmt.Errorf("%s: a probe %s manifest, not a sweep's", path, head.Kind)
	}
	var m results.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: not a sweep manifest: %w", path, err)
	}
	return &m, nil
}

// errOldSweep is the error of a sweep folder written before the sweep ran
// on the run engine (a manifest with no kind, pass files
// passes/T<T>-s<sample>.parquet).
var errOldSweep = errors.New("a sweep written before the sweep ran on the run engine (its manifest has no kind), whose pass files this probe cannot resume or read: re-run the sweep with a new --out (or --force into this folder, which replaces its tables) to convert it")

// ManifestName returns the manifest file name of a shard (manifest.json
// for an unsharded run).
func ManifestName(s results.Shard) string { return manifestFile("manifest", s) }

// manifestFile is <base>.json for an unsharded run and
// <base>-shard-I-of-N.json for a shard.
func manifestFile(base string, s results.Shard) string {
	if s.Count <= 1 {
		return base + ".json"
	}
	return fmt.Sprintf("%s-shard-%d-of-%d.json", base, s.Index, s.Count)
}

// keyDiff names the fields in which two pass keys (StreamKey)
// differ, nested fields as dotted paths ("probe.lambda_form (naive here,
// reml in the file)").
func keyDiff(a, b any) []string {
	fa, fb := map[string]string{}, map[string]string{}
	flattenJSON(fa, "", a)
	flattenJSON(fb, "", b)
	var diff []string
	show := func(m map[string]string, k string) string {
		if v, ok := m[k]; ok {
			return v
		}
		return "absent" // a field omitted when empty (compute for f32)
	}
	for k, v := range fa {
		if w, ok := fb[k]; !ok || v != w {
			diff = append(diff, fmt.Sprintf("%s (%s here, %s in the file)", k, v, show(fb, k)))
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s (%s here, %s in the file)", k, show(fa, k), fb[k]))
		}
	}
	sort.Strings(diff)
	return diff
}

// flattenJSON stores the leaves of v's JSON encoding in dst under dotted
// paths below prefix.
func flattenJSON(dst map[string]string, prefix string, v any) {
	b, _ := json.Marshal(v)
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) != nil {
		dst[prefix] = string(b)
		return
	}
	for k, raw := range obj {
		if prefix != "" {
			k = prefix + "." + k
		}
		flattenJSON(dst, k, raw)
	}
}
