package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// residentGroup is one line of probe bench --resident: a tensor, or the
// tensors of one layer's experts stored one by one
// (mlp.experts.{e}.gate_proj.weight: the expert index replaced by *).
type residentGroup struct {
	Group       string  `json:"group"`
	MappedMiB   float64 `json:"mapped_mib"`   // the tensors' bytes in the mapped files
	ResidentMiB float64 `json:"resident_mib"` // of those, the bytes on pages present in this process
	// Items counts the group's tensors, or for fused expert tensors
	// (mlp.experts.gate_up_proj [E, 2F, D], …) their E expert slices, and
	// Touched those with at least one present page.
	Items   int `json:"items"`
	Touched int `json:"touched"`
}

// expertIndex matches the expert index of a per-expert tensor name.
var expertIndex = regexp.MustCompile(`\.experts\.\d+\.`)

// residentTensors measures which weights of the safetensors files under
// dir this process holds in memory. A mapped file page counts in the
// resident set only while this process's page table maps it: a page no
// pass read was never faulted in, and one released (checkpoint.Releaser,
// MADV_DONTNEED) or reclaimed by the kernel is no longer mapped. For every
// mapping of such a file (/proc/self/maps) and every tensor in it (the
// file's safetensors header), it counts the tensor's bytes on pages whose
// /proc/self/pagemap entry has bit 63 (present) set: a page shared by two
// tensors counts for both, at most one page per tensor end. Linux only: it
// fails where /proc/self/pagemap cannot be read.
func residentTensors(dir string) ([]residentGroup, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	mm, err := safetensorsMappings(abs)
	if err != nil {
		return nil, err
	}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, fmt.Errorf("--resident: %w", err)
	}
	defer pm.Close()
	pages := pagemap{pm, uint64(os.Getpagesize())}
	groups := map[string]*residentGroup{}
	for _, m := range mm {
		hdr, data, err := safetensorsHeader(m.path)
		if err != nil {
			return nil, err
		}
		for name, t := range hdr {
			if name == "__metadata__" {
				continue
			}
			var ti struct {
				Shape   []int    `json:"shape"`
				Offsets []uint64 `json:"data_offsets"`
			}
			if err := json.Unmarshal(t, &ti); err != nil || len(ti.Offsets) != 2 {
				return nil, fmt.Errorf("%s: tensor %s: cannot read its header entry", m.path, name)
			}
			g := expertIndex.ReplaceAllString(name, ".experts.*.")
			if groups[g] == nil {
				groups[g] = &residentGroup{Group: g}
			}
			items := 1
			if strings.Contains(name, ".experts.") && !strings.Contains(g, ".experts.*.") && len(ti.Shape) == 3 {
				items = ti.Shape[0] // fused experts [E, …]: one item an expert
			}
			if err := groups[g].add(pages, m, data+ti.Offsets[0], data+ti.Offsets[1], items); err != nil {
				return nil, err
			}
		}
	}
	out := make([]residentGroup, 0, len(groups))
	for _, g := range groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b residentGroup) int { return strings.Compare(a.Group, b.Group) })
	return out, nil
}

// add counts in g the tensor at file offsets [start, end) of mapping m, cut
// into items equal slices (the experts of a fused tensor), as far as m
// maps it.
func (g *residentGroup) add(pages pagemap, m fileMapping, start, end uint64, items int) error {
	// the part of the tensor inside this mapping, as file offsets
	lo, hi := max(start, m.off), min(end, m.off+m.hi-m.lo)
	step := (end - start) / uint64(items)
	for i := range items {
		a, b := max(lo, start+uint64(i)*step), min(hi, start+uint64(i+1)*step)
		if b <= a {
			continue
		}
		n, err := pages.present(m.lo+a-m.off, m.lo+b-m.off)
		if err != nil {
			return err
		}
		g.Items++
		g.MappedMiB += float64(b-a) / (1 << 20)
		g.ResidentMiB += float64(n) / (1 << 20)
		if n > 0 {
			g.Touched++
		}
	}
	return nil
}

// fileMapping is one line of /proc/self/maps: addresses [lo, hi) map the
// file path from offset off.
type fileMapping struct {
	lo, hi, off uint64
	path        string
}

// safetensorsMappings lists this process's mappings of the safetensors
// files under the folder abs.
func safetensorsMappings(abs string) ([]fileMapping, error) {
	maps, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("--resident: %w", err)
	}
	defer maps.Close()
	var mm []fileMapping
	sc := bufio.NewScanner(maps)
	for sc.Scan() {
		// lo-hi perms offset dev inode path
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[5], ".safetensors") || !strings.HasPrefix(f[5], abs+"/") {
			continue
		}
		lohi := strings.SplitN(f[0], "-", 2)
		lo, err1 := strconv.ParseUint(lohi[0], 16, 64)
		hi, err2 := strconv.ParseUint(lohi[1], 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("/proc/self/maps: cannot read line %q", sc.Text())
		}
		mm = append(mm, fileMapping{lo, hi, off, f[5]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(mm) == 0 {
		return nil, fmt.Errorf("--resident: no safetensors file under %s is memory-mapped by this process", abs)
	}
	return mm, nil
}

// pagemap reads /proc/self/pagemap, one 64-bit entry a page of ps bytes.
type pagemap struct {
	f  *os.File
	ps uint64
}

// present returns how many bytes of the addresses [lo, hi) lie on present
// pages (bit 63 of their entries).
func (pm pagemap) present(lo, hi uint64) (uint64, error) {
	first, last := lo/pm.ps, (hi-1)/pm.ps
	buf := make([]byte, 8*(last-first+1))
	if _, err := pm.f.ReadAt(buf, int64(first*8)); err != nil {
		return 0, fmt.Errorf("/proc/self/pagemap: %w", err)
	}
	var n uint64
	for p := first; p <= last; p++ {
		if binary.LittleEndian.Uint64(buf[8*(p-first):])>>63 == 1 {
			n += min(hi, (p+1)*pm.ps) - max(lo, p*pm.ps)
		}
	}
	return n, nil
}

// safetensorsHeader reads the JSON header of a safetensors file and the
// file offset at which its data begins.
func safetensorsHeader(path string) (map[string]json.RawMessage, uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		return nil, 0, fmt.Errorf("%s: cannot read the header length: %w", path, err)
	}
	if n > 100<<20 {
		return nil, 0, fmt.Errorf("%s: header length %d is over 100 MiB", path, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, 0, fmt.Errorf("%s: header: %w", path, err)
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, 0, fmt.Errorf("%s: header: %w", path, err)
	}
	return h, 8 + n, nil
}
