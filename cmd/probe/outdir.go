package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// folderContents returns the names in dir, sorted (nil when dir does not
// exist); an error when dir is a file or cannot be read.
func folderContents(dir string) ([]string, error) {
	st, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("--out %s is a file, not a folder", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if n := e.Name(); !e.IsDir() && strings.HasPrefix(n, ".") && strings.Contains(n, ".tmp-") {
			continue // an atomic write's temporary file, left by a killed run
		}
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	return names, nil
}

// listNames shows at most 8 names, then how many more there are.
func listNames(names []string) string {
	if len(names) <= 8 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:8], ", "), len(names)-8)
}

// refuseNonEmpty is the rule of every command that writes a folder: an
// --out that holds anything is refused, naming what is there, unless
// --force. what says what the command would write there.
func refuseNonEmpty(dir, what string, force bool) error {
	names, err := folderContents(dir)
	if err != nil || len(names) == 0 || force {
		return err
	}
	return fmt.Errorf("--out %s already holds %d entries (%s); %s would be written among them: choose another --out, or pass --force to write there anyway",
		dir, len(names), listNames(names), what)
}

// refuseForeignReport is the rule of the commands that write a report
// into a folder (figures, report attention, demo): dir may be new, empty,
// or hold an earlier probe report (an HTML page whose generator is
// "probe"), which is then replaced; anything else is refused, naming what
// is there, unless --force.
func refuseForeignReport(dir string, force bool) error {
	names, err := folderContents(dir)
	if err != nil || len(names) == 0 || force {
		return err
	}
	for _, n := range names {
		if strings.HasSuffix(n, ".html") && isProbeReport(filepath.Join(dir, n)) {
			return nil
		}
	}
	return fmt.Errorf("--out %s already holds %d entries (%s) and no probe report: choose another --out, or pass --force to write the report among them",
		dir, len(names), listNames(names))
}

// isProbeReport reports whether the HTML file at path was written by probe.
func isProbeReport(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 1024)
	n, _ := io.ReadFull(f, head)
	return bytes.Contains(head[:n], []byte(`<meta name="generator" content="probe">`))
}
