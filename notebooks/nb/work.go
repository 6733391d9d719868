package nb

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/filterlens/probe/model"

	"github.com/filterlens/probe/internal/atomicfile"
)

// ModulePath is the import path of the library's module; RepoRoot looks for
// the go.mod that declares it.
const ModulePath = "github.com/filterlens/probe"

// WorkEnv names the environment variable that overrides the notebooks'
// working directory (default <repo>/notebooks/.work, git-ignored).
const WorkEnv = "PROBE_NB_WORK"

// RepoRoot returns the root of the repository the notebooks run from: the
// nearest directory at or above $GONB_DIR (the directory GoNB was started in,
// the notebook's own under Jupyter) or, without it, the working directory,
// whose go.mod declares ModulePath.
func RepoRoot() (string, error) {
	start := os.Getenv("GONB_DIR")
	if start == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", err
		}
		start = wd
	}
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", err
	}
	for {
		if mod, err := modulePath(filepath.Join(dir, "go.mod")); err == nil && mod == ModulePath {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("nb: no go.mod of %s at or above %s", ModulePath, start)
		}
		dir = parent
	}
}

// modulePath returns the module path declared by the go.mod file at path.
func modulePath(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			return strings.Trim(strings.TrimSpace(rest), `"`), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no module line", path)
}

// Workdir returns (and creates) the directory where notebook name keeps its
// files: $PROBE_NB_WORK/name when that variable is set, else
// <repo>/notebooks/.work/name.
func Workdir(name string) (string, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return "", fmt.Errorf("nb: workdir name %q: want one path element", name)
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
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// Golden returns the directory of a reference checkpoint in the shared
// golden data beside the repository (<repo>/../shared/golden/<name>) and
// whether it exists. Notebooks use golden checkpoints only when present and
// say so otherwise: a clone of the repository alone does not have them.
func Golden(name string) (string, bool) {
	root, err := RepoRoot()
	if err != nil {
		return "", false
	}
	dir := filepath.Join(filepath.Dir(root), "shared", "golden", name)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return dir, false
	}
	return dir, true
}

// generatedName is the file beside a generated checkpoint that records the
// configuration and seed it was generated from.
const generatedName = "generated.json"

// Checkpoint returns dir after making sure it holds a checkpoint of cfg with
// seeded random weights (model.Generate and model.WriteHF). A checkpoint this function
// generated earlier from the same configuration and seed is reused; any
// other content of dir is an error rather than silently reused.
func Checkpoint(dir string, cfg model.Config, seed uint64) (string, error) {
	want, err := json.Marshal(struct {
		Config model.Config
		Seed   uint64
	}{cfg, seed})
	if err != nil {
		return "", err
	}
	have, err := os.ReadFile(filepath.Join(dir, generatedName))
	switch {
	case err == nil && string(have) == string(want):
		return dir, nil
	case err == nil:
		return "", fmt.Errorf("nb: %s was generated from another configuration or seed; remove it to regenerate", dir)
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return "", fmt.Errorf("nb: %s holds a checkpoint this notebook did not generate; use another folder", dir)
	}
	_, tensors, err := model.Generate(cfg, seed)
	if err != nil {
		return "", err
	}
	if err := model.WriteHF(dir, cfg, tensors); err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, generatedName), want, 0o644)
}

// Cached fills v from the JSON file at path when it exists; otherwise it
// calls compute, which must fill v, and writes v to path. It is how a cell
// hands a result to later cells, which are separate programs.
func Cached(path string, v any, compute func() error) error {
	data, err := os.ReadFile(path)
	if err == nil {
		if err := json.Unmarshal(data, v); err != nil {
			return fmt.Errorf("nb: cache %s: %w (remove it to recompute)", path, err)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := compute(); err != nil {
		return err
	}
	data, err = json.Marshal(v)
	if err != nil {
		return fmt.Errorf("nb: cache %s: %w", path, err)
	}
	return atomicfile.WriteBytes(path, data)
}
