package checkpoint

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// maxIndexSize bounds a *.index.json file.
const maxIndexSize = 100 << 20

// openSharded opens the checkpoint described by a Hugging Face index file
// (model.safetensors.index.json or pytorch_model.bin.index.json), whose
// weight_map maps tensor names to shard files in dir. Every shard must hold
// shardFormat; every tensor of weight_map must be in its shard, and no tensor
// may be in two shards.
func openSharded(dir, indexPath, shardFormat string) (c *Checkpoint, err error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: %s", indexPath, fmt.Sprintf(format, args...))
	}
	weightMap, err := readIndex(indexPath)
	if err != nil {
		return nil, err
	}
	// Group the tensors by shard, refusing shard names that leave dir.
	byShard := make(map[string][]string)
	for name, shard := range weightMap {
		if shard == "" || shard == "." || shard == ".." || strings.ContainsAny(shard, `/\`) || filepath.IsAbs(shard) {
			return nil, fail("weight_map: tensor %q: shard %q is not a plain file name in the checkpoint directory", name, shard)
		}
		byShard[shard] = append(byShard[shard], name)
	}
	shards := make([]string, 0, len(byShard))
	for s := range byShard {
		shards = append(shards, s)
	}
	sort.Strings(shards)

	format := FormatSafetensorsSharded
	if shardFormat == FormatPyTorch {
		format = FormatPyTorchSharded
	}
	c = &Checkpoint{format: format, files: []string{indexPath}, tensors: make(map[string]*tensor)}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	owner := make(map[string]string) // tensor name → shard that holds it
	for _, shard := range shards {
		p := filepath.Join(dir, shard)
		if _, err := os.Stat(p); err != nil {
			names := byShard[shard]
			sort.Strings(names)
			return c, fail("missing shard %s (weight_map puts %d tensors there, e.g. %q): %v", shard, len(names), names[0], err)
		}
		sc, err := OpenFile(p)
		if err != nil {
			return c, err
		}
		c.closers = append(c.closers, sc.closers...)
		c.files = append(c.files, p)
		if sc.format != shardFormat {
			return c, fail("shard %s is a %s file, expected %s", shard, sc.format, shardFormat)
		}
		for _, name := range sc.names {
			if prev, dup := owner[name]; dup {
				return c, fail("tensor %q appears in two shards: %s and %s", name, prev, shard)
			}
			owner[name] = shard
			c.tensors[name] = sc.tensors[name]
		}
		for k, v := range sc.metadata {
			if c.metadata == nil {
				c.metadata = make(map[string]string)
			}
			if _, ok := c.metadata[k]; !ok {
				c.metadata[k] = v
			}
		}
		for k, v := range sc.extra {
			if c.extra == nil {
				c.extra = make(map[string]any)
			}
			if _, ok := c.extra[k]; !ok {
				c.extra[k] = v
			}
		}
	}
	missing := []string{}
	for name, shard := range weightMap {
		if owner[name] != shard {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		name := missing[0]
		where := "no shard"
		if s, ok := owner[name]; ok {
			where = "shard " + s
		}
		return c, fail("tensor %q: weight_map puts it in shard %s but it is not there (found in %s; %d such tensors)",
			name, weightMap[name], where, len(missing))
	}
	c.finish()
	return c, nil
}

// readIndex reads the weight_map of an index file.
func readIndex(path string) (map[string]string, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: %s", path, fmt.Sprintf(format, args...))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %v", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxIndexSize+1))
	if err != nil {
		return nil, fail("%v", err)
	}
	if len(data) > maxIndexSize {
		return nil, fail("index file is larger than %d bytes", maxIndexSize)
	}
	keys, vals, err := readJSONObject(data)
	if err != nil {
		return nil, fail("%v", err)
	}
	var raw json.RawMessage
	for i, k := range keys {
		if k == "weight_map" {
			raw = vals[i]
		}
	}
	if raw == nil {
		return nil, fail(`no "weight_map"`)
	}
	names, shards, err := readJSONObject(raw)
	if err != nil {
		return nil, fail("weight_map: %v", err)
	}
	if len(names) == 0 {
		return nil, fail("weight_map is empty")
	}
	wm := make(map[string]string, len(names))
	for i, name := range names {
		var s string
		if err := json.Unmarshal(shards[i], &s); err != nil {
			return nil, fail("weight_map: tensor %q: shard is %s, not a string", name, shards[i])
		}
		wm[name] = s
	}
	return wm, nil
}
