package analysis

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/afatab"
)

// TestAFAToyErrors: a missing folder, a trajectory and a Fig. 2 target
// outside the held-out data are refused naming them (report/papers's
// TestAFAToyFigures draws the evaluated checkpoints).
func TestAFAToyErrors(t *testing.T) {
	if _, err := AFAToy(filepath.Join(t.TempDir(), "none"), afatab.Options{}); err == nil || !strings.Contains(err.Error(), "fig1a") {
		t.Errorf("missing folder: error %v", err)
	}
	dir := filepath.Join("..", "zoo", "checkpoints", "afa_toy")
	if _, err := os.Stat(filepath.Join(dir, "zoo.json")); err != nil {
		t.Skipf("AFA toy checkpoints not found at %s (zoo/train/afa_toy.py --all makes them)", dir)
	}
	if _, err := AFAToy(dir, afatab.Options{Trajectory: 1000}); err == nil || !strings.Contains(err.Error(), "trajectory 1000") {
		t.Errorf("trajectory out of range: error %v", err)
	}
	if _, err := AFAToy(dir, afatab.Options{Targets: []int{5000}}); err == nil || !strings.Contains(err.Error(), "target 5000") {
		t.Errorf("target out of range: error %v", err)
	}
}
