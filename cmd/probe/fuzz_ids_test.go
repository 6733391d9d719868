package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fuzzIDFile returns a function that writes data to one file of a
// temporary folder (one per fuzz worker process) and returns its path.
func fuzzIDFile(f *testing.F, name string) func(t *testing.T, data []byte) string {
	dir, err := os.MkdirTemp("", "probe-fuzz-ids-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, name)
	return func(t *testing.T, data []byte) string {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

// FuzzReadIDBatch feeds arbitrary files to readIDBatch, capture's and
// diag's --ids reader. It must not panic; what it accepts is a non-empty
// rectangular batch of non-empty sequences of non-negative ids, equal to
// the file's JSON (a flat list being a batch of one); what it refuses gets
// an error that names the file.
// Seeds: testdata/fuzz/FuzzReadIDBatch.
func FuzzReadIDBatch(f *testing.F) {
	f.Add([]byte(`[[1,2,3],[4,5,6]]`))
	write := fuzzIDFile(f, "batch.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		path := write(t, data)
		ids, err := readIDBatch(path)
		if err != nil {
			if ids != nil {
				t.Fatal("ids returned with an error")
			}
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(ids) == 0 {
			t.Fatal("empty batch accepted")
		}
		for b, seq := range ids {
			if len(seq) == 0 || len(seq) != len(ids[0]) {
				t.Fatalf("sequence %d has %d tokens, sequence 0 %d", b, len(seq), len(ids[0]))
			}
			if slices.ContainsFunc(seq, func(id int) bool { return id < 0 }) {
				t.Fatalf("negative id accepted in sequence %d", b)
			}
		}
		var want [][]int
		if err := json.Unmarshal(data, &want); err != nil {
			var flat []int
			if ferr := json.Unmarshal(data, &flat); ferr != nil {
				t.Fatalf("accepted a file that is neither a JSON batch (%v) nor a list of ids (%v)", err, ferr)
			}
			want = [][]int{flat}
		}
		if !slices.EqualFunc(ids, want, slices.Equal) {
			t.Fatalf("read %v, the JSON holds %v", ids, want)
		}
	})
}

// FuzzReadIDStream feeds arbitrary files to readIDStream, sweep's --ids
// reader: no panic; what it accepts is a non-empty list of non-negative
// ids equal to the file's JSON (or to the one list of a batch of one);
// errors name the file. Seeds:
// testdata/fuzz/FuzzReadIDStream.
func FuzzReadIDStream(f *testing.F) {
	f.Add([]byte(`[1,2,3]`))
	write := fuzzIDFile(f, "stream.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		path := write(t, data)
		ids, err := readIDStream(path)
		if err != nil {
			if ids != nil {
				t.Fatal("ids returned with an error")
			}
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if len(ids) == 0 || slices.ContainsFunc(ids, func(id int) bool { return id < 0 }) {
			t.Fatalf("accepted %v", ids)
		}
		var want []int
		if err := json.Unmarshal(data, &want); err != nil {
			var batch [][]int
			if berr := json.Unmarshal(data, &batch); berr != nil || len(batch) != 1 {
				t.Fatalf("accepted %q, neither a list of ids (%v) nor a batch of one (%v)", data, err, berr)
			}
			want = batch[0]
		}
		if !slices.Equal(ids, want) {
			t.Fatalf("read %v, the JSON holds %v", ids, want)
		}
	})
}
