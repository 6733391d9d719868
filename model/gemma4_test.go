package model

import (
	"path/filepath"
	"testing"
)

// TestGemma4Loads reads the golden case's config.json and checkpoint.
func TestGemma4Loads(t *testing.T) {
	dir := filepath.Join(goldenDir, "gemma4_text")
	if _, err := LoadConfig(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, LoadOptions{}); err != nil {
		t.Fatal(err)
	}
}
