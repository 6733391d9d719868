package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: a written file holds the bytes with mode 0644 and nothing
// else is left in the folder; a failing write leaves the old file as it
// was and no temporary file, and its error names the path.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.csv")
	if err := WriteBytes(path, []byte("a,b\n")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error { w.Write([]byte("partial")); return boom })
	if !errors.Is(err, boom) || err.Error() != path+": boom" {
		t.Errorf("failed write: %v", err)
	}
	b, err := os.ReadFile(path)
	st, _ := os.Stat(path)
	ents, _ := os.ReadDir(dir)
	if err != nil || string(b) != "a,b\n" || st.Mode().Perm() != 0o644 || len(ents) != 1 {
		t.Errorf("after a good and a failed write: %q %v, mode %v, %d entries in the folder", b, err, st.Mode().Perm(), len(ents))
	}
}
