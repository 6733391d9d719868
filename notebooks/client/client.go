// Package client drives the probe command-line tool from a Go notebook
// kernel that cannot import the library itself.
//
// The gophernotes kernel runs only when built with Go 1.19 and imports
// packages by compiling them as plugins with that toolchain, so it can load
// neither the library's Go 1.26 module nor any package with generics in its
// exported API. This package is the bridge: it lives in its own module with a
// go 1.19 line, uses no generics and nothing of the library, runs the probe
// binary (built separately with Go 1.26) and reads what the binary writes —
// JSON, CSV, safetensors, PNG, SVG and HTML. Its values have HTML, PNG or SVG
// methods, which gophernotes (and GoNB through gonbui) display.
//
// Import it by path from a notebook in notebooks/: import "./client"
// (gophernotes resolves relative paths against the notebook's folder).
package client

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModulePath is the import path of the library's module; the repository
// root is the folder whose go.mod declares it.
const ModulePath = "github.com/filterlens/probe"

// BinEnv names the environment variable that points at the probe binary.
const BinEnv = "PROBE_BIN"

// WorkEnv names the environment variable that overrides the notebooks'
// working directory (default <repo>/notebooks/.work).
const WorkEnv = "PROBE_NB_WORK"

// Probe runs one probe binary.
type Probe struct {
	// Bin is the path of the probe executable.
	Bin string
	// Static asks the report commands (figures, report attention) for
	// inline-SVG pages without JavaScript, so that they need no echarts
	// library. The PNG and SVG files are the same either way. New sets it.
	Static bool
}

// New returns a Probe for the binary at bin, after checking that it runs.
func New(bin string) (*Probe, error) {
	p := &Probe{Bin: bin, Static: true}
	if _, err := p.Run("hooks"); err != nil {
		return nil, fmt.Errorf("client: %s does not run as probe: %w", bin, err)
	}
	return p, nil
}

// Find locates the probe binary and returns New of it. It tries, in order:
// $PROBE_BIN; probe or bin/probe in the repository root (the nearest folder
// at or above the working directory whose go.mod declares ModulePath); probe
// on $PATH. Build it in the repository with Go 1.26:
//
//	go build -o probe ./cmd/probe
func Find() (*Probe, error) {
	if bin := os.Getenv(BinEnv); bin != "" {
		return New(bin)
	}
	var tried []string
	if root, err := RepoRoot(); err == nil {
		for _, c := range []string{filepath.Join(root, "probe"), filepath.Join(root, "bin", "probe")} {
			if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return New(c)
			}
			tried = append(tried, c)
		}
	}
	if bin, err := exec.LookPath("probe"); err == nil {
		return New(bin)
	}
	tried = append(tried, "probe on $PATH")
	return nil, fmt.Errorf("client: no probe binary (tried $%s, %s); build it in the repository with Go 1.26: "+
		"go build -o probe ./cmd/probe", BinEnv, strings.Join(tried, ", "))
}

// Run runs probe with args and returns its standard output. A failure returns
// an error that quotes the command and its standard error.
func (p *Probe) Run(args ...string) (string, error) {
	cmd := exec.Command(p.Bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("probe %s: %v: %s", strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// RepoRoot returns the nearest folder at or above the working directory whose
// go.mod declares ModulePath.
func RepoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	dir := wd
	for {
		if mod, err := modulePath(filepath.Join(dir, "go.mod")); err == nil && mod == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("client: no go.mod of %s at or above %s", ModulePath, wd)
		}
		dir = parent
	}
}

// modulePath returns the module path a go.mod file declares.
func modulePath(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", path)
}

// Workdir returns (and creates) the folder where notebook name keeps its
// files: $PROBE_NB_WORK/name when that variable is set, else
// <repo>/notebooks/.work/name.
func Workdir(name string) (string, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("client: workdir name %q: want one path element", name)
	}
	base := os.Getenv(WorkEnv)
	if base == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", err
		}
		base = filepath.Join(root, "notebooks", ".work")
	}
	dir := filepath.Join(base, name)
	return dir, os.MkdirAll(dir, 0o755)
}

// GenerateOptions describe a random checkpoint for Generate; zero fields
// take probe generate's defaults.
type GenerateOptions struct {
	// Arch is qwen3, gated (Qiu head-wise output gate), llama, qwen2 or gpt2.
	Arch                                          string
	Layers, DModel, Heads, KVHeads, Vocab, MaxPos int
	Seed                                          uint64
}

// Generate writes a Hugging Face checkpoint with seeded random weights to
// dir (probe generate) unless dir already holds one (a config.json), and
// returns its description (Inspect).
func (p *Probe) Generate(dir string, o GenerateOptions) (*ModelInfo, error) {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); errors.Is(err, os.ErrNotExist) {
		args := []string{"generate", "--out", dir}
		if o.Arch != "" {
			args = append(args, "--arch", o.Arch)
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"--layers", o.Layers}, {"--d-model", o.DModel}, {"--heads", o.Heads}, {"--kv-heads", o.KVHeads},
			{"--vocab", o.Vocab}, {"--max-pos", o.MaxPos}} {
			if f.v != 0 {
				args = append(args, f.name, fmt.Sprint(f.v))
			}
		}
		if o.Seed != 0 {
			args = append(args, "--seed", fmt.Sprint(o.Seed))
		}
		if _, err := p.Run(args...); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	return p.Inspect(dir)
}

// ModelInfo is what probe inspect --json reports about a checkpoint.
type ModelInfo struct {
	Dir          string   `json:"dir"`
	Architecture string   `json:"architecture"`
	ModelType    string   `json:"model_type"`
	Format       string   `json:"format"`
	Files        []string `json:"files"`
	Layers       int      `json:"layers"`
	DModel       int      `json:"d_model"`
	Heads        int      `json:"heads"`
	KVHeads      int      `json:"kv_heads"`
	HeadDim      int      `json:"head_dim"`
	DMLP         int      `json:"d_mlp"`
	Vocab        int      `json:"vocab"`
	MaxPos       int      `json:"max_position_embeddings"`
	DTypes       []string `json:"dtypes"`
	Parameters   int64    `json:"parameters"`
	Gate         string   `json:"gate"`
	QKNorm       bool     `json:"qk_norm"`
	QKVBias      bool     `json:"qkv_bias"`
	Tied         bool     `json:"tied_embeddings"`
	RoPE         string   `json:"rope"`
}

// Inspect describes the checkpoint in dir (probe inspect --json).
func (p *Probe) Inspect(dir string) (*ModelInfo, error) {
	out, err := p.Run("inspect", dir, "--json")
	if err != nil {
		return nil, err
	}
	var info ModelInfo
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		return nil, fmt.Errorf("probe inspect --json: %v", err)
	}
	return &info, nil
}

// HTML shows the description as a two-column table.
func (m *ModelInfo) HTML() string {
	t := &Table{Header: []string{"field", "value"}, Rows: [][]string{
		{"folder", m.Dir},
		{"architecture", fmt.Sprintf("%s (model_type %s)", m.Architecture, m.ModelType)},
		{"layers × d_model", fmt.Sprintf("%d × %d", m.Layers, m.DModel)},
		{"heads (kv heads) × d_head", fmt.Sprintf("%d (%d) × %d", m.Heads, m.KVHeads, m.HeadDim)},
		{"MLP width, vocabulary", fmt.Sprintf("%d, %d", m.DMLP, m.Vocab)},
		{"output gate", m.Gate},
		{"QK-norm, qkv bias, tied head", fmt.Sprintf("%v, %v, %v", m.QKNorm, m.QKVBias, m.Tied)},
		{"positions", m.RoPE},
		{"parameters", fmt.Sprint(m.Parameters)},
		{"format, dtypes", fmt.Sprintf("%s, %s", m.Format, strings.Join(m.DTypes, " "))},
	}}
	return t.HTML()
}

// writeIDs writes a batch of token ids as the JSON list probe expects.
func writeIDs(path string, ids [][]int) error {
	if len(ids) == 0 {
		return fmt.Errorf("client: empty batch")
	}
	for i, row := range ids {
		if len(row) != len(ids[0]) {
			return fmt.Errorf("client: sequence %d has %d tokens, sequence 0 has %d (a batch needs equal lengths)",
				i, len(row), len(ids[0]))
		}
	}
	data, err := json.Marshal(ids)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// ByteIDs returns text as one sequence of byte token ids, the tokens of a
// checkpoint whose vocabulary is the 256 byte values.
func ByteIDs(text string) [][]int {
	row := make([]int, len(text))
	for i := 0; i < len(text); i++ {
		row[i] = int(text[i])
	}
	return [][]int{row}
}

// Capture runs the model in dir on a batch of token ids and records the
// given hook points (probe capture; "*" in a name matches every layer) into
// the safetensors file out, which it then reads.
func (p *Probe) Capture(dir string, ids [][]int, hookNames []string, out string) (*Tensors, error) {
	idsPath := out + ".ids.json"
	if err := writeIDs(idsPath, ids); err != nil {
		return nil, err
	}
	args := []string{"capture", "--model", dir, "--ids", idsPath, "--out", out}
	for _, h := range hookNames {
		args = append(args, "--hook", h)
	}
	if _, err := p.Run(args...); err != nil {
		return nil, err
	}
	return ReadSafetensors(out)
}

// Diag computes the per-(sample, layer, head, query) filter diagnostics of
// the model in dir on a batch of token ids into the CSV file out (probe
// diag), which it then reads.
func (p *Probe) Diag(dir string, ids [][]int, out string) (*Table, error) {
	idsPath := out + ".ids.json"
	if err := writeIDs(idsPath, ids); err != nil {
		return nil, err
	}
	if _, err := p.Run("diag", "--model", dir, "--ids", idsPath, "--out", out); err != nil {
		return nil, err
	}
	return ReadCSV(out)
}

// Figures makes the analytic figures of one paper (rfa, selrope, rt or bft;
// probe figures) in the folder out and returns them.
func (p *Probe) Figures(paper, out string) (*Gallery, error) {
	args := []string{"figures", "--paper", paper, "--out", out}
	if p.Static {
		args = append(args, "--static")
	}
	if _, err := p.Run(args...); err != nil {
		return nil, err
	}
	return ReadGallery(out)
}

// AttentionMaps draws the attention pattern of the given heads of one layer
// from a capture file (probe report attention) into the folder out and
// returns the figures. gamma is the contrast exponent (Â^γ; RFA uses 0.25).
func (p *Probe) AttentionMaps(capture string, layer int, heads []int, gamma float64, out string) (*Gallery, error) {
	args := []string{"report", "attention", "--capture", capture, "--layer", fmt.Sprint(layer),
		"--gamma", fmt.Sprint(gamma), "--out", out}
	if len(heads) > 0 {
		hs := make([]string, len(heads))
		for i, h := range heads {
			hs[i] = fmt.Sprint(h)
		}
		args = append(args, "--heads", strings.Join(hs, ","))
	}
	if p.Static {
		args = append(args, "--static")
	}
	if _, err := p.Run(args...); err != nil {
		return nil, err
	}
	return ReadGallery(out)
}
