// Package workloads holds the example workloads, the YAML files of this
// directory, for the playground's demo: each is also applied as is with
// `kubectl apply -f`.
package workloads

import (
	"embed"
	"io/fs"
	"sort"
)

//go:embed *.yaml
var files embed.FS

// Files returns each example workload's file name and content, sorted by
// name.
func Files() (names []string, contents map[string][]byte, err error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, nil, err
	}
	contents = map[string][]byte{}
	for _, e := range entries {
		data, err := files.ReadFile(e.Name())
		if err != nil {
			return nil, nil, err
		}
		names = append(names, e.Name())
		contents[e.Name()] = data
	}
	sort.Strings(names)
	return names, contents, nil
}
