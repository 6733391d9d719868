package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLoadRefusesGzipBombs: a gzipped tokenizer.json that inflates past
// maxJSONSize is refused, by its trailer before inflating, or when the
// trailer lies after reading just past the limit (before the fix, Load
// inflated it whole: a 1 MiB file became a 1 GiB allocation).
func TestLoadRefusesGzipBombs(t *testing.T) {
	defer func(n int64) { maxJSONSize = n }(maxJSONSize)
	maxJSONSize = 4 << 20
	var zbuf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zbuf, gzip.BestCompression)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = ' ' // valid JSON whitespace
	}
	for i := 0; i < 64; i++ {
		zw.Write(chunk)
	}
	zw.Close()
	dir := t.TempDir()
	honest := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(honest, zbuf.Bytes(), 0o644)
	lying := filepath.Join(dir, "lying.json")
	b := bytes.Clone(zbuf.Bytes())
	binary.LittleEndian.PutUint32(b[len(b)-4:], 100) // claims 100 bytes
	os.WriteFile(lying, b, 0o644)
	plain := filepath.Join(dir, "plain.json")
	os.WriteFile(plain, bytes.Repeat(chunk, 5), 0o644)
	for _, c := range []struct {
		path, want string
		maxAlloc   uint64
	}{
		{honest, "the gzip trailer declares 67108864 bytes uncompressed", 1 << 20},
		{lying, "inflates to more than the 4194304 bytes", 3 * uint64(maxJSONSize)},
		{plain, "5242880 bytes, more than the 4194304", 1 << 20},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Load(c.path)
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		if err == nil || !strings.Contains(err.Error(), c.path+": "+c.want) {
			t.Errorf("Load(%s) = %v; want an error naming the file and containing %q", filepath.Base(c.path), err, c.want)
		}
		if alloc > c.maxAlloc {
			t.Errorf("Load(%s) allocated %d bytes before refusing (limit %d)", filepath.Base(c.path), alloc, c.maxAlloc)
		}
	}
}
